/* matmul_avx2.c — AVX2 tile kernels for kern_matmul (see mm_kernel in types.h for the contract).
 *
 * A tile keeps one accumulator per (row, token) in registers, so each weight vector loaded (and,
 * for the quantized types, unpacked) is used for every token of the tile, and each activation
 * vector for every row. Each kernel is written once for a compile-time tile shape and
 * instantiated for every shape up to the largest; an output's arithmetic is the same in every
 * instantiation, which is what makes results independent of tiling and thread count. */
#include <math.h>

#include "kernels/matmul_x86.h"

/* ---- float weights (F32, F16, BF16) with F32 activations ---- */

ALWAYS_INLINE __m256 load8_f32(const void *p, size_t i)
{
    return _mm256_loadu_ps((const float *)p + i);
}

ALWAYS_INLINE __m256 load8_f16(const void *p, size_t i)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}

ALWAYS_INLINE __m256 load8_bf16(const void *p, size_t i)
{
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

ALWAYS_INLINE float scalar_f32(const void *p, size_t i)
{
    return ((const float *)p)[i];
}

ALWAYS_INLINE float scalar_f16(const void *p, size_t i)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(((const uint16_t *)p)[i])));
}

ALWAYS_INLINE float scalar_bf16(const void *p, size_t i)
{
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

typedef __m256 (*load8_fn)(const void *p, size_t i);
typedef float (*scalar_fn)(const void *p, size_t i);

/* Lanes accumulate 8-strided partial sums, reduced by hsum_ps256; the last n % 8 elements are added
 * in order afterwards. */
ALWAYS_INLINE void float_tile(load8_fn load8, scalar_fn scalar, int n, int R, int T,
                              const void *w, size_t ws, const void *a, size_t as, float *y,
                              size_t ys)
{
    const uint8_t *wb = w;
    const float *ab = a;
    size_t af = as / sizeof(float);
    __m256 acc[4][3];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
    int n8 = n & ~7;
    for (int i = 0; i < n8; i += 8) {
        __m256 av[3];
        for (int t = 0; t < T; t++)
            av[t] = _mm256_loadu_ps(ab + t * af + i);
        for (int r = 0; r < R; r++) {
            __m256 wv = load8(wb + r * ws, (size_t)i);
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm256_fmadd_ps(wv, av[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float s = hsum_ps256(acc[r][t]);
            for (int i = n8; i < n; i++)
                s += scalar(wb + r * ws, (size_t)i) * ab[t * af + i];
            y[t * ys + r] = s;
        }
}

#define F32_TILE(...) float_tile(load8_f32, scalar_f32, __VA_ARGS__)
#define F16_TILE(...) float_tile(load8_f16, scalar_f16, __VA_ARGS__)
#define BF16_TILE(...) float_tile(load8_bf16, scalar_bf16, __VA_ARGS__)
DEFINE_TILE_4x3(tile_f32, F32_TILE)
DEFINE_TILE_4x3(tile_f16, F16_TILE)
DEFINE_TILE_4x3(tile_bf16, BF16_TILE)

/* ---- K-quants with Q8_K activations ----
 * What every AVX2 tile of these types computes, ordinary or packed (matmul_packed_avx2.c): per
 * superblock k of a row and a token, exact integers
 *     Q4_K / Q5_K: isum_k = sum_j scale_j * dot(levels of sub-block j, activations),
 *                  msum_k = sum_j min_j * (sum of the activations of sub-block j);
 *     Q6_K:        isum_k = sum_j scale_j * (dot(levels + 32 of sub-block j, activations) - 32 * bsum_j),
 * then, k in order, into accumulators p = k % K_PHASES,
 *     acc_p = fma(d_k * da_k, (float)isum_k, acc_p)  (Q4_K / Q5_K, apart:
 *     macc_p = fma(dmin_k * da_k, (float)msum_k, macc_p)),
 * and the output (acc_0 + acc_1) + (acc_2 + acc_3), Q4_K / Q5_K with acc_p - macc_p for acc_p.
 * Here a row's integers of a superblock are spread over 8 lanes; the sums across lanes of
 * K_PHASES superblocks are taken together (hadds, each pairing two vectors), and their float
 * steps run as one vector of phases (Q4_K / Q5_K: acc and macc in one, one FMA for both). */

/* The scales of token t's superblocks k0 .. k0 + n - 1 (n <= K_PHASES) in lanes (0 beyond n:
 * with zero sums there, a phase's float steps then add +0, which leaves it as it was). */
ALWAYS_INLINE __m128 q8k_scales(const void *a, size_t as, int t, int k0, int n)
{
    const block_q8_k *ab = (const block_q8_k *)((const uint8_t *)a + t * as) + k0;
    float d[K_PHASES] = {0};
    for (int kk = 0; kk < n; kk++)
        d[kk] = ab[kk].d;
    return _mm_setr_ps(d[0], d[1], d[2], d[3]);
}

/* The eight 6-bit scales (bytes 0-7) and eight minimums (bytes 8-15) of a Q4_K / Q5_K superblock
 * in both 128-bit lanes. Unpacked with scalar integer operations: in decode this measured faster
 * than unpacking two superblocks at a time in vector registers, which are the busy units here
 * (the SLP vectorizer is off in these files, matmul_x86.h). */
ALWAYS_INLINE __m256i k4_scale_bytes(const uint8_t *b)
{
    uint64_t sc, mins;
    k4_unpack_scales_u64(b + offsetof(block_q4_k, scales), &sc, &mins);
    return _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)mins, (long long)sc));
}

/* Byte j of every 128-bit lane zero-extended into every int16 lane: of k4_scale_bytes, scale j
 * (0-7) in every lane. */
ALWAYS_INLINE __m256i k4_scale(__m256i sc, int j)
{
    return _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0xff00 | j)));
}

