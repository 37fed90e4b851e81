/* ring_engine.c — the ring runtime joined to prima's model (ring_engine.h): model identity, the
 * engine as a device's layers, and a session whose batches go round the ring. The engine is
 * reached only from here, so the runtime (ring.c, worker.c, device.c) also runs on the stand-in
 * layers of the protocol tests. */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/manifest.h"
#include "cluster/ring_engine.h"

/* The tensors outside the layers, by name: the head's own, or shared by every device that
 * computes layers. */
static int global_ranges(ring_model *rm, const gguf_file *f)
{
    size_t n = (size_t)f->n_tensors;
    rm->shared = calloc(n ? n : 1, sizeof *rm->shared);
    rm->head_only = calloc(n ? n : 1, sizeof *rm->head_only);
    if (!rm->shared || !rm->head_only)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->name.len > 4 && !memcmp(t->name.ptr, "blk.", 4))
            continue;
        byte_range b = {f->data_offset + t->offset, f->data_offset + t->offset + t->nbytes};
        if (gguf_str_eq(t->name, "token_embd.weight") || gguf_str_eq(t->name, "output.weight") ||
            gguf_str_eq(t->name, "output_norm.weight"))
            rm->head_only[rm->n_head_only++] = b;
        else
            rm->shared[rm->n_shared++] = b;
    }
    return 0;
}

