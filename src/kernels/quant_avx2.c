/* AVX2 + FMA + F16C dot products. Integer types: bytes multiplied with maddubs (unsigned weight
 * levels x signed activations, or signed x signed with the sign moved onto the activation),
 * widened with madd against the sub-block scales, and scaled in float once per block. */
#include "kernels/quant_x86.h"

/* ---- float weights, F32 activations: four independent accumulators hide the FMA latency ---- */

static inline __m256 load8_f32(const void *p, int i)
{
    return _mm256_loadu_ps((const float *)p + i);
}

static inline __m256 load8_f16(const void *p, int i)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}

static inline __m256 load8_bf16(const void *p, int i)
{
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

static inline float one_f32(const void *p, int i) { return ((const float *)p)[i]; }
static inline float one_f16(const void *p, int i) { return half_f16c(((const uint16_t *)p)[i]); }
static inline float one_bf16(const void *p, int i) { return bf16_to_f32(((const uint16_t *)p)[i]); }

static inline __attribute__((always_inline)) float
dot_float(int n, const void *w, int elem_bytes, const float *y, __m256 (*load8)(const void *, int),
          float (*one)(const void *, int))
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        prefetch_weights((const char *)w + (size_t)i * elem_bytes, 32 * elem_bytes);
        acc0 = _mm256_fmadd_ps(load8(w, i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(load8(w, i + 8), _mm256_loadu_ps(y + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(load8(w, i + 16), _mm256_loadu_ps(y + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(load8(w, i + 24), _mm256_loadu_ps(y + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(load8(w, i), _mm256_loadu_ps(y + i), acc0);
    float sum = hsum_ps256(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++)
        sum += one(w, i) * y[i];
    return sum;
}

void f32_dot_avx2(int n, float *s, const void *w, const void *a)
{
    *s = dot_float(n, w, 4, a, load8_f32, one_f32);
}

void f16_dot_avx2(int n, float *s, const void *w, const void *a)
{
    *s = dot_float(n, w, 2, a, load8_f16, one_f16);
}

void bf16_dot_avx2(int n, float *s, const void *w, const void *a)
{
    *s = dot_float(n, w, 2, a, load8_bf16, one_bf16);
}

/* ---- 32-blocks against Q8_0 (extractors and loop in quant_x86.h) ---- */

void q8_0_dot_avx2(int n, float *s, const void *w, const void *a)
{
    DOT_BLOCKS_Q8_0(block_q8_0, q8_0_weights, dot_i8x32)
}

void q4_0_dot_avx2(int n, float *s, const void *w, const void *a)
{
    DOT_BLOCKS_Q8_0(block_q4_0, q4_0_weights, dot_i8x32)
}

void iq4_nl_dot_avx2(int n, float *s, const void *w, const void *a)
{
    DOT_BLOCKS_Q8_0(block_iq4_nl, iq4_nl_weights, dot_i8x32)
}

/* ---- K-quants against Q8_K ---- */

/* 32 unsigned levels (< 64) times 32 activations, weighted by one int16 scale per 16 elements
 * (lane 0 / lane 1 of `scales`): 8 int32. */
static inline __m256i scaled_dot(__m256i q, const int8_t *act, __m256i scales)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, loadu256(act)), scales);
}

/* Shared by Q4_K and Q5_K, whose blocks start alike (d, dmin, packed scales). Subtracts the
 * block's minimum term from acc, sets *dm to (d, dmin) times the activation scale, and returns
 * the eight sub-block scales as int16, broadcast to both lanes. */
static inline __m256i k4_block_start(const uint16_t *d_dmin, const uint8_t packed[12],
                                     const block_q8_k *y, __m128 *dm, __m256 *acc)
{
    uint64_t sc, mn;
    k4_unpack_scales_u64(packed, &sc, &mn);
    *dm = scale_min_pair(d_dmin, y->d);
    *acc = _mm256_fnmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(*dm)),
                            _mm256_cvtepi32_ps(mins_by_bsums(mn, y->bsums)), *acc);
    return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
}

/* Chunk c of a Q4_K / Q5_K block: levels lo (sub-block 2c) and hi (sub-block 2c+1) times their
 * activations and scales, as 8 int32. */
static inline __m256i k4_chunk_dot(__m256i lo, __m256i hi, const int8_t *act, __m256i s16, int c)
{
    __m256i plo = scaled_dot(lo, act + 64 * c, _mm256_shuffle_epi8(s16, scale_selector(2 * c)));
    __m256i phi = scaled_dot(hi, act + 64 * c + 32, _mm256_shuffle_epi8(s16, scale_selector(2 * c + 1)));
    return _mm256_add_epi32(plo, phi);
}

void q4_k_dot_avx2(int n, float *s, const void *w, const void *a)
{
    const block_q4_k *x = w;
    const block_q8_k *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        prefetch_weights(&x[i], (int)sizeof x[i]);
        __m128 dm;
        __m256i s16 = k4_block_start(&x[i].d, x[i].scales, &y[i], &dm, &acc);
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i bytes = loadu256(x[i].qs + 32 * c);
            __m256i lo = _mm256_and_si256(bytes, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4);
            sumi = _mm256_add_epi32(sumi, k4_chunk_dot(lo, hi, y[i].qs, s16, c));
        }
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps256(acc);
}

void q5_k_dot_avx2(int n, float *s, const void *w, const void *a)
{
    const block_q5_k *x = w;
    const block_q8_k *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        prefetch_weights(&x[i], (int)sizeof x[i]);
        __m128 dm;
        __m256i s16 = k4_block_start(&x[i].d, x[i].scales, &y[i], &dm, &acc);
        /* bit j of qh[l] is the fifth bit of sub-block j: shift it to bit 4 as j advances */
        __m256i qh = loadu256(x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i bytes = loadu256(x[i].qs + 32 * c);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(bytes, m4),
                                         _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4),
                                         _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
            qh = _mm256_srli_epi16(qh, 2);
            sumi = _mm256_add_epi32(sumi, k4_chunk_dot(lo, hi, y[i].qs, s16, c));
        }
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps256(acc);
}

/* Q6_K levels are stored + 32 (0..63, unsigned for maddubs); the offset comes back as
 * 32 * sum_j scale_j * bsums_j, one madd per block. */
void q6_k_dot_avx2(int n, float *s, const void *w, const void *a)
{
    const block_q6_k *x = w;
    const block_q8_k *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        prefetch_weights(&x[i], (int)sizeof x[i]);
        __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), loadu256(y[i].bsums));
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
            __m256i ql0 = loadu256(x[i].ql + 64 * h), ql1 = loadu256(x[i].ql + 64 * h + 32);
            __m256i qh = loadu256(x[i].qh + 32 * h);
            const int8_t *act = y[i].qs + 128 * h;
            __m256i q0 = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
            __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
            __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
            __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
            __m256i p0 = scaled_dot(q0, act, _mm256_shuffle_epi8(s16, scale_pair_selector(0)));
            __m256i p1 = scaled_dot(q1, act + 32, _mm256_shuffle_epi8(s16, scale_pair_selector(2)));
            __m256i p2 = scaled_dot(q2, act + 64, _mm256_shuffle_epi8(s16, scale_pair_selector(4)));
            __m256i p3 = scaled_dot(q3, act + 96, _mm256_shuffle_epi8(s16, scale_pair_selector(6)));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * half_f16c(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps256(acc);
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
