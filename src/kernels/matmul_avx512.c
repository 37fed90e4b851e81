/* matmul_avx512.c — AVX-512 (F, BW, VL, DQ, VNNI) tile kernels for kern_matmul, for the types
 * whose speed decides decode and prefill; the float types keep their AVX2 tiles (types.c). The
 * contract is mm_kernel's (types.h): each output's arithmetic is the same in every tile shape.
 * What differs from matmul_avx2.c:
 *  - K-quants: a 512-bit register holds 64 consecutive levels (two sub-blocks of 32, or four of
 *    16), so one maddubs and one VPDPWSSD (scale, widen and accumulate) per 64 levels and token
 *    do what takes two maddubs, two madd and two adds in 256 bits;
 *  - 32-blocks: VPDPBUSD multiplies unsigned by signed bytes and sums them in fours in one
 *    instruction. The weights enter it offset to unsigned (w + 128, or Q4_0's raw nibbles
 *    w + 8), and the offset comes back as offset * sum(a), computed once per token and block
 *    and shared by every row of the tile.
 * The integer part of every block is exact, as in the scalar reference. */
#include "kernels/matmul_x86.h"

/* ---- K-quants with Q8_K activations ---- */

ALWAYS_INLINE __m512i join256(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* With eight int16 scales in every 128-bit lane: scale j in the lower 256 bits, scale j+1 in the
 * upper 256 bits (the two 32-level sub-blocks of one 64-level register). */
ALWAYS_INLINE __m512i scale_halves(__m256i sc, int j)
{
    __m512i s = _mm512_broadcast_i64x4(sc);
    return _mm512_shuffle_epi8(s, join256(scale_selector(j), scale_selector(j + 1)));
}

ALWAYS_INLINE void store_sums512(int R, int T, __m512 facc[4][4], float *y, size_t ys)
{
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            y[t * ys + r] = _mm512_reduce_add_ps(facc[r][t]);
}

/* Superblocks per pass of the minimum terms (k4_tile). */
#define K4_CHUNK 16

/* The minimum terms of Q4_K / Q5_K, sum over superblocks k and sub-blocks j of
 * dmin_k * m_kj * da_k * (bsum_k,2j + bsum_k,2j+1), are one float dot product per (row, token):
 * a pass over K4_CHUNK superblocks stores the row factors dmin * m (mr) and the token factors
 * da * bsum pair (tb), 8 floats per superblock each, and then takes the products 16 lanes at a
 * time into the accumulators. That costs half an instruction per (row, token) and superblock
 * instead of five. */
ALWAYS_INLINE void k4_minimums(int R, int T, int kn, const float mr[4][8 * K4_CHUNK],
                               const float tb[4][8 * K4_CHUNK], __m512 facc[4][4])
{
    for (int q = 0; q < 8 * kn; q += 16) {
        __mmask16 m = 8 * kn - q >= 16 ? 0xffff : 0x00ff; /* an odd count ends with 8 lanes */
        for (int r = 0; r < R; r++) {
            __m512 mv = _mm512_maskz_loadu_ps(m, mr[r] + q);
            for (int t = 0; t < T; t++)
                facc[r][t] = _mm512_fnmadd_ps(mv, _mm512_maskz_loadu_ps(m, tb[t] + q), facc[r][t]);
        }
    }
}

/* Q4_K, or Q5_K when five_bits (bit j of qh[l] is the fifth bit of level l of sub-block j). */
ALWAYS_INLINE void k4_tile(bool five_bits, int n, int R, int T, const void *w, size_t ws,
                           const void *a, size_t as, float *y, size_t ys)
{
    const size_t block_bytes = five_bits ? sizeof(block_q5_k) : sizeof(block_q4_k);
    const size_t qs_at = five_bits ? offsetof(block_q5_k, qs) : offsetof(block_q4_k, qs);
    const __m512i low4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
    const int nk = n / QK_K;
    __m512 facc[4][4];
    float mr[4][8 * K4_CHUNK], tb[4][8 * K4_CHUNK];
    TILE_ZERO(facc, R, T, _mm512_setzero_ps());
    for (int k0 = 0; k0 < nk; k0 += K4_CHUNK) {
        const int kn = nk - k0 < K4_CHUNK ? nk - k0 : K4_CHUNK;
        for (int t = 0; t < T; t++)
            for (int kk = 0; kk < kn; kk++) {
                const block_q8_k *ab = (const block_q8_k *)((const uint8_t *)a + t * as) + k0 + kk;
                __m256i pairs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ab->bsums), _mm256_set1_epi16(1));
                _mm256_storeu_ps(tb[t] + 8 * kk, _mm256_mul_ps(_mm256_set1_ps(ab->d), _mm256_cvtepi32_ps(pairs)));
            }
        for (int k = k0; k < k0 + kn; k++) {
            const block_q8_k *ab[4];
            q8k_blocks(a, as, T, k, ab);
            for (int r = 0; r < R; r++) {
                const uint8_t *b = weight_at(w, ws, r, (size_t)k * block_bytes, block_bytes, T);
                uint64_t sc8, mn8;
                k4_unpack_scales_u64(b + offsetof(block_q4_k, scales), &sc8, &mn8);
                __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
                __m128 d_dmin = load_half_pair((const uint16_t *)b);
                __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn8)));
                _mm256_storeu_ps(mr[r] + 8 * (k - k0), _mm256_mul_ps(broadcast_lane1(d_dmin), mins));
                __m512i qh2 = _mm512_setzero_si512(), sumi[4];
                if (five_bits)
                    qh2 = _mm512_broadcast_i64x4(load_once(b + offsetof(block_q5_k, qh)));
                for (int t = 0; t < T; t++)
                    sumi[t] = _mm512_setzero_si512();
                for (int c = 0; c < 4; c++) {
                    __m256i q = load_once(b + qs_at + 32 * c);
                    __m512i lv = _mm512_and_si512(join256(q, _mm256_srli_epi16(q, 4)), low4);
                    if (five_bits) {
                        __m512i bit = join256(_mm256_set1_epi8((char)(1 << (2 * c))),
                                              _mm256_set1_epi8((char)(1 << (2 * c + 1))));
                        lv = _mm512_mask_add_epi8(lv, _mm512_test_epi8_mask(qh2, bit), lv, sixteen);
                    }
                    __m512i s = scale_halves(sc, 2 * c);
                    for (int t = 0; t < T; t++) {
                        __m512i p = _mm512_maddubs_epi16(lv, _mm512_loadu_si512(ab[t]->qs + 64 * c));
                        sumi[t] = _mm512_dpwssd_epi32(sumi[t], p, s);
                    }
                }
                float d = _mm_cvtss_f32(d_dmin);
                for (int t = 0; t < T; t++)
                    facc[r][t] = _mm512_fmadd_ps(_mm512_set1_ps(d * ab[t]->d), _mm512_cvtepi32_ps(sumi[t]), facc[r][t]);
            }
        }
        k4_minimums(R, T, kn, mr, tb, facc);
    }
    store_sums512(R, T, facc, y, ys);
}

