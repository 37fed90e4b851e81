/* arch.c — the architecture table and the layer builders (arch.h).
 *
 * Adding an architecture whose ops exist is a row here (and an enum value in arch.h); one that
 * needs a new op adds it to kernels/layer_ops.h and to each backend (docs/architecture.md). */
#include <math.h>
#include <string.h>

#include "model/arch.h"
#include "model/model.h"

#define BIT(s) (1u << (s))
#define DENSE (BIT(LT_ATTN_NORM) | BIT(LT_WQ) | BIT(LT_WK) | BIT(LT_WV) | BIT(LT_WO) | \
               BIT(LT_FFN_NORM) | BIT(LT_FFN_GATE) | BIT(LT_FFN_UP) | BIT(LT_FFN_DOWN))
#define QKV_BIAS (BIT(LT_BQ) | BIT(LT_BK) | BIT(LT_BV))
#define QK_NORM (BIT(LT_Q_NORM) | BIT(LT_K_NORM))
#define POST_NORMS (BIT(LT_ATTN_POST_NORM) | BIT(LT_FFN_POST_NORM))
#define FFN_DENSE (BIT(LT_FFN_GATE) | BIT(LT_FFN_UP) | BIT(LT_FFN_DOWN))
#define EXPERTS (BIT(LT_FFN_GATE_INP) | BIT(LT_FFN_GATE_EXPS) | BIT(LT_FFN_UP_EXPS) | \
                 BIT(LT_FFN_DOWN_EXPS))

static const slot_desc slots[LT_COUNT] = {
    [LT_ATTN_NORM] = {"attn_norm.weight", DIM_EMBD, DIM_ONE, false},
    [LT_WQ] = {"attn_q.weight", DIM_EMBD, DIM_Q, true},
    [LT_WK] = {"attn_k.weight", DIM_EMBD, DIM_KV, true},
    [LT_WV] = {"attn_v.weight", DIM_EMBD, DIM_KV, true},
    [LT_WO] = {"attn_output.weight", DIM_Q, DIM_EMBD, true},
    [LT_BQ] = {"attn_q.bias", DIM_Q, DIM_ONE, false},
    [LT_BK] = {"attn_k.bias", DIM_KV, DIM_ONE, false},
    [LT_BV] = {"attn_v.bias", DIM_KV, DIM_ONE, false},
    [LT_Q_NORM] = {"attn_q_norm.weight", DIM_HEAD, DIM_ONE, false},
    [LT_K_NORM] = {"attn_k_norm.weight", DIM_HEAD, DIM_ONE, false},
    [LT_ATTN_POST_NORM] = {"post_attention_norm.weight", DIM_EMBD, DIM_ONE, false},
    [LT_FFN_NORM] = {"ffn_norm.weight", DIM_EMBD, DIM_ONE, false},
    [LT_FFN_GATE] = {"ffn_gate.weight", DIM_EMBD, DIM_FF, true},
    [LT_FFN_UP] = {"ffn_up.weight", DIM_EMBD, DIM_FF, true},
    [LT_FFN_DOWN] = {"ffn_down.weight", DIM_FF, DIM_EMBD, true},
    [LT_FFN_POST_NORM] = {"post_ffw_norm.weight", DIM_EMBD, DIM_ONE, false},
    [LT_FFN_GATE_INP] = {"ffn_gate_inp.weight", DIM_EMBD, DIM_EXPERT, true},
    [LT_FFN_GATE_EXPS] = {"ffn_gate_exps.weight", DIM_EMBD, DIM_FF, true, DIM_EXPERT},
    [LT_FFN_UP_EXPS] = {"ffn_up_exps.weight", DIM_EMBD, DIM_FF, true, DIM_EXPERT},
    [LT_FFN_DOWN_EXPS] = {"ffn_down_exps.weight", DIM_FF, DIM_EMBD, true, DIM_EXPERT},
};

static void emit(layer_prog *p, enum lop_kind kind, enum lop_buf dst, enum lop_buf src, int w,
                 int b)
{
    p->op[p->n_op++] = (layer_op){.kind = (uint8_t)kind, .dst = (uint8_t)dst,
                                  .src = (uint8_t)src, .w = (uint8_t)w, .b = (uint8_t)b};
}

static int opt(const bool has[LT_COUNT], enum layer_slot s)
{
    return has[s] ? (int)s : LOP_NONE;
}

/* A pre-norm block of attention and a gated FFN, with what the layer has of optional biases,
 * QK norms and post-norms (Llama, Qwen2/3, Gemma 3), or a block of experts in place of the FFN
 * when the layer has a router (Mixtral's llama files, Qwen3-MoE):
 *   h += post_norm(Wo · attention(rope(qk_norm(Wq x + bq)), rope(qk_norm(Wk x + bk)), Wv x + bv))
 *   h += post_norm(Wdown · (act(Wgate x') * Wup x'))        x = norm(h), x' = norm(h)
 *   or h += moe(x') */
