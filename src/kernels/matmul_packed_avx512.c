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
 * loaded weight vector serves 8 instructions.
 *
 * Q4_K, Q6_K and Q8_0 also have a kept form (mm_kernel.kept): panels made once per matrix, which
 * every batch reads, decode included, so they keep the weights' size: Q4_K's levels stay two to
 * a byte (the 32-bit words of the 16 rows' blocks transposed, nothing else; the tile splits the
 * nibbles, three operations per two vectors), its scales and minimums stay bytes and d, dmin
 * fp16, widened as they are loaded (2,368 bytes per superblock of 16 rows against 2,304); Q6_K
 * keeps its ql and qh words (3,392 against 3,360); Q8_0's levels are bytes + 128 and its d fp16
 * (the size of the blocks). Their arithmetic is the packed tiles'. */
#include "kernels/matmul_avx512.h"

#define PANEL_ROWS 16
#define PANEL_TOKENS 8
/* The smallest batch that packs, per type: one thread, a 4096 x 14336 matrix from DRAM (ms, three
 * runs each, ordinary tiles against packed): at 3 tokens Q4_K 3.27-3.77 against 2.97-3.48, Q8_0
 * 5.4 against 4.1-4.3, Q4_0, IQ4_NL and MXFP4 6.3-6.4 against 4.6-5.8; Q5_K 3.7-3.8 against
 * 3.9-5.1, and Q6_K (whose panels cost the most to pack) 3.5-3.6 against 5.1-5.3, 2.1 + 3.5 as
 * 3 + 1 tokens against 5.3 at 4. At 2 tokens no type gained. */
#define PACK_TOKENS 3
#define PACK_TOKENS_Q5_Q6 4
/* Batches of kept panels that unpack them first (mm_kept.wide_tokens; one thread, 4096 x 14336,
 * kept tile against unpacking, ms): Q6_K, whose tile spends four or five operations on each
 * vector of levels, at 8 tokens 7.8-7.9 against 5.7-8.6, at 12 7.6-7.8 against 6.3-6.7, at 16
 * 8.1 against 7.0, at 512 209-232 against 115-185; Q8_0, whose kept tile only converts d, at
 * 16 5.2 against 6.3, at 64 18.7-19.2 against 18.5-20.9, and at 512 tokens in a model (2 threads,
 * CPU ms per token) 6.6-6.7 against 6.4-6.5. Q4_K's kept tile (one operation per vector) was as
 * fast as unpacking at 512 tokens (106.6 against 105.9) and faster below (64: 13.3 against
 * 15.1): it never unpacks. */
#define WIDE_Q6K 12
#define WIDE_Q8_0 256

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

/* One superblock of a kept Q6_K panel. */
typedef struct {
    uint8_t ql[32][PANEL_ROWS][4]; /* Q6_K's ql word w of the 16 rows */
    uint8_t qh[16][PANEL_ROWS][4]; /* its qh word w */
    int8_t scale[8][PANEL_ROWS][2]; /* scales 2p, 2p + 1 */
    uint16_t d[PANEL_ROWS];          /* fp16 */
    uint8_t pad[32];
} q6_kept;

/* One superblock of a kept Q4_K panel. */
typedef struct {
    uint8_t q[4][8][PANEL_ROWS][4]; /* [c][g][row]: Q4_K's qs word 8c + g (sub-blocks 2c, 2c + 1) */
    uint8_t scale[8][PANEL_ROWS];
    uint8_t mins[4][PANEL_ROWS][2]; /* min 2p, min 2p + 1 */
    uint16_t d[PANEL_ROWS], dmin[PANEL_ROWS]; /* fp16 */
} k4_kept;

_Static_assert(sizeof(k4_panel) % 64 == 0 && sizeof(q6_panel) % 64 == 0 && sizeof(k4_kept) % 64 == 0 &&
                   sizeof(q6_kept) % 64 == 0,
               "panels stay aligned");

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

/* Packing works on the blocks' bytes as stored, transposed: the 32-bit words at one offset of the
 * 16 rows' blocks become one vector (row r in lane r), and a level is computed from its bytes
 * with the same byte operations in any order of rows, so each output vector costs a few
 * operations instead of each row's levels being unpacked, stored and transposed byte by byte
 * (which took twice as long: at 4 tokens packing cost more than the products). */

/* out[k] = word k of the 64 bytes at rp[r] + at, lane r. */
ALWAYS_INLINE void words64(const uint8_t *const rp[PANEL_ROWS], size_t at, __m512i out[16])
{
    __m512i in[16];
    for (int r = 0; r < PANEL_ROWS; r++)
        in[r] = _mm512_loadu_si512(rp[r] + at);
    transpose16(in, out);
}