#define Q4K_TILE(...) k4_tile(false, __VA_ARGS__)
#define Q5K_TILE(...) k4_tile(true, __VA_ARGS__)
DEFINE_TILE_4x4(tile_q4k, Q4K_TILE)
DEFINE_TILE_4x4(tile_q5k, Q5K_TILE)

/* Sixteen int16 lanes of scales base..base+3 (eight lanes each, one scale per 16 levels) from the
 * sixteen int16 scales of a Q6_K block in the low half of sc16. */
ALWAYS_INLINE __m512i four_scales(__m512i sc16, int base)
{
    const __m512i idx = _mm512_set_epi64(0x0003000300030003ll, 0x0003000300030003ll, 0x0002000200020002ll,
                                         0x0002000200020002ll, 0x0001000100010001ll, 0x0001000100010001ll, 0, 0);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)base)), sc16);
}

/* Q6_K: levels + 32 as unsigned bytes; 32 * sum_j scale_j * bsums_j is subtracted once per
 * superblock (as in the AVX2 tile). */
ALWAYS_INLINE void q6k_tile(int n, int R, int T, const void *w, size_t ws, const void *a,
                            size_t as, float *y, size_t ys)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
    /* qh bit pairs of groups 0|1 move up to bits 4-5 by 4|2, those of groups 2|3 down by 0|2 */
    const __m512i up = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    const __m512i down = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    __m512 facc[4][4];
    TILE_ZERO(facc, R, T, _mm512_setzero_ps());
    for (int k = 0; k < n / QK_K; k++) {
        const block_q8_k *ab[4];
        q8k_blocks(a, as, T, k, ab);
        for (int r = 0; r < R; r++) {
            const block_q6_k *b = (const block_q6_k *)weight_at(w, ws, r, (size_t)k * sizeof(block_q6_k), sizeof(block_q6_k), T);
            __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
            __m512i scales = _mm512_zextsi256_si512(sc16), sumi[4];
            for (int t = 0; t < T; t++) {
                __m256i off = _mm256_slli_epi32(
                    _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)ab[t]->bsums)), 5);
                sumi[t] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(off));
            }
            for (int h = 0; h < 2; h++) {
                __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
                __m512i qh2 = _mm512_broadcast_i64x4(load_once(b->qh + 32 * h));
                __m512i g01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh2, up), m2));
                __m512i g23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                              _mm512_and_si512(_mm512_srlv_epi16(qh2, down), m2));
                __m512i s01 = four_scales(scales, 8 * h), s23 = four_scales(scales, 8 * h + 4);
                for (int t = 0; t < T; t++) {
                    const int8_t *act = ab[t]->qs + 128 * h;
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(g01, _mm512_loadu_si512(act)), s01);
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(g23, _mm512_loadu_si512(act + 64)), s23);
                }
            }
            float d = half_f16c(b->d);
            for (int t = 0; t < T; t++)
                facc[r][t] = _mm512_fmadd_ps(_mm512_set1_ps(d * ab[t]->d), _mm512_cvtepi32_ps(sumi[t]), facc[r][t]);
        }
    }
    store_sums512(R, T, facc, y, ys);
}

