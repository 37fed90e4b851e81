/* prima bench plan — how long Halda takes to plan a large model on a home cluster.
 *
 * The devices are made up (no profiling): the paper's four (a Mac with 2.4 GiB available, two
 * Linux PCs with GPUs, a phone) followed by further laptops, over a 70B-shaped model (Q4_K,
 * 481 MiB per layer, KV cache for 4096 positions). Two memory regimes: "fits" (the model fits
 * in the devices' memory and VRAM together) and "tight" (half that memory: devices must stream
 * weights from disk), each with a bypassable and a fixed ring. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/run_opts.h"
#include "sched/halda.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

static const char usage_text[] =
    "usage: prima bench plan [--devices N] [--layers L] [--reps N] [--json]\n"
    "\n"
    "Time Halda (every k from 1 to L, one exact integer program each, LP bounds pruning) on\n"
    "made-up devices: the paper's four (Mac M1 with Metal and 2.4 GiB, Linux laptop with an\n"
    "8 GiB GPU and 4.1 GiB, Linux desktop with an 11 GiB GPU and 9.7 GiB, Android phone with\n"
    "1.9 GiB), then laptops with 3-8 GiB, over a 70B-shaped model (Q4_K layers of 481 MiB,\n"
    "4096-position KV cache, Q6_K output matrix). Regimes: \"fits\" (the model fits in memory\n"
    "and VRAM together) and \"tight\" (half the memory, so devices stream from disk), each with\n"
    "a bypassable and a fixed ring. Reports the median solve time in ms (device explanations\n"
    "not included) with, as its source, the regime, the rounds k, the predicted TPOT (\"disk\"\n"
    "when devices read weights from disk) and the integer programs solved; shape is\n"
    "devices x layers.\n"
    "\n";

typedef struct plan_bench_args {
    int n_dev, n_layer, reps;
    bool json;
} plan_bench_args;

#define F(field) offsetof(plan_bench_args, field)
static const cli_opt plan_rows[] = {
    {"--devices", "N", CLI_INT, F(n_dev), 1, PRIMA_MAX_DEVICES,
     .help = "devices, 1 to 32 (default 8)"},
    {"--layers", "L", CLI_INT, F(n_layer), 1, 1000, .help = "layers, 1 to 1000 (default 80)"},
    {"--reps", "N", CLI_INT, F(reps), 1, 100, .help = "solves per regime (default 3)"},
    {"--json", NULL, CLI_FLAG, F(json),
     .help = "one JSON object per measurement and line (see prima bench\nkernels)"},
    {0},
};
#undef F
static const cli_group plan_group = {NULL, plan_rows, NULL};

/* The paper's cluster (D1-D4) and further laptops: available GiB, disk GB/s, relative CPU
 * speed, VRAM GiB (0: no GPU), unified memory. */
