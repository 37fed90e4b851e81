/* probe.c — memory bandwidth and FMA peak of this machine (probe.h). */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kernels/kern_impl.h"
#include "kernels/probe.h"
#include "kernels/probe_impl.h"

double probe_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double probe_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double probe_median_spread(double *v, int n, double *spread)
{
    double med = probe_median(v, n);
    *spread = med > 0 ? (v[(3 * n) / 4] - v[n / 4]) / med : 0;
    return med;
}

static uint64_t read_scalar(const void *p, size_t n)
{
    const uint64_t *v = p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i < n / 8; i += 4) {
        a0 ^= v[i];
        a1 ^= v[i + 1];
        a2 ^= v[i + 2];
        a3 ^= v[i + 3];
    }
    return a0 ^ a1 ^ a2 ^ a3;
}

struct read_job {
    const uint8_t *buf;
    size_t bytes;
    uint64_t (*read)(const void *p, size_t n);
    _Atomic uint64_t sink;
};

static void read_worker(void *arg, int ith, int nth)
{
    struct read_job *J = arg;
    /* Slices in whole 4 KB pages, so each thread streams its own pages. */
    size_t pages = J->bytes / 4096, p0 = pages * (size_t)ith / (size_t)nth,
           p1 = pages * (size_t)(ith + 1) / (size_t)nth;
    atomic_fetch_xor(&J->sink, J->read(J->buf + p0 * 4096, (p1 - p0) * 4096));
}

struct probe_buf {
    struct read_job job;
};

probe_buf *probe_buf_create(kern_ctx *c, size_t bytes)
{
    bytes = bytes / (2u << 20) * (2u << 20);
    probe_buf *b = calloc(1, sizeof *b);
    /* Anonymous memory in huge pages where the kernel allows: the probe measures DRAM, not the
     * TLB. */
    void *buf = b ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                  : MAP_FAILED;
    if (buf == MAP_FAILED) {
        free(b);
        return NULL;
    }
    madvise(buf, bytes, MADV_HUGEPAGE);
    /* Nonzero contents: pages of zeros could all map the shared zero page. */
    for (size_t i = 0; i < bytes; i += 64)
        memset((uint8_t *)buf + i, (int)(i >> 12) | 1, 64);
    b->job.buf = buf;
    b->job.bytes = bytes;
    b->job.read = read_scalar;
#if KERN_X86
    if (kern_avx2_active())
        b->job.read = probe_read_avx2;
#endif
    probe_buf_pass(c, b); /* warm up: wake the threads, fill the TLBs */
    return b;
}

double probe_buf_pass(kern_ctx *c, probe_buf *b)
{
    kern_parallel(c, read_worker, &b->job);
    return (double)b->job.bytes;
}

void probe_buf_free(probe_buf *b)
{
    if (!b)
        return;
    munmap((void *)b->job.buf, b->job.bytes);
    free(b);
}

double probe_read_bandwidth(kern_ctx *c, size_t bytes, int reps)
{
    probe_buf *b = probe_buf_create(c, bytes);
    double *bw = malloc(sizeof(double) * (size_t)reps);
    if (!b || !bw) {
        probe_buf_free(b);
        free(bw);
        return -1;
    }
    for (int r = 0; r < reps; r++) {
        double t0 = probe_now();
        double n = probe_buf_pass(c, b);
        bw[r] = n / (probe_now() - t0);
    }
    double m = probe_median(bw, reps);
    free(bw);
    probe_buf_free(b);
    return m;
}

static double fma_scalar(long iters, float *sink)
{
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < 8; k++)
            x[k] = x[k] * 0.999999f + 1e-7f;
    *sink = x[0] + x[1] + x[2] + x[3] + x[4] + x[5] + x[6] + x[7];
    return (double)iters * 8 * 2;
}

struct fma_job {
    long iters;
    double (*run)(long iters, float *sink);
    double flops[KERN_MAX_THREADS];
    float sink[KERN_MAX_THREADS];
};

static void fma_worker(void *arg, int ith, int nth)
{
    struct fma_job *J = arg;
    J->flops[ith] = J->run(J->iters, &J->sink[ith]);
}

double probe_fma_peak(kern_ctx *c, int reps)
{
    struct fma_job *J = calloc(1, sizeof *J);
    if (!J)
        return -1;
    J->run = fma_scalar;
#if KERN_X86
    if (kern_avx2_active())
        J->run = probe_fma_avx2;
#endif
    /* Size one run to about 50 ms so timer and wake-up costs vanish. */
    J->iters = 1000;
    for (;;) {
        double t0 = probe_now();
        kern_parallel(c, fma_worker, J);
        double dt = probe_now() - t0;
        if (dt > 0.01)
            break;
        J->iters *= 4;
    }
    J->iters *= 5;
    double *v = malloc(sizeof(double) * (size_t)reps);
    int nth = kern_ctx_threads(c);
    for (int r = 0; r < reps; r++) {
        double t0 = probe_now();
        kern_parallel(c, fma_worker, J);
        double dt = probe_now() - t0, flops = 0;
        for (int i = 0; i < nth; i++)
            flops += J->flops[i];
        v[r] = flops / dt;
    }
    double m = probe_median(v, reps);
    free(v);
    free(J);
    return m;
}
