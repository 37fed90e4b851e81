/* engine.c — the CPU backend: a transformer's forward pass over any range of its layers.
 *
 * Each layer is the program its architecture emitted (model/arch.c, kernels/layer_ops.h); the
 * engine evaluates the ops in order over its scratch buffers. A batch of n tokens goes through
 * every matrix in one kern_matmul call, so prefill reads each weight matrix once per batch and
 * decode (n = 1) streams it once per token. All buffers are allocated in engine_create;
 * evaluating allocates nothing (it hands pages of the scratch back, fit_scratch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gpu/gpu.h"
#include "model/model.h"
#include "util/mem.h"

struct engine {
    const model *m;
    kern_ctx *kc;
    int n_ctx, max_batch, n_seq;
    bool *owns;          /* n_layer */
    /* per layer: [n_seq][n_head_kv][kv_rows] rows of head_dim elements of the model's cache
     * types (kern_kv: each KV head's rows contiguous, so attention streams them; position p is
     * row p % kv_rows), NULL if not owned */
    int *kv_rows;        /* n_layer: model_kv_rows */
    size_t k_hb, v_hb;   /* bytes of one head's row */
    uint8_t **k_cache;
    uint8_t **v_cache;
    int *filled;         /* [n_layer][n_seq]: positions [0, filled) of a sequence hold K/V */
    int32_t *next_pos;   /* n_seq: engine_layers' check of each sequence's rows */
    /* scratch, max_batch rows each; buf[LB_H] is the caller's hidden state during a call */
    float *buf[LB_COUNT];
    bool wide;           /* the scratch holds a batch wider than n_seq rows (see fit_scratch) */
    /* experts (LOP_MOE), max_batch rows each, in one block: the router's scores (n_expert),
     * each row's chosen experts and weights (n_expert_used), one expert's rows and weights */
    void *moe_block;
    float *scores, *chosen_w, *rows_w;
    int32_t *chosen, *rows;
    /* [n_layer][routed_words]: the experts each layer routed a row to in its latest
     * evaluation (engine_routed; the ring's pager pages by expert from it) */
    uint64_t *routed;
    int routed_words;
    bool hint_experts;   /* engine_hint_experts */
    uint32_t *route_counts; /* engine_count_routes, or NULL */
    uint64_t kv_bytes, scratch_bytes;
    gpu_layers *gpu;     /* NULL: every layer on the CPU */
    bool *on_gpu;        /* n_layer: run by gpu, its KV cache in VRAM */
};

/* The inputs of the widest product (wq, wo or ffn_down): the kernels' scratch is sized for it. */
static int widest_input(const model_hparams *hp)
{
    int q_dim = hp->n_head * hp->head_dim;
    int n_in = hp->n_embd > q_dim ? hp->n_embd : q_dim;
    return n_in > hp->n_ff ? n_in : hp->n_ff;
}

/* A buffer's row width (layer_ops.h). */
static size_t buf_width(const model_hparams *hp, int b)
{
    const lop_dims d = {hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff};
    return lop_width(&d, b);
}

/* The scratch buffers are LB_X.. (LB_H is the caller's): allocated and freed together, rows
 * handed back by fit_scratch. */
#define FIRST_SCRATCH LB_X

/* Bytes of layer il's K or V cache (a head's row hb bytes): every sequence's region. */
static size_t cache_bytes(const engine *e, int il, size_t hb)
{
    return (size_t)e->n_seq * (size_t)e->m->hp.n_head_kv * (size_t)e->kv_rows[il] * hb;
}

/* Sequence seq's region of layer il's K or V cache (all its KV heads' rows). */
static uint8_t *seq_region(const engine *e, uint8_t *cache, int il, int seq, size_t hb)
{
    return cache + (size_t)seq * (size_t)e->m->hp.n_head_kv * (size_t)e->kv_rows[il] * hb;
}

/* Layer il's K and V caches (both NULL or both allocated, zeroed: pages of positions never
 * reached are never touched). 0, or -1 out of memory. */
static int alloc_cache(engine *e, int il)
{
    e->k_cache[il] = calloc(1, cache_bytes(e, il, e->k_hb));
    e->v_cache[il] = calloc(1, cache_bytes(e, il, e->v_hb));
    if (e->k_cache[il] && e->v_cache[il]) {
        e->kv_bytes += cache_bytes(e, il, e->k_hb) + cache_bytes(e, il, e->v_hb);
        return 0;
    }
    free(e->k_cache[il]);
    free(e->v_cache[il]);
    e->k_cache[il] = e->v_cache[il] = NULL;
    return -1;
}