/* The minimums of k4_scale_bytes as int16, lanes 2j and 2j + 1 min j: each meets the Q8_K bsums
 * of the two 16-element halves of sub-block j. */
ALWAYS_INLINE __m256i k4_mins(__m256i sc)
{
    return _mm256_shuffle_epi8(sc, _mm256_setr_epi8(8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1,
                                                    12, -1, 12, -1, 13, -1, 13, -1, 14, -1, 14, -1, 15, -1, 15, -1));
}

/* Superblock b of a Q4_K row, or Q5_K when five_bits (the two share d, dmin and the packed
 * scales at the start of the block; Q5_K adds the fifth bits, qh, before its 4-bit quants),
 * against T tokens' superblocks ab: each token's isum and msum spread over 8 int32 lanes. */
ALWAYS_INLINE void k4_block_sums(bool five_bits, int T, const uint8_t *b, const block_q8_k *ab[],
                                 __m256i isum[], __m256i msum[])
{
    const __m256i sc = k4_scale_bytes(b);
    const __m256i qh = five_bits ? load_once(b + offsetof(block_q5_k, qh)) : _mm256_setzero_si256();
    for (int t = 0; t < T; t++)
        isum[t] = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        k4_levels(five_bits, b, qh, c, &lo, &hi);
        __m256i s_lo = k4_scale(sc, 2 * c), s_hi = k4_scale(sc, 2 * c + 1);
        for (int t = 0; t < T; t++) {
            __m256i a_lo = _mm256_loadu_si256((const __m256i *)(ab[t]->qs + 64 * c));
            __m256i a_hi = _mm256_loadu_si256((const __m256i *)(ab[t]->qs + 64 * c + 32));
            __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a_lo), s_lo);
            __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a_hi), s_hi);
            isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p_lo, p_hi));
        }
    }
    const __m256i mins = k4_mins(sc);
    for (int t = 0; t < T; t++)
        msum[t] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ab[t]->bsums), mins);
}

/* Row r's float steps for T tokens over superblocks k0 .. k0 + g - 1 (g <= K_PHASES; the tiles
 * pass a constant K_PHASES but at the end of a row, so that the arrays indexed by superblock
 * stay in registers), da[t]: token t's scales of those superblocks in both halves. */
