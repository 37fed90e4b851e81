/* matmul_avx512.c — AVX-512 (F, BW, VL, DQ, VNNI) tile kernels for kern_matmul, for the types
 * whose speed decides decode and prefill; the float types keep their AVX2 tiles (types.c). The
 * contract is mm_kernel's (types.h): each output's arithmetic is the same in every tile shape,
 * and the same as in this path's packed prefill tiles (matmul_packed_avx512.c).
 *
 * What every tile here computes, per output (a weight row against a token's activations): per
 * block k (a K-quant superblock, or a 32-block) one or two exact integers, then float steps into
 * K_PHASES accumulators in turn, acc_p with p = k % K_PHASES, and the output
 * (acc_0 + acc_1) + (acc_2 + acc_3):
 *   Q4_K, Q5_K  isum = sum_j scale_j * dot(levels of sub-block j, a),
 *               msum = sum_j min_j * (sum of a over sub-block j),
 *               acc_p = fma(d * da, (float)isum, acc_p); acc_p = fma(-(dmin * da), (float)msum, acc_p)
 *   Q6_K        isum = sum_j scale_j * (dot(levels + 32, a) - 32 * sum a), acc_p = fma(d * da, (float)isum, acc_p)
 *   32-blocks   dot = sum w * a, acc_p = fma(dw * da, (float)dot, acc_p)
 * A vector here holds the levels of one row, so each block's integer ends with a sum across
 * lanes: the tiles take those of K_PHASES blocks together and run the float steps with the
 * phases in the lanes of one register per row and token. They serve decode and batches of up to
 * MM_STREAM_TOKENS tokens; from the packed tiles' min_tokens (3 or 4) on, kern_matmul packs.
 *  - K-quants: a 512-bit register holds 64 consecutive levels (two sub-blocks of 32, or four of
 *    16), so one maddubs and one VPDPWSSD (scale, widen and accumulate) per 64 levels and token
 *    do what takes two maddubs, two madd and two adds in 256 bits;
 *  - 32-blocks: VPDPBUSD multiplies unsigned by signed bytes and sums them in fours in one
 *    instruction: it takes |w| and a with w's sign. */
#include "kernels/matmul_avx512.h"

/* ---- what the tiles share ---- */

ALWAYS_INLINE __m128i lane_sums(int n, const __m512i s[4])
{
    __m256i h[4];
    for (int i = 0; i < 4; i++)
        h[i] = i < n ? _mm256_add_epi32(_mm512_castsi512_si256(s[i]), _mm512_extracti64x4_epi64(s[i], 1))
                     : _mm256_setzero_si256();
    return lane_sums256(4, h);
}

ALWAYS_INLINE __m128i lane_sums128(int n, const __m128i s[4])
{
    __m128i h[4];
    for (int i = 0; i < 4; i++)
        h[i] = i < n ? s[i] : _mm_setzero_si128();
    return _mm_hadd_epi32(_mm_hadd_epi32(h[0], h[1]), _mm_hadd_epi32(h[2], h[3]));
}

/* kk = 0 .. n - 1 (n <= K_PHASES), unrolled: the arrays indexed by kk stay in registers. */
#define PHASE_LOOP(kk, n) _Pragma("GCC unroll 4") for (int kk = 0; kk < K_PHASES && kk < (n); kk++)

/* acc + a * b (or acc - a * b) in the first n lanes; the others unchanged (not even a -0 made
 * +0, as a packed tile leaves a phase without a block alone). */
ALWAYS_INLINE __m128 lanes_fma(int n, __m128 a, __m128 b, __m128 acc, bool negate)
{
    __m128 v = negate ? _mm_fnmadd_ps(a, b, acc) : _mm_fmadd_ps(a, b, acc);
    return n == 4 ? v : _mm_mask_mov_ps(acc, (__mmask8)((1u << n) - 1), v);
}

/* ---- K-quants with Q8_K activations ---- */

/* With eight int16 scales in every 128-bit lane: scale j in the lower 256 bits, scale j+1 in the
 * upper 256 bits (the two 32-level sub-blocks of one 64-level register). */
ALWAYS_INLINE __m512i scale_halves(__m256i sc, int j)
{
    __m512i s = _mm512_broadcast_i64x4(sc);
    return _mm512_shuffle_epi8(s, join256(scale_selector(j), scale_selector(j + 1)));
}

ALWAYS_INLINE const block_q8_k *q8k_at(const void *a, size_t as, int t, int k)
{
    return (const block_q8_k *)((const uint8_t *)a + t * as) + k;
}

/* 128-bit lane i of v. */
ALWAYS_INLINE __m128i lane128(__m512i v, int i)
{
    const __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(4 * i)), v));
}

