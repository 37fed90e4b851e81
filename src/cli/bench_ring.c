/* prima bench ring — time per output token of a pipelined ring on this machine against one
 * device, and where each device's time and page faults go; with --seqs, the aggregate
 * throughput of several sequences decoding at once, batched and pipelined. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "app/local_workers.h"
#include "cli/opts.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "cluster/ring_engine.h"
#include "kernels/kern.h"
#include "kernels/probe.h"

#define PROMPT_TOKENS 8      /* of --seqs, and of decoding unless --prompt says otherwise */
#define PREFILL_BATCH 512    /* rows per step of a --prompt (prima run's default) */

static const char usage_text[] =
    "usage: prima bench ring -m FILE [--devices N] [-lw W,...] [-k K] [-t N] [options]\n"
    "\n"
    "Decode a fixed token sequence on a ring of N devices on this machine (this process is\n"
    "the head; N-1 workers run as separate processes on loopback ports, every device with\n"
    "-t threads) and on one device, and report:\n"
    "  decode single    ms per token on one device with --single-threads threads\n"
    "  decode ring      ms per token on the ring\n"
    "  ring overhead    ring / single - 1, in percent\n"
    "  with --prompt N, also (the prompt before decoding, in steps of up to 512 tokens):\n"
    "  prefill single   tokens/s of the prompt on one device\n"
    "  prefill ring     tokens/s of the prompt on the ring\n"
    "  prefill speedup  ring / single per repetition: the median, then the lowest and highest\n"
    "  with --key FILE, also (a second set of workers holds the key; plaintext and keyed\n"
    "  repetitions alternate, in pairs):\n"
    "  decode ring keyed       ms per token on the keyed, encrypted ring\n"
    "  decode overhead of keys keyed / plaintext - 1 per pair, in percent: the median,\n"
    "                          then the lowest and highest pair\n"
    "  cpu ring, cpu ring keyed, cpu overhead of keys ...\n"
    "                          the same for the CPU time of all the ring's processes per\n"
    "                          token (steadier than wall time on a shared machine)\n"
    "  per device, per decoded token: compute and wait ms, major page faults during compute,\n"
    "  disk MiB read (prefetching included), % of its window's pages resident when compute\n"
    "  started, KiB sent\n"
    "Each repetition starts a new session (the workers serve head after head), single-device\n"
    "and ring repetitions alternate; the median of the repetitions is reported, with the\n"
    "interquartile spread. For the prefetch experiments, --cgroup puts the workers in a\n"
    "cgroup whose memory limit is smaller than their layers.\n"
    "\n"
    "With --seqs S,... the ring decodes S sequences at once instead (one KV region each on\n"
    "every device), every step one token of each, and reports for each S:\n"
    "  seqs S pipelined   aggregate tokens/s: the sequences in one group per device (at\n"
    "                     most S), every group in flight; a group's next step goes as soon\n"
    "                     as its last one is back, while the others are still in the ring\n"
    "  seqs S batched     aggregate tokens/s: the step's rows in one batch\n"
    "  seqs S speedup     pipelined S / pipelined of the first count (give 1 first) in the\n"
    "                     same repetition: the median, then the lowest and highest one\n"
    "  cpu seqs S         CPU ms of every process of the ring per token, pipelined\n"
    "The counts and the two modes alternate within each repetition (reversed every other\n"
    "one).\n"
    "\n";

struct opts {
    run_opts ro;
    ring_args ra;
    int n_dev, n_decode, n_prompt, reps, single_threads;
    int seqs[8], n_seqs;       /* --seqs */
    bool no_single, json, timed_prompt;
    const char *cgroup, *worker_model;
};

/* "1,2,4": up to 8 counts of 1 to 64 sequences. 0, or -1 after a one-line error. */
static int parse_seqs(void *dst, const char *flag, const char *v)
{
    struct opts *o = dst;
    o->n_seqs = parse_int_list(v, 1, 64, o->seqs, 8);
    if (o->n_seqs > 0)
        return 0;
    o->n_seqs = 0;
    cli_fail("%s %s: give up to 8 counts of 1 to 64 sequences, e.g. 1,2,4", flag, v);
    return -1;
}

