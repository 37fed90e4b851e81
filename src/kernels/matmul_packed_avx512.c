/* matmul_packed_avx512.c — prefill's packed tiles on AVX-512 (mm_packed, types.h): the K-quants
 * Q4_K, Q5_K, Q6_K and the 32-block types Q8_0, Q4_0, IQ4_NL, MXFP4.
 *
 * A panel holds 16 weight rows interleaved: one 512-bit vector is four consecutive levels of each
 * of the 16 rows, one byte per level, so VPDPBUSD with a token's four activations broadcast
 * (a memory operand) takes 64 products into the 16 rows' sums in one instruction, where the
 * ordinary tiles need a multiply-add of pairs and a second instruction to widen and scale them.
 * The sub-block scales then multiply 16 rows' sums at once (one VPMULLD per sub-block and token),
 * and the minimums / level offsets meet the activations' block sums in one VPDPWSSD per pair of
 * sub-blocks. Each lane is one row: the float steps are exactly those of the ordinary tiles
 * (matmul_avx512.c states them per type, with their K_PHASES accumulators), so a packed batch
 * computes what decode computes.
 * Eight tokens per tile: 8 sums, 8 superblock totals and 8 accumulators in registers, and each
 * loaded weight vector serves 8 instructions. */
#include "kernels/matmul_avx512.h"

#define PANEL_ROWS 16
#define PANEL_TOKENS 8
/* Batches from this many tokens on pack: one thread, a 4096 x 14336 matrix from DRAM, 4 tokens
 * packed took 4.99 ms (Q4_K) and 6.68 (Q8_0) against 5.3-5.9 and 7.6-8.9 in the ordinary tiles. */
#define PACK_TOKENS 4

/* One superblock of a Q4_K / Q5_K panel. */
typedef struct {
    uint8_t q[8][8][PANEL_ROWS][4]; /* [sub-block j][group g][row]: levels 32j + 4g .. 32j + 4g + 3 */
    int32_t scale[8][PANEL_ROWS];
    int32_t mins[4][PANEL_ROWS];    /* min 2p | min 2p+1 << 16: the int16 pairs VPDPWSSD takes */
    float d[PANEL_ROWS], dmin[PANEL_ROWS];
} k4_panel;

/* One superblock of a Q6_K panel. */
typedef struct {
    uint8_t q[16][4][PANEL_ROWS][4]; /* levels + 32, [sub-block j][group g][row] */
    int32_t scale[16][PANEL_ROWS];
    int32_t scale_pairs[8][PANEL_ROWS]; /* scale 2p | scale 2p+1 << 16 (int16) */
    float d[PANEL_ROWS];
} q6_panel;

_Static_assert(sizeof(k4_panel) % 64 == 0 && sizeof(q6_panel) % 64 == 0, "panels stay aligned");

/* out[k] = element k of in[0..15]: a 16 x 16 transpose of 32-bit elements (in 64 shuffles). */
ALWAYS_INLINE void transpose16(const __m512i in[16], __m512i out[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) { /* lane L: rows i, i+1 of columns 4L, 4L+1 | 4L+2, 4L+3 */
        t[i] = _mm512_unpacklo_epi32(in[i], in[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(in[i], in[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* u[4q + m], lane L: rows 4q .. 4q + 3 of column 4L + m */
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int m = 0; m < 4; m++) { /* column 4L + m: lane L of u[m], u[4 + m], u[8 + m], u[12 + m] */
        __m512i a = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x88), b = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xdd);
        __m512i c = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x88), d = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xdd);
        out[m] = _mm512_shuffle_i32x4(a, c, 0x88);
        out[4 + m] = _mm512_shuffle_i32x4(b, d, 0x88);
        out[8 + m] = _mm512_shuffle_i32x4(a, c, 0xdd);
        out[12 + m] = _mm512_shuffle_i32x4(b, d, 0xdd);
    }
}

/* Sixteen rows of 16 32-bit words each (row r at rows + stride * r, 64-byte aligned) to the
 * first `words` panel vectors at dst: word k of every row in dst + 64 k. */
