/* prima bench kernels — kernel throughput next to the machine's own bounds, in one run.
 *
 * Decode multiplies a matrix by one vector and is bound by how fast the weights stream from
 * memory, so matvec is reported as GB/s of weights read and as a fraction of the measured read
 * bandwidth. Prefill multiplies by many tokens and should be bound by arithmetic, so matmul is
 * reported as GFLOP/s and as a fraction of the measured FMA peak. */
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/run_opts.h"
#include "kernels/cpu.h"
#include "kernels/kern.h"
#include "kernels/probe.h"

/* Llama-3-8B's projections (n_in x n_out): attention, FFN up/gate, FFN down. */
static const int matvec_shapes[][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}};
/* Small batches (speculative drafts to verify, several server slots): the FFN up shape, its
 * weights from DRAM as in decode, timed against one token of the same run. */
#define BATCH_SHAPE 1
static const int batch_tokens[] = {2, 4, 8};
static const int prefill_shape[2] = {4096, 4096};
static const int prefill_tokens[] = {64, 512};

/* Matvec cycles through copies of its matrix totalling at least this much, 16x the 32 MB L3 of
 * this class of machine, so every call reads its weights from DRAM. */
#define COLD_BYTES (512ull << 20)
#define BANDWIDTH_BYTES (512ull << 20)

static const char usage_text[] =
    "usage: prima bench kernels [--json] [-t N] [--type LIST] [--reps N] [--path P] [--gpu]\n"
    "\n"
    "Measure, in one run: the memory read bandwidth (streaming read of a 512 MiB buffer) and\n"
    "the peak FMA throughput, on 1 and on N threads; then for each weight type the kernels\n"
    "compute with:\n"
    "  matvec  one token times a Llama-3-8B-shaped matrix (n_in x n_out: 4096x4096,\n"
    "          4096x14336, 14336x4096) whose weights are not in cache, as GB/s of weights\n"
    "          streamed and the fraction of the N-thread read bandwidth;\n"
    "  batch   2, 4 and 8 tokens times the 4096x14336 matrix, its weights not in cache\n"
    "          (verifying speculative drafts, several server slots decoding), as the\n"
    "          time over that of one token (its matvec in the same run);\n"
    "  matvec_kept, batch_kept\n"
    "          the same from the matrix kept packed (--repack), where the path has a\n"
    "          kept form of the type: GB/s of the kept bytes, and the time over that of\n"
    "          one token from the kept matrix;\n"
    "  matmul  64 and 512 tokens times a 4096x4096 matrix (prefill), as GFLOP/s and the\n"
    "          fraction of the N-thread FMA peak.\n"
    "Each figure is the median of several repetitions; spread is the interquartile range\n"
    "relative to the median (a busy machine shows a large spread). The active SIMD path is\n"
    "printed first.\n"
    "\n";

struct opts {
    bool json, gpu;
    int threads, reps, path; /* path: an enum kern_path, or -1 for the fastest */
    bool only[DT_COUNT], filtered;
};

/* Anonymous memory in huge pages where the kernel allows, so the kernels are measured rather
 * than the TLB (bench pages measures the difference). */