#define F(field) offsetof(struct opts, field)
static const cli_opt bench_rows[] = {
    {"--devices", "N", CLI_INT, F(n_dev), 1, PRIMA_MAX_DEVICES,
     .help = "devices in the ring, the head included (default 3)"},
    {"--decode", "N", CLI_INT, F(n_decode), 1, 100000,
     .help = "tokens decoded per repetition (default 32)"},
    {"--prompt", "N", CLI_INT, F(n_prompt), 1, 100000,
     .help = "prompt tokens before decoding, timed (default 8, untimed)"},
    {"--reps", "N", CLI_INT, F(reps), 1, 1000, .help = "repetitions (default 3)"},
    {"--single-threads", "N", CLI_INT, F(single_threads), 1, KERN_MAX_THREADS,
     .help = "threads of the single-device run (default: -t; give N times\n"
             "-t for the same total threads as the ring)"},
    {"--no-single", NULL, CLI_FLAG, F(no_single), .help = "skip the single-device run"},
    {"--seqs", "S,...", CLI_FN, .fn = parse_seqs,
     .help = "sequences decoding at once (1 to 64 each; e.g. 1,2,4)"},
    {"--cgroup", "DIR", CLI_STR, F(cgroup),
     .help = "cgroup directory the workers join (memory limits, ...)"},
    {"--worker-model", "FILE", CLI_STR, F(worker_model),
     .help = "the workers' copy of the model (default: -m): with a copy,\n"
             "devices do not share this machine's page cache, as separate\n"
             "machines would not (the head's readahead would otherwise\n"
             "load the workers' layers for them)"},
    {"--json", NULL, CLI_FLAG, F(json), .help = "one JSON object per measurement and line"},
    {0},
};
#undef F
static const cli_group bench_group = {NULL, bench_rows, NULL};

static int parse(struct opts *o, int argc, char **argv)
{
    run_opts_init(&o->ro, RUN_OPT_MODEL);
    ring_args_init(&o->ra);
    o->n_dev = 3;
    o->n_decode = 32;
    o->reps = 3;
    /* no discovery or failover: the benchmark starts its own workers and stops on a loss */
    cli_set sets[CLI_MAX_SETS] = {{.g = &bench_group, .dst = o}};
    int n = 1 + run_opts_sets(&o->ro, sets + 1);
    n += ring_args_sets(&o->ra, false, sets + n);
    int rc = cli_opts_parse("bench ring", sets, n, argc, argv, usage_text, NULL, NULL);
    if (rc)
        return rc;
    if (o->ra.workers)
        return cli_fail("bench ring: it starts its own workers (no --workers)"), 2;
    if (o->ra.n_gl)
        return cli_fail("bench ring: --gpu-layers is for prima run, logits, cluster and serve (the "
                        "benchmark measures the CPU ring)"), 2;
    if (run_opts_finish(&o->ro) || ring_args_finish(&o->ra))
        return 2;
    if (!o->single_threads)
        o->single_threads = o->ro.n_threads;
    o->timed_prompt = o->n_prompt > 0;
    if (!o->timed_prompt)
        o->n_prompt = PROMPT_TOKENS;
    return 0;
}

/* A ring to decode on: its workers (as "host:port,...") and whether its links are keyed. */
typedef struct ring_set {
    const local_workers *w;
    const char *list;
    bool keyed;
} ring_set;

/* Nanoseconds on a CPU so far of every thread of process pid (0: this one), from the scheduler's
 * own accounting (/proc/PID/task/TID/schedstat), which is exact where getrusage's ticks are 10
 * ms. Threads that end in between are lost, so callers sample inside one session, whose threads
 * live throughout. */
static double process_cpu_ns(int pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, pid ? "/proc/%d/task" : "/proc/self/task", pid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    double ns = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[128];
        snprintf(path, sizeof path, "%s/%.20s/schedstat", dir, e->d_name);
        FILE *f = fopen(path, "r");
        unsigned long long run;
        if (f && fscanf(f, "%llu", &run) == 1)
            ns += (double)run;
        if (f)
            fclose(f);
    }
    closedir(d);
    return ns;
}

/* CPU ms so far of this process and of the ring's workers: steadier than wall time on a machine
 * shared with other jobs. */
static double cpu_ms(const ring_set *rs)
{
    double ns = process_cpu_ns(0);
    for (int i = 0; rs && i < rs->w->n; i++)
        ns += process_cpu_ns((int)rs->w->pid[i]);
    return ns / 1e6;
}

