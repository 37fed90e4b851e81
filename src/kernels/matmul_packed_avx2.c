/* matmul_packed_avx2.c — prefill's packed tiles on AVX2 without VNNI (mm_packed, types.h): the
 * K-quants Q4_K, Q5_K, Q6_K and, at the end, the 32-block types.
 *
 * A panel holds 8 weight rows interleaved: one 256-bit vector is four consecutive levels of each
 * of the 8 rows, one unsigned byte per level, so maddubs with a token's four activations
 * broadcast (a memory operand) multiplies 32 levels and adds them in pairs: int16 lanes 2r and
 * 2r + 1 are row r's. Those int16 lanes are added up over several such vectors, then one madd
 * with the sub-block's scale as an int16 pair per row applies the scale and widens into row r's
 * 32-bit lane: about one maddubs and one int16 add per 32 products, where the ordinary tiles take
 * a maddubs, a madd and an add, plus the unpacking of every weight, per 32 products and token.
 * The minimums / Q6_K's level offsets meet the activations' block sums in one madd per pair of
 * sub-blocks. Each lane is one row: the float steps are exactly those of the ordinary tiles
 * (matmul_avx2.c states them per type), so a packed batch computes what decode computes.
 *
 * How many vectors the int16 lanes may add up before they must be widened: with |a| <= 128 a
 * lane is at most 2 * 128 * the largest level, and the sum must stay within 32767:
 *   Q4_K, levels <= 15: 3840 per vector, a whole sub-block of 8 vectors (30720);
 *   Q5_K, levels <= 31: 7936 per vector, 4 vectors (31744): two madds per sub-block;
 *   Q6_K, levels + 32 <= 63: 16128 per vector, 2 vectors (32256): two per 16-level sub-block.
 * Four tokens per tile: 4 int16 sums and 4 superblock totals in registers, with the weight vector
 * and the broadcast activations, inside the 16 vector registers; the float accumulators are
 * touched once per superblock and may live in memory.
 *
 * Q4_K and Q8_0 also have kept forms (mm_kernel.kept, matmul_packed_avx512.c says why): Q4_K's qs
 * words of the 8 rows transposed, its scales and minimums bytes, d and dmin fp16 (1,184 bytes per
 * superblock of 8 rows against 1,152); Q8_0's signed levels and fp16 d (the blocks' size). */
#include "kernels/matmul_x86.h"

#define PANEL_ROWS 8
#define PANEL_TOKENS 4

/* One superblock of a Q4_K / Q5_K panel. */
typedef struct {
    uint8_t q[8][8][PANEL_ROWS][4]; /* [sub-block j][group g][row]: levels 32j + 4g .. 32j + 4g + 3 */
    int32_t scale[8][PANEL_ROWS];   /* scale j | scale j << 16: the pair madd takes */
    int32_t mins[4][PANEL_ROWS];    /* min 2p | min 2p+1 << 16 */
    float d[PANEL_ROWS], dmin[PANEL_ROWS];
} k4_panel;

/* One superblock of a Q6_K panel (aligned: 64-byte panels in the scratch stay aligned). */
typedef struct {
    _Alignas(64) uint8_t q[16][4][PANEL_ROWS][4]; /* levels + 32, [sub-block j][group g][row] */
    int32_t scale[16][PANEL_ROWS];                /* scale j | scale j << 16 */
    int32_t scale_pairs[8][PANEL_ROWS];           /* scale 2p | scale 2p+1 << 16 */
    float d[PANEL_ROWS];
} q6_panel;

/* One superblock of a kept Q4_K panel (32-byte aligned: a panel's superblocks follow each other). */
typedef struct {
    uint8_t q[4][8][PANEL_ROWS][4]; /* [c][g][row]: Q4_K's qs word 8c + g (sub-blocks 2c, 2c + 1) */
    uint8_t scale[8][PANEL_ROWS];
    uint8_t mins[4][PANEL_ROWS][2]; /* min 2p, min 2p + 1 */
    uint16_t d[PANEL_ROWS], dmin[PANEL_ROWS]; /* fp16 */
} k4_kept;

/* Two blocks of a kept Q8_0 panel. */
typedef struct {
    int8_t q[2][8][PANEL_ROWS][4]; /* blocks 2u, 2u + 1: vector g holds levels 4g .. 4g + 3 */
    uint16_t d[2][PANEL_ROWS];     /* fp16 */
} q8_kept;

_Static_assert(sizeof(k4_panel) % 64 == 0 && sizeof(q6_panel) % 64 == 0, "panels stay aligned");
_Static_assert(sizeof(k4_kept) % 32 == 0 && sizeof(q8_kept) % 32 == 0, "kept panels stay aligned");

