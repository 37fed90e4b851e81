/* gpu_probe.c — what a GPU can do, measured through gpu.h (any backend): device memory
 * bandwidth (a device-side copy), host <-> device transfers, submit latency, and the matrix
 * shaders' time per product. Medians of a few runs; the buffers are freed before returning. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "kernels/probe.h"

#define RUNS 5

int gpu_probe_memory(gpu_dev *g, size_t bytes, gpu_probe *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    char *host = malloc(bytes);
    gpu_buf *a = gpu_buf_create(g, bytes, err, errlen);
    gpu_buf *b = a ? gpu_buf_create(g, bytes, err, errlen) : NULL;
    int rc = -1;
    if (host && a && b) {
        memset(host, 1, bytes);
        double up[RUNS], down[RUNS], copy[RUNS];
        rc = 0;
        for (int r = 0; r < RUNS && !rc; r++) {
            double t0 = probe_now();
            rc |= gpu_buf_write(g, a, 0, host, bytes);
            double t1 = probe_now();
            rc |= gpu_buf_read(g, a, 0, host, bytes);
            double t2 = probe_now();
            double tc = gpu_copy(g, b, a, bytes, 2);
            rc |= tc <= 0;
            up[r] = (double)bytes / (t1 - t0);
            down[r] = (double)bytes / (t2 - t1);
            copy[r] = 2.0 * 2.0 * (double)bytes / tc; /* two copies, each reads and writes */
        }
        if (!rc) {
            p->upload = probe_median(up, RUNS);
            p->download = probe_median(down, RUNS);
            p->copy_bw = probe_median(copy, RUNS);
            p->submit = gpu_submit_latency(g);
            rc = p->submit > 0 ? 0 : -1;
        }
        if (rc)
            snprintf(err, errlen, "GPU memory measurement failed");
    } else if (!host) {
        snprintf(err, errlen, "out of memory");
    }
    gpu_buf_free(g, a);
    gpu_buf_free(g, b);
    free(host);
    return rc;
}

double gpu_probe_matmul(gpu_dev *g, enum dtype t, int n_in, int n_out, int n_tok, int reps,
                        char *err, size_t errlen)
{
    const kern_type *kt = kern_type_get(t);
    const size_t row = dtype_row_bytes(t, (uint64_t)n_in);
    if (!kt || !gpu_supports(t) || !row) {
        snprintf(err, errlen, "GPU: no shader for %s x %d", dtype_get(t)->name, n_in);
        return -1;
    }
    /* one quantized row of uniform values, repeated: valid blocks, no reference quantizer run
     * over the whole matrix */
    uint8_t *w = malloc(row * (size_t)n_out);
    float *x = malloc(sizeof(float) * (size_t)n_in * (size_t)n_tok);
    if (!w || !x) {
        free(w);
        free(x);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n_in * n_tok; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
    }
    kt->from_float(x, w, n_in);
    for (int o = 1; o < n_out; o++)
        memcpy(w + (size_t)o * row, w, row);
    gpu_buf *bw = gpu_buf_create(g, row * (size_t)n_out, err, errlen);
    gpu_buf *bx = bw ? gpu_buf_create(g, sizeof(float) * (size_t)n_in * (size_t)n_tok, err, errlen)
                     : NULL;
    gpu_buf *by = bx ? gpu_buf_create(g, sizeof(float) * (size_t)n_out * (size_t)n_tok, err,
                                      errlen)
                     : NULL;
    double result = -1;
    if (by && !gpu_buf_write(g, bw, 0, w, row * (size_t)n_out) &&
        !gpu_buf_write(g, bx, 0, x, sizeof(float) * (size_t)n_in * (size_t)n_tok)) {
        /* warm-up (pipeline creation), then batches long enough to hide the submit */
        double sec = gpu_matmul(g, bw, t, n_in, n_out, bx, n_tok, by, 1, err, errlen);
        int batch = sec > 0 && sec < 0.02 ? (int)(0.02 / sec) + 1 : 1;
        double v[RUNS];
        int runs = reps < RUNS ? (reps > 0 ? reps : 1) : RUNS;
        if (sec > 0.5) /* a slow device: one more product is enough to say how slow */
            runs = 1;
        for (int r = 0; r < runs && sec > 0; r++) {
            sec = gpu_matmul(g, bw, t, n_in, n_out, bx, n_tok, by, batch, err, errlen);
            v[r] = sec / batch;
        }
        if (sec > 0)
            result = probe_median(v, runs);
    }
    gpu_buf_free(g, bw);
    gpu_buf_free(g, bx);
    gpu_buf_free(g, by);
    free(w);
    free(x);
    return result;
}
