/* AVX-512 (F, BW, VL, DQ, VNNI) dot products for the types that decide decode speed; the other
 * types use the AVX2 kernels (types.c falls back). Differences from the AVX2 path:
 *  - float types: 16-wide FMA, and the tail done by one masked step instead of scalar code;
 *  - 32-blocks: VPDPBUSD does the byte products and their sums in one instruction;
 *  - K-quants: a 512-bit register holds 64 consecutive elements (two sub-blocks of 32, or four
 *    of 16), so one maddubs and one VPDPWSSD (scale and accumulate) cover what takes two of each
 *    in 256 bits. */
#include "kernels/quant_x86.h"

/* ---- float weights, F32 activations ---- */

static inline __m512 load16_f32(const void *p, int i, __mmask16 m)
{
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

static inline __m512 load16_f16(const void *p, int i, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
}

static inline __m512 load16_bf16(const void *p, int i, __mmask16 m)
{
    __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

static inline __attribute__((always_inline)) float
dot_float(int n, const void *w, int elem_bytes, const float *y,
          __m512 (*load16)(const void *, int, __mmask16))
{
    const __mmask16 all = 0xffff;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        prefetch_weights((const char *)w + (size_t)i * elem_bytes, 64 * elem_bytes);
        acc0 = _mm512_fmadd_ps(load16(w, i, all), _mm512_loadu_ps(y + i), acc0);
        acc1 = _mm512_fmadd_ps(load16(w, i + 16, all), _mm512_loadu_ps(y + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(load16(w, i + 32, all), _mm512_loadu_ps(y + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(load16(w, i + 48, all), _mm512_loadu_ps(y + i + 48), acc3);
    }
    for (; i + 16 <= n; i += 16)
        acc0 = _mm512_fmadd_ps(load16(w, i, all), _mm512_loadu_ps(y + i), acc0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);   /* masked lanes load nothing */
        acc1 = _mm512_fmadd_ps(load16(w, i, m), _mm512_maskz_loadu_ps(m, y + i), acc1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

void f32_dot_avx512(int n, float *s, const void *w, const void *a)
{
    *s = dot_float(n, w, 4, a, load16_f32);
}

void f16_dot_avx512(int n, float *s, const void *w, const void *a)
{
    *s = dot_float(n, w, 2, a, load16_f16);
}

void bf16_dot_avx512(int n, float *s, const void *w, const void *a)
{
    *s = dot_float(n, w, 2, a, load16_bf16);
}

/* ---- 32-blocks against Q8_0 ---- */

/* As dot_i8x32, with the products summed in fours by VPDPBUSD (no int16 intermediate). */
static inline __m256i dot_i8x32_vnni(__m256i w, __m256i a)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

void q8_0_dot_avx512(int n, float *s, const void *w, const void *a)
{
    DOT_BLOCKS_Q8_0(block_q8_0, q8_0_weights, dot_i8x32_vnni)
}

void q4_0_dot_avx512(int n, float *s, const void *w, const void *a)
{
    DOT_BLOCKS_Q8_0(block_q4_0, q4_0_weights, dot_i8x32_vnni)
}

void iq4_nl_dot_avx512(int n, float *s, const void *w, const void *a)
{
    DOT_BLOCKS_Q8_0(block_iq4_nl, iq4_nl_weights, dot_i8x32_vnni)
}

/* ---- K-quants against Q8_K ---- */

static inline __m512i join256(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* With eight int16 scales in every 128-bit lane: scale j in the lower 256 bits, scale j+1 in the
 * upper 256 bits (the two 32-element sub-blocks of one 64-element register). */
static inline __m512i scale_halves_selector(int j)
{
    return join256(scale_selector(j), scale_selector(j + 1));
}

/* Shared by Q4_K and Q5_K: levels of chunk c (64 elements: sub-blocks 2c, 2c+1) are the low
 * nibbles then the high nibbles of 32 bytes, plus `fifth` (0 or 16 per byte). */
static inline __m512i k4_chunk(const uint8_t *q, int c, __m512i s16, const int8_t *act, __m512i sumi,
                               __mmask64 fifth)
{
    __m256i bytes = loadu256(q + 32 * c);
    __m512i lv = _mm512_and_si512(join256(bytes, _mm256_srli_epi16(bytes, 4)), _mm512_set1_epi8(0x0f));
    lv = _mm512_mask_add_epi8(lv, fifth, lv, _mm512_set1_epi8(16));
    __m512i p = _mm512_maddubs_epi16(lv, _mm512_loadu_si512(act + 64 * c));
    return _mm512_dpwssd_epi32(sumi, p, _mm512_shuffle_epi8(s16, scale_halves_selector(2 * c)));
}

/* Shared by Q4_K and Q5_K, whose blocks start alike: adds the block's minimum term to acc_m
 * (subtracted once at the end) and returns the eight sub-block scales as int16, broadcast to all
 * four 128-bit lanes. */
static inline __m512i k4_block_start(const uint8_t packed[12], uint16_t dmin, const block_q8_k *y,
                                     __m256 *acc_m)
{
    uint64_t sc, mn;
    k4_unpack_scales_u64(packed, &sc, &mn);
    *acc_m = _mm256_fmadd_ps(_mm256_set1_ps(y->d * half_f16c(dmin)),
                             _mm256_cvtepi32_ps(mins_by_bsums(mn, y->bsums)), *acc_m);
    return _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
}

void q4_k_dot_avx512(int n, float *s, const void *w, const void *a)
{
    const block_q4_k *x = w;
    const block_q8_k *y = a;
    __m512 acc = _mm512_setzero_ps();
    __m256 acc_m = _mm256_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        prefetch_weights(&x[i], (int)sizeof x[i]);
        __m512i s16 = k4_block_start(x[i].scales, x[i].dmin, &y[i], &acc_m);
        __m512i sumi = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++)
            sumi = k4_chunk(x[i].qs, c, s16, y[i].qs, sumi, 0);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[i].d * half_f16c(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = _mm512_reduce_add_ps(acc) - hsum_ps256(acc_m);
}

void q5_k_dot_avx512(int n, float *s, const void *w, const void *a)
{
    const block_q5_k *x = w;
    const block_q8_k *y = a;
    __m512 acc = _mm512_setzero_ps();
    __m256 acc_m = _mm256_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        prefetch_weights(&x[i], (int)sizeof x[i]);
        __m512i s16 = k4_block_start(x[i].scales, x[i].dmin, &y[i], &acc_m);
        __m256i qh = loadu256(x[i].qh);
        __m512i qh2 = join256(qh, qh);
        __m512i sumi = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            /* sub-block 2c's fifth bits are bit 2c of qh, sub-block 2c+1's bit 2c+1 */
            __m512i bit = join256(_mm256_set1_epi8((char)(1 << (2 * c))), _mm256_set1_epi8((char)(1 << (2 * c + 1))));
            sumi = k4_chunk(x[i].qs, c, s16, y[i].qs, sumi, _mm512_test_epi8_mask(qh2, bit));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[i].d * half_f16c(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = _mm512_reduce_add_ps(acc) - hsum_ps256(acc_m);
}

/* Sixteen int16 lanes from scale base, base+1, base+2, base+3 (eight each, one per 16 elements). */
static inline __m512i four_scales(__m512i sc16, int base)
{
    const __m512i idx = _mm512_set_epi64(0x0003000300030003ll, 0x0003000300030003ll, 0x0002000200020002ll,
                                         0x0002000200020002ll, 0x0001000100010001ll, 0x0001000100010001ll, 0, 0);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)base)), sc16);
}

/* Q6_K: levels + 32 as unsigned bytes; 32 * sum_j scale_j * bsums_j is subtracted once. */
void q6_k_dot_avx512(int n, float *s, const void *w, const void *a)
{
    const block_q6_k *x = w;
    const block_q8_k *y = a;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
    /* qh bit pairs of groups 0|1 move up to bits 4-5 by 4|2, those of groups 2|3 down by 0|2 */
    const __m512i up = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    const __m512i down = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        prefetch_weights(&x[i], (int)sizeof x[i]);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, loadu256(y[i].bsums)), 5);
        __m512i scales = _mm512_zextsi256_si512(sc16);
        __m512i sumi = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(offset));
        for (int h = 0; h < 2; h++) {
            __m512i ql = _mm512_loadu_si512(x[i].ql + 64 * h);
            __m256i qh = loadu256(x[i].qh + 32 * h);
            __m512i qh2 = join256(qh, qh);
            __m512i g01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh2, up), m2));
            __m512i g23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                          _mm512_and_si512(_mm512_srlv_epi16(qh2, down), m2));
            const int8_t *act = y[i].qs + 128 * h;
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(g01, _mm512_loadu_si512(act)),
                                       four_scales(scales, 8 * h));
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(g23, _mm512_loadu_si512(act + 64)),
                                       four_scales(scales, 8 * h + 4));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[i].d * half_f16c(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}