/* One repetition: prompt, then timed decode steps, on one device (rs NULL) or a ring. Returns
 * ms per token, or < 0 on failure (message printed); *cpu (if not NULL) gets the CPU ms per
 * token of every process of the ring, *prefill (if not NULL) the prompt's tokens/s. With a
 * ring, per-device counters of the decode steps go to per_dev (NULL: not wanted). */
static double decode_once(const struct opts *o, const model *m, kern_ctx *kc, const ring_set *rs,
                          ring_counters *per_dev, double *cpu, double *prefill)
{
    char err[512];
    const int n_prompt = o->n_prompt, n_batch = n_prompt < PREFILL_BATCH ? n_prompt : PREFILL_BATCH;
    int n_ctx = n_prompt + o->n_decode + 1;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n_ctx);
    if (!toks)
        return cli_fail("bench ring: out of memory"), -1;
    for (int i = 0; i < n_ctx; i++)
        toks[i] = (int32_t)((7u * (unsigned)i + 3u) % (unsigned)m->hp.n_vocab);
    ring_head h = {0};
    session *s;
    if (rs) {
        ring_opts ro = ring_args_opts(&o->ra);
        ro.workers = rs->list;
        ro.verbose = NULL;
        if (!rs->keyed)
            ro.key = NULL;
        s = ring_head_session(&h, &ro, NULL, m, kc, n_ctx, n_batch, err, sizeof err);
    } else {
        s = session_create(m, kc, n_ctx, n_batch, err, sizeof err);
    }
    double ms = -1, t_prompt = probe_now();
    if (!s) {
        cli_fail("bench ring: %s", err);
    } else if (session_eval(s, toks, n_prompt, NULL, err, sizeof err)) {
        cli_fail("bench ring: %s", err);
    } else {
        if (prefill)
            *prefill = n_prompt / (probe_now() - t_prompt);
        if (h.r)
            ring_count_from(h.r, ring_batches(h.r));
        double t0 = probe_now(), c0 = cpu_ms(rs);
        int i = 0;
        for (; i < o->n_decode; i++)
            if (session_eval(s, &toks[n_prompt + i], 1, NULL, err, sizeof err))
                break;
        if (i < o->n_decode)
            cli_fail("bench ring: %s", err);
        else
            ms = 1e3 * (probe_now() - t0) / o->n_decode;
        if (cpu)
            *cpu = (cpu_ms(rs) - c0) / o->n_decode;
        if (h.r) {
            ring_finish(h.r);
            for (int d = 0; per_dev && d < ring_get_plan(h.r)->n_dev; d++)
                ring_totals(h.r, d, &per_dev[d]);
        }
    }
    ring_head_close(&h);
    session_free(s);
    free(toks);
    return ms;
}

static void report(const struct opts *o, const char *op, const char *source, int threads,
                   double value, const char *unit, double spread)
{
    bench_result r = {.op = op, .source = source, .threads = threads, .value = value,
                      .unit = unit, .fraction = -1, .spread = spread};
    bench_print(&r, o->json);
}

/* Keyed against plaintext ring, pair by pair: the keyed figure's median, then the median ratio
 * and the extreme pairs. name: "decode" (wall ms) or "cpu" (CPU ms of every process). */
static void report_keyed(const struct opts *o, const char *what, const char *name,
                         const double *plain, const double *keyed)
{
    double spread, *v = malloc(2 * sizeof *v * (size_t)o->reps), *ratio = v + o->reps;
    if (!v)
        return;
    for (int r = 0; r < o->reps; r++) {
        v[r] = keyed[r];
        ratio[r] = 100 * (keyed[r] / plain[r] - 1);
    }
    char op[64];
    snprintf(op, sizeof op, "%s ring keyed", name);
    double med = bench_median_spread(v, o->reps, &spread);
    report(o, op, what, o->ro.n_threads, med, "ms/tok", spread);
    snprintf(op, sizeof op, "%s overhead of keys", name);
    med = bench_median_spread(ratio, o->reps, &spread);   /* sorts ratio */
    report(o, op, what, o->ro.n_threads, med, "%", -1);
    snprintf(op, sizeof op, "%s overhead lowest", name);
    report(o, op, what, o->ro.n_threads, ratio[0], "%", -1);
    snprintf(op, sizeof op, "%s overhead highest", name);
    report(o, op, what, o->ro.n_threads, ratio[o->reps - 1], "%", -1);
    free(v);
}

