/* gpu_offload.c — the GPU options applied to a session or checked against a ring's windows
 * (gpu_offload.h). A GPU that will not open is reported in one line and the session stays on the
 * CPU: the command's answer does not depend on it. */
#include <stdio.h>

#include "app/gpu_offload.h"
#include "model/offload.h"

offload_opts gpu_offload_opts(const run_opts *o)
{
    return (offload_opts){.use = !o->no_gpu, .index = o->gpu_index,
                          .vram_cap = (uint64_t)((double)o->gpu_mem * 1073741824.0)};
}

int gpu_offload_session(const run_opts *o, const model *m, session *s, gpu_dev **dev, char *err,
                        size_t errlen)
{
    *dev = NULL;
    if (o->no_gpu || o->n_gpu_layers == 0)
        return 0;
    const int L = m->hp.n_layer;
    const int n = o->n_gpu_layers < L ? o->n_gpu_layers : L;
    bool want[L];
    offload_last(0, L, n, want);
    char more[64] = "", note[512];
    if (o->n_gpu_layers > L)
        snprintf(more, sizeof more, " (%d asked for: the model has %d)", o->n_gpu_layers, L);
    const offload_opts oo = gpu_offload_opts(o);
    if (offload_engine(&oo, dev, s->e, m, want, n, L, more, s->n_ctx, s->n_batch, note,
                       sizeof note, err, errlen))
        return -1;
    fprintf(stderr, "prima: %s\n", note);
    return 0;
}

void gpu_offload_report_ring(const ring_head *h)
{
    if (h->note[0])
        fprintf(stderr, "prima: %s\n", h->note);
    const ring_plan *p = ring_get_plan(h->r);
    for (int d = 1; d < p->n_dev; d++)
        if (ring_device_note(h->r, d)[0])
            fprintf(stderr, "prima: device %d (%s): %s\n", d, ring_worker_addr(h->r, d),
                    ring_device_note(h->r, d));
}

