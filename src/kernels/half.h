/* half.h — IEEE binary16 and bfloat16 conversions, inline for the kernels' inner loops.
 *
 * These scalar definitions are the truth: every SIMD conversion (F16C, NEON) must give the same
 * bits, which holds because both round to nearest even and both quiet a NaN by setting the top
 * mantissa bit while keeping the upper payload bits. The public wrappers are in types.h. */
#ifndef PRIMA_KERNELS_HALF_H
#define PRIMA_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

static inline float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f)                          /* inf, NaN (payload kept) */
        return bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp)                                  /* normal: rebias 15 -> 127 */
        return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
    /* zero or subnormal: man * 2^-24 is exact in binary32 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
}

static inline uint16_t f32_to_half(float f)
{
    uint32_t x = f32_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)                     /* NaN: quiet it, keep the upper payload */
        return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x477ff000u)                    /* >= 65520 rounds to infinity */
        return sign | 0x7c00;
    if (ax < 0x38800000u) {                   /* below 2^-14: a subnormal half (or zero) */
        /* scale so one unit is 2^-24 (exact), then round to an integer, ties to even: adding
         * 1.5 * 2^23 leaves exactly the integer part in the low mantissa bits */
        float v = bits_to_f32(ax) * 16777216.0f + 12582912.0f;
        return (uint16_t)(sign | ((f32_to_bits(v) & 0x7fffff) - 0x400000));
    }
    /* normal: rebias the exponent and round the mantissa to 10 bits, ties to even; a carry out of
     * the mantissa correctly bumps the exponent */
    uint32_t r = ax - (112u << 23) + 0xfff + ((ax >> 13) & 1);
    return (uint16_t)(sign | (r >> 13));
}

static inline float bf16_to_f32(uint16_t h)
{
    return bits_to_f32((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)     /* NaN: quiet it */
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

#endif
