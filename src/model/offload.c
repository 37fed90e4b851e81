/* offload.c — choosing and uploading an engine's GPU layers (offload.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/offload.h"

void offload_last(int first, int last, int n, bool *want)
{
    for (int il = first; il < last; il++)
        want[il] = il >= last - n;
}

static gpu_tensor tensor(const gguf_tensor *t, const char *name)
{
    if (!t)
        return (gpu_tensor){0};
    return (gpu_tensor){.name = name, .data = t->data, .type = t->type,
                        .ne0 = (int64_t)t->ne[0], .ne1 = t->n_dims > 1 ? (int64_t)t->ne[1] : 1};
}

/* The GPU's description of model m's layers (n_layer entries) and shape. */
static void describe(const model *m, int n_ctx, int max_batch, gpu_model_desc *md,
                     gpu_layer_desc *descs)
{
    const model_hparams *hp = &m->hp;
    *md = (gpu_model_desc){.n_layer = hp->n_layer, .n_embd = hp->n_embd, .n_ff = hp->n_ff,
                           .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                           .head_dim = hp->head_dim, .rms_eps = hp->rms_eps,
                           .attn_scale = hp->attn_scale, .n_ctx = n_ctx, .max_batch = max_batch};
    memcpy(md->rope, hp->rope, sizeof md->rope);
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        descs[il] = (gpu_layer_desc){.prog = L->prog,
                                     .kv_rows = model_kv_rows(m, il, n_ctx, max_batch)};
        for (int s = 0; s < LT_COUNT; s++)
            descs[il].t[s] = tensor(L->t[s], arch_slot((enum layer_slot)s)->name);
    }
}

static void add_note(offload_result *r, const char *fmt, ...)
{
    size_t len = strlen(r->note);
    if (len + 3 >= sizeof r->note)
        return;
    if (len) {
        memcpy(r->note + len, "; ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note + len, sizeof r->note - len, fmt, ap);
    va_end(ap);
}

int engine_offload(engine *e, const model *m, gpu_dev *g, const bool *want, uint64_t vram_cap,
                   int n_ctx, int max_batch, offload_result *r, char *err, size_t errlen)
{
    const int L = m->hp.n_layer;
    memset(r, 0, sizeof *r);
    gpu_model_desc md;
    gpu_layer_desc *descs = calloc((size_t)L, sizeof *descs);
    bool *on = calloc((size_t)L, sizeof *on);
    if (!descs || !on) {
        free(descs);
        free(on);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    describe(m, n_ctx, max_batch, &md, descs);

    char why[160];
    /* a GPU layer's VRAM cache holds one sequence, in F16 */
    const bool f16_cache = m->kv_type[0] == DT_F16 && m->kv_type[1] == DT_F16;
    const bool one_seq = engine_n_seq(e) == 1 && f16_cache;
    if (!f16_cache)
        add_note(r, "a %s/%s KV cache keeps every layer on the CPU (the GPU's cache is F16)",
                 dtype_get(m->kv_type[0])->name, dtype_get(m->kv_type[1])->name);
    else if (!one_seq)
        add_note(r, "an engine of %d sequences keeps its layers on the CPU", engine_n_seq(e));
    /* layers refused for the same reason are said once: "layers 0-2 stay ..." */
    char last_why[160] = "";
    int first_bad = -1, last_bad = -1;
    for (int il = 0; il <= L; il++) {
        bool bad = il < L && want[il] && one_seq &&
                   !gpu_layer_supported(&descs[il], why, sizeof why);
        if (il < L && want[il] && one_seq && !bad)
            on[il] = true;
        if (first_bad >= 0 && (il == L || !bad || strcmp(why, last_why))) {
            if (first_bad == last_bad)
                add_note(r, "layer %d stays on the CPU: %s", first_bad, last_why);
            else
                add_note(r, "layers %d-%d stay on the CPU: %s", first_bad, last_bad, last_why);
            first_bad = -1;
        }
        if (bad) {
            if (first_bad < 0)
                first_bad = il;
            last_bad = il;
            snprintf(last_why, sizeof last_why, "%s", why);
        }
    }
    /* the budget: the cap, or what is free; the first asked-for layers give way */
    const gpu_info *gi = gpu_get_info(g);
    uint64_t budget = gi->vram_free;
    if (vram_cap && vram_cap < budget)
        budget = vram_cap;
    uint64_t need = gpu_scratch_bytes(&md);
    int n = 0, dropped = 0;
    for (int il = L - 1; il >= 0; il--) {
        if (!on[il])
            continue;
        uint64_t b = gpu_layer_bytes(&md, &descs[il]);
        if (need + b > budget) {
            on[il] = false;
            dropped++;
            continue;
        }
        need += b;
        n++;
    }
    if (dropped)
        add_note(r, "%d more layer%s did not fit in %.0f MiB of VRAM and stay on the CPU",
                 dropped, dropped == 1 ? "" : "s", (double)budget / 1048576.0);
    int rc = 0;
    if (n > 0) {
        gpu_layers *gl = gpu_layers_create(g, &md, descs, on, err, errlen);
        if (!gl || engine_attach_gpu(e, gl, on)) {
            if (gl) {
                gpu_layers_free(gl);
                snprintf(err, errlen, "out of memory");
            }
            rc = -1;
        } else {
            r->n_gpu = n;
            r->vram = need;
        }
    }
    free(descs);
    free(on);
    return rc;
}

int offload_engine(const offload_opts *o, gpu_dev **g, engine *e, const model *m, const bool *want,
                   int n_want, int of, const char *more, int n_ctx, int max_batch, char *note,
                   size_t notelen, char *err, size_t errlen)
{
    note[0] = 0;
    if (n_want <= 0 || !o->use) {
        gpu_close(*g);
        *g = NULL;
        if (n_want > 0)
            snprintf(note, notelen, "GPU: turned off on this device; running on the CPU");
        return 0;
    }
    if (!*g) {
        char why[256];
        *g = gpu_open(o->index, why, sizeof why);
        if (!*g) {
            snprintf(note, notelen, "GPU: %s; running on the CPU", why);
            return 0;
        }
    }
    offload_result r;
    if (engine_offload(e, m, *g, want, o->vram_cap, n_ctx, max_batch, &r, err, errlen)) {
        gpu_close(*g);
        *g = NULL;
        return -1;
    }
    const gpu_info *gi = gpu_get_info(*g);
    snprintf(note, notelen, "GPU %d: %s (%s%s): %d of %d layers%s, %.1f MiB of VRAM%s%s", gi->index,
             gi->name, gi->discrete ? "discrete" : gi->unified ? "unified memory" : "GPU",
             gi->software ? ", a software driver" : "", r.n_gpu, of, more ? more : "",
             (double)r.vram / 1048576.0, r.note[0] ? "; " : "", r.note);
    if (!r.n_gpu) {
        gpu_close(*g);
        *g = NULL;
    }
    return 0;
}
