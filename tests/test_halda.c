/* Halda against exhaustive search: on hand-made devices (2-5 of them, 3-8 layers) every
 * window, GPU split and round count is evaluated with cost_eval, and Halda's plan must reach the
 * same optimum. Also: infeasible set-ups, forced k, a hand-computed cost_eval, devices under a
 * CPU quota, determinism. */
#include <math.h>
#include <string.h>

#include "sched/experts.h"
#include "sched/halda.h"
#include "sched/report.h"
#include "test.h"

#define MIB (1024.0 * 1024.0)

static unsigned long long rng_state;

static double urand(void)   /* deterministic, in [0, 1) */
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static sched_model small_model(int n_layer)
{
    sched_model sm = {.n_layer = n_layer, .n_embd = 4096, .n_vocab = 32000};
    sm.layer_params[DT_Q4_K] = 200e6;
    sm.layer_bytes = 100 * MIB;
    sm.kv_bytes = 8 * MIB;
    sm.kv_read = 2 * MIB;
    sm.out_params = 131e6;
    sm.out_type = DT_Q6_K;
    sm.out_bytes = 60 * MIB;
    sm.head_page = 70 * MIB;
    sm.embd_row_bytes = 4096 * 0.5625;
    sm.hop_bytes = 4096 * 4;
    sm.proc_bytes = 40 * MIB;
    sm.head_bytes = 10 * MIB;
    return sm;
}

/* A device with per-layer cost and memory drawn for a scenario of n_layer layers. */
static dev_cost random_device(int m, int n_layer, bool tight)
{
    dev_cost c = {0};
    snprintf(c.name, sizeof c.name, "d%d", m);
    c.cpu_layer = (5 + 45 * urand()) * 1e-3;
    c.cpu_compute = c.cpu_layer * (0.4 + 0.6 * urand());
    c.hop = (0.5 + 10 * urand()) * 1e-3;
    c.os = urand() < 0.3 ? OS_MACOS : OS_LINUX;
    c.disk_bps = urand() < 0.2 ? 0 : (0.3 + 3 * urand()) * 1e9;
    c.fixed_anon = 40 * MIB + (m == 0 ? 10 * MIB : 0);
    c.fixed_page = m == 0 ? 60 * MIB : 0;
    c.head_time = m == 0 ? 3e-3 : 0;
    /* RAM from "half a layer" to "every layer" (tight: at most about a third of the model) */
    double layers = tight ? 0.5 + n_layer * 0.35 * urand() : 0.5 + (n_layer + 1) * urand();
    c.ram = c.fixed_anon + c.fixed_page + layers * 108 * MIB;
    if (urand() < 0.35) {
        c.has_gpu = true;
        c.unified = c.os == OS_MACOS;
        c.gpu_layer = c.cpu_layer * (0.1 + 1.2 * urand());
        c.vram = urand() * n_layer * 0.6 * 108 * MIB;
    }
    return c;
}

/* Some devices of a scenario under a CPU quota: a share of 0.25-0.9 and a period of 20-150 ms,
 * so that either condition of a burst (cost.h) decides in some plans. */
static void add_quotas(dev_cost *dc, int n)
{
    for (int m = 0; m < n; m++)
        if (urand() < 0.4) {
            dc[m].burst = 0.25 + 0.65 * urand();
            dc[m].burst_period = (20 + 130 * urand()) * 1e-3;
        }
}

typedef struct search {
    const dev_cost *dc;
    const sched_model *sm;
    const sched_opts *o;
    int n;
    ring_plan p;
    double best_all, best_fit;   /* optimum over all feasible plans, and over plans without disk */
    long evaluated;
} search;

static void enumerate(search *s, int m)
{
    if (m == s->n) {
        int k = plan_rounds_needed(s->p.window, s->n, s->sm->n_layer);
        if (k == 0 || (s->o->k && k != s->o->k))
            return;
        s->p.k = k;
        /* Halda's plans: a bypassable device in the ring owns a layer (its window is reached) */
        for (int d = 1; d < s->n && !s->o->fixed_ring; d++) {
            int first, last;
            bool owns = false;
            for (int round = 0; round < k; round++) {
                plan_range(&s->p, d, round, &first, &last);
                owns |= last > first;
            }
            if (s->p.window[d] > 0 && !owns)
                return;
        }
        /* relayed through the head, and (head without layers) decoding on one worker */
        for (int alone = 0; alone <= (s->p.window[0] == 0); alone++) {
            s->p.decode_alone = alone;
            cost_result r;
            cost_eval(s->dc, s->sm, s->o, &s->p, &r);
            s->evaluated++;
            if (!r.feasible)
                continue;
            bool fits = true;
            for (int d = 0; d < s->n; d++)
                fits &= !r.dev[d].overloaded;
            if (r.tpot < s->best_all)
                s->best_all = r.tpot;
            if (fits && r.tpot < s->best_fit)
                s->best_fit = r.tpot;
        }
        s->p.decode_alone = false;
        return;
    }
    for (int w = 0; w <= s->sm->n_layer; w++) {
        s->p.window[m] = w;
        int gmax = s->dc[m].has_gpu ? w : 0;
        for (int g = 0; g <= gmax; g++) {
            s->p.gpu_layers[m] = g;
            enumerate(s, m + 1);
        }
    }
}

