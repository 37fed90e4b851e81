/* prima plan — Halda offline: plan a model on saved device profiles (what-if planning). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/run_opts.h"
#include "sched/experts.h"
#include "sched/report.h"
#include "sched/shape.h"

/* A profile is a few KiB; anything far larger is not one. */
#define MAX_PROFILE_BYTES (1 << 20)

static const char usage_head[] =
    "usage: prima plan -m FILE --device A.json [--device B.json ...] [options]\n"
    "\n"
    "Run the layer scheduler (Halda) on saved device profiles (prima profile -m FILE --json)\n"
    "and print the plan: for each device in ring order (the first is the head) its window\n"
    "(layers per round), GPU layers, layers in all and kept resident (a fraction: the start of\n"
    "a layer whose rest streams), device set (M1-M3: reads\n"
    "weights from disk every token; M4: fits in memory), expected memory (anonymous: buffers,\n"
    "KV cache; page cache: weights kept resident; budget: available memory minus the reserve)\n"
    "and disk reads per token; the rounds k; the predicted time per token and its terms\n"
    "(compute, memory access, GPU, disk, network, the head's embedding/output/sampling); which\n"
    "devices compute nothing and why. A plan that fits every budget is chosen whenever one\n"
    "exists; otherwise the plan says which devices read from disk and how much. A plan that\n"
    "puts every layer on one device other than the head has that device decode on its own\n"
    "(no hop per token; the head's work done there); each device alone is tried, and the\n"
    "predictions are printed: decoding there, relayed through the head, the head alone.\n"
    "A device under a CPU quota whose work per token fits both one quota period and its\n"
    "share of the token, and which reads nothing from disk, computes at full speed, and the\n"
    "plan says so.\n"
    "\n";
static const char usage_tail[] =
    "\n"
    "Exit status: 0 with a plan, 1 if no plan exists or an input cannot be read, 2 on a usage\n"
    "error.\n";

static int load_profile(const char *path, dev_profile *p, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "plan: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    char *buf = malloc(MAX_PROFILE_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_PROFILE_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf || n > MAX_PROFILE_BYTES) {
        snprintf(err, errlen, "plan: %s: %s", path, buf ? "larger than 1 MiB, not a profile" : "out of memory");
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    if (!j) {
        snprintf(err, errlen, "plan: %s: not valid JSON", path);
        return -1;
    }
    int rc = profile_from_json(j, p, path, err, errlen);
    cJSON_Delete(j);
    return rc;
}

static int parse_net(const char *s, sched_opts *o)
{
    char *end;
    double rtt = strtod(s, &end);
    if (end == s || *end != ',')
        return -1;
    const char *b = end + 1;
    double mbit = strtod(b, &end);
    if (end == b || *end || !(rtt >= 0 && rtt <= 60000) || !(mbit > 0 && mbit <= 1e6))
        return -1;
    o->net_rtt = rtt / 1e3;
    o->net_bw = mbit * 1e6 / 8;
    return 0;
}

/* The prediction of the plan of windows lw (-lw), as a halda_result the reports print: not
 * searched (no integer program). 0, or -1 with the error printed. */
static int given_plan(const dev_cost *dc, int n_dev, const sched_model *sm, const sched_opts *o,
                      const int *lw, const int *gl, halda_result *r)
{
    memset(r, 0, sizeof *r);
    r->one_device = -1;
    char err[320];
    if (plan_from_windows(&r->plan, n_dev, sm->n_layer, lw, gl, o->k, err, sizeof err)) {
        cli_fail("plan: -lw %s", err);
        return -1;
    }
    cost_eval(dc, sm, o, &r->plan, &r->cost);
    if (!r->cost.feasible) {
        cli_fail("plan: -lw: %s", r->cost.why);
        return -1;
    }
    r->found = r->fits = true;
    for (int m = 0; m < n_dev; m++)
        r->fits &= !r->cost.dev[m].overloaded;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The routing curve of model m (of experts) through the calibration cache (sched/experts.h),
 * keyed by the file's manifest (computed once and cached, as a ring's start does); where it came
 * from is said on stderr, stdout being the plan's. 0, or -1 with err. */
static int calibrate_routing(const model *m, bool fresh, double *cover, char *err, size_t errlen)
{
    const gguf_file *f = m->file;
    manifest *mf = manifest_for_file(f->path, f->map, f->size, f->data_offset, err, errlen);
    sched_calib_info *ci = malloc(sizeof *ci);
    if (!mf || !ci) {
        if (mf)
            snprintf(err, errlen, "out of memory");
        manifest_free(mf);
        free(ci);
        return -1;
    }
    double t0 = now_s();
    int rc = sched_calibrate_kept(m, mf->root, default_threads(), fresh, cover, ci, err, errlen);
    manifest_free(mf);
    if (!rc && ci->warning[0])
        fprintf(stderr, "plan: %s\n", ci->warning);
    if (!rc && ci->cached)
        fprintf(stderr, "plan: expert routing from %s\n", ci->entry);
    else if (!rc)
        fprintf(stderr, "plan: expert routing calibrated in %.1f s%s%s\n", now_s() - t0,
                ci->stored ? " and saved in " : "", ci->stored ? ci->entry : "");
    free(ci);
    return rc;
}