/* Packing transposes: the 32-bit words at one offset of the 8 rows' blocks become one vector, row
 * r in lane r, so each panel vector costs a few operations where unpacking each row's levels and
 * storing them four bytes at a time cost as much as 16-32 tokens' products. */

/* out[k] = 32-bit word k of in[0..7], in lane r of in[r]: an 8 x 8 transpose. */
ALWAYS_INLINE void transpose8(const __m256i in[8], __m256i out[8])
{
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) { /* rows i, i+1 interleaved: words 0,1 | 4,5 and 2,3 | 6,7 */
        t[i] = _mm256_unpacklo_epi32(in[i], in[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(in[i], in[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* rows i .. i+3 of words m | m + 4, m = 0..3 */
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int m = 0; m < 4; m++) {
        out[m] = _mm256_permute2x128_si256(u[m], u[4 + m], 0x20);
        out[4 + m] = _mm256_permute2x128_si256(u[m], u[4 + m], 0x31);
    }
}

/* The 8 rows' vectors in[r] (32 levels each, element order) as 8 panel vectors at q: vector k
 * holds levels 4k .. 4k + 3 of every row. */
ALWAYS_INLINE void store_transposed(const __m256i in[8], uint8_t *q)
{
    __m256i out[8];
    transpose8(in, out);
    for (int k = 0; k < 8; k++)
        _mm256_store_si256((__m256i *)(q + 32 * k), out[k]);
}

static void pack_k4(bool five_bits, int n, int nr, const void *w, size_t ws, void *panel)
{
    const size_t block_bytes = five_bits ? sizeof(block_q5_k) : sizeof(block_q4_k);
    k4_panel *P = panel;
    for (int k = 0; k < n / QK_K; k++, P++) {
        const uint8_t *rp[PANEL_ROWS];
        panel_rows(PANEL_ROWS, w, ws, nr, (size_t)k * block_bytes, block_bytes, rp);
        for (int c = 0; c < 4; c++) {
            __m256i lo[PANEL_ROWS], hi[PANEL_ROWS];
            for (int r = 0; r < PANEL_ROWS; r++) {
                __m256i qh = five_bits ? load_once(rp[r] + offsetof(block_q5_k, qh)) : _mm256_setzero_si256();
                k4_levels(five_bits, rp[r], qh, c, &lo[r], &hi[r]);
            }
            store_transposed(lo, &P->q[2 * c][0][0][0]);
            store_transposed(hi, &P->q[2 * c + 1][0][0][0]);
        }
        for (int r = 0; r < PANEL_ROWS; r++) {
            uint8_t sc[8], mn[8];
            k4_unpack_scales(rp[r] + offsetof(block_q4_k, scales), sc, mn);
            for (int j = 0; j < 8; j++)
                P->scale[j][r] = pair16(sc[j], sc[j]);
            for (int p = 0; p < 4; p++)
                P->mins[p][r] = pair16(mn[2 * p], mn[2 * p + 1]);
            P->d[r] = half_f16c(((const block_q4_k *)rp[r])->d);
            P->dmin[r] = half_f16c(((const block_q4_k *)rp[r])->dmin);
        }
    }
}

static void keep_q4k(int n, int nr, const void *w, size_t ws, void *panel)
{
    k4_kept *K = panel;
    for (int k = 0; k < n / QK_K; k++, K++) {
        const uint8_t *rp[PANEL_ROWS];
        panel_rows(PANEL_ROWS, w, ws, nr, (size_t)k * sizeof(block_q4_k), sizeof(block_q4_k), rp);
        for (int c = 0; c < 4; c++) {
            __m256i in[PANEL_ROWS];
            for (int r = 0; r < PANEL_ROWS; r++)
                in[r] = load_once(rp[r] + offsetof(block_q4_k, qs) + 32 * c);
            store_transposed(in, &K->q[c][0][0][0]);
        }
        for (int r = 0; r < PANEL_ROWS; r++) {
            uint8_t sc[8], mn[8];
            k4_unpack_scales(rp[r] + offsetof(block_q4_k, scales), sc, mn);
            for (int j = 0; j < 8; j++) {
                K->scale[j][r] = sc[j];
                K->mins[j / 2][r][j % 2] = mn[j];
            }
            K->d[r] = ((const block_q4_k *)rp[r])->d;
            K->dmin[r] = ((const block_q4_k *)rp[r])->dmin;
        }
    }
}

static size_t k4_kept_bytes(int n)
{
    return ((size_t)(n / QK_K) * sizeof(k4_kept) + 63) / 64 * 64;
}

/* Sub-block j's scale of the 8 rows as the int16 pair (scale, scale) the madd takes. */
ALWAYS_INLINE __m256i k4_kept_scale(const k4_kept *K, int j)
{
    const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)K->scale[j]));
    return _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
}

