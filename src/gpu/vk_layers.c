/* vk_layers.c — whole transformer layers on a Vulkan device.
 *
 * Each GPU layer's tensors are uploaded once into their own device-local buffers, next to its
 * F16 KV cache; the activations of a batch live in shared device buffers sized for max_batch.
 * Every op of every layer has its descriptor set made once. A run of layers [first, last) on n
 * tokens is one command buffer: copy the hidden state in, each layer's ops with a barrier
 * between dependent ones, copy it out. It is recorded the first time that shape is seen and
 * reused (a few shapes are kept: decode is always n = 1); the positions and the rotation table
 * change per call and are read from host-visible buffers written before the submit.
 *
 * Per layer, as the CPU engine does (engine.c):
 *   x = rms(h);  q,k,v = W x + b;  qk-norm;  rope;  cache <- k,v;  att = attention(q, cache)
 *   h += Wo att;  x = rms(h);  g = silu(Wg x) * (Wu x);  h += Wd g
 * (the residual adds and the biases are part of the matrix products). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/vk.h"

/* The ops of a layer, each with its descriptor set. */
enum {
    OP_ATTN_NORM, OP_Q, OP_K, OP_V, OP_Q_NORM, OP_K_NORM, OP_ROPE_Q, OP_ROPE_K, OP_KV_STORE,
    OP_ATTENTION, OP_WO, OP_FFN_NORM, OP_GATE, OP_UP, OP_SILU, OP_DOWN, OP_COUNT
};

typedef struct vk_layer {
    gpu_buf *t[GPU_LAYER_TENSORS];   /* as gpu_layer_tensors() orders them; NULL: absent */
    gpu_buf *kc, *vc;
    VkDescriptorSet set[OP_COUNT];
} vk_layer;

#define VK_RECORDINGS 8

typedef struct vk_rec {
    int n, first, last;
    VkCommandBuffer cb;
    uint64_t used;         /* for evicting the least recently used */
} vk_rec;

typedef struct vk_layers {
    gpu_layers common;
    vk_dev *d;
    gpu_model_desc md;
    gpu_layer_desc *desc;  /* n_layer */
    vk_layer *L;           /* n_layer; empty where the layer is not on the GPU */
    gpu_buf *h, *x, *q, *k, *v, *att, *gate, *up;   /* device-local, max_batch rows */
    gpu_buf *io, *pos, *rope;                        /* host-visible */
    VkDescriptorPool pool;
    vk_rec rec[VK_RECORDINGS];
    uint64_t tick;
} vk_layers;

/* Indices into vk_layer.t (the order of gpu_layer_tensors). */
enum { T_ATTN_NORM, T_WQ, T_WK, T_WV, T_WO, T_BQ, T_BK, T_BV, T_Q_NORM, T_K_NORM, T_FFN_NORM,
       T_GATE, T_UP, T_DOWN };

static int upload_layer(vk_layers *gl, int il, char *err, size_t errlen)
{
    vk_dev *d = gl->d;
    vk_layer *L = &gl->L[il];
    const gpu_tensor *t[GPU_LAYER_TENSORS];
    gpu_layer_tensors(&gl->desc[il], t);
    for (int i = 0; i < GPU_LAYER_TENSORS; i++) {
        if (!t[i]->data)
            continue;
        const uint64_t bytes = gpu_tensor_bytes(t[i]);
        if (bytes > d->limits.maxStorageBufferRange) {
            snprintf(err, errlen, "layer %d: a %.1f MiB tensor exceeds the GPU's %.1f MiB "
                                  "buffer limit", il, (double)bytes / 1048576.0,
                     (double)d->limits.maxStorageBufferRange / 1048576.0);
            return -1;
        }
        if (!(L->t[i] = vk_buf_new(d, bytes, false, err, errlen)) ||
            vk_write(d, L->t[i], 0, t[i]->data, bytes)) {
            if (L->t[i])
                snprintf(err, errlen, "layer %d: upload to the GPU failed", il);
            return -1;
        }
    }
    const uint64_t cache = (uint64_t)gl->md.n_ctx * (uint64_t)gl->md.n_head_kv *
                           (uint64_t)gl->md.head_dim * sizeof(uint16_t);
    if (!(L->kc = vk_buf_new(d, cache, false, err, errlen)) ||
        !(L->vc = vk_buf_new(d, cache, false, err, errlen)))
        return -1;
    return 0;
}

