/* matmul_x86.h — what the x86 tile kernels share (matmul_avx2.c, matmul_avx512.c): the
 * instantiation of a kernel for every tile shape, the decode prefetch and small loads. Include
 * only from files built with at least -mavx2 -mfma -mf16c. */
#ifndef PRIMA_MATMUL_X86_H
#define PRIMA_MATMUL_X86_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/matmul.h"
#include "kernels/quant_x86.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#if defined(__GNUC__) && !defined(__clang__)
/* The vectors here are written out by hand; GCC's basic-block vectorizer would otherwise move the
 * scalar scale unpacking (k4_scale_bytes, matmul_avx2.c) onto the vector units, which are the
 * bottleneck. */
#pragma GCC optimize("no-tree-slp-vectorize")
#endif

/* Instantiate KERNEL(n, R, T, ...) for every tile shape up to 4 x MAX_T and dispatch on (nr, nt).
 * R and T are compile-time constants in every instance, so the accumulator arrays live in
 * registers and the loops over them unroll. */
#define TILE_CASE(KERNEL, R, T) \
    case (R) * 16 + (T): KERNEL(n, R, T, w, ws, a, as, y, ys); return;
#define TILE_ROWS(KERNEL, T) \
    TILE_CASE(KERNEL, 1, T) TILE_CASE(KERNEL, 2, T) TILE_CASE(KERNEL, 3, T) TILE_CASE(KERNEL, 4, T)
#define TILE_DISPATCH_HEAD(NAME)                                                               \
    static void NAME(int n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as, \
                     float *y, size_t ys)
#define DEFINE_TILE_4x3(NAME, KERNEL) \
    TILE_DISPATCH_HEAD(NAME) { switch (nr * 16 + nt) { TILE_ROWS(KERNEL, 1) TILE_ROWS(KERNEL, 2) TILE_ROWS(KERNEL, 3) } }
#define DEFINE_TILE_4x4(NAME, KERNEL)                                                    \
    TILE_DISPATCH_HEAD(NAME) {                                                           \
        switch (nr * 16 + nt) {                                                          \
            TILE_ROWS(KERNEL, 1) TILE_ROWS(KERNEL, 2) TILE_ROWS(KERNEL, 3) TILE_ROWS(KERNEL, 4) \
        }                                                                                \
    }
#define DEFINE_TILE_4x2(NAME, KERNEL) \
    TILE_DISPATCH_HEAD(NAME) { switch (nr * 16 + nt) { TILE_ROWS(KERNEL, 1) TILE_ROWS(KERNEL, 2) } }

/* Decode streams each weight once, and the hardware prefetchers alone leave the core waiting on
 * DRAM: a software prefetch this far ahead of the bytes being used made single-thread Q4_K
 * matvec about 30% faster on a Zen 3 (2 to 8 KB all did; beyond 16 KB it fades), and Q5_K,
 * Q6_K and Q8_0 by 30-50%; F16 showed no gain and does without. Tiles of up to MM_STREAM_TOKENS
 * tokens stream (types.h); wider prefill tiles reuse their weights from L2 and do not prefetch. */
#define PREFETCH_AHEAD 4096

ALWAYS_INLINE void prefetch_ahead(const void *p, size_t bytes)
{
    prefetch_lines(p, bytes, PREFETCH_AHEAD);
}

/* A 32-byte load the compiler may not repeat: it would otherwise fold the load into each of the
 * two instructions that use the value, doubling the loads of the weight stream. */
ALWAYS_INLINE __m256i load_once(const void *p)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    __asm__("" : "+x"(v));
    return v;
}

ALWAYS_INLINE __m256 broadcast_lane1(__m128 v)
{
    return _mm256_broadcastss_ps(_mm_movehdup_ps(v));
}

/* Every 32-block type starts with its fp16 d. */
ALWAYS_INLINE float block_d(const void *block)
{
    uint16_t h;
    memcpy(&h, block, sizeof h);
    return half_f16c(h);
}

/* The K-quant tiles of both paths (ordinary and packed) accumulate a row's superblocks into this
 * many float accumulators in turn, superblock k into k % K_PHASES: the ordinary tiles then take
 * the sums across lanes of that many superblocks at once. */