ALWAYS_INLINE void put_words(const uint8_t *rows, size_t stride, uint8_t *dst, int words)
{
    __m512i in[16], out[16];
    for (int r = 0; r < PANEL_ROWS; r++)
        in[r] = _mm512_load_si512(rows + stride * r);
    transpose16(in, out);
    for (int k = 0; k < words; k++)
        _mm512_store_si512(dst + 64 * k, out[k]);
}

/* Each row's levels, one byte each in element order (stride bytes apart from lev, 64-byte
 * aligned), into the panel's groups of four: `groups` groups, a multiple of 16. */
ALWAYS_INLINE void put_levels(uint8_t *q, int groups, const uint8_t *lev, size_t stride)
{
    for (int k = 0; k < groups; k += 16)
        put_words(lev + 4 * k, stride, q + (size_t)k * 64, 16);
}

/* q4_k_levels in vector registers: sub-block 2c is the low nibbles of qs[32c ..], 2c+1 the high. */
ALWAYS_INLINE void q4k_levels_u8(const block_q4_k *b, uint8_t lev[QK_K])
{
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int h = 0; h < 2; h++) {
        __m512i q = _mm512_loadu_si512(b->qs + 64 * h);
        __m512i lo = _mm512_and_si512(q, low4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
        _mm512_store_si512(lev + 128 * h, _mm512_shuffle_i64x2(lo, hi, 0x44));
        _mm512_store_si512(lev + 128 * h + 64, _mm512_shuffle_i64x2(lo, hi, 0xee));
    }
}