static int make_sets(vk_layers *gl, int il)
{
    vk_dev *d = gl->d;
    vk_layer *L = &gl->L[il];
    gpu_buf *const *t = L->t;
    gpu_buf *b[OP_COUNT][5] = {
        [OP_ATTN_NORM] = {gl->h, gl->x, t[T_ATTN_NORM]},
        [OP_Q] = {t[T_WQ], gl->x, gl->q, t[T_BQ]},
        [OP_K] = {t[T_WK], gl->x, gl->k, t[T_BK]},
        [OP_V] = {t[T_WV], gl->x, gl->v, t[T_BV]},
        [OP_Q_NORM] = {gl->q, gl->q, t[T_Q_NORM]},
        [OP_K_NORM] = {gl->k, gl->k, t[T_K_NORM]},
        [OP_ROPE_Q] = {gl->q, gl->rope},
        [OP_ROPE_K] = {gl->k, gl->rope},
        [OP_KV_STORE] = {gl->k, gl->v, L->kc, L->vc, gl->pos},
        [OP_ATTENTION] = {gl->q, L->kc, L->vc, gl->att, gl->pos},
        [OP_WO] = {t[T_WO], gl->att, gl->h},
        [OP_FFN_NORM] = {gl->h, gl->x, t[T_FFN_NORM]},
        [OP_GATE] = {t[T_GATE], gl->x, gl->gate},
        [OP_UP] = {t[T_UP], gl->x, gl->up},
        [OP_SILU] = {gl->gate, gl->up},
        [OP_DOWN] = {t[T_DOWN], gl->gate, gl->h},
    };
    for (int op = 0; op < OP_COUNT; op++)
        if (!(L->set[op] = vk_set(d, gl->pool, b[op], 5)))
            return -1;
    return 0;
}

void vk_layers_free(gpu_layers *g)
{
    vk_layers *gl = (vk_layers *)g;
    if (!gl)
        return;
    vk_dev *d = gl->d;
    for (int r = 0; r < VK_RECORDINGS; r++)
        if (gl->rec[r].cb)
            vk.vkFreeCommandBuffers(d->dev, d->cpool, 1, &gl->rec[r].cb);
    for (int il = 0; gl->L && il < gl->md.n_layer; il++) {
        for (int i = 0; i < GPU_LAYER_TENSORS; i++)
            vk_buf_del(d, gl->L[il].t[i]);
        vk_buf_del(d, gl->L[il].kc);
        vk_buf_del(d, gl->L[il].vc);
    }
    gpu_buf *shared[] = {gl->h, gl->x, gl->q, gl->k, gl->v, gl->att, gl->gate, gl->up,
                         gl->io, gl->pos, gl->rope};
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
        vk_buf_del(d, shared[i]);
    if (gl->pool)
        vk.vkDestroyDescriptorPool(d->dev, gl->pool, NULL);
    free(gl->L);
    free(gl->desc);
    free(gl);
}

