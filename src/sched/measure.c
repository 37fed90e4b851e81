/* measure.c — profiling this device (measure.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __linux__
#include <linux/magic.h>
#include <sys/vfs.h>
#endif
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster/pager.h"
#include "gguf/gguf.h"
#include "kernels/kern.h"
#include "kernels/probe.h"
#include "sched/cost.h"
#include "sched/measure.h"
#include "util/sysmem.h"

#define MIB (1024.0 * 1024.0)

/* Bandwidth buffer: larger than any last-level cache the target devices have. */
#define BW_BYTES (128u << 20)
/* Kernel rates: the matrix-vector product streams a matrix larger than any last-level cache of
 * the target devices, as decoding does with real layers; the batch product (prefill) runs on a
 * cache-sized slice of it, where arithmetic is the bound. */
#define RATE_MATRIX_BYTES (128u << 20)
#define RATE_BATCH_BYTES (2u << 20)
#define RATE_N_IN 4096
#define RATE_TOKENS 32
/* Repetitions: each at least BATCH_SECONDS long; the median of REPS (the disk: all of them
 * together). */
#define BATCH_SECONDS 0.02
#define REPS 7
/* Time over which a figure's runs are spread: all kernel rates together (shared by the weight
 * types measured), the bandwidth, the vector work, the pool's wake-up. */
#define RATES_SECONDS 3.0
#define BW_SECONDS 0.6
#define VECTOR_SECONDS 0.3
#define DISPATCH_SECONDS 0.15
/* Integer dot-product paths do up to four multiply-adds where float FMA does one. */
#define INT_DOT_FACTOR 4
/* Noise between the one-off FMA peak and a kernel rate: on crowded cores and under sanitizers
 * they were seen up to 1.6x past the bare bound. The check is for broken timers and kernels,
 * which are off by orders of magnitude, so it allows PEAK_MARGIN on top. */
#define PEAK_MARGIN 8
/* Disk: streaming faults through regions of up to 64 MiB (or, where the file cannot be evicted,
 * sequential reads of 1 MiB in up to 32 MiB regions); random reads of 16 KiB (the page size
 * macOS faults in); samples of at least SAMPLE_SECONDS, at most DISK_SECONDS per test. */
#define STREAM_REGION (64u << 20)
#define SEQ_CHUNK (1u << 20)
#define SEQ_REGION (32u << 20)
#define RAND_BLOCK (16u << 10)
#define SAMPLE_SECONDS 0.05
#define DISK_SECONDS 1.0
#define DIRECT_ALIGN 4096

/* CPUs the CFS quotas of the cpu cgroup and its visible ancestors allow (0 = no quota), the
 * period of the tightest one (seconds) and the path of its cpu.stat. */
static double cpu_quota(double *period, char *stat, size_t statlen)
{
    char dir[1024];
    int version = sysmem_cgroup_dir("", "cpu", dir, sizeof dir);
    double q = 0;
    while (version) {
        char path[1200], path2[1200];
        snprintf(path, sizeof path, "%s/%s", dir, version == 2 ? "cpu.max" : "cpu.cfs_quota_us");
        snprintf(path2, sizeof path2, "%s/cpu.cfs_period_us", dir);
        char *a = sysmem_read_text(path), *b = version == 1 ? sysmem_read_text(path2) : NULL;
        double per = 0;
        double here = a && (version == 2 || b) ? profile_parse_cpu_quota(a, b, &per) : 0;
        bool found = a != NULL;
        free(a);
        free(b);
        if (!found)
            break;   /* above the cgroup mount */
        if (here > 0 && (q == 0 || here < q)) {
            q = here;
            *period = per;
            snprintf(stat, statlen, "%s/cpu.stat", dir);
        }
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            break;
        *slash = '\0';
    }
    return q;
}

int profile_memory(dev_profile *p, char *err, size_t errlen)
{
    sysmem m;
    char why[256];
    if (sysmem_read("", &m, why, sizeof why)) {
        snprintf(err, errlen, "profile: %s", why);
        return -1;
    }
    p->mem_total = m.total;
    p->mem_available = m.available;
    p->mem_reclaimable = m.reclaimable;
    p->swap_total = m.swap_total;
    p->swap_free = m.swap_free;
    p->cgroup_limit = m.cgroup_limit;
    p->cgroup_usage = m.cgroup_usage;
    p->cgroup_reclaimable = m.cgroup_reclaimable;
    return 0;
}

static enum os_class detect_os(void)
{
#if defined(__APPLE__)
    return OS_MACOS;
#else
    return sysmem_android("") ? OS_ANDROID : OS_LINUX;
#endif
}

static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Median of v[0..n) (sorts v); *spread keeps the largest relative spread of a profile's figures,
 * which becomes its noise. */