static void free_cache(engine *e, int il)
{
    if (e->k_cache[il])
        e->kv_bytes -= cache_bytes(e, il, e->k_hb) + cache_bytes(e, il, e->v_hb);
    free(e->k_cache[il]);
    free(e->v_cache[il]);
    e->k_cache[il] = e->v_cache[il] = NULL;
}

static int *filled_of(const engine *e, int il, int seq)
{
    return &e->filled[(size_t)il * (size_t)e->n_seq + (size_t)seq];
}

engine *engine_create(const model *m, kern_ctx *kc, int n_ctx, int max_batch, const bool *owns,
                      char *err, size_t errlen)
{
    return engine_create_seqs(m, kc, n_ctx, max_batch, 1, owns, err, errlen);
}

engine *engine_create_seqs(const model *m, kern_ctx *kc, int n_ctx, int max_batch, int n_seq,
                           const bool *owns, char *err, size_t errlen)
{
    const model_hparams *hp = &m->hp;
    if (n_ctx < 1 || max_batch < 1 || n_seq < 1) {
        snprintf(err, errlen, "context size (%d), batch size (%d) and sequences (%d) must be "
                 "positive", n_ctx, max_batch, n_seq);
        return NULL;
    }
    engine *e = calloc(1, sizeof *e);
    if (!e)
        goto oom;
    e->m = m;
    e->kc = kc;
    e->n_ctx = n_ctx;
    e->max_batch = max_batch;
    e->n_seq = n_seq;
    e->owns = calloc((size_t)hp->n_layer, sizeof *e->owns);
    e->k_cache = calloc((size_t)hp->n_layer, sizeof *e->k_cache);
    e->v_cache = calloc((size_t)hp->n_layer, sizeof *e->v_cache);
    e->filled = calloc((size_t)hp->n_layer * (size_t)n_seq, sizeof *e->filled);
    e->next_pos = calloc((size_t)n_seq, sizeof *e->next_pos);
    e->kv_rows = calloc((size_t)hp->n_layer, sizeof *e->kv_rows);
    if (!e->owns || !e->k_cache || !e->v_cache || !e->filled || !e->next_pos || !e->kv_rows)
        goto oom;
    e->k_hb = (size_t)dtype_row_bytes(m->kv_type[0], (uint64_t)hp->head_dim);
    e->v_hb = (size_t)dtype_row_bytes(m->kv_type[1], (uint64_t)hp->head_dim);

    for (int il = 0; il < hp->n_layer; il++) {
        e->kv_rows[il] = model_kv_rows(m, il, n_ctx, max_batch);
        e->owns[il] = owns ? owns[il] : true;
        if (!e->owns[il])
            continue;
        if (alloc_cache(e, il))
            goto oom;
    }

    const uint32_t used = model_buffers(m);
    for (int b = FIRST_SCRATCH; b < LB_COUNT; b++) {
        if (!(used & (1u << b)))
            continue;
        size_t bytes = (size_t)max_batch * buf_width(hp, b) * sizeof(float);
        e->scratch_bytes += bytes;
        if (!(e->buf[b] = malloc(bytes)))
            goto oom;
    }
    if (hp->n_expert) {
        /* 4-byte values: floats and int32s alike */
        const size_t B = (size_t)max_batch, k = (size_t)hp->n_expert_used;
        const size_t bytes = B * ((size_t)hp->n_expert + 2 * k + 2) * 4;
        if (!(e->moe_block = malloc(bytes)))
            goto oom;
        e->scratch_bytes += bytes;
        e->scores = e->moe_block;
        e->chosen_w = e->scores + B * (size_t)hp->n_expert;
        e->rows_w = e->chosen_w + B * k;
        e->chosen = (int32_t *)(e->rows_w + B);
        e->rows = e->chosen + B * k;
        e->routed_words = (hp->n_expert + 63) / 64;
        e->routed = calloc((size_t)hp->n_layer * (size_t)e->routed_words, sizeof *e->routed);
        if (!e->routed)
            goto oom;
    }
    if (kern_ctx_reserve(kc, widest_input(hp), max_batch))
        goto oom;
    return e;

oom:
    snprintf(err, errlen, "out of memory for %d KV cache(s) of %d positions and %d-token batches",
             n_seq, n_ctx, max_batch);
    engine_free(e);
    return NULL;
}