#define K_PHASES 4

/* (acc0 + acc1) + (acc2 + acc3): an output from its phases. */
static inline float phases_total(__m128 acc)
{
    __m128 h = _mm_hadd_ps(acc, acc);
    return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

/* The outputs of an ordinary tile from the phases of each row and token. */
ALWAYS_INLINE void store_phases(int R, int T, __m128 acc[4][MM_STREAM_TOKENS], float *y, size_t ys)
{
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            y[t * ys + r] = phases_total(acc[r][t]);
}

/* The sums of n <= 4 integer vectors, vector i's in lane i (exact, so in any order). */
ALWAYS_INLINE __m128i lane_sums256(int n, const __m256i s[4])
{
    __m256i h[4];
    for (int i = 0; i < 4; i++)
        h[i] = i < n ? s[i] : _mm256_setzero_si256();
    __m256i q = _mm256_hadd_epi32(_mm256_hadd_epi32(h[0], h[1]), _mm256_hadd_epi32(h[2], h[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
}

/* get(0) .. get(n - 1) in the lanes of a vector, 0 beyond n (n <= 4). */
#define GATHER4(n, get)                                       \
    ({                                                        \
        float g4_[4] = {0};                                   \
        for (int i_ = 0; i_ < (n); i_++)                      \
            g4_[i_] = get(i_);                                \
        _mm_setr_ps(g4_[0], g4_[1], g4_[2], g4_[3]);          \
    })

/* Block i of token t's Q8_0 activations. */
ALWAYS_INLINE const block_q8_0 *q8_0_at(const void *a, size_t as, int t, int i)
{
    return (const block_q8_0 *)((const uint8_t *)a + t * as) + i;
}

/* A 32-block type's 32 signed weights and its scale, from a block. */
typedef __m256i (*weights32_fn)(const void *block);
typedef float (*scale32_fn)(const void *block);

/* The 32-block types behind those signatures: signed weights in element order, and the scale
 * (MXFP4's is its E8M0 exponent, not an fp16 d in front of the levels). */
ALWAYS_INLINE __m256i q8_0_signed(const void *b) { return q8_0_weights(b); }
ALWAYS_INLINE __m256i q4_0_signed(const void *b) { return q4_0_weights(b); }
ALWAYS_INLINE __m256i iq4_nl_signed(const void *b) { return iq4_nl_weights(b); }
ALWAYS_INLINE __m256i mxfp4_signed(const void *b) { return mxfp4_weights(b); }
ALWAYS_INLINE float mxfp4_d(const void *b) { return mxfp4_scale(((const block_mxfp4 *)b)->e); }

/* Each x86 path's ordinary 32-block tiles: q32_phases(weights, scale, block_bytes, g, i0, R, T,
 * w, ws, a, as, facc) takes blocks i0 .. i0 + g - 1 (g <= K_PHASES) of R rows against T tokens
 * into the phases facc[row][token]; these run it over a row, K_PHASES blocks at a time (g a
 * constant in the hot loop) and the rest at the end, for every tile shape up to 4 x 3. */
#define Q32_TILE_BODY(weights, scale, block, n, R, T, w, ws, a, as, y, ys)                        \
    do {                                                                                        \
        const int nb_ = (n) / QK;                                                               \
        __m128 facc_[4][MM_STREAM_TOKENS];                                                      \
        TILE_ZERO(facc_, R, T, _mm_setzero_ps());                                               \
        int i0_ = 0;                                                                            \
        for (; i0_ + K_PHASES <= nb_; i0_ += K_PHASES)                                          \
            q32_phases(weights, scale, sizeof(block), K_PHASES, i0_, R, T, w, ws, a, as, facc_); \
        if (i0_ < nb_)                                                                          \
            q32_phases(weights, scale, sizeof(block), nb_ - i0_, i0_, R, T, w, ws, a, as, facc_); \
        store_phases(R, T, facc_, y, ys);                                                       \
    } while (0)
#define Q8_0_TILE(...) Q32_TILE_BODY(q8_0_signed, block_d, block_q8_0, __VA_ARGS__)
#define Q4_0_TILE(...) Q32_TILE_BODY(q4_0_signed, block_d, block_q4_0, __VA_ARGS__)
#define IQ4_NL_TILE(...) Q32_TILE_BODY(iq4_nl_signed, block_d, block_iq4_nl, __VA_ARGS__)
#define MXFP4_TILE(...) Q32_TILE_BODY(mxfp4_signed, mxfp4_d, block_mxfp4, __VA_ARGS__)
#define DEFINE_Q32_TILES()                     \
    DEFINE_TILE_4x3(tile_q8_0, Q8_0_TILE)      \
    DEFINE_TILE_4x3(tile_q4_0, Q4_0_TILE)      \
    DEFINE_TILE_4x3(tile_iq4_nl, IQ4_NL_TILE)  \
    DEFINE_TILE_4x3(tile_mxfp4, MXFP4_TILE)

/* Zero the R x T accumulators of a tile. */
#define TILE_ZERO(acc, R, T, zero)              \
    for (int r_ = 0; r_ < (R); r_++)            \
        for (int t_ = 0; t_ < (T); t_++)        \
            (acc)[r_][t_] = (zero)

/* Chunk c (0-3) of a Q4_K superblock's levels (b: the block), or Q5_K's when five_bits with qh
 * its 32 bytes of fifth bits (bit j of qh[l]: level l of sub-block j): sub-block 2c in lo and
 * 2c + 1 in hi, 32 unsigned levels each in element order. */
ALWAYS_INLINE void k4_levels(bool five_bits, const uint8_t *b, __m256i qh, int c, __m256i *lo, __m256i *hi)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const size_t qs_at = five_bits ? offsetof(block_q5_k, qs) : offsetof(block_q4_k, qs);
    __m256i q = load_once(b + qs_at + 32 * c);
    *lo = _mm256_and_si256(q, low4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    if (five_bits) /* bit j of every byte to bit 4; the shifts stay within bytes for the bits kept */
        for (int e = 0; e < 2; e++) {
            const int j = 2 * c + e;
            __m256i v = j <= 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
            __m256i *l = e ? hi : lo;
            *l = _mm256_or_si256(*l, _mm256_and_si256(v, _mm256_set1_epi8(0x10)));
        }
}

/* Half h (levels 128h .. 128h + 127) of a Q6_K superblock as levels + 32 (0-63), 32 per vector in
 * element order. */
ALWAYS_INLINE void q6k_levels(const block_q6_k *b, int h, __m256i q[4])
{
    const __m256i low4 = _mm256_set1_epi8(0x0f), two = _mm256_set1_epi8(0x03);
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    __m256i l0 = load_once(b->ql + 64 * h), l1 = load_once(b->ql + 64 * h + 32);
    __m256i qh = load_once(b->qh + 32 * h);
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_slli_epi16(_mm256_and_si256(qh, two), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                           _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0c)), 2));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, bits45));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
}