/* One superblock b of a row (Q4_K, or Q5_K when five_bits: bit j of qh[l] is the fifth bit of
 * level l of sub-block j; sm its unpacked scales, k4_scales4) against T tokens' superblock k:
 * each token's vector whose lanes sum to isum, and one whose lanes sum to msum. */
ALWAYS_INLINE void k4_block(bool five_bits, const uint8_t *b, __m128i sm, int T, const void *a,
                            size_t as, int k, __m512i sumi[], __m128i msum[])
{
    const size_t qs_at = five_bits ? offsetof(block_q5_k, qs) : offsetof(block_q4_k, qs);
    const __m512i low4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
    __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    __m512i qh2 = _mm512_setzero_si512();
    if (five_bits)
        qh2 = _mm512_broadcast_i64x4(load_once(b + offsetof(block_q5_k, qh)));
    for (int t = 0; t < T; t++) {
        /* the activation sums of the eight sub-blocks, as int16 */
        const int16_t *bs = q8k_at(a, as, t, k)->bsums;
        __m128i pb = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bs), _mm_loadu_si128((const __m128i *)(bs + 8)));
        sumi[t] = _mm512_setzero_si512();
        msum[t] = _mm_madd_epi16(mins, pb);
    }
    for (int c = 0; c < 4; c++) {
        __m256i q = load_once(b + qs_at + 32 * c);
        __m512i lv = _mm512_and_si512(join256(q, _mm256_srli_epi16(q, 4)), low4);
        if (five_bits) {
            __m512i bit = join256(_mm256_set1_epi8((char)(1 << (2 * c))), _mm256_set1_epi8((char)(1 << (2 * c + 1))));
            lv = _mm512_mask_add_epi8(lv, _mm512_test_epi8_mask(qh2, bit), lv, sixteen);
        }
        __m512i s = scale_halves(sc, 2 * c);
        for (int t = 0; t < T; t++) {
            __m512i p = _mm512_maddubs_epi16(lv, _mm512_loadu_si512(q8k_at(a, as, t, k)->qs + 64 * c));
            sumi[t] = _mm512_dpwssd_epi32(sumi[t], p, s);
        }
    }
}

/* Decode: superblocks k0 .. k0 + g - 1 of R rows against one token, into the rows' phases. */
ALWAYS_INLINE void k4_phases(bool five_bits, int g, int k0, int R, int T, const void *w, size_t ws,
                             const void *a, size_t as, __m128 facc[4][MM_STREAM_TOKENS])
{
    const size_t block_bytes = five_bits ? sizeof(block_q5_k) : sizeof(block_q4_k);
    __m128 da[MM_STREAM_TOKENS];
    for (int t = 0; t < T; t++) {
#define DA(i) q8k_at(a, as, t, k0 + (i))->d
        da[t] = GATHER4(g, DA);
#undef DA
    }
    for (int r = 0; r < R; r++) {
        const uint8_t *row = (const uint8_t *)w + r * ws;
        const __m512i scales = k4_scales4(row + (size_t)k0 * block_bytes, block_bytes, g);
        __m512i sumi[MM_STREAM_TOKENS][K_PHASES];
        __m128i msum[MM_STREAM_TOKENS][K_PHASES];
        uint32_t d_dmin[K_PHASES] = {0}; /* the superblocks' fp16 pairs d, dmin */
        TILE_ZERO(sumi, T, K_PHASES, _mm512_setzero_si512());
        TILE_ZERO(msum, T, K_PHASES, _mm_setzero_si128());
        PHASE_LOOP(kk, g) {
            const uint8_t *b = weight_at(w, ws, r, (size_t)(k0 + kk) * block_bytes, block_bytes, T);
            memcpy(&d_dmin[kk], b, sizeof d_dmin[kk]);
            __m512i s[MM_STREAM_TOKENS];
            __m128i m[MM_STREAM_TOKENS];
            k4_block(five_bits, b, lane128(scales, kk), T, a, as, k0 + kk, s, m);
            for (int t = 0; t < T; t++)
                sumi[t][kk] = s[t], msum[t][kk] = m[t];
        }
        /* d0 m0 d1 m1 d2 m2 d3 m3 as floats, then the d and the dmin of the phases */
        __m256 dm = _mm256_cvtph_ps(_mm_set_epi32((int)d_dmin[3], (int)d_dmin[2], (int)d_dmin[1], (int)d_dmin[0]));
        dm = _mm256_permutevar8x32_ps(dm, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
        const __m128 d = _mm256_castps256_ps128(dm), dmin = _mm256_extractf128_ps(dm, 1);
        for (int t = 0; t < T; t++) {
            facc[r][t] = lanes_fma(g, _mm_mul_ps(d, da[t]), _mm_cvtepi32_ps(lane_sums(g, sumi[t])), facc[r][t], false);
            facc[r][t] = lanes_fma(g, _mm_mul_ps(dmin, da[t]), _mm_cvtepi32_ps(lane_sums128(g, msum[t])), facc[r][t], true);
        }
    }
}

ALWAYS_INLINE void k4_tile(bool five_bits, int n, int R, int T, const void *w, size_t ws,
                           const void *a, size_t as, float *y, size_t ys)
{
    const int nk = n / QK_K;
    __m128 facc[4][MM_STREAM_TOKENS]; /* per row and token, the phases in lanes */
    TILE_ZERO(facc, R, T, _mm_setzero_ps());
    int k0 = 0;
    for (; k0 + K_PHASES <= nk; k0 += K_PHASES) /* g a constant: the hot loop has no tests */
        k4_phases(five_bits, K_PHASES, k0, R, T, w, ws, a, as, facc);
    if (k0 < nk)
        k4_phases(five_bits, nk - k0, k0, R, T, w, ws, a, as, facc);
    store_phases(R, T, facc, y, ys);
}

#define Q4K_TILE(...) k4_tile(false, __VA_ARGS__)
#define Q5K_TILE(...) k4_tile(true, __VA_ARGS__)
DEFINE_TILE_4x3(tile_q4k, Q4K_TILE)
DEFINE_TILE_4x3(tile_q5k, Q5K_TILE)

/* Sixteen int16 lanes of scales base..base+3 (eight lanes each, one scale per 16 levels) from the
 * sixteen int16 scales of a Q6_K block in the low half of sc16. */
ALWAYS_INLINE __m512i four_scales(__m512i sc16, int base)
{
    const __m512i idx = _mm512_set_epi64(0x0003000300030003ll, 0x0003000300030003ll, 0x0002000200020002ll,
                                         0x0002000200020002ll, 0x0001000100010001ll, 0x0001000100010001ll, 0, 0);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)base)), sc16);
}