/* A kept Q4_K panel into the packed tiles' k4_panels (mm_kept.unpack). */
static void unpack_q4k(int n, const void *kept, void *panel)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const k4_kept *K = kept;
    k4_panel *P = panel;
    for (int k = 0; k < n / QK_K; k++, K++, P++) {
        for (int c = 0; c < 4; c++)
            for (int g = 0; g < 8; g++) {
                const __m256i v = _mm256_load_si256((const __m256i *)K->q[c][g]);
                _mm256_store_si256((__m256i *)P->q[2 * c][g], _mm256_and_si256(v, low4));
                _mm256_store_si256((__m256i *)P->q[2 * c + 1][g], _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
            }
        for (int j = 0; j < 8; j++)
            _mm256_store_si256((__m256i *)P->scale[j], k4_kept_scale(K, j));
        for (int p = 0; p < 4; p++)
            _mm256_store_si256((__m256i *)P->mins[p], _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)K->mins[p])));
        _mm256_store_ps(P->d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)K->d)));
        _mm256_store_ps(P->dmin, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)K->dmin)));
    }
}

static void pack_q6k(int n, int nr, const void *w, size_t ws, void *panel)
{
    q6_panel *P = panel;
    for (int k = 0; k < n / QK_K; k++, P++) {
        const uint8_t *rp[PANEL_ROWS];
        panel_rows(PANEL_ROWS, w, ws, nr, (size_t)k * sizeof(block_q6_k), sizeof(block_q6_k), rp);
        for (int h = 0; h < 2; h++) {
            __m256i lev[4][PANEL_ROWS]; /* [vector i of the half: sub-blocks 8h + 2i, + 1][row] */
            for (int r = 0; r < PANEL_ROWS; r++) {
                __m256i q[4];
                q6k_levels((const block_q6_k *)rp[r], h, q);
                for (int i = 0; i < 4; i++)
                    lev[i][r] = q[i];
            }
            for (int i = 0; i < 4; i++)
                store_transposed(lev[i], &P->q[8 * h + 2 * i][0][0][0]);
        }
        for (int r = 0; r < PANEL_ROWS; r++) {
            const block_q6_k *b = (const block_q6_k *)rp[r];
            for (int j = 0; j < 16; j++)
                P->scale[j][r] = pair16(b->scales[j], b->scales[j]);
            for (int p = 0; p < 8; p++)
                P->scale_pairs[p][r] = pair16(b->scales[2 * p], b->scales[2 * p + 1]);
            P->d[r] = half_f16c(b->d);
        }
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

/* The 8 rows' dot products with T tokens over `groups` groups of four levels (from activation
 * `at` on) that share one scale, times that scale, added to isum. */
ALWAYS_INLINE void scaled_dots(int T, const uint8_t *q, int groups, const int32_t *scale,
                               const block_q8_k *ab[], int at, __m256i isum[])
{
    __m256i dot[PANEL_TOKENS];
    for (int g = 0; g < groups; g++) {
        __m256i wv = _mm256_load_si256((const __m256i *)(q + (size_t)g * 32));
        for (int t = 0; t < T; t++) {
            __m256i p = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(load_i32(ab[t]->qs + at + 4 * g)));
            dot[t] = g == 0 ? p : _mm256_add_epi16(dot[t], p);
            /* one chain per token, in order: the compiler would make a tree of each token's
             * sums, with more values live than there are registers */
            __asm__("" : "+x"(dot[t]));
        }
    }
    __m256i sc = _mm256_load_si256((const __m256i *)scale);
    for (int t = 0; t < T; t++)
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(dot[t], sc));
}