static const struct {
    const char *name;
    enum os_class os;
    double ram_gib, disk_gbps, speed, vram_gib;
    bool unified;
} kinds[] = {
    {"mac-m1", OS_MACOS, 2.4, 0.72, 1.0, 1.5, true},
    {"laptop-3070", OS_LINUX, 4.1, 2.98, 1.3, 8, false},
    {"desktop-2080ti", OS_LINUX, 9.7, 3.17, 1.5, 11, false},
    {"phone", OS_ANDROID, 1.9, 1.37, 0.6, 0, false},
    {"laptop-a", OS_LINUX, 6, 1.0, 1.1, 0, false},
    {"laptop-b", OS_LINUX, 3, 0.5, 0.8, 0, false},
    {"laptop-c", OS_LINUX, 8, 2.0, 1.4, 0, false},
    {"laptop-d", OS_LINUX, 5, 1.5, 0.9, 0, false},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

static sched_model model_70b(int n_layer)
{
    sched_model sm = {.n_layer = n_layer, .n_embd = 8192, .n_vocab = 128256};
    sm.layer_params[DT_Q4_K] = 856e6;
    sm.layer_bytes = 481 * MIB;
    sm.kv_bytes = 2.0 * 2 * 1024 * 4096;       /* 8 KV heads of 128, F16, 4096 positions */
    sm.kv_read = sm.kv_bytes / 2;
    sm.out_type = DT_Q6_K;
    sm.out_params = 8192.0 * 128256;
    sm.out_bytes = sm.out_params * 210 / 256;
    sm.head_page = sm.out_bytes + sm.out_params * 144 / 256;   /* + the Q4_K embedding */
    sm.embd_row_bytes = 8192.0 * 144 / 256;
    sm.hop_bytes = 8192.0 * 4 + 64;
    sm.proc_bytes = 200 * MIB;
    sm.head_bytes = 10 * MIB;
    return sm;
}

static void make_devices(dev_cost *dc, int n, double mem_scale)
{
    for (int m = 0; m < n; m++) {
        const __typeof__(kinds[0]) *k = &kinds[(size_t)m % N_KINDS];
        dev_cost *c = &dc[m];
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s%s", k->name, m >= (int)N_KINDS ? "'" : "");
        c->os = k->os;
        c->cpu_layer = 0.040 / k->speed;        /* 856 M weights at ~21 G weights/s */
        c->cpu_compute = 0.8 * c->cpu_layer;
        c->hop = 0.004 + 0.0005 * m;            /* Wi-Fi: a few ms per hop */
        c->disk_bps = k->disk_gbps * 1e9;
        c->ram = k->ram_gib * GIB * 0.9 * mem_scale;
        c->fixed_anon = 200 * MIB + (m == 0 ? 10 * MIB : 0);
        c->fixed_page = m == 0 ? 8192.0 * 128256 * 210 / 256 : 0;
        c->head_time = m == 0 ? 0.03 : 0;
        if (k->vram_gib > 0) {
            c->has_gpu = true;
            c->unified = k->unified;
            c->gpu_layer = k->unified ? 0.012 : 0.004;
            c->vram = k->vram_gib * GIB * 0.9 * mem_scale;
        }
    }
}

static int run(int argc, char **argv)
{
    plan_bench_args pa = {.n_dev = 8, .n_layer = 80, .reps = 3};
    const cli_set set = {.g = &plan_group, .dst = &pa};
    int rc = cli_opts_parse("bench plan", &set, 1, argc, argv, usage_text, NULL, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    int n_dev = pa.n_dev, n_layer = pa.n_layer, reps = pa.reps;
    bool json = pa.json;
    sched_model sm = model_70b(n_layer);
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%d", n_dev, n_layer);
    static const struct { const char *name; double mem; bool fixed; } regimes[] = {
        {"fits", 1.0, false},
        {"fits fixed-ring", 1.0, true},
        {"tight", 0.5, false},
        {"tight fixed-ring", 0.5, true},
    };
    dev_cost dc[PRIMA_MAX_DEVICES];
    double *secs = malloc(sizeof(double) * (size_t)reps);
    if (!secs)
        return cli_fail("bench plan: out of memory");
    for (size_t g = 0; g < sizeof regimes / sizeof regimes[0]; g++) {
        make_devices(dc, n_dev, regimes[g].mem);
        sched_opts o = sched_opts_default();
        o.fixed_ring = regimes[g].fixed;
        halda_result r;
        for (int i = 0; i < reps; i++) {
            if (halda_solve(dc, n_dev, &sm, &o, &r)) {
                free(secs);
                return cli_fail("bench plan: %s", r.why);
            }
            secs[i] = r.seconds;
        }
        double spread;
        double med = bench_median_spread(secs, reps, &spread);
        char what[128];
        if (r.found)
            snprintf(what, sizeof what, "%s k=%d %.0fms/tok%s %dILP", regimes[g].name, r.plan.k,
                     r.cost.tpot * 1e3, r.fits ? "" : " disk", r.n_ilp);
        else
            snprintf(what, sizeof what, "%s no-plan", regimes[g].name);
        bench_result br = {.op = "halda", .shape = shape, .source = what, .threads = 1,
                           .value = med * 1e3, .unit = "ms", .fraction = -1, .spread = spread};
        bench_print(&br, json);
    }
    free(secs);
    return 0;
}

const struct bench_sub bench_plan = {"plan", "Halda solve time on a made-up home cluster", run};
