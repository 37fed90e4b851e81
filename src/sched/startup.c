/* startup.c — the head's planner and the worker's profile service (startup.h). */
#include <stdarg.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/stats.h"
#include "sched/experts.h"
#include "sched/halda.h"
#include "sched/jsonfile.h"
#include "sched/measure.h"
#include "sched/report.h"
#include "sched/shape.h"
#include "sched/startup.h"
#include "util/logline.h"

/* Link probes: a tiny payload for the delay, and a batch's worth of decode hops (bounded by the
 * protocol) for the throughput; the median of PROBE_REPS round trips each. */
#define PROBE_SMALL 8
#define PROBE_HOPS 64
#define PROBE_REPS 5

static void say(const sched_planner *sp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const sched_planner *sp, const char *fmt, ...)
{
    if (!sp->log)
        return;
    va_list ap;
    va_start(ap, fmt);
    log_vline(sp->log, "prima: ", fmt, ap);
    va_end(ap);
}

static void progress(const sched_planner *sp, int d, const char *what, double done)
{
    if (sp->progress)
        sp->progress(sp->progress_ctx, d, what, done);
}

/* profile_opts.progress for the head's own profile. */
static void head_progress(void *ctx, const char *what, double done)
{
    progress(ctx, 0, what, done);
}

/* The head's link to worker d: round-trip delay, and throughput from how much longer a large
 * payload takes than a tiny one (each goes there and back). */
static int probe_link(ring *r, int d, double hop_bytes, double *rtt, double *bw)
{
    size_t big = (size_t)(hop_bytes * PROBE_HOPS);
    if (big > RING_PROBE_MAX)
        big = RING_PROBE_MAX;
    double t_small, t_big;
    if (ring_probe(r, d, PROBE_SMALL, PROBE_REPS, &t_small) ||
        ring_probe(r, d, big, PROBE_REPS, &t_big))
        return -1;
    *rtt = t_small;
    /* a difference below a microsecond is below what the clock and scheduler resolve */
    double extra = t_big - t_small > 1e-6 ? t_big - t_small : 1e-6;
    *bw = 2.0 * (double)(big - PROBE_SMALL) / extra;
    return 0;
}

/* profile_measure, through the profile cache when there is one (startup.h). *cached says
 * whether the file gave the profile. */