static void *alloc_weights(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

static void report(const struct opts *o, bench_result r)
{
    r.threads = r.threads ? r.threads : o->threads;
    bench_print(&r, o->json);
}

/* The scratch of every product measured here, so that no timed call can fail for it. */
static int reserve(kern_ctx *c)
{
    for (size_t s = 0; s < sizeof matvec_shapes / sizeof matvec_shapes[0]; s++)
        if (kern_ctx_reserve(c, matvec_shapes[s][0], batch_tokens[sizeof batch_tokens / sizeof batch_tokens[0] - 1]))
            return -1;
    for (size_t k = 0; k < sizeof prefill_tokens / sizeof prefill_tokens[0]; k++)
        if (kern_ctx_reserve(c, prefill_shape[0], prefill_tokens[k]))
            return -1;
    return 0;
}

/* The copies of a matrix in their kept form (kern_keep) instead, in the same kind of memory:
 * *w and *mat now theirs. 0, or -1 when out of memory (*w unchanged). */
static int keep_copies(kern_ctx *c, enum dtype t, int n_in, int n_out, size_t copies, uint8_t **w,
                       size_t *mat)
{
    size_t kb = kern_keep_bytes(t, n_in, n_out);
    uint8_t *k = alloc_weights(kb * copies);
    if (!k)
        return -1;
    for (size_t i = 0; i < copies; i++)
        kern_keep(c, *w + i * *mat, t, n_in, n_out, k + i * kb);
    munmap(*w, *mat * copies);
    *w = k;
    *mat = kb;
    return 0;
}

/* n_tokens (1: matvec) times an n_in x n_out matrix whose weights come from DRAM, as they are
 * or kept (kern_keep); *secs: the median time. A batch is reported relative to one_token, the
 * matvec's median. */
static int bench_stream(const struct opts *o, kern_ctx *c, enum dtype t, bool kept, int n_in,
                        int n_out, int n_tokens, double bandwidth, double one_token,
                        double *secs_out)
{
    size_t mat = dtype_row_bytes(t, (uint64_t)n_in) * (size_t)n_out;
    size_t copies = (COLD_BYTES + mat - 1) / mat;
    copies = copies < 2 ? 2 : copies;
    uint8_t *w = alloc_weights(mat * copies);
    float *x = malloc(sizeof(float) * (size_t)n_in * (size_t)n_tokens);
    float *y = malloc(sizeof(float) * (size_t)n_out * (size_t)n_tokens);
    int reps = o->reps > (int)copies ? o->reps : (int)copies;
    double *secs = malloc(sizeof(double) * (size_t)reps);
    if (w)
        bench_fill_weights(t, w, n_in, n_out);
    for (size_t k = 1; w && k < copies; k++)
        memcpy(w + k * mat, w, mat);
    if (!w || !x || !y || !secs || (kept && keep_copies(c, t, n_in, n_out, copies, &w, &mat))) {
        if (w)
            munmap(w, mat * copies);
        free(x), free(y), free(secs);
        return cli_fail("bench kernels: cannot allocate %zu MiB for %s %s", (mat * copies) >> 20,
                        dtype_get((uint32_t)t)->name, n_tokens == 1 ? "matvec" : "batch");
    }
    for (long i = 0; i < (long)n_in * n_tokens; i++)
        x[i] = bench_rand();
    int (*product)(kern_ctx *, const void *, enum dtype, int, int, const float *, int, float *) =
        kept ? kern_matmul_kept : kern_matmul;
    for (size_t k = 0; k < copies; k++) /* every copy once: page faults out of the way */
        product(c, w + k * mat, t, n_in, n_out, x, n_tokens, y);
    for (int r = 0; r < reps; r++) {
        double t0 = probe_now();
        product(c, w + (size_t)r % copies * mat, t, n_in, n_out, x, n_tokens, y);
        secs[r] = probe_now() - t0;
    }
    double spread, s = bench_median_spread(secs, reps, &spread);
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%d", n_in, n_out);
    const char *type = dtype_get((uint32_t)t)->name;
    report(o, n_tokens == 1
                  ? (bench_result){.type = type, .op = kept ? "matvec_kept" : "matvec", .shape = shape,
                                   .value = (double)mat / s / 1e9, .unit = "GB/s",
                                   .fraction = (double)mat / s / bandwidth, .spread = spread}
                  : (bench_result){.type = type, .op = kept ? "batch_kept" : "batch", .shape = shape,
                                   .tokens = n_tokens,
                                   .value = s / one_token, .unit = "x1 tok", .fraction = -1,
                                   .spread = spread});
    *secs_out = s;
    munmap(w, mat * copies);
    free(x), free(y), free(secs);
    return 0;
}

static int bench_prefill(const struct opts *o, kern_ctx *c, enum dtype t,
                         int n_tokens, double peak)
{
    int n_in = prefill_shape[0], n_out = prefill_shape[1];
    size_t mat = dtype_row_bytes(t, (uint64_t)n_in) * (size_t)n_out;
    uint8_t *w = alloc_weights(mat);
    float *x = malloc(sizeof(float) * (size_t)n_in * (size_t)n_tokens);
    float *y = malloc(sizeof(float) * (size_t)n_out * (size_t)n_tokens);
    int reps = n_tokens > 64 ? (o->reps + 4) / 5 : (o->reps + 1) / 2;
    double *secs = malloc(sizeof(double) * (size_t)(reps > 0 ? reps : 1));
    if (!w || !x || !y || !secs) {
        free(x), free(y), free(secs);
        return cli_fail("bench kernels: cannot allocate memory for %s matmul", dtype_get((uint32_t)t)->name);
    }
    bench_fill_weights(t, w, n_in, n_out);
    for (long i = 0; i < (long)n_in * n_tokens; i++)
        x[i] = bench_rand();
    double t0 = probe_now();
    kern_matmul(c, w, t, n_in, n_out, x, n_tokens, y); /* warm up */
    if (probe_now() - t0 > 2.0) /* a slow path: a few seconds are enough to say so */
        reps = 1;
    for (int r = 0; r < reps; r++) {
        t0 = probe_now();
        kern_matmul(c, w, t, n_in, n_out, x, n_tokens, y);
        secs[r] = probe_now() - t0;
    }
    double spread, s = bench_median_spread(secs, reps, &spread);
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%d", n_in, n_out);
    double flops = 2.0 * n_in * n_out * n_tokens / s;
    report(o, (bench_result){.type = dtype_get((uint32_t)t)->name, .op = "matmul", .shape = shape,
                             .tokens = n_tokens, .value = flops / 1e9, .unit = "GFLOP/s",
                             .fraction = flops / peak, .spread = spread});
    munmap(w, mat);
    free(x), free(y), free(secs);
    return 0;
}

static int parse_types(void *dst, const char *flag, const char *list)
{
    (void)flag;
    struct opts *o = dst;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int t = dtype_from_name(tok);
        if (t < 0 || !kern_type_get((enum dtype)t) || kern_type_get((enum dtype)t)->act_only)
            return cli_fail("bench kernels: --type: '%s' is not a weight type the kernels compute with", tok);
        o->only[t] = o->filtered = true;
    }
    return o->filtered ? 0 : cli_fail("bench kernels: --type needs a list of types");
}

