/* prima profile — measure this device as Halda sees it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/progress.h"
#include "cli/run_opts.h"
#include "sched/measure.h"
#include "util/sysmem.h"

static const char usage_text[] =
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
    "\n"
    "  -m FILE     the GGUF model to plan for (weight types, disk holding it)\n"
    "  -t N        threads for the kernel measurements (default: every usable CPU)\n"
    "  --gpu       measure the GPU too (the first discrete GPU, else the first device)\n"
    "  --gpu-device N  that Vulkan device instead\n"
    "  --json      print the profile as JSON (the input of prima plan --device)\n"
    "  -h, --help  show this help\n"
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

static int run(int argc, char **argv)
{
    profile_opts o = {.gpu_index = -1};
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--gpu")) {
            o.gpu = true;
        } else if (!strcmp(a, "--gpu-device") && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 0 || n > 255) {
                cli_fail("profile: --gpu-device wants a device number from 0 to 255, not '%s'",
                         argv[i]);
                return 2;
            }
            o.gpu = true;
            o.gpu_index = (int)n;
        } else if (!strcmp(a, "-m") && i + 1 < argc) {
            o.model_path = argv[++i];
        } else if (!strcmp(a, "-t") && i + 1 < argc) {
            if (parse_threads_arg(a, argv[++i], &o.threads))
                return 2;
        } else {
            cli_fail("profile: unknown or incomplete option '%s' (see prima profile --help)", a);
            return 2;
        }
    }
    dev_profile p;
    char err[512], gpu_why[256] = "";
    o.gpu_why = gpu_why;
    o.gpu_why_len = sizeof gpu_why;
    cli_progress prog;
    cli_progress_init(&prog, stderr, "this device");
    o.progress = cli_progress_profile;
    o.progress_ctx = &prog;
    int rc = profile_measure(&o, &p, err, sizeof err);
    cli_progress_end(&prog);
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
