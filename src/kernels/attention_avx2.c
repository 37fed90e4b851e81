/* attention_avx2.c — AVX2/F16C bodies of the attention primitives (attention.h). */
#include <immintrin.h>

#include "kernels/attention.h"
#include "kernels/quant_x86.h"

static inline __m256 load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* One key: every key is reduced with this same sequence whether or not it is part of a group. */
static inline float finish_score(__m256 acc, int n8, int n, const float *q, const uint16_t *k)
{
    float sum = hsum_ps256(acc);
    for (int d = n8; d < n; d++)
        sum += q[d] * fp16_to_fp32(k[d]);
    return sum;
}

static void scores_avx2(int n, const float *q, int nk, const uint16_t *k, size_t stride,
                        float scale, float *s)
{
    int n8 = n & ~7, j = 0;
    /* Four keys per pass share each load of q. */
    for (; j + 4 <= nk; j += 4) {
        const uint16_t *k0 = k + (size_t)j * stride, *k1 = k0 + stride, *k2 = k1 + stride,
                       *k3 = k2 + stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < n8; d += 8) {
            __m256 qv = _mm256_loadu_ps(q + d);
            a0 = _mm256_fmadd_ps(qv, load_f16(k0 + d), a0);
            a1 = _mm256_fmadd_ps(qv, load_f16(k1 + d), a1);
            a2 = _mm256_fmadd_ps(qv, load_f16(k2 + d), a2);
            a3 = _mm256_fmadd_ps(qv, load_f16(k3 + d), a3);
        }
        s[j] = finish_score(a0, n8, n, q, k0) * scale;
        s[j + 1] = finish_score(a1, n8, n, q, k1) * scale;
        s[j + 2] = finish_score(a2, n8, n, q, k2) * scale;
        s[j + 3] = finish_score(a3, n8, n, q, k3) * scale;
    }
    for (; j < nk; j++) {
        const uint16_t *kr = k + (size_t)j * stride;
        __m256 a = _mm256_setzero_ps();
        for (int d = 0; d < n8; d += 8)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load_f16(kr + d), a);
        s[j] = finish_score(a, n8, n, q, kr) * scale;
    }
}

static void accumulate_avx2(int n, float *acc, const float *p, int nk, const uint16_t *v,
                            size_t stride)
{
    int d = 0;
    /* 32 outputs stay in registers while all nk rows are added into them. */
    for (; d + 32 <= n; d += 32) {
        __m256 o0 = _mm256_loadu_ps(acc + d), o1 = _mm256_loadu_ps(acc + d + 8);
        __m256 o2 = _mm256_loadu_ps(acc + d + 16), o3 = _mm256_loadu_ps(acc + d + 24);
        for (int j = 0; j < nk; j++) {
            const uint16_t *vr = v + (size_t)j * stride + d;
            __m256 pj = _mm256_broadcast_ss(p + j);
            o0 = _mm256_fmadd_ps(pj, load_f16(vr), o0);
            o1 = _mm256_fmadd_ps(pj, load_f16(vr + 8), o1);
            o2 = _mm256_fmadd_ps(pj, load_f16(vr + 16), o2);
            o3 = _mm256_fmadd_ps(pj, load_f16(vr + 24), o3);
        }
        _mm256_storeu_ps(acc + d, o0);
        _mm256_storeu_ps(acc + d + 8, o1);
        _mm256_storeu_ps(acc + d + 16, o2);
        _mm256_storeu_ps(acc + d + 24, o3);
    }
    for (; d + 8 <= n; d += 8) {
        __m256 o = _mm256_loadu_ps(acc + d);
        for (int j = 0; j < nk; j++)
            o = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j),
                                load_f16(v + (size_t)j * stride + d), o);
        _mm256_storeu_ps(acc + d, o);
    }
    for (; d < n; d++)
        for (int j = 0; j < nk; j++)
            acc[d] += p[j] * fp16_to_fp32(v[(size_t)j * stride + d]);
}

const attn_vec_ops attn_vec_ops_avx2 = {scores_avx2, accumulate_avx2};