#define Q6K_TILE(...) q6k_tile(__VA_ARGS__)
DEFINE_TILE_4x4(tile_q6k, Q6K_TILE)

/* ---- 32-blocks with Q8_0 activations ---- */

/* The 32 weights of a block as unsigned bytes w + offset (the offset of weights32_u's type). */
ALWAYS_INLINE __m256i q8_0_unsigned(const void *b)
{
    return _mm256_xor_si256(q8_0_weights(b), _mm256_set1_epi8((char)0x80)); /* w + 128 */
}

ALWAYS_INLINE __m256i q4_0_unsigned(const void *b)
{
    return nibbles_lo_hi(((const block_q4_0 *)b)->qs); /* w + 8 */
}

ALWAYS_INLINE __m256i iq4_nl_unsigned(const void *b)
{
    /* the grid shifted by 128 (its levels lie in [-127, 113]) */
    const __m256i grid = _mm256_xor_si256(
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4nl_values)), _mm256_set1_epi8((char)0x80));
    return _mm256_shuffle_epi8(grid, nibbles_lo_hi(((const block_iq4_nl *)b)->qs));
}

ALWAYS_INLINE __m256i mxfp4_unsigned(const void *b)
{
    /* the doubled FP4 grid shifted by 128 (its levels lie in [-12, 12]) */
    const __m256i grid = _mm256_xor_si256(
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)mxfp4_values)), _mm256_set1_epi8((char)0x80));
    return _mm256_shuffle_epi8(grid, nibbles_lo_hi(((const block_mxfp4 *)b)->qs));
}

/* MXFP4's scale is its E8M0 exponent, not an fp16 d in front of the levels. */
ALWAYS_INLINE float mxfp4_d(const void *b)
{
    return mxfp4_scale(((const block_mxfp4 *)b)->e);
}