int ring_model_init_with(ring_model *rm, const model *m, const manifest *mf, char *err,
                         size_t errlen)
{
    memset(rm, 0, sizeof *rm);
    const gguf_file *f = m->file;
    if (mf) {
        rm->manifest = mf;
    } else {
        rm->manifest = manifest_for_file(f->path, f->map, f->size, f->data_offset, err, errlen);
        if (!rm->manifest)
            return -1;
        rm->manifest_owned = true;
    }
    if (rm->manifest->file_size != f->size || rm->manifest->header_bytes != f->data_offset) {
        snprintf(err, errlen, "%s: the manifest is of another file (%llu bytes)", f->path,
                 (unsigned long long)rm->manifest->file_size);
        ring_model_release(rm);
        return -1;
    }
    memcpy(rm->identity, rm->manifest->root, sizeof rm->identity);
    int n = m->hp.n_layer;
    rm->n_layer = n;
    rm->n_embd = m->hp.n_embd;
    rm->n_vocab = m->hp.n_vocab;
    rm->path = f->path;
    rm->map = f->map;
    rm->map_size = f->size;
    rm->head_bytes = model_head_bytes(m);
    rm->layer_begin = calloc((size_t)n, sizeof *rm->layer_begin);
    rm->layer_end = calloc((size_t)n, sizeof *rm->layer_end);
    if (!rm->layer_begin || !rm->layer_end || global_ranges(rm, f)) {
        ring_model_release(rm);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int il = 0; il < n; il++)
        model_layer_span(m, il, &rm->layer_begin[il], &rm->layer_end[il]);
    if (m->hp.n_expert) {
        _Static_assert(RING_EXPERT_TENSORS == MODEL_EXPERT_TENSORS, "an expert's tensors");
        rm->n_expert = m->hp.n_expert;
        rm->expert_begin = calloc((size_t)n, sizeof *rm->expert_begin);
        rm->expert_slice = calloc((size_t)n, sizeof *rm->expert_slice);
        if (!rm->expert_begin || !rm->expert_slice) {
            ring_model_release(rm);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (int il = 0; il < n; il++)
            model_layer_experts(m, il, rm->expert_begin[il], rm->expert_slice[il]);
    }
    return 0;
}

int ring_model_init(ring_model *rm, const model *m, char *err, size_t errlen)
{
    return ring_model_init_with(rm, m, NULL, err, errlen);
}

void ring_model_release(ring_model *rm)
{
    free(rm->layer_begin);
    free(rm->layer_end);
    free(rm->expert_begin);
    free(rm->expert_slice);
    free(rm->shared);
    free(rm->head_only);
    if (rm->manifest_owned)
        manifest_free((manifest *)rm->manifest);
    rm->layer_begin = rm->layer_end = NULL;
    rm->expert_begin = rm->expert_slice = NULL;
    rm->shared = rm->head_only = NULL;
    rm->manifest = NULL;
    rm->manifest_owned = false;
}

static int engine_eval(void *ctx, float *hidden, int n, const int32_t *pos, const int32_t *seq,
                       int first, int last)
{
    return engine_layers(ctx, hidden, n, pos, seq, first, last);
}

static int engine_truncate(void *ctx, int seq, int p0)
{
    return engine_kv_truncate(ctx, seq, p0);
}

static int engine_shift(void *ctx, int seq, int p0, int p1, int delta)
{
    return engine_kv_shift(ctx, seq, p0, p1, delta);
}

static const uint64_t *engine_routed_of(void *ctx, int il)
{
    return engine_routed(ctx, il);
}

static void engine_hint_experts_of(void *ctx, bool on)
{
    engine_hint_experts(ctx, on);
}

static bool engine_in_vram(void *ctx, int il)
{
    return engine_layer_on_gpu(ctx, il);
}

static void engine_embed_rows(void *ctx, const int32_t *tokens, int n, float *hidden)
{
    engine_embed(ctx, tokens, n, hidden);
}

static int engine_output_row(void *ctx, const float *hidden, int pos, float *logits, int n_vocab,
                             char *err, size_t errlen)
{
    if (engine_output(ctx, hidden, 0, 1, logits)) {
        snprintf(err, errlen, "the output layer failed at position %d", pos);
        return -1;
    }
    return logits_check(logits, 1, n_vocab, pos, err, errlen);
}

/* The layers of an engine, for the head's own windows. */
static ring_layers ring_layers_of_engine(engine *e)
{
    return (ring_layers){e,
                         engine_eval,
                         engine_truncate,
                         engine_shift,
                         engine_in_vram,
                         engine_embed_rows,
                         engine_output_row,
                         engine_routed_of,
                         engine_hint_experts_of};
}

static int count_marked(const bool *mark, int n)
{
    int k = 0;
    for (int i = 0; mark && i < n; i++)
        k += mark[i];
    return k;
}

static int backend_open(void *ctx, const bool *owns, const bool *on_gpu, int n_ctx, int n_seq,
                        int max_batch, int threads, const uint8_t kv_type[2], ring_layers *out,
                        char *note, size_t notelen, char *err, size_t errlen)
{
    engine_backend *eb = ctx;
    note[0] = 0;
    /* the head's cache types, for this session (a worker serves one head at a time) */
    if (model_set_kv_types(eb->m, kv_type[0] ? kv_type[0] : DT_F16,
                           kv_type[1] ? kv_type[1] : DT_F16, err, errlen))
        return -1;
    eb->kc = kern_ctx_create(threads > 0 ? threads : 1);
    if (!eb->kc) {
        snprintf(err, errlen, "cannot start %d compute threads", threads);
        return -1;
    }
    /* The GPU is opened for the session that has GPU layers and closed with it. */
    int n_gpu = count_marked(on_gpu, eb->m->hp.n_layer);
    engine *e = engine_create_seqs(eb->m, eb->kc, n_ctx, max_batch, n_seq, owns, err, errlen);
    if (e && offload_engine(&eb->gpu, &eb->dev, e, eb->m, on_gpu, n_gpu, n_gpu, " asked for",
                            n_ctx, max_batch, note, notelen, err, errlen)) {
        engine_free(e);
        e = NULL;
    }
    if (!e) {
        kern_ctx_free(eb->kc);
        eb->kc = NULL;
        return -1;
    }
    *out = ring_layers_of_engine(e);
    return 0;
}

static void backend_close(void *ctx, ring_layers *layers)
{
    engine_backend *eb = ctx;
    engine_free(layers->ctx);
    gpu_close(eb->dev);   /* after the engine: it held the GPU's layers */
    eb->dev = NULL;
    kern_ctx_free(eb->kc);
    eb->kc = NULL;
}

void engine_backend_init(engine_backend *eb, const ring_model *rm, model *m,
                         const offload_opts *gpu)
{
    eb->m = m;
    eb->kc = NULL;
    eb->dev = NULL;
    eb->gpu = gpu ? *gpu : (offload_opts){.use = false};
    eb->b = (ring_backend){rm, eb, backend_open, backend_close};
}

int engine_loader_load(void *ctx, const char *path, const manifest *mf,
                       const ring_backend **out, char *err, size_t errlen)
{
    engine_loader *l = ctx;
    engine_loader_unload(l);
    l->m = model_load(path, err, errlen);
    if (!l->m)
        return -1;
    if (ring_model_init_with(&l->rm, l->m, mf, err, errlen)) {
        model_free(l->m);
        l->m = NULL;
        return -1;
    }
    engine_backend_init(&l->eb, &l->rm, l->m, &l->gpu);
    *out = &l->eb.b;
    return 0;
}

void engine_loader_unload(void *ctx)
{
    engine_loader *l = ctx;
    if (!l->m)
        return;
    ring_model_release(&l->rm);
    model_free(l->m);
    l->m = NULL;
}

static int ring_failed(ring *r, int rc, char *err, size_t errlen)
{
    if (rc)
        snprintf(err, errlen, "%s", ring_error(r));
    return rc ? -1 : 0;
}

static int via_ring_eval(void *ctx, float *hidden, int n, const int32_t *pos,
                         const int32_t *seq, char *err, size_t errlen)
{
    return ring_failed(ctx, ring_eval(ctx, hidden, n, pos, seq), err, errlen);
}

static int via_ring_truncate(void *ctx, int seq, int p0)
{
    return ring_kv_truncate(ctx, seq, p0);
}

static int via_ring_shift(void *ctx, int seq, int p0, int p1, int delta)
{
    return ring_kv_shift(ctx, seq, p0, p1, delta);
}

static int via_ring_submit(void *ctx, float *hidden, int n, const int32_t *pos,
                           const int32_t *seq, char *err, size_t errlen)
{
    return ring_failed(ctx, ring_submit(ctx, hidden, n, pos, seq), err, errlen);
}

static int via_ring_collect(void *ctx, float **hidden, char *err, size_t errlen)
{
    return ring_failed(ctx, ring_collect(ctx, hidden), err, errlen);
}

static int via_ring_depth(void *ctx)
{
    return ring_max_in_flight(ctx);
}

static bool via_ring_can_decode(void *ctx, const sampler *smp)
{
    return ring_can_decode(ctx, smp);
}

static int via_ring_decode(void *ctx, int seq, int pos, int32_t token, int max_steps,
                           sampler *smp, int (*on_token)(void *user, int32_t token), void *user,
                           int *n_tokens, char *err, size_t errlen)
{
    int rc = ring_decode(ctx, seq, pos, token, max_steps, smp, on_token, user, n_tokens);
    return rc < 0 ? ring_failed(ctx, rc, err, errlen) : rc;
}

session_layers ring_session_layers(ring *r)
{
    return (session_layers){r,
                            via_ring_eval,
                            via_ring_truncate,
                            via_ring_shift,
                            via_ring_submit,
                            via_ring_collect,
                            via_ring_depth,
                            via_ring_can_decode,
                            via_ring_decode};
}

/* The head's engine takes the plan's GPU layers of the head. */
static int head_offload(ring_head *h, char *err, size_t errlen)
{
    session *s = h->s;
    bool *on = calloc((size_t)s->m->hp.n_layer, sizeof *on);
    if (!on) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int n = plan_gpu_mask(ring_get_plan(h->r), 0, on);
    int rc = offload_engine(&h->gpu, &h->dev, s->e, s->m, on, n, n, " asked for", s->n_ctx,
                            s->n_batch, h->note, sizeof h->note, err, errlen);
    free(on);
    return rc;
}

session *ring_head_session(ring_head *h, const ring_opts *o, const offload_opts *gpu,
                           const model *m, kern_ctx *kc, int n_ctx, int n_batch, char *err,
                           size_t errlen)
{
    memset(h, 0, sizeof *h);
    h->kc = kc;
    h->gpu = gpu ? *gpu : (offload_opts){.use = false};
    if (ring_model_init(&h->rm, m, err, errlen))
        return NULL;
    ring_opts ro = *o;
    ro.n_ctx = n_ctx;
    ro.kv_type[0] = m->kv_type[0];   /* every device stores the cache as the head does */
    ro.kv_type[1] = m->kv_type[1];
    ro.max_batch = n_batch < n_ctx ? n_batch : n_ctx;   /* as the session clamps it */
    h->r = ring_connect(&ro, &h->rm, err, errlen);
    bool *owns = calloc((size_t)m->hp.n_layer, sizeof *owns);
    session *s = NULL;
    if (h->r && owns) {
        plan_owned_layers(ring_get_plan(h->r), 0, owns);
        session_layers via = ring_session_layers(h->r);
        s = session_create_split(m, kc, n_ctx, n_batch, ro.n_seq > 1 ? ro.n_seq : 1, owns, &via,
                                 err, errlen);
    } else if (h->r) {
        snprintf(err, errlen, "out of memory");
    }
    free(owns);
    h->s = s;
    if (s && head_offload(h, err, errlen) == 0) {
        ring_layers head = ring_layers_of_engine(s->e);
        if (ring_start(h->r, &head, err, errlen) == 0)
            return s;
    }
    ring_head_close(h);
    session_free(s);
    h->s = NULL;
    gpu_close(h->dev);
    h->dev = NULL;
    return NULL;
}

static int head_reown(void *ctx, const bool *owns, ring_layers *out, char *err, size_t errlen)
{
    ring_head *h = ctx;
    session *s = h->s;
    if (h->dev) {
        /* The GPU's caches are laid out for the layers it was given: a new engine for the new
         * layers, the old one (and its VRAM) freed before the new GPU layers are uploaded. */
        engine *e = engine_create_seqs(s->m, h->kc, s->n_ctx, s->n_batch, engine_n_seq(s->e),
                                       owns, err, errlen);
        if (!e)
            return -1;
        engine_free(s->e);
        s->e = e;
    } else if (engine_set_owned(s->e, owns)) {
        snprintf(err, errlen, "out of memory for the KV cache of this device's new layers");
        return -1;
    }
    if (head_offload(h, err, errlen))
        return -1;
    *out = ring_layers_of_engine(s->e);
    return 0;
}

/* The session's history holds the tokens at every position in the cache. */
static int head_inputs(void *ctx, int p0, int n, float *hidden)
{
    ring_head *h = ctx;
    if (p0 < 0 || n < 1 || p0 + n > h->s->n_past)
        return -1;
    engine_embed(h->s->e, h->s->tokens + p0, n, hidden);
    return 0;
}

int ring_head_failover(ring_head *h, session *s, const ring_planner *planner, FILE *log,
                       char *err, size_t errlen)
{
    h->s = s;
    ring_failover f = {.ctx = h, .reown = head_reown, .inputs = head_inputs, .planner = planner,
                       .log = log};
    return ring_set_failover(h->r, &f, err, errlen);
}

int ring_head_rejoin(ring_head *h, const char *workers, char *err, size_t errlen)
{
    if (!h->r || ring_rejoin(h->r, workers) >= 0)
        return 0;
    snprintf(err, errlen, "%s", ring_error(h->r));
    return -1;
}

void ring_head_close(ring_head *h)
{
    ring_close(h->r);
    h->r = NULL;
    ring_model_release(&h->rm);
}
