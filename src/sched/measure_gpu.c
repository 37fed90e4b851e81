/* measure_gpu.c — the GPU half of a device profile, through gpu.h's probes. The shapes are small
 * (a software driver runs them on the CPU at a fraction of a GB/s): a 1024 x 4096 matrix for
 * matvec, 8 tokens on a 512 x 4096 one for matmul (the prefill shader's token tile). */
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"
#include "sched/measure.h"

#define PROBE_BYTES (32u << 20)

bool profile_gpu_here(const profile_opts *o)
{
    char why[256];
    gpu_dev *g = gpu_open(o->gpu_index, why, sizeof why);
    bool here = g != NULL;
    gpu_close(g);
    return here;
}

int profile_measure_gpu(const profile_opts *o, const bool *types, dev_profile *p, char *err,
                        size_t errlen)
{
    char why[256];
    gpu_dev *g = gpu_open(o->gpu_index, why, sizeof why);
    if (!g) {
        if (o->gpu_why)
            snprintf(o->gpu_why, o->gpu_why_len, "%s", why);
        return 0;
    }
    const gpu_info *gi = gpu_get_info(g);
    p->gpu_present = true;
    p->gpu_unified = gi->unified;
    p->gpu_software = gi->software;
    snprintf(p->gpu_name, sizeof p->gpu_name, "%.63s", gi->name);
    p->vram_total = gi->vram_total;
    p->vram_free = gi->vram_free;
    gpu_probe pr;
    int rc = gpu_probe_memory(g, PROBE_BYTES, &pr, err, errlen);
    if (!rc) {
        p->gpu_bw = pr.copy_bw;
        p->gpu_upload = pr.upload;
        p->gpu_download = pr.download;
        p->gpu_submit = pr.submit;
    }
    /* A software driver is measured once per shape: every ring's worker profiles its GPU, and
     * lavapipe's figures only have to show how far it is behind the CPU. */
    const int reps = gi->software ? 1 : 3;
    /* The fixed cost of a dispatch: a product too small (16 x 64) to take any time of its own,
     * many to a submit. A layer on the GPU is a dozen dispatches, which on a software driver
     * cost far more than its matrices. */
    if (!rc) {
        double d = gpu_probe_matmul(g, DT_F32, 64, 16, 1, reps, err, errlen);
        if (d > 0)
            p->gpu_dispatch = d;
        else
            rc = -1;
    }
    for (int t = 0; t < DT_COUNT && !rc; t++) {
        if (!types[t] || !gpu_supports((enum dtype)t))
            continue;
        double mv = gpu_probe_matmul(g, (enum dtype)t, 4096, 1024, 1, reps, err, errlen);
        double mm = mv > 0 ? gpu_probe_matmul(g, (enum dtype)t, 4096, 512, 8, reps, err, errlen)
                           : -1;
        if (mv <= 0 || mm <= 0) {
            rc = -1;
            break;
        }
        p->gpu[t].matvec = 4096.0 * 1024.0 / mv;
        p->gpu[t].matmul = 4096.0 * 512.0 * 8.0 / mm;
    }
    gpu_close(g);
    return rc;
}
