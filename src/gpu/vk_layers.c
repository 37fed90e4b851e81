/* vk_layers.c — whole transformer layers on a Vulkan device.
 *
 * Each GPU layer's tensors are uploaded once into their own device-local buffers, next to its
 * F16 KV cache; the activations of a batch live in shared device buffers sized for max_batch.
 * A layer runs its program (kernels/layer_ops.h): each op is one or two dispatches, with the
 * descriptor sets made once. A run of layers [first, last) on n tokens is one command buffer:
 * copy the hidden state in, every op of every layer with a barrier where an op touches what an
 * earlier one since the last barrier wrote, copy it out. It is recorded the first time that
 * shape is seen and reused (a few shapes are kept: decode is always n = 1); the positions and
 * the rotation tables change per call and are read from host-visible buffers written before the
 * submit.
 *
 * Fused here, from the op list: a matrix product followed by the residual add of its output
 * accumulates into the residual stream (one dispatch); a bias is added by the product. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/vk.h"

/* A pseudo-buffer for hazards on the layer's KV cache. */
#define HAZ_CACHE LB_COUNT

typedef struct vk_layer {
    gpu_buf *t[LOP_MAX_TENSORS];    /* by weight slot; NULL: absent */
    gpu_buf *kc, *vc;
    VkDescriptorSet set[LOP_MAX][2]; /* per op; rotations and attention take two dispatches */
    bool folded[LOP_MAX];            /* an add the product before it accumulates */
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
    gpu_buf *b[LB_COUNT];  /* device-local activations, max_batch rows */
    gpu_buf *io, *pos, *rope[LOP_ROPES];   /* host-visible */
    VkDescriptorPool pool;
    vk_rec rec[VK_RECORDINGS];
    uint64_t tick;
} vk_layers;

/* A buffer's row width and heads (layer_ops.h). */
static size_t buf_width(const gpu_model_desc *md, int b)
{
    const lop_dims d = {md->n_embd, md->n_head, md->n_head_kv, md->head_dim, md->n_ff};
    return lop_width(&d, b);
}

static int heads_of(const gpu_model_desc *md, int b)
{
    const lop_dims d = {md->n_embd, md->n_head, md->n_head_kv, md->head_dim, md->n_ff};
    return lop_heads(&d, b);
}

static int upload_layer(vk_layers *gl, int il, char *err, size_t errlen)
{
    vk_dev *d = gl->d;
    vk_layer *L = &gl->L[il];
    for (int i = 0; i < LOP_MAX_TENSORS; i++) {
        const gpu_tensor *t = &gl->desc[il].t[i];
        if (!t->data)
            continue;
        const uint64_t bytes = gpu_tensor_bytes(t);
        if (bytes > d->limits.maxStorageBufferRange) {
            snprintf(err, errlen, "layer %d: a %.1f MiB tensor exceeds the GPU's %.1f MiB "
                                  "buffer limit", il, (double)bytes / 1048576.0,
                     (double)d->limits.maxStorageBufferRange / 1048576.0);
            return -1;
        }
        if (!(L->t[i] = vk_buf_new(d, bytes, false, err, errlen)) ||
            vk_write(d, L->t[i], 0, t->data, bytes)) {
            if (L->t[i])
                snprintf(err, errlen, "layer %d: upload to the GPU failed", il);
            return -1;
        }
    }
    const uint64_t cache = (uint64_t)gl->desc[il].kv_rows * (uint64_t)gl->md.n_head_kv *
                           (uint64_t)gl->md.head_dim * sizeof(uint16_t);
    if (!(L->kc = vk_buf_new(d, cache, false, err, errlen)) ||
        !(L->vc = vk_buf_new(d, cache, false, err, errlen)))
        return -1;
    return 0;
}

/* Whether op i is a product whose output the next op adds to the residual stream. */
static bool folds_add(const layer_prog *p, int i)
{
    const layer_op *op = &p->op[i], *next = &p->op[i + 1];
    return op->kind == LOP_MATMUL && i + 1 < p->n_op && next->kind == LOP_ADD &&
           next->src == op->dst && next->dst != op->src;
}

