/* prima bench run — whole-model throughput on this device: prompt processing at 64 and 512
 * tokens and decode, each beside the memory-bandwidth roofline measured in the same run.
 *
 * Decode reads every weight once per token, so its bound is (weight bytes per token) / (read
 * bandwidth). Prefill reads the weights once per batch; its memory roofline is far above what
 * arithmetic allows, and the fraction shows how compute-bound it is. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "app/gpu_offload.h"
#include "cli/opts.h"
#include "cli/run_opts.h"
#include "kernels/probe.h"
#include "model/session.h"

#define BANDWIDTH_BYTES (512ull << 20)
static const int prefill_tokens[] = {64, 512};

static const char usage_text[] =
    "usage: prima bench run -m FILE [--json] [-t N] [--reps N] [--decode N] [--decode-at P,...]\n"
    "\n"
    "Run a model on this device and measure, in one run:\n"
    "  load            seconds to open and check the model (the weights stay mapped)\n"
    "  read_bandwidth  streaming read bandwidth of a 512 MiB buffer, GB/s\n"
    "  first_token     seconds for the first decode step: with a cold page cache (e.g. after\n"
    "                  echo 3 > /proc/sys/vm/drop_caches) this reads the weights from disk\n"
    "  prefill         prompt tokens/s for 64 and 512 tokens (one batch each with the default\n"
    "                  -b 512), with the memory roofline: tokens * bandwidth / weight bytes\n"
    "  decode          ms per generated token (one token per evaluation, positions 1..N),\n"
    "                  with the roofline: weight bytes per token / bandwidth\n"
    "  prefill_cpu, decode_cpu\n"
    "                  CPU time of this process per token (user + system, all threads, from\n"
    "                  getrusage) over the timed prefills and decode steps: on a shared machine\n"
    "                  the steadier measure of the work done\n"
    "  memory          mapped weights, repacked weights (--repack), KV cache, scratch and\n"
    "                  peak resident MiB\n"
    "'bound' is the fraction of the roofline reached; 'spread' the interquartile range of the\n"
    "repetitions relative to their median (a busy machine shows a large one). The token ids\n"
    "are a fixed pseudo-random sequence.\n"
    "\n";

#define MAX_DECODE_AT 8

struct opts {
    run_opts ro;
    bool json;
    int reps, n_decode;
    int decode_at[MAX_DECODE_AT], n_decode_at;
};

/* --decode-at P,...: up to MAX_DECODE_AT ascending context lengths */
static int parse_decode_at(void *dst, const char *flag, const char *v)
{
    struct opts *o = dst;
    o->n_decode_at = parse_int_list(v, 1, 1 << 20, o->decode_at, MAX_DECODE_AT);
    bool ascending = o->n_decode_at > 0;
    for (int k = 1; k < o->n_decode_at; k++)
        ascending &= o->decode_at[k] > o->decode_at[k - 1];
    if (!ascending) {
        cli_fail("%s: expected up to %d ascending context lengths (1 to %d, comma-separated), "
                 "got '%s'", flag, MAX_DECODE_AT, 1 << 20, v);
        return -1;
    }
    return 0;
}

#define F(field) offsetof(struct opts, field)
static const cli_opt bench_rows[] = {
    {"--reps", "N", CLI_INT, F(reps), 1, 100000,
     .help = "repetitions of each prefill (default 4)"},
    {"--decode", "N", CLI_INT, F(n_decode), 1, 100000, .help = "decode steps timed (default 32)"},
    {"--decode-at", "P,...", CLI_FN, .fn = parse_decode_at,
     .help = "also time the decode steps after a context of P tokens\n"
             "(decode_at, decode_at_cpu: tokens is P), for up to 8\n"
             "values of P in ascending order (each context extends\n"
             "the last): what a long context costs, as llama-bench's\n"
             "-d depth"},
    {"--json", NULL, CLI_FLAG, F(json),
     .help = "one JSON object per measurement and line (see prima\nbench kernels)"},
    {0},
};
#undef F
static const cli_group bench_group = {
    NULL, bench_rows,
    "  (-c defaults to the longer prompt (512 or P) + the decode steps + 1)\n"};

static int parse(struct opts *o, int argc, char **argv)
{
    run_opts_init(&o->ro, RUN_OPT_MODEL | RUN_OPT_GPU);
    o->ro.n_ctx = 0;
    o->reps = 4;
    o->n_decode = 32;
    cli_set sets[CLI_MAX_SETS] = {{.g = &bench_group, .dst = o}};
    int n = 1 + run_opts_sets(&o->ro, sets + 1);
    int rc = cli_opts_parse("bench run", sets, n, argc, argv, usage_text, NULL, NULL);
    if (rc)
        return rc;
    return run_opts_finish(&o->ro) ? 2 : 0;
}