/* A token's outputs from its phases, (acc_0 + acc_1) + (acc_2 + acc_3), into rows r < nr. */
ALWAYS_INLINE void store_phases8(int nr, __m256 a0, __m256 a1, __m256 a2, __m256 a3, float *y)
{
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(y, m, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

ALWAYS_INLINE void store_panel(int nr, int T, __m256 acc[K_PHASES][PANEL_TOKENS], float *y, size_t ys)
{
    for (int t = 0; t < T; t++)
        store_phases8(nr, acc[0][t], acc[1][t], acc[2][t], acc[3][t], y + t * ys);
}

/* Q4_K / Q5_K: acc_p - macc_p for acc_p. */
ALWAYS_INLINE void store_panel_minus(int nr, int T, __m256 acc[K_PHASES][PANEL_TOKENS],
                                     __m256 macc[K_PHASES][PANEL_TOKENS], float *y, size_t ys)
{
    for (int p = 0; p < K_PHASES; p++)
        for (int t = 0; t < T; t++)
            acc[p][t] = _mm256_sub_ps(acc[p][t], macc[p][t]);
    store_panel(nr, T, acc, y, ys);
}

/* The float steps of a Q4_K / Q5_K superblock for one token (activations ab): its scaled dots
 * isum into f, and the minimums (mins[p]: the int16 pairs of sub-blocks 2p, 2p + 1) against the
 * activations' sub-block sums into mf. */
ALWAYS_INLINE void k4_float_steps(__m256i isum, __m256 d, __m256 dmin, const __m256i mins[4],
                                  const block_q8_k *ab, __m256 *f, __m256 *mf)
{
    /* the eight sub-blocks' activation sums as int16, two per 32-bit word */
    int32_t pb[4];
    _mm_storeu_si128((__m128i *)pb, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)ab->bsums),
                                                 _mm_loadu_si128((const __m128i *)(ab->bsums + 8))));
    __m256i msum = _mm256_madd_epi16(mins[0], _mm256_set1_epi32(pb[0]));
    for (int p = 1; p < 4; p++)
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins[p], _mm256_set1_epi32(pb[p])));
    const __m256 da = _mm256_set1_ps(ab->d);
    *f = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(isum), *f);
    *mf = _mm256_fmadd_ps(_mm256_mul_ps(dmin, da), _mm256_cvtepi32_ps(msum), *mf);
}

/* Q4_K and Q5_K (five) panels, or Q6_K panels when six; 8, 4 or 2 groups (span) add up in int16
 * before a madd. From panels (src), or, Q4_K and Q5_K, with stream straight from nr weight rows
 * (src, ws; mm_packed.stream): each superblock packed into a small buffer just before its
 * products, so that reading the weights overlaps the products where packing a whole row block
 * first left memory idle while the tiles computed (one thread, 4 tokens of a 4096 x 14336 matrix
 * from DRAM, two runs: Q4_K 4.2 and 5.4 -> 3.8 and 5.4 ms, Q5_K 4.7-5.7 -> 4.4-4.8). */
ALWAYS_INLINE void kq_packed_tile(bool six, bool five, bool stream, int n, int nr, int T, const void *src,
                                  size_t ws, const void *a, size_t as, float *y, size_t ys)
{
    const int span = six ? 2 : five ? 4 : 8;
    __m256 acc[K_PHASES][PANEL_TOKENS], macc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm256_setzero_ps());
    TILE_ZERO(macc, K_PHASES, T, _mm256_setzero_ps());
    _Alignas(64) k4_panel sb; /* aligned: the packers store whole vectors */
    for (int k = 0; k < n / QK_K; k++) {
        const k4_panel *P4 = (const k4_panel *)src + k;
        const q6_panel *P6 = (const q6_panel *)src + k;
        if (stream) {
            pack_k4(five, QK_K, nr, (const uint8_t *)src + (size_t)k * (five ? sizeof(block_q5_k) : sizeof(block_q4_k)),
                    ws, &sb);
            P4 = &sb;
        }
        const block_q8_k *ab[PANEL_TOKENS];
        q8k_blocks(a, as, T, k, ab);
        __m256i isum[PANEL_TOKENS];
        for (int t = 0; t < T; t++)
            isum[t] = _mm256_setzero_si256();
        if (six)
            for (int j = 0; j < 16; j++)
                for (int g = 0; g < 4; g += span)
                    scaled_dots(T, &P6->q[j][g][0][0], span, P6->scale[j], ab, 16 * j + 4 * g, isum);
        else
            for (int j = 0; j < 8; j++)
                for (int g = 0; g < 8; g += span)
                    scaled_dots(T, &P4->q[j][g][0][0], span, P4->scale[j], ab, 32 * j + 4 * g, isum);
        const __m256 d = _mm256_load_ps(six ? P6->d : P4->d);
        for (int t = 0; t < T; t++) {
            const __m256 da = _mm256_set1_ps(ab[t]->d);
            __m256 *f = &acc[k % K_PHASES][t];
            if (six) {
                __m256i off = _mm256_setzero_si256(); /* sum_j scale_j * bsum_j */
                for (int p = 0; p < 8; p++)
                    off = _mm256_add_epi32(off, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)P6->scale_pairs[p]),
                                                                  _mm256_set1_epi32(load_i32(ab[t]->bsums + 2 * p))));
                isum[t] = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(off, 5));
                *f = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(isum[t]), *f);
                continue;
            }
            k4_float_steps(isum[t], d, _mm256_load_ps(P4->dmin), (const __m256i *)P4->mins, ab[t], f,
                           &macc[k % K_PHASES][t]);
        }
    }
    if (six)
        store_panel(nr, T, acc, y, ys);
    else
        store_panel_minus(nr, T, acc, macc, y, ys);
}

