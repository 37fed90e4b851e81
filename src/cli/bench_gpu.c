/* prima bench kernels --gpu — the GPU's matrix shaders next to the GPU's own bounds: device
 * memory bandwidth (a device-side copy), host <-> device transfers and submit latency, then
 * matvec as GB/s of weights streamed (and the fraction of the copy bandwidth) and matmul as
 * GFLOP/s, on the shapes of the CPU benchmark (a prefill predicted to take over 10 s is
 * skipped, said). A software driver (lavapipe) is labelled as such:
 * its figures measure the CPU it runs on. */
#include <stdio.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "gpu/gpu.h"

#define COPY_BYTES (64u << 20)
/* A product predicted to take longer (a software driver's 512-token prefill) is skipped. */
#define MAX_SECONDS 10.0

int bench_kernels_gpu(const bench_gpu_args *a)
{
    char why[256];
    gpu_dev *g = gpu_open(-1, why, sizeof why);
    if (!g)
        return cli_fail("bench kernels --gpu: %s", why);
    const gpu_info *gi = gpu_get_info(g);
    const char *kind = gi->software ? "software driver: these are CPU figures"
                       : gi->discrete ? "discrete" : "unified memory";
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", "gpu");
        cJSON_AddStringToObject(o, "name", gi->name);
        cJSON_AddNumberToObject(o, "index", gi->index);
        cJSON_AddBoolToObject(o, "software", gi->software);
        cJSON_AddBoolToObject(o, "unified", gi->unified);
        cJSON_AddNumberToObject(o, "vram_total", (double)gi->vram_total);
        bench_print_json(o);
    } else
        printf("GPU %d: %s (%s), %.0f MiB VRAM\n%-7s %-28s %-11s %6s %3s %9s %-7s %7s %6s\n",
               gi->index, gi->name, kind, (double)gi->vram_total / 1048576.0, "type", "op",
               "shape", "tokens", "thr", "value", "unit", "bound", "spread");
    gpu_probe p;
    if (gpu_probe_memory(g, COPY_BYTES, &p, why, sizeof why)) {
        gpu_close(g);
        return cli_fail("bench kernels --gpu: %s", why);
    }
    const bench_result mem[] = {
        {.op = "gpu_copy_bandwidth", .value = p.copy_bw / 1e9, .unit = "GB/s"},
        {.op = "gpu_upload", .value = p.upload / 1e9, .unit = "GB/s"},
        {.op = "gpu_download", .value = p.download / 1e9, .unit = "GB/s"},
        {.op = "gpu_submit", .value = p.submit * 1e6, .unit = "us"},
    };
    for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++) {
        bench_result r = mem[i];
        r.fraction = r.spread = -1;
        r.threads = 1;
        bench_print(&r, a->json);
    }
    int rc = 0;
    double flops_rate = 0; /* of the last matmul: predicts the next one's time */
    for (int t = 0; t < DT_COUNT && !rc; t++) {
        if (!gpu_supports((enum dtype)t) || (a->filtered && !a->only[t]))
            continue;
        const char *name = dtype_get((uint32_t)t)->name;
        for (int s = 0; s < a->n_shapes + a->n_tokens && !rc; s++) {
            const bool mv = s < a->n_shapes;
            const int n_in = mv ? a->shapes[s][0] : a->prefill[0];
            const int n_out = mv ? a->shapes[s][1] : a->prefill[1];
            const int n_tok = mv ? 1 : a->tokens[s - a->n_shapes];
            const double flops = 2.0 * n_in * n_out * n_tok;
            if (!mv && flops_rate > 0 && flops / flops_rate > MAX_SECONDS) {
                if (!a->json)
                    printf("%-7s gpu_matmul %d tokens skipped: about %.0f s at %.2f GFLOP/s\n",
                           name, n_tok, flops / flops_rate, flops_rate / 1e9);
                continue;
            }
            double sec = gpu_probe_matmul(g, (enum dtype)t, n_in, n_out, n_tok, a->reps, why,
                                          sizeof why);
            if (sec <= 0) {
                rc = cli_fail("bench kernels --gpu: %s", why);
                break;
            }
            char shape[32];
            snprintf(shape, sizeof shape, "%dx%d", n_in, n_out);
            const double bytes = (double)dtype_row_bytes((enum dtype)t, (uint64_t)n_in) * n_out;
            bench_result r = {.type = name, .op = mv ? "gpu_matvec" : "gpu_matmul", .shape = shape,
                              .tokens = mv ? 0 : n_tok, .threads = 1, .spread = -1};
            if (mv) {
                r.value = bytes / sec / 1e9;
                r.unit = "GB/s";
                r.fraction = bytes / sec / p.copy_bw;
            } else {
                flops_rate = flops / sec;
                r.value = flops_rate / 1e9;
                r.unit = "GFLOP/s";
                r.fraction = -1;
            }
            bench_print(&r, a->json);
        }
    }
    gpu_close(g);
    return rc;
}