ALWAYS_INLINE void k4_phases(bool five_bits, int g, int T, const void *w, size_t ws, int r, int k0,
                             const void *a, size_t as, const __m256 da[], __m256 facc[])
{
    const size_t block_bytes = five_bits ? sizeof(block_q5_k) : sizeof(block_q4_k);
    __m256i pair[2][2];              /* [token][pair of superblocks] */
    uint32_t d_dmin[K_PHASES] = {0}; /* the superblocks' fp16 pairs d, dmin */
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
        __m256i both[2][2]; /* [superblock of the pair][token]: hadd(isum, msum) */
        _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {
            const int kk = 2 * h + e;
            if (kk >= g) {
                for (int t = 0; t < T; t++)
                    both[e][t] = _mm256_setzero_si256();
                continue;
            }
            const uint8_t *b = weight_at(w, ws, r, (size_t)(k0 + kk) * block_bytes, block_bytes, T);
            const block_q8_k *ab[2];
            __m256i isum[2], msum[2];
            q8k_blocks(a, as, T, k0 + kk, ab);
            memcpy(&d_dmin[kk], b, sizeof d_dmin[kk]);
            k4_block_sums(five_bits, T, b, ab, isum, msum);
            for (int t = 0; t < T; t++)
                both[e][t] = _mm256_add_epi32(_mm256_blend_epi32(isum[t], msum[t], 0xf0),
                                              _mm256_permute2x128_si256(isum[t], msum[t], 0x21));
        }
        for (int t = 0; t < T; t++)
            pair[t][h] = _mm256_hadd_epi32(both[0][t], both[1][t]);
    }
    /* d0 m0 d1 m1 d2 m2 d3 m3 as floats, then the d of the phases and their dmin */
    __m128i halves = _mm_set_epi64x((long long)(d_dmin[2] | (uint64_t)d_dmin[3] << 32),
                                    (long long)(d_dmin[0] | (uint64_t)d_dmin[1] << 32));
    __m256 dm = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(halves), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    for (int t = 0; t < T; t++) {
        /* superblock kk's isum in lane kk, its msum in lane 4 + kk */
        __m256i s = _mm256_hadd_epi32(pair[t][0], pair[t][1]);
        facc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dm, da[t]), _mm256_cvtepi32_ps(s), facc[t]);
    }
}

ALWAYS_INLINE void k4_tile(bool five_bits, int n, int R, int T, const void *w, size_t ws,
                           const void *a, size_t as, float *y, size_t ys)
{
    const int nk = n / QK_K;
    __m256 facc[4][2]; /* [row][token], lanes: the phases' acc, then their macc */
    TILE_ZERO(facc, R, T, _mm256_setzero_ps());
    for (int k0 = 0; k0 < nk; k0 += K_PHASES) {
        const int g = nk - k0 < K_PHASES ? nk - k0 : K_PHASES;
        __m256 da[2]; /* the tokens' scales of the phases, in both halves */
        for (int t = 0; t < T; t++) {
            __m128 d = q8k_scales(a, as, t, k0, g);
            da[t] = _mm256_set_m128(d, d);
        }
        for (int r = 0; r < R; r++)
            k4_phases(five_bits, g, T, w, ws, r, k0, a, as, da, facc[r]);
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            y[t * ys + r] = phases_total(_mm_sub_ps(_mm256_castps256_ps128(facc[r][t]), _mm256_extractf128_ps(facc[r][t], 1)));
}

#define Q4K_TILE(...) k4_tile(false, __VA_ARGS__)
#define Q5K_TILE(...) k4_tile(true, __VA_ARGS__)
DEFINE_TILE_4x2(tile_q4k, Q4K_TILE)
DEFINE_TILE_4x2(tile_q5k, Q5K_TILE)

/* Q6_K: 16 signed 8-bit scales, one per 16 weights; 6-bit quants stored with +32. The quants
 * enter maddubs unsigned (0..63) and the +32 is taken off once per superblock through the Q8_K
 * bsums: sum (q - 32) a s = sum q a s - 32 sum_j s_j bsum_j. */
ALWAYS_INLINE void q6k_scales(const int8_t *scales, __m256i half_sc[2], __m256i *all)
{
    /* half_sc[h]: the eight scales of half h as int16, the even ones (duplicated) in the low
     * 128-bit half and the odd ones in the high half, so that Q6_SCALE(half_sc, h, g)
     * gives scale 8h+2g in lanes 0-7 and 8h+2g+1 in lanes 8-15 — the two 16-weight halves of a
     * 32-weight group. Each byte goes to the high byte of its lane and is shifted down, which
     * sign-extends it. */
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)scales));
    half_sc[0] = _mm256_srai_epi16(_mm256_shuffle_epi8(v, _mm256_setr_epi8(
        -1, 0, -1, 0, -1, 2, -1, 2, -1, 4, -1, 4, -1, 6, -1, 6,
        -1, 1, -1, 1, -1, 3, -1, 3, -1, 5, -1, 5, -1, 7, -1, 7)), 8);
    half_sc[1] = _mm256_srai_epi16(_mm256_shuffle_epi8(v, _mm256_setr_epi8(
        -1, 8, -1, 8, -1, 10, -1, 10, -1, 12, -1, 12, -1, 14, -1, 14,
        -1, 9, -1, 9, -1, 11, -1, 11, -1, 13, -1, 13, -1, 15, -1, 15)), 8);
    *all = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)scales));
}