/* out[k] = word k of the 16 bytes at rp[r] + at, lane r: vector i holds rows i, i + 4, i + 8,
 * i + 12 in its 128-bit lanes, so the 4 x 4 transpose within lanes puts row 4L + i in lane
 * 4L + i. */
ALWAYS_INLINE void words16(const uint8_t *const rp[PANEL_ROWS], size_t at, __m512i out[4])
{
    __m512i v[4];
    for (int i = 0; i < 4; i++) {
        __m256i lo = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(rp[i + 4] + at)),
                                      _mm_loadu_si128((const __m128i *)(rp[i] + at)));
        __m256i hi = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(rp[i + 12] + at)),
                                      _mm_loadu_si128((const __m128i *)(rp[i + 8] + at)));
        v[i] = join256(lo, hi);
    }
    __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpacklo_epi32(v[2], v[3]);
    __m512i t2 = _mm512_unpackhi_epi32(v[0], v[1]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
    out[0] = _mm512_unpacklo_epi64(t0, t1);
    out[1] = _mm512_unpackhi_epi64(t0, t1);
    out[2] = _mm512_unpacklo_epi64(t2, t3);
    out[3] = _mm512_unpackhi_epi64(t2, t3);
}

/* Byte b of every 32-bit word, zero-extended. */
ALWAYS_INLINE __m512i word_byte(__m512i v, int b)
{
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * b), _mm512_set1_epi32(0xff));
}

/* Bytes b and b + 1 (b even) of every word as the int16 pair (low, high) VPDPWSSD takes. */
ALWAYS_INLINE __m512i word_byte_pair(__m512i v, int b)
{
    __m512i hi = b == 0 ? _mm512_slli_epi32(v, 8) : _mm512_srli_epi32(v, 8);
    return _mm512_or_si512(word_byte(v, b), _mm512_and_si512(hi, _mm512_set1_epi32(0xff0000)));
}

/* The low half of every word, an fp16 value, as a float. */
ALWAYS_INLINE __m512 half_scales(__m512i v)
{
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* The low and high halves of every word as floats (the fp16 pair d, dmin). */
ALWAYS_INLINE void half_pair(__m512i v, float *lo, float *hi)
{
    _mm512_store_ps(lo, half_scales(v));
    _mm512_store_ps(hi, half_scales(_mm512_srli_epi32(v, 16)));
}

/* The 32-bit word at byte `at` of each of the first nr rows, in its lane (zero past nr). */
ALWAYS_INLINE __m512i rows_word(const void *w, size_t ws, int nr, size_t at)
{
    const __m512i stride = _mm512_set1_epi64((long long)ws);
    const __m512i lo = _mm512_add_epi64(_mm512_mullo_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), stride),
                                        _mm512_set1_epi64((long long)at));
    const __m512i hi = _mm512_add_epi64(lo, _mm512_slli_epi64(stride, 3));
    const unsigned m = nr >= PANEL_ROWS ? 0xffffu : (1u << nr) - 1;
    return join256(_mm512_mask_i64gather_epi32(_mm256_setzero_si256(), (__mmask8)m, lo, w, 1),
                   _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), (__mmask8)(m >> 8), hi, w, 1));
}

/* Bits (bit, bit + 1) of every byte of v moved to bits 4-5 (bit 4 alone when one). */
ALWAYS_INLINE __m512i high_bits(__m512i v, int bit, bool one)
{
    __m512i s = bit <= 4 ? _mm512_slli_epi16(v, 4 - bit) : _mm512_srli_epi16(v, bit - 4);
    return _mm512_and_si512(s, _mm512_set1_epi8(one ? 0x10 : 0x30));
}

