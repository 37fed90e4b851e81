/* attention_avx512.c — AVX-512F bodies of the attention primitives (attention_simd.h): 16 lanes,
 * so a 128-dimension head is 8 vectors. */
#include <immintrin.h>

typedef __m512 vec;
#define VL 16
#define v_zero() _mm512_setzero_ps()
#define v_set1(x) _mm512_set1_ps(x)
#define v_load(p) _mm512_loadu_ps(p)
#define v_store(p, x) _mm512_storeu_ps(p, x)
#define v_load_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define v_add(a, b) _mm512_add_ps(a, b)
#define v_sub(a, b) _mm512_sub_ps(a, b)
#define v_mul(a, b) _mm512_mul_ps(a, b)
#define v_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define v_hsum(x) _mm512_reduce_add_ps(x)
/* maxps/minps return their second operand when either is NaN */
#define v_clamp(x, lo, hi) _mm512_min_ps(hi, _mm512_max_ps(lo, x))
#define v_round(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define v_pow2(n)                                                                              \
    _mm512_castsi512_ps(_mm512_slli_epi32(                                                     \
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define v_zero_below(y, x, lim) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lim, _CMP_NLT_UQ), y)

#include "kernels/attention_simd.h"

const attn_vec_ops attn_vec_ops_avx512 = ATTN_SIMD_OPS;