static int make_sets(vk_layers *gl, int il)
{
    vk_dev *d = gl->d;
    vk_layer *L = &gl->L[il];
    const layer_prog *p = &gl->desc[il].prog;
    gpu_buf *const *b = gl->b;
    for (int i = 0; i < p->n_op; i++) {
        const layer_op *op = &p->op[i];
        gpu_buf *w = op->w != LOP_NONE ? L->t[op->w] : NULL;
        gpu_buf *sets[2][5] = {{NULL}};
        int n_sets = 1;
        switch ((enum lop_kind)op->kind) {
        case LOP_NORM:
            memcpy(sets[0], (gpu_buf *[]){b[op->src], b[op->dst], w}, 3 * sizeof(gpu_buf *));
            break;
        case LOP_MATMUL: {
            bool fold = folds_add(p, i);
            if (fold)
                L->folded[i + 1] = true;
            gpu_buf *bias = op->b != LOP_NONE ? L->t[op->b] : NULL;
            memcpy(sets[0], (gpu_buf *[]){w, b[op->src], fold ? b[p->op[i + 1].dst] : b[op->dst],
                                          bias}, 4 * sizeof(gpu_buf *));
            break;
        }
        case LOP_ROPE:
            memcpy(sets[0], (gpu_buf *[]){b[op->dst], gl->rope[p->rope]}, 2 * sizeof(gpu_buf *));
            memcpy(sets[1], (gpu_buf *[]){b[op->src], gl->rope[p->rope]}, 2 * sizeof(gpu_buf *));
            n_sets = 2;
            break;
        case LOP_ATTENTION:
            memcpy(sets[0], (gpu_buf *[]){b[LB_K], b[LB_V], L->kc, L->vc, gl->pos},
                   5 * sizeof(gpu_buf *));
            memcpy(sets[1], (gpu_buf *[]){b[op->src], L->kc, L->vc, b[op->dst], gl->pos},
                   5 * sizeof(gpu_buf *));
            n_sets = 2;
            break;
        case LOP_ADD:
        case LOP_SILU_MUL:
        case LOP_GELU_MUL:
            /* an add the product folded in has nothing to dispatch */
            n_sets = op->kind == LOP_ADD && L->folded[i] ? 0 : 1;
            memcpy(sets[0], (gpu_buf *[]){b[op->dst], b[op->src]}, 2 * sizeof(gpu_buf *));
            break;
        case LOP_MOE:      /* not in the backend's ops: such a layer stays on the CPU */
        case LOP_KINDS:
            return -1;
        }
        for (int k = 0; k < n_sets; k++)
            if (!(L->set[i][k] = vk_set(d, gl->pool, sets[k], 5)))
                return -1;
    }
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
        for (int i = 0; i < LOP_MAX_TENSORS; i++)
            vk_buf_del(d, gl->L[il].t[i]);
        vk_buf_del(d, gl->L[il].kc);
        vk_buf_del(d, gl->L[il].vc);
    }
    for (int b = 0; b < LB_COUNT; b++)
        vk_buf_del(d, gl->b[b]);
    gpu_buf *host[] = {gl->io, gl->pos, gl->rope[0], gl->rope[1]};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        vk_buf_del(d, host[i]);
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
    uint32_t used = 0;
    for (int il = 0; il < md->n_layer; il++)
        if (on_gpu[il])
            used |= lop_buffers(&descs[il].prog);
    for (int b = 0; b < LB_COUNT; b++)
        if ((used & (1u << b)) && !(gl->b[b] = vk_buf_new(d, B * buf_width(md, b) * f, false, err, errlen)))
            goto fail;
    struct { gpu_buf **b; size_t bytes; } host[] = {
        {&gl->io, B * (size_t)md->n_embd * f}, {&gl->pos, B * sizeof(int32_t)},
        {&gl->rope[0], B * (size_t)(md->rope[0].n_rot / 2) * 2 * f},
        {&gl->rope[1], B * (size_t)(md->rope[1].n_rot / 2) * 2 * f},
    };
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        if (!(*host[i].b = vk_buf_new(d, host[i].bytes, true, err, errlen)))
            goto fail;

    int n_gpu = 0;
    for (int il = 0; il < md->n_layer; il++)
        n_gpu += on_gpu[il];
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                               .descriptorCount = (uint32_t)(n_gpu * LOP_MAX * 2 * VK_BINDINGS)};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .maxSets = (uint32_t)(n_gpu * LOP_MAX * 2),
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

