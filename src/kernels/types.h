/* types.h — what the kernels can compute with each weight type: one table of traits.
 *
 * Each computable type names the activation format its dot product consumes (act_type): the
 * integer paths quantize activations on the fly to an 8-bit block type (Q8_0 for the 32-blocks,
 * Q8_K for the 256-blocks), the float types take F32 activations. The choice is fixed per type and
 * identical on every device, so a ring computes exactly what one device computes:
 *
 *   weight type                       act_type  why
 *   F32, F16, BF16                    F32       no activation rounding; float FMA keeps up with
 *                                               memory at 2-4 bytes per weight
 *   Q4_0, Q8_0, IQ4_NL                Q8_0      32-element blocks: one 8-bit block per weight block
 *   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K      Q8_K      256-element super-blocks; Q8_K's 16-element sums
 *                                               apply the sub-block minimums/offsets in one step
 *   Q8_K (activation format only)     Q8_K
 *
 * The activation quantizers are kern_type_get(act_type)->from_float: one scalar definition
 * (round to nearest, ties to even) used by every path, so they give the same bytes everywhere.
 * from_float of the weight types is the reference quantizer (scale search for the K-quants);
 * n passed to to_float / from_float / vec_dot is a multiple of the type's block size.
 *
 * vec_dot is resolved once by kern_init() from the CPU's features (cpu.h); every path must agree
 * with the scalar reference within the tolerance stated in tests/support/quant_check.c. */
#ifndef PRIMA_KERNEL_TYPES_H
#define PRIMA_KERNEL_TYPES_H

#include <stdint.h>

#include "gguf/dtype.h"

/* s = dot(row of n weights at w, n activations at a in act_type's layout) */
typedef void (*vec_dot_fn)(int n, float *s, const void *w, const void *a);

typedef struct kern_type {
    enum dtype type;
    enum dtype act_type;
    void (*to_float)(const void *src, float *dst, int64_t n);   /* n multiple of block size */
    void (*from_float)(const float *src, void *dst, int64_t n); /* reference quantizer */
    vec_dot_fn vec_dot;
} kern_type;

/* NULL if the kernels cannot compute with this type (the caller reports it by name). */
const kern_type *kern_type_get(enum dtype t);

enum kern_path { KERN_SCALAR, KERN_AVX2, KERN_AVX512, KERN_NEON };

/* Detect the CPU and bind the fastest available path. Idempotent and thread-safe. */
void kern_init(void);
/* Tests and benchmarks: bind a specific path; returns -1 if this CPU/build cannot run it. */
int kern_use_path(enum kern_path p);
enum kern_path kern_active_path(void);
const char *kern_path_name(enum kern_path p);

/* IEEE half and bfloat16 conversions (round to nearest even). */
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

#endif