static int parse_path(void *dst, const char *flag, const char *v)
{
    struct opts *o = dst;
    o->path = -1;
    for (int p = KERN_SCALAR; p <= KERN_NEON; p++)
        if (!strcmp(v, kern_path_name((enum kern_path)p)))
            o->path = p;
    if (o->path < 0)
        return cli_fail("bench kernels: %s needs one of scalar, avx2, avx512, neon", flag), -1;
    return 0;
}

#define F(field) offsetof(struct opts, field)
static const cli_opt kernels_rows[] = {
    {"-t --threads", "N", CLI_INT, F(threads), 1, KERN_MAX_THREADS,
     .help = "threads (default: the number of online CPUs)"},
    {"--type", "LIST", CLI_FN, .fn = parse_types,
     .help = "only these weight types, comma-separated (e.g. q4_k,q8_0)"},
    {"--reps", "N", CLI_INT, F(reps), 1, 1000,
     .help = "repetitions per measurement (default 15; prefill uses fewer)"},
    {"--path", "P", CLI_FN, .fn = parse_path,
     .help = "the kernels of SIMD path P (scalar, avx2, avx512, neon)\n"
             "instead of the fastest this CPU runs, to compare paths on\none machine"},
    {"--gpu", NULL, CLI_FLAG, F(gpu),
     .help = "the GPU instead (Vulkan, the default device): its copy\n"
             "bandwidth, host <-> device transfers and submit latency, then\n"
             "the matrix shaders on the same shapes for every type they\n"
             "handle (matvec as GB/s and the fraction of the copy bandwidth;\n"
             "a software driver is labelled: its figures are the CPU's; a\n"
             "prefill predicted to take over 10 s is skipped, said)"},
    {"--json", NULL, CLI_FLAG, F(json),
     .help = "one JSON object per measurement and line: type, op, shape\n"
             "(n_in x n_out), tokens, threads, value, unit, fraction (of the\n"
             "bound), spread; the first line is {\"op\":\"path\", \"path\":NAME,\n"
             "\"cpu\":FEATURES}"},
    {0},
};
#undef F
static const cli_group kernels_group = {NULL, kernels_rows, NULL};

static int parse(struct opts *o, int argc, char **argv)
{
    o->threads = default_threads();
    o->reps = 15;
    o->path = -1;
    const cli_set set = {.g = &kernels_group, .dst = o};
    int rc = cli_opts_parse("bench kernels", &set, 1, argc, argv, usage_text, NULL, NULL);
    if (rc)
        return rc;
    if (o->path >= 0 && kern_use_path((enum kern_path)o->path) != 0)
        return cli_fail("bench kernels: --path %s: this CPU or build cannot run it",
                        kern_path_name((enum kern_path)o->path)), 1;
    return 0;
}