/* Q4_K / Q5_K rows into k4_panels, or Q4_K rows into k4_kept panels when kept. */
ALWAYS_INLINE void pack_k4(bool five_bits, bool kept, int n, int nr, const void *w, size_t ws, void *panel)
{
    const size_t block_bytes = five_bits ? sizeof(block_q5_k) : sizeof(block_q4_k);
    const size_t qs_at = five_bits ? offsetof(block_q5_k, qs) : offsetof(block_q4_k, qs);
    const __m512i low4 = _mm512_set1_epi8(0x0f), low6 = _mm512_set1_epi8(0x3f), top2 = _mm512_set1_epi8(0x30);
    k4_panel *P = panel;
    k4_kept *K = panel;
    for (int k = 0; k < n / QK_K; k++, P++, K++) {
        const uint8_t *rp[PANEL_ROWS];
        panel_rows(PANEL_ROWS, w, ws, nr, (size_t)k * block_bytes, block_bytes, rp);
        /* d and dmin, then the 12 scale bytes q[0..11]: scale j < 4 is q[j] & 63, its minimum
         * q[j + 4] & 63; j >= 4 takes its low four bits from q[j + 4] (the minimum's from that
         * byte's high nibble) and its top two from the top of q[j - 4] (the minimum's: q[j]) */
        __m512i h[4];
        words16(rp, 0, h);
        if (kept) {
            _mm256_store_si256((__m256i *)K->d, _mm512_cvtepi32_epi16(h[0]));
            _mm256_store_si256((__m256i *)K->dmin, _mm512_cvtepi32_epi16(_mm512_srli_epi32(h[0], 16)));
        } else {
            half_pair(h[0], P->d, P->dmin);
        }
        const __m512i sc03 = _mm512_and_si512(h[1], low6), mn03 = _mm512_and_si512(h[2], low6);
        const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(h[3], low4), _mm512_and_si512(_mm512_srli_epi32(h[1], 2), top2));
        const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(h[3], 4), low4),
                                             _mm512_and_si512(_mm512_srli_epi32(h[2], 2), top2));
        for (int j = 0; j < 8; j++) {
            const __m512i sc = word_byte(j < 4 ? sc03 : sc47, j % 4);
            if (kept)
                _mm_store_si128((__m128i *)K->scale[j], _mm512_cvtepi32_epi8(sc));
            else
                _mm512_store_si512(P->scale[j], sc);
        }
        for (int p = 0; p < 4; p++) {
            const __m512i mn = word_byte_pair(p < 2 ? mn03 : mn47, 2 * (p % 2));
            if (kept)
                _mm256_store_si256((__m256i *)K->mins[p], _mm512_cvtepi16_epi8(mn));
            else
                _mm512_store_si512(P->mins[p], mn);
        }
        /* qs word 8c + g: group g of sub-blocks 2c (low nibbles) and 2c + 1 (high); Q5_K's fifth
         * bits are bits 2c and 2c + 1 of qh word g */
        __m512i qh[16];
        if (five_bits)
            words64(rp, offsetof(block_q5_k, qh), qh); /* words 0-7 are qh */
        for (int half = 0; half < 2; half++) {
            __m512i q[16];
            words64(rp, qs_at + 64 * half, q);
            for (int i = 0; i < 16; i++) {
                const int c = 2 * half + i / 8, g = i % 8;
                if (kept) {
                    _mm512_store_si512(K->q[c][g], q[i]);
                    continue;
                }
                __m512i lo = _mm512_and_si512(q[i], low4), hi = _mm512_and_si512(_mm512_srli_epi16(q[i], 4), low4);
                if (five_bits) {
                    lo = _mm512_or_si512(lo, high_bits(qh[g], 2 * c, true));
                    hi = _mm512_or_si512(hi, high_bits(qh[g], 2 * c + 1, true));
                }
                _mm512_store_si512(P->q[2 * c][g], lo);
                _mm512_store_si512(P->q[2 * c + 1][g], hi);
            }
        }
    }
}

/* A Q6_K panel's scales from their int16 pairs (pairs[p]: sub-blocks 2p, 2p + 1 of each row). */
ALWAYS_INLINE void q6_store_scales(q6_panel *P, const __m512i pairs[8])
{
    for (int p = 0; p < 8; p++) {
        _mm512_store_si512(P->scale_pairs[p], pairs[p]);
        _mm512_store_si512(P->scale[2 * p], _mm512_srai_epi32(_mm512_slli_epi32(pairs[p], 16), 16));
        _mm512_store_si512(P->scale[2 * p + 1], _mm512_srai_epi32(pairs[p], 16));
    }
}

/* A Q6_K panel's levels from the 16 rows' ql and qh words (ql[w]: word w of ql, row r in lane
 * r). Level 128h + 32i + l: bits 0-3 from ql[64h + l] (i = 0, 2: low | high nibble) or
 * ql[64h + 32 + l] (i = 1, 3), bits 4-5 from bits 2i, 2i + 1 of qh[32h + l]. */
ALWAYS_INLINE void q6_store_levels(q6_panel *P, const __m512i ql[32], const __m512i qh[16])
{
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int half = 0; half < 2; half++)
        for (int i = 0; i < 4; i++)
            for (int g8 = 0; g8 < 8; g8++) { /* levels 128h + 32i + 4 g8 .. + 3 */
                __m512i b = ql[16 * half + 8 * (i & 1) + g8];
                __m512i lo = i < 2 ? _mm512_and_si512(b, low4) : _mm512_and_si512(_mm512_srli_epi16(b, 4), low4);
                const int e = 128 * half + 32 * i + 4 * g8;
                _mm512_store_si512(P->q[e / 16][e % 16 / 4], _mm512_or_si512(lo, high_bits(qh[8 * half + g8], 2 * i, false)));
            }
}

