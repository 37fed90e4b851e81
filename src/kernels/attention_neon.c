/* attention_neon.c — NEON bodies of the attention primitives (attention_simd.h), with the F16
 * conversion of ARMv8.2-A. */
#include <arm_neon.h>

typedef float32x4_t vec;
#define VL 4
#define v_zero() vdupq_n_f32(0.0f)
#define v_set1(x) vdupq_n_f32(x)
#define v_load(p) vld1q_f32(p)
#define v_store(p, x) vst1q_f32(p, x)
#define v_load_f16(p) vcvt_f32_f16(vld1_f16((const __fp16 *)(p)))
#define v_add(a, b) vaddq_f32(a, b)
#define v_sub(a, b) vsubq_f32(a, b)
#define v_mul(a, b) vmulq_f32(a, b)
#define v_fma(a, b, c) vfmaq_f32(c, a, b)
#define v_hsum(x) vaddvq_f32(x)
/* fmax/fmin return NaN when either operand is NaN */
#define v_clamp(x, lo, hi) vminq_f32(hi, vmaxq_f32(lo, x))
#define v_round(x) vrndnq_f32(x)
#define v_pow2(n)                                                                              \
    vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23))
#define v_zero_below(y, x, lim) vbslq_f32(vcltq_f32(x, lim), vdupq_n_f32(0.0f), y)

#include "kernels/attention_simd.h"

const attn_vec_ops attn_vec_ops_neon = ATTN_SIMD_OPS;