gpu_layers *vk_layers_create(gpu_dev *g, const gpu_model_desc *md, const gpu_layer_desc *descs,
                             const bool *on_gpu, char *err, size_t errlen)
{
    vk_dev *d = (vk_dev *)g;
    vk_layers *gl = calloc(1, sizeof *gl);
    if (!gl) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    gl->d = d;
    gl->md = *md;
    gl->L = calloc((size_t)md->n_layer, sizeof *gl->L);
    gl->desc = calloc((size_t)md->n_layer, sizeof *gl->desc);
    if (!gl->L || !gl->desc) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    memcpy(gl->desc, descs, sizeof *descs * (size_t)md->n_layer);

    const size_t B = (size_t)md->max_batch, f = sizeof(float);
    const size_t q_dim = (size_t)md->n_head * (size_t)md->head_dim;
    const size_t kv_dim = (size_t)md->n_head_kv * (size_t)md->head_dim;
    struct { gpu_buf **b; size_t bytes; bool host; } shared[] = {
        {&gl->h, B * (size_t)md->n_embd * f, false}, {&gl->x, B * (size_t)md->n_embd * f, false},
        {&gl->q, B * q_dim * f, false}, {&gl->k, B * kv_dim * f, false},
        {&gl->v, B * kv_dim * f, false}, {&gl->att, B * q_dim * f, false},
        {&gl->gate, B * (size_t)md->n_ff * f, false}, {&gl->up, B * (size_t)md->n_ff * f, false},
        {&gl->io, B * (size_t)md->n_embd * f, true}, {&gl->pos, B * sizeof(int32_t), true},
        {&gl->rope, B * (size_t)(md->rope.n_rot / 2) * 2 * f, true},
    };
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
        if (!(*shared[i].b = vk_buf_new(d, shared[i].bytes, shared[i].host, err, errlen)))
            goto fail;

    int n_gpu = 0;
    for (int il = 0; il < md->n_layer; il++)
        n_gpu += on_gpu[il];
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                               .descriptorCount = (uint32_t)(n_gpu * OP_COUNT * VK_BINDINGS)};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .maxSets = (uint32_t)(n_gpu * OP_COUNT),
                                      .poolSizeCount = 1,
                                      .pPoolSizes = &ps};
    if (n_gpu && vk.vkCreateDescriptorPool(d->dev, &dpi, NULL, &gl->pool) != VK_SUCCESS) {
        snprintf(err, errlen, "cannot create the GPU layers' descriptor pool");
        goto fail;
    }
    for (int il = 0; il < md->n_layer; il++) {
        if (!on_gpu[il])
            continue;
        if (upload_layer(gl, il, err, errlen))
            goto fail;
        if (make_sets(gl, il)) {
            snprintf(err, errlen, "cannot bind layer %d's GPU buffers", il);
            goto fail;
        }
    }
    vk_refresh_vram(d);
    return &gl->common;

fail:
    vk_layers_free(&gl->common);
    return NULL;
}

static void push_dims(vk_push *p, uint32_t a, uint32_t b, uint32_t c, uint32_t e, uint32_t f)
{
    *p = (vk_push){.u = {a, b, c, e, f}};
}

/* One matrix product of the layer: flags 1 adds the bias, 2 accumulates into the output. */
static void rec_matmul(vk_layers *gl, VkCommandBuffer cb, const vk_layer *L, int op,
                       const gpu_tensor *t, int n, uint32_t flags)
{
    vk_push p;
    push_dims(&p, (uint32_t)t->ne0, (uint32_t)t->ne1, (uint32_t)n,
              (uint32_t)dtype_row_bytes(t->type, (uint64_t)t->ne0), flags);
    vk_dispatch(gl->d, cb, gl->d->pipes[vk_pipe_matmul(t->type, n)], L->set[op], &p,
                vk_matmul_groups((int)t->ne1));
}

static void rec_norm(vk_layers *gl, VkCommandBuffer cb, VkDescriptorSet set, int dim, int rows)
{
    vk_push p;
    push_dims(&p, (uint32_t)dim, (uint32_t)rows, 0, 0, 0);
    p.f[0] = gl->md.rms_eps;
    vk_dispatch(gl->d, cb, gl->d->pipes[VK_PIPE_RMSNORM], set, &p, (uint32_t)rows);
}

/* An element-wise op over `items` work items, 64 per workgroup. */
static void rec_items(vk_layers *gl, VkCommandBuffer cb, enum vk_pipe pipe, VkDescriptorSet set,
                      const vk_push *p, size_t items)
{
    if (items)
        vk_dispatch(gl->d, cb, gl->d->pipes[pipe], set, p, (uint32_t)((items + 63) / 64));
}