static double median_spread(double *v, int n, double *spread)
{
    double s, med = probe_median_spread(v, n, &s);
    if (s > *spread)
        *spread = s;
    return med;
}

/* The fastest of repeated runs (the FMA peak, a bound); the spread goes into the noise. */
static double best_rate(double *v, int n, double *spread)
{
    median_spread(v, n, spread);
    return v[n - 1];
}

/* A disk's rate: the bytes of all its samples over their whole time, not the fastest sample.
 * A throttled disk (a cgroup's blkio limit, as the emulator's devices have, or a drive's own
 * burst buffer) lets a 50 ms sample through at up to twice its sustained rate, and streaming
 * layers is sustained reading: on the emulator a device limited to 500 MB/s showed 1.17 GB/s as
 * its fastest sample, and Halda put all the streaming there. The spread (interquartile range /
 * median of the samples) goes into the profile's noise. */
static double sustained_rate(double *v, int n, double bytes, double seconds, double *spread)
{
    median_spread(v, n, spread);
    return bytes / seconds;
}

double profile_typical_rate(double *v, const bool *throttled, int n, double quota_share,
                            double *spread)
{
    double free_runs[PROFILE_MAX_RUNS];
    int k = 0;
    for (int i = 0; i < n && k < PROFILE_MAX_RUNS; i++)
        if (!throttled || !throttled[i])
            free_runs[k++] = v[i];
    double med = median_spread(v, n, spread);
    if (quota_share >= 1)
        return med;
    if (k == 0)   /* every run throttled: the fastest is the nearest to an unthrottled one */
        return v[n - 1] * quota_share;
    double ignored = 0;
    return median_spread(free_runs, k, &ignored) * quota_share;
}

/* The CPU quota the runs of a figure take place under: the share of the threads' time it grants
 * (1: none) and the cpu.stat of the cgroup that sets it ("" when none). */
typedef struct quota_ctx {
    double share;
    char stat[1200];
} quota_ctx;

/* Nanoseconds the quota has throttled this process's cgroup so far (0 without a quota): a run
 * during which it grew was stretched by the throttle. */
static uint64_t throttled_ns(const quota_ctx *q)
{
    if (q->share >= 1 || !q->stat[0])
        return 0;
    char *t = sysmem_read_text(q->stat);
    uint64_t ns = t ? profile_parse_cpu_throttled_ns(t) : 0;
    free(t);
    return ns;
}

/* One figure's measured work: `calls` repetitions of it, returning the work done in the figure's
 * unit (weights, bytes, values, calls). */
typedef double (*work_fn)(void *ctx, int calls);

/* The typical rate (profile_typical_rate) of up to REPS runs (at least 3) of about
 * BATCH_SECONDS each (a first call, not counted, sizes them), spread evenly over `budget`
 * seconds. Back to back, the runs of one figure took a tenth of a second, so a neighbour busy
 * for that long set the whole figure; spread out, the median outlasts it (2-thread profiles of
 * the 8B-like on the shared 2-core VM, six in a row, twice: the Q4_K and Q6_K rates varied
 * 0.06-0.13 from one profile to the next against 0.17-0.23 back to back; the bandwidth, still
 * back to back, 41-73 GB/s in three profiles of the 14B-like, whose decoding read 44). */
static double typical_rate(work_fn work, void *ctx, double budget, const quota_ctx *q,
                           double *spread)
{
    double t0 = probe_now();
    work(ctx, 1);
    double t_call = fmax(probe_now() - t0, 1e-7);
    int calls = t_call >= BATCH_SECONDS ? 1 : (int)ceil(BATCH_SECONDS / t_call);
    int reps = (int)(budget / (calls * t_call));
    reps = reps < 3 ? 3 : reps > REPS ? REPS : reps;
    double rates[REPS];
    bool hit[REPS];
    double start = probe_now();
    for (int r = 0; r < reps; r++) {
        for (double wait; (wait = start + budget * r / reps - probe_now()) > 0;)
            nanosleep(&(struct timespec){0, (long)(fmin(wait, 0.1) * 1e9)}, NULL);
        uint64_t th = throttled_ns(q);
        t0 = probe_now();
        double done = work(ctx, calls);
        rates[r] = done / (probe_now() - t0);
        hit[r] = throttled_ns(q) != th;
    }
    return profile_typical_rate(rates, hit, reps, q->share, spread);
}

/* ---- kernel rates ---- */

typedef struct rate_job {
    kern_ctx *c;
    const void *w;
    enum dtype t;
    int n_in, n_out, n_tokens;
    const float *x;
    float *y;
} rate_job;

static double matmul_work(void *ctx, int calls)
{
    const rate_job *j = ctx;
    for (int i = 0; i < calls; i++)
        kern_matmul(j->c, j->w, j->t, j->n_in, j->n_out, j->x, j->n_tokens, j->y);
    return (double)j->n_in * j->n_out * j->n_tokens * calls;
}