/* An element-wise op over `items` work items, 64 per workgroup. */
static void rec_items(vk_layers *gl, VkCommandBuffer cb, enum vk_pipe pipe, VkDescriptorSet set,
                      const vk_push *p, size_t items)
{
    if (items)
        vk_dispatch(gl->d, cb, gl->d->pipes[pipe], set, p, (uint32_t)((items + 63) / 64));
}

/* What an op reads and writes (bits of buffers, HAZ_CACHE for the layer's KV cache). */
static void op_access(const layer_prog *p, int i, bool folded, uint32_t *rd, uint32_t *wr)
{
    const layer_op *op = &p->op[i];
    *rd = 1u << op->src;
    *wr = 1u << op->dst;
    switch ((enum lop_kind)op->kind) {
    case LOP_NORM: break;
    case LOP_MATMUL:
        if (folded)   /* accumulates into the add's destination */
            *wr = 1u << p->op[i + 1].dst, *rd |= *wr;
        break;
    case LOP_ROPE: *rd |= *wr, *wr |= *rd; break;
    case LOP_ATTENTION:
        *rd |= 1u << LB_K | 1u << LB_V | 1u << HAZ_CACHE;
        *wr |= 1u << HAZ_CACHE;
        break;
    default: *rd |= *wr; break;
    }
}

/* Records op i of layer il: one or two dispatches. */
static void rec_op(vk_layers *gl, VkCommandBuffer cb, int il, int i, int n)
{
    const gpu_model_desc *md = &gl->md;
    const gpu_layer_desc *D = &gl->desc[il];
    const layer_op *op = &D->prog.op[i];
    const vk_layer *L = &gl->L[il];
    const uint32_t hd = (uint32_t)md->head_dim;
    vk_push p = {0};
    switch ((enum lop_kind)op->kind) {
    case LOP_NORM: {
        const uint32_t dim = op->per_head ? hd : (uint32_t)buf_width(md, op->dst);
        const uint32_t rows = (uint32_t)(n * (op->per_head ? heads_of(md, op->dst) : 1));
        p.u[0] = dim, p.u[1] = rows, p.f[0] = md->rms_eps;
        vk_dispatch(gl->d, cb, gl->d->pipes[VK_PIPE_RMSNORM], L->set[i][0], &p, rows);
        break;
    }
    case LOP_MATMUL: {
        const gpu_tensor *t = &D->t[op->w];
        p.u[0] = (uint32_t)t->ne0, p.u[1] = (uint32_t)t->ne1, p.u[2] = (uint32_t)n;
        p.u[3] = (uint32_t)dtype_row_bytes(t->type, (uint64_t)t->ne0);
        p.u[4] = (op->b != LOP_NONE ? 1u : 0u) | (folds_add(&D->prog, i) ? 2u : 0u);
        vk_dispatch(gl->d, cb, gl->d->pipes[vk_pipe_matmul(t->type, n)], L->set[i][0], &p,
                    vk_matmul_groups((int)t->ne1));
        break;
    }
    case LOP_ROPE: {
        const rope_params *rp = &md->rope[D->prog.rope];
        const uint32_t half = (uint32_t)rp->n_rot / 2;
        const int bufs[2] = {op->dst, op->src};
        for (int k = 0; k < 2; k++) {
            const uint32_t heads = (uint32_t)heads_of(md, bufs[k]);
            p = (vk_push){.u = {(uint32_t)n, heads, hd, (uint32_t)rp->n_rot, rp->neox}};
            rec_items(gl, cb, VK_PIPE_ROPE, L->set[i][k], &p, (size_t)n * heads * half);
        }
        break;
    }
    case LOP_ATTENTION: {
        const uint32_t kv_dim = (uint32_t)buf_width(md, LB_K);
        p = (vk_push){.u = {(uint32_t)n, kv_dim, (uint32_t)D->kv_rows}};
        rec_items(gl, cb, VK_PIPE_KV_STORE, L->set[i][0], &p, (size_t)n * kv_dim / 2);
        vk_barrier(cb);
        p = (vk_push){.u = {(uint32_t)md->n_head, (uint32_t)md->n_head_kv, hd, (uint32_t)n,
                            (uint32_t)D->prog.window, (uint32_t)D->kv_rows}};
        p.f[0] = md->attn_scale;
        vk_dispatch(gl->d, cb, gl->d->pipes[VK_PIPE_ATTENTION], L->set[i][1], &p,
                    (uint32_t)(n * md->n_head));
        break;
    }
    case LOP_ADD:
    case LOP_SILU_MUL:
    case LOP_GELU_MUL: {
        const size_t items = (size_t)n * buf_width(md, op->dst);
        p.u[0] = (uint32_t)items, p.u[1] = op->kind == LOP_GELU_MUL;
        rec_items(gl, cb, op->kind == LOP_ADD ? VK_PIPE_ADD : VK_PIPE_GLU, L->set[i][0], &p,
                  items);
        break;
    }
    case LOP_MOE:
    case LOP_KINDS:
        break;
    }
}