static void rec_layer(vk_layers *gl, VkCommandBuffer cb, int il, int n)
{
    const gpu_model_desc *md = &gl->md;
    const gpu_layer_desc *D = &gl->desc[il];
    const vk_layer *L = &gl->L[il];
    const uint32_t hd = (uint32_t)md->head_dim, half = (uint32_t)md->rope.n_rot / 2;
    const uint32_t kv_dim = (uint32_t)md->n_head_kv * hd;
    vk_push p;

    rec_norm(gl, cb, L->set[OP_ATTN_NORM], md->n_embd, n);
    vk_barrier(cb);
    rec_matmul(gl, cb, L, OP_Q, &D->wq, n, D->bq.data ? 1 : 0);
    rec_matmul(gl, cb, L, OP_K, &D->wk, n, D->bk.data ? 1 : 0);
    rec_matmul(gl, cb, L, OP_V, &D->wv, n, D->bv.data ? 1 : 0);
    vk_barrier(cb);
    if (D->q_norm.data) {
        rec_norm(gl, cb, L->set[OP_Q_NORM], md->head_dim, n * md->n_head);
        rec_norm(gl, cb, L->set[OP_K_NORM], md->head_dim, n * md->n_head_kv);
        vk_barrier(cb);
    }
    push_dims(&p, (uint32_t)n, (uint32_t)md->n_head, hd, (uint32_t)md->rope.n_rot,
              md->rope.neox);
    rec_items(gl, cb, VK_PIPE_ROPE, L->set[OP_ROPE_Q], &p, (size_t)n * md->n_head * half);
    p.u[1] = (uint32_t)md->n_head_kv;
    rec_items(gl, cb, VK_PIPE_ROPE, L->set[OP_ROPE_K], &p, (size_t)n * md->n_head_kv * half);
    vk_barrier(cb);
    push_dims(&p, (uint32_t)n, kv_dim, 0, 0, 0);
    rec_items(gl, cb, VK_PIPE_KV_STORE, L->set[OP_KV_STORE], &p, (size_t)n * kv_dim / 2);
    vk_barrier(cb);
    push_dims(&p, (uint32_t)md->n_head, (uint32_t)md->n_head_kv, hd, (uint32_t)n, 0);
    p.f[0] = 1.0f / sqrtf((float)md->head_dim);
    vk_dispatch(gl->d, cb, gl->d->pipes[VK_PIPE_ATTENTION], L->set[OP_ATTENTION], &p,
                (uint32_t)(n * md->n_head));
    vk_barrier(cb);
    rec_matmul(gl, cb, L, OP_WO, &D->wo, n, 2);
    vk_barrier(cb);

    rec_norm(gl, cb, L->set[OP_FFN_NORM], md->n_embd, n);
    vk_barrier(cb);
    rec_matmul(gl, cb, L, OP_GATE, &D->ffn_gate, n, 0);
    rec_matmul(gl, cb, L, OP_UP, &D->ffn_up, n, 0);
    vk_barrier(cb);
    push_dims(&p, (uint32_t)(n * md->n_ff), 0, 0, 0, 0);
    rec_items(gl, cb, VK_PIPE_SILU_MUL, L->set[OP_SILU], &p, (size_t)n * md->n_ff);
    vk_barrier(cb);
    rec_matmul(gl, cb, L, OP_DOWN, &D->ffn_down, n, 2);
    vk_barrier(cb);
}

/* Every pipeline layers [first, last) use exists (they are created outside recording). */
static int make_pipelines(vk_layers *gl, int n, int first, int last)
{
    vk_dev *d = gl->d;
    for (int p = VK_PIPE_RMSNORM; p < VK_PIPE_COUNT; p++)
        if (!vk_pipeline(d, (enum vk_pipe)p))
            return -1;
    for (int il = first; il < last; il++) {
        const gpu_tensor *m[] = {&gl->desc[il].wq, &gl->desc[il].wk, &gl->desc[il].wv,
                                 &gl->desc[il].wo, &gl->desc[il].ffn_gate, &gl->desc[il].ffn_up,
                                 &gl->desc[il].ffn_down};
        for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
            if (!vk_pipeline(d, vk_pipe_matmul(m[i]->type, n)))
                return -1;
    }
    return 0;
}