/* Weight-token products per second of kern_matmul with n_tokens tokens. */
static double time_matmul(rate_job *j, int n_out, int n_tokens, double budget,
                          const quota_ctx *q, double *spread)
{
    j->n_out = n_out;
    j->n_tokens = n_tokens;
    return typical_rate(matmul_work, j, budget, q, spread);
}

typedef struct dispatch_job {
    kern_ctx *c;
    const float *w, *x;
    float *y;
    int n_in, n_out;
} dispatch_job;

static double dispatch_work(void *ctx, int calls)
{
    const dispatch_job *j = ctx;
    for (int i = 0; i < calls; i++)
        kern_matmul(j->c, j->w, DT_F32, j->n_in, j->n_out, j->x, 1, j->y);
    return calls;
}

/* Seconds one parallel kernel call costs beyond its arithmetic: waking the pool and waiting for
 * the last thread, timed on a product too small to take any time itself. */
static double measure_dispatch(kern_ctx *c, const quota_ctx *q, double *spread)
{
    enum { N_IN = 256 };
    int n_out = 2 * kern_ctx_threads(c);
    float *w = calloc((size_t)N_IN * (size_t)n_out, sizeof *w);
    float x[N_IN] = {0};
    float *y = malloc(sizeof(float) * (size_t)n_out);
    double calls_per_s = -1;
    if (w && y) {
        dispatch_job j = {c, w, x, y, N_IN, n_out};
        calls_per_s = typical_rate(dispatch_work, &j, DISPATCH_SECONDS, q, spread);
    }
    free(w);
    free(y);
    return 1 / calls_per_s;
}

typedef struct bandwidth_job {
    kern_ctx *c;
    probe_buf *b;
} bandwidth_job;

static double bandwidth_work(void *ctx, int calls)
{
    const bandwidth_job *j = ctx;
    double bytes = 0;
    for (int i = 0; i < calls; i++)
        bytes += probe_buf_pass(j->c, j->b);
    return bytes;
}

/* Bytes per second the threads read from memory (-1: no buffer). */
static double measure_bandwidth(kern_ctx *c, const quota_ctx *q, double *spread)
{
    bandwidth_job j = {c, probe_buf_create(c, BW_BYTES)};
    if (!j.b)
        return -1;
    double bw = typical_rate(bandwidth_work, &j, BW_SECONDS, q, spread);
    probe_buf_free(j.b);
    return bw;
}

static uint64_t lcg_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 16;
}

/* A Llama-3-8B-shaped layer's work besides its matrices, at a short context. */
enum { V_EMBD = 4096, V_FF = 14336, V_HEADS = 32, V_KV_HEADS = 8, V_HEAD_DIM = 128, V_POS = 64 };
enum { V_Q_DIM = V_HEADS * V_HEAD_DIM, V_KV_DIM = V_KV_HEADS * V_HEAD_DIM };

typedef struct vector_job {
    kern_ctx *c;
    float *hidden, *x, *norm, *res, *gate, *up, *gate0, *q, *att, *k, *v;
    uint16_t *kc, *vc;
} vector_job;

static double vector_work(void *ctx, int calls)
{
    const vector_job *j = ctx;
    const rope_params rp = {.n_rot = V_HEAD_DIM, .freq_base = 500000, .freq_scale = 1};
    const int32_t pos = V_POS;
    for (int i = 0; i < calls; i++) {
        kern_rmsnorm(j->x, j->hidden, j->norm, V_EMBD, 1e-5f);
        kern_rope(j->q, V_HEADS, V_HEAD_DIM, V_POS, &rp);
        kern_rope(j->k, V_KV_HEADS, V_HEAD_DIM, V_POS, &rp);
        for (int e = 0; e < V_KV_DIM; e++) {
            j->kc[V_POS * V_KV_DIM + e] = fp32_to_fp16(j->k[e]);
            j->vc[V_POS * V_KV_DIM + e] = fp32_to_fp16(j->v[e]);
        }
        const kern_kv kv = {j->kc, j->vc, DT_F16, DT_F16};
        kern_attention(j->c, j->att, j->q, 1, &pos, NULL, V_POS + 1, 0, NULL, &kv, V_HEADS, V_KV_HEADS,
                       V_HEAD_DIM, (float)(1 / sqrt(V_HEAD_DIM)));
        kern_add(j->hidden, j->res, V_EMBD);
        kern_rmsnorm(j->x, j->hidden, j->norm, V_EMBD, 1e-5f);
        /* SiLU works in place: start from the same gate every time, as the gate product
         * rewrites it in decoding (its copy is a few percent of the run) */
        memcpy(j->gate, j->gate0, sizeof(float) * V_FF);
        kern_silu_mul(j->gate, j->up, V_FF);
        kern_add(j->hidden, j->res, V_EMBD);
    }
    return layer_vector_values(V_EMBD, V_FF, V_Q_DIM, V_KV_DIM) * calls;
}

