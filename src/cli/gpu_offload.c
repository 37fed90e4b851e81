#include <stdio.h>

#include "cli/gpu_offload.h"
#include "model/offload.h"

int gpu_offload_session(const run_opts *o, const model *m, session *s, gpu_dev **dev, char *err,
                        size_t errlen)
{
    *dev = NULL;
    if (o->no_gpu || o->n_gpu_layers == 0)
        return 0;
    char why[256];
    gpu_dev *g = gpu_open(o->gpu_index, why, sizeof why);
    if (!g) {
        fprintf(stderr, "prima: GPU: %s; running on the CPU\n", why);
        return 0;
    }
    const int L = m->hp.n_layer;
    const int n = o->n_gpu_layers < L ? o->n_gpu_layers : L;
    bool want[L];
    offload_last(0, L, n, want);
    offload_result r;
    const uint64_t cap = (uint64_t)((double)o->gpu_mem * 1073741824.0);
    if (engine_offload(s->e, m, g, want, cap, s->n_ctx, s->n_batch, &r, err, errlen)) {
        gpu_close(g);
        return -1;
    }
    const gpu_info *gi = gpu_get_info(g);
    char more[64] = "";
    if (o->n_gpu_layers > L)
        snprintf(more, sizeof more, " (-ngl %d: the model has %d)", o->n_gpu_layers, L);
    fprintf(stderr, "prima: GPU %d: %s (%s%s): %d of %d layers%s, %.1f MiB of VRAM%s%s\n",
            gi->index, gi->name, gi->discrete ? "discrete" : gi->unified ? "unified memory" : "GPU",
            gi->software ? ", a software driver" : "", r.n_gpu, L, more,
            (double)r.vram / 1048576.0, r.note[0] ? "; " : "", r.note);
    if (!r.n_gpu) {
        gpu_close(g);
        return 0;
    }
    *dev = g;
    return 0;
}
