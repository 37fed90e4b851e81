/* GPU matrix shaders against the scalar CPU reference: for every weight type with shaders,
 * random weights quantized by the reference quantizer, rows and inner sizes that are not
 * multiples of a workgroup (and, for float types, not of a 32-chunk), 1 token (the decode
 * pipeline) and 3 and 17 tokens (the prefill one, with a partial token tile). The reference is
 * the type's to_float dequantization dotted in double; the shaders multiply F32 activations by
 * the same dequantized weights, so only float summation order separates them.
 * Skips (77) when this build or machine has no usable GPU; with one it must pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "support/rng.h"
#include "test.h"

static gpu_dev *g;

static void check_type(enum dtype t, int n_in, int n_out, int n_tok)
{
    char err[256];
    const kern_type *kt = kern_type_get(t);
    REQUIRE(kt, "no kernel type");
    test_rng r = {(uint64_t)t * 7919 + (uint64_t)n_in * 31 + (uint64_t)n_tok};
    const size_t row = dtype_row_bytes(t, (uint64_t)n_in);
    float *wf = malloc(sizeof(float) * (size_t)n_in * (size_t)n_out);
    float *deq = malloc(sizeof(float) * (size_t)n_in);
    float *x = malloc(sizeof(float) * (size_t)n_in * (size_t)n_tok);
    float *y = malloc(sizeof(float) * (size_t)n_out * (size_t)n_tok);
    uint8_t *w = malloc(row * (size_t)n_out);
    REQUIRE(wf && deq && x && y && w, "out of memory");
    for (size_t i = 0; i < (size_t)n_in * (size_t)n_out; i++)
        wf[i] = rng_gauss(&r);
    for (size_t i = 0; i < (size_t)n_in * (size_t)n_tok; i++)
        x[i] = rng_gauss(&r);
    for (int o = 0; o < n_out; o++)
        kt->from_float(wf + (size_t)o * (size_t)n_in, w + (size_t)o * row, n_in);

    gpu_buf *bw = gpu_buf_create(g, row * (size_t)n_out, err, sizeof err);
    gpu_buf *bx = gpu_buf_create(g, sizeof(float) * (size_t)n_in * (size_t)n_tok, err, sizeof err);
    gpu_buf *by = gpu_buf_create(g, sizeof(float) * (size_t)n_out * (size_t)n_tok, err, sizeof err);
    REQUIRE(bw && bx && by, "%s", err);
    REQUIRE(!gpu_buf_write(g, bw, 0, w, row * (size_t)n_out), "upload");
    REQUIRE(!gpu_buf_write(g, bx, 0, x, sizeof(float) * (size_t)n_in * (size_t)n_tok), "upload");
    REQUIRE(gpu_matmul(g, bw, t, n_in, n_out, bx, n_tok, by, 1, err, sizeof err) >= 0, "%s", err);
    REQUIRE(!gpu_buf_read(g, by, 0, y, sizeof(float) * (size_t)n_out * (size_t)n_tok), "read");

    double worst = 0;
    int bad = 0;
    for (int o = 0; o < n_out; o++) {
        kt->to_float(w + (size_t)o * row, deq, n_in);
        for (int tk = 0; tk < n_tok; tk++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < n_in; i++) {
                ref += (double)deq[i] * x[(size_t)tk * (size_t)n_in + (size_t)i];
                mag += fabs((double)deq[i] * x[(size_t)tk * (size_t)n_in + (size_t)i]);
            }
            double got = y[(size_t)tk * (size_t)n_out + (size_t)o];
            double e = fabs(got - ref) / (mag + 1e-30);
            if (e > worst)
                worst = e;
            bad += !(e <= 1e-5);
        }
    }
    CHECK(bad == 0, "%s %d x %d, %d tokens: %d outputs off (worst relative error %.3g)",
          dtype_get(t)->name, n_out, n_in, n_tok, bad, worst);
    gpu_buf_free(g, bw);
    gpu_buf_free(g, bx);
    gpu_buf_free(g, by);
    free(wf);
    free(deq);
    free(x);
    free(y);
    free(w);
}

int main(void)
{
    char why[256];
    kern_init();
    g = gpu_open(-1, why, sizeof why);
    if (!g)
        SKIP_NO_GPU("no GPU: %s", why);
    const gpu_info *gi = gpu_get_info(g);
    fprintf(stderr, "GPU %d: %s (%s%s), %.0f MiB\n", gi->index, gi->name,
            gi->discrete ? "discrete" : gi->unified ? "unified memory" : "other",
            gi->software ? ", software" : "", (double)gi->vram_total / 1048576.0);
    CHECK(gi->vram_total > 0 && gi->vram_free <= gi->vram_total, "VRAM %llu free of %llu",
          (unsigned long long)gi->vram_free, (unsigned long long)gi->vram_total);

    const enum dtype types[] = {DT_F32, DT_F16, DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    const int toks[] = {1, 3, 17};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        CHECK(gpu_supports(types[i]), "%s unsupported", dtype_get(types[i])->name);
        const int bs = (int)dtype_get(types[i])->block_size;
        /* float types: 3 chunks + 5 (a partial chunk); blocks: an odd count over 64 threads */
        const int n_in = bs == 1 ? 3 * 32 + 5 : bs == 32 ? 67 * 32 : 3 * 256;
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++)
            check_type(types[i], n_in, 37, toks[k]);
    }
    CHECK(!gpu_supports(DT_Q2_K) && !gpu_supports(DT_BF16), "types without shaders");
    char err[256];
    CHECK(gpu_matmul(g, NULL, DT_Q2_K, 256, 1, NULL, 1, NULL, 1, err, sizeof err) < 0 &&
              strstr(err, "unsupported"), "Q2_K matmul refused: %s", err);
    double lat = gpu_submit_latency(g);
    CHECK(lat > 0 && lat < 1.0, "submit latency %g s", lat);
    gpu_close(g);

    /* an index past the last device: one clear line */
    CHECK(!gpu_open(99, why, sizeof why) && strstr(why, "99"), "gpu 99: %s", why);
    return test_done();
}
