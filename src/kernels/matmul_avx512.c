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

/* The sums of n <= 4 integer vectors, vector i's in lane i (exact, so in any order). */
ALWAYS_INLINE __m128i lane_sums(int n, const __m512i s[4])
{
    __m256i h[4];
    for (int i = 0; i < 4; i++)
        h[i] = i < n ? _mm256_add_epi32(_mm512_castsi512_si256(s[i]), _mm512_extracti64x4_epi64(s[i], 1))
                     : _mm256_setzero_si256();
    __m256i q = _mm256_hadd_epi32(_mm256_hadd_epi32(h[0], h[1]), _mm256_hadd_epi32(h[2], h[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
}

/* The same for n <= 4 vectors of four lanes. */
ALWAYS_INLINE __m128i lane_sums128(int n, const __m128i s[4])
{
    __m128i h[4];
    for (int i = 0; i < 4; i++)
        h[i] = i < n ? s[i] : _mm_setzero_si128();
    return _mm_hadd_epi32(_mm_hadd_epi32(h[0], h[1]), _mm_hadd_epi32(h[2], h[3]));
}

/* acc + a * b in the first n lanes (the others unchanged, not even a -0 made +0). */
ALWAYS_INLINE __m128 phases_fma(int n, __m128 a, __m128 b, __m128 acc, bool negate)
{
    __m128 v = negate ? _mm_fnmadd_ps(a, b, acc) : _mm_fmadd_ps(a, b, acc);
    return n == K_PHASES ? v : _mm_mask_mov_ps(acc, (__mmask8)((1u << n) - 1), v);
}

/* The scales and minimums of a row's superblocks k0 .. k0 + n - 1 (n <= 4, blocks from b0 on)
 * unpacked in vector registers, which here costs less than the scalar unpacking of each
 * (k4_unpack_scales_u64): superblock kk in 128-bit lane kk, its eight 6-bit scales in bytes 0-7
 * and its eight minimums in bytes 8-15. */
ALWAYS_INLINE __m512i k4_scales4(const uint8_t *b0, size_t block_bytes, int n)
{
    const uint8_t *p = b0 + offsetof(block_q4_k, scales); /* 16 bytes: the 12 and 4 of qs */
    __m128i l[4];
    for (int i = 0; i < 4; i++)
        l[i] = i < n ? _mm_loadu_si128((const __m128i *)(p + i * block_bytes)) : _mm_setzero_si128();
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(l[1], l[0])), _mm256_set_m128i(l[3], l[2]), 1);
    /* bytes 0-3: scales 0-3, 4-7: the low nibbles of 4-7 (bytes 8-11), 8-11: mins 0-3 (bytes 4-7),
     * 12-15: the high nibbles of 4-7 (bytes 8-11); the top two bits of 4-7 from bytes 0-3 | 4-7 */
    const __m512i pick = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m512i tops = _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    __m512i a = _mm512_shuffle_epi8(v, pick), t = _mm512_shuffle_epi8(v, tops);
    __m512i low6 = _mm512_and_si512(a, _mm512_set1_epi8(0x3f));
    __m512i nib = _mm512_mask_blend_epi8(0xf000f000f000f000ull, _mm512_and_si512(a, _mm512_set1_epi8(0x0f)),
                                         _mm512_and_si512(_mm512_srli_epi16(a, 4), _mm512_set1_epi8(0x0f)));
    __m512i high = _mm512_or_si512(nib, _mm512_and_si512(_mm512_srli_epi16(t, 2), _mm512_set1_epi8(0x30)));
    return _mm512_mask_blend_epi8(0xf0f0f0f0f0f0f0f0ull, low6, high);
}

/* Q4_K, or Q5_K when five_bits (bit j of qh[l] is the fifth bit of level l of sub-block j).
 *
 * What every AVX-512 tile of these types computes, ordinary or packed (matmul_packed_avx512.c):
 * per superblock k of a row and a token, two exact integers
 *     isum_k = sum_j scale_j * dot(levels of sub-block j, activations),
 *     msum_k = sum_j min_j * (sum of the activations of sub-block j),
 * then, k in order, into accumulator p = k % K_PHASES,
 *     acc_p = fma(d_k * da_k, (float)isum_k, acc_p);  acc_p = fma(-(dmin_k * da_k), (float)msum_k, acc_p),
 * and the output (acc_0 + acc_1) + (acc_2 + acc_3). Here a vector holds 64 levels of one row:
 * the sums across lanes of K_PHASES superblocks are taken together, and their float steps run
 * as one vector of phases. */
ALWAYS_INLINE void k4_tile(bool five_bits, int n, int R, int T, const void *w, size_t ws,
                           const void *a, size_t as, float *y, size_t ys)
{
    const size_t block_bytes = five_bits ? sizeof(block_q5_k) : sizeof(block_q4_k);
    const size_t qs_at = five_bits ? offsetof(block_q5_k, qs) : offsetof(block_q4_k, qs);
    const __m512i low4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
    const int nk = n / QK_K;
    __m128 facc[4][4]; /* [row][token], lanes: the phases */
    TILE_ZERO(facc, R, T, _mm_setzero_ps());
    for (int k0 = 0; k0 < nk; k0 += K_PHASES) {
        const int g = nk - k0 < K_PHASES ? nk - k0 : K_PHASES;
        for (int r = 0; r < R; r++) {
            __m512i sumi[4][K_PHASES]; /* [token][superblock] */
            __m128i msum[4][K_PHASES];
            uint32_t d_dmin[K_PHASES] = {0}; /* the superblocks' fp16 pairs d, dmin */
            TILE_ZERO(sumi, T, K_PHASES, _mm512_setzero_si512());
            TILE_ZERO(msum, T, K_PHASES, _mm_setzero_si128());
            const __m512i scales = k4_scales4((const uint8_t *)w + r * ws + (size_t)k0 * block_bytes, block_bytes, g);
            PHASE_LOOP(kk, g) {
                const uint8_t *b = weight_at(w, ws, r, (size_t)(k0 + kk) * block_bytes, block_bytes, T);
                __m128i sm = _mm512_castsi512_si128(_mm512_permutexvar_epi32(
                    _mm512_add_epi32(_mm512_set1_epi32(4 * kk), _mm512_setr_epi32(0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)), scales));
                __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
                __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
                memcpy(&d_dmin[kk], b, sizeof d_dmin[kk]);
                __m512i qh2 = _mm512_setzero_si512();
                if (five_bits)
                    qh2 = _mm512_broadcast_i64x4(load_once(b + offsetof(block_q5_k, qh)));
                for (int t = 0; t < T; t++) {
                    /* the activation sums of the eight sub-blocks, as int16 */
                    const int16_t *bs = q8k_at(a, as, t, k0 + kk)->bsums;
                    __m128i pb = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bs), _mm_loadu_si128((const __m128i *)(bs + 8)));
                    sumi[t][kk] = _mm512_setzero_si512();
                    msum[t][kk] = _mm_madd_epi16(mins, pb);
                }
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
                        __m512i p = _mm512_maddubs_epi16(lv, _mm512_loadu_si512(q8k_at(a, as, t, k0 + kk)->qs + 64 * c));
                        sumi[t][kk] = _mm512_dpwssd_epi32(sumi[t][kk], p, s);
                    }
                }
            }
            /* d0 m0 d1 m1 d2 m2 d3 m3 as floats, then the d and the dmin of the phases */
            __m256 dm = _mm256_cvtph_ps(_mm_set_epi32((int)d_dmin[3], (int)d_dmin[2], (int)d_dmin[1], (int)d_dmin[0]));
            __m256 dm2 = _mm256_permutevar8x32_ps(dm, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
            const __m128 d = _mm256_castps256_ps128(dm2), dmin = _mm256_extractf128_ps(dm2, 1);
            for (int t = 0; t < T; t++) {
                const __m128 dat = q8k_scales(a, as, t, k0, g);
                facc[r][t] = phases_fma(g, _mm_mul_ps(d, dat), _mm_cvtepi32_ps(lane_sums(g, sumi[t])), facc[r][t], false);
                facc[r][t] = phases_fma(g, _mm_mul_ps(dmin, dat), _mm_cvtepi32_ps(lane_sums128(g, msum[t])), facc[r][t], true);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            y[t * ys + r] = phases_total(facc[r][t]);
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
 * superblock (as in the AVX2 tile). What every AVX-512 tile of Q6_K computes: per superblock k
 * the exact isum_k = sum_j scale_j * (dot(levels + 32 of sub-block j, activations) - 32 * bsum_j),
 * then acc_p = fma(d_k * da_k, (float)isum_k, acc_p) with p = k % K_PHASES, and the output
 * (acc_0 + acc_1) + (acc_2 + acc_3), as k4_tile. */
ALWAYS_INLINE void q6k_tile(int n, int R, int T, const void *w, size_t ws, const void *a,
                            size_t as, float *y, size_t ys)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
    /* qh bit pairs of groups 0|1 move up to bits 4-5 by 4|2, those of groups 2|3 down by 0|2 */
    const __m512i up = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    const __m512i down = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    const int nk = n / QK_K;
    __m128 facc[4][4];
    TILE_ZERO(facc, R, T, _mm_setzero_ps());
    for (int k0 = 0; k0 < nk; k0 += K_PHASES) {
        const int g = nk - k0 < K_PHASES ? nk - k0 : K_PHASES;
        for (int r = 0; r < R; r++) {
            __m512i sumi[4][K_PHASES]; /* [token][superblock] */
            uint16_t dr[K_PHASES] = {0};
            TILE_ZERO(sumi, T, K_PHASES, _mm512_setzero_si512());
            PHASE_LOOP(kk, g) {
                const block_q6_k *b = (const block_q6_k *)weight_at(w, ws, r, (size_t)(k0 + kk) * sizeof(block_q6_k),
                                                                    sizeof(block_q6_k), T);
                __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
                __m512i scales = _mm512_zextsi256_si512(sc16);
                dr[kk] = b->d;
                for (int t = 0; t < T; t++) {
                    __m256i off = _mm256_slli_epi32(
                        _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)q8k_at(a, as, t, k0 + kk)->bsums)), 5);
                    sumi[t][kk] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(off));
                }
                for (int h = 0; h < 2; h++) {
                    __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
                    __m512i qh2 = _mm512_broadcast_i64x4(load_once(b->qh + 32 * h));
                    __m512i g01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh2, up), m2));
                    __m512i g23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                                  _mm512_and_si512(_mm512_srlv_epi16(qh2, down), m2));
                    __m512i s01 = four_scales(scales, 8 * h), s23 = four_scales(scales, 8 * h + 4);
                    for (int t = 0; t < T; t++) {
                        const int8_t *act = q8k_at(a, as, t, k0 + kk)->qs + 128 * h;
                        sumi[t][kk] = _mm512_dpwssd_epi32(sumi[t][kk], _mm512_maddubs_epi16(g01, _mm512_loadu_si512(act)), s01);
                        sumi[t][kk] = _mm512_dpwssd_epi32(sumi[t][kk], _mm512_maddubs_epi16(g23, _mm512_loadu_si512(act + 64)), s23);
                    }
                }
            }
            const __m128 d = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, (short)dr[3], (short)dr[2], (short)dr[1], (short)dr[0]));
            for (int t = 0; t < T; t++)
                facc[r][t] = phases_fma(g, _mm_mul_ps(d, q8k_scales(a, as, t, k0, g)), _mm_cvtepi32_ps(lane_sums(g, sumi[t])),
                                        facc[r][t], false);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            y[t * ys + r] = phases_total(facc[r][t]);
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
const mm_kernel mm_q4_k_avx512 = {tile_q4k, 4, 4, 1, &mm_q4_k_packed_avx512};
const mm_kernel mm_q5_k_avx512 = {tile_q5k, 4, 4, 4, &mm_q5_k_packed_avx512};
const mm_kernel mm_q6_k_avx512 = {tile_q6k, 4, 4, 1, &mm_q6_k_packed_avx512};
const mm_kernel mm_q8_0_avx512 = {tile_q8_0, 4, 3, 1, NULL};
const mm_kernel mm_q4_0_avx512 = {tile_q4_0, 4, 3, 1, NULL};
const mm_kernel mm_iq4_nl_avx512 = {tile_iq4_nl, 4, 3, 1, NULL};
const mm_kernel mm_mxfp4_avx512 = {tile_mxfp4, 4, 3, 1, NULL};