/* Kept Q4_K panels (k4_kept): sub-block j's levels are the low (j even) or high nibbles of
 * the words of pair j / 2, split as they are loaded; its scale a byte per row, widened to the
 * pair madd takes. A batch streams them from memory in every case: they are asked for ahead. */
ALWAYS_INLINE void k4_kept_tile(int n, int nr, int T, const void *panel, const void *a, size_t as,
                                float *y, size_t ys)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256 acc[K_PHASES][PANEL_TOKENS], macc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm256_setzero_ps());
    TILE_ZERO(macc, K_PHASES, T, _mm256_setzero_ps());
    const k4_kept *K = panel;
    for (int k = 0; k < n / QK_K; k++, K++) {
        prefetch_ahead(K, sizeof *K);
        const block_q8_k *ab[PANEL_TOKENS];
        q8k_blocks(a, as, T, k, ab);
        __m256i isum[PANEL_TOKENS];
        for (int t = 0; t < T; t++)
            isum[t] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            __m256i dot[PANEL_TOKENS];
            for (int g = 0; g < 8; g++) {
                const __m256i v = _mm256_load_si256((const __m256i *)K->q[j / 2][g]);
                const __m256i wv = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, low4);
                for (int t = 0; t < T; t++) {
                    __m256i p = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(load_i32(ab[t]->qs + 32 * j + 4 * g)));
                    dot[t] = g == 0 ? p : _mm256_add_epi16(dot[t], p);
                    __asm__("" : "+x"(dot[t])); /* one chain per token, in order (scaled_dots) */
                }
            }
            const __m256i sc = k4_kept_scale(K, j);
            for (int t = 0; t < T; t++)
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(dot[t], sc));
        }
        __m256i mins[4];
        for (int p = 0; p < 4; p++)
            mins[p] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)K->mins[p]));
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)K->d));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)K->dmin));
        for (int t = 0; t < T; t++)
            k4_float_steps(isum[t], d, dmin, mins, ab[t], &acc[k % K_PHASES][t], &macc[k % K_PHASES][t]);
    }
    store_panel_minus(nr, T, acc, macc, y, ys);
}

#define Q4K_PACKED(n, nr, T, panel, ...) kq_packed_tile(false, false, false, n, nr, T, panel, 0, __VA_ARGS__)
#define Q5K_PACKED(n, nr, T, panel, ...) kq_packed_tile(false, true, false, n, nr, T, panel, 0, __VA_ARGS__)
#define Q6K_PACKED(n, nr, T, panel, ...) kq_packed_tile(true, false, false, n, nr, T, panel, 0, __VA_ARGS__)
#define Q4K_STREAM(...) kq_packed_tile(false, false, true, __VA_ARGS__)
#define Q5K_STREAM(...) kq_packed_tile(false, true, true, __VA_ARGS__)
DEFINE_PACKED_TILE4(packed_q4k, Q4K_PACKED)
DEFINE_PACKED_TILE4(packed_q5k, Q5K_PACKED)
DEFINE_PACKED_TILE4(packed_q6k, Q6K_PACKED)
DEFINE_STREAM_TILE4(stream_q4k, Q4K_STREAM)
DEFINE_STREAM_TILE4(stream_q5k, Q5K_STREAM)
DEFINE_PACKED_TILE4(kept_q4k, k4_kept_tile)

/* ---- 32-blocks (Q8_0, Q4_0, IQ4_NL, MXFP4) with Q8_0 activations ----
 * A block's 8 x 32 levels as 8 vectors, vector g holding levels 4g .. 4g + 3 of the 8 rows,
 * signed; then the blocks' scales. Without VNNI a product of two signed bytes cannot add up in
 * int16 (one maddubs pair reaches 32512): each vector takes the sign trick (|w| against a with
 * w's sign, matmul_avx2.c's dot_i8x32) and a madd to widen before the next, four operations per
 * 32 products and token where a Q4_K panel takes two, but the ordinary tile's per-block lane
 * sums and its per-row unpacking are gone. Q4_0's levels (-8..7) are stored + 8 instead, as
 * unsigned bytes up to 15, and then take the K-quants' course: a block's 8 maddubs add up in
 * int16 (at most 8 * 2 * 15 * 127 = 30480), one madd widens, and the offset comes back as
 * -8 * sum(a), prepared once per batch (one thread, 4096 x 14336 from DRAM: 64 tokens 53-55 ->
 * 37-38 ms, 8 tokens 8.8 -> 6.4-6.7). Either way each row's dot is the exact integer the
 * ordinary tile computes. */