static int run(int argc, char **argv)
{
    struct opts o = {0};
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (o.gpu) {
        const bench_gpu_args ga = {
            .json = o.json, .reps = o.reps, .only = o.only, .filtered = o.filtered,
            .shapes = matvec_shapes, .n_shapes = sizeof matvec_shapes / sizeof matvec_shapes[0],
            .prefill = prefill_shape, .tokens = prefill_tokens,
            .n_tokens = sizeof prefill_tokens / sizeof prefill_tokens[0]};
        return bench_kernels_gpu(&ga);
    }
    kern_ctx *c1 = kern_ctx_create(1), *cn = kern_ctx_create(o.threads);
    if (!c1 || !cn) {
        kern_ctx_free(c1);
        return cli_fail("bench kernels: cannot start %d threads", o.threads);
    }
    if (reserve(c1) || reserve(cn)) {
        kern_ctx_free(c1);
        kern_ctx_free(cn);
        return cli_fail("bench kernels: out of memory for the kernels' scratch");
    }
    const char *path = kern_path_name(kern_active_path());
    char cpu[256];
    cpu_features_str(cpu_features_get(), cpu, sizeof cpu);
    if (o.json)
        bench_print_path_json(path, cpu);
    else
        printf("SIMD path: %s (CPU: %s), %d threads\n", path, cpu, o.threads);

    double bw[2], peak[2];
    kern_ctx *ctxs[2] = {c1, cn};
    for (int k = 0; k < 2; k++) {
        bw[k] = probe_read_bandwidth(ctxs[k], BANDWIDTH_BYTES, o.reps);
        if (bw[k] <= 0) {
            kern_ctx_free(c1), kern_ctx_free(cn);
            return cli_fail("bench kernels: cannot allocate the bandwidth buffer");
        }
        report(&o, (bench_result){.op = "read_bandwidth", .threads = kern_ctx_threads(ctxs[k]),
                                  .value = bw[k] / 1e9, .unit = "GB/s", .fraction = -1, .spread = -1});
    }
    for (int k = 0; k < 2; k++) {
        peak[k] = probe_fma_peak(ctxs[k], 5);
        report(&o, (bench_result){.op = "fma_peak", .threads = kern_ctx_threads(ctxs[k]),
                                  .value = peak[k] / 1e9, .unit = "GFLOP/s", .fraction = -1, .spread = -1});
    }

    for (int t = 0; t < DT_COUNT && !rc; t++) {
        if (!kern_type_get((enum dtype)t) || kern_type_get((enum dtype)t)->act_only)
            continue;
        if (o.filtered && !o.only[t])
            continue;
        double one = 0, secs;
        for (size_t s = 0; s < sizeof matvec_shapes / sizeof matvec_shapes[0] && !rc; s++) {
            rc = bench_stream(&o, cn, (enum dtype)t, false, matvec_shapes[s][0], matvec_shapes[s][1], 1, bw[1], 0, &secs);
            one = s == BATCH_SHAPE ? secs : one;
        }
        const int *bs = matvec_shapes[BATCH_SHAPE];
        for (size_t n = 0; n < sizeof batch_tokens / sizeof batch_tokens[0] && !rc; n++)
            rc = bench_stream(&o, cn, (enum dtype)t, false, bs[0], bs[1], batch_tokens[n], bw[1], one, &secs);
        const bool kept = kern_keep_bytes((enum dtype)t, bs[0], bs[1]) != 0;
        if (!rc && kept)
            rc = bench_stream(&o, cn, (enum dtype)t, true, bs[0], bs[1], 1, bw[1], 0, &one);
        for (size_t n = 0; !rc && kept && n < sizeof batch_tokens / sizeof batch_tokens[0]; n++)
            rc = bench_stream(&o, cn, (enum dtype)t, true, bs[0], bs[1], batch_tokens[n], bw[1], one, &secs);
        for (size_t n = 0; n < sizeof prefill_tokens / sizeof prefill_tokens[0] && !rc; n++)
            rc = bench_prefill(&o, cn, (enum dtype)t, prefill_tokens[n], peak[1]);
    }
    kern_ctx_free(c1);
    kern_ctx_free(cn);
    return rc;
}

const struct bench_sub bench_kernels = {"kernels", "matvec, small batches and matmul per weight type vs memory bandwidth and FMA peak", run};