static void report(const struct opts *o, bench_result r)
{
    r.threads = o->ro.n_threads;
    bench_print(&r, o->json);
}

/* Bytes of weights one decode step reads: every layer (of a layer of experts, the share of the
 * experts a token is routed to), the final norm and output matrix, and one embedding row. */
static double decode_bytes(const model *m)
{
    double b = (double)m->output->nbytes + (double)m->output_norm->nbytes;
    for (int il = 0; il < m->hp.n_layer; il++)
        b += model_layer_token_bytes(m, il);
    return b + (double)m->tok_embd->nbytes / m->hp.n_vocab;
}

/* CPU seconds this process has used (every thread, user and system). */
static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static void report_cpu(const struct opts *o, const char *op, int tokens, double cpu_s, int n)
{
    report(o, (bench_result){.op = op, .tokens = tokens, .value = 1e3 * cpu_s / n, .unit = "cpu-ms/tok",
                             .fraction = -1, .spread = -1});
}

static void fill_tokens(int32_t *t, int n, int n_vocab)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t[i] = (int32_t)(x % (uint64_t)n_vocab);
    }
}

/* The longest prompt a run evaluates. */
static int longest_prompt(const struct opts *o)
{
    const int last = o->n_decode_at ? o->decode_at[o->n_decode_at - 1] : 0;
    return last > prefill_tokens[1] ? last : prefill_tokens[1];
}

/* Make toks[0..at) the context (from scratch when `from` is 0, else extending or cutting back
 * a context of toks[0..from)), then time n decode steps one token each (secs[i]); *cpu_s: the
 * CPU time of those steps. The context is then toks[0..at + n). */
static int time_decode(session *s, const int32_t *toks, int from, int at, int n, double *secs,
                       double *cpu_s, char *err, size_t errlen)
{
    if (from == 0 || from > at) {
        session_truncate(s, from > at ? at : 0);
        from = s->n_past; /* a sliding window's ring may not allow the cut: from scratch */
    }
    if (at > from && session_eval(s, toks + from, at - from, NULL, err, errlen))
        return -1;
    double c0 = cpu_seconds();
    for (int i = 0; i < n; i++) {
        double t0 = probe_now();
        if (session_eval(s, &toks[at + i], 1, NULL, err, errlen))
            return -1;
        secs[i] = probe_now() - t0;
    }
    *cpu_s = cpu_seconds() - c0;
    return 0;
}

static int measure(const struct opts *o, const model *m, session *s, double bw)
{
    char err[256];
    const int max_prompt = longest_prompt(o);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(max_prompt + o->n_decode));
    double *secs = malloc(sizeof(double) * (size_t)(o->reps > o->n_decode ? o->reps : o->n_decode));
    if (!toks || !secs) {
        free(toks);
        free(secs);
        return cli_fail("bench run: out of memory");
    }
    fill_tokens(toks, max_prompt + o->n_decode, m->hp.n_vocab);
    const double wbytes = decode_bytes(m);
    double spread;
    int rc = 0;

    double t0 = probe_now();
    if (session_eval(s, toks, 1, NULL, err, sizeof err)) {
        rc = cli_fail("bench run: %s", err);
        goto out;
    }
    report(o, (bench_result){.op = "first_token", .value = probe_now() - t0, .unit = "s",
                             .fraction = -1, .spread = -1});

    for (size_t k = 0; k < sizeof prefill_tokens / sizeof prefill_tokens[0]; k++) {
        int n = prefill_tokens[k];
        double c0 = cpu_seconds();
        for (int r = 0; r < o->reps; r++) {
            session_truncate(s, 0);
            t0 = probe_now();
            if (session_eval(s, toks, n, NULL, err, sizeof err)) {
                rc = cli_fail("bench run: %s", err);
                goto out;
            }
            secs[r] = probe_now() - t0;
        }
        double t = bench_median_spread(secs, o->reps, &spread);
        /* the weights are read once per batch */
        int batches = (n + s->n_batch - 1) / s->n_batch;
        double roof = n * bw / (wbytes * batches);
        report(o, (bench_result){.op = "prefill", .tokens = n, .value = n / t, .unit = "tok/s",
                                 .fraction = (n / t) / roof, .spread = spread});
        report(o, (bench_result){.op = "prefill_roofline", .tokens = n, .value = roof,
                                 .unit = "tok/s", .fraction = -1, .spread = -1});
        report_cpu(o, "prefill_cpu", n, cpu_seconds() - c0, n * o->reps);
    }

    double cpu_s;
    if (time_decode(s, toks, 0, 1, o->n_decode, secs, &cpu_s, err, sizeof err)) {
        rc = cli_fail("bench run: %s", err);
        goto out;
    }
    report_cpu(o, "decode_cpu", 0, cpu_s, o->n_decode);
    double t = bench_median_spread(secs, o->n_decode, &spread);
    double roof_ms = 1e3 * wbytes / bw;
    report(o, (bench_result){.op = "decode", .value = 1e3 * t, .unit = "ms/tok",
                             .fraction = roof_ms / (1e3 * t), .spread = spread});
    report(o, (bench_result){.op = "decode_roofline", .value = roof_ms, .unit = "ms/tok",
                             .fraction = -1, .spread = -1});
    for (int k = 0, ctx = 1 + o->n_decode; k < o->n_decode_at; k++) {
        const int at = o->decode_at[k];
        if (time_decode(s, toks, ctx, at, o->n_decode, secs, &cpu_s, err, sizeof err)) {
            rc = cli_fail("bench run: %s", err);
            goto out;
        }
        ctx = at + o->n_decode;
        t = bench_median_spread(secs, o->n_decode, &spread);
        report(o, (bench_result){.op = "decode_at", .tokens = at, .value = 1e3 * t,
                                 .unit = "ms/tok", .fraction = roof_ms / (1e3 * t), .spread = spread});
        report_cpu(o, "decode_at_cpu", at, cpu_s, o->n_decode);
    }

    uint64_t kv, scratch;
    engine_memory(s->e, &kv, &scratch);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double mib = 1024.0 * 1024.0;
    const struct { const char *what; double v; } mem[] = {
        {"weights", (double)m->file->size / mib}, {"repacked", (double)model_kept_bytes(m) / mib},
        {"kv_cache", (double)kv / mib},
        {"scratch", (double)scratch / mib}, {"peak_resident", (double)ru.ru_maxrss / 1024.0}};
    for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++)
        report(o, (bench_result){.op = "memory", .source = mem[i].what, .value = mem[i].v,
                                 .unit = "MiB", .fraction = -1, .spread = -1});