/* Q6_K rows into q6_panels, or into q6_kept panels when kept. */
ALWAYS_INLINE void pack_q6(bool kept, int n, int nr, const void *w, size_t ws, void *panel)
{
    q6_panel *P = panel;
    q6_kept *K = panel;
    for (int k = 0; k < n / QK_K; k++, P++, K++) {
        const uint8_t *rp[PANEL_ROWS];
        panel_rows(PANEL_ROWS, w, ws, nr, (size_t)k * sizeof(block_q6_k), sizeof(block_q6_k), rp);
        __m512i sw[4], s[16], pairs[8];
        words16(rp, offsetof(block_q6_k, scales), sw);
        for (int j = 0; j < 16; j++) /* signed bytes, sign-extended */
            s[j] = _mm512_srai_epi32(_mm512_slli_epi32(sw[j / 4], 24 - 8 * (j % 4)), 24);
        for (int p = 0; p < 8; p++) {
            pairs[p] = _mm512_mask_blend_epi16(0xaaaaaaaa, s[2 * p], _mm512_slli_epi32(s[2 * p + 1], 16));
            if (kept)
                _mm256_store_si256((__m256i *)K->scale[p], _mm512_cvtepi16_epi8(pairs[p]));
        }
        if (!kept)
            q6_store_scales(P, pairs);
        /* d is the block's last two bytes: the word before it ends there */
        const size_t d_word = offsetof(block_q6_k, d) - 2;
        const __m512i dw = _mm512_srli_epi32(rows_word(w, ws, nr, (size_t)k * sizeof(block_q6_k) + d_word), 16);
        if (kept)
            _mm256_store_si256((__m256i *)K->d, _mm512_cvtepi32_epi16(dw));
        else
            _mm512_store_ps(P->d, half_scales(dw));
        __m512i ql[32], qh[16];
        words64(rp, offsetof(block_q6_k, ql), ql);
        words64(rp, offsetof(block_q6_k, ql) + 64, ql + 16);
        words64(rp, offsetof(block_q6_k, qh), qh);
        if (!kept) {
            q6_store_levels(P, ql, qh);
            continue;
        }
        for (int i = 0; i < 32; i++)
            _mm512_store_si512(K->ql[i], ql[i]);
        for (int i = 0; i < 16; i++)
            _mm512_store_si512(K->qh[i], qh[i]);
    }
}

/* A kept Q6_K panel into the packed tiles' q6_panels (mm_kept.unpack). */
static void unpack_q6k(int n, const void *kept, void *panel)
{
    const q6_kept *K = kept;
    q6_panel *P = panel;
    for (int k = 0; k < n / QK_K; k++, K++, P++) {
        __m512i ql[32], qh[16], pairs[8];
        for (int p = 0; p < 8; p++)
            pairs[p] = _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *)K->scale[p]));
        q6_store_scales(P, pairs);
        _mm512_store_ps(P->d, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)K->d)));
        for (int i = 0; i < 32; i++)
            ql[i] = _mm512_load_si512(K->ql[i]);
        for (int i = 0; i < 16; i++)
            qh[i] = _mm512_load_si512(K->qh[i]);
        q6_store_levels(P, ql, qh);
    }
}

static void pack_q6k(int n, int nr, const void *w, size_t ws, void *panel)
{
    pack_q6(false, n, nr, w, ws, panel);
}

static void keep_q6k(int n, int nr, const void *w, size_t ws, void *panel)
{
    pack_q6(true, n, nr, w, ws, panel);
}

static size_t q6_kept_bytes(int n)
{
    return (size_t)(n / QK_K) * sizeof(q6_kept);
}

static void pack_q4k(int n, int nr, const void *w, size_t ws, void *panel)
{
    pack_k4(false, false, n, nr, w, ws, panel);
}

static void pack_q5k(int n, int nr, const void *w, size_t ws, void *panel)
{
    pack_k4(true, false, n, nr, w, ws, panel);
}

static void keep_q4k(int n, int nr, const void *w, size_t ws, void *panel)
{
    pack_k4(false, true, n, nr, w, ws, panel);
}

