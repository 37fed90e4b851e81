/* arch.h — model architectures as data: one table row each, and the program of a layer.
 *
 * A row says what a GGUF file of that architecture holds (the tensors of a layer, which of them
 * are optional, the hyper-parameter keys beyond the common ones) and how a layer computes (norm
 * placement, activation, rotation style, sliding-window pattern, embedding scale); its builder
 * emits a layer as ops (kernels/layer_ops.h). The loader, the engines of every backend, the
 * scheduler's shapes and the synthetic-model writer read the row: none of them names an
 * architecture. docs/architecture.md says how to add one. */
#ifndef PRIMA_ARCH_H
#define PRIMA_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/layer_ops.h"

/* Index of a row in the table. */
enum model_arch { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_GEMMA3, ARCH_QWEN3MOE, ARCH_COUNT };

/* The weight slots of a layer: every tensor any architecture's layer may hold. */
enum layer_slot {
    LT_ATTN_NORM, LT_WQ, LT_WK, LT_WV, LT_WO, LT_BQ, LT_BK, LT_BV, LT_Q_NORM, LT_K_NORM,
    LT_ATTN_POST_NORM, LT_FFN_NORM, LT_FFN_GATE, LT_FFN_UP, LT_FFN_DOWN, LT_FFN_POST_NORM,
    /* a layer of experts: the router, then the experts' gate, up and down (in this order:
     * LOP_MOE names the router's slot) */
    LT_FFN_GATE_INP, LT_FFN_GATE_EXPS, LT_FFN_UP_EXPS, LT_FFN_DOWN_EXPS,
    LT_COUNT
};
_Static_assert(LT_COUNT <= LOP_MAX_TENSORS, "layer slots exceed the ops' weight slots");

/* The sizes a tensor's dimensions are given in. */
enum arch_dim { DIM_ONE, DIM_EMBD, DIM_Q, DIM_KV, DIM_FF, DIM_HEAD, DIM_EXPERT };

typedef struct slot_desc {
    const char *name;          /* GGUF name after "blk.N." */
    enum arch_dim ne0, ne1;    /* DIM_ONE as ne1: a vector (F32) */
    bool matrix;               /* multiplied by the kernels: any computable type */
    enum arch_dim ne2;         /* DIM_ONE, or DIM_EXPERT: a matrix per expert */
} slot_desc;

typedef struct model_hparams model_hparams;

typedef struct arch_desc {
    const char *name;          /* general.architecture */
    uint32_t required;         /* slots (1u << LT_*) every layer has */
    uint32_t optional;         /* slots a layer may have */
    bool neox;                 /* rotate pairs (i, i + n_rot/2), not (2i, 2i+1) */
    enum lop_kind glu;         /* LOP_SILU_MUL or LOP_GELU_MUL: the gated FFN's activation */
    bool embd_scale;           /* token embeddings scaled by sqrt(n_embd) */
    /* With an ARCH.attention.sliding_window key: layer il slides iff il % pattern <
     * pattern - 1 (pattern 1: every layer; 0: none, the key is ignored);
     * ARCH.attention.sliding_window_pattern overrides. */
    int swa_pattern;
    /* Sliding layers rotate with their own base (ARCH.rope.freq_base_swa, default this) and
     * no scaling; 0: they rotate like the others. */
    float swa_rope_base;
    /* Fix-ups of derived hyper-parameters the file does not carry (NULL: none). */
    void (*hparams)(model_hparams *hp);
    /* The layer's program, from the slots it has. */
    void (*build)(const struct arch_desc *a, const bool has[LT_COUNT], layer_prog *p);
} arch_desc;

const arch_desc *arch_get(enum model_arch a);
/* The row of general.architecture `name`, or NULL. */
const arch_desc *arch_find(const char *name);
enum model_arch arch_id(const arch_desc *a);
const slot_desc *arch_slot(enum layer_slot s);

#endif