out:
    free(toks);
    free(secs);
    return rc;
}

static int run(int argc, char **argv)
{
    struct opts o = {0};
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    char err[512];
    double t0 = probe_now();
    model *m = model_load(o.ro.model, err, sizeof err);
    if (!m)
        return cli_fail("%s", err);
    if (o.ro.mlock && model_mlock(m, err, sizeof err)) {
        model_free(m);
        return cli_fail("%s", err);
    }
    if (run_opts_apply_kv(&o.ro, m, err, sizeof err)) {
        model_free(m);
        return cli_fail("%s", err);
    }
    double load_s = probe_now() - t0;
    kern_ctx *kc = kern_ctx_create(o.ro.n_threads);
    int n_ctx = o.ro.n_ctx ? o.ro.n_ctx : longest_prompt(&o) + o.n_decode + 1;
    session *s = kc ? session_create(m, kc, n_ctx, o.ro.n_batch, err, sizeof err) : NULL;
    gpu_dev *gpu = NULL;
    if (!s) {
        rc = kc ? cli_fail("%s", err) : cli_fail("cannot start %d threads", o.ro.n_threads);
    } else if (gpu_offload_session(&o.ro, m, s, &gpu, err, sizeof err)) {
        rc = cli_fail("GPU: %s", err);
    } else if (run_opts_apply_repack(&o.ro, m, kc, s, err, sizeof err)) {
        rc = cli_fail("%s", err);
    } else if (n_ctx < longest_prompt(&o) + o.n_decode + 1) {
        rc = cli_fail("bench run: -c %d is too small for %d prompt tokens and %d decode steps",
                      n_ctx, longest_prompt(&o), o.n_decode);
    } else {
        const char *path = kern_path_name(kern_active_path());
        if (o.json)
            bench_print_path_json(path, NULL);
        else
            printf("%s: %d layers, n_embd %d, vocab %d; SIMD path %s, %d threads\n"
                   "%-7s %-22s %-11s %6s %3s %9s %-7s %7s %6s\n",
                   o.ro.model, m->hp.n_layer, m->hp.n_embd, m->hp.n_vocab, path, o.ro.n_threads,
                   "", "op", "", "tokens", "thr", "value", "unit", "bound", "spread");
        report(&o, (bench_result){.op = "load", .value = load_s, .unit = "s", .fraction = -1,
                                  .spread = -1});
        double bw = probe_read_bandwidth(kc, BANDWIDTH_BYTES, 5);
        if (bw <= 0) {
            rc = cli_fail("bench run: cannot allocate the bandwidth buffer");
        } else {
            report(&o, (bench_result){.op = "read_bandwidth", .value = bw / 1e9, .unit = "GB/s",
                                      .fraction = -1, .spread = -1});
            rc = measure(&o, m, s, bw);
        }
    }
    session_free(s);
    gpu_close(gpu);
    kern_ctx_free(kc);
    model_free(m);
    run_opts_free(&o.ro);
    return rc;
}

const struct bench_sub bench_run = {
    "run", "a model's prefill tokens/s and decode ms/token vs the memory-bandwidth roofline", run};
