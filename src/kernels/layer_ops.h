/* layer_ops.h — the vocabulary a transformer layer is written in, shared by every backend.
 *
 * An architecture (model/arch.c) emits each layer as a short program: ops over a few named
 * activation buffers and the layer's weight tensors, numbered by slot. A backend (the CPU
 * engine, the Vulkan layers) evaluates the program; it implements these ops, never a layer, so
 * a new architecture that needs no new op touches no backend, and a new backend implements
 * this list once for every architecture. Nothing here names an architecture or a tensor. */
#ifndef PRIMA_LAYER_OPS_H
#define PRIMA_LAYER_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Activation buffers, max_batch rows each. Widths: H, X, Y, XG n_embd; Q, ATT
 * n_head*head_dim; K, V n_head_kv*head_dim; GATE, UP n_ff. H is the residual stream, in and
 * out of the layer; a backend holds only the buffers its layers' programs use (lop_buffers). */
enum lop_buf { LB_H, LB_X, LB_Q, LB_K, LB_V, LB_ATT, LB_GATE, LB_UP, LB_Y, LB_XG, LB_COUNT };

enum lop_kind {
    LOP_NORM,       /* dst = rmsnorm(src) * w[0..width) per row, or per head (Q, K) with per_head */
    LOP_MATMUL,     /* dst = W · src (+ b): W is w, an n_out x n_in matrix, b a bias or none */
    LOP_ADD,        /* dst += src */
    LOP_ROPE,       /* Q and K rotated for their positions by the layer's rotation */
    LOP_ATTENTION,  /* K and V into the layer's cache; dst = softmax(scale Q·K) V over it */
    LOP_SILU_MUL,   /* dst = silu(dst) * src */
    LOP_GELU_MUL,   /* dst = gelu(dst) * src, GELU's tanh approximation */
    /* dst = sum over the router's top k experts e of p_e * down_e(silu(gate_e src) * up_e src):
     * w is the router (n_expert x n_embd), w + 1..3 the experts' gate, up and down (3-D, expert
     * e the e-th slice); p = softmax of the router's scores over all experts, the top k kept
     * and renormalized to sum 1. Uses XG, GATE and UP as scratch. */
    LOP_MOE,
    LOP_KINDS
};

#define LOP_NONE 0xff      /* no weight (or bias) */
#define LOP_MAX 24         /* ops in one layer */
#define LOP_MAX_TENSORS 24 /* weight slots of one layer */
#define LOP_ROPES 2        /* distinct rotations a model uses (e.g. global and sliding layers) */
#define LOP_MAX_EXPERTS 512

typedef struct layer_op {
    uint8_t kind;      /* enum lop_kind */
    uint8_t dst, src;  /* enum lop_buf */
    uint8_t w, b;      /* weight slots, or LOP_NONE */
    uint8_t per_head;  /* LOP_NORM over each head of Q or K */
} layer_op;

/* The sizes the buffers' widths come from. */
typedef struct lop_dims {
    int n_embd, n_head, n_head_kv, head_dim, n_ff;
} lop_dims;

/* Row width of buffer b. */
static inline size_t lop_width(const lop_dims *d, int b)
{
    switch (b) {
    case LB_Q: case LB_ATT: return (size_t)d->n_head * (size_t)d->head_dim;
    case LB_K: case LB_V: return (size_t)d->n_head_kv * (size_t)d->head_dim;
    case LB_GATE: case LB_UP: return (size_t)d->n_ff;
    default: return (size_t)d->n_embd;
    }
}

/* Heads of buffer b (LOP_NORM per head, LOP_ROPE). */
static inline int lop_heads(const lop_dims *d, int b)
{
    return b == LB_K || b == LB_V ? d->n_head_kv : d->n_head;
}

/* One layer: its ops in order, and what its attention sees. */
typedef struct layer_prog {
    layer_op op[LOP_MAX];
    int n_op;
    int window;    /* a query at position p sees keys p - window < p' <= p; 0: every key */
    int rope;      /* which of the model's LOP_ROPES rotations */
} layer_prog;

/* The buffers a program uses (1u << LB_*), the scratch an op reads besides its src included. */
static inline uint32_t lop_buffers(const layer_prog *p)
{
    uint32_t used = 1u << LB_H;
    for (int i = 0; i < p->n_op; i++) {
        const layer_op *op = &p->op[i];
        used |= 1u << op->dst | 1u << op->src;
        if (op->kind == LOP_ATTENTION)
            used |= 1u << LB_K | 1u << LB_V;
        if (op->kind == LOP_MOE)
            used |= 1u << LB_XG | 1u << LB_GATE | 1u << LB_UP;
    }
    return used;
}

#endif