/* The prompt's tokens/s on the ring and on one device (NULL: not run), and their ratio pair by
 * pair: the median, then the lowest and highest pair. */
static void report_prefill(const struct opts *o, const char *what, double *ring_tps,
                           double *one_tps)
{
    double spread, *ratio = malloc(sizeof *ratio * (size_t)o->reps);
    if (!ratio)
        return;
    for (int r = 0; one_tps && r < o->reps; r++)
        ratio[r] = ring_tps[r] / one_tps[r];
    if (one_tps) {
        double med = bench_median_spread(one_tps, o->reps, &spread);
        report(o, "prefill single", "1 device", o->single_threads, med, "tok/s", spread);
    }
    double med = bench_median_spread(ring_tps, o->reps, &spread);
    report(o, "prefill ring", what, o->ro.n_threads, med, "tok/s", spread);
    if (one_tps) {
        med = bench_median_spread(ratio, o->reps, &spread);   /* sorts ratio */
        report(o, "prefill speedup", what, o->ro.n_threads, med, "x", -1);
        report(o, "prefill speedup lowest", what, o->ro.n_threads, ratio[0], "x", -1);
        report(o, "prefill speedup highest", what, o->ro.n_threads, ratio[o->reps - 1], "x", -1);
    }
    free(ratio);
}

static int measure(const struct opts *o, const model *m, const ring_set *plain,
                   const ring_set *keyed_ring)
{
    /* ring, single, keyed ring; then CPU ms of the ring and of the keyed ring; then prefill
     * tokens/s of the ring and of one device */
    double *ms = calloc(7 * (size_t)o->reps, sizeof *ms);
    ring_counters *sum = calloc(PRIMA_MAX_DEVICES, sizeof *sum);
    ring_counters *one = calloc(PRIMA_MAX_DEVICES, sizeof *one);
    kern_ctx *kc_ring = kern_ctx_create(o->ro.n_threads);
    kern_ctx *kc_one = o->no_single ? NULL : kern_ctx_create(o->single_threads);
    int rc = 1;
    if (!ms || !sum || !one || !kc_ring || (!o->no_single && !kc_one)) {
        cli_fail("bench ring: out of memory or threads");
        goto out;
    }
    /* Single and ring repetitions alternate, so that a change of load on the machine falls on
     * both alike. */
    double spread, single = 0, *ms_one = ms + o->reps, *ms_keyed = ms + 2 * o->reps;
    double *cpu = ms + 3 * o->reps, *cpu_keyed = ms + 4 * o->reps;
    double *pf = ms + 5 * o->reps, *pf_one = ms + 6 * o->reps;
    /* Comparing two rings: one untimed repetition on each first, so that neither pays for its
     * workers' start (model loading, first page faults) in a timed one. */
    if (keyed_ring && (decode_once(o, m, kc_ring, plain, NULL, NULL, NULL) < 0 ||
                       decode_once(o, m, kc_ring, keyed_ring, NULL, NULL, NULL) < 0))
        goto out;
    for (int r = 0; r < o->reps; r++) {
        if (!o->no_single &&
            (ms_one[r] = decode_once(o, m, kc_one, NULL, NULL, NULL, &pf_one[r])) < 0)
            goto out;
        memset(one, 0, sizeof *one * PRIMA_MAX_DEVICES);
        /* a pair: plaintext first on even repetitions, keyed first on odd ones */
        for (int k = 0; k < 2; k++) {
            bool keyed = (k == 1) != (r % 2 == 1);
            if (keyed && !keyed_ring)
                continue;
            double t = keyed ? decode_once(o, m, kc_ring, keyed_ring, NULL, &cpu_keyed[r], NULL)
                             : decode_once(o, m, kc_ring, plain, one, &cpu[r], &pf[r]);
            if (t < 0)
                goto out;
            *(keyed ? &ms_keyed[r] : &ms[r]) = t;
        }
        for (int d = 0; d < o->n_dev; d++)
            ring_counters_add(&sum[d], &one[d]);
    }
    if (!o->no_single) {
        single = bench_median_spread(ms_one, o->reps, &spread);
        report(o, "decode single", "1 device", o->single_threads, single, "ms/tok", spread);
    }
    char what[64];
    snprintf(what, sizeof what, "%d devices", o->n_dev);
    if (keyed_ring) {   /* before the medians sort the plaintext figures */
        report_keyed(o, what, "decode", ms, ms_keyed);
        report_keyed(o, what, "cpu", cpu, cpu_keyed);
        double c = bench_median_spread(cpu, o->reps, &spread);
        report(o, "cpu ring", what, o->ro.n_threads, c, "ms/tok", spread);
    }
    double ring_ms = bench_median_spread(ms, o->reps, &spread);
    report(o, "decode ring", what, o->ro.n_threads, ring_ms, "ms/tok", spread);
    if (!o->no_single)
        report(o, "ring overhead", what, o->ro.n_threads, 100 * (ring_ms / single - 1), "%", -1);
    if (o->timed_prompt)
        report_prefill(o, what, pf, o->no_single ? NULL : pf_one);
    double toks = (double)o->reps * o->n_decode;
    for (int d = 0; d < o->n_dev; d++) {
        const ring_counters *c = &sum[d];
        char dev[32];
        snprintf(dev, sizeof dev, "device %d", d);
        report(o, "compute", dev, o->ro.n_threads, c->compute_ns / 1e6 / toks, "ms/tok", -1);
        report(o, "wait", dev, o->ro.n_threads, c->wait_ns / 1e6 / toks, "ms/tok", -1);
        report(o, "major faults", dev, o->ro.n_threads, (double)c->major_faults / toks, "/tok", -1);
        report(o, "disk read", dev, o->ro.n_threads, (double)c->disk_bytes / (1 << 20) / toks,
               "MiB/tok", -1);
        report(o, "resident at start", dev, o->ro.n_threads,
               c->pages ? 100.0 * (double)c->pages_resident / (double)c->pages : 100.0, "%", -1);
        report(o, "sent", dev, o->ro.n_threads, (double)c->bytes_sent / 1024 / toks, "KiB/tok", -1);
    }
    rc = 0;
out:
    kern_ctx_free(kc_ring);
    kern_ctx_free(kc_one);
    free(ms);
    free(sum);
    free(one);
    return rc;
}

