/* gpu.c — the backend-independent half of gpu.h: backend choice, argument checks, and what a
 * layer needs (supported types, VRAM). */
#include <stdio.h>
#include <string.h>

#include "gpu/gpu_impl.h"
#include "util/nss.h"

static const gpu_backend *const backends[] = {
#ifdef PRIMA_HAVE_VULKAN
    &gpu_backend_vulkan,
#endif
    NULL,
};

gpu_dev *gpu_open(int index, char *why, size_t whylen)
{
    if (!backends[0]) {
        snprintf(why, whylen, nss_static()
                     ? "this static build has no GPU backend (a static binary cannot load the "
                       "Vulkan driver)"
                     : "this build has no GPU backend (Vulkan and glslc were not found when it "
                       "was configured)");
        return NULL;
    }
    /* one backend today; with several, the first that opens wins and its why is kept */
    for (int b = 0; backends[b]; b++) {
        gpu_dev *g = backends[b]->open(index, why, whylen);
        if (g) {
            g->be = backends[b];
            return g;
        }
    }
    return NULL;
}

void gpu_close(gpu_dev *g)
{
    if (g)
        g->be->close(g);
}

const gpu_info *gpu_get_info(const gpu_dev *g)
{
    return &g->info;
}

bool gpu_supports(enum dtype t)
{
    switch (t) {
    case DT_F32: case DT_F16: case DT_Q8_0: case DT_Q4_0: case DT_Q4_K: case DT_Q5_K:
    case DT_Q6_K:
        return true;
    default:
        return false;
    }
}

gpu_buf *gpu_buf_create(gpu_dev *g, size_t bytes, char *err, size_t errlen)
{
    return g->be->buf_create(g, bytes, err, errlen);
}

void gpu_buf_free(gpu_dev *g, gpu_buf *b)
{
    if (b)
        g->be->buf_free(g, b);
}

int gpu_buf_write(gpu_dev *g, gpu_buf *b, size_t off, const void *src, size_t n)
{
    return g->be->buf_write(g, b, off, src, n);
}

int gpu_buf_read(gpu_dev *g, const gpu_buf *b, size_t off, void *dst, size_t n)
{
    return g->be->buf_read(g, b, off, dst, n);
}

double gpu_matmul(gpu_dev *g, const gpu_buf *w, enum dtype wt, int n_in, int n_out,
                  const gpu_buf *x, int n_tok, gpu_buf *y, int reps, char *err, size_t errlen)
{
    const dtype_info *di = dtype_get(wt);
    if (!gpu_supports(wt) || n_in < 1 || n_out < 1 || n_tok < 1 || reps < 1 ||
        n_in % (int)di->block_size) {
        snprintf(err, errlen, "GPU matmul: unsupported %s %d x %d (%d tokens)",
                 di ? di->name : "type", n_out, n_in, n_tok);
        return -1;
    }
    return g->be->matmul(g, w, wt, n_in, n_out, x, n_tok, y, reps, err, errlen);
}

double gpu_submit_latency(gpu_dev *g)
{
    return g->be->submit_latency(g);
}

double gpu_copy(gpu_dev *g, gpu_buf *dst, const gpu_buf *src, size_t n, int reps)
{
    return reps > 0 ? g->be->copy(g, dst, src, n, reps) : -1;
}

uint64_t gpu_tensor_bytes(const gpu_tensor *t)
{
    return t->data ? dtype_row_bytes(t->type, (uint64_t)t->ne0) * (uint64_t)t->ne1 : 0;
}

static const char *const op_names[LOP_KINDS] = {
    [LOP_NORM] = "norm", [LOP_MATMUL] = "matrix product", [LOP_ADD] = "add",
    [LOP_ROPE] = "rotation", [LOP_ATTENTION] = "attention", [LOP_SILU_MUL] = "SiLU gate",
    [LOP_GELU_MUL] = "GELU gate", [LOP_SWIGLU_OAI_MUL] = "clamped SwiGLU gate",
    [LOP_MOE] = "mixture-of-experts",
};