/* One Q6_K superblock b of a row against T tokens' superblock k: each token's vector whose lanes
 * sum to isum. Levels + 32 as unsigned bytes; 32 * sum_j scale_j * bsums_j starts the sum. */
ALWAYS_INLINE void q6k_block(const block_q6_k *b, int T, const void *a, size_t as, int k, __m512i sumi[])
{
    __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    __m512i scales = _mm512_zextsi256_si512(sc16);
    for (int t = 0; t < T; t++) {
        __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)q8k_at(a, as, t, k)->bsums)), 5);
        sumi[t] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(off));
    }
    for (int h = 0; h < 2; h++) {
        __m512i lv[2];
        q6k_levels_u8(b, h, lv);
        __m512i g01 = lv[0], g23 = lv[1];
        __m512i s01 = four_scales(scales, 8 * h), s23 = four_scales(scales, 8 * h + 4);
        for (int t = 0; t < T; t++) {
            const int8_t *act = q8k_at(a, as, t, k)->qs + 128 * h;
            sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(g01, _mm512_loadu_si512(act)), s01);
            sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(g23, _mm512_loadu_si512(act + 64)), s23);
        }
    }
}

/* Decode: superblocks k0 .. k0 + g - 1 of R rows against one token, into the rows' phases. */
ALWAYS_INLINE void q6k_phases(int g, int k0, int R, int T, const void *w, size_t ws, const void *a,
                              size_t as, __m128 facc[4][MM_STREAM_TOKENS])
{
    __m128 da[MM_STREAM_TOKENS];
    for (int t = 0; t < T; t++) {
#define DA(i) q8k_at(a, as, t, k0 + (i))->d
        da[t] = GATHER4(g, DA);
#undef DA
    }
    for (int r = 0; r < R; r++) {
        __m512i sumi[MM_STREAM_TOKENS][K_PHASES];
        uint16_t dr[K_PHASES] = {0};
        TILE_ZERO(sumi, T, K_PHASES, _mm512_setzero_si512());
        PHASE_LOOP(kk, g) {
            const block_q6_k *b = (const block_q6_k *)weight_at(w, ws, r, (size_t)(k0 + kk) * sizeof(block_q6_k),
                                                                sizeof(block_q6_k), T);
            dr[kk] = b->d;
            __m512i s[MM_STREAM_TOKENS];
            q6k_block(b, T, a, as, k0 + kk, s);
            for (int t = 0; t < T; t++)
                sumi[t][kk] = s[t];
        }
        const __m128 d = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, (short)dr[3], (short)dr[2], (short)dr[1], (short)dr[0]));
        for (int t = 0; t < T; t++)
            facc[r][t] = lanes_fma(g, _mm_mul_ps(d, da[t]), _mm_cvtepi32_ps(lane_sums(g, sumi[t])), facc[r][t], false);
    }
}