static bool close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(1, fabs(b));
}

/* Halda equals the exhaustive optimum: over fitting plans first, over all plans otherwise; with
 * near ties balanced (o->tie), within the tolerance of it, fitting in memory if the optimum
 * does. */
static void check_scenario(const dev_cost *dc, int n, const sched_model *sm,
                           const sched_opts *opts, const char *label)
{
    sched_opts exact = *opts;
    exact.tie = 0;
    const sched_opts *o = &exact;
    search s = {dc, sm, o, n, {.n_dev = n, .n_layer = sm->n_layer}, HUGE_VAL, HUGE_VAL, 0};
    enumerate(&s, 0);
    halda_result r;
    double want = o->allow_disk || !isfinite(s.best_fit) ? s.best_all : s.best_fit;
    if (opts->tie > 0) {
        REQUIRE(halda_solve(dc, n, sm, opts, &r) == 0, "%s: %s", label, r.why);
        CHECK(r.found == isfinite(want) &&
                  (!r.found || (r.cost.tpot <= want * (1 + opts->tie) * (1 + 1e-9) &&
                                (r.fits || !isfinite(s.best_fit) || o->allow_disk))),
              "%s, ties balanced: %.6f ms, optimum %.6f ms", label, r.found ? r.cost.tpot * 1e3 : 0,
              want * 1e3);
    }
    REQUIRE(halda_solve(dc, n, sm, o, &r) == 0, "%s: %s", label, r.why);
    if (!isfinite(want)) {
        CHECK(!r.found, "%s: Halda found a plan (%.3f ms) where exhaustive search has none",
              label, r.cost.tpot * 1e3);
        CHECK(strstr(r.why, "no plan") != NULL, "%s: reason \"%s\"", label, r.why);
        return;
    }
    REQUIRE(r.found, "%s: no plan, exhaustive optimum %.4f ms (%s)", label, want * 1e3, r.why);
    CHECK(close_to(r.cost.tpot, want), "%s: Halda %.6f ms, exhaustive optimum %.6f ms (%ld plans)",
          label, r.cost.tpot * 1e3, want * 1e3, s.evaluated);
    /* the plan is valid and its reported cost is the direct evaluation */
    char err[256];
    CHECK(plan_validate(&r.plan, err, sizeof err) == 0, "%s: %s", label, err);
    cost_result again;
    cost_eval(dc, sm, o, &r.plan, &again);
    CHECK(again.feasible && again.tpot == r.cost.tpot, "%s: reported cost differs from evaluation", label);
    CHECK(r.fits == isfinite(s.best_fit) || o->allow_disk, "%s: fits = %d, a fitting plan %s",
          label, r.fits, isfinite(s.best_fit) ? "exists" : "does not exist");
}

static void random_scenarios(void)
{
    static const int shapes[][2] = {{2, 8}, {3, 7}, {3, 5}, {4, 5}, {4, 4}, {5, 4}, {5, 3}};
    rng_state = 12345;
    int count = 0;
    for (int rep = 0; rep < 6; rep++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int n = shapes[s][0], L = shapes[s][1];
            sched_model sm = small_model(L);
            dev_cost dc[5];
            bool tight = rep % 2 == 1;
            for (int m = 0; m < n; m++)
                dc[m] = random_device(m, L, tight);
            sched_opts o = sched_opts_default();
            o.fixed_ring = rep % 3 == 2;
            o.allow_disk = rep == 3;
            o.prefetch = !(rep == 5 || (rep == 3 && s % 2));
            char label[112];
            snprintf(label, sizeof label, "scenario %d (%d devices, %d layers, %s ring%s%s%s)",
                     count++, n, L, o.fixed_ring ? "fixed" : "bypassable", tight ? ", tight" : "",
                     o.allow_disk ? ", disk allowed" : "", o.prefetch ? "" : ", no prefetch");
            check_scenario(dc, n, &sm, &o, label);
            if (rep == 0) {   /* forced rounds */
                o.k = 2;
                strcat(label, ", k=2");
                check_scenario(dc, n, &sm, &o, label);
                o.k = 0;
            }
            {                 /* the same devices, some under a CPU quota */
                add_quotas(dc, n);
                snprintf(label, sizeof label, "scenario %d (%d devices, %d layers, CPU quotas)",
                         count++, n, L);
                check_scenario(dc, n, &sm, &o, label);
            }
        }
    }
}

/* n alike devices for hand-worked cases: 10 ms per layer (compute part given), 1 ms hops, a
 * 1 GB/s disk, ram MiB each, the head's work 2 ms; named PREFIX0, PREFIX1, ... */
static void alike(dev_cost *dc, int n, const char *prefix, double compute, double ram)
{
    for (int m = 0; m < n; m++) {
        dc[m] = (dev_cost){.cpu_layer = 10e-3, .cpu_compute = compute, .hop = 1e-3,
                           .disk_bps = 1e9, .ram = ram * MIB, .head_time = m == 0 ? 2e-3 : 0};
        snprintf(dc[m].name, sizeof dc[m].name, "%s%d", prefix, m);
    }
}