/* 8 sums, a vector of levels and its |w|, the ones and temporaries in the 16 registers. One thread
 * on the Zen 4 with the AVX2 path (bench kernels, two runs): Q8_0 4096 x 4096 at 64 and 512
 * tokens 137-152 GFLOP/s against 103-118 with 4 tokens per tile. */
#define PANEL32_TOKENS 8

/* Panel of n inputs: nb blocks of levels, then nb x 8 scales. */
static size_t q32_levels_bytes(int n)
{
    return (size_t)(n / QK) * QK * PANEL_ROWS;
}

static size_t q32_panel_bytes(int n)
{
    return (q32_levels_bytes(n) + (size_t)(n / QK) * PANEL_ROWS * sizeof(float) + 63) / 64 * 64;
}

static void q32_act_prep(int n, const void *a, void *dst)
{
    q32_act_fill(8, n, a, dst);
}

/* Block i of the nr rows at w into a panel's block: levels at q (w + offset: Q4_0's 8, else w),
 * scales at d. */
ALWAYS_INLINE void pack_q32_block(weights32_fn weights, scale32_fn scale, size_t block_bytes, int offset,
                                  int i, int nr, const void *w, size_t ws, uint8_t *q, float *d)
{
    const uint8_t *rp[PANEL_ROWS];
    __m256i lev[PANEL_ROWS];
    panel_rows(PANEL_ROWS, w, ws, nr, (size_t)i * block_bytes, block_bytes, rp);
    for (int r = 0; r < PANEL_ROWS; r++) {
        lev[r] = _mm256_add_epi8(weights(rp[r]), _mm256_set1_epi8((char)offset));
        d[r] = r < nr ? scale(rp[r]) : 0.0f;
    }
    store_transposed(lev, q);
}

ALWAYS_INLINE void pack_q32(weights32_fn weights, scale32_fn scale, size_t block_bytes, int offset,
                            int n, int nr, const void *w, size_t ws, void *panel)
{
    uint8_t *q = panel;
    float *d = (float *)(q + q32_levels_bytes(n));
    for (int i = 0; i < n / QK; i++)
        pack_q32_block(weights, scale, block_bytes, offset, i, nr, w, ws, q + (size_t)i * QK * PANEL_ROWS,
                       d + (size_t)i * PANEL_ROWS);
}

#define DEFINE_PACK32(name, levels, scale, block, offset)                                     \
    static void pack_##name(int n, int nr, const void *w, size_t ws, void *panel)            \
    {                                                                                         \
        pack_q32(levels, scale, sizeof(block), offset, n, nr, w, ws, panel);                  \
    }
DEFINE_PACK32(q8_0, q8_0_signed, block_d, block_q8_0, 0)
DEFINE_PACK32(q4_0, q4_0_signed, block_d, block_q4_0, 8)
DEFINE_PACK32(iq4_nl, iq4_nl_signed, block_d, block_iq4_nl, 0)
DEFINE_PACK32(mxfp4, mxfp4_signed, mxfp4_d, block_mxfp4, 0)

static void keep_q8_0(int n, int nr, const void *w, size_t ws, void *panel)
{
    q8_kept *K = panel;
    for (int i = 0; i < n / QK; i++) {
        _Alignas(32) float d[PANEL_ROWS];
        pack_q32_block(q8_0_signed, block_d, sizeof(block_q8_0), 0, i, nr, w, ws,
                       (uint8_t *)&K[i / 2].q[i % 2][0][0][0], d);
        /* back to the fp16 they came from, exactly */
        _mm_storeu_si128((__m128i *)K[i / 2].d[i % 2], _mm256_cvtps_ph(_mm256_load_ps(d), _MM_FROUND_TO_NEAREST_INT));
    }
}

static size_t q8_kept_bytes(int n)
{
    return ((size_t)(n / QK + 1) / 2 * sizeof(q8_kept) + 63) / 64 * 64;
}

/* A kept Q8_0 panel into the packed tiles' panels (mm_kept.unpack). */
static void unpack_q8_0(int n, const void *kept, void *panel)
{
    const q8_kept *K = kept;
    uint8_t *q = panel;
    float *d = (float *)(q + q32_levels_bytes(n));
    for (int i = 0; i < n / QK; i++) {
        memcpy(q + (size_t)i * QK * PANEL_ROWS, K[i / 2].q[i % 2], QK * PANEL_ROWS);
        _mm256_store_ps(d + (size_t)i * PANEL_ROWS, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)K[i / 2].d[i % 2])));
    }
}

