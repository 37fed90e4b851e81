/* prima profile — measure this device as Halda sees it. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "kernels/kern.h"
#include "app/progress.h"
#include "cli/run_opts.h"
#include "sched/measure.h"
#include "util/sysmem.h"

static const char usage_head[] =
    "usage: prima profile [-m FILE] [-t N] [--gpu [--gpu-device N]] [--json]\n"
    "\n"
    "Measure this device for the layer scheduler (Halda), in under 10 seconds and 0.5 GiB of\n"
    "memory, writing no files:\n"
    "  cpu      usable cores, the active SIMD path, and the throughput of prima's own\n"
    "           kernels for every weight type of the model (without -m: every type the\n"
    "           kernels compute), in weights/s: matrix-vector (1 token) streaming a 128 MiB\n"
    "           matrix from memory, as decoding does, and matrix-matrix (32 tokens) on a\n"
    "           2 MiB slice of it, as prefill does; the thread pool's cost per parallel\n"
    "           job; and a decoded layer's work besides its matrices (norms, rope, attention\n"
    "           at a short context, SiLU, residual adds) on a Llama-3-8B-shaped layer, in\n"
    "           its values/s;\n"
    "  memory   total, available (MemAvailable), reclaimable page cache, swap, the memory\n"
    "           cgroup's limit (v1 or v2, lowest of the cgroup and its ancestors), usage and\n"
    "           page cache when the limit is below the machine's memory; read bandwidth over\n"
    "           a 128 MiB buffer;\n"
    "  disk     (with -m) read throughput of the model file itself, from storage:\n"
    "           sequential as streamed layers are read (evicted from the page cache, then\n"
    "           faulted in through a mapping with the kernel's readahead: method \"mmap\";\n"
    "           where eviction fails, 1 MiB requests with O_DIRECT, or posix_fadvise where\n"
    "           the file system has no O_DIRECT), and random 16 KiB reads; \"cached\" and 0\n"
    "           when the file stays in memory regardless (tmpfs);\n"
    "  os       linux, android or macos (memory is measured on Linux and Android);\n"
    "  gpu      (with --gpu) the Vulkan device: name, discrete, unified memory or a\n"
    "           software driver, VRAM total and free, device memory bandwidth (a copy),\n"
    "           host <-> device transfer rates, the latency of one submit, the fixed\n"
    "           cost of one dispatch in a submit (a 16x64 product), and the matrix\n"
    "           shaders' rates for the model's weight types that have shaders (matvec on a\n"
    "           1024x4096 matrix, matmul with 8 tokens on 512x4096); without --gpu, or\n"
    "           when no device is usable (said), the profile has no GPU.\n"
    "The CPU figures are the median of repeated runs (what decoding takes on cores other\n"
    "programs share; the kernel rates' runs are spread over 3 s, so that a moment's\n"
    "contention does not set them), the disk figures the bytes of all runs over their\n"
    "time (a throttled disk lets a short run through at up to twice its sustained rate),\n"
    "the faster of two sequential tests, before and after the random one (other\n"
    "programs' I/O only slows one down; a throttled disk runs the second faster, as it\n"
    "does a ring's reads after spells of light use);\n"
    "\"noise\" is the largest interquartile spread relative to the median (a busy machine\n"
    "shows a large one). Kernel rates are checked against the FMA peak. Under a CPU quota\n"
    "(cgroup cpu.max or cpu.cfs_quota_us) smaller than the threads, the median of\n"
    "the runs the quota did not throttle (its cpu.stat) is scaled to the share of\n"
    "time the quota grants (cpu.quota in the JSON; cpu.quota_period its period in\n"
    "seconds, which the scheduler needs to tell when the device computes at full\n"
    "speed within it).\n"
    "While it measures, stderr says what (one line rewritten in place on a terminal, a line\n"
    "per part otherwise): \"prima: profiling this device: Q4_K kernels, 42 %, 2.1 s\".\n"
    "\n";
static const char usage_tail[] =
    "\n"
    "Exit status: 0 on success, 1 if a measurement fails, 2 on a usage error.\n";

/* The measured weight types of a CPU's or GPU's kernels, a line each. */
static void print_rates(const type_rate *r)
{
    for (int t = 0; t < DT_COUNT; t++)
        if (r[t].matvec > 0)
            printf("  %-8s matvec %7.2f Gweights/s   matmul %7.2f Gweights/s\n",
                   dtype_get((uint32_t)t)->name, r[t].matvec / 1e9, r[t].matmul / 1e9);
}

