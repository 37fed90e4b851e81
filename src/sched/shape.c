/* shape.c — sched_model from a loaded model: per-layer weights by type, bytes, KV cache,
 * buffers. Memory estimates follow what engine.c and session.c allocate. */
#include <stdio.h>
#include <string.h>

#include "kernels/kern.h"
#include "sched/shape.h"

/* Frames a device holds at once: the batch it receives, the one it sends, and the sealed copy. */
#define RING_FRAMES 3
/* Per token of a frame on the wire besides the activations (header, positions). */
#define HOP_OVERHEAD_BYTES 64.0

static double tensor_params(const gguf_tensor *t)
{
    return (double)t->ne[0] * (double)t->ne[1] * (double)t->ne[2] * (double)t->ne[3];
}

int sched_model_from(const model *m, int n_ctx, int max_batch, int n_seq, int act_bytes,
                     sched_model *sm, char *err, size_t errlen)
{
    const model_hparams *hp = &m->hp;
    if (n_ctx < 1 || max_batch < 1 || n_seq < 1) {
        snprintf(err, errlen, "plan: context (%d), batch (%d) and sequences (%d) must be positive",
                 n_ctx, max_batch, n_seq);
        return -1;
    }
    if (hp->n_layer > SCHED_MAX_LAYERS) {
        snprintf(err, errlen, "plan: the model has %d layers, the scheduler plans at most %d",
                 hp->n_layer, SCHED_MAX_LAYERS);
        return -1;
    }
    memset(sm, 0, sizeof *sm);
    if (max_batch > n_ctx)   /* as the session clamps it: a batch never exceeds the context */
        max_batch = n_ctx;
    sm->n_layer = hp->n_layer;
    sm->n_embd = hp->n_embd;
    sm->n_vocab = hp->n_vocab;
    double bytes = 0, read = 0;
    double kv_rows = 0, kv_keys = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        /* one matrix product per LOP_MATMUL of its program (engine.c); the attention's job is
         * in layer_vector */
        int calls = 0;
        for (int i = 0; i < L->prog.n_op; i++) {
            const layer_op *op = &L->prog.op[i];
            if (op->kind != LOP_MATMUL && op->kind != LOP_MOE)
                continue;
            const gguf_tensor *w = L->t[op->w];
            sm->layer_params[w->type] += tensor_params(w) / hp->n_layer;
            calls += kern_matmul_jobs(w->type);
            /* experts: a token computes its k of them, a product each for gate, up, down */
            for (int x = 1; op->kind == LOP_MOE && x <= 3; x++) {
                const gguf_tensor *ex = L->t[op->w + x];
                sm->layer_params[ex->type] += tensor_params(ex) * hp->n_expert_used /
                                              hp->n_expert / hp->n_layer;
                calls += hp->n_expert_used * kern_matmul_jobs(ex->type);
            }
        }
        sm->layer_calls += (double)calls / hp->n_layer;
        /* a sliding layer keeps (and a token reads) only its window */
        kv_rows += model_kv_rows(m, il, n_ctx, max_batch);
        kv_keys += L->prog.window && L->prog.window < n_ctx / 2 ? L->prog.window : n_ctx / 2.0;
        sm->layer_size[il] = (double)model_layer_bytes(m, il);
        bytes += sm->layer_size[il];
        read += model_layer_token_bytes(m, il);
    }
    sm->layer_bytes = bytes / hp->n_layer;
    if (hp->n_expert && hp->n_expert_used < hp->n_expert) {
        sm->layer_read = read / hp->n_layer;
        sm->expert_share = (double)hp->n_expert_used / hp->n_expert;
    }
    sm->layer_vector = layer_vector_values(hp->n_embd, hp->n_ff, hp->n_head * hp->head_dim,
                                           hp->n_head_kv * hp->head_dim);

    /* K and V, in the model's cache types (F16: 2 bytes a value, Q8_0 34 per 32, Q4_0 18 per
     * 32), for every position of every sequence (a sliding layer's window and batch); a decoded
     * token reads, on average, half of its own sequence's full cache or its window (the means
     * over the layers) */
    const double kv_row = model_kv_row_bytes(m);
    sm->kv_read = kv_row * kv_keys / hp->n_layer;
    sm->kv_bytes = kv_row * kv_rows / hp->n_layer * n_seq;

    sm->out_type = m->output->type;
    sm->out_calls = kern_matmul_jobs(sm->out_type);
    sm->out_params = tensor_params(m->output);
    sm->out_bytes = (double)m->output->nbytes + (double)m->output_norm->nbytes;
    sm->embd_row_bytes = (double)m->tok_embd->nbytes / (double)m->tok_embd->ne[1];
    sm->hop_bytes = (double)act_bytes * hp->n_embd + HOP_OVERHEAD_BYTES;

    /* engine scratch (the buffers its layers use per batch row, F32, model_buffers) and the
     * activations quantized for integer dot products (about a byte per value): a decoded token
     * uses a row per sequence, and the engine hands the rest of a prompt's batch back after it
     * (engine.c), so only those rows count; what a prompt borrows for its batch comes from the
     * page cache and returns to it. The batch's hidden states and frames stay at the widest. */
    const lop_dims dims = {hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff};
    const uint32_t used = model_buffers(m);
    double row = 4.0 * hp->n_expert;   /* a row's router scores */
    for (int b = LB_X; b < LB_COUNT; b++)
        if (used & (1u << b))
            row += 4.0 * (double)lop_width(&dims, b);
    double quant = 1.1 * (hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd);
    double hidden = 4.0 * hp->n_embd;
    /* The process itself (code, libraries, metadata, tokenizer) is not counted: the memory
     * budget is measured by the running process, so it is already outside it. */
    sm->proc_bytes = (double)n_seq * (row + quant) +
                     (double)max_batch * (hidden + RING_FRAMES * sm->hop_bytes);
    /* the head: last-row logits and the sampler's candidates (id, logit, probability), the
     * token history */
    sm->head_bytes = 4.0 * hp->n_vocab + 12.0 * hp->n_vocab + 4.0 * n_ctx;
    sm->head_page = (double)model_head_bytes(m);
    return 0;
}