void engine_free(engine *e)
{
    if (!e)
        return;
    for (int il = 0; e->k_cache && il < e->m->hp.n_layer; il++) {
        free(e->k_cache[il]);
        free(e->v_cache[il]);
    }
    free(e->k_cache);
    free(e->v_cache);
    free(e->owns);
    free(e->filled);
    free(e->next_pos);
    free(e->kv_rows);
    for (int b = FIRST_SCRATCH; b < LB_COUNT; b++)
        free(e->buf[b]);
    free(e->moe_block);
    free(e->routed);
    gpu_layers_free(e->gpu);
    free(e->on_gpu);
    free(e);
}

void engine_hint_experts(engine *e, bool on)
{
    e->hint_experts = on;
}

void engine_count_routes(engine *e, uint32_t *counts)
{
    e->route_counts = counts;
}

const uint64_t *engine_routed(const engine *e, int il)
{
    const model_layer *l = &e->m->layers[il];
    if (!e->routed || !l->t[LT_FFN_GATE_INP])
        return NULL;
    return e->routed + (size_t)il * (size_t)e->routed_words;
}

bool engine_layer_on_gpu(const engine *e, int il)
{
    return e->on_gpu && il >= 0 && il < e->m->hp.n_layer && e->on_gpu[il];
}

int engine_attach_gpu(engine *e, gpu_layers *gl, const bool *on_gpu)
{
    const int L = e->m->hp.n_layer;
    /* offload.c lays out one sequence's cache per layer in VRAM */
    if (e->gpu || e->n_seq != 1 || !(e->on_gpu = calloc((size_t)L, sizeof *e->on_gpu)))
        return -1;
    e->gpu = gl;
    for (int il = 0; il < L; il++) {
        if (!on_gpu[il] || !e->owns[il])
            continue;
        e->on_gpu[il] = true;
        free_cache(e, il);
    }
    return 0;
}

int engine_set_owned(engine *e, const bool *owns)
{
    const model_hparams *hp = &e->m->hp;
    if (e->gpu)
        return -1;   /* the GPU's caches are laid out by offload.c for the layers it was given */
    int rc = 0;
    memset(e->filled, 0, sizeof *e->filled * (size_t)hp->n_layer * (size_t)e->n_seq);
    for (int il = 0; il < hp->n_layer; il++) {
        bool want = owns ? owns[il] : true;
        if (want == e->owns[il])
            continue;
        if (want && alloc_cache(e, il)) {
            want = false;
            rc = -1;
        }
        if (!want)
            free_cache(e, il);
        e->owns[il] = want;
    }
    return rc;
}

int engine_n_seq(const engine *e)
{
    return e->n_seq;
}

void engine_memory(const engine *e, uint64_t *kv_bytes, uint64_t *scratch_bytes)
{
    *kv_bytes = e->kv_bytes;
    *scratch_bytes = e->scratch_bytes;
}

void engine_embed(engine *e, const int32_t *tokens, int n, float *hidden)
{
    const gguf_tensor *te = e->m->tok_embd;
    const int n_embd = e->m->hp.n_embd;
    const float scale = e->m->hp.embd_scale;
    for (int t = 0; t < n; t++) {
        float *h = hidden + (size_t)t * (size_t)n_embd;
        kern_get_row(te->data, te->type, n_embd, tokens[t], h);
        if (scale != 1.0f)
            for (int i = 0; i < n_embd; i++)
                h[i] *= scale;
    }
}

/* y = w x, from w's kept form when it has one (model_keep_weights). 0, or -1 when the kernels
 * run out of scratch (not after engine_create's reservation). */
static int matmul(engine *e, const gguf_tensor *w, const void *kept, const float *x, int n, float *y)
{
    if (kept)
        return kern_matmul_kept(e->kc, kept, w->type, (int)w->ne[0], (int)w->ne[1], x, n, y);
    return kern_matmul(e->kc, w->data, w->type, (int)w->ne[0], (int)w->ne[1], x, n, y);
}

/* The same for the matrix in slot `slot` of layer il. */
static int slot_matmul(engine *e, int il, int slot, const float *x, int n, float *y)
{
    const model_layer *l = &e->m->layers[il];
    return matmul(e, l->t[slot], l->kept[slot], x, n, y);
}

static void rmsnorm_rows(float *out, const float *x, const gguf_tensor *w, int n, int dim,
                         float eps)
{
    for (int t = 0; t < n; t++)
        kern_rmsnorm(out + (size_t)t * (size_t)dim, x + (size_t)t * (size_t)dim, w->data, dim, eps);
}

static void add_bias_rows(float *y, const gguf_tensor *b, int n, int dim)
{
    for (int t = 0; t < n; t++)
        kern_add(y + (size_t)t * (size_t)dim, b->data, dim);
}


