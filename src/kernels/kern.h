/* kern.h — the compute context and the ops the model is built from.
 *
 * A kern_ctx owns a persistent thread pool (threads created once, parked between ops) and the
 * scratch space for activation quantization; after kern_ctx_reserve no op allocates or spawns
 * anything, and none aborts: the one that can run out of memory (kern_matmul) says so.
 * Results never depend on the thread count: work is split by output rows, and each output element
 * is computed by exactly one thread in a fixed order. */
#ifndef PRIMA_KERN_H
#define PRIMA_KERN_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/types.h"

typedef struct kern_ctx kern_ctx;

/* Largest head size kern_rope and kern_attention accept (model loaders check against it). */
#define KERN_MAX_HEAD_DIM 512
/* Largest pool kern_ctx_create accepts. */
#define KERN_MAX_THREADS 256

kern_ctx *kern_ctx_create(int n_threads);
void kern_ctx_free(kern_ctx *c);
int kern_ctx_threads(const kern_ctx *c);
/* Run fn(arg, ith, nth) on all threads of the pool (caller's thread included) and wait. One
 * caller at a time per context, and fn must not call back into the same context. */
void kern_parallel(kern_ctx *c, void (*fn)(void *arg, int ith, int nth), void *arg);

/* Set aside the scratch of kern_matmul calls of up to n_tokens rows of n_in inputs, for any
 * weight type, so that they allocate nothing. 0, or -1 when out of memory. */
int kern_ctx_reserve(kern_ctx *c, int n_in, int n_tokens);
/* Hands the pages of that scratch beyond what calls of n_tokens rows of n_in inputs use back to
 * the OS (util/mem.h); the reservation stands, and a wider call touches them again. */
void kern_ctx_release(kern_ctx *c, int n_in, int n_tokens);

/* y[t*n_out + o] = sum_i W[o][i] * x[t*n_in + i] for t < n_tokens, o < n_out.
 * W: n_out rows of n_in elements of type wt, contiguous (a GGUF 2-D tensor, ne[0] = n_in).
 * Decode (n_tokens == 1) streams W once; prefill blocks over tokens for cache reuse.
 * Returns 0, or -1 (y untouched) when the call needs more scratch than kern_ctx_reserve set
 * aside and there is no memory for it. */
int kern_matmul(kern_ctx *c, const void *w, enum dtype wt, int n_in, int n_out,
                const float *x, int n_tokens, float *y);
/* Weights kept packed. Where the bound path has a kept form of type wt (kern_keep_bytes > 0), a
 * matrix rearranged once by kern_keep into interleaved panels (within a few percent of its own
 * size) serves every batch through kern_matmul_kept, one token or many, with none of the
 * per-call packing kern_matmul does for prefill: a few tokens then cost little more than one.
 * A kept matrix belongs to the path bound when it was made and computes exactly what kern_matmul
 * computes from the original. */
size_t kern_keep_bytes(enum dtype wt, int n_in, int n_out); /* 0: no kept form of wt here */
/* The name of the bound path's kept layouts: a kept matrix stored under another name is not
 * one of these ("" when the path keeps nothing). */
const char *kern_keep_layout(void);
/* The kept form of W (as kern_matmul takes it) into dst: kern_keep_bytes, 64-byte aligned. */
void kern_keep(kern_ctx *c, const void *w, enum dtype wt, int n_in, int n_out, void *dst);
int kern_matmul_kept(kern_ctx *c, const void *kept, enum dtype wt, int n_in, int n_out,
                     const float *x, int n_tokens, float *y);
/* Parallel jobs (kern_parallel calls) one kern_matmul of weight type wt runs: the product, and
 * before it the activations' quantization for types whose dot products take quantized
 * activations. Each pays the pool's wake-up and wait, which the scheduler counts. */
int kern_matmul_jobs(enum dtype wt);

/* Dequantize row `row` of a matrix (n_in elements per row) into out: embedding lookup. */
void kern_get_row(const void *w, enum dtype wt, int n_in, int row, float *out);

void kern_rmsnorm(float *out, const float *x, const float *weight, int n, float eps);
void kern_add(float *y, const float *x, int n);              /* y += x */
void kern_silu_mul(float *gate, const float *up, int n);     /* gate = silu(gate) * up */
/* gate = gelu(gate) * up, GELU's tanh approximation */
void kern_gelu_mul(float *gate, const float *up, int n);
/* gate = g sigmoid(1.702 g) (u + 1), g = min(gate, 7), u = up clamped to [-7, 7] (gpt-oss) */
void kern_swiglu_oai_mul(float *gate, const float *up, int n);
void kern_softmax(float *x, int n);                          /* numerically stable, in place */

typedef struct rope_params {
    int n_rot;                  /* rotated dims per head (<= head_dim, even) */
    float freq_base;
    float freq_scale;           /* linear scaling: 1/factor */
    bool neox;                  /* NeoX ordering: pairs (i, i + n_rot/2) instead of (2i, 2i+1) */
    const float *freq_factors;  /* Llama-3 rope_freqs (n_rot/2 divisors), or NULL */
    /* YaRN (ext_factor > 0): each pair's angle mixes the interpolated (freq_scale) and the
     * original one by a ramp between the dimensions whose wavelengths fit beta_fast and
     * beta_slow turns in n_ctx_orig positions, and cos/sin are scaled by
     * 1 + 0.1 ln(1/freq_scale) — unless rotate_only, for re-rotating keys already scaled. */
    float ext_factor, beta_fast, beta_slow;
    int n_ctx_orig;
    bool rotate_only;
} rope_params;

/* The rotation kern_rope applies at position pos: cos and sin of the angle of each of the
 * n_rot/2 pairs (a GPU backend uploads them, so both sides rotate by the same floats). */
void kern_rope_angles(int pos, const rope_params *rp, float *cs, float *sn);
/* Rotate n_heads heads of head_dim values at x (contiguous) for position pos. */
void kern_rope(float *x, int n_heads, int head_dim, int pos, const rope_params *rp);

/* A layer's KV cache in k_type / v_type: for each sequence s and KV head h, a region of
 * seq_rows rows of head_dim elements (region s * n_head_kv + h; kern_attention's seq_rows). */
typedef struct kern_kv {
    const void *k, *v;
    enum dtype k_type, v_type;
} kern_kv;

/* The cache types kern_attention reads: F16, and Q8_0 or Q4_0 when head_dim is a multiple of
 * their 32-element blocks (a head's part of a row is then whole blocks). */
bool kern_kv_type_ok(enum dtype t, int head_dim);

/* Grouped-query attention over a KV cache for a batch of tokens of one or more sequences.
 * q: n_tokens x (n_head*head_dim), rounded to F16 where it meets F16 keys (to Q8_0 where it
 * meets quantized ones); out likewise. Row j % seq_rows of a sequence's regions (kern_kv) holds
 * position j: a ring when the sequence outgrows it.
 * Token t (of sequence seq[t]; seq NULL: all of sequence 0) attends to its sequence's positions
 * 0..pos[t] (causal), or only the last `window` of them (window > 0: sliding attention; a ring
 * must hold them). sinks (NULL: none): a logit per query head that joins its softmax's
 * denominator only. One pass with a running max (numerically stable), work split by (token,
 * group of heads sharing a KV head); a token's result depends neither on the other tokens of
 * the batch, nor on the ring's size, nor on the thread count. */
void kern_attention(kern_ctx *c, float *out, const float *q, int n_tokens, const int32_t *pos,
                    const int32_t *seq, size_t seq_rows, int window, const float *sinks,
                    const kern_kv *kv, int n_head, int n_head_kv, int head_dim, float scale);

#endif