/* Superblock k of the T activation rows of a K-quant tile. */
ALWAYS_INLINE void q8k_blocks(const void *a, size_t as, int T, int k, const block_q8_k *ab[])
{
    for (int t = 0; t < T; t++)
        ab[t] = (const block_q8_k *)((const uint8_t *)a + t * as) + k;
}

/* The bytes at offset `at` of weight row r; a streaming tile (up to MM_STREAM_TOKENS tokens)
 * asks for the `bytes` this far ahead. */
ALWAYS_INLINE const uint8_t *weight_at(const void *w, size_t ws, int r, size_t at, size_t bytes, int T)
{
    const uint8_t *b = (const uint8_t *)w + r * ws + at;
    if (T <= MM_STREAM_TOKENS)
        prefetch_ahead(b, bytes);
    return b;
}

/* ---- prefill's packed tiles (matmul_packed_avx2.c, matmul_packed_avx512.c) ---- */

ALWAYS_INLINE int32_t load_i32(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Two int16 in one 32-bit lane, lo first: the pairs madd / VPDPWSSD take. */
ALWAYS_INLINE int32_t pair16(int lo, int hi)
{
    return (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
}

/* Rows past a matrix's end read this: zero levels and zero scales, so they add nothing. */
static const _Alignas(64) uint8_t zero_block[256];

/* Where the `rows` rows of a panel have their blocks (from byte `at` of each row; rows past nr
 * read zero_block). The same `bytes` of the next panel's rows are asked for into L2 (not L1,
 * which they would crowd): packing reads the rows side by side, which the hardware prefetchers
 * follow poorly, and without this it waited on DRAM as long as it computed (AVX-512, 4 tokens of
 * a 4096 x 14336 Q4_K matrix from DRAM, one thread: 4.5 -> 3.1 ms; Q6_K 7.4 -> 5.7; Q8_0 5.7 ->
 * 4.5). */
ALWAYS_INLINE void panel_rows(int rows, const void *w, size_t ws, int nr, size_t at, size_t bytes,
                              const uint8_t *rp[])
{
    for (int r = 0; r < rows; r++)
        rp[r] = r < nr ? (const uint8_t *)w + r * ws + at : zero_block;
    for (int r = 0; r < nr; r++)
        for (size_t o = 0; o < bytes; o += 64)
            __builtin_prefetch(rp[r] + rows * ws + o, 0, 2);
}

/* A token's block of activations as the packed 32-block tiles read them (mm_packed.act_prep):
 * its scale as a float, -offset * sum(a) (what weights stored with an offset add to every row's
 * sum: AVX-512 stores every 32-block type's levels + 128, AVX2 Q4_0's + 8) and its levels. */
typedef struct {
    float d;
    int32_t neg;
    int8_t qs[QK];
} q32_act;

static inline size_t q32_act_bytes(int n)
{
    return (size_t)(n / QK) * sizeof(q32_act);
}

ALWAYS_INLINE void q32_act_fill(int offset, int n, const void *a, void *dst)
{
    const block_q8_0 *ab = a;
    q32_act *p = dst;
    for (int i = 0; i < n / QK; i++) {
        __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q8_0_weights(&ab[i])),
                                      _mm256_set1_epi16(1));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        p[i].neg = -offset * _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1)));
        p[i].d = block_d(&ab[i]);
        memcpy(p[i].qs, ab[i].qs, QK);
    }
}

