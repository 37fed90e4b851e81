/* matmul.h — the tile kernels and activation quantizers of the SIMD paths, by the names the
 * table in types.c binds (the contract of a tile is mm_kernel's, types.h). Internal to
 * src/kernels. */
#ifndef PRIMA_MATMUL_H
#define PRIMA_MATMUL_H

#include "kernels/types.h"

#define MM_DECLARE(name) extern const mm_kernel mm_##name##_avx2, mm_##name##_avx512;

MM_DECLARE(f32)
MM_DECLARE(f16)
MM_DECLARE(bf16)
MM_DECLARE(q4_0)
MM_DECLARE(q8_0)
MM_DECLARE(iq4_nl)
MM_DECLARE(mxfp4)
MM_DECLARE(q4_k)
MM_DECLARE(q5_k)
MM_DECLARE(q6_k)

/* Packed prefill tiles (matmul_packed_avx2.c, matmul_packed_avx512.c) */
extern const mm_packed mm_q4_k_packed_avx2, mm_q5_k_packed_avx2, mm_q6_k_packed_avx2;
extern const mm_packed mm_q8_0_packed_avx2, mm_q4_0_packed_avx2, mm_iq4_nl_packed_avx2,
    mm_mxfp4_packed_avx2;
extern const mm_packed mm_q4_k_packed_avx512, mm_q5_k_packed_avx512, mm_q6_k_packed_avx512;
extern const mm_packed mm_q8_0_packed_avx512, mm_q4_0_packed_avx512, mm_iq4_nl_packed_avx512,
    mm_mxfp4_packed_avx512;
/* Kept forms (matmul_packed_avx512.c) */
extern const mm_kept mm_q4_k_kept_avx512, mm_q6_k_kept_avx512, mm_q8_0_kept_avx512;
extern const mm_kept mm_q4_k_kept_avx2, mm_q8_0_kept_avx2;

/* AVX2 activation quantizers (bit for bit the reference ones). */
void q8_0_quantize_avx2(const float *src, void *dst, int64_t n);
void q8_k_quantize_avx2(const float *src, void *dst, int64_t n);

#endif