static size_t k4_kept_bytes(int n)
{
    return (size_t)(n / QK_K) * sizeof(k4_kept);
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

/* The float steps of a Q4_K / Q5_K superblock for one token (activations ab): its scaled dots
 * isum, and the minimums (mins[p]: the int16 pairs of sub-blocks 2p, 2p + 1) against the
 * activations' sub-block sums, into the token's phase accumulator f. */
ALWAYS_INLINE void k4_float_steps(__m512i isum, __m512 d, __m512 dmin, const __m512i mins[4],
                                  const block_q8_k *ab, __m512 *f)
{
    /* the eight sub-blocks' activation sums as int16, two per 32-bit word */
    int32_t pb[4];
    _mm_storeu_si128((__m128i *)pb, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)ab->bsums),
                                                 _mm_loadu_si128((const __m128i *)(ab->bsums + 8))));
    __m512i msum = _mm512_setzero_si512();
    for (int p = 0; p < 4; p++)
        msum = _mm512_dpwssd_epi32(msum, mins[p], _mm512_set1_epi32(pb[p]));
    const __m512 da = _mm512_set1_ps(ab->d);
    *f = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum), *f);
    *f = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(msum), *f);
}

/* The float steps of a Q6_K superblock for one token: its scaled dots isum less 32 times the
 * scales (pairs[p]: the int16 pairs of sub-blocks 2p, 2p + 1) against the activations'
 * sub-block sums (the levels are stored + 32), into the token's phase accumulator f. */
ALWAYS_INLINE void q6_float_steps(__m512i isum, __m512 d, const __m512i pairs[8], const block_q8_k *ab,
                                  __m512 *f)
{
    __m512i off = _mm512_setzero_si512(); /* sum_j scale_j * bsum_j */
    for (int p = 0; p < 8; p++)
        off = _mm512_dpwssd_epi32(off, pairs[p], _mm512_set1_epi32(load_i32(ab->bsums + 2 * p)));
    isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(off, 5));
    *f = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(ab->d)), _mm512_cvtepi32_ps(isum), *f);
}

/* Superblock k of a Q4_K / Q5_K panel, or of a Q6_K panel when six (panel: that superblock),
 * against T tokens, into their phase accumulators. */
ALWAYS_INLINE void kq_superblock(bool six, int T, const void *panel, const void *a, size_t as, int k,
                                 __m512 acc[K_PHASES][PANEL_TOKENS])
{
    const k4_panel *P4 = panel;
    const q6_panel *P6 = panel;
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
        __m512 *f = &acc[k % K_PHASES][t];
        if (!six) {
            k4_float_steps(isum[t], d, _mm512_load_ps(P4->dmin), (const __m512i *)P4->mins, ab[t], f);
            continue;
        }
        q6_float_steps(isum[t], d, (const __m512i *)P6->scale_pairs, ab[t], f);
    }
}

/* Q4_K / Q5_K panels, or Q6_K panels when six. */
ALWAYS_INLINE void kq_packed_tile(bool six, int n, int nr, int T, const void *panel, const void *a,
                                  size_t as, float *y, size_t ys)
{
    __m512 acc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm512_setzero_ps());
    for (int k = 0; k < n / QK_K; k++)
        kq_superblock(six, T, six ? (const void *)((const q6_panel *)panel + k) : (const void *)((const k4_panel *)panel + k),
                      a, as, k, acc);
    store_panel(nr, T, acc, y, ys);
}

/* The same from the weights themselves (mm_packed.stream) for Q4_K / Q5_K: each superblock
 * packed, then its products. One thread, 4096 x 14336 from DRAM, three runs each: 4 tokens
 * Q4_K 3.16-4.14 -> 2.79-2.85 ms, Q5_K 3.90-3.95 -> 3.58-3.60, 8 tokens 4.51-4.59 -> 4.27-4.28
 * and 5.34-5.43 -> 4.94-5.14. Q6_K and the 32-blocks, whose packing is bound by its own
 * arithmetic rather than by memory, gained nothing (Q8_0 at 4 tokens lost 10 %): they pack
 * panels. */
ALWAYS_INLINE void k4_stream_tile(bool five_bits, int n, int nr, int T, const void *w, size_t ws,
                                  const void *a, size_t as, float *y, size_t ys)
{
    const size_t block_bytes = five_bits ? sizeof(block_q5_k) : sizeof(block_q4_k);
    k4_panel sb;
    __m512 acc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm512_setzero_ps());
    for (int k = 0; k < n / QK_K; k++) {
        pack_k4(five_bits, false, QK_K, nr, (const uint8_t *)w + (size_t)k * block_bytes, ws, &sb);
        kq_superblock(false, T, &sb, a, as, k, acc);
    }
    store_panel(nr, T, acc, y, ys);
}

/* Kept Q4_K panels (k4_kept): a vector of words holds group g of sub-blocks 2c (low nibbles) and
 * 2c + 1 (high), so each sub-block loads its vectors and keeps its nibbles (one sub-block at a
 * time keeps 8 tokens' sums in registers; a pair at a time spilled them). The panels stream from
 * memory in every batch, the first token block's at least: they are asked for ahead. */
