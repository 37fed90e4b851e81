/* quant.h — block layouts of the quantized GGUF types and the kernels of every code path.
 * Internal to src/kernels: the rest of prima reaches these through the table in types.h.
 *
 * Layouts are those of the GGUF format (QK_K = 256 for the K-quants), little-endian. A block's
 * dequantized values, element e of the block:
 *   Q4_0    d * (nibble - 8)                     nibble e<16: qs[e] low, else qs[e-16] high
 *   Q8_0    d * qs[e]
 *   IQ4_NL  d * iq4nl_values[nibble]             nibbles as Q4_0
 *   MXFP4   2^(e-128) * mxfp4_values[nibble]     nibbles as Q4_0; e an 8-bit exponent (E8M0)
 *   Q2_K    d*sc[e/16]*q - dmin*m[e/16]          q 2 bits; sc, m 4 bits each in scales[e/16]
 *   Q3_K    d*(sc[e/16] - 32) * (q - 4*!hbit)    q 2 bits as Q2_K, hbit from hmask, sc 6 bits
 *   Q4_K    d*sc[e/32]*q - dmin*m[e/32]          q 4 bits; sc, m 6 bits packed in scales[12]
 *   Q5_K    as Q4_K with a fifth bit from qh
 *   Q6_K    d*scales[e/16]*(q - 32)              q 6 bits: 4 in ql, 2 in qh; int8 scales
 *   Q8_K    d * qs[e] (float d); bsums[k] = sum of qs[16k..16k+15] — activations only
 * The *_levels() decoders below are the executable form of this table for the K-quants. */
#ifndef PRIMA_KERNELS_QUANT_H
#define PRIMA_KERNELS_QUANT_H

#include <stdint.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/types.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "GGUF blocks are little-endian; big-endian hosts are not supported"
#endif

#if defined(__clang__)
/* The quantizers must round identically everywhere; never fuse a multiply into a later add. */
#pragma STDC FP_CONTRACT OFF
#endif

#define QK 32     /* elements per block of Q4_0, Q8_0, IQ4_NL */
#define QK_K 256  /* elements per block of the K-quants */

typedef struct { uint16_t d; uint8_t qs[QK / 2]; } block_q4_0;
typedef struct { uint16_t d; int8_t qs[QK]; } block_q8_0;
typedef struct { uint16_t d; uint8_t qs[QK / 2]; } block_iq4_nl;
typedef struct { uint8_t e; uint8_t qs[QK / 2]; } block_mxfp4;
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; } block_q2_k;
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; } block_q3_k;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; } block_q4_k;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_k;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_k;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_k;

_Static_assert(sizeof(block_q4_0) == 18, "Q4_0 layout");
_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 layout");
_Static_assert(sizeof(block_iq4_nl) == 18, "IQ4_NL layout");
_Static_assert(sizeof(block_mxfp4) == 17, "MXFP4 layout");
_Static_assert(sizeof(block_q2_k) == 84, "Q2_K layout");
_Static_assert(sizeof(block_q3_k) == 110, "Q3_K layout");
_Static_assert(sizeof(block_q4_k) == 144, "Q4_K layout");
_Static_assert(sizeof(block_q5_k) == 176, "Q5_K layout");
_Static_assert(sizeof(block_q6_k) == 210, "Q6_K layout");
_Static_assert(sizeof(block_q8_k) == 292, "Q8_K layout");

/* The 16 levels of IQ4_NL (a non-uniform 4-bit grid, part of the format). */
extern const int8_t iq4nl_values[16];
/* MXFP4's: the FP4 (E2M1) values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, doubled to
 * integers; the block's scale is then half its power of two. */
extern const int8_t mxfp4_values[16];