/* Three devices by hand: the expected plan and its cost worked out on paper. */
static void hand_computed(void)
{
    sched_model sm = small_model(6);
    sm.kv_bytes = 0;
    dev_cost dc[3];
    alike(dc, 3, "h", 6e-3, 1000);
    dc[1].cpu_layer = 5e-3;          /* twice as fast */
    dc[1].cpu_compute = 5e-3;
    sched_opts o = sched_opts_default();
    /* a = 1, b = 4, c = 1 in one round: 10 + 20 + 10 ms compute, 3 hops, 2 ms head */
    ring_plan p = {.n_dev = 3, .n_layer = 6, .k = 1, .window = {1, 4, 1}};
    cost_result r;
    cost_eval(dc, &sm, &o, &p, &r);
    REQUIRE(r.feasible, "%s", r.why);
    CHECK(close_to(r.tpot, 45e-3), "tpot %.6f ms, want 45", r.tpot * 1e3);
    CHECK(close_to(r.t_compute, 6e-3 * 2 + 5e-3 * 4) && close_to(r.t_memory, 4e-3 * 2),
          "compute %.3f memory %.3f", r.t_compute * 1e3, r.t_memory * 1e3);
    CHECK(close_to(r.t_net, 3e-3), "net %.3f ms", r.t_net * 1e3);

    /* device 2 gets a budget of 240 MiB: its 40 MiB of buffers and the room for two streamed
     * layers of 100 MiB */
    dc[2].ram = 240 * MIB;
    dc[2].fixed_anon = 40 * MIB;
    ring_plan q = {.n_dev = 3, .n_layer = 6, .k = 1, .window = {1, 1, 4}};
    cost_eval(dc, &sm, &o, &q, &r);
    REQUIRE(r.feasible, "%s", r.why);
    /* device 2 owns 4 layers: 40 + 400 MiB > 240: overloaded; 240 - 40 - 200 keeps none of them
     * resident, so it reads all 4 (400 MiB) and stalls the ring for the 2 beyond the room (the
     * room's 200 MiB are read while the others compute) */
    CHECK(r.dev[2].overloaded && close_to(r.dev[2].disk_bytes, 400 * MIB) &&
          r.dev[2].resident_layers == 0,
          "disk %.1f MiB, %.2f resident", r.dev[2].disk_bytes / MIB, r.dev[2].resident_layers);
    CHECK(close_to(r.dev[2].t_disk, 200 * MIB / 1e9), "disk time %.3f ms", r.dev[2].t_disk * 1e3);
    CHECK(close_to(r.dev[0].t_wait, r.tpot - r.dev[0].t_compute - r.dev[0].t_memory - 2e-3),
          "head waits %.3f ms", r.dev[0].t_wait * 1e3);
    /* without prefetching nothing is read while the others compute: it stalls for all 4 */
    o.prefetch = false;
    cost_eval(dc, &sm, &o, &q, &r);
    CHECK(r.feasible && close_to(r.dev[2].t_disk, 400 * MIB / 1e9), "no prefetch: disk time %.3f ms",
          r.dev[2].t_disk * 1e3);
    o.prefetch = true;
    /* 100 MiB more keeps one of them: it reads three, one beyond the room */
    dc[2].ram = 340 * MIB;
    cost_eval(dc, &sm, &o, &q, &r);
    CHECK(r.feasible && close_to(r.dev[2].resident_layers, 1) && close_to(r.dev[2].disk_bytes, 300 * MIB) &&
          close_to(r.dev[2].t_disk, 100 * MIB / 1e9),
          "340 MiB: %.2f resident, %.1f MiB read", r.dev[2].resident_layers, r.dev[2].disk_bytes / MIB);
    /* 315 MiB: a quarter of a layer short of that one: the budget is filled to the byte, so three
     * quarters of it stay and the ring stalls for the quarter beyond the room */
    dc[2].ram = 315 * MIB;
    cost_eval(dc, &sm, &o, &q, &r);
    CHECK(r.feasible && close_to(r.dev[2].resident_layers, 0.75) &&
          close_to(r.dev[2].disk_bytes, 325 * MIB) && close_to(r.dev[2].t_disk, 125 * MIB / 1e9),
          "315 MiB: %.2f resident, %.1f MiB read", r.dev[2].resident_layers,
          r.dev[2].disk_bytes / MIB);
    /* the streaming room does not fit next to its buffers */
    dc[2].ram = 230 * MIB;
    cost_eval(dc, &sm, &o, &q, &r);
    CHECK(!r.feasible && strstr(r.why, "h2"), "no room for streaming accepted: %s", r.why);
    dc[2].ram = 250 * MIB;

    /* Halda: the fast device should get the most layers and nothing should read from disk */
    halda_result h;
    REQUIRE(halda_solve(dc, 3, &sm, &o, &h) == 0 && h.found, "%s", h.why);
    CHECK(h.fits, "a fitting plan exists but Halda's reads from disk");
    CHECK(h.plan.window[1] * h.plan.k >= 3, "fast device got %d x %d layers", h.plan.window[1], h.plan.k);
}