/* Values per second of a decoded layer's work besides its matrix products: the ops engine.c
 * runs, in its order, on a Llama-3-8B-shaped layer at a short context (the attention's reads of
 * a long one are counted apart). The caller's thread runs all but the attention, as in
 * decoding. */
static double measure_vector(kern_ctx *c, const quota_ctx *quota, double *spread)
{
    float *buf = malloc(sizeof(float) * (4 * V_EMBD + 3 * V_FF + 2 * V_Q_DIM + 2 * V_KV_DIM));
    uint16_t *cache = calloc(2 * (V_POS + 1) * (size_t)V_KV_DIM, sizeof *cache);
    double rate = -1;
    if (buf && cache) {
        vector_job j = {.c = c, .hidden = buf, .kc = cache, .vc = cache + (V_POS + 1) * V_KV_DIM};
        j.x = j.hidden + V_EMBD;
        j.norm = j.x + V_EMBD;
        j.res = j.norm + V_EMBD;
        j.gate = j.res + V_EMBD;
        j.up = j.gate + V_FF;
        j.gate0 = j.up + V_FF;
        j.q = j.gate0 + V_FF;
        j.att = j.q + V_Q_DIM;
        j.k = j.att + V_Q_DIM;
        j.v = j.k + V_KV_DIM;
        uint64_t s = 0x853c49e6748fea9bULL;
        for (float *f = buf; f < j.v + V_KV_DIM; f++)
            *f = (float)((double)(lcg_next(&s) & 0xffff) / 32768.0 - 1.0);
        for (int i = 0; i < V_EMBD; i++)
            j.norm[i] = 1;
        rate = typical_rate(vector_work, &j, VECTOR_SECONDS, quota, spread);
    }
    free(buf);
    free(cache);
    return rate;
}

/* Two flops per weight: a rate above INT_DOT_FACTOR times what the FMA peak allows means a
 * broken timer or kernel (both are scaled alike under a quota). The peak was measured once, and
 * on shared cores a neighbour may have taken them just then (seen: 1/15 of the quiet figure),
 * so a rate over the cap re-measures the peak, keeping the highest, before it is refused. */
static bool within_peak(kern_ctx *c, double rate, double *fma_peak)
{
    for (int retry = 0; retry < 3 && rate > PEAK_MARGIN * INT_DOT_FACTOR * *fma_peak / 2; retry++)
        *fma_peak = fmax(*fma_peak, probe_fma_peak(c, 3));
    return rate <= PEAK_MARGIN * INT_DOT_FACTOR * *fma_peak / 2;
}

static int measure_type(kern_ctx *c, enum dtype t, double *fma_peak, double budget,
                        const quota_ctx *q, type_rate *out, double *spread, char *err,
                        size_t errlen)
{
    const kern_type *kt = kern_type_get(t);
    const char *name = dtype_get((uint32_t)t)->name;
    if (!kt) {
        snprintf(err, errlen, "profile: the kernels cannot compute %s weights", name);
        return -1;
    }
    size_t row = dtype_row_bytes(t, RATE_N_IN);
    int threads = kern_ctx_threads(c);
    int n_out = (int)(RATE_MATRIX_BYTES / row);
    int mm_rows = (int)(RATE_BATCH_BYTES / row) > 4 * threads ? (int)(RATE_BATCH_BYTES / row) : 4 * threads;
    uint8_t *w = malloc(row * (size_t)n_out);
    float *f = malloc(sizeof(float) * RATE_N_IN);
    float *x = malloc(sizeof(float) * RATE_N_IN * RATE_TOKENS);
    size_t ys = (size_t)n_out > (size_t)mm_rows * RATE_TOKENS ? (size_t)n_out : (size_t)mm_rows * RATE_TOKENS;
    float *y = malloc(sizeof(float) * ys);
    int rc = -1;
    if (!w || !f || !x || !y) {
        snprintf(err, errlen, "profile: out of memory measuring %s", name);
        goto done;
    }
    /* quantized random rows (one row repeated: the values do not change the work) */
    uint64_t s = 0x9e3779b97f4a7c15ULL + (uint64_t)t;
    for (int i = 0; i < RATE_N_IN; i++)
        f[i] = (float)((double)(lcg_next(&s) & 0xffff) / 32768.0 - 1.0);
    kt->from_float(f, w, RATE_N_IN);
    for (int r = 1; r < n_out; r++)
        memcpy(w + (size_t)r * row, w, row);
    for (int i = 0; i < RATE_N_IN * RATE_TOKENS; i++)
        x[i] = (float)((double)(lcg_next(&s) & 0xffff) / 32768.0 - 1.0);
    rate_job j = {.c = c, .w = w, .t = t, .n_in = RATE_N_IN, .x = x, .y = y};
    out->matvec = time_matmul(&j, n_out, 1, budget / 2, q, spread);
    out->matmul = time_matmul(&j, mm_rows, RATE_TOKENS, budget / 2, q, spread);
    if (!(out->matvec > 0 && out->matmul > 0) || !within_peak(c, out->matvec, fma_peak) ||
        !within_peak(c, out->matmul, fma_peak)) {
        snprintf(err, errlen, "profile: %s rates %.3g / %.3g weights/s fail the sanity check "
                 "against the FMA peak (%.3g flop/s)", name, out->matvec, out->matmul, *fma_peak);
        goto done;
    }
    rc = 0;
done:
    free(w);
    free(f);
    free(x);
    free(y);
    return rc;
}