/* Every row's sequence has cached positions up to the row's own in layer il. */
static void note_filled(engine *e, int il, int n, const int32_t *pos, const int32_t *seq)
{
    for (int t = 0; t < n; t++) {
        int *f = filled_of(e, il, seq ? seq[t] : 0);
        if (pos[t] + 1 > *f)
            *f = pos[t] + 1;
    }
}

/* n values into the cache in type t: F16 as before quantized types existed, the others by the
 * types' reference quantizer (the same bytes on every device of a ring). */
static void store_values(enum dtype t, const float *x, uint8_t *dst, size_t n)
{
    if (t == DT_F16) {
        uint16_t *h = (uint16_t *)dst;
        for (size_t i = 0; i < n; i++)
            h[i] = fp32_to_fp16(x[i]);
    } else {
        kern_type_get(t)->from_float(x, dst, (int64_t)n);
    }
}

/* Row r of a sequence's region (rows rows per KV head, hb bytes a head's row) written from, or
 * read into, x: n_head_kv * head_dim values. */
static void put_row(const engine *e, enum dtype t, const float *x, uint8_t *region, size_t rows,
                    size_t r, size_t hb)
{
    const model_hparams *hp = &e->m->hp;
    for (int h = 0; h < hp->n_head_kv; h++)
        store_values(t, x + (size_t)h * (size_t)hp->head_dim, region + ((size_t)h * rows + r) * hb,
                     (size_t)hp->head_dim);
}

static void get_row(const engine *e, enum dtype t, float *x, const uint8_t *region, size_t rows,
                    size_t r, size_t hb)
{
    const model_hparams *hp = &e->m->hp;
    for (int h = 0; h < hp->n_head_kv; h++)
        kern_type_get(t)->to_float(region + ((size_t)h * rows + r) * hb,
                                   x + (size_t)h * (size_t)hp->head_dim, hp->head_dim);
}

/* LOP_ATTENTION: the batch's K and V rows into the cache, then every query over it. */
static void attention(engine *e, int il, int sinks_slot, float *out, int n, const int32_t *pos,
                      const int32_t *seq)
{
    const model_hparams *hp = &e->m->hp;
    const size_t kv_dim = buf_width(hp, LB_K), rows = (size_t)e->kv_rows[il];
    for (int t = 0; t < n; t++) {
        const int s = seq ? seq[t] : 0;
        const size_t r = (size_t)pos[t] % rows;
        put_row(e, e->m->kv_type[0], e->buf[LB_K] + (size_t)t * kv_dim,
                seq_region(e, e->k_cache[il], il, s, e->k_hb), rows, r, e->k_hb);
        put_row(e, e->m->kv_type[1], e->buf[LB_V] + (size_t)t * kv_dim,
                seq_region(e, e->v_cache[il], il, s, e->v_hb), rows, r, e->v_hb);
    }
    const layer_prog *p = &e->m->layers[il].prog;
    const gguf_tensor *sinks = sinks_slot == LOP_NONE ? NULL : e->m->layers[il].t[sinks_slot];
    const kern_kv kv = {e->k_cache[il], e->v_cache[il], e->m->kv_type[0], e->m->kv_type[1]};
    kern_attention(e->kc, out, e->buf[LB_Q], n, pos, seq, (size_t)e->kv_rows[il], p->window,
                   sinks ? sinks->data : NULL, &kv, hp->n_head, hp->n_head_kv, hp->head_dim,
                   hp->attn_scale);
}

/* An element-wise gate: gate = act(gate) * up. */
static void gate_op(int kind, float *gate, const float *up, int n)
{
    if (kind == LOP_GELU_MUL)
        kern_gelu_mul(gate, up, n);
    else if (kind == LOP_SWIGLU_OAI_MUL)
        kern_swiglu_oai_mul(gate, up, n);
    else
        kern_silu_mul(gate, up, n);
}

/* Row x of a 2-D bias (an expert's) added to n rows of y. */
static void add_expert_bias(float *y, const gguf_tensor *b, int x, int n)
{
    const int dim = (int)b->ne[0];
    for (int r = 0; r < n; r++)
        kern_add(y + (size_t)r * (size_t)dim, (const float *)b->data + (size_t)x * (size_t)dim, dim);
}

/* The router's choice for one row: softmax over every expert's score, the k most probable
 * (ties: the lower index), their probabilities renormalized to sum 1. */
static void route(float *scores, int n_expert, int k, int32_t *chosen, float *weight)
{
    kern_softmax(scores, n_expert);
    float sum = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int x = 0; x < n_expert; x++) {
            bool taken = false;
            for (int i = 0; i < j; i++)
                taken |= chosen[i] == x;
            if (!taken && (best < 0 || scores[x] > scores[best]))
                best = x;
        }
        chosen[j] = best;
        weight[j] = scores[best];
        sum += scores[best];
    }
    for (int j = 0; j < k; j++)
        weight[j] /= sum;
}