/* Step `step` of group g (sequences g, g + G, ...) into mb. 0, or -1 with err. */
static int submit_group(session **ss, int S, int G, int g, session_mb *mb, const int32_t *toks,
                        int stride, int step, char *err, size_t errlen)
{
    session *gs[64];
    const int32_t *at[64];
    int n[64], c = 0;
    for (int i = g; i < S; i += G) {
        gs[c] = ss[i];
        at[c] = toks + i * stride + PROMPT_TOKENS + step;
        n[c++] = 1;
    }
    return session_mb_submit(mb, gs, at, n, c, err, errlen);
}

/* The decode steps of --seqs, batched: every step all S sequences in one batch (one group)
 * through micro-batch mb[0]. 0, or -1 with err. */
static int steps_batched(session **ss, int S, session_mb **mb, const int32_t *toks, int stride,
                         int n_decode, char *err, size_t errlen)
{
    for (int step = 0; step < n_decode; step++)
        if (submit_group(ss, S, 1, 0, mb[0], toks, stride, step, err, errlen) ||
            session_mb_collect(ss[0], err, errlen) != mb[0])
            return -1;
    return 0;
}

/* Pipelined: the sequences in G groups, one micro-batch each, all in flight; as soon as a
 * group's step comes back its next one goes, while the other groups are still in the ring, as
 * a server's scheduler keeps the ring full. 0, or -1 with err. */
static int steps_pipelined(session **ss, int S, int G, session_mb **mb, const int32_t *toks,
                           int stride, int n_decode, char *err, size_t errlen)
{
    int done[64] = {0}, fifo[64], first = 0, count = 0;   /* groups in flight, oldest first */
    for (int g = 0; g < G; g++) {
        if (submit_group(ss, S, G, g, mb[g], toks, stride, 0, err, errlen))
            return -1;
        fifo[count++] = g;
    }
    while (count) {
        int g = fifo[first];
        first = (first + 1) % 64;
        count--;
        session_mb *back = session_mb_collect(ss[0], err, errlen);
        if (!back)
            return -1;
        if (back != mb[g]) {
            snprintf(err, errlen, "group %d's micro-batch came back out of order", g);
            return -1;
        }
        if (++done[g] == n_decode)
            continue;
        if (submit_group(ss, S, G, g, mb[g], toks, stride, done[g], err, errlen))
            return -1;
        fifo[(first + count++) % 64] = g;
    }
    return 0;
}