ALWAYS_INLINE void q6k_tile(int n, int R, int T, const void *w, size_t ws, const void *a,
                            size_t as, float *y, size_t ys)
{
    const int nk = n / QK_K;
    __m128 facc[4][MM_STREAM_TOKENS];
    TILE_ZERO(facc, R, T, _mm_setzero_ps());
    int k0 = 0;
    for (; k0 + K_PHASES <= nk; k0 += K_PHASES)
        q6k_phases(K_PHASES, k0, R, T, w, ws, a, as, facc);
    if (k0 < nk)
        q6k_phases(nk - k0, k0, R, T, w, ws, a, as, facc);
    store_phases(R, T, facc, y, ys);
}

#define Q6K_TILE(...) q6k_tile(__VA_ARGS__)
DEFINE_TILE_4x3(tile_q6k, Q6K_TILE)

/* ---- 32-blocks with Q8_0 activations ---- */

/* One block of a row (signed weights wv) against T tokens' block i: each token's vector whose
 * lanes sum to dot. */
ALWAYS_INLINE void q32_block(__m256i wv, int T, const void *a, size_t as, int i, __m256i p[])
{
    __m256i wabs = _mm256_abs_epi8(wv);
    for (int t = 0; t < T; t++)
        p[t] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs, _mm256_sign_epi8(q8_0_weights(q8_0_at(a, as, t, i)), wv));
}

/* Decode: blocks i0 .. i0 + g - 1 of R rows against one token, into the rows' phases. */
ALWAYS_INLINE void q32_phases(weights32_fn weights, scale32_fn scale, size_t block_bytes, int g,
                              int i0, int R, int T, const void *w, size_t ws, const void *a, size_t as,
                              __m128 facc[4][MM_STREAM_TOKENS])
{
    __m128 da[MM_STREAM_TOKENS];
    for (int t = 0; t < T; t++) {
#define DA(i) block_d(q8_0_at(a, as, t, i0 + (i)))
        da[t] = GATHER4(g, DA);
#undef DA
    }
    for (int r = 0; r < R; r++) {
        __m256i p[MM_STREAM_TOKENS][K_PHASES];
        float dw[K_PHASES] = {0};
        TILE_ZERO(p, T, K_PHASES, _mm256_setzero_si256());
        PHASE_LOOP(kk, g) {
            const uint8_t *block = (const uint8_t *)w + r * ws + (size_t)(i0 + kk) * block_bytes;
            if (kk % 2 == 0)
                prefetch_ahead(block, 2 * block_bytes);
            dw[kk] = scale(block);
            __m256i s[MM_STREAM_TOKENS];
            q32_block(weights(block), T, a, as, i0 + kk, s);
            for (int t = 0; t < T; t++)
                p[t][kk] = s[t];
        }
        const __m128 d = _mm_setr_ps(dw[0], dw[1], dw[2], dw[3]);
        for (int t = 0; t < T; t++)
            facc[r][t] = lanes_fma(g, _mm_mul_ps(d, da[t]), _mm_cvtepi32_ps(lane_sums256(g, p[t])), facc[r][t], false);
    }
}

DEFINE_Q32_TILES()

/* The ordinary tiles take up to MM_STREAM_TOKENS (3) tokens: from 4 on every type here packs.
 * Decode takes one row per tile for every type: two or four interleaved rows took 1.7-1.8x the
 * time of one for a 4096 x 14336 Q4_K product from DRAM on this Zen 4 (3.1-3.4 against
 * 1.9-2.0 ms, one thread); before the shared arithmetic, two rows of 32-blocks (the AVX2 choice,
 * measured on a Zen 3) took twice the CPU time per Q8_0 decode step here (121-128 against 60-62
 * ms, 4-layer 8B-shaped model). */
_Static_assert(MM_STREAM_TOKENS == 3, "the tiles are instantiated for up to 3 tokens (DEFINE_TILE_4x3)");
const mm_kernel mm_q4_k_avx512 = {tile_q4k, 4, 3, 1, &mm_q4_k_packed_avx512, &mm_q4_k_kept_avx512};
const mm_kernel mm_q5_k_avx512 = {tile_q5k, 4, 3, 1, &mm_q5_k_packed_avx512, NULL};
const mm_kernel mm_q6_k_avx512 = {tile_q6k, 4, 3, 1, &mm_q6_k_packed_avx512, &mm_q6_k_kept_avx512};
const mm_kernel mm_q8_0_avx512 = {tile_q8_0, 4, 3, 1, &mm_q8_0_packed_avx512, &mm_q8_0_kept_avx512};
const mm_kernel mm_q4_0_avx512 = {tile_q4_0, 4, 3, 1, &mm_q4_0_packed_avx512, NULL};
const mm_kernel mm_iq4_nl_avx512 = {tile_iq4_nl, 4, 3, 1, &mm_iq4_nl_packed_avx512, NULL};
const mm_kernel mm_mxfp4_avx512 = {tile_mxfp4, 4, 3, 1, &mm_mxfp4_packed_avx512, NULL};
