/* matmul_packed_avx512.c — prefill's packed tiles for the K-quants on AVX-512 (mm_packed,
 * types.h).
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
#include "kernels/matmul_x86.h"

#define PANEL_ROWS 16
#define PANEL_TOKENS 8

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

static void pack_k4(bool five_bits, int n, int nr, const void *w, size_t ws, void *panel)
{
    k4_panel *P = panel;
    for (int k = 0; k < n / QK_K; k++, P++)
        for (int r = 0; r < PANEL_ROWS; r++) {
            k4_unpacked u;
            k4_unpack_block(five_bits, w, ws, nr, r, k, &u);
            put_levels(&P->q[0][0][0][0], PANEL_ROWS, QK_K / 4, r, (const uint8_t *)u.lev);
            for (int j = 0; j < 8; j++)
                P->scale[j][r] = u.sc[j];
            for (int p = 0; p < 4; p++)
                P->mins[p][r] = pair16(u.mn[2 * p], u.mn[2 * p + 1]);
            P->d[r] = u.d;
            P->dmin[r] = u.dmin;
        }
}

static void pack_q6k(int n, int nr, const void *w, size_t ws, void *panel)
{
    q6_panel *P = panel;
    for (int k = 0; k < n / QK_K; k++, P++)
        for (int r = 0; r < PANEL_ROWS; r++) {
            q6_unpacked u;
            q6_unpack_block(w, ws, nr, r, k, &u);
            put_levels(&P->q[0][0][0][0], PANEL_ROWS, QK_K / 4, r, u.lev);
            for (int j = 0; j < 16; j++)
                P->scale[j][r] = u.sc[j];
            for (int p = 0; p < 8; p++)
                P->scale_pairs[p][r] = pair16(u.sc[2 * p], u.sc[2 * p + 1]);
            P->d[r] = u.d;
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

ALWAYS_INLINE void k4_packed_tile(int n, int nr, int T, const void *panel, const void *a,
                                  size_t as, float *y, size_t ys)
{
    __m512 acc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm512_setzero_ps());
    const k4_panel *P = panel;
    for (int k = 0; k < n / QK_K; k++, P++) {
        const block_q8_k *ab[PANEL_TOKENS];
        q8k_blocks(a, as, T, k, ab);
        __m512i isum[PANEL_TOKENS];
        for (int t = 0; t < T; t++)
            isum[t] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++)
            scaled_dots(T, &P->q[j][0][0][0], 8, P->scale[j], ab, 32 * j, isum);
        const __m512 d = _mm512_load_ps(P->d), dmin = _mm512_load_ps(P->dmin);
        for (int t = 0; t < T; t++) {
            /* the eight sub-blocks' activation sums as int16, two per 32-bit word */
            int32_t pb[4];
            _mm_storeu_si128((__m128i *)pb, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)ab[t]->bsums),
                                                         _mm_loadu_si128((const __m128i *)(ab[t]->bsums + 8))));
            __m512i msum = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++)
                msum = _mm512_dpwssd_epi32(msum, _mm512_load_si512(P->mins[p]), _mm512_set1_epi32(pb[p]));
            const __m512 da = _mm512_set1_ps(ab[t]->d);
            __m512 *f = &acc[k % K_PHASES][t];
            *f = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum[t]), *f);
            *f = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(msum), *f);
        }
    }
    store_panel(nr, T, acc, y, ys);
}

ALWAYS_INLINE void q6k_packed_tile(int n, int nr, int T, const void *panel, const void *a,
                                   size_t as, float *y, size_t ys)
{
    __m512 acc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm512_setzero_ps());
    const q6_panel *P = panel;
    for (int k = 0; k < n / QK_K; k++, P++) {
        const block_q8_k *ab[PANEL_TOKENS];
        q8k_blocks(a, as, T, k, ab);
        __m512i isum[PANEL_TOKENS];
        for (int t = 0; t < T; t++)
            isum[t] = _mm512_setzero_si512();
        for (int j = 0; j < 16; j++)
            scaled_dots(T, &P->q[j][0][0][0], 4, P->scale[j], ab, 16 * j, isum);
        const __m512 d = _mm512_load_ps(P->d);
        for (int t = 0; t < T; t++) {
            __m512i off = _mm512_setzero_si512(); /* sum_j scale_j * bsum_j */
            for (int p = 0; p < 8; p++)
                off = _mm512_dpwssd_epi32(off, _mm512_load_si512(P->scale_pairs[p]),
                                          _mm512_set1_epi32(load_i32(ab[t]->bsums + 2 * p)));
            isum[t] = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(off, 5));
            const __m512 da = _mm512_set1_ps(ab[t]->d);
            __m512 *f = &acc[k % K_PHASES][t];
            *f = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum[t]), *f);
        }
    }
    store_panel(nr, T, acc, y, ys);
}

/* One instance per token count, so that the register arrays unroll. */
#define PACKED_CASE(BODY, T) case T: BODY(n, nr, T, panel, a, as, y, ys); return;
#define DEFINE_PACKED_TILE(NAME, BODY)                                                           \
    static void NAME(int n, int nr, int nt, const void *panel, const void *a, size_t as,        \
                     float *y, size_t ys)                                                        \
    {                                                                                            \
        switch (nt) {                                                                            \
            PACKED_CASE(BODY, 1) PACKED_CASE(BODY, 2) PACKED_CASE(BODY, 3) PACKED_CASE(BODY, 4)  \
            PACKED_CASE(BODY, 5) PACKED_CASE(BODY, 6) PACKED_CASE(BODY, 7) PACKED_CASE(BODY, 8)  \
        }                                                                                        \
    }
DEFINE_PACKED_TILE(tile_k4, k4_packed_tile)
DEFINE_PACKED_TILE(tile_q6k, q6k_packed_tile)

const mm_packed mm_q4_k_packed_avx512 = {PANEL_ROWS, PANEL_TOKENS, k4_panel_bytes, pack_q4k, tile_k4};
const mm_packed mm_q5_k_packed_avx512 = {PANEL_ROWS, PANEL_TOKENS, k4_panel_bytes, pack_q5k, tile_k4};
const mm_packed mm_q6_k_packed_avx512 = {PANEL_ROWS, PANEL_TOKENS, q6_panel_bytes, pack_q6k, tile_q6k};
