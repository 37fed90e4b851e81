/* attention_simd.h — the attention primitives (attention.h) written once over a vector of VL
 * floats. A per-ISA file (attention_avx2.c, attention_avx512.c, attention_neon.c) defines the
 * vector type and operations below, includes this file, and names the table it builds:
 *
 *   vec, VL                        the vector type and its lanes
 *   v_zero() v_set1(x)             constants
 *   v_load(p) v_store(p, x)        VL floats, unaligned
 *   v_load_f16(p)                  VL F16 values, converted
 *   v_add v_sub v_mul              lane-wise
 *   v_fma(a, b, c)                 a * b + c, fused
 *   v_hsum(x)                      the sum of the lanes, in a fixed order
 *   v_clamp(x, lo, hi)             into [lo, hi], a NaN lane staying NaN
 *   v_round(x)                     to the nearest integer, as a float
 *   v_pow2(n)                      2^n for integer-valued n in [-126, 127]
 *   v_zero_below(y, x, lim)        y, with 0 in the lanes where x < lim
 *
 * Every loop over heads or blocks has a compile-time trip count (the dispatch on the group's
 * size below), so the accumulators live in registers. */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/half.h"

#define ATTN_INLINE static inline __attribute__((always_inline))

/* A long context's keys and values come from memory, not cache (a layer's cache at position
 * 4,000 is 16 MiB): each pass over rows asks for the row ATTN_AHEAD rows on (4 KiB ahead for
 * a 128-dimension F16 head), which measured 8-28 % faster than the hardware's prefetching
 * alone at 4,000 positions. The address is formed as an integer: past the last row it may lie
 * beyond the cache, and a prefetch never faults. */
#define ATTN_AHEAD 16
ATTN_INLINE void prefetch_row(const void *rows, int j, size_t row_bytes)
{
    const uintptr_t at = (uintptr_t)rows + (size_t)(j + ATTN_AHEAD) * row_bytes;
    for (size_t b = 0; b < row_bytes; b += 64)
        __builtin_prefetch((const void *)(at + b));
}

/* Each key's scores for NH heads; two keys per pass when the group is small, so that enough
 * independent sums are in flight. A key's arithmetic does not depend on its partner. */
ATTN_INLINE void simd_scores_nh(const int NH, int n, const float *q, int nk, const uint16_t *k,
                                size_t stride, float scale, float *s, int ls)
{
    const int KP = NH <= 4 ? 2 : 1;
    const int nv = n - n % VL;
    int j = 0;
    for (; j < nk; j += KP) {
        const int kp = nk - j < KP ? 1 : KP;
        for (int i = 0; i < KP; i++)
            prefetch_row(k, j + i, stride * sizeof *k);
        vec a[2][ATTN_MAX_GROUP];
        for (int i = 0; i < KP; i++)
            for (int h = 0; h < NH; h++)
                a[i][h] = v_zero();
        for (int d = 0; d < nv; d += VL) {
            for (int i = 0; i < KP; i++) {
                if (i >= kp)
                    break;
                vec kv = v_load_f16(k + (size_t)(j + i) * stride + d);
                for (int h = 0; h < NH; h++)
                    a[i][h] = v_fma(v_load(q + (size_t)h * n + d), kv, a[i][h]);
            }
        }
        for (int i = 0; i < kp; i++) {
            const uint16_t *kr = k + (size_t)(j + i) * stride;
            for (int h = 0; h < NH; h++) {
                float sum = v_hsum(a[i][h]);
                for (int d = nv; d < n; d++)
                    sum += q[(size_t)h * n + d] * half_to_f32(kr[d]);
                s[(size_t)h * ls + j + i] = sum * scale;
            }
        }
    }
}

/* DB blocks of VL outputs for NH heads stay in registers while all nk rows are added in. */
ATTN_INLINE void simd_accumulate_block(const int NH, const int DB, int n, float *acc,
                                       const float *p, int ls, int nk, const void *v,
                                       size_t stride, bool f16, int d)
{
    vec o[ATTN_MAX_GROUP][2];
    for (int h = 0; h < NH; h++)
        for (int b = 0; b < DB; b++)
            o[h][b] = v_load(acc + (size_t)h * n + d + b * VL);
    for (int j = 0; j < nk; j++) {
        vec x[2];
        if (f16 && d == 0)   /* the cache's rows, first pass (F32 rows: a tile in cache) */
            prefetch_row(v, j, stride * sizeof(uint16_t));
        for (int b = 0; b < DB; b++)
            x[b] = f16 ? v_load_f16((const uint16_t *)v + (size_t)j * stride + d + b * VL)
                       : v_load((const float *)v + (size_t)j * stride + d + b * VL);
        for (int h = 0; h < NH; h++) {
            vec pj = v_set1(p[(size_t)h * ls + j]);
            for (int b = 0; b < DB; b++)
                o[h][b] = v_fma(pj, x[b], o[h][b]);
        }
    }
    for (int h = 0; h < NH; h++)
        for (int b = 0; b < DB; b++)
            v_store(acc + (size_t)h * n + d + b * VL, o[h][b]);
}