/* Panels of a 32-block type (src), Q4_0's with offset (levels + 8), else signed levels; or with
 * stream straight from nr weight rows (src, ws), each block packed just before its products
 * (kq_packed_tile); or kept Q8_0 panels (kept: their d fp16, asked for ahead). */
ALWAYS_INLINE void q32_packed_tile(weights32_fn weights, scale32_fn scale, size_t block_bytes, bool offset,
                                   bool stream, bool kept, int n, int nr, int T, const void *src, size_t ws,
                                   const void *a, size_t as, float *y, size_t ys)
{
    const int nb = n / QK;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[K_PHASES][PANEL32_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm256_setzero_ps());
    _Alignas(32) uint8_t qb[QK * PANEL_ROWS];
    _Alignas(32) float db[PANEL_ROWS];
    for (int i = 0; i < nb; i++) {
        const uint8_t *q = (const uint8_t *)src + (size_t)i * QK * PANEL_ROWS;
        const float *d = (const float *)((const uint8_t *)src + q32_levels_bytes(n)) + (size_t)i * PANEL_ROWS;
        if (stream) {
            pack_q32_block(weights, scale, block_bytes, offset ? 8 : 0, i, nr, src, ws, qb, db);
            q = qb;
            d = db;
        }
        const q8_kept *K = (const q8_kept *)src + i / 2;
        if (kept) {
            if (i % 2 == 0)
                prefetch_ahead(K, sizeof *K);
            q = (const uint8_t *)&K->q[i % 2][0][0][0];
        }
        const q32_act *ab[PANEL32_TOKENS];
        __m256i dot[PANEL32_TOKENS];
        for (int t = 0; t < T; t++)
            ab[t] = (const q32_act *)((const uint8_t *)a + t * as) + i;
        for (int g = 0; g < 8; g++) {
            const __m256i wv = _mm256_load_si256((const __m256i *)(q + 32 * g));
            const __m256i wabs = offset ? wv : _mm256_abs_epi8(wv);
            for (int t = 0; t < T; t++) {
                __m256i av = _mm256_set1_epi32(load_i32(ab[t]->qs + 4 * g));
                if (offset) { /* int16 sums, widened after the block */
                    __m256i p = _mm256_maddubs_epi16(wv, av);
                    dot[t] = g == 0 ? p : _mm256_add_epi16(dot[t], p);
                    /* one chain per token, in order (scaled_dots) */
                    __asm__("" : "+x"(dot[t]));
                    continue;
                }
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(av, wv)), ones);
                dot[t] = g == 0 ? p : _mm256_add_epi32(dot[t], p);
            }
        }
        if (offset)
            for (int t = 0; t < T; t++)
                dot[t] = _mm256_add_epi32(_mm256_madd_epi16(dot[t], ones), _mm256_set1_epi32(ab[t]->neg));
        const __m256 dv = kept ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)K->d[i % 2])) : _mm256_load_ps(d);
        for (int t = 0; t < T; t++) {
            __m256 *f = &acc[i % K_PHASES][t];
            *f = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(ab[t]->d)), _mm256_cvtepi32_ps(dot[t]), *f);
        }
    }
    for (int t = 0; t < T; t++)
        store_phases8(nr, acc[0][t], acc[1][t], acc[2][t], acc[3][t], y + t * ys);
}

/* Per type: its packed tile (the panels know their levels, so the 32-blocks but Q4_0 share one);
 * Q8_0 streams batches of one tile's tokens. The types whose levels are unpacked from nibbles
 * did not gain from streaming: one thread, 4096 x 14336 from DRAM, best of 30, two runs (ms,
 * panels against streaming): Q8_0 2 tokens 3.8-4.1 against 3.5, 4 tokens 5.7-5.9 against
 * 5.2-5.5; Q4_0, IQ4_NL and MXFP4 within 5 % at 2 and 4 tokens, 8 tokens 6.3-8.8 against
 * 7.0-9.2 (Q4_0 10-20 % slower). */
#define Q32_PACKED(n, nr, T, panel, ...) \
    q32_packed_tile(q8_0_signed, block_d, 0, false, false, false, n, nr, T, panel, 0, __VA_ARGS__)
#define Q4_0_PACKED(n, nr, T, panel, ...) \
    q32_packed_tile(q4_0_signed, block_d, 0, true, false, false, n, nr, T, panel, 0, __VA_ARGS__)
#define Q8_0_KEPT(n, nr, T, panel, ...) \
    q32_packed_tile(q8_0_signed, block_d, 0, false, false, true, n, nr, T, panel, 0, __VA_ARGS__)