/* An MXFP4 block's scale: 2^(e - 128), exact (subnormal for e < 2). */
static inline float mxfp4_scale(uint8_t e)
{
    if (e < 2)
        return e ? 0x1p-127f : 0x1p-128f;
    uint32_t bits = (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The rounding rule of every quantizer: to nearest, ties to even — the IEEE default, and what
 * cvtps2dq (x86) and fcvtns (ARM) do — so a SIMD quantizer can reproduce it bit for bit.
 * Exact for |x| < 2^22; beyond that (or for NaN) it returns some value in (-2^22, 2^22) that the
 * caller's clamp bounds. Adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits. */
static inline int32_t q_round(float x)
{
    return (int32_t)(f32_to_bits(x + 12582912.0f) & 0x7fffff) - 0x400000;
}

/* max |x| over n values, or NaN when one of them is NaN. An activation quantizer keeps a NaN in
 * its scale (so the dot products come out NaN, as they would in float) instead of skipping it as
 * fmaxf does: a damaged model then stops with NaN logits rather than producing finite garbage. */
static inline float q_abs_max(const float *x, int n)
{
    float m = 0;
    for (int j = 0; j < n; j++) {
        float a = x[j] < 0 ? -x[j] : x[j];
        m = a > m || a != a ? a : m; /* once m is NaN, nothing replaces it */
    }
    return m;
}

static inline int32_t clampi(int32_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Exact integer dot product of two byte vectors (the scalar paths' inner loop). */
static inline int32_t dot_i8(const int8_t *q, const int8_t *a, int len)
{
    int32_t t = 0;
    for (int l = 0; l < len; l++)
        t += q[l] * a[l];
    return t;
}

/* Q4_K / Q5_K: the eight 6-bit scales and mins packed in 12 bytes. Sub-blocks 0-3 keep their
 * scale and min in the low 6 bits of bytes 0-3 and 4-7; sub-blocks 4-7 keep the low 4 bits in
 * the nibbles of bytes 8-11 and the top 2 bits in the spare high bits of bytes 0-7. */
static inline void k4_unpack_scales_u64(const uint8_t packed[12], uint64_t *sc, uint64_t *m)
{
    uint32_t u[3];
    memcpy(u, packed, 12);
    uint32_t s_lo = u[0] & 0x3f3f3f3f, m_lo = u[1] & 0x3f3f3f3f;
    uint32_t s_hi = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    *sc = s_lo | (uint64_t)s_hi << 32;
    *m = m_lo | (uint64_t)m_hi << 32;
}

static inline void k4_unpack_scales(const uint8_t packed[12], uint8_t sc[8], uint8_t m[8])
{
    uint64_t s, mn;
    k4_unpack_scales_u64(packed, &s, &mn);
    memcpy(sc, &s, 8);
    memcpy(m, &mn, 8);
}

/* Q3_K: sixteen 6-bit scales (stored + 32) in 12 bytes: low nibbles in bytes 0-7 (scales 0-7
 * low nibble, 8-15 high nibble), top 2 bits of scale j at bits 2*(j/4) of byte 8 + j%4.
 * Returns the stored (offset) values, scales 0-7 in lo and 8-15 in hi, one per byte. */
static inline void k3_unpack_scales_u64(const uint8_t packed[12], uint64_t *lo, uint64_t *hi)
{
    uint64_t l;
    uint32_t h;
    memcpy(&l, packed, 8);
    memcpy(&h, packed + 8, 4);
    uint64_t top_lo = (h & 0x03030303u) | (uint64_t)((h >> 2) & 0x03030303u) << 32;
    uint64_t top_hi = ((h >> 4) & 0x03030303u) | (uint64_t)((h >> 6) & 0x03030303u) << 32;
    *lo = (l & 0x0f0f0f0f0f0f0f0full) | top_lo << 4;
    *hi = ((l >> 4) & 0x0f0f0f0f0f0f0f0full) | top_hi << 4;
}

static inline void k3_unpack_scales(const uint8_t packed[12], int8_t sc[16])
{
    uint64_t v[2];
    k3_unpack_scales_u64(packed, &v[0], &v[1]);
    uint8_t u[16];
    memcpy(u, v, 16);
    for (int j = 0; j < 16; j++)
        sc[j] = (int8_t)(u[j] - 32);
}

/* All 256 levels of a K-quant block in element order, as the format defines them (loops shaped
 * so that compilers vectorize them: this is also the scalar path's decoder). */
static inline void q2_k_levels(const block_q2_k *b, int8_t q[QK_K])
{
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                q[128 * h + 32 * g + l] = (int8_t)((b->qs[32 * h + l] >> (2 * g)) & 3);
}

static inline void q3_k_levels(const block_q3_k *b, int8_t q[QK_K])
{
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                int low = (b->qs[32 * h + l] >> (2 * g)) & 3;
                int high = (b->hmask[l] >> (4 * h + g)) & 1;
                q[128 * h + 32 * g + l] = (int8_t)(low + 4 * high - 4);
            }
}

static inline void q4_k_levels(const block_q4_k *b, int8_t q[QK_K])
{
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = (int8_t)(b->qs[32 * c + l] & 0xf);
            q[64 * c + 32 + l] = (int8_t)(b->qs[32 * c + l] >> 4);
        }
}

static inline void q5_k_levels(const block_q5_k *b, int8_t q[QK_K])
{
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = (int8_t)((b->qs[32 * c + l] & 0xf) | ((b->qh[l] >> (2 * c)) & 1) << 4);
            q[64 * c + 32 + l] = (int8_t)((b->qs[32 * c + l] >> 4) | ((b->qh[l] >> (2 * c + 1)) & 1) << 4);
        }
}

static inline void q6_k_levels(const block_q6_k *b, int8_t q[QK_K])
{
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *ql = b->ql + 64 * h;
            int hb = b->qh[32 * h + l];
            q[128 * h + l] = (int8_t)(((ql[l] & 0xf) | (hb & 3) << 4) - 32);
            q[128 * h + 32 + l] = (int8_t)(((ql[32 + l] & 0xf) | ((hb >> 2) & 3) << 4) - 32);
            q[128 * h + 64 + l] = (int8_t)(((ql[l] >> 4) | ((hb >> 4) & 3) << 4) - 32);
            q[128 * h + 96 + l] = (int8_t)(((ql[32 + l] >> 4) | ((hb >> 6) & 3) << 4) - 32);
        }
}

/* Every type's functions, by the names the table in types.c expects:
 *   NAME_to_float, NAME_from_float (scalar only: one definition of quantization everywhere),
 *   NAME_dot_PATH for each path that implements it (a missing path falls back, types.c; the
 *   x86 paths compute most types with the tile kernels of matmul.h instead). */
#define KERN_DECLARE(name)                                                        \
    void name##_to_float(const void *src, float *dst, int64_t n);                 \
    void name##_from_float(const float *src, void *dst, int64_t n);               \
    void name##_dot_scalar(int n, float *s, const void *w, const void *a);        \
    void name##_dot_avx2(int n, float *s, const void *w, const void *a);          \
    void name##_dot_neon(int n, float *s, const void *w, const void *a);

KERN_DECLARE(f32)
KERN_DECLARE(f16)
KERN_DECLARE(bf16)
KERN_DECLARE(q4_0)
KERN_DECLARE(q8_0)
KERN_DECLARE(iq4_nl)
KERN_DECLARE(mxfp4)
KERN_DECLARE(q2_k)
KERN_DECLARE(q3_k)
KERN_DECLARE(q4_k)
KERN_DECLARE(q5_k)
KERN_DECLARE(q6_k)
KERN_DECLARE(q8_k)

#endif