/* The first backend's: one backend today (gpu_open). */
static uint32_t backend_ops(void)
{
    return backends[0] ? backends[0]->ops : 0;
}

bool gpu_layer_supported(const gpu_layer_desc *l, char *why, size_t whylen)
{
    for (int i = 0; i < l->prog.n_op; i++) {
        const layer_op *op = &l->prog.op[i];
        if (!(backend_ops() & (1u << op->kind))) {
            snprintf(why, whylen, "the GPU backend has no %s op", op_names[op->kind]);
            return false;
        }
        if (op->kind == LOP_ATTENTION && op->w != LOP_NONE && !(backend_ops() & LOP_CAP_SINKS)) {
            snprintf(why, whylen, "the GPU backend has no attention sinks");
            return false;
        }
        if (op->kind == LOP_MATMUL && !gpu_supports(l->t[op->w].type)) {
            snprintf(why, whylen, "%s is %s, which has no GPU shader", l->t[op->w].name,
                     dtype_get(l->t[op->w].type)->name);
            return false;
        }
    }
    return true;
}

uint64_t gpu_layer_bytes(const gpu_model_desc *md, const gpu_layer_desc *l)
{
    uint64_t b = 0;
    for (int i = 0; i < LOP_MAX_TENSORS; i++)
        b += gpu_tensor_bytes(&l->t[i]);
    uint64_t kv = 2ull * (uint64_t)l->kv_rows * (uint64_t)md->n_head_kv *
                  (uint64_t)md->head_dim * sizeof(uint16_t);
    return b + kv;
}

uint64_t gpu_scratch_bytes(const gpu_model_desc *md)
{
    const uint64_t q = (uint64_t)md->n_head * (uint64_t)md->head_dim;
    const uint64_t kv = (uint64_t)md->n_head_kv * (uint64_t)md->head_dim;
    const uint64_t per_tok = 2 * (uint64_t)md->n_embd + 2 * q + 2 * kv + 2 * (uint64_t)md->n_ff;
    return per_tok * (uint64_t)md->max_batch * sizeof(float);
}

gpu_layers *gpu_layers_create(gpu_dev *g, const gpu_model_desc *md, const gpu_layer_desc *descs,
                              const bool *on_gpu, char *err, size_t errlen)
{
    if (md->head_dim > 512 || md->head_dim % 2 || md->rope[0].n_rot > md->head_dim ||
        md->n_head % md->n_head_kv) {
        snprintf(err, errlen, "GPU layers: head size %d (at most 512, even) or %d/%d heads "
                              "unsupported", md->head_dim, md->n_head, md->n_head_kv);
        return NULL;
    }
    for (int il = 0; il < md->n_layer; il++)
        if (on_gpu[il] && !gpu_layer_supported(&descs[il], err, errlen))
            return NULL;
    gpu_layers *gl = g->be->layers_create(g, md, descs, on_gpu, err, errlen);
    if (gl)
        gl->dev = g;
    return gl;
}

void gpu_layers_free(gpu_layers *gl)
{
    if (gl)
        gl->dev->be->layers_free(gl);
}

int gpu_layers_run(gpu_layers *gl, float *hidden, int n, const int32_t *pos, int first, int last,
                   char *err, size_t errlen)
{
    return gl->dev->be->layers_run(gl, hidden, n, pos, first, last, err, errlen);
}

int gpu_layers_kv_read(gpu_layers *gl, int il, int rows, uint16_t *k, uint16_t *v)
{
    return gl->dev->be->layers_kv_copy(gl, il, rows, k, v, false);
}

int gpu_layers_kv_write(gpu_layers *gl, int il, int rows, const uint16_t *k, const uint16_t *v)
{
    /* the backend only reads the host buffers when copying to the device */
    return gl->dev->be->layers_kv_copy(gl, il, rows, (uint16_t *)k, (uint16_t *)v, true);
}