static int profile_get(const char *cache, const profile_opts *po, dev_profile *p, bool *cached,
                       char *err, size_t errlen)
{
    *cached = false;
    char why[400];
    if (cache) {
        cJSON *j;
        int got = json_file_read(cache, RING_PROFILE_MAX, &j, why, sizeof why);
        if (got < 0) {
            snprintf(err, errlen, "profile cache %s", why);
            return -1;
        }
        if (got == 0) {
            char what[320];
            snprintf(what, sizeof what, "profile cache %s", cache);
            int bad = j ? profile_from_json(j, p, what, why, sizeof why) : -1;
            cJSON_Delete(j);
            if (bad) {
                if (!j)
                    snprintf(why, sizeof why, "%s: not JSON", what);
                snprintf(err, errlen, "%s: not a device profile (delete it, or give another "
                         "file)", why);
                return -1;
            }
            if (profile_matches(p, po)) {
                *cached = true;
                return profile_memory(p, err, errlen);
            }
        }
    }
    if (profile_measure(po, p, err, errlen))
        return -1;
    if (!cache)
        return 0;
    cJSON *j = profile_to_json(p);
    int bad = json_file_write(cache, j, why, sizeof why);
    cJSON_Delete(j);
    if (bad)
        snprintf(err, errlen, "profile cache %s", why);
    return bad;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The VRAM the device may use is what the planner plans with. */
static void cap_vram(dev_profile *p, const offload_opts *gpu)
{
    if (gpu->vram_cap && gpu->vram_cap < p->vram_free)
        p->vram_free = gpu->vram_cap;
}

/* A model of experts' routing curve (experts.h), measured before the first plan (or read from
 * the calibration cache) and kept for the later ones. Without it the plan takes the routing as
 * even: said, not fatal. */
static void calibrate(sched_planner *sp, const ring *r, sched_model *sm)
{
    if (!sp->experts_tried) {
        sp->experts_tried = true;
        char why[256];
        double t0 = now_s();
        int threads = sp->head_threads > 0 ? sp->head_threads : 1;
        sched_calib_info ci;
        if (sched_calibrate_kept(sp->m, ring_get_model(r)->identity, threads, false,
                                 sp->expert_cover, &ci, why, sizeof why)) {
            memset(sp->expert_cover, 0, sizeof sp->expert_cover);
            say(sp, "scheduler: %s; planning with the routing spread evenly over the experts",
                why);
        } else {
            if (ci.warning[0])
                say(sp, "scheduler: %s", ci.warning);
            char how[4300];
            if (ci.cached)
                snprintf(how, sizeof how, "from %s", ci.entry);
            else
                snprintf(how, sizeof how, "calibrated in %.1f s%s%s", now_s() - t0,
                         ci.stored ? " and saved in " : "", ci.stored ? ci.entry : "");
            say(sp, "scheduler: expert routing %s: the hottest quarter of the experts takes "
                "%.0f %% of the routings, the hottest half %.0f %%", how,
                100 * sp->expert_cover[SCHED_COVER_POINTS / 4],
                100 * sp->expert_cover[SCHED_COVER_POINTS / 2]);
        }
    }
    memcpy(sm->expert_cover, sp->expert_cover, sizeof sm->expert_cover);
}

static int plan_ring(sched_planner *sp, ring *r, const ring_plan_request *q, ring_plan *out,
                     bool *drop, char *err, size_t errlen)
{
    int n = q->n_dev;
    sp->n_left_out = 0;
    if (n == 1) {   /* one device: its windows only split its own work into k rounds */
        uint64_t mem[1] = {0};
        return plan_by_memory(out, 1, q->n_layer, q->k, mem, err, errlen);
    }
    if (q->k > q->n_layer) {
        snprintf(err, errlen, "scheduler: %d rounds (k) exceed the model's %d layers", q->k, q->n_layer);
        return -1;
    }
    sched_model sm;
    if (sched_model_from(sp->m, q->n_ctx, q->max_batch, q->n_seq, q->wire == WIRE_F16 ? 2 : 4,
                         &sm, err, errlen))
        return -1;
    if (sm.expert_share > 0)
        calibrate(sp, r, &sm);
    dev_profile *prof = calloc((size_t)n, sizeof *prof);
    dev_cost *dc = calloc((size_t)n, sizeof *dc);
    halda_result *hr = calloc(1, sizeof *hr);
    char *json = malloc(RING_PROFILE_MAX);
    double rtt[PRIMA_MAX_DEVICES] = {0}, bw[PRIMA_MAX_DEVICES] = {0};
    int rc = -1;
    if (!prof || !dc || !hr || !json) {
        snprintf(err, errlen, "scheduler: out of memory");
        goto done;
    }
    if (!sp->head_measured) {
        profile_opts po = {.model_path = sp->model_path, .threads = sp->head_threads,
                           .gpu = sp->gpu.use, .gpu_index = sp->gpu.index,
                           .progress = head_progress, .progress_ctx = sp};
        bool cached;
        if (!sp->profile_cache)
            say(sp, "scheduler: profiling this device (the head)");
        if (profile_get(sp->profile_cache, &po, &sp->head, &cached, err, errlen))
            goto done;
        progress(sp, 0, NULL, 1);
        if (sp->profile_cache)
            say(sp, "scheduler: this device's profile (the head) %s %s",
                cached ? "from" : "measured and saved in", sp->profile_cache);
        cap_vram(&sp->head, &sp->gpu);
        sp->head_measured = true;
    }
    prof[0] = sp->head;
    for (int d = 1; d < n; d++) {
        const char *addr = ring_worker_addr(r, d);
        sched_known *k = NULL;
        for (int i = 0; i < sp->n_known && !k; i++)
            if (!strcmp(sp->known[i].addr, addr))
                k = &sp->known[i];
        if (k) {
            prof[d] = k->p;
            rtt[d] = k->rtt;
            bw[d] = k->bw;
            continue;
        }
        say(sp, "scheduler: profiling device %d", d);
        progress(sp, d, "measuring itself", -1);
        if (ring_worker_profile(r, d, q->worker_threads, json, RING_PROFILE_MAX)) {
            snprintf(err, errlen, "%s", ring_error(r));
            goto done;
        }
        cJSON *j = cJSON_Parse(json);
        char what[32];
        snprintf(what, sizeof what, "device %d's profile", d);
        int bad = j ? profile_from_json(j, &prof[d], what, err, errlen) : -1;
        if (!j)
            snprintf(err, errlen, "%s is not JSON", what);
        cJSON_Delete(j);
        if (bad)
            goto done;
        progress(sp, d, "probing its link", -1);
        if (probe_link(r, d, sm.hop_bytes, &rtt[d], &bw[d])) {
            snprintf(err, errlen, "%s", ring_error(r));
            goto done;
        }
        progress(sp, d, NULL, 1);
        if (sp->n_known < PRIMA_MAX_DEVICES) {
            k = &sp->known[sp->n_known++];
            snprintf(k->addr, sizeof k->addr, "%s", addr);
            k->p = prof[d];
            k->rtt = rtt[d];
            k->bw = bw[d];
        }
    }
    /* Every hop is charged to its sender. The head measures only its own links; a hop between
     * two workers goes through both of their links, so it gets their mean delay and the lower
     * throughput (exact for a star network such as Wi-Fi with a wired or close head). */
    for (int m = 0; m < n; m++) {
        int a = m == 0 ? 1 : m, b = m == 0 || m == n - 1 ? a : m + 1;
        prof[m].net_rtt = (rtt[a] + rtt[b]) / 2;
        prof[m].net_bw = bw[a] < bw[b] ? bw[a] : bw[b];
        char name[64];
        snprintf(name, sizeof name, "%d:%.50s", m, prof[m].name);
        snprintf(prof[m].name, sizeof prof[m].name, "%s", name);
        if (cost_device(&sm, &prof[m], &sp->opts, m == 0, &dc[m], err, errlen))
            goto done;
    }
    sched_opts o = sp->opts;
    o.k = q->k;
    o.prefetch = q->prefetch;
    if (halda_solve(dc, n, &sm, &o, hr) || halda_explain(dc, n, &sm, &o, hr)) {
        snprintf(err, errlen, "scheduler: %s", hr->why);
        goto done;
    }
    if (!hr->found) {
        snprintf(err, errlen, "scheduler: %s (give layer windows by hand)", hr->why);
        goto done;
    }
    if (sp->log)
        plan_report_text(sp->log, hr, dc, n, &sm);
    if (sp->stats)
        stats_emit(sp->stats, "plan", plan_report_json(hr, dc, n, &sm));
    *out = hr->plan;
    /* Every device is told the budget with which its release policy keeps exactly the layers
     * the cost model counted resident: a streaming device its share, one that fits all of its
     * layers (its own measure of free memory, taken later and after profiling, may be lower). */
    for (int d = 0; d < n; d++) {
        const dev_result *dr = &hr->cost.dev[d];
        out->weight_budget[d] = device_weight_budget(ring_get_model(r), out, d,
                                                     dr->overloaded ? dr->resident_layers : dr->layers);
    }
    for (int d = 1; d < n; d++) {
        drop[d] = !hr->cost.dev[d].in_ring;
        if (hr->left_out[d][0]) {
            struct sched_left_out *lo = &sp->left_out[sp->n_left_out++];
            snprintf(lo->addr, sizeof lo->addr, "%s", ring_worker_addr(r, d));
            snprintf(lo->why, sizeof lo->why, "%s", hr->left_out[d]);
        }
    }
    rc = 0;
done:
    free(prof);
    free(dc);
    free(hr);
    free(json);
    return rc;
}

/* ring_planner.plan: the time it takes is the scheduler's, reported apart from loading. */
static int plan(void *ctx, ring *r, const ring_plan_request *q, ring_plan *out, bool *drop,
                char *err, size_t errlen)
{
    sched_planner *sp = ctx;
    double t0 = now_s();
    int rc = plan_ring(sp, r, q, out, drop, err, errlen);
    progress(sp, 0, NULL, rc ? 0 : 1);   /* a part a failure cut short ends too */
    sp->seconds += now_s() - t0;
    return rc;
}

void sched_planner_init(sched_planner *sp, const model *m, const char *model_path,
                        int head_threads, FILE *log)
{
    memset(sp, 0, sizeof *sp);
    sp->rp = (ring_planner){.ctx = sp, .plan = plan};
    sp->m = m;
    sp->model_path = model_path;
    sp->head_threads = head_threads;
    sp->opts = sched_opts_default();
    sp->log = log;
}

void sched_profiler_init(sched_profiler *sp, const char *model_path)
{
    memset(sp, 0, sizeof *sp);
    sp->model_path = model_path;
}

int sched_profiler_serve(void *ctx, int threads, char *json, size_t cap, char *err, size_t errlen)
{
    sched_profiler *sp = ctx;
    if (!sp->measured || sp->threads != threads) {
        profile_opts po = {.model_path = sp->model_path, .threads = threads,
                           .gpu = sp->gpu.use, .gpu_index = sp->gpu.index};
        bool cached;
        if (profile_get(sp->profile_cache, &po, &sp->p, &cached, err, errlen))
            return -1;
        cap_vram(&sp->p, &sp->gpu);
        sp->measured = true;
        sp->threads = threads;
        /* The probes' buffers are freed, but the allocator keeps their pages (in the arenas of
         * the threads that used them, and below a threshold that their size raised): 90 MB and
         * more would stay resident in a worker that has all its memory to give to weights. */
        malloc_trim(0);
    } else if (profile_memory(&sp->p, err, errlen)) {
        return -1;
    }
    cJSON *j = profile_to_json(&sp->p);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!text || strlen(text) >= cap) {
        snprintf(err, errlen, "profile: %s", text ? "too large to send" : "out of memory");
        free(text);
        return -1;
    }
    strcpy(json, text);
    free(text);
    return 0;
}