/* y (n rows) = W_x · in (n rows) with W_x expert x's slice of the 3-D tensor w. */
static int expert_matmul(engine *e, const gguf_tensor *w, int x, const float *in, int n, float *y)
{
    const size_t slice = dtype_row_bytes(w->type, w->ne[0]) * (size_t)w->ne[1];
    return kern_matmul(e->kc, (const uint8_t *)w->data + (size_t)x * slice, w->type,
                       (int)w->ne[0], (int)w->ne[1], in, n, y);
}

/* Ask the kernel to read the routed experts' pages of the 3-D tensors w[1..3] now, exactly
 * those (whole pages), so that they arrive in large requests while the first experts compute. */
static void hint_routed(const gguf_tensor *const *w, const uint64_t *routed, int n_x)
{
    const uintptr_t page = 4096;
    for (int j = 1; j <= 3; j++) {
        const size_t slice = w[j]->nbytes / (size_t)n_x;
        for (int x = 0; x < n_x; x++) {
            if (!((routed[x / 64] >> (x % 64)) & 1))
                continue;
            uintptr_t b = (uintptr_t)w[j]->data + (uintptr_t)x * slice;
            uintptr_t e = b + slice;
            b &= ~(page - 1);
            madvise((void *)b, e - b, MADV_WILLNEED);
        }
    }
}

/* LOP_MOE: the router's scores for every row, then expert by expert (in index order, so a
 * row's sum is the same whatever else is in its batch) one product over the rows routed to it. */
static int moe(engine *e, int il, const layer_op *op, int n)
{
    const model_hparams *hp = &e->m->hp;
    const gguf_tensor *const *w = (const gguf_tensor *const *)e->m->layers[il].t + op->w;
    /* biases: the router's, then the experts' gate, up and down (NULL: none) */
    const gguf_tensor *const *b =
        op->b == LOP_NONE ? NULL : (const gguf_tensor *const *)e->m->layers[il].t + op->b;
    const int n_x = hp->n_expert, k = hp->n_expert_used, d = hp->n_embd, ff = hp->n_ff;
    const float *in = e->buf[op->src];
    float *out = e->buf[op->dst], *xg = e->buf[LB_XG], *gate = e->buf[LB_GATE];
    if (slot_matmul(e, il, op->w, in, n, e->scores))
        return -1;
    if (b)
        add_bias_rows(e->scores, b[0], n, n_x);
    for (int t = 0; t < n; t++)
        route(e->scores + (size_t)t * (size_t)n_x, n_x, k, e->chosen + (size_t)t * (size_t)k,
              e->chosen_w + (size_t)t * (size_t)k);
    memset(out, 0, sizeof(float) * (size_t)n * (size_t)d);
    uint64_t *routed = e->routed + (size_t)il * (size_t)e->routed_words;
    memset(routed, 0, sizeof *routed * (size_t)e->routed_words);
    for (int i = 0; i < n * k; i++) {
        routed[e->chosen[i] / 64] |= 1ull << (e->chosen[i] % 64);
        if (e->route_counts)
            e->route_counts[(size_t)il * (size_t)n_x + (size_t)e->chosen[i]]++;
    }
    if (e->hint_experts)
        hint_routed(w, routed, n_x);
    for (int x = 0; x < n_x; x++) {
        int c = 0;
        for (int t = 0; t < n; t++)
            for (int j = 0; j < k; j++)
                if (e->chosen[t * k + j] == x) {
                    e->rows[c] = t;
                    e->rows_w[c] = e->chosen_w[t * k + j];
                    memcpy(xg + (size_t)c++ * (size_t)d, in + (size_t)t * (size_t)d,
                           sizeof(float) * (size_t)d);
                }
        if (!c)
            continue;
        if (expert_matmul(e, w[1], x, xg, c, gate) || expert_matmul(e, w[2], x, xg, c, e->buf[LB_UP]))
            return -1;
        if (b) {
            add_expert_bias(gate, b[1], x, c);
            add_expert_bias(e->buf[LB_UP], b[2], x, c);
        }
        gate_op(op->act, gate, e->buf[LB_UP], c * ff);
        if (expert_matmul(e, w[3], x, gate, c, xg))
            return -1;
        if (b)
            add_expert_bias(xg, b[3], x, c);
        for (int r = 0; r < c; r++) {
            float *o = out + (size_t)e->rows[r] * (size_t)d;
            const float *y = xg + (size_t)r * (size_t)d;
            for (int i = 0; i < d; i++)
                o[i] += e->rows_w[r] * y[i];
        }
    }
    return 0;
}

