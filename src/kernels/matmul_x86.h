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
 * scalar scale unpacking (k4_scale_bytes) onto the vector units, which are the bottleneck. */
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

/* Two consecutive halves (a block's d and dmin) as floats in lanes 0 and 1. */
ALWAYS_INLINE __m128 load_half_pair(const uint16_t *p)
{
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
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
 * many float accumulators in turn, superblock k into k % K_PHASES, and end with
 * (acc_0 + acc_1) + (acc_2 + acc_3): the ordinary tiles then take the sums across lanes of that
 * many superblocks at once, and run their float steps as one vector of phases. */
#define K_PHASES 4

/* kk = 0 .. n - 1 (n <= K_PHASES), unrolled: the arrays indexed by kk stay in registers. */
#define PHASE_LOOP(kk, n) _Pragma("GCC unroll 4") for (int kk = 0; kk < K_PHASES && kk < (n); kk++)

/* (acc0 + acc1) + (acc2 + acc3) */
ALWAYS_INLINE float phases_total(__m128 acc)
{
    __m128 h = _mm_hadd_ps(acc, acc);
    return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

/* Zero the R x T accumulators of a tile. */
#define TILE_ZERO(acc, R, T, zero)              \
    for (int r_ = 0; r_ < (R); r_++)            \
        for (int t_ = 0; t_ < (T); t_++)        \
            (acc)[r_][t_] = (zero)

/* Superblock k of the T activation rows of a K-quant tile. */
ALWAYS_INLINE void q8k_blocks(const void *a, size_t as, int T, int k, const block_q8_k *ab[])
{
    for (int t = 0; t < T; t++)
        ab[t] = (const block_q8_k *)((const uint8_t *)a + t * as) + k;
}

/* Superblock k of token t's activations. */
ALWAYS_INLINE const block_q8_k *q8k_at(const void *a, size_t as, int t, int k)
{
    return (const block_q8_k *)((const uint8_t *)a + t * as) + k;
}

/* The scales of token t's superblocks k0 .. k0 + n - 1 (n <= K_PHASES) in lanes (0 beyond n:
 * with zero sums there, a phase's float steps then add +0, which leaves it as it was). */
ALWAYS_INLINE __m128 q8k_scales(const void *a, size_t as, int t, int k0, int n)
{
    float d[K_PHASES] = {0};
    for (int kk = 0; kk < n; kk++)
        d[kk] = q8k_at(a, as, t, k0 + kk)->d;
    return _mm_setr_ps(d[0], d[1], d[2], d[3]);
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

/* ---- prefill's packed panels (matmul_packed_avx2.c, matmul_packed_avx512.c) ---- */

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

/* Row r's levels (one byte each, in element order) into a panel of `rows` rows in groups of
 * four: group k of row r at bytes (k * rows + r) * 4. */
ALWAYS_INLINE void put_levels(uint8_t *q, int rows, int groups, int r, const uint8_t *lev)
{
    for (int k = 0; k < groups; k++)
        memcpy(q + ((size_t)k * rows + r) * 4, lev + 4 * k, 4);
}

/* One superblock of a Q4_K / Q5_K row as the packers take it. */
typedef struct {
    int8_t lev[QK_K];
    uint8_t sc[8], mn[8];
    float d, dmin;
} k4_unpacked;

/* Superblock k of row r < nr, all zero for a panel row beyond the matrix (r >= nr). */
ALWAYS_INLINE void k4_unpack_block(bool five_bits, const void *w, size_t ws, int nr, int r, int k, k4_unpacked *u)
{
    memset(u, 0, sizeof *u);
    if (r >= nr)
        return;
    const uint8_t *b = (const uint8_t *)w + r * ws + (size_t)k * (five_bits ? sizeof(block_q5_k) : sizeof(block_q4_k));
    if (five_bits)
        q5_k_levels((const block_q5_k *)b, u->lev);
    else
        q4_k_levels((const block_q4_k *)b, u->lev);
    k4_unpack_scales(b + offsetof(block_q4_k, scales), u->sc, u->mn);
    u->d = half_f16c(((const block_q4_k *)b)->d);
    u->dmin = half_f16c(((const block_q4_k *)b)->dmin);
}

/* One superblock of a Q6_K row as the packers take it: levels + 32, unsigned. */
typedef struct {
    uint8_t lev[QK_K];
    int8_t sc[16];
    float d;
} q6_unpacked;

/* Superblock k of row r < nr; beyond the matrix level 0 (stored 32) with scale 0. */
ALWAYS_INLINE void q6_unpack_block(const void *w, size_t ws, int nr, int r, int k, q6_unpacked *u)
{
    memset(u, 0, sizeof *u);
    if (r >= nr) {
        memset(u->lev, 32, sizeof u->lev);
        return;
    }
    const block_q6_k *b = (const block_q6_k *)((const uint8_t *)w + r * ws) + k;
    int8_t q[QK_K];
    q6_k_levels(b, q);
    for (int l = 0; l < QK_K; l++)
        u->lev[l] = (uint8_t)(q[l] + 32);
    memcpy(u->sc, b->scales, sizeof u->sc);
    u->d = half_f16c(b->d);
}

#endif