typedef struct plan_args {
    const char *model_path;
    const char *devices[PRIMA_MAX_DEVICES];
    int n_dev, n_ctx, n_batch;
    bool json, calibrate, recalibrate;
    int lw[PRIMA_MAX_DEVICES], gl[PRIMA_MAX_DEVICES], n_lw, n_gl;
    sched_opts o;
} plan_args;

static int parse_device(void *dst, const char *flag, const char *v)
{
    plan_args *a = dst;
    (void)flag;
    if (a->n_dev == PRIMA_MAX_DEVICES)
        return cli_usage_error("plan", "more than %d devices", PRIMA_MAX_DEVICES), -1;
    a->devices[a->n_dev++] = v;
    return 0;
}

static int parse_lw(void *dst, const char *flag, const char *v)
{
    plan_args *a = dst;
    return parse_counts_arg(flag, v, a->lw, &a->n_lw);
}

static int parse_gl(void *dst, const char *flag, const char *v)
{
    plan_args *a = dst;
    return parse_counts_arg(flag, v, a->gl, &a->n_gl);
}

static int parse_reserve(void *dst, const char *flag, const char *v)
{
    plan_args *a = dst;
    char *end;
    a->o.reserve = strtod(v, &end);
    if (*end || end == v || !(a->o.reserve >= 0 && a->o.reserve <= 0.9))
        return cli_usage_error("plan", "%s wants a fraction from 0 to 0.9, not '%s'", flag, v), -1;
    return 0;
}

static int parse_limit(void *dst, const char *flag, const char *v)
{
    plan_args *a = dst;
    float limit;
    if (parse_float_arg(flag, v, &limit))
        return -1;
    if (!(limit > 0 && limit <= 86400))
        return cli_usage_error("plan", "%s wants seconds from 0 to 86400, not '%s'", flag, v), -1;
    a->o.time_limit = limit;
    return 0;
}

static int parse_net_arg(void *dst, const char *flag, const char *v)
{
    if (parse_net(v, &((plan_args *)dst)->o))
        return cli_usage_error("plan", "%s wants RTT_MS,MBIT (e.g. 5,100), not '%s'", flag, v), -1;
    return 0;
}

#define F(field) offsetof(plan_args, field)
static const cli_opt plan_rows[] = {
    {"-m", "FILE", CLI_STR, F(model_path), .help = "the GGUF model"},
    {"--device", "FILE", CLI_FN, .fn = parse_device,
     .help = "a device profile (JSON); give one per device, head first (at\nmost 32)"},
    {"-k", "K", CLI_INT, F(o.k), 1, 1 << 20,
     .help = "force K rounds (default: the best k from 1 to the layer count)"},
    {"-lw --layer-window", "W,W,...", CLI_FN, .fn = parse_lw,
     .help = "do not search: predict the plan of these windows (one per\n"
             "device, head first, as prima run -lw takes them; -k must then\nmatch)"},
    {"--gpu-layers", "N,N,...", CLI_FN, .fn = parse_gl,
     .help = "with -lw: of each device's window, the layers on its GPU"},
    {"-c --ctx-size", "N", CLI_INT, F(n_ctx), 1, 1 << 24,
     .help = "context positions the KV cache holds (default: min(4096, the\n"
             "model's training context))"},
    {"-b --batch-size", "N", CLI_INT, F(n_batch), 1, 1 << 16,
     .help = "largest batch of prompt tokens, sizes the buffers (default 512)"},
    {"--reserve", "F", CLI_FN, .fn = parse_reserve,
     .help = "fraction of available memory left to other programs (default\n0.03)"},
    {"--net", "RTT_MS,MBIT", CLI_FN, .fn = parse_net_arg,
     .help = "link for hops whose profile has no network measurement\n"
             "(default 5,100: 5 ms round trip, 100 Mbit/s)"},
    {"--fixed-ring", NULL, CLI_FLAG, F(o.fixed_ring),
     .help = "devices cannot be bypassed: one left out still forwards\nactivations"},
    {"--allow-disk", NULL, CLI_FLAG, F(o.allow_disk),
     .help = "choose the fastest predicted plan even if it reads from disk\n"
             "while one that fits in memory exists"},
    {"--no-prefetch", NULL, CLI_UNSET, F(o.prefetch),
     .help = "plan for a ring run with --no-prefetch: a device that streams\n"
             "layers reads none of them while the others compute"},
    {"--time-limit", "S", CLI_FN, .fn = parse_limit,
     .help = "seconds the search may take (default 30); a search cut short\n"
             "prints the best plan it found, marked as not proven the fastest\n"
             "(or, with none found, an error that names the limit)"},
    {"--calibrate", NULL, CLI_FLAG, F(calibrate),
     .help = "a model of experts: plan the devices that keep only their\n"
             "hottest experts with how it routes, as a ring's head does: from\n"
             "the calibration cache (in $PRIMA_CACHE_DIR, $XDG_CACHE_HOME/prima\n"
             "or ~/.cache/prima; a ring's start or an earlier --calibrate keeps\n"
             "it there), else measured here on a short built-in text and kept\n"
             "(default: the routing spread evenly over the experts)"},
    {"--recalibrate", NULL, CLI_FLAG, F(recalibrate),
     .help = "--calibrate, measuring the routing even when the cache holds it\n"
             "(and replacing the cached one)"},
    {"--json", NULL, CLI_FLAG, F(json),
     .help = "the plan as one JSON object (found, why | k, fits, tpot, terms,\n"
             "devices[], one_device, solve_seconds, integer_programs,\n"
             "cut_by_time_limit); times in seconds, sizes in bytes"},
    {0},
};
#undef F
static const cli_group plan_group = {NULL, plan_rows, NULL};