/* Broadcast element i (0..3) of each 128-bit lane. The shuffle needs an immediate: a switch keeps
 * it one instruction where loops are unrolled (i is constant) and still compiles where they are
 * not (-O1, sanitizer builds). */
static inline __m256i lane_broadcast(__m256i v, int i)
{
    switch (i & 3) {
    case 0: return _mm256_shuffle_epi32(v, 0x00);
    case 1: return _mm256_shuffle_epi32(v, 0x55);
    case 2: return _mm256_shuffle_epi32(v, 0xaa);
    default: return _mm256_shuffle_epi32(v, 0xff);
    }
}
#define Q6_SCALE(half_sc, h, g) lane_broadcast((half_sc)[h], (g))

/* Superblock b of a Q6_K row against T tokens' superblocks ab: each token's isum over 8 lanes. */
ALWAYS_INLINE void q6k_block_sums(int T, const block_q6_k *b, const block_q8_k *ab[], __m256i isum[])
{
    __m256i hs[2], all;
    q6k_scales(b->scales, hs, &all);
    for (int t = 0; t < T; t++) {
        __m256i bsums = _mm256_loadu_si256((const __m256i *)ab[t]->bsums);
        isum[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bsums, all), 5));
    }
    for (int h = 0; h < 2; h++) {
        __m256i q[4];
        q6k_levels(b, h, q);
        for (int g = 0; g < 4; g++) {
            __m256i sg = Q6_SCALE(hs, h, g);
            for (int t = 0; t < T; t++) {
                __m256i av = _mm256_loadu_si256((const __m256i *)(ab[t]->qs + 128 * h + 32 * g));
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], av), sg));
            }
        }
    }
}

ALWAYS_INLINE void q6k_tile(int n, int R, int T, const void *w, size_t ws, const void *a,
                            size_t as, float *y, size_t ys)
{
    const int nk = n / QK_K;
    __m128 facc[4][2]; /* [row][token], lanes: the phases */
    TILE_ZERO(facc, R, T, _mm_setzero_ps());
    for (int k0 = 0; k0 < nk; k0 += K_PHASES) {
        const int g = nk - k0 < K_PHASES ? nk - k0 : K_PHASES;
        __m128 da[2];
        for (int t = 0; t < T; t++)
            da[t] = q8k_scales(a, as, t, k0, g);
        for (int r = 0; r < R; r++) {
            __m256i ipair[2][2]; /* [token][pair of superblocks] */
            uint64_t dr = 0; /* the superblocks' fp16 d, superblock kk's at bits 16 kk */
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                __m256i isum[2][2]; /* [superblock of the pair][token] */
                _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {
                    const int kk = 2 * h + e;
                    if (kk >= g) {
                        for (int t = 0; t < T; t++)
                            isum[e][t] = _mm256_setzero_si256();
                        continue;
                    }
                    const block_q6_k *b = (const block_q6_k *)weight_at(w, ws, r, (size_t)(k0 + kk) * sizeof(block_q6_k),
                                                                        sizeof(block_q6_k), T);
                    const block_q8_k *ab[2];
                    q8k_blocks(a, as, T, k0 + kk, ab);
                    dr |= (uint64_t)b->d << 16 * kk;
                    q6k_block_sums(T, b, ab, isum[e]);
                }
                for (int t = 0; t < T; t++)
                    ipair[t][h] = _mm256_hadd_epi32(isum[0][t], isum[1][t]);
            }
            const __m128 d = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)dr));
            for (int t = 0; t < T; t++) {
                __m256i x = _mm256_hadd_epi32(ipair[t][0], ipair[t][1]);
                __m128 sums = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1)));
                facc[r][t] = _mm_fmadd_ps(_mm_mul_ps(d, da[t]), sums, facc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            y[t * ys + r] = phases_total(facc[r][t]);
}