/* One repetition of --seqs: S sequences on the ring, each with a prompt of its own, then
 * n_decode steps of one token of each, batched or pipelined. Returns the aggregate tokens/s of
 * the steps, or < 0 (message printed); *cpu gets the CPU ms per token of every process of the
 * ring. */
static double decode_seqs_once(const struct opts *o, const model *m, kern_ctx *kc,
                               const ring_set *rs, int S, bool pipelined, double *cpu)
{
    char err[512];
    const int n_ctx = PROMPT_TOKENS + o->n_decode;
    ring_opts ro = ring_args_opts(&o->ra);
    ro.workers = rs->list;
    ro.verbose = NULL;
    ro.key = NULL;
    ro.n_seq = S;
    ring_head h = {0};
    session *ss[64] = {NULL};
    session_mb *mb[PRIMA_MAX_DEVICES] = {NULL};
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n_ctx * (size_t)S);
    const int32_t *at[64];
    int n[64], G = 0;
    double tps = -1;
    ss[0] = toks ? ring_head_session(&h, &ro, NULL, m, kc, n_ctx,
                                     S > PROMPT_TOKENS ? S : PROMPT_TOKENS, err, sizeof err)
                 : NULL;
    bool ok = ss[0] != NULL;
    for (int i = 1; ok && i < S; i++)
        ok = (ss[i] = session_create_peer(ss[0], i, err, sizeof err)) != NULL;
    if (ok) {
        int depth = session_max_in_flight(ss[0]);
        G = pipelined ? (S < depth ? S : depth) : 1;
    }
    for (int g = 0; ok && g < G; g++)
        ok = (mb[g] = session_mb_create(ss[0], err, sizeof err)) != NULL;
    if (ok) {
        for (int i = 0; i < S; i++) {
            for (int t = 0; t < n_ctx; t++)
                toks[i * n_ctx + t] = (int32_t)((7u * (unsigned)t + 3u + 11u * (unsigned)i) %
                                                (unsigned)m->hp.n_vocab);
            at[i] = toks + i * n_ctx;
            n[i] = PROMPT_TOKENS;
        }
        ok = session_eval_batch(ss, at, n, S, err, sizeof err) == 0;
    }
    if (ok) {
        double t0 = probe_now(), c0 = cpu_ms(rs);
        ok = (pipelined ? steps_pipelined(ss, S, G, mb, toks, n_ctx, o->n_decode, err, sizeof err)
                        : steps_batched(ss, S, mb, toks, n_ctx, o->n_decode, err, sizeof err)) == 0;
        tps = (double)S * o->n_decode / (probe_now() - t0);
        *cpu = (cpu_ms(rs) - c0) / ((double)S * o->n_decode);
    }
    if (!ok) {
        cli_fail("bench ring: %d sequences: %s", S, toks ? err : "out of memory");
        tps = -1;
    }
    ring_head_close(&h);
    for (int g = 0; g < G; g++)
        session_mb_free(mb[g]);
    for (int i = S - 1; i >= 0; i--)
        session_free(ss[i]);
    free(toks);
    return tps;
}