static void build_dense(const arch_desc *a, const bool has[LT_COUNT], layer_prog *p)
{
    emit(p, LOP_NORM, LB_X, LB_H, LT_ATTN_NORM, LOP_NONE);
    emit(p, LOP_MATMUL, LB_Q, LB_X, LT_WQ, opt(has, LT_BQ));
    emit(p, LOP_MATMUL, LB_K, LB_X, LT_WK, opt(has, LT_BK));
    emit(p, LOP_MATMUL, LB_V, LB_X, LT_WV, opt(has, LT_BV));
    if (has[LT_Q_NORM]) {
        emit(p, LOP_NORM, LB_Q, LB_Q, LT_Q_NORM, LOP_NONE);
        p->op[p->n_op - 1].per_head = 1;
        emit(p, LOP_NORM, LB_K, LB_K, LT_K_NORM, LOP_NONE);
        p->op[p->n_op - 1].per_head = 1;
    }
    emit(p, LOP_ROPE, LB_Q, LB_K, LOP_NONE, LOP_NONE);
    emit(p, LOP_ATTENTION, LB_ATT, LB_Q, LOP_NONE, LOP_NONE);
    emit(p, LOP_MATMUL, LB_X, LB_ATT, LT_WO, LOP_NONE);
    if (has[LT_ATTN_POST_NORM])
        emit(p, LOP_NORM, LB_X, LB_X, LT_ATTN_POST_NORM, LOP_NONE);
    emit(p, LOP_ADD, LB_H, LB_X, LOP_NONE, LOP_NONE);

    emit(p, LOP_NORM, LB_X, LB_H, LT_FFN_NORM, LOP_NONE);
    if (has[LT_FFN_GATE_INP]) {
        emit(p, LOP_MOE, LB_Y, LB_X, LT_FFN_GATE_INP, LOP_NONE);
        emit(p, LOP_ADD, LB_H, LB_Y, LOP_NONE, LOP_NONE);
        return;
    }
    emit(p, LOP_MATMUL, LB_GATE, LB_X, LT_FFN_GATE, LOP_NONE);
    emit(p, LOP_MATMUL, LB_UP, LB_X, LT_FFN_UP, LOP_NONE);
    emit(p, a->glu, LB_GATE, LB_UP, LOP_NONE, LOP_NONE);
    emit(p, LOP_MATMUL, LB_X, LB_GATE, LT_FFN_DOWN, LOP_NONE);
    if (has[LT_FFN_POST_NORM])
        emit(p, LOP_NORM, LB_X, LB_X, LT_FFN_POST_NORM, LOP_NONE);
    emit(p, LOP_ADD, LB_H, LB_X, LOP_NONE, LOP_NONE);
}

/* Gemma 3 27B scales queries by 1/sqrt(n_embd / n_head) (its query_pre_attn_scalar), the
 * smaller ones by 1/sqrt(head_dim); the file carries neither, the 27B is the 62-layer one. */
static void gemma3_hparams(model_hparams *hp)
{
    if (hp->n_layer == 62)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
}

static const arch_desc archs[ARCH_COUNT] = {
    /* a llama file's layers are dense or (Mixtral) of experts: the program says which tensors
     * it needs, and the loader requires those */
    [ARCH_LLAMA] = {.name = "llama", .required = DENSE & ~FFN_DENSE, .optional = FFN_DENSE | EXPERTS,
                    .glu = LOP_SILU_MUL, .swa_pattern = 1, .build = build_dense},
    /* Qwen's configurations name a window they do not use (use_sliding_window false) */
    [ARCH_QWEN2] = {.name = "qwen2", .required = DENSE | QKV_BIAS, .neox = true,
                    .glu = LOP_SILU_MUL, .build = build_dense},
    [ARCH_QWEN3] = {.name = "qwen3", .required = DENSE | QK_NORM, .neox = true,
                    .glu = LOP_SILU_MUL, .build = build_dense},
    [ARCH_GEMMA3] = {.name = "gemma3", .required = DENSE | QK_NORM | POST_NORMS, .neox = true,
                     .glu = LOP_GELU_MUL, .embd_scale = true, .swa_pattern = 6,
                     .swa_rope_base = 10000.0f, .hparams = gemma3_hparams,
                     .build = build_dense},
    [ARCH_QWEN3MOE] = {.name = "qwen3moe", .required = (DENSE & ~FFN_DENSE) | QK_NORM | EXPERTS,
                       .neox = true, .glu = LOP_SILU_MUL, .build = build_dense},
};

const arch_desc *arch_get(enum model_arch a)
{
    return (unsigned)a < ARCH_COUNT ? &archs[a] : NULL;
}

const arch_desc *arch_find(const char *name)
{
    for (int a = 0; a < ARCH_COUNT; a++)
        if (!strcmp(archs[a].name, name))
            return &archs[a];
    return NULL;
}

enum model_arch arch_id(const arch_desc *a)
{
    return (enum model_arch)(a - archs);
}

const slot_desc *arch_slot(enum layer_slot s)
{
    return &slots[s];
}