#define Q6K_TILE(...) q6k_tile(__VA_ARGS__)
DEFINE_TILE_4x2(tile_q6k, Q6K_TILE)

/* ---- 32-blocks with Q8_0 activations ----
 * What every AVX2 tile of these types computes, ordinary or packed (matmul_packed_avx2.c), as on
 * AVX-512: per block i of a row and a token the exact integer dot_i = sum w * a, then, i in
 * order, acc_p = fma(dw_i * da_i, (float)dot_i, acc_p) with p = i % K_PHASES, and the output
 * (acc_0 + acc_1) + (acc_2 + acc_3). Here a block's dot is spread over 8 lanes (dot_i8x32); the
 * sums across lanes of K_PHASES blocks are taken together and their float steps run as one
 * vector of phases (a phase without a block gets dw = 0 and dot = 0, which adds +0 and leaves
 * it as it was). */

/* Blocks i0 .. i0 + g - 1 (g <= K_PHASES) of row r against T tokens, into the row's phases. The
 * blocks go by pairs whose lane sums are half taken at once, so that fewer vectors stay live. */
ALWAYS_INLINE void q32_row_phases(weights32_fn weights, scale32_fn scale, size_t block_bytes, int g,
                                  int i0, int r, int T, const void *w, size_t ws, const void *a,
                                  size_t as, const __m128 da[], __m128 facc[])
{
    __m256i pair[3][2]; /* [token][pair of blocks] */
    float dw[K_PHASES] = {0};
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
        __m256i p[2][3]; /* [block of the pair][token] */
        _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {
            const int kk = 2 * h + e;
            for (int t = 0; t < T; t++)
                p[e][t] = _mm256_setzero_si256();
            if (kk >= g)
                continue;
            const uint8_t *block = weight_at(w, ws, r, (size_t)(i0 + kk) * block_bytes, block_bytes, T);
            dw[kk] = scale(block);
            const __m256i wv = weights(block);
            for (int t = 0; t < T; t++)
                p[e][t] = dot_i8x32(wv, q8_0_weights(q8_0_at(a, as, t, i0 + kk)));
        }
        for (int t = 0; t < T; t++)
            pair[t][h] = _mm256_hadd_epi32(p[0][t], p[1][t]);
    }
    const __m128 d = _mm_setr_ps(dw[0], dw[1], dw[2], dw[3]);
    for (int t = 0; t < T; t++) {
        __m256i x = _mm256_hadd_epi32(pair[t][0], pair[t][1]);
        __m128 sums = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1)));
        facc[t] = _mm_fmadd_ps(_mm_mul_ps(d, da[t]), sums, facc[t]);
    }
}

/* The same for R rows (Q32_TILE_BODY, matmul_x86.h). */
ALWAYS_INLINE void q32_phases(weights32_fn weights, scale32_fn scale, size_t block_bytes, int g,
                              int i0, int R, int T, const void *w, size_t ws, const void *a,
                              size_t as, __m128 facc[4][MM_STREAM_TOKENS])
{
    __m128 da[MM_STREAM_TOKENS];
    for (int t = 0; t < T; t++) {
#define DA(i) block_d(q8_0_at(a, as, t, i0 + (i)))
        da[t] = GATHER4(g, DA);
#undef DA
    }
    for (int r = 0; r < R; r++)
        q32_row_phases(weights, scale, block_bytes, g, i0, r, T, w, ws, a, as, da, facc[r]);
}

DEFINE_Q32_TILES()