ALWAYS_INLINE void k4_kept_tile(int n, int nr, int T, const void *panel, const void *a, size_t as,
                                float *y, size_t ys)
{
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512 acc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm512_setzero_ps());
    const k4_kept *K = panel;
    for (int k = 0; k < n / QK_K; k++, K++) {
        prefetch_ahead(K, sizeof *K);
        const block_q8_k *ab[PANEL_TOKENS];
        q8k_blocks(a, as, T, k, ab);
        __m512i isum[PANEL_TOKENS];
        for (int t = 0; t < T; t++)
            isum[t] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i dot[PANEL_TOKENS];
            for (int t = 0; t < T; t++)
                dot[t] = _mm512_setzero_si512();
            for (int g = 0; g < 8; g++) {
                const __m512i v = _mm512_load_si512(K->q[j / 2][g]);
                const __m512i wv = _mm512_and_si512(j % 2 ? _mm512_srli_epi16(v, 4) : v, low4);
                for (int t = 0; t < T; t++)
                    dot[t] = _mm512_dpbusd_epi32(dot[t], wv, _mm512_set1_epi32(load_i32(ab[t]->qs + 32 * j + 4 * g)));
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)K->scale[j]));
            for (int t = 0; t < T; t++)
                isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
        }
        __m512i mins[4];
        for (int p = 0; p < 4; p++)
            mins[p] = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)K->mins[p]));
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)K->d));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)K->dmin));
        for (int t = 0; t < T; t++)
            k4_float_steps(isum[t], d, dmin, mins, ab[t], &acc[k % K_PHASES][t]);
    }
    store_panel(nr, T, acc, y, ys);
}

/* Kept Q6_K panels (q6_kept): Q6_K's ql and qh words as stored, so each group of four levels
 * takes its low four bits from a nibble of an ql vector and its top two from an qh vector (the
 * packing's operations, now in the tile: four or five per 64 products). */
ALWAYS_INLINE void q6_kept_tile(int n, int nr, int T, const void *panel, const void *a, size_t as,
                                float *y, size_t ys)
{
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512 acc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm512_setzero_ps());
    const q6_kept *K = panel;
    for (int k = 0; k < n / QK_K; k++, K++) {
        prefetch_ahead(K, sizeof *K);
        const block_q8_k *ab[PANEL_TOKENS];
        q8k_blocks(a, as, T, k, ab);
        __m512i isum[PANEL_TOKENS], pairs[8];
        for (int t = 0; t < T; t++)
            isum[t] = _mm512_setzero_si512();
        for (int j = 0; j < 16; j++) { /* levels 16j .. 16j + 15: 128h + 32i + 4 g8 */
            const int h = j / 8, i = j % 8 / 2;
            __m512i dot[PANEL_TOKENS];
            for (int t = 0; t < T; t++)
                dot[t] = _mm512_setzero_si512();
            for (int g = 0; g < 4; g++) {
                const int g8 = 4 * (j % 2) + g;
                const __m512i b = _mm512_load_si512(K->ql[16 * h + 8 * (i & 1) + g8]);
                const __m512i lo = _mm512_and_si512(i < 2 ? b : _mm512_srli_epi16(b, 4), low4);
                const __m512i wv = _mm512_or_si512(lo, high_bits(_mm512_load_si512(K->qh[8 * h + g8]), 2 * i, false));
                for (int t = 0; t < T; t++)
                    dot[t] = _mm512_dpbusd_epi32(dot[t], wv, _mm512_set1_epi32(load_i32(ab[t]->qs + 16 * j + 4 * g)));
            }
            if (j % 2 == 0)
                pairs[j / 2] = _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *)K->scale[j / 2]));
            const __m512i sc = j % 2 ? _mm512_srai_epi32(pairs[j / 2], 16)
                                     : _mm512_srai_epi32(_mm512_slli_epi32(pairs[j / 2], 16), 16);
            for (int t = 0; t < T; t++)
                isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)K->d));
        for (int t = 0; t < T; t++)
            q6_float_steps(isum[t], d, pairs, ab[t], &acc[k % K_PHASES][t]);
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

/* Two blocks of a kept Q8_0 panel. */
typedef struct {
    uint8_t q[2][8][PANEL_ROWS][4]; /* blocks 2u, 2u + 1: levels + 128 */
    uint16_t d[2][PANEL_ROWS];      /* fp16 */
} q8_kept;

_Static_assert(sizeof(q32_panel) % 64 == 0 && sizeof(q8_kept) % 64 == 0, "panels stay aligned");

static size_t q8_kept_bytes(int n)
{
    return (size_t)(n / QK + 1) / 2 * sizeof(q8_kept);
}