/* --seqs: each count, pipelined and batched, alternating within each repetition. */
static int measure_seqs(const struct opts *o, const model *m, const ring_set *rs)
{
    const int n = o->n_seqs, R = o->reps;
    double *v = calloc(5 * (size_t)n * (size_t)R, sizeof *v), spread;
    kern_ctx *kc = kern_ctx_create(o->ro.n_threads);
    int rc = 1;
    if (!v || !kc) {
        cli_fail("bench ring: out of memory or threads");
        goto out;
    }
    double *pipe = v, *batch = v + n * R, *cpu = v + 2 * n * R, *ratio = v + 3 * n * R, ignored;
    /* untimed: the workers' first session pays for their start */
    if (decode_seqs_once(o, m, kc, rs, o->seqs[0], true, &ignored) < 0)
        goto out;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) {
            int k = r % 2 ? n - 1 - j : j;
            for (int half = 0; half < 2; half++) {
                bool pipelined = (half == 0) == ((r + j) % 2 == 0);
                double t = decode_seqs_once(o, m, kc, rs, o->seqs[k], pipelined,
                                            pipelined ? &cpu[k * R + r] : &ignored);
                if (t < 0)
                    goto out;
                (pipelined ? pipe : batch)[k * R + r] = t;
            }
        }
    /* pair by pair, before the medians sort the figures */
    for (int k = 0; k < n * R; k++)
        ratio[k] = pipe[k] / pipe[k % R];
    char what[64], op[64];
    snprintf(what, sizeof what, "%d devices", o->n_dev);
    for (int k = 0; k < n; k++) {
        const int S = o->seqs[k];
        double *tmp = ratio + k * R;
        double *figures[3] = {pipe + k * R, batch + k * R, cpu + k * R};
        static const char *const names[3] = {"seqs %d pipelined", "seqs %d batched",
                                             "cpu seqs %d"};
        for (int f = 0; f < 3; f++) {
            double med = bench_median_spread(figures[f], R, &spread);
            snprintf(op, sizeof op, names[f], S);
            report(o, op, what, o->ro.n_threads, med, f == 2 ? "ms/tok" : "tok/s", spread);
        }
        if (k == 0)
            continue;
        double med = bench_median_spread(tmp, R, &spread);
        snprintf(op, sizeof op, "seqs %d speedup", S);
        report(o, op, what, o->ro.n_threads, med, "x", -1);
        snprintf(op, sizeof op, "seqs %d speedup lowest", S);
        report(o, op, what, o->ro.n_threads, tmp[0], "x", -1);
        snprintf(op, sizeof op, "seqs %d speedup highest", S);
        report(o, op, what, o->ro.n_threads, tmp[R - 1], "x", -1);
    }
    rc = 0;
out:
    kern_ctx_free(kc);
    free(v);
    return rc;
}

static int run(int argc, char **argv)
{
    struct opts o;
    memset(&o, 0, sizeof o);
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    /* Workers first: they are forked, and this process has no threads yet. */
    /* Plaintext workers on loopback always; with a key, a second set that holds it. */
    local_workers w = {.n = 0}, wk = {.n = 0};
    serve_opts so = {.model_path = o.worker_model ? o.worker_model : o.ro.model,
                     .host = "127.0.0.1", .listen_fd = -1, .threads = o.ro.n_threads,
                     .method = o.ra.method, .insecure = true, .quiet = true};
    serve_opts sk = so;
    sk.key_file = o.ra.key_file;
    sk.insecure = false;
    /* Only an explicit --key adds the keyed ring ($PRIMA_KEY_FILE alone would double the
     * workers of an experiment that did not ask for it). */
    bool keyed = o.ra.key_file && o.ra.key.set && o.n_dev > 1;
    char err[512];
    if (local_workers_start(&w, o.n_dev - 1, &so, o.cgroup, serve_worker, err, sizeof err) ||
        (keyed &&
         local_workers_start(&wk, o.n_dev - 1, &sk, o.cgroup, serve_worker, err, sizeof err))) {
        local_workers_stop(&w);
        run_opts_free(&o.ro);
        return cli_fail("bench ring: %s", err);
    }
    char list[PRIMA_MAX_DEVICES * 24], klist[PRIMA_MAX_DEVICES * 24];
    local_workers_list(&w, list, sizeof list);
    local_workers_list(&wk, klist, sizeof klist);
    ring_set plain = {&w, list, false}, keyed_ring = {&wk, klist, true};
    model *m = model_load(o.ro.model, err, sizeof err);
    if (!m)
        rc = cli_fail("%s", err);
    else if (run_opts_apply_kv(&o.ro, m, err, sizeof err))
        rc = cli_fail("%s", err);
    else if (o.n_seqs)
        rc = measure_seqs(&o, m, &plain);
    else
        rc = measure(&o, m, &plain, keyed ? &keyed_ring : NULL);
    model_free(m);
    local_workers_stop(&w);
    local_workers_stop(&wk);
    run_opts_free(&o.ro);
    return rc;
}

const struct bench_sub bench_ring = {
    "ring", "decode ms/token of a ring on this machine vs one device, and each device's faults", run};