/* A device under a CPU quota of half its threads, period 100 ms (cost.h: CPU quotas), beside
 * one without: 10 ms per layer each at their sustained rates, the quota device 5 ms at full
 * speed. */
static void quota_bursts(void)
{
    sched_model sm = small_model(8);
    sm.kv_bytes = 0;
    dev_cost dc[2];
    alike(dc, 2, "q", 10e-3, 2000);
    dc[1].burst = 0.5;
    dc[1].burst_period = 0.1;
    sched_opts o = sched_opts_default();
    cost_result r;
    /* 4 + 4: the quota device's 40 ms take 20 at full speed, within 50 ms per period and half
     * of the 40 + 20 + 2 hops + 2 ms = 64 ms token */
    ring_plan p = {.n_dev = 2, .n_layer = 8, .k = 1, .window = {4, 4}};
    cost_eval(dc, &sm, &o, &p, &r);
    CHECK(r.feasible && r.dev[1].burst && !r.dev[0].burst && close_to(r.tpot, 64e-3) &&
              close_to(r.dev[1].t_compute, 20e-3),
          "4/4: burst %d, %.3f ms (want 64), its compute %.3f", r.dev[1].burst, r.tpot * 1e3,
          r.dev[1].t_compute * 1e3);
    /* 2 + 6: 60 ms of sustained work take 30 at full speed, within the period, but the head's 20
     * and the rest make a token of 54 ms, of which half (27) is less than 30: throttled */
    ring_plan s = {.n_dev = 2, .n_layer = 8, .k = 1, .window = {2, 6}};
    cost_eval(dc, &sm, &o, &s, &r);
    CHECK(r.feasible && !r.dev[1].burst && close_to(r.tpot, 84e-3), "2/6: burst %d, %.3f ms "
          "(want 84)", r.dev[1].burst, r.tpot * 1e3);
    /* a shorter period: 20 ms of full-speed work do not fit in 0.5 * 30 ms */
    dc[1].burst_period = 0.03;
    cost_eval(dc, &sm, &o, &p, &r);
    CHECK(r.feasible && !r.dev[1].burst && close_to(r.tpot, 84e-3), "4/4, 30 ms period: burst %d, "
          "%.3f ms (want 84)", r.dev[1].burst, r.tpot * 1e3);
    dc[1].burst_period = 0.1;
    /* Halda: at sustained rates the two are equal (4/4, 84 ms); bursting, the quota device takes
     * as many layers as keep it within half the token: 5 (25 ms of 3 x 10 + 25 + 4 = 59 ms;
     * 6 would be 30 of 54) */
    halda_result h;
    REQUIRE(halda_solve(dc, 2, &sm, &o, &h) == 0 && h.found, "%s", h.why);
    CHECK(h.plan.k == 1 && h.plan.window[0] == 3 && h.plan.window[1] == 5 &&
              h.cost.dev[1].burst && close_to(h.cost.tpot, 59e-3),
          "Halda: k = %d, %d/%d, %.3f ms (want 3/5, 59)", h.plan.k, h.plan.window[0],
          h.plan.window[1], h.cost.tpot * 1e3);
    /* a profile's quota becomes the device's share and period */
    dev_profile pr = {.threads = 2, .cpu_quota = 0.5, .cpu_quota_period = 0.05, .mem_bw = 1e10};
    pr.cpu[DT_Q4_K] = pr.cpu[DT_Q6_K] = (type_rate){1e10, 1e10};
    dev_cost c;
    char err[256];
    REQUIRE(cost_device(&sm, &pr, &o, false, &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.burst == 0.25 && c.burst_period == 0.05, "share %g period %g", c.burst, c.burst_period);
    pr.cpu_quota = 2;
    REQUIRE(cost_device(&sm, &pr, &o, false, &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.burst == 1, "a quota of every thread: share %g", c.burst);
}

/* More layers than memory and disk paths allow. */
static void infeasible(void)
{
    sched_model sm = small_model(6);
    dev_cost dc[2] = {0};
    for (int m = 0; m < 2; m++) {
        snprintf(dc[m].name, sizeof dc[m].name, "tiny%d", m);
        dc[m].cpu_layer = dc[m].cpu_compute = 10e-3;
        dc[m].hop = 1e-3;
        dc[m].ram = 300 * MIB;
        dc[m].fixed_anon = 40 * MIB;
    }
    sched_opts o = sched_opts_default();
    halda_result h;
    REQUIRE(halda_solve(dc, 2, &sm, &o, &h) == 0, "%s", h.why);
    CHECK(!h.found && strstr(h.why, "of 6 layers"), "no disk, 2 x 2 layers of memory: %s", h.why);
    check_scenario(dc, 2, &sm, &o, "infeasible without disk");
    /* with a disk they can stream: a plan exists, and it says who reads how much */
    dc[1].disk_bps = 1e9;
    REQUIRE(halda_solve(dc, 2, &sm, &o, &h) == 0 && h.found, "%s", h.why);
    CHECK(!h.fits && h.cost.dev[1].overloaded && h.cost.dev[1].disk_bytes > 0,
          "device 1 should stream from disk");
    check_scenario(dc, 2, &sm, &o, "streaming device");
}

static void deterministic(void)
{
    rng_state = 777;
    sched_model sm = small_model(16);
    dev_cost dc[4];
    for (int m = 0; m < 4; m++)
        dc[m] = random_device(m, 16, false);
    sched_opts o = sched_opts_default();
    halda_result a, b;
    REQUIRE(halda_solve(dc, 4, &sm, &o, &a) == 0 && halda_solve(dc, 4, &sm, &o, &b) == 0, "solve");
    CHECK(a.found == b.found && !memcmp(&a.plan, &b.plan, sizeof a.plan) &&
          a.cost.tpot == b.cost.tpot, "two solves of the same input differ");
}

/* The largest ring: every device with a GPU, so every column and row kind is in the programs. */
static void many_devices(void)
{
    rng_state = 99;
    sched_model sm = small_model(6);
    dev_cost dc[PRIMA_MAX_DEVICES];
    for (int m = 0; m < PRIMA_MAX_DEVICES; m++) {
        dc[m] = random_device(m, 6, true);
        dc[m].has_gpu = true;
        dc[m].gpu_layer = dc[m].cpu_layer / 2;
        dc[m].vram = 150 * MIB;
    }
    sched_opts o = sched_opts_default();
    halda_result r;
    REQUIRE(halda_solve(dc, PRIMA_MAX_DEVICES, &sm, &o, &r) == 0 && r.found, "%s", r.why);
    char err[256];
    CHECK(plan_validate(&r.plan, err, sizeof err) == 0, "%s", err);
    cost_result again;
    cost_eval(dc, &sm, &o, &r.plan, &again);
    CHECK(again.feasible && again.tpot == r.cost.tpot, "32 devices: reported cost differs");
}

/* The time limit: a search that cannot start reports that no plan was found within it; one
 * cut short returns the best plan found so far, marked, valid, and soon after the limit. */
static void time_limit(void)
{
    rng_state = 2;   /* a search that a third of its time cuts after its first plan */
    enum { N = 8, L = 80 };
    sched_model sm = small_model(L);
    dev_cost dc[N];
    for (int m = 0; m < N; m++)
        dc[m] = random_device(m, L, true);
    sched_opts o = sched_opts_default();
    halda_result r;
    o.time_limit = 1e-9;
    REQUIRE(halda_solve(dc, N, &sm, &o, &r) == 0, "%s", r.why);
    CHECK(!r.found && r.cut && !strcmp(r.why, "no plan found within the solver's time limit of 1e-09 s"),
          "no time at all: found %d cut %d why '%s'", r.found, r.cut, r.why);

    o.time_limit = 30;
    REQUIRE(halda_solve(dc, N, &sm, &o, &r) == 0 && r.found && !r.cut, "%s", r.why);
    double full = r.seconds, best = r.cost.tpot;
    o.time_limit = full / 3;
    REQUIRE(halda_solve(dc, N, &sm, &o, &r) == 0, "%s", r.why);
    /* not cut only if this search happened to finish within the limit */
    CHECK(r.cut || r.seconds <= o.time_limit, "a third of the full search's time (%.3f of %.3f s) "
          "did not cut it: %.3f s", o.time_limit, full, r.seconds);
    CHECK(r.seconds < o.time_limit + 0.5, "cut at %.3f s took %.3f s", o.time_limit, r.seconds);
    if (r.found) {
        char err[256];
        CHECK(plan_validate(&r.plan, err, sizeof err) == 0, "cut plan: %s", err);
        CHECK(r.cost.feasible && r.cost.tpot >= best, "cut plan %.6f beats the optimum %.6f",
              r.cost.tpot, best);
        /* and the report says so */
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        REQUIRE(f, "open_memstream");
        plan_report_text(f, &r, dc, N, &sm);
        fclose(f);
        CHECK(!r.cut || strstr(text, "\n  not proven the fastest: the search stopped at the "
                                      "solver's time limit, and this is the best plan it found\n"),
              "the cut plan is not labelled: %s", text);
        free(text);
    }
    fprintf(stderr, "time limit: full search %.3f s; cut at %.3f s: %s\n", full, o.time_limit,
            r.found ? "best plan so far" : "no plan yet");
}

/* A CPU layer's cost from a profile: the kernels' time, the work besides the matrices at the
 * profile's vector rate (compute), the KV reads and the matrix products' jobs; a profile saved
 * before the vector rate existed (0) leaves that term out. */
static void layer_cost(void)
{
    sched_model sm = small_model(10);
    sm.layer_calls = 14;
    sm.layer_vector = 30000;
    dev_profile p;
    memset(&p, 0, sizeof p);
    p.cpu[DT_Q4_K].matvec = 100e9;
    p.cpu[DT_Q6_K].matvec = 50e9;
    p.mem_bw = 100e9;
    p.dispatch = 2e-6;
    p.vector = 3e8;
    p.mem_total = p.mem_available = 8ULL << 30;
    sched_opts o = sched_opts_default();
    dev_cost dc, old;
    char err[256];
    REQUIRE(cost_device(&sm, &p, &o, false, &dc, err, sizeof err) == 0, "%s", err);
    double kernels = 200e6 / 100e9, vector = 30000 / 3e8;
    CHECK(fabs(dc.cpu_compute - (kernels + vector)) < 1e-12, "compute %g, want %g",
          dc.cpu_compute, kernels + vector);
    double want = kernels + vector + 2 * MIB / 100e9 + 14 * 2e-6;
    CHECK(fabs(dc.cpu_layer - want) < 1e-12, "layer %g, want %g", dc.cpu_layer, want);
    p.vector = 0;
    REQUIRE(cost_device(&sm, &p, &o, false, &old, err, sizeof err) == 0, "%s", err);
    CHECK(fabs(dc.cpu_layer - old.cpu_layer - vector) < 1e-12 &&
              fabs(old.cpu_compute - kernels) < 1e-12, "without a vector rate: layer %g compute %g",
          old.cpu_layer, old.cpu_compute);
}

/* Layers of unequal sizes (cost.h: each in memory at its own): of 8 layers the first four are
 * 80 MiB, the last four 120 (mean 100), on two alike devices of 400 MiB without buffers. At the
 * mean, 4 + 4 fits; in fact device 1's 480 MiB stream: its room is two 120 MiB layers, 160 MiB
 * stay (layer 4 and a third of layer 5), 320 MiB are read per token, the 80 beyond the room
 * while the ring waits. 5 + 3 is faster: device 0 streams 280 MiB (40 beyond its room), device 1
 * holds its 360. Hops of 50 ms keep two rounds (2 + 2: both hold their 400 MiB) slower. The
 * integer programs count the mean (4 + 4 fits there); the plan must still be 5 + 3. */
static void unequal_layers(void)
{
    sched_model sm = small_model(8);
    sm.kv_bytes = 0;
    for (int il = 0; il < 8; il++)
        sm.layer_size[il] = (il < 4 ? 80 : 120) * MIB;
    dev_cost dc[2];
    alike(dc, 2, "u", 10e-3, 400);
    dc[0].hop = dc[1].hop = 50e-3;
    sched_opts o = sched_opts_default();
    ring_plan even = {.n_dev = 2, .n_layer = 8, .k = 1, .window = {4, 4}};
    cost_result r;
    cost_eval(dc, &sm, &o, &even, &r);
    CHECK(r.feasible && !r.dev[0].overloaded && r.dev[1].overloaded &&
              close_to(r.dev[1].resident_layers, 4.0 / 3) && close_to(r.dev[1].disk_bytes, 320 * MIB) &&
              close_to(r.dev[1].t_disk, 80 * MIB / 1e9),
          "4 + 4: device 1 %d, %.3f resident, %.1f MiB read, %.2f ms stall", r.dev[1].overloaded,
          r.dev[1].resident_layers, r.dev[1].disk_bytes / MIB, r.dev[1].t_disk * 1e3);
    halda_result h;
    REQUIRE(halda_solve(dc, 2, &sm, &o, &h) == 0 && h.found, "%s", h.why);
    CHECK(h.plan.k == 1 && h.plan.window[0] == 5 && h.plan.window[1] == 3 &&
              close_to(h.cost.t_disk, 40 * MIB / 1e9),
          "plan k = %d, %d + %d (want 5 + 3), stall %.2f ms", h.plan.k, h.plan.window[0],
          h.plan.window[1], h.cost.t_disk * 1e3);
    for (int w = 1; w < 8; w++) {
        ring_plan p = {.n_dev = 2, .n_layer = 8, .k = 1, .window = {w, 8 - w}};
        cost_eval(dc, &sm, &o, &p, &r);
        CHECK(!r.feasible || r.tpot >= h.cost.tpot * (1 - 1e-9), "%d + %d predicts %.3f ms, "
              "Halda's %.3f", w, 8 - w, r.tpot * 1e3, h.cost.tpot * 1e3);
    }
}

/* Near ties (halda.h): three alike devices of 250 MiB with 1.00, 1.02 and 1.01 GB/s disks for
 * an 18-layer model of 50 MiB layers. Each keeps 3 layers resident beside its room for 2; six
 * layers each stream one beyond the room. Moving layers between them moves that overflow at no
 * other cost, so the fastest plan piles it on the 1.02 GB/s disk; predicted within 3 %, the even
 * plan has no device as busy, and with the default tolerance Halda takes it. */
static void near_ties(void)
{
    sched_model sm = small_model(18);
    sm.kv_bytes = 0;
    sm.layer_bytes = 50 * MIB;
    dev_cost dc[3];
    alike(dc, 3, "t", 10e-3, 250);
    dc[1].disk_bps = 1.02e9;
    dc[2].disk_bps = 1.01e9;
    sched_opts o = sched_opts_default();
    o.tie = 0;
    halda_result exact, tied;
    REQUIRE(halda_solve(dc, 3, &sm, &o, &exact) == 0 && exact.found, "%s", exact.why);
    o.tie = 0.03;
    REQUIRE(halda_solve(dc, 3, &sm, &o, &tied) == 0 && tied.found, "%s", tied.why);
    double most_exact = 0, most_tied = 0;
    for (int m = 0; m < 3; m++) {
        const dev_result *a = &exact.cost.dev[m], *b = &tied.cost.dev[m];
        most_exact = fmax(most_exact, a->t_compute + a->t_memory + a->t_disk);
        most_tied = fmax(most_tied, b->t_compute + b->t_memory + b->t_disk);
    }
    CHECK(exact.plan.window[1] > 6, "the fastest plan gives the 1.02 GB/s disk %d layers",
          exact.plan.window[1]);
    CHECK(tied.plan.k == 1 && tied.plan.window[0] == 6 && tied.plan.window[1] == 6 &&
              tied.plan.window[2] == 6 && most_tied < most_exact &&
              tied.cost.tpot <= exact.cost.tpot * 1.03,
          "near ties: %d/%d/%d (k = %d), %.2f ms against %.2f, busiest %.2f ms against %.2f",
          tied.plan.window[0], tied.plan.window[1], tied.plan.window[2], tied.plan.k,
          tied.cost.tpot * 1e3, exact.cost.tpot * 1e3, most_tied * 1e3, most_exact * 1e3);
}

/* A model of experts (cost.h: Disk): layers of 100 MiB, 20 of them shared and 80 of experts
 * of which a token reads 1/8 (10 MiB): it costs a token 30 MiB of memory traffic, and an
 * overloaded device reads 1/8 of its bytes not kept, or, when even the shared parts do not
 * fit, those and every routed expert; Halda agrees with the exhaustive search on such models. */
static sched_model moe_model(int n_layer)
{
    sched_model sm = small_model(n_layer);
    sm.layer_read = 30 * MIB;
    sm.expert_share = 1.0 / 8;
    return sm;
}

static void experts(void)
{
    sched_model sm = moe_model(6);
    sm.kv_bytes = 0;
    dev_cost dc[3];
    alike(dc, 3, "x", 6e-3, 1000);
    dc[2].ram = 340 * MIB;
    dc[2].fixed_anon = 40 * MIB;
    sched_opts o = sched_opts_default();
    ring_plan q = {.n_dev = 3, .n_layer = 6, .k = 1, .window = {1, 1, 4}};
    cost_result r;
    /* 400 MiB of layers, 100 kept (340 - 40 - the room's 200): 300 MiB not kept, of which a
     * token reads 37.5, none of it ahead */
    cost_eval(dc, &sm, &o, &q, &r);
    CHECK(r.feasible && r.dev[2].overloaded && close_to(r.dev[2].disk_bytes, 37.5 * MIB) &&
              close_to(r.dev[2].t_disk, 37.5 * MIB / 1e9),
          "340 MiB: %.2f MiB read, %.3f ms", r.dev[2].disk_bytes / MIB, r.dev[2].t_disk * 1e3);
    /* 250 MiB: 10 kept, less than the 80 MiB of shared parts: 4 * 30 - 10 = 110 MiB a token */
    dc[2].ram = 250 * MIB;
    cost_eval(dc, &sm, &o, &q, &r);
    CHECK(r.feasible && close_to(r.dev[2].disk_bytes, 110 * MIB),
          "250 MiB: %.2f MiB read", r.dev[2].disk_bytes / MIB);
    /* the kernels stream what a token reads: 30 MiB at 1 GB/s is the floor of a layer (its KV
     * reads aside) */
    sm.kv_read = 0;
    dev_profile p = {.mem_bw = 1e9};
    snprintf(p.name, sizeof p.name, "bw");
    p.cpu[DT_Q4_K].matvec = p.cpu[DT_Q6_K].matvec = 1e12;
    dev_cost c;
    char err[256];
    REQUIRE(cost_device(&sm, &p, &o, false, &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.cpu_layer >= 30 * MIB / 1e9 && c.cpu_layer < 31 * MIB / 1e9,
          "a layer of experts takes %.3f ms at 1 GB/s, want %.3f (30 MiB)", c.cpu_layer * 1e3,
          30 * MIB / 1e6);

    static const int shapes[][2] = {{2, 8}, {3, 6}, {4, 5}};
    rng_state = 777;
    for (int rep = 0; rep < 16; rep++)   /* 8 and 11 need both disk rows */
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int n = shapes[s][0], L = shapes[s][1];
            sched_model m = moe_model(L);
            dev_cost d[4];
            for (int i = 0; i < n; i++)
                d[i] = random_device(i, L, rep % 2 == 1);
            sched_opts so = sched_opts_default();
            so.allow_disk = rep % 4 >= 2;
            char label[96];
            snprintf(label, sizeof label, "experts %d (%d devices, %d layers%s%s)", rep, n, L,
                     rep % 2 ? ", tight" : "", so.allow_disk ? ", disk allowed" : "");
            check_scenario(d, n, &m, &so, label);
        }
}

/* The routing curve of 6 layers of 8 experts whose routings fall as (e + 1)^-skew (Zipf; 0:
 * even), 400 000 of them a layer, hottest first in layer 0 and last in the others. */
static void zipf_cover(double skew, double *cover)
{
    uint32_t counts[6 * 8];
    double w[8], sum = 0;
    for (int e = 0; e < 8; e++)
        sum += w[e] = pow(e + 1, -skew);
    for (int il = 0; il < 6; il++)
        for (int e = 0; e < 8; e++)
            counts[il * 8 + (il ? 7 - e : e)] = (uint32_t)lround(400000 * w[e] / sum);
    REQUIRE(sched_expert_cover(counts, 6, 8, cover) == 0, "a routing curve of skew %.1f", skew);
}

/* Expert frequencies from a calibration (cost.h: Disk, experts.h): the device of experts()
 * keeps 160 MiB of its 400 (80 of shared parts, a quarter of its experts): with even routing a
 * token reads 1/8 of the 240 MiB it does not keep, with skewed routing less as the skew grows;
 * a calibration that found even routing plans as none does; Halda's rows per piece of the
 * curve agree with the exhaustive search. */
static void expert_skew(void)
{
    sched_model sm = moe_model(6);
    sm.kv_bytes = 0;
    dev_cost dc[3];
    alike(dc, 3, "s", 6e-3, 1000);
    dc[2].ram = 400 * MIB;
    dc[2].fixed_anon = 40 * MIB;
    sched_opts o = sched_opts_default();
    ring_plan q = {.n_dev = 3, .n_layer = 6, .k = 1, .window = {1, 1, 4}};
    cost_result even, r;
    cost_eval(dc, &sm, &o, &q, &even);
    CHECK(even.feasible && close_to(even.dev[2].disk_bytes, 30 * MIB),
          "even routing: %.2f MiB read, want 30", even.dev[2].disk_bytes / MIB);

    zipf_cover(0, sm.expert_cover);
    for (int j = 0; j <= SCHED_COVER_POINTS; j++)
        CHECK(fabs(sm.expert_cover[j] - (double)j / SCHED_COVER_POINTS) < 1e-9,
              "even counts: cover[%d] = %.4f", j, sm.expert_cover[j]);
    cost_eval(dc, &sm, &o, &q, &r);
    CHECK(r.feasible && close_to(r.dev[2].disk_bytes, even.dev[2].disk_bytes),
          "a calibration that found even routing: %.2f MiB read, %.2f without one",
          r.dev[2].disk_bytes / MIB, even.dev[2].disk_bytes / MIB);

    double last = r.dev[2].disk_bytes;
    static const double skews[] = {0.5, 1, 2, 4};
    for (size_t i = 0; i < sizeof skews / sizeof skews[0]; i++) {
        zipf_cover(skews[i], sm.expert_cover);
        cost_eval(dc, &sm, &o, &q, &r);
        CHECK(r.feasible && r.dev[2].disk_bytes < last * 0.98 && r.dev[2].disk_bytes > 0,
              "skew %.1f: %.2f MiB read a token, %.2f at the skew before", skews[i],
              r.dev[2].disk_bytes / MIB, last / MIB);
        last = r.dev[2].disk_bytes;
    }
    /* skew 4 (the hottest two of 8 take 96 %): about 30 MiB * 4 % less */
    CHECK(last < 3 * MIB, "skew 4: %.2f MiB read a token", last / MIB);
    /* below the shared parts nothing changes: every routed expert is read */
    dc[2].ram = 250 * MIB;
    cost_eval(dc, &sm, &o, &q, &r);
    CHECK(r.feasible && close_to(r.dev[2].disk_bytes, 110 * MIB),
          "250 MiB, skewed: %.2f MiB read", r.dev[2].disk_bytes / MIB);

    rng_state = 4242;
    static const int shapes[][2] = {{2, 8}, {3, 6}};
    for (int rep = 0; rep < 24; rep++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int n = shapes[s][0], L = shapes[s][1];
            sched_model m = moe_model(L);
            zipf_cover(rep % 2 ? 1 : 2, m.expert_cover);
            dev_cost d[4];
            for (int i = 0; i < n; i++) {
                d[i] = random_device(i, L, true);
                d[i].disk_bps /= 1 + rep % 3 * 4;   /* so that the disk's stalls decide */
            }
            sched_opts so = sched_opts_default();
            so.allow_disk = rep % 4 >= 2;
            char label[96];
            snprintf(label, sizeof label, "skewed experts %d (%d devices, %d layers%s)", rep, n,
                     L, so.allow_disk ? ", disk allowed" : "");
            check_scenario(d, n, &m, &so, label);
        }
}

int main(void)
{
    expert_skew();
    experts();
    near_ties();
    unequal_layers();
    layer_cost();
    time_limit();
    hand_computed();
    quota_bursts();
    infeasible();
    random_scenarios();
    deterministic();
    many_devices();
    return test_done();
}
