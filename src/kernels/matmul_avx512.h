/* matmul_avx512.h — what the AVX-512 tile files share (matmul_avx512.c, matmul_packed_avx512.c).
 * Include only from files built with the AVX-512 flags of CMakeLists.txt. */
#ifndef PRIMA_MATMUL_AVX512_H
#define PRIMA_MATMUL_AVX512_H

#include "kernels/matmul_x86.h"

ALWAYS_INLINE __m512i join256(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Levels 128h .. 128h + 127 (+ 32) of a Q6_K block as unsigned bytes in element order, 64 per
 * vector (lv[0]: the first 64). */
ALWAYS_INLINE void q6k_levels_u8(const block_q6_k *b, int h, __m512i lv[2])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
    /* qh bit pairs of groups 0|1 move up to bits 4-5 by 4|2, those of groups 2|3 down by 0|2 */
    const __m512i up = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    const __m512i down = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
    __m512i qh2 = _mm512_broadcast_i64x4(load_once(b->qh + 32 * h));
    lv[0] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh2, up), m2));
    lv[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                            _mm512_and_si512(_mm512_srlv_epi16(qh2, down), m2));
}

/* The scales and minimums of n <= 4 superblocks of a row (from b0, block_bytes apart) unpacked in
 * vector registers, which costs less than unpacking each with scalar code
 * (k4_unpack_scales_u64): superblock i in 128-bit lane i, its eight 6-bit scales in bytes 0-7
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

#endif