#define Q8_0_STREAM(...) q32_packed_tile(q8_0_signed, block_d, sizeof(block_q8_0), false, true, false, __VA_ARGS__)
DEFINE_PACKED_TILE8(packed_q32, Q32_PACKED)
DEFINE_PACKED_TILE8(packed_q4_0, Q4_0_PACKED)
DEFINE_STREAM_TILE8(stream_q8_0, Q8_0_STREAM)
DEFINE_PACKED_TILE8(kept_q8_0, Q8_0_KEPT)

/* The smallest batch that packs. One thread, a 4096 x 14336 matrix from DRAM, best of 20-30 (ms,
 * ordinary tiles against packed, two runs): Q4_K 4 tokens 5.1-6.2 against 4.1-6.2, 8 tokens
 * 9.1-11.2 against 5.9-7.6; Q5_K 4 tokens 7.2-7.3 against 5.8-6.4; Q6_K 4 tokens 6.1-6.9 against
 * 7.0-7.7, 8 tokens 11.2-12.2 against 10.0-10.6. (Before the transposes, packing cost about as
 * much as 16-32 tokens' products and batches under 32 tokens did not pack.) */
#define AVX2_PACK_TOKENS 4
#define AVX2_PACK_TOKENS_Q6 8

const mm_packed mm_q4_k_packed_avx2 = {PANEL_ROWS, PANEL_TOKENS, AVX2_PACK_TOKENS, k4_panel_bytes, pack_q4k, packed_q4k, NULL, NULL, stream_q4k};
const mm_packed mm_q5_k_packed_avx2 = {PANEL_ROWS, PANEL_TOKENS, AVX2_PACK_TOKENS, k4_panel_bytes, pack_q5k, packed_q5k, NULL, NULL, stream_q5k};
const mm_packed mm_q6_k_packed_avx2 = {PANEL_ROWS, PANEL_TOKENS, AVX2_PACK_TOKENS_Q6, q6_panel_bytes, pack_q6k, packed_q6k, NULL, NULL, NULL};
/* A 32-block panel packs with a transpose in registers, about one token's products, and the
 * ordinary tiles' per-block lane sums cost more than that from 2 tokens on. One thread, a 4096 x
 * 14336 matrix from DRAM, best of 30 (ms, ordinary tiles against packed): Q8_0 2 tokens 4.2
 * against 3.9, 3 tokens 6.0-6.2 against 4.6-4.8; Q4_0 2 tokens 5.1 against 3.8-4.1, 3 tokens 7.1
 * against 4.4-5.0; `bench kernels`, Q8_0 4 tokens (3 + 1 ordinary tiles, the weights read twice)
 * 4.15-4.27x one token's time against 2.55x packed. */
#define AVX2_PACK32_TOKENS 2
#define PACKED32(name, tile, stream)                                                             \
    const mm_packed mm_##name##_packed_avx2 = {PANEL_ROWS, PANEL32_TOKENS, AVX2_PACK32_TOKENS,   \
                                               q32_panel_bytes, pack_##name, tile,               \
                                               q32_act_bytes, q32_act_prep, stream};
PACKED32(q8_0, packed_q32, stream_q8_0)
PACKED32(q4_0, packed_q4_0, NULL)
PACKED32(iq4_nl, packed_q32, NULL)
PACKED32(mxfp4, packed_q32, NULL)

/* Kept forms (types.h), and the batches that unpack them first: one thread, 4096 x 14336 (ms,
 * the kept tile against unpacking, the packed tiles from the weights beside): Q4_K 16 tokens 7.9
 * against 9.2 (9.3), 24 11.9-12.5 against 12.6-13.2, 32 18.4 against 15.8 (16.7), 64 31.8
 * against 29.6 (31.7), 512 260 against 237 (233); Q8_0 16 12.9 against 15.7 (15.1), 64 49.8
 * against 52.1 (51.0), 128 101-143 against 169-172, 512 512 against 402 (408). */
#define KEPT_LAYOUT "avx2-8rows-1"
#define WIDE_Q4K 32
#define WIDE_Q8_0 256
const mm_kept mm_q4_k_kept_avx2 = {
    {PANEL_ROWS, PANEL_TOKENS, 1, k4_kept_bytes, keep_q4k, kept_q4k, NULL, NULL, NULL}, WIDE_Q4K, unpack_q4k, KEPT_LAYOUT};
const mm_kept mm_q8_0_kept_avx2 = {
    {PANEL_ROWS, PANEL32_TOKENS, 1, q8_kept_bytes, keep_q8_0, kept_q8_0, q32_act_bytes, q32_act_prep, NULL},
    WIDE_Q8_0, unpack_q8_0, KEPT_LAYOUT};