/* One instance of a packed tile (mm_packed.tile) or streaming tile (mm_packed.stream) per token
 * count, so that the register arrays unroll: BODY(n, nr, T, panel, a, as, y, ys), or
 * BODY(n, nr, T, w, ws, a, as, y, ys). */
#define TOKEN_CASE(BODY, T, ...) case T: BODY(n, nr, T, __VA_ARGS__); return;
#define TOKEN_CASES4(BODY, ...)                                                                  \
    TOKEN_CASE(BODY, 1, __VA_ARGS__) TOKEN_CASE(BODY, 2, __VA_ARGS__)                            \
    TOKEN_CASE(BODY, 3, __VA_ARGS__) TOKEN_CASE(BODY, 4, __VA_ARGS__)
#define TOKEN_CASES8(BODY, ...)                                                                  \
    TOKEN_CASES4(BODY, __VA_ARGS__) TOKEN_CASE(BODY, 5, __VA_ARGS__)                             \
    TOKEN_CASE(BODY, 6, __VA_ARGS__) TOKEN_CASE(BODY, 7, __VA_ARGS__) TOKEN_CASE(BODY, 8, __VA_ARGS__)
#define PANEL_PARAMS int n, int nr, int nt, const void *panel, const void *a, size_t as, float *y, size_t ys
#define STREAM_PARAMS int n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as, float *y, size_t ys
#define DEFINE_PACKED_TILE4(NAME, BODY) \
    static void NAME(PANEL_PARAMS) { switch (nt) { TOKEN_CASES4(BODY, panel, a, as, y, ys) } }
#define DEFINE_PACKED_TILE8(NAME, BODY) \
    static void NAME(PANEL_PARAMS) { switch (nt) { TOKEN_CASES8(BODY, panel, a, as, y, ys) } }
#define DEFINE_STREAM_TILE4(NAME, BODY) \
    static void NAME(STREAM_PARAMS) { switch (nt) { TOKEN_CASES4(BODY, w, ws, a, as, y, ys) } }
#define DEFINE_STREAM_TILE8(NAME, BODY) \
    static void NAME(STREAM_PARAMS) { switch (nt) { TOKEN_CASES8(BODY, w, ws, a, as, y, ys) } }

#endif