typedef __m256i (*weights32_fn)(const void *block);
typedef float (*scale32_fn)(const void *block);

ALWAYS_INLINE void q32_tile(weights32_fn weights_u, scale32_fn scale, int offset,
                            size_t block_bytes, int n, int R, int T, const void *w, size_t ws,
                            const void *a, size_t as, float *y, size_t ys)
{
    const __m256i off = _mm256_set1_epi8((char)offset);
    __m256 facc[4][3];
    TILE_ZERO(facc, R, T, _mm256_setzero_ps());
    for (int i = 0; i < n / QK; i++) {
        __m256i av[3], neg[3];
        float da[3];
        for (int t = 0; t < T; t++) {
            const block_q8_0 *ab = (const block_q8_0 *)((const uint8_t *)a + t * as) + i;
            av[t] = q8_0_weights(ab);
            da[t] = block_d(ab);
            /* -(offset * sum a), the start of every row's sum: dpbusd then gives sum w * a */
            neg[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), off, av[t]));
        }
        for (int r = 0; r < R; r++) {
            const uint8_t *block = (const uint8_t *)w + r * ws + (size_t)i * block_bytes;
            if (T <= MM_STREAM_TOKENS && i % 2 == 0)
                prefetch_ahead(block, 2 * block_bytes);
            __m256i wu = weights_u(block);
            float dw = scale(block);
            for (int t = 0; t < T; t++) {
                __m256i p = _mm256_dpbusd_epi32(neg[t], wu, av[t]);
                facc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da[t]), _mm256_cvtepi32_ps(p), facc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            y[t * ys + r] = hsum_ps256(facc[r][t]);
}

#define Q8_0_TILE(...) q32_tile(q8_0_unsigned, block_d, 128, sizeof(block_q8_0), __VA_ARGS__)
#define Q4_0_TILE(...) q32_tile(q4_0_unsigned, block_d, 8, sizeof(block_q4_0), __VA_ARGS__)
#define IQ4_NL_TILE(...) q32_tile(iq4_nl_unsigned, block_d, 128, sizeof(block_iq4_nl), __VA_ARGS__)
#define MXFP4_TILE(...) q32_tile(mxfp4_unsigned, mxfp4_d, 128, sizeof(block_mxfp4), __VA_ARGS__)
DEFINE_TILE_4x3(tile_q8_0, Q8_0_TILE)
DEFINE_TILE_4x3(tile_q4_0, Q4_0_TILE)
DEFINE_TILE_4x3(tile_iq4_nl, IQ4_NL_TILE)
DEFINE_TILE_4x3(tile_mxfp4, MXFP4_TILE)

/* 4 x 4 K-quant tiles: each row's unpacked levels and scales serve four tokens (the 32 vector
 * registers of AVX-512 hold the 16 accumulators; measured 14% less CPU time per prefill token
 * than 4 x 2 on a Q4_K_M model). The 32-block tiles keep 4 x 3: 4 x 4, and two blocks per
 * 512-bit register, measured no faster. Decode takes one row per tile for every type: on a
 * Zen 4, two interleaved rows of 32-blocks (the AVX2 choice, measured on a Zen 3) took twice
 * the CPU time per Q8_0 decode step (121-128 against 60-62 ms, 4-layer 8B-shaped model). */
const mm_kernel mm_q4_k_avx512 = {tile_q4k, 4, 4, 1};
const mm_kernel mm_q5_k_avx512 = {tile_q5k, 4, 4, 1};
const mm_kernel mm_q6_k_avx512 = {tile_q6k, 4, 4, 1};
const mm_kernel mm_q8_0_avx512 = {tile_q8_0, 4, 3, 1};
const mm_kernel mm_q4_0_avx512 = {tile_q4_0, 4, 3, 1};
const mm_kernel mm_iq4_nl_avx512 = {tile_iq4_nl, 4, 3, 1};
const mm_kernel mm_mxfp4_avx512 = {tile_mxfp4, 4, 3, 1};