/* Layer il's ops, with a barrier before an op that reads what an op since the last barrier
 * wrote, or writes what one read or wrote (*rd, *wr: since the last barrier). */
static void rec_layer(vk_layers *gl, VkCommandBuffer cb, int il, int n, uint32_t *rd,
                      uint32_t *wr)
{
    const layer_prog *p = &gl->desc[il].prog;
    for (int i = 0; i < p->n_op; i++) {
        if (gl->L[il].folded[i])
            continue;
        uint32_t r, w;
        op_access(p, i, i + 1 < p->n_op && gl->L[il].folded[i + 1], &r, &w);
        if ((r & *wr) || (w & (*rd | *wr))) {
            vk_barrier(cb);
            *rd = *wr = 0;
        }
        rec_op(gl, cb, il, i, n);
        *rd |= r;
        *wr |= w;
    }
    /* the next layer's cache is another: its hazards start afresh */
    *rd &= ~(1u << HAZ_CACHE);
    *wr &= ~(1u << HAZ_CACHE);
}

/* Every pipeline layers [first, last) use exists (they are created outside recording). */
static int make_pipelines(vk_layers *gl, int n, int first, int last)
{
    vk_dev *d = gl->d;
    for (int p = VK_PIPE_RMSNORM; p < VK_PIPE_COUNT; p++)
        if (!vk_pipeline(d, (enum vk_pipe)p))
            return -1;
    for (int il = first; il < last; il++) {
        const layer_prog *p = &gl->desc[il].prog;
        for (int i = 0; i < p->n_op; i++)
            if (p->op[i].kind == LOP_MATMUL &&
                !vk_pipeline(d, vk_pipe_matmul(gl->desc[il].t[p->op[i].w].type, n)))
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
    vk.vkCmdCopyBuffer(cb, gl->io->buf, gl->b[LB_H]->buf, 1, &in);
    vk_barrier(cb);
    uint32_t rd = 0, wr = 0;
    for (int il = first; il < last; il++)
        rec_layer(gl, cb, il, n, &rd, &wr);
    vk_barrier(cb);
    vk.vkCmdCopyBuffer(cb, gl->b[LB_H]->buf, gl->io->buf, 1, &in);
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
    float cs[KERN_MAX_HEAD_DIM / 2], sn[KERN_MAX_HEAD_DIM / 2];
    for (int r = 0; r < LOP_ROPES; r++) {
        const int half = md->rope[r].n_rot / 2;
        float *table = gl->rope[r]->map;
        for (int t = 0; t < n; t++) {
            kern_rope_angles(pos[t], &md->rope[r], cs, sn);
            for (int i = 0; i < half; i++) {
                table[2 * (t * half + i)] = cs[i];
                table[2 * (t * half + i) + 1] = sn[i];
            }
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
    if (!L->kc || rows < 0 || rows > gl->desc[il].kv_rows)
        return -1;
    const size_t bytes = (size_t)rows * (size_t)gl->md.n_head_kv * (size_t)gl->md.head_dim *
                         sizeof(uint16_t);
    if (to_device)
        return vk_write(gl->d, L->kc, 0, k, bytes) || vk_write(gl->d, L->vc, 0, v, bytes) ? -1 : 0;
    return vk_read(gl->d, L->kc, 0, k, bytes) || vk_read(gl->d, L->vc, 0, v, bytes) ? -1 : 0;
}