static int run(int argc, char **argv)
{
    plan_args *pa = calloc(1, sizeof *pa);
    if (!pa)
        return cli_fail("plan: out of memory");
    pa->n_batch = 512;
    pa->o = sched_opts_default();
    const cli_set set = {.g = &plan_group, .dst = pa};
    int prc = cli_opts_parse("plan", &set, 1, argc, argv, usage_head, usage_tail, NULL);
    plan_args a = *pa;
    free(pa);
    if (prc)
        return prc < 0 ? 0 : prc;
    const char *model_path = a.model_path;
    const char *const *devices = a.devices;
    int n_dev = a.n_dev, n_ctx = a.n_ctx, n_batch = a.n_batch;
    bool json = a.json;
    const int *lw = a.lw, *gl = a.gl;
    int n_lw = a.n_lw, n_gl = a.n_gl;
    sched_opts o = a.o;
    if (!model_path || !n_dev)
        return cli_usage_error("plan", "%s", "needs -m FILE and at least one --device FILE");
    if (n_lw && n_lw != n_dev) {
        cli_fail("plan: -lw gives %d window(s) for %d device(s) (head first; see prima plan "
                 "--help)", n_lw, n_dev);
        return 2;
    }
    if (n_gl && n_gl != n_lw)
        return cli_usage_error("plan", "%s", "--gpu-layers needs -lw, with a count for every device");

    char err[512];
    model *m = model_load(model_path, err, sizeof err);
    if (!m)
        return cli_fail("plan: %s", err);
    if (o.k > m->hp.n_layer) {
        cli_fail("plan: -k %d exceeds the model's %d layers", o.k, m->hp.n_layer);
        model_free(m);
        return 2;
    }
    if (!n_ctx)
        n_ctx = m->hp.n_ctx_train > 0 && m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    sched_model sm;
    int rc = sched_model_from(m, n_ctx, n_batch, 1, 4, &sm, err, sizeof err);
    bool calibrate = a.calibrate || a.recalibrate;
    if (!rc && calibrate)
        rc = calibrate_routing(m, a.recalibrate, sm.expert_cover, err, sizeof err);
    model_free(m);
    if (rc)
        return cli_fail("%s%s", calibrate ? "plan: " : "", err);

    dev_cost dc[PRIMA_MAX_DEVICES];
    for (int d = 0; d < n_dev; d++) {
        dev_profile p;
        if (load_profile(devices[d], &p, err, sizeof err) ||
            cost_device(&sm, &p, &o, d == 0, &dc[d], err, sizeof err))
            return cli_fail("%s", err);
    }
    halda_result r;
    if (n_lw) {
        if (given_plan(dc, n_dev, &sm, &o, lw, n_gl ? gl : NULL, &r))
            return 1;
    } else if (halda_solve(dc, n_dev, &sm, &o, &r) || halda_explain(dc, n_dev, &sm, &o, &r)) {
        return cli_fail("plan: %s", r.why[0] ? r.why : "the solver failed");
    }
    if (json) {
        cJSON *j = plan_report_json(&r, dc, n_dev, &sm);
        char *s = cJSON_Print(j);
        puts(s);
        free(s);
        cJSON_Delete(j);
    } else if (r.found)
        plan_report_text(stdout, &r, dc, n_dev, &sm);
    if (!r.found && !json)
        return cli_fail("plan: %s", r.why);
    return r.found ? 0 : 1;
}

const struct cli_command cli_cmd_plan = {"plan", "plan a model on saved device profiles (Halda)", run};