static void pack_k4(bool five_bits, int n, int nr, const void *w, size_t ws, void *panel)
{
    const size_t block_bytes = five_bits ? sizeof(block_q5_k) : sizeof(block_q4_k);
    k4_panel *P = panel;
    _Alignas(64) int8_t lev[PANEL_ROWS][QK_K];
    _Alignas(64) int32_t words[PANEL_ROWS][16]; /* scales, min pairs, d, dmin: the panel's order */
    for (int k = 0; k < n / QK_K; k++, P++) {
        memset(words, 0, sizeof words);
        for (int r0 = 0; r0 < PANEL_ROWS; r0 += 4) {
            const uint8_t *b0 = (const uint8_t *)w + r0 * ws + (size_t)k * block_bytes;
            const int rows = nr - r0 >= 4 ? 4 : nr - r0 > 0 ? nr - r0 : 0;
            _Alignas(64) uint8_t sm4[4][16]; /* rows r0 .. r0 + 3: scales and mins (k4_scales4) */
            _mm512_store_si512(sm4, rows ? k4_scales4(b0, ws, rows) : _mm512_setzero_si512());
            for (int i = 0; i < 4; i++) {
                int r = r0 + i;
                if (i >= rows) {
                    memset(lev[r], 0, QK_K);
                    continue;
                }
                const uint8_t *b = b0 + i * ws;
                if (five_bits)
                    q5_k_levels((const block_q5_k *)b, lev[r]);
                else
                    q4k_levels_u8((const block_q4_k *)b, (uint8_t *)lev[r]);
                __m128i sm = _mm_load_si128((const __m128i *)sm4[i]);
                _mm256_store_si256((__m256i *)words[r], _mm256_cvtepu8_epi32(sm));
                _mm_store_si128((__m128i *)(words[r] + 8), _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
                _mm_storel_pi((__m64 *)(words[r] + 12), load_half_pair((const uint16_t *)b));
            }
        }
        put_levels(&P->q[0][0][0][0], QK_K / 4, (const uint8_t *)lev, QK_K);
        put_words((const uint8_t *)words, 64, (uint8_t *)P->scale, 14);
    }
}

static void pack_q6k(int n, int nr, const void *w, size_t ws, void *panel)
{
    q6_panel *P = panel;
    _Alignas(64) uint8_t lev[PANEL_ROWS][QK_K];
    _Alignas(64) int32_t scales[PANEL_ROWS][16], pairs_d[PANEL_ROWS][16];
    for (int k = 0; k < n / QK_K; k++, P++) {
        memset(pairs_d, 0, sizeof pairs_d);
        for (int r = 0; r < PANEL_ROWS; r++) {
            if (r >= nr) {
                memset(lev[r], 32, QK_K); /* level 0, scale 0 */
                memset(scales[r], 0, sizeof scales[r]);
                continue;
            }
            const block_q6_k *b = (const block_q6_k *)((const uint8_t *)w + r * ws) + k;
            for (int h = 0; h < 2; h++) {
                __m512i lv[2];
                q6k_levels_u8(b, h, lv);
                _mm512_store_si512(lev[r] + 128 * h, lv[0]);
                _mm512_store_si512(lev[r] + 128 * h + 64, lv[1]);
            }
            __m128i sc = _mm_loadu_si128((const __m128i *)b->scales);
            _mm512_store_si512(scales[r], _mm512_cvtepi8_epi32(sc));
            _mm256_store_si256((__m256i *)pairs_d[r], _mm256_cvtepi8_epi16(sc));
            float d = half_f16c(b->d);
            memcpy(&pairs_d[r][8], &d, sizeof d);
        }
        put_levels(&P->q[0][0][0][0], QK_K / 4, lev[0], QK_K);
        put_words((const uint8_t *)scales, 64, (uint8_t *)P->scale, 16);
        put_words((const uint8_t *)pairs_d, 64, (uint8_t *)P->scale_pairs, 9); /* the pairs, then d */
    }
}

static void pack_q4k(int n, int nr, const void *w, size_t ws, void *panel)
{
    pack_k4(false, n, nr, w, ws, panel);
}

static void pack_q5k(int n, int nr, const void *w, size_t ws, void *panel)
{
    pack_k4(true, n, nr, w, ws, panel);
}

static size_t k4_panel_bytes(int n)
{
    return (size_t)(n / QK_K) * sizeof(k4_panel);
}

static size_t q6_panel_bytes(int n)
{
    return (size_t)(n / QK_K) * sizeof(q6_panel);
}

/* The 16 rows' dot products with T tokens over one sub-block of `groups` groups of four levels,
 * each multiplied by its row's scale, added to isum. */
ALWAYS_INLINE void scaled_dots(int T, const uint8_t *q, int groups, const int32_t *scale,
                               const block_q8_k *ab[], int at, __m512i isum[])
{
    __m512i dot[PANEL_TOKENS];
    for (int t = 0; t < T; t++)
        dot[t] = _mm512_setzero_si512();
    for (int g = 0; g < groups; g++) {
        __m512i wv = _mm512_load_si512(q + (size_t)g * 64);
        for (int t = 0; t < T; t++)
            dot[t] = _mm512_dpbusd_epi32(dot[t], wv, _mm512_set1_epi32(load_i32(ab[t]->qs + at + 4 * g)));
    }
    __m512i sc = _mm512_load_si512(scale);
    for (int t = 0; t < T; t++)
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
}

/* Each token's outputs: (acc_0 + acc_1) + (acc_2 + acc_3) over the phases (matmul_avx512.c). */
ALWAYS_INLINE void store_panel(int nr, int T, __m512 acc[K_PHASES][PANEL_TOKENS], float *y, size_t ys)
{
    __mmask16 m = (__mmask16)(nr >= PANEL_ROWS ? 0xffff : (1u << nr) - 1);
    for (int t = 0; t < T; t++)
        _mm512_mask_storeu_ps(y + t * ys, m, _mm512_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]),
                                                           _mm512_add_ps(acc[2][t], acc[3][t])));
}