static size_t q32_panel_bytes(int n)
{
    return (size_t)(n / QK) * sizeof(q32_panel);
}

static void q32_act_prep(int n, const void *a, void *dst)
{
    q32_act_fill(128, n, a, dst);
}

/* The scales of 16 blocks from the first word of each, as the ordinary tiles compute them
 * (block_d, mxfp4_d: matmul_x86.h). */
typedef __m512 (*scales16_fn)(__m512i first_words);

/* E8M0: 2^(e - 127) with the two smallest exponents as denormals (mxfp4_scale, quant.h). */
ALWAYS_INLINE __m512 e8m0_scales(__m512i v)
{
    const __m512i e = _mm512_and_si512(v, _mm512_set1_epi32(0xff));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, tiny));
}

/* 32-block rows into q32_panels, or Q8_0 rows into q8_kept panels when kept. */
ALWAYS_INLINE void pack_q32(bool kept, weights32_fn weights, scales16_fn scales, size_t block_bytes,
                            int n, int nr, const void *w, size_t ws, void *panel)
{
    q32_panel *P = panel;
    q8_kept *K = panel;
    const int nb = n / QK;
    for (int i = 0; i < nb; i += 2) { /* two blocks: 16 words per row, one transpose */
        const uint8_t *rp[PANEL_ROWS];
        panel_rows(PANEL_ROWS, w, ws, nr, (size_t)i * block_bytes, 2 * block_bytes, rp);
        const bool two = i + 1 < nb;
        __m512i in[16], out[16];
        for (int r = 0; r < PANEL_ROWS; r++) {
            __m256i second = two ? weights(rp[r] + block_bytes) : _mm256_setzero_si256();
            in[r] = join256(weights(rp[r]), second);
        }
        transpose16(in, out);
        for (int h = 0; h < 1 + two; h++) {
            const __m512i first = rows_word(w, ws, nr, (size_t)(i + h) * block_bytes);
            for (int g = 0; g < 8; g++) { /* levels as w + 128 */
                const __m512i q = _mm512_xor_si512(out[8 * h + g], _mm512_set1_epi8((char)0x80));
                _mm512_store_si512(kept ? K[i / 2].q[h][g] : P[i + h].q[g], q);
            }
            if (kept)
                _mm256_store_si256((__m256i *)K[i / 2].d[h], _mm512_cvtepi32_epi16(first));
            else
                _mm512_store_ps(P[i + h].d, scales(first));
        }
    }
}

#define DEFINE_PACK32(name, levels, scales, block)                                            \
    static void pack_##name(int n, int nr, const void *w, size_t ws, void *panel)            \
    {                                                                                         \
        pack_q32(false, levels, scales, sizeof(block), n, nr, w, ws, panel);                  \
    }
DEFINE_PACK32(q8_0, q8_0_signed, half_scales, block_q8_0)
DEFINE_PACK32(q4_0, q4_0_signed, half_scales, block_q4_0)
DEFINE_PACK32(iq4_nl, iq4_nl_signed, half_scales, block_iq4_nl)
DEFINE_PACK32(mxfp4, mxfp4_signed, e8m0_scales, block_mxfp4)

static void keep_q8_0(int n, int nr, const void *w, size_t ws, void *panel)
{
    pack_q32(true, q8_0_signed, half_scales, sizeof(block_q8_0), n, nr, w, ws, panel);
}

/* A kept Q8_0 panel into the packed tiles' q32_panels (mm_kept.unpack). */
static void unpack_q8_0(int n, const void *kept, void *panel)
{
    const q8_kept *K = kept;
    q32_panel *P = panel;
    for (int i = 0; i < n / QK; i++, P++) {
        const q8_kept *u = K + i / 2;
        memcpy(P->q, u->q[i % 2], sizeof P->q);
        _mm512_store_ps(P->d, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)u->d[i % 2])));
    }
}

/* 32-block panels, or kept Q8_0 panels when kept (a batch of up to MM_STREAM_TOKENS tokens
 * streams those from memory, asking for them ahead). */
