/* quant_x86.h — AVX2 building blocks shared by the x86 kernels (quant_avx2.c, matmul_*.c).
 * Include only from files built with at least -mavx2 -mfma -mf16c. */
#ifndef PRIMA_KERNELS_QUANT_X86_H
#define PRIMA_KERNELS_QUANT_X86_H

#include <immintrin.h>

#include "kernels/quant.h"

static inline float hsum_ps256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Weights are read once per token, straight from memory. Asking for them this far ahead of use
 * (any address of each 64-byte line in [p, p + bytes), shifted) measured 10-20% more GB/s than
 * the hardware prefetchers alone on a memory-bound matrix-vector product; in cache it costs a
 * few instructions per block. Prefetches never fault, so reading past a row end is harmless. */
#ifndef WEIGHT_PREFETCH_DISTANCE
#define WEIGHT_PREFETCH_DISTANCE 2048
#endif

/* Prefetch the cache lines of the `bytes` at p, `distance` bytes further on. The builtin, not
 * _mm_prefetch: GCC 12 silently dropped _mm_prefetch (an inline function whose hint is a
 * parameter) when this loop was inlined through an always_inline caller, and the tile kernels
 * were left without any prefetch. */
static inline void prefetch_lines(const void *p, size_t bytes, size_t distance)
{
    const char *q = (const char *)p + distance;
    for (size_t off = 0; off < bytes; off += 64)
        __builtin_prefetch(q + off, 0, 3);
}

static inline void prefetch_weights(const void *p, int bytes)
{
    prefetch_lines(p, (size_t)bytes, WEIGHT_PREFETCH_DISTANCE);
}

static inline __m256i loadu256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* F16C converts exactly like half_to_f32 (fp16 -> fp32 is exact). */
static inline float half_f16c(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* (d * act_d, dmin * act_d) in lanes 0 and 1, from a block's adjacent fp16 pair d, dmin: one
 * conversion for both (Q2_K, Q4_K, Q5_K). */
static inline __m128 scale_min_pair(const uint16_t *d_dmin, float act_d)
{
    uint32_t pair;
    memcpy(&pair, d_dmin, sizeof pair);
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)pair)), _mm_set1_ps(act_d));
}

/* Products of 32 signed bytes summed in pairs to 16 int16. maddubs wants one unsigned operand:
 * move w's sign onto a. No saturation: |w| <= 128 and |a| <= 127 give at most 32512. */
static inline __m256i mul_i8_pairs(__m256i w, __m256i a)
{
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

/* ... and on to 8 int32 partial sums. */
static inline __m256i dot_i8x32(__m256i w, __m256i a)
{
    return _mm256_madd_epi16(mul_i8_pairs(w, a), _mm256_set1_epi16(1));
}

/* 16 bytes of packed nibbles -> 32 bytes: the low nibbles, then the high nibbles (the element
 * order of Q4_0 and IQ4_NL). */
static inline __m256i nibbles_lo_hi(const uint8_t *p)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)p);
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* Bytes 2j, 2j+1 in every 16-bit slot: with _mm256_shuffle_epi8 on a lane-broadcast vector of
 * eight int16 scales, fills a register with scale j. */
static inline __m256i scale_selector(int j)
{
    return _mm256_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j)));
}

/* Scale j in lane 0 and scale j+1 in lane 1 (the two 16-element halves of a 32-byte group). */
static inline __m256i scale_pair_selector(int j)
{
    return _mm256_set_m128i(_mm_set1_epi16((short)(((2 * j + 3) << 8) | (2 * j + 2))),
                            _mm_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j))));
}

/* The 32 signed weights of one block of each 32-block type, as bytes in element order. */
static inline __m256i q8_0_weights(const block_q8_0 *b) { return loadu256(b->qs); }

static inline __m256i q4_0_weights(const block_q4_0 *b)
{
    return _mm256_sub_epi8(nibbles_lo_hi(b->qs), _mm256_set1_epi8(8));
}

static inline __m256i iq4_nl_weights(const block_iq4_nl *b)
{
    const __m256i grid = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4nl_values));
    return _mm256_shuffle_epi8(grid, nibbles_lo_hi(b->qs));
}

static inline __m256i mxfp4_weights(const block_mxfp4 *b)
{
    const __m256i grid = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)mxfp4_values));
    return _mm256_shuffle_epi8(grid, nibbles_lo_hi(b->qs));
}

#endif
