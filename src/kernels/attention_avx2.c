/* attention_avx2.c — AVX2/FMA/F16C bodies of the attention primitives (attention_simd.h). */
#include <immintrin.h>

#include "kernels/quant_x86.h"

typedef __m256 vec;
#define VL 8
#define v_zero() _mm256_setzero_ps()
#define v_set1(x) _mm256_set1_ps(x)
#define v_load(p) _mm256_loadu_ps(p)
#define v_store(p, x) _mm256_storeu_ps(p, x)
#define v_load_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define v_add(a, b) _mm256_add_ps(a, b)
#define v_sub(a, b) _mm256_sub_ps(a, b)
#define v_mul(a, b) _mm256_mul_ps(a, b)
#define v_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define v_hsum(x) hsum_ps256(x)
/* maxps/minps return their second operand when either is NaN */
#define v_clamp(x, lo, hi) _mm256_min_ps(hi, _mm256_max_ps(lo, x))
#define v_round(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define v_pow2(n)                                                                              \
    _mm256_castsi256_ps(_mm256_slli_epi32(                                                     \
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define v_zero_below(y, x, lim) _mm256_andnot_ps(_mm256_cmp_ps(x, lim, _CMP_LT_OQ), y)

#include "kernels/attention_simd.h"

const attn_vec_ops attn_vec_ops_avx2 = ATTN_SIMD_OPS;
