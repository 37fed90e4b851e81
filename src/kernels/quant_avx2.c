/* AVX2 + FMA + F16C dot products of the types without an AVX2 tile kernel (the others are
 * computed by their tiles in matmul_avx2.c). Bytes multiplied with maddubs (unsigned weight
 * levels x signed activations, or signed x signed with the sign moved onto the activation),
 * widened with madd against the sub-block scales, and scaled in float once per block. */
#include "kernels/quant_x86.h"

/* ---- K-quants against Q8_K ---- */

/* 32 unsigned levels (< 64) times 32 activations, weighted by one int16 scale per 16 elements
 * (lane 0 / lane 1 of `scales`): 8 int32. */
static inline __m256i scaled_dot(__m256i q, const int8_t *act, __m256i scales)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, loadu256(act)), scales);
}

void q2_k_dot_avx2(int n, float *s, const void *w, const void *a)
{
    const block_q2_k *x = w;
    const block_q8_k *y = a;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        prefetch_weights(&x[i], (int)sizeof x[i]);
        __m128i packed = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m128i sc8 = _mm_and_si128(packed, m4), m8 = _mm_and_si128(_mm_srli_epi16(packed, 4), m4);
        __m256i msum = _mm256_madd_epi16(_mm256_cvtepu8_epi16(m8), loadu256(y[i].bsums));
        __m128 dm = scale_min_pair(&x[i].d, y[i].d);
        acc = _mm256_fnmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm)), _mm256_cvtepi32_ps(msum), acc);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
            __m256i bytes = loadu256(x[i].qs + 32 * h);
            const int8_t *act = y[i].qs + 128 * h;
            for (int g = 0; g < 4; g++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(bytes, 2 * g), m3);
                sumi = _mm256_add_epi32(sumi, scaled_dot(q, act + 32 * g,
                                                         _mm256_shuffle_epi8(s16, scale_pair_selector(2 * g))));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps256(acc);
}

/* Q3_K levels as low 2 bits + 4 * high bit (0..7, i.e. the level + 4); the 4 comes back through
 * the bsums like Q6_K's 32. */
void q3_k_dot_avx2(int n, float *s, const void *w, const void *a)
{
    const block_q3_k *x = w;
    const block_q8_k *y = a;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        prefetch_weights(&x[i], (int)sizeof x[i]);
        uint64_t lo, hi;
        k3_unpack_scales_u64(x[i].scales, &lo, &hi);
        __m128i sc8 = _mm_sub_epi8(_mm_set_epi64x((long long)hi, (long long)lo), _mm_set1_epi8(32));
        __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), loadu256(y[i].bsums));
        __m256i hm = loadu256(x[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
            __m256i bytes = loadu256(x[i].qs + 32 * h);
            const int8_t *act = y[i].qs + 128 * h;
            for (int g = 0; g < 4; g++) {
                __m256i low = _mm256_and_si256(_mm256_srli_epi16(bytes, 2 * g), m3);
                __m256i high = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + g), one);
                __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
                sumi = _mm256_add_epi32(sumi, scaled_dot(q, act + 32 * g,
                                                         _mm256_shuffle_epi8(s16, scale_pair_selector(2 * g))));
            }
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 2));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * half_f16c(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps256(acc);
}

void q8_k_dot_avx2(int n, float *s, const void *w, const void *a)
{
    const block_q8_k *x = w, *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        prefetch_weights(&x[i], (int)sizeof x[i]);
        __m256i sumi = _mm256_setzero_si256();
        for (int k = 0; k < QK_K; k += 32)
            sumi = _mm256_add_epi32(sumi, dot_i8x32(loadu256(x[i].qs + k), loadu256(y[i].qs + k)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(x[i].d * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps256(acc);
}
