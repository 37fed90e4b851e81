/* attention.h — the vector primitives kern_attention is built from, one set per SIMD path. */
#ifndef PRIMA_ATTENTION_H
#define PRIMA_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

typedef struct attn_vec_ops {
    /* s[j] = scale * dot(q, k row j) for j < nk; rows of F16 are `stride` elements apart. */
    void (*scores)(int n, const float *q, int nk, const uint16_t *k, size_t stride, float scale,
                   float *s);
    /* acc += sum_j p[j] * (v row j), rows j < nk, `stride` elements apart. */
    void (*accumulate)(int n, float *acc, const float *p, int nk, const uint16_t *v,
                       size_t stride);
} attn_vec_ops;

extern const attn_vec_ops attn_vec_ops_avx2;

#endif