/* One op of layer il's program over n rows. */
static int run_op(engine *e, int il, const layer_op *op, int n, const int32_t *pos,
                  const int32_t *seq)
{
    const model_hparams *hp = &e->m->hp;
    const lop_dims dims = {hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff};
    const gguf_tensor *const *w = (const gguf_tensor *const *)e->m->layers[il].t;
    float *dst = e->buf[op->dst], *src = e->buf[op->src];
    const size_t width = buf_width(hp, op->dst);
    switch ((enum lop_kind)op->kind) {
    case LOP_NORM: {
        const size_t dim = op->per_head ? (size_t)hp->head_dim : width;
        const size_t rows = (size_t)n * (width / dim);
        for (size_t r = 0; r < rows; r++)
            kern_rmsnorm(dst + r * dim, src + r * dim, w[op->w]->data, (int)dim, hp->rms_eps);
        return 0;
    }
    case LOP_MATMUL:
        if (slot_matmul(e, il, op->w, src, n, dst))
            return -1;
        if (op->b != LOP_NONE)
            add_bias_rows(dst, w[op->b], n, (int)width);
        return 0;
    case LOP_ADD:
        kern_add(dst, src, (int)((size_t)n * width));
        return 0;
    case LOP_ROPE: {
        const rope_params *rp = &hp->rope[e->m->layers[il].prog.rope];
        const size_t src_width = buf_width(hp, op->src);
        for (int t = 0; t < n; t++) {
            kern_rope(dst + (size_t)t * width, lop_heads(&dims, op->dst), hp->head_dim, pos[t], rp);
            kern_rope(src + (size_t)t * src_width, lop_heads(&dims, op->src), hp->head_dim, pos[t],
                      rp);
        }
        return 0;
    }
    case LOP_ATTENTION:
        attention(e, il, op->w, dst, n, pos, seq);
        return 0;
    case LOP_SILU_MUL:
    case LOP_GELU_MUL:
    case LOP_SWIGLU_OAI_MUL:
        gate_op(op->kind, dst, src, (int)((size_t)n * width));
        return 0;
    case LOP_MOE:
        return moe(e, il, op, n);
    case LOP_KINDS:
        break;
    }
    return -1;
}

static int layer_forward(engine *e, int il, float *hidden, int n, const int32_t *pos,
                         const int32_t *seq)
{
    const layer_prog *p = &e->m->layers[il].prog;
    e->buf[LB_H] = hidden;
    for (int i = 0; i < p->n_op; i++)
        if (run_op(e, il, &p->op[i], n, pos, seq))
            return -1;
    note_filled(e, il, n, pos, seq);
    return 0;
}

static bool cached_up_to(const engine *e, int seq, int p, int first, int last)
{
    for (int il = first; il < last; il++)
        if (p > *filled_of(e, il, seq))
            return false;
    return true;
}

/* The rows of each sequence continue its cache: consecutive positions in batch order, the
 * first at most what every layer of [first, last) holds for it. */
static bool rows_valid(engine *e, int n, const int32_t *pos, const int32_t *seq, int first,
                       int last)
{
    for (int s = 0; s < e->n_seq; s++)
        e->next_pos[s] = -1;
    for (int t = 0; t < n; t++) {
        int s = seq ? seq[t] : 0;
        if (s < 0 || s >= e->n_seq || pos[t] < 0 || pos[t] >= e->n_ctx)
            return false;
        bool follows = e->next_pos[s] >= 0 ? pos[t] == e->next_pos[s]
                                           : cached_up_to(e, s, pos[t], first, last);
        if (!follows)
            return false;
        e->next_pos[s] = pos[t] + 1;
    }
    return true;
}

/* A batch wider than the sequences (a prompt) touches the scratch rows of the whole batch; the
 * decode steps after it use one row per sequence, and the first of them hands the pages of the
 * other rows back to the OS. Under a memory limit those pages would otherwise stay charged to
 * the process and crowd out the page cache that holds the weights (the scheduler plans a
 * device's memory with the decode rows, sched/shape.c). */
static void fit_scratch(engine *e, int n)
{
    if (n > e->n_seq) {
        e->wide = true;
        return;
    }
    if (!e->wide)
        return;
    e->wide = false;
    size_t keep = (size_t)e->n_seq, rows = (size_t)e->max_batch;
    for (int b = FIRST_SCRATCH; b < LB_COUNT; b++) {
        if (!e->buf[b])
            continue;
        size_t cols = buf_width(&e->m->hp, b);
        mem_release(e->buf[b] + keep * cols, (rows - keep) * cols * sizeof(float));
    }
    kern_ctx_release(e->kc, widest_input(&e->m->hp), e->n_seq);
}