/* The weight types of a model's matrices. */
static int model_types(const char *path, bool *present, char *err, size_t errlen)
{
    gguf_file *g = gguf_open(path, err, errlen);
    if (!g)
        return -1;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].n_dims >= 2)
            present[g->tensors[i].type] = true;
    gguf_close(g);
    return 0;
}

/* ---- disk ---- */

typedef struct disk_test {
    int fd;
    bool direct;        /* O_DIRECT; otherwise evict with posix_fadvise before reading */
    uint64_t size;      /* file size rounded down to the alignment */
    uint8_t *buf;
    const uint8_t *map; /* the file mapped read-only (NULL: not mapped) */
    uint64_t page;
    double untimed;     /* seconds of this sample spent evicting, not reading */
    const char *path;
} disk_test;

static int read_at(disk_test *d, uint64_t off, size_t len, char *err, size_t errlen)
{
    if (!d->direct)
        posix_fadvise(d->fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(d->fd, d->buf + done, len - done, (off_t)(off + done));
        if (n <= 0) {
            snprintf(err, errlen, "profile: reading %s at %llu: %s", d->path,
                     (unsigned long long)(off + done), n < 0 ? strerror(errno) : "unexpected end");
            return -1;
        }
        done += (size_t)n;
    }
    return 0;
}

/* One step of a disk test's reading: the bytes read, or -1 (err set). */
typedef double (*read_step)(disk_test *d, void *state, char *err, size_t errlen);

/* Samples of step() for at least SAMPLE_SECONDS each, at least 3 and then until DISK_SECONDS
 * (at most REPS): the sustained rate of them all (sustained_rate). */
static int time_reads(disk_test *d, read_step step, void *state, double *bps, double *spread,
                      char *err, size_t errlen)
{
    double rates[REPS], all_bytes = 0, all_seconds = 0;
    int n = 0;
    double t_end = probe_now() + DISK_SECONDS;
    while (n < REPS && (n < 3 || probe_now() < t_end)) {
        double t0 = probe_now(), bytes = 0;
        d->untimed = 0;
        do {
            double got = step(d, state, err, errlen);
            if (got < 0)
                return -1;
            bytes += got;
        } while (probe_now() - t0 - d->untimed < SAMPLE_SECONDS);
        double dt = probe_now() - t0 - d->untimed;
        rates[n++] = bytes / dt;
        all_bytes += bytes;
        all_seconds += dt;
    }
    *bps = sustained_rate(rates, n, all_bytes, all_seconds, spread);
    return 0;
}

/* Front to back through up to three regions centred at a quarter, half and three quarters of
 * the file (a small file: all of it), one region a step: away from the metadata at its start,
 * which a process that loaded the model keeps mapped. */
typedef struct seq_reads {
    uint64_t region;
    int n_regions, pass;
} seq_reads;

static seq_reads seq_regions(const disk_test *d, uint64_t largest)
{
    seq_reads q = {.region = d->size / 3 / DIRECT_ALIGN * DIRECT_ALIGN, .n_regions = 3};
    if (q.region > largest)
        q.region = largest;
    if (q.region < SEQ_CHUNK) {
        q.region = d->size;
        q.n_regions = 1;
    }
    return q;
}

static uint64_t next_region(const disk_test *d, seq_reads *q)
{
    uint64_t centre = (uint64_t)(q->pass++ % q->n_regions + 1) * (d->size / (uint64_t)(q->n_regions + 1));
    return (centre - q->region / 2) / DIRECT_ALIGN * DIRECT_ALIGN;
}