/* ---- activation quantizers ----
 * Bit for bit the reference quantizers of quant_k.c / quant_scalar.c (tests check it): the same
 * amax, the same float multiply by 127/amax, and cvtps2dq rounds to nearest even exactly as
 * q_round does (a block holding a NaN gets the same NaN scale; its quants then carry nothing).
 * They run once per matmul call but over every activation, so at decode they are
 * a visible share of a small matvec. */

/* max |x| over n floats (n a multiple of 32), NaN if one is NaN (as q_abs_max). */
ALWAYS_INLINE float abs_max(const float *x, int n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i));
        m = _mm256_max_ps(v, m);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(nan))
        return NAN;
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* 32 floats times id, rounded to nearest even, clamped to [-127, 127], as 32 int8. */
ALWAYS_INLINE __m256i quantize32(const float *x, __m256 id)
{
    __m256i q[4];
    for (int k = 0; k < 4; k++) {
        __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id));
        q[k] = _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
    }
    /* The packs interleave 128-bit lanes; the permute restores element order. */
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void q8_k_quantize_avx2(const float *src, void *dst, int64_t n)
{
    block_q8_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax = abs_max(src, QK_K);
        __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        b[i].d = amax / 127.0f;
        for (int j = 0; j < QK_K; j += 32) {
            __m256i q = quantize32(src + j, id);
            _mm256_storeu_si256((__m256i *)(b[i].qs + j), q);
            /* sums of each 16 quants: widen to int16 pairs, then add pairs up to 16 */
            __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            __m128i h = _mm_hadd_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
            h = _mm_hadd_epi32(h, h);
            b[i].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(h);
            b[i].bsums[j / 16 + 1] = (int16_t)_mm_extract_epi32(h, 1);
        }
    }
}

void q8_0_quantize_avx2(const float *src, void *dst, int64_t n)
{
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK) {
        float amax = abs_max(src, QK);
        b[i].d = _cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT);
        __m256i q = quantize32(src, _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f));
        _mm256_storeu_si256((__m256i *)b[i].qs, q);
    }
}

/* Decode rows: the float kernels do one FMA per 8 weights into a row's accumulator, so one row
 * alone would wait on FMA latency. */
const mm_kernel mm_f32_avx2 = {tile_f32, 4, 3, 4, NULL, NULL};
const mm_kernel mm_f16_avx2 = {tile_f16, 4, 3, 4, NULL, NULL};
const mm_kernel mm_bf16_avx2 = {tile_bf16, 4, 3, 4, NULL, NULL};
/* Every quantized type packs for prefill (matmul_packed_avx2.c). Decode rows: the 32-blocks run
 * their float steps once per K_PHASES blocks, so one Q8_0 row alone no longer waits on FMA
 * latency; the types that unpack nibbles are bound by that unpacking on one thread and gain from
 * two rows' independent work. One thread, 4096 x 14336 from DRAM, best of 40, three runs (ms,
 * one row against two): Q8_0 2.1-3.1 against 3.7-4.1; Q4_0 2.9-3.6 against 2.7-3.5, IQ4_NL
 * 2.9-3.5 against 2.7-3.4, MXFP4 2.7-4.2 against 2.6-3.9. */
const mm_kernel mm_q4_k_avx2 = {tile_q4k, 4, 2, 1, &mm_q4_k_packed_avx2, &mm_q4_k_kept_avx2};
const mm_kernel mm_q5_k_avx2 = {tile_q5k, 4, 2, 1, &mm_q5_k_packed_avx2, NULL};
const mm_kernel mm_q6_k_avx2 = {tile_q6k, 4, 2, 1, &mm_q6_k_packed_avx2, NULL};
const mm_kernel mm_q8_0_avx2 = {tile_q8_0, 4, 3, 1, &mm_q8_0_packed_avx2, &mm_q8_0_kept_avx2};
const mm_kernel mm_q4_0_avx2 = {tile_q4_0, 4, 3, 2, &mm_q4_0_packed_avx2, NULL};
const mm_kernel mm_iq4_nl_avx2 = {tile_iq4_nl, 4, 3, 2, &mm_iq4_nl_packed_avx2, NULL};
const mm_kernel mm_mxfp4_avx2 = {tile_mxfp4, 4, 3, 2, &mm_mxfp4_packed_avx2, NULL};