int engine_layers(engine *e, float *hidden, int n, const int32_t *pos, const int32_t *seq,
                  int first, int last)
{
    if (n < 1 || n > e->max_batch || first < 0 || last > e->m->hp.n_layer || first > last)
        return -1;
    fit_scratch(e, n);
    for (int il = first; il < last; il++)
        if (!e->owns[il])
            return -1;
    if (!rows_valid(e, n, pos, seq, first, last))
        return -1;
    for (int il = first; il < last;) {
        if (!e->on_gpu || !e->on_gpu[il]) {
            if (layer_forward(e, il, hidden, n, pos, seq))
                return -1;
            il++;
            continue;
        }
        /* consecutive GPU layers go in one submit */
        int end = il;
        while (end < last && e->on_gpu[end])
            end++;
        char err[160];
        if (gpu_layers_run(e->gpu, hidden, n, pos, il, end, err, sizeof err))
            return -1;
        for (; il < end; il++)
            note_filled(e, il, n, pos, seq);
    }
    return 0;
}

int engine_output(engine *e, const float *hidden, int row0, int n_rows, float *logits)
{
    const model *m = e->m;
    const int n_embd = m->hp.n_embd;
    fit_scratch(e, n_rows < e->max_batch ? n_rows : e->max_batch);
    for (int r = 0; r < n_rows; r += e->max_batch) {
        int n = n_rows - r < e->max_batch ? n_rows - r : e->max_batch;
        rmsnorm_rows(e->buf[LB_X], hidden + (size_t)(row0 + r) * (size_t)n_embd, m->output_norm,
                     n, n_embd, m->hp.rms_eps);
        if (matmul(e, m->output, m->output_kept, e->buf[LB_X], n, logits + (size_t)r * (size_t)m->hp.n_vocab))
            return -1;
    }
    return 0;
}

void engine_output_norm(const engine *e, const float *hidden, int n_rows, float *out)
{
    const model *m = e->m;
    rmsnorm_rows(out, hidden, m->output_norm, n_rows, m->hp.n_embd, m->hp.rms_eps);
}

int logits_check(const float *l, int rows, int n_vocab, int pos0, char *err, size_t errlen)
{
    for (size_t i = 0; i < (size_t)rows * (size_t)n_vocab; i++)
        if (!isfinite(l[i])) {
            snprintf(err, errlen,
                     "the model produced %s logits at position %d: the weights are damaged or "
                     "the type is unsupported",
                     isnan(l[i]) ? "NaN" : "infinite", pos0 + (int)(i / (size_t)n_vocab));
            return -1;
        }
    return 0;
}

int engine_kv_truncate(engine *e, int seq, int p0)
{
    if (seq < 0 || seq >= e->n_seq || p0 < 0 || p0 > e->n_ctx)
        return -1;
    for (int il = 0; il < e->m->hp.n_layer; il++)
        if (*filled_of(e, il, seq) > p0)
            *filled_of(e, il, seq) = p0;
    return 0;
}

/* A sequence's region of a layer's K and V caches, rows rows per KV head. */
typedef struct kv_region {
    uint8_t *k, *v;
    size_t rows;
} kv_region;

/* Position row sr of src moved to row dr of dst, delta positions on: the key re-rotated
 * (rotations compose: rotating a key cached at p by delta places it at p + delta), the value
 * copied. */
static void move_row(engine *e, const rope_params *rp, kv_region src, size_t sr, kv_region dst,
                     size_t dr, int delta)
{
    const model_hparams *hp = &e->m->hp;
    float *row = e->buf[LB_K]; /* scratch: at least one row of K */
    get_row(e, e->m->kv_type[0], row, src.k, src.rows, sr, e->k_hb);
    kern_rope(row, hp->n_head_kv, hp->head_dim, delta, rp);
    put_row(e, e->m->kv_type[0], row, dst.k, dst.rows, dr, e->k_hb);
    for (int h = 0; h < hp->n_head_kv; h++)
        memmove(dst.v + ((size_t)h * dst.rows + dr) * e->v_hb,
                src.v + ((size_t)h * src.rows + sr) * e->v_hb, e->v_hb);
}

/* Move positions [p0, end) of layer il's cache of one sequence (its region c; filled positions
 * computed) by delta < 0. A full cache moves row p to p + delta in ascending order (a
 * destination is always below every source still to be read); a ring holds only positions
 * [filled - rows, filled), whose new rows may be any of the old ones, so it moves from a copy.
 * 0, or -1 out of memory. */