static void print_text(const dev_profile *p, const char *model_path, const char *gpu_why)
{
    const double gib = 1024.0 * 1024.0 * 1024.0;
    printf("device     %s (%s)\n", p->name, os_class_name(p->os));
    printf("cpu        %d usable core%s, measured with %d thread%s, SIMD path %s\n", p->cores,
           p->cores > 1 ? "s" : "", p->threads, p->threads > 1 ? "s" : "", p->simd);
    if (p->cpu_quota > 0)
        printf("           CPU quota %.2f CPUs\n", p->cpu_quota);
    print_rates(p->cpu);
    printf("           %.1f us per parallel job, layer work besides matrices %.0f Mvalues/s\n",
           p->dispatch * 1e6, p->vector / 1e6);
    printf("memory     total %.2f GiB, available %.2f GiB, reclaimable %.2f GiB, swap %.2f of "
           "%.2f GiB free\n", p->mem_total / gib, p->mem_available / gib, p->mem_reclaimable / gib,
           p->swap_free / gib, p->swap_total / gib);
    if (p->cgroup_limit)
        printf("cgroup     limit %.2f GiB, usage %.2f GiB of which %.2f GiB page cache\n",
               p->cgroup_limit / gib, p->cgroup_usage / gib, p->cgroup_reclaimable / gib);
    printf("           %.2f GiB usable by inference before the reserve", profile_available(p) / gib);
    if (p->os == OS_ANDROID)   /* sysmem.h: the room keeps lmkd's margin */
        printf(" (%.2f GiB kept for Android's low-memory killer)",
               sysmem_android_margin(p->mem_total) / gib);
    printf("\n");
    printf("bandwidth  %.2f GB/s read\n", p->mem_bw / 1e9);
    if (model_path)
        printf("disk       sequential %.3f GB/s, random 16 KiB %.3f GB/s (%s, %s)\n",
               p->disk_seq / 1e9, p->disk_rand / 1e9, p->disk_method, model_path);
    if (!p->gpu_present) {
        printf("gpu        none%s%s%s\n", gpu_why && *gpu_why ? " (" : "", gpu_why ? gpu_why : "",
               gpu_why && *gpu_why ? ")" : "");
    } else {
        printf("gpu        %s (%s), VRAM %.2f GiB, %.2f GiB free\n", p->gpu_name,
               p->gpu_software ? "software driver: CPU figures"
               : p->gpu_unified ? "unified memory" : "discrete",
               p->vram_total / gib, p->vram_free / gib);
        printf("           copy %.2f GB/s, upload %.2f GB/s, download %.2f GB/s, submit %.0f us, "
               "dispatch %.0f us\n", p->gpu_bw / 1e9, p->gpu_upload / 1e9, p->gpu_download / 1e9,
               p->gpu_submit * 1e6, p->gpu_dispatch * 1e6);
        print_rates(p->gpu);
    }
    printf("noise      %.0f%%\n", 100 * p->noise);
}

typedef struct profile_args {
    profile_opts o;
    bool json;
} profile_args;

/* --gpu-device N: that device, and the GPU measured. */
static int parse_gpu_device(void *dst, const char *flag, const char *v)
{
    profile_args *a = dst;
    a->o.gpu = true;
    return parse_int_arg(flag, v, 0, 255, &a->o.gpu_index);
}

#define F(field) offsetof(profile_args, field)
static const cli_opt profile_rows[] = {
    {"-m", "FILE", CLI_STR, F(o.model_path),
     .help = "the GGUF model to plan for (weight types, disk holding it)"},
    {"-t", "N", CLI_INT, F(o.threads), 1, KERN_MAX_THREADS,
     .help = "threads for the kernel measurements (default: every usable\nCPU)"},
    {"--gpu", NULL, CLI_FLAG, F(o.gpu),
     .help = "measure the GPU too (the first discrete GPU, else the first\ndevice)"},
    {"--gpu-device", "N", CLI_FN, .fn = parse_gpu_device, .help = "that Vulkan device instead"},
    {"--json", NULL, CLI_FLAG, F(json),
     .help = "print the profile as JSON (the input of prima plan --device)"},
    {0},
};
#undef F
static const cli_group profile_group = {NULL, profile_rows, NULL};

static int run(int argc, char **argv)
{
    profile_args pa = {.o = {.gpu_index = -1}};
    const cli_set set = {.g = &profile_group, .dst = &pa};
    int prc = cli_opts_parse("profile", &set, 1, argc, argv, usage_head, usage_tail, NULL);
    if (prc)
        return prc < 0 ? 0 : prc;
    profile_opts o = pa.o;
    bool json = pa.json;
    dev_profile p;
    char err[512], gpu_why[256] = "";
    o.gpu_why = gpu_why;
    o.gpu_why_len = sizeof gpu_why;
    app_progress prog;
    app_progress_init(&prog, stderr, "this device");
    o.progress = app_progress_profile;
    o.progress_ctx = &prog;
    int rc = profile_measure(&o, &p, err, sizeof err);
    app_progress_end(&prog);
    if (rc)
        return cli_fail("%s", err);
    if (json) {
        cJSON *j = profile_to_json(&p);
        char *s = cJSON_Print(j);
        puts(s);
        free(s);
        cJSON_Delete(j);
    } else
        print_text(&p, o.model_path, o.gpu ? gpu_why : NULL);
    return 0;
}

const struct cli_command cli_cmd_profile = {"profile", "measure this device for the scheduler", run};