ATTN_INLINE void simd_accumulate_nh(const int NH, int n, float *acc, const float *p, int ls,
                                    int nk, const void *v, size_t stride, bool f16)
{
    const int DB = NH <= 4 ? 2 : 1;
    int d = 0;
    for (; d + DB * VL <= n; d += DB * VL)
        simd_accumulate_block(NH, DB, n, acc, p, ls, nk, v, stride, f16, d);
    for (; d + VL <= n; d += VL)
        simd_accumulate_block(NH, 1, n, acc, p, ls, nk, v, stride, f16, d);
    for (; d < n; d++)
        for (int j = 0; j < nk; j++) {
            float x = f16 ? half_to_f32(((const uint16_t *)v)[(size_t)j * stride + d])
                          : ((const float *)v)[(size_t)j * stride + d];
            for (int h = 0; h < NH; h++)
                acc[(size_t)h * n + d] += p[(size_t)h * ls + j] * x;
        }
}

#define ATTN_GROUP_DISPATCH(CALL)                                                              \
    switch (nh) {                                                                              \
    case 1: CALL(1); break;                                                                    \
    case 2: CALL(2); break;                                                                    \
    case 3: CALL(3); break;                                                                    \
    case 4: CALL(4); break;                                                                    \
    case 5: CALL(5); break;                                                                    \
    case 6: CALL(6); break;                                                                    \
    case 7: CALL(7); break;                                                                    \
    default: CALL(8); break;                                                                   \
    }

static void simd_scores(int n, int nh, const float *q, int nk, const uint16_t *k, size_t stride,
                        float scale, float *s, int ls)
{
#define SCORES(NH) simd_scores_nh(NH, n, q, nk, k, stride, scale, s, ls)
    ATTN_GROUP_DISPATCH(SCORES)
#undef SCORES
}

static void simd_accumulate_f16(int n, int nh, float *acc, const float *p, int ls, int nk,
                                const uint16_t *v, size_t stride)
{
#define ACC16(NH) simd_accumulate_nh(NH, n, acc, p, ls, nk, v, stride, true)
    ATTN_GROUP_DISPATCH(ACC16)
#undef ACC16
}

static void simd_accumulate_f32(int n, int nh, float *acc, const float *p, int ls, int nk,
                                const float *v, size_t stride)
{
#define ACC32(NH) simd_accumulate_nh(NH, n, acc, p, ls, nk, v, stride, false)
    ATTN_GROUP_DISPATCH(ACC32)
#undef ACC32
}

/* attention.h's exponential, VL lanes at a time. */
ATTN_INLINE vec simd_exp(vec x)
{
    vec c = v_clamp(x, v_set1(ATTN_EXP_MIN), v_set1(ATTN_EXP_MAX));
    vec n = v_round(v_mul(c, v_set1(ATTN_LOG2E)));
    vec r = v_sub(v_sub(c, v_mul(n, v_set1(ATTN_LN2_HI))), v_mul(n, v_set1(ATTN_LN2_LO)));
    vec p = v_set1(ATTN_EXP_C6);
    p = v_fma(p, r, v_set1(ATTN_EXP_C5));
    p = v_fma(p, r, v_set1(ATTN_EXP_C4));
    p = v_fma(p, r, v_set1(ATTN_EXP_C3));
    p = v_fma(p, r, v_set1(ATTN_EXP_C2));
    p = v_fma(p, r, v_set1(1.0f));
    p = v_fma(p, r, v_set1(1.0f));
    return v_zero_below(v_mul(p, v_pow2(n)), x, v_set1(ATTN_EXP_MIN));
}

static float simd_exp_sum(int nk, float *s, float m)
{
    const vec vm = v_set1(m);
    vec sum = v_zero();
    int j = 0;
    for (; j + VL <= nk; j += VL) {
        vec e = simd_exp(v_sub(v_load(s + j), vm));
        v_store(s + j, e);
        sum = v_add(sum, e);
    }
    if (j < nk) {
        /* the tail as one more vector, its spare lanes at -inf (exp 0) */
        float t[VL];
        for (int i = 0; i < VL; i++)
            t[i] = j + i < nk ? s[j + i] - m : -INFINITY;
        vec e = simd_exp(v_load(t));
        v_store(t, e);
        sum = v_add(sum, e);
        for (int i = 0; j + i < nk; i++)
            s[j + i] = t[i];
    }
    return v_hsum(sum);
}

#define ATTN_SIMD_OPS {simd_scores, simd_accumulate_f16, simd_accumulate_f32, simd_exp_sum}
