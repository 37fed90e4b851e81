/* attention.h — the vector primitives kern_attention is built from, one set per SIMD path
 * (attention_scalar.c, attention_avx2.c, attention_avx512.c, attention_neon.c).
 *
 * The primitives serve a group of query heads that share one KV head: each key or value row is
 * loaded (and converted from F16) once for the whole group. Each head's arithmetic is the same
 * whatever the group's size, so how heads are grouped never changes a result. */
#ifndef PRIMA_ATTENTION_H
#define PRIMA_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

/* Query heads served by one call (the largest GQA group processed together). */
#define ATTN_MAX_GROUP 8

typedef struct attn_vec_ops {
    /* s[h * ls + j] = scale * dot(q + h * n, k row j) for h < nh, j < nk; F16 rows `stride`
     * elements apart. */
    void (*scores)(int n, int nh, const float *q, int nk, const uint16_t *k, size_t stride,
                   float scale, float *s, int ls);
    /* acc[h * n + d] += sum_j p[h * ls + j] * (v row j)[d] for h < nh, rows j < nk `stride`
     * elements apart, summed in row order: F16 rows, or F32 rows (a dequantized cache). */
    void (*accumulate_f16)(int n, int nh, float *acc, const float *p, int ls, int nk,
                           const uint16_t *v, size_t stride);
    void (*accumulate_f32)(int n, int nh, float *acc, const float *p, int ls, int nk,
                           const float *v, size_t stride);
    /* s[j] = exp(s[j] - m) for j < nk (each s[j] <= m); returns their sum. */
    float (*exp_sum)(int nk, float *s, float m);
} attn_vec_ops;

extern const attn_vec_ops attn_vec_ops_scalar;
extern const attn_vec_ops attn_vec_ops_avx2;
extern const attn_vec_ops attn_vec_ops_avx512;
extern const attn_vec_ops attn_vec_ops_neon;

/* The exponential every path computes, so that they differ only in rounding: x = n ln2 + r with
 * n = round(x log2 e) and |r| <= ln2 / 2 (ln2 split in two so that n ln2 is exact), e^r by its
 * Taylor polynomial of degree 6 (truncation below 1.2e-7 relative at |r| = ln2 / 2), and 2^n
 * put into the exponent bits. x is clamped to [ATTN_EXP_MIN, ATTN_EXP_MAX] (so that 2^n stays
 * a normal float) and below ATTN_EXP_MIN the result is 0; a NaN stays NaN. */
#define ATTN_EXP_MIN (-87.33654475f) /* ln(FLT_MIN) */
#define ATTN_EXP_MAX 88.0f
#define ATTN_LOG2E 1.44269504089f
#define ATTN_LN2_HI 0.693359375f
#define ATTN_LN2_LO (-2.12194440e-4f)
#define ATTN_EXP_C2 (1.0f / 2)
#define ATTN_EXP_C3 (1.0f / 6)
#define ATTN_EXP_C4 (1.0f / 24)
#define ATTN_EXP_C5 (1.0f / 120)
#define ATTN_EXP_C6 (1.0f / 720)

#endif