ALWAYS_INLINE void q32_tile(bool kept, int n, int nr, int T, const void *panel, const void *a,
                            size_t as, float *y, size_t ys)
{
    __m512 acc[K_PHASES][PANEL_TOKENS];
    TILE_ZERO(acc, K_PHASES, T, _mm512_setzero_ps());
    for (int i = 0; i < n / QK; i++) {
        const q8_kept *K = (const q8_kept *)panel + i / 2;
        const q32_panel *P = (const q32_panel *)panel + i;
        if (kept && i % 2 == 0)
            prefetch_ahead(K, sizeof *K);
        const uint8_t *q = kept ? &K->q[i % 2][0][0][0] : &P->q[0][0][0];
        const q32_act *ab[PANEL32_TOKENS];
        __m512i dot[PANEL32_TOKENS];
        for (int t = 0; t < T; t++) {
            ab[t] = (const q32_act *)((const uint8_t *)a + t * as) + i;
            dot[t] = _mm512_set1_epi32(ab[t]->neg);
        }
        for (int g = 0; g < 8; g++) {
            __m512i wv = _mm512_load_si512(q + 64 * g);
            for (int t = 0; t < T; t++)
                dot[t] = _mm512_dpbusd_epi32(dot[t], wv, _mm512_set1_epi32(load_i32(ab[t]->qs + 4 * g)));
        }
        const __m512 d = kept ? _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)K->d[i % 2]))
                              : _mm512_load_ps(P->d);
        for (int t = 0; t < T; t++) {
            __m512 *f = &acc[i % K_PHASES][t];
            *f = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(ab[t]->d)), _mm512_cvtepi32_ps(dot[t]), *f);
        }
    }
    store_panel(nr, T, acc, y, ys);
}

#define K4_PACKED(...) kq_packed_tile(false, __VA_ARGS__)
#define Q6_PACKED(...) kq_packed_tile(true, __VA_ARGS__)
#define Q4K_STREAM(...) k4_stream_tile(false, __VA_ARGS__)
#define Q5K_STREAM(...) k4_stream_tile(true, __VA_ARGS__)
DEFINE_PACKED_TILE8(packed_k4, K4_PACKED)
DEFINE_PACKED_TILE8(packed_q6k, Q6_PACKED)
DEFINE_STREAM_TILE8(stream_q4k, Q4K_STREAM)
DEFINE_STREAM_TILE8(stream_q5k, Q5K_STREAM)
#define Q32_PACKED(...) q32_tile(false, __VA_ARGS__)
#define Q8_KEPT(...) q32_tile(true, __VA_ARGS__)
DEFINE_PACKED_TILE4(packed_q32, Q32_PACKED)
DEFINE_PACKED_TILE4(kept_q8_0, Q8_KEPT)
DEFINE_PACKED_TILE8(kept_q4k, k4_kept_tile)
DEFINE_PACKED_TILE8(kept_q6k, q6_kept_tile)

const mm_packed mm_q4_k_packed_avx512 = {PANEL_ROWS, PANEL_TOKENS, PACK_TOKENS, k4_panel_bytes, pack_q4k, packed_k4, NULL, NULL, stream_q4k};
const mm_packed mm_q5_k_packed_avx512 = {PANEL_ROWS, PANEL_TOKENS, PACK_TOKENS_Q5_Q6, k4_panel_bytes, pack_q5k, packed_k4, NULL, NULL, stream_q5k};
const mm_packed mm_q6_k_packed_avx512 = {PANEL_ROWS, PANEL_TOKENS, PACK_TOKENS_Q5_Q6, q6_panel_bytes, pack_q6k, packed_q6k, NULL, NULL, NULL};
#define PACKED32(name) \
    const mm_packed mm_##name##_packed_avx512 = {PANEL_ROWS, PANEL32_TOKENS, PACK_TOKENS, q32_panel_bytes, pack_##name, packed_q32, q32_act_bytes, q32_act_prep, NULL};
PACKED32(q8_0)
PACKED32(q4_0)
PACKED32(iq4_nl)
PACKED32(mxfp4)

/* The kept panels' layout, for files of them: a new name with any change to k4_kept, q6_kept,
 * q8_kept or their packing. */
#define KEPT_LAYOUT "avx512-16rows-1"

/* Kept forms: every batch from one token reads them (min_tokens 1, no streaming); from WIDE_*
 * tokens on, a row block's kept panels are unpacked into the packed tiles' panels first. */
const mm_kept mm_q4_k_kept_avx512 = {
    {PANEL_ROWS, PANEL_TOKENS, 1, k4_kept_bytes, keep_q4k, kept_q4k, NULL, NULL, NULL}, 0, NULL, KEPT_LAYOUT};
const mm_kept mm_q6_k_kept_avx512 = {
    {PANEL_ROWS, PANEL_TOKENS, 1, q6_kept_bytes, keep_q6k, kept_q6k, NULL, NULL, NULL}, WIDE_Q6K, unpack_q6k, KEPT_LAYOUT};
const mm_kept mm_q8_0_kept_avx512 = {
    {PANEL_ROWS, PANEL32_TOKENS, 1, q8_kept_bytes, keep_q8_0, kept_q8_0, q32_act_bytes, q32_act_prep, NULL},
    WIDE_Q8_0, unpack_q8_0, KEPT_LAYOUT};