/* Q4_K / Q5_K panels, or Q6_K panels when six. */
ALWAYS_INLINE void kq_packed_tile(bool six, int n, int nr, int T, const void *panel, const void *a,
                                  size_t as, float *y, size_t ys)
{
    __m512 acc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm512_setzero_ps());
    for (int k = 0; k < n / QK_K; k++) {
        const k4_panel *P4 = (const k4_panel *)panel + k;
        const q6_panel *P6 = (const q6_panel *)panel + k;
        const block_q8_k *ab[PANEL_TOKENS];
        q8k_blocks(a, as, T, k, ab);
        __m512i isum[PANEL_TOKENS];
        for (int t = 0; t < T; t++)
            isum[t] = _mm512_setzero_si512();
        if (six)
            for (int j = 0; j < 16; j++)
                scaled_dots(T, &P6->q[j][0][0][0], 4, P6->scale[j], ab, 16 * j, isum);
        else
            for (int j = 0; j < 8; j++)
                scaled_dots(T, &P4->q[j][0][0][0], 8, P4->scale[j], ab, 32 * j, isum);
        const __m512 d = _mm512_load_ps(six ? P6->d : P4->d);
        for (int t = 0; t < T; t++) {
            const __m512 da = _mm512_set1_ps(ab[t]->d);
            __m512 *f = &acc[k % K_PHASES][t];
            if (six) {
                __m512i off = _mm512_setzero_si512(); /* sum_j scale_j * bsum_j */
                for (int p = 0; p < 8; p++)
                    off = _mm512_dpwssd_epi32(off, _mm512_load_si512(P6->scale_pairs[p]),
                                              _mm512_set1_epi32(load_i32(ab[t]->bsums + 2 * p)));
                isum[t] = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(off, 5));
                *f = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum[t]), *f);
                continue;
            }
            /* the eight sub-blocks' activation sums as int16, two per 32-bit word */
            int32_t pb[4];
            _mm_storeu_si128((__m128i *)pb, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)ab[t]->bsums),
                                                         _mm_loadu_si128((const __m128i *)(ab[t]->bsums + 8))));
            __m512i msum = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++)
                msum = _mm512_dpwssd_epi32(msum, _mm512_load_si512(P4->mins[p]), _mm512_set1_epi32(pb[p]));
            *f = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum[t]), *f);
            *f = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_load_ps(P4->dmin), da), _mm512_cvtepi32_ps(msum), *f);
        }
    }
    store_panel(nr, T, acc, y, ys);
}

/* ---- 32-blocks (Q8_0, Q4_0, IQ4_NL, MXFP4) with Q8_0 activations ---- */

#define PANEL32_TOKENS 4 /* 4 phases x 4 tokens of accumulators, 4 sums: all in registers */

/* One block of a 32-block panel: every type's levels as w + 128. */
typedef struct {
    uint8_t q[8][PANEL_ROWS][4];
    float d[PANEL_ROWS];
} q32_panel;

/* A token's block of activations as the packed tile reads them: its scale as a float, and
 * -128 * sum(a), what the weights' offset adds to every row's sum. */
typedef struct {
    float d;
    int32_t neg;
    int8_t qs[QK];
} q32_act;

_Static_assert(sizeof(q32_panel) % 64 == 0, "panels stay aligned");

static size_t q32_panel_bytes(int n)
{
    return (size_t)(n / QK) * sizeof(q32_panel);
}

static size_t q32_act_bytes(int n)
{
    return (size_t)(n / QK) * sizeof(q32_act);
}

static void q32_act_prep(int n, const void *a, void *dst)
{
    const block_q8_0 *ab = a;
    q32_act *p = dst;
    for (int i = 0; i < n / QK; i++) {
        __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), q8_0_weights(&ab[i]));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        p[i].neg = -_mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1)));
        p[i].d = block_d(&ab[i]);
        memcpy(p[i].qs, ab[i].qs, QK);
    }
}