/* Sequential: 1 MiB requests, one at a time. */
static double seq_step(disk_test *d, void *state, char *err, size_t errlen)
{
    seq_reads *q = state;
    uint64_t base = next_region(d, q);
    for (uint64_t off = 0; off < q->region; off += SEQ_CHUNK) {
        size_t len = q->region - off < SEQ_CHUNK ? (size_t)(q->region - off) : SEQ_CHUNK;
        if (read_at(d, base + off, len, err, errlen))
            return -1;
    }
    return (double)q->region;
}

static int disk_sequential(disk_test *d, double *bps, double *spread, char *err, size_t errlen)
{
    seq_reads q = seq_regions(d, SEQ_REGION);
    return time_reads(d, seq_step, &q, bps, spread, err, errlen);
}

static void evict(const disk_test *d, uint64_t off, uint64_t len)
{
    madvise((void *)(d->map + off), len, MADV_DONTNEED);
    posix_fadvise(d->fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
}

/* Streaming, as a device reads the layers it cannot keep (cluster/device.h): a region is evicted
 * from the page cache, then faulted in through the mapping front to back, one byte a page, so
 * the kernel reads it with the readahead it gives streamed layers (8 MiB on this VM's disk,
 * several requests in flight). There that read 1.7-2.3 GB/s where the 1 MiB requests one at a
 * time read 0.9-1.1, and the 70B-like's predicted disk stall was 40 % too long. Fails when the
 * region stays in memory (another process maps it, or the file system keeps it). */
static double stream_step(disk_test *d, void *state, char *err, size_t errlen)
{
    seq_reads *q = state;
    uint64_t base = next_region(d, q), res, tot;
    byte_range r = {base, base + q->region};
    double t0 = probe_now();
    evict(d, base, q->region);
    pager_resident_pages(d->map, d->size, &r, 1, &res, &tot);
    d->untimed += probe_now() - t0;
    if (res * 8 > tot) {
        snprintf(err, errlen, "profile: %s stays in memory after eviction", d->path);
        return -1;
    }
    const volatile uint8_t *m = d->map;
    uint8_t sink = 0;
    for (uint64_t o = base; o < base + q->region; o += d->page)
        sink ^= m[o];
    (void)sink;
    t0 = probe_now();
    evict(d, base, q->region);   /* the device's memory is not the test's to keep */
    d->untimed += probe_now() - t0;
    return (double)q->region;
}

static int disk_streaming(disk_test *d, double *bps, double *spread, char *err, size_t errlen)
{
    seq_reads q = seq_regions(d, STREAM_REGION);
    return time_reads(d, stream_step, &q, bps, spread, err, errlen);
}

/* Random: 16 KiB reads at aligned pseudo-random offsets over the whole file, one a step. */
typedef struct rand_reads {
    uint64_t blocks, s;
} rand_reads;

static double rand_step(disk_test *d, void *state, char *err, size_t errlen)
{
    rand_reads *q = state;
    if (read_at(d, lcg_next(&q->s) % q->blocks * RAND_BLOCK, RAND_BLOCK, err, errlen))
        return -1;
    return RAND_BLOCK;
}

static int disk_random(disk_test *d, double *bps, double *spread, char *err, size_t errlen)
{
    rand_reads q = {.blocks = d->size / RAND_BLOCK, .s = 0x2545f4914f6cdd1dULL};
    if (q.blocks < 2) {
        *bps = 0;
        return 0;
    }
    return time_reads(d, rand_step, &q, bps, spread, err, errlen);
}

/* A file system that keeps files in memory (tmpfs, ramfs): nothing to read from a disk. Some
 * take O_DIRECT (tmpfs on 6.x: 13-17 GB/s here, near the memory bandwidth of one thread, so the
 * speed test below cannot tell). */
static bool in_memory_fs(int fd)
{
#ifdef __linux__
    struct statfs sf;
    return fstatfs(fd, &sf) == 0 && (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC);
#else
    (void)fd;
    return false;
#endif
}

static int measure_disk(const char *path, dev_profile *p, char *err, size_t errlen)
{
    disk_test d = {.path = path, .direct = true};
    d.fd = open(path, O_RDONLY | O_DIRECT);
    if (d.fd < 0 && errno == EINVAL) {   /* file system without O_DIRECT (tmpfs, some FUSE) */
        d.direct = false;
        d.fd = open(path, O_RDONLY);
    }
    if (d.fd < 0) {
        snprintf(err, errlen, "profile: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    int rc = -1;
    if (fstat(d.fd, &st)) {
        snprintf(err, errlen, "profile: cannot stat %s: %s", path, strerror(errno));
        goto done;
    }
    if (in_memory_fs(d.fd)) {
        p->disk_seq = p->disk_rand = 0;
        snprintf(p->disk_method, sizeof p->disk_method, "cached");
        rc = 0;
        goto done;
    }
    d.size = (uint64_t)st.st_size / DIRECT_ALIGN * DIRECT_ALIGN;
    if (d.size < DIRECT_ALIGN) {
        snprintf(err, errlen, "profile: %s is too small to measure the disk", path);
        goto done;
    }
    if (posix_memalign((void **)&d.buf, DIRECT_ALIGN, SEQ_CHUNK)) {
        snprintf(err, errlen, "profile: out of memory for the disk test");
        d.buf = NULL;
        goto done;
    }
    /* Streaming where the file can be evicted; 1 MiB requests where it cannot ("o_direct" or
     * "fadvise" instead of "mmap" in the method). Pages not yet written back (a model just
     * copied) cannot be evicted: they are written first. */
    fdatasync(d.fd);
    void *map = mmap(NULL, d.size, PROT_READ, MAP_SHARED, d.fd, 0);
    d.map = map == MAP_FAILED ? NULL : map;
    d.page = (uint64_t)sysconf(_SC_PAGESIZE);
    int (*sequential)(disk_test *, double *, double *, char *, size_t) = disk_sequential;
    double seq, rnd;
    if (d.map && disk_streaming(&d, &seq, &p->noise, err, errlen) == 0)
        sequential = disk_streaming;
    if ((sequential == disk_sequential && disk_sequential(&d, &seq, &p->noise, err, errlen)) ||
        disk_random(&d, &rnd, &p->noise, err, errlen))
        goto done;
    /* Another program's I/O only ever slows a test down, so the sequential test runs again
     * after the random one and the faster figure counts (homogeneous-6dev: one of six identical
     * devices measured 327 MB/s against 519-522, and Halda moved its layers away). On a
     * throttled disk the second run is the faster one: the random test left most of the
     * throttle's allowance unused and the next reads get it (the emulator's 500 MB/s blkio limit
     * read 590-646 MB/s then, 525-533 twice back to back). That is the pace of a ring device,
     * which reads its streamed window between spells of light use: on homogeneous-6dev the
     * predicted TPOT was 5-9 % long with it, 14-37 % with the back-to-back figure. Sequential
     * reads are never slower than random 16 KiB ones on a disk of its own: a figure still below
     * the random one met such I/O both times (seen on the shared VM: 107 MB/s against 1049 and
     * 1263 a minute before and after), so it is measured a third time. */
    for (int retry = 0; retry < 2 && (retry == 0 || seq < rnd); retry++) {
        double again;
        if (sequential(&d, &again, &p->noise, err, errlen)) {
            /* Streaming fails only when the file stays in memory, which another process that
             * mapped it since can cause (two profiles of one model side by side): the first
             * figure stands. */
            if (sequential != disk_streaming)
                goto done;
            err[0] = '\0';
            break;
        }
        seq = fmax(seq, again);
    }
    /* A file that cannot be evicted may live in memory some other way than tmpfs (a FUSE
     * file system's cache, say): reads that fast came from RAM, so this device has no disk to
     * plan reloads with. */
    if (sequential == disk_streaming)
        snprintf(p->disk_method, sizeof p->disk_method, "mmap");
    else if (seq > p->mem_bw / 2) {
        seq = rnd = 0;
        snprintf(p->disk_method, sizeof p->disk_method, "cached");
    } else
        snprintf(p->disk_method, sizeof p->disk_method, d.direct ? "o_direct" : "fadvise");
    p->disk_seq = seq;
    p->disk_rand = rnd;
    rc = 0;
done:
    if (d.map)
        munmap((void *)d.map, d.size);
    free(d.buf);
    close(d.fd);
    return rc;
}

/* ---- progress ---- */

/* The seconds of the parts not given a time of their own, roughly (the 2-core VM, one thread:
 * the FMA peak's runs PART_FMA; a model's three disk tests PART_DISK; the GPU's tests, on its
 * software driver, PART_GPU and PART_GPU_TYPE a weight type: 1.2 s for 2 types, 4.2 s for 11). */
#define PART_FMA 0.6
#define PART_DISK 2.0
#define PART_GPU 0.5
#define PART_GPU_TYPE 0.33

typedef struct progress {
    const profile_opts *o;
    double done, total;   /* seconds */
} progress;

/* A part starts: the caller is told what it measures and the share done before it (the last,
 * "done", at 1). */
static void part(progress *pr, const char *what, double seconds)
{
    if (pr->o->progress)
        pr->o->progress(pr->o->progress_ctx, what, pr->done / pr->total);
    pr->done += seconds;
}

bool profile_matches(const dev_profile *p, const profile_opts *o)
{
    char host[64] = "";
    if (gethostname(host, sizeof host - 1))
        snprintf(host, sizeof host, "localhost");
    int cores = usable_cpus();
    kern_init();
    if (strcmp(p->name, host) || p->cores != cores ||
        p->threads != (o->threads > 0 ? o->threads : cores) ||
        strcmp(p->simd, kern_path_name(kern_active_path())))
        return false;
    /* a device without a GPU is asked for one by default: the profile stands while none is here */
    if (o->gpu && !p->gpu_present && profile_gpu_here(o))
        return false;
    bool types[DT_COUNT] = {false};
    char err[256];
    if (o->model_path && model_types(o->model_path, types, err, sizeof err))
        return false;
    for (int t = 0; t < DT_COUNT; t++)
        if (types[t] && !(p->cpu[t].matvec > 0))
            return false;
    return !o->model_path || p->disk_method[0];
}

int profile_measure(const profile_opts *o, dev_profile *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    if (gethostname(p->name, sizeof p->name - 1))
        snprintf(p->name, sizeof p->name, "localhost");
    p->os = detect_os();
    p->cores = usable_cpus();
    p->threads = o->threads > 0 ? o->threads : p->cores;
    if (p->threads > KERN_MAX_THREADS) {
        snprintf(err, errlen, "profile: %d threads (at most %d)", p->threads, KERN_MAX_THREADS);
        return -1;
    }
    bool types[DT_COUNT] = {false};
    if (o->model_path) {
        if (model_types(o->model_path, types, err, errlen))
            return -1;
    } else {
        for (int t = 0; t < DT_COUNT; t++)
            types[t] = dtype_get((uint32_t)t) && kern_type_get((enum dtype)t) &&
                       !kern_type_get((enum dtype)t)->act_only;
    }
    if (profile_memory(p, err, errlen))
        return -1;

    kern_init();
    snprintf(p->simd, sizeof p->simd, "%s", kern_path_name(kern_active_path()));
    kern_ctx *c = kern_ctx_create(p->threads);
    if (!c) {
        snprintf(err, errlen, "profile: cannot start %d threads", p->threads);
        return -1;
    }
    int rc = -1;
    if (kern_ctx_reserve(c, RATE_N_IN, RATE_TOKENS)) {
        snprintf(err, errlen, "profile: out of memory for the kernels' scratch");
        goto done;
    }
    quota_ctx q = {.stat = ""};
    p->cpu_quota = cpu_quota(&p->cpu_quota_period, q.stat, sizeof q.stat);
    double share = q.share = profile_quota_share(p);
    int n_types = 0;
    for (int t = 0; t < DT_COUNT; t++)
        n_types += types[t];
    double gpu_seconds = PART_GPU + PART_GPU_TYPE * n_types;
    progress pr = {.o = o, .total = PART_FMA + BW_SECONDS + DISPATCH_SECONDS + VECTOR_SECONDS +
                                    RATES_SECONDS + (o->model_path ? PART_DISK : 0) +
                                    (o->gpu ? gpu_seconds : 0)};
    part(&pr, "FMA peak", PART_FMA);
    double fmas[3];
    for (int i = 0; i < 3; i++)
        fmas[i] = probe_fma_peak(c, share < 1 ? 2 : 3);
    /* a peak, and only a sanity bound for the kernel rates: the fastest */
    double fma = best_rate(fmas, 3, &p->noise) * (share < 1 ? share : 1);
    part(&pr, "memory bandwidth", BW_SECONDS);
    p->mem_bw = measure_bandwidth(c, &q, &p->noise);
    part(&pr, "thread pool", DISPATCH_SECONDS);
    p->dispatch = measure_dispatch(c, &q, &p->noise);
    part(&pr, "layer work", VECTOR_SECONDS);
    p->vector = measure_vector(c, &q, &p->noise);
    if (!(p->mem_bw > 0) || !(fma > 0) || !(p->dispatch > 0) || !(p->vector > 0)) {
        snprintf(err, errlen, "profile: out of memory for the bandwidth, pool or vector test "
                 "(%.0f MiB buffer)", BW_BYTES / MIB);
        goto done;
    }
    for (int t = 0; t < DT_COUNT; t++) {
        if (!types[t])
            continue;
        char what[32];
        snprintf(what, sizeof what, "%s kernels", dtype_get((uint32_t)t)->name);
        part(&pr, what, RATES_SECONDS / n_types);
        if (measure_type(c, (enum dtype)t, &fma, RATES_SECONDS / n_types, &q, &p->cpu[t],
                         &p->noise, err, errlen))
            goto done;
    }
    if (o->model_path) {
        part(&pr, "disk", PART_DISK);
        if (measure_disk(o->model_path, p, err, errlen))
            goto done;
    }
    if (o->gpu) {
        part(&pr, "GPU", gpu_seconds);
        if (profile_measure_gpu(o, types, p, err, errlen))
            goto done;
    }
    part(&pr, "done", 0);
    rc = 0;
done:
    kern_ctx_free(c);
    return rc;
}