static int shift_rows(engine *e, int il, kv_region c, int p0, int end, int filled, int delta)
{
    /* a pure rotation: the keys carry their YaRN scale already */
    rope_params rot = e->m->hp.rope[e->m->layers[il].prog.rope];
    rot.rotate_only = true;
    const rope_params *rp = &rot;
    const size_t rows = c.rows, n_kv = (size_t)e->m->hp.n_head_kv;
    if (rows >= (size_t)e->n_ctx) {
        for (int p = p0; p < end; p++)
            move_row(e, rp, c, (size_t)p, c, (size_t)(p + delta), delta);
        return 0;
    }
    kv_region copy = {malloc(n_kv * rows * e->k_hb), malloc(n_kv * rows * e->v_hb), rows};
    if (!copy.k || !copy.v) {
        free(copy.k);
        free(copy.v);
        return -1;
    }
    memcpy(copy.k, c.k, n_kv * rows * e->k_hb);
    memcpy(copy.v, c.v, n_kv * rows * e->v_hb);
    int from = filled - (int)rows > p0 ? filled - (int)rows : p0;
    for (int p = from; p < end; p++)
        move_row(e, rp, copy, (size_t)p % rows, c, (size_t)(p + delta) % rows, delta);
    free(copy.k);
    free(copy.v);
    return 0;
}

/* n rows between the GPU's layout (each row all KV heads, F16) and a region's (each KV head's
 * rows together, rows per head). */
static void regroup(const engine *e, uint16_t *gpu, uint8_t *region, size_t n, size_t rows,
                    bool to_region)
{
    const size_t n_kv = (size_t)e->m->hp.n_head_kv, hb = e->k_hb;
    for (size_t r = 0; r < n; r++)
        for (size_t h = 0; h < n_kv; h++) {
            uint8_t *a = region + (h * rows + r) * hb, *b = (uint8_t *)gpu + (r * n_kv + h) * hb;
            memcpy(to_region ? a : b, to_region ? b : a, hb);
        }
}

/* A GPU layer's cache is shifted on the host: its rows come out of VRAM and go back. Its cache
 * is F16 (offload.c keeps layers of other cache types on the CPU), so K and V rows are alike. */
static int shift_gpu_rows(engine *e, int il, int p0, int end, int filled, int delta)
{
    const int rows = end < e->kv_rows[il] ? end : e->kv_rows[il];
    const size_t n = (size_t)rows * buf_width(&e->m->hp, LB_K);
    const size_t all = (size_t)e->kv_rows[il], bytes = cache_bytes(e, il, e->k_hb);
    uint16_t *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
    kv_region c = {calloc(1, bytes), calloc(1, bytes), all};
    int rc = -1;
    if (k && v && c.k && c.v && !gpu_layers_kv_read(e->gpu, il, rows, k, v)) {
        regroup(e, k, c.k, (size_t)rows, all, true);
        regroup(e, v, c.v, (size_t)rows, all, true);
        if (!shift_rows(e, il, c, p0, end, filled, delta)) {
            regroup(e, k, c.k, (size_t)rows, all, false);
            regroup(e, v, c.v, (size_t)rows, all, false);
            rc = gpu_layers_kv_write(e->gpu, il, rows, k, v);
        }
    }
    free(k);
    free(v);
    free(c.k);
    free(c.v);
    return rc;
}

int engine_kv_shift(engine *e, int seq, int p0, int p1, int delta)
{
    if (seq < 0 || seq >= e->n_seq || delta >= 0 || p0 + delta < 0 || p0 > p1 || p1 > e->n_ctx)
        return -1;
    for (int il = 0; il < e->m->hp.n_layer; il++) {
        if (!e->owns[il])
            continue;
        int *filled = filled_of(e, il, seq);
        int end = p1 < *filled ? p1 : *filled;
        if (e->on_gpu && e->on_gpu[il]) {
            /* with a GPU attached there is one sequence (engine_attach_gpu) */
            if (end > p0 && shift_gpu_rows(e, il, p0, end, *filled, delta))
                return -1;
        } else {
            kv_region c = {seq_region(e, e->k_cache[il], il, seq, e->k_hb),
                           seq_region(e, e->v_cache[il], il, seq, e->v_hb),
                           (size_t)e->kv_rows[il]};
            if (shift_rows(e, il, c, p0, end, *filled, delta))
                return -1;
        }
        if (end == *filled && end > p0)
            *filled = end + delta;
    }
    return 0;
}