ALWAYS_INLINE void pack_q32(weights32_fn weights, scale32_fn scale, size_t block_bytes, int n,
                            int nr, const void *w, size_t ws, void *panel)
{
    q32_panel *P = panel;
    const int nb = n / QK;
    for (int i = 0; i < nb; i += 2) { /* two blocks: 16 words per row, one transpose */
        _Alignas(64) uint8_t lev[PANEL_ROWS][2 * QK];
        for (int r = 0; r < PANEL_ROWS; r++)
            for (int h = 0; h < 2; h++) {
                __m256i v = _mm256_setzero_si256(); /* level 0: w + 128 = 0x80 */
                float d = 0;
                if (r < nr && i + h < nb) {
                    const uint8_t *b = (const uint8_t *)w + r * ws + (size_t)(i + h) * block_bytes;
                    v = weights(b);
                    d = scale(b);
                }
                _mm256_store_si256((__m256i *)(lev[r] + QK * h), _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
                if (i + h < nb)
                    P[i + h].d[r] = d;
            }
        __m512i in[16], out[16];
        for (int r = 0; r < PANEL_ROWS; r++)
            in[r] = _mm512_load_si512(lev[r]);
        transpose16(in, out);
        for (int h = 0; h < 2 && i + h < nb; h++)
            for (int g = 0; g < 8; g++)
                _mm512_store_si512(P[i + h].q[g], out[8 * h + g]);
    }
}

#define DEFINE_PACK32(name, levels, scale, block)                                             \
    static void pack_##name(int n, int nr, const void *w, size_t ws, void *panel)            \
    {                                                                                         \
        pack_q32(levels, scale, sizeof(block), n, nr, w, ws, panel);                          \
    }
DEFINE_PACK32(q8_0, q8_0_signed, block_d, block_q8_0)
DEFINE_PACK32(q4_0, q4_0_signed, block_d, block_q4_0)
DEFINE_PACK32(iq4_nl, iq4_nl_signed, block_d, block_iq4_nl)
DEFINE_PACK32(mxfp4, mxfp4_signed, mxfp4_d, block_mxfp4)

ALWAYS_INLINE void q32_packed_tile(int n, int nr, int T, const void *panel, const void *a,
                                   size_t as, float *y, size_t ys)
{
    __m512 acc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm512_setzero_ps());
    const q32_panel *P = panel;
    for (int i = 0; i < n / QK; i++, P++) {
        const q32_act *ab[PANEL32_TOKENS];
        __m512i dot[PANEL32_TOKENS];
        for (int t = 0; t < T; t++) {
            ab[t] = (const q32_act *)((const uint8_t *)a + t * as) + i;
            dot[t] = _mm512_set1_epi32(ab[t]->neg);
        }
        for (int g = 0; g < 8; g++) {
            __m512i wv = _mm512_load_si512(P->q[g]);
            for (int t = 0; t < T; t++)
                dot[t] = _mm512_dpbusd_epi32(dot[t], wv, _mm512_set1_epi32(load_i32(ab[t]->qs + 4 * g)));
        }
        const __m512 d = _mm512_load_ps(P->d);
        for (int t = 0; t < T; t++) {
            __m512 *f = &acc[i % K_PHASES][t];
            *f = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(ab[t]->d)), _mm512_cvtepi32_ps(dot[t]), *f);
        }
    }
    store_panel(nr, T, acc, y, ys);
}

/* One instance per token count (PACKED_CASE, matmul_x86.h), so that the register arrays unroll. */
#define DEFINE_PACKED_TILE(NAME, BODY)                                                           \
    static void NAME(int n, int nr, int nt, const void *panel, const void *a, size_t as,        \
                     float *y, size_t ys)                                                        \
    {                                                                                            \
        switch (nt) {                                                                            \
            PACKED_CASE(BODY, 1) PACKED_CASE(BODY, 2) PACKED_CASE(BODY, 3) PACKED_CASE(BODY, 4)  \
            PACKED_CASE(BODY, 5) PACKED_CASE(BODY, 6) PACKED_CASE(BODY, 7) PACKED_CASE(BODY, 8)  \
        }                                                                                        \
    }
#define K4_PACKED(...) kq_packed_tile(false, __VA_ARGS__)
#define Q6_PACKED(...) kq_packed_tile(true, __VA_ARGS__)
DEFINE_PACKED_TILE(packed_k4, K4_PACKED)
DEFINE_PACKED_TILE(packed_q6k, Q6_PACKED)
DEFINE_PACKED_TILE4(packed_q32, q32_packed_tile)

const mm_packed mm_q4_k_packed_avx512 = {PANEL_ROWS, PANEL_TOKENS, PACK_TOKENS, k4_panel_bytes, pack_q4k, packed_k4, NULL, NULL};
const mm_packed mm_q5_k_packed_avx512 = {PANEL_ROWS, PANEL_TOKENS, PACK_TOKENS, k4_panel_bytes, pack_q5k, packed_k4, NULL, NULL};
const mm_packed mm_q6_k_packed_avx512 = {PANEL_ROWS, PANEL_TOKENS, PACK_TOKENS, q6_panel_bytes, pack_q6k, packed_q6k, NULL, NULL};
#define PACKED32(name) \
    const mm_packed mm_##name##_packed_avx512 = {PANEL_ROWS, PANEL32_TOKENS, PACK_TOKENS, q32_panel_bytes, pack_##name, packed_q32, q32_act_bytes, q32_act_prep};
PACKED32(q8_0)
PACKED32(q4_0)
PACKED32(iq4_nl)
PACKED32(mxfp4)