/* The command buffer of this shape: recorded before, or now (evicting the least recent). */
static VkCommandBuffer recording(vk_layers *gl, int n, int first, int last)
{
    for (int r = 0; r < VK_RECORDINGS; r++) {
        vk_rec *c = &gl->rec[r];
        if (c->cb && c->n == n && c->first == first && c->last == last) {
            c->used = ++gl->tick;
            return c->cb;
        }
    }
    vk_rec *slot = &gl->rec[0];
    for (int r = 0; r < VK_RECORDINGS && slot->cb; r++)
        if (!gl->rec[r].cb || gl->rec[r].used < slot->used)
            slot = &gl->rec[r];
    vk_dev *d = gl->d;
    if (make_pipelines(gl, n, first, last))
        return VK_NULL_HANDLE;
    if (!slot->cb && !(slot->cb = vk_cmd_new(d)))
        return VK_NULL_HANDLE;
    VkCommandBuffer cb = slot->cb;
    slot->cb = VK_NULL_HANDLE; /* invalid until recorded */
    if (vk_cmd_begin(cb, true)) {
        vk.vkFreeCommandBuffers(d->dev, d->cpool, 1, &cb);
        return VK_NULL_HANDLE;
    }
    const VkBufferCopy in = {.size = (VkDeviceSize)n * (VkDeviceSize)gl->md.n_embd * 4};
    vk.vkCmdCopyBuffer(cb, gl->io->buf, gl->h->buf, 1, &in);
    vk_barrier(cb);
    for (int il = first; il < last; il++)
        rec_layer(gl, cb, il, n);
    vk.vkCmdCopyBuffer(cb, gl->h->buf, gl->io->buf, 1, &in);
    vk_barrier(cb);
    if (vk.vkEndCommandBuffer(cb) != VK_SUCCESS) {
        vk.vkFreeCommandBuffers(d->dev, d->cpool, 1, &cb);
        return VK_NULL_HANDLE;
    }
    *slot = (vk_rec){.n = n, .first = first, .last = last, .cb = cb, .used = ++gl->tick};
    return cb;
}

int vk_layers_run(gpu_layers *g, float *hidden, int n, const int32_t *pos, int first, int last,
                  char *err, size_t errlen)
{
    vk_layers *gl = (vk_layers *)g;
    const gpu_model_desc *md = &gl->md;
    const int half = md->rope.n_rot / 2;
    float cs[KERN_MAX_HEAD_DIM / 2], sn[KERN_MAX_HEAD_DIM / 2];
    float *table = gl->rope->map;
    for (int t = 0; t < n; t++) {
        kern_rope_angles(pos[t], &md->rope, cs, sn);
        for (int i = 0; i < half; i++) {
            table[2 * (t * half + i)] = cs[i];
            table[2 * (t * half + i) + 1] = sn[i];
        }
    }
    memcpy(gl->pos->map, pos, sizeof(int32_t) * (size_t)n);
    const size_t bytes = (size_t)n * (size_t)md->n_embd * sizeof(float);
    memcpy(gl->io->map, hidden, bytes);
    VkCommandBuffer cb = recording(gl, n, first, last);
    if (!cb) {
        snprintf(err, errlen, "cannot record GPU layers %d-%d for %d tokens", first, last - 1, n);
        return -1;
    }
    if (vk_submit(gl->d, cb)) {
        snprintf(err, errlen, "GPU layers %d-%d failed to run (device lost?)", first, last - 1);
        return -1;
    }
    memcpy(hidden, gl->io->map, bytes);
    return 0;
}

int vk_layers_kv_copy(gpu_layers *g, int il, int rows, uint16_t *k, uint16_t *v, bool to_device)
{
    vk_layers *gl = (vk_layers *)g;
    vk_layer *L = &gl->L[il];
    if (!L->kc || rows < 0 || rows > gl->md.n_ctx)
        return -1;
    const size_t bytes = (size_t)rows * (size_t)gl->md.n_head_kv * (size_t)gl->md.head_dim *
                         sizeof(uint16_t);
    if (to_device)
        return vk_write(gl->d, L->kc, 0, k, bytes) || vk_write(gl->d, L->vc, 0, v, bytes) ? -1 : 0;
    return vk_read(gl->d, L->kc, 0, k, bytes) || vk_read(gl->d, L->vc, 0, v, bytes) ? -1 : 0;
}
