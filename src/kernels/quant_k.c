/* The portable reference of the K-quants (256-element super-blocks): dequantization and dot
 * products against Q8_K activations, plus the Q8_K activation quantizer itself. Quantizers of
 * the weight types (the scale searches) are in quant_k_search.c.
 *
 * Every dot product sums each sub-block exactly in integers, weights the sub-block sums by their
 * integer scales (still exact: the totals stay far below 2^31), and scales once per super-block.
 * The minimum terms (dmin * m * sum of activations) use the precomputed Q8_K bsums. */
#include <math.h>

#include "kernels/quant.h"

/* ---- Q8_K: activations of the K-quant dot products ---- */

/* As q8_0_from_float with a float scale per 256 values, plus the sums of each 16 levels that let
 * the weight kernels apply their per-sub-block minimums and offsets in one step. */
void q8_k_from_float(const float *src, void *dst, int64_t n)
{
    block_q8_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax = q_abs_max(src, QK_K);
        float id = amax > 0 ? 127.0f / amax : 0.0f;
        b[i].d = amax / 127.0f;
        for (int j = 0; j < QK_K; j++)
            b[i].qs[j] = (int8_t)clampi(q_round(src[j] * id), -127, 127);
        for (int k = 0; k < QK_K / 16; k++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += b[i].qs[16 * k + l];
            b[i].bsums[k] = (int16_t)sum;
        }
    }
}

void q8_k_to_float(const void *src, float *dst, int64_t n)
{
    const block_q8_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K)
        for (int j = 0; j < QK_K; j++)
            dst[j] = b[i].d * b[i].qs[j];
}

void q8_k_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const block_q8_k *x = w, *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++)
        sum += x[i].d * y[i].d * (float)dot_i8(x[i].qs, y[i].qs, QK_K);
    *s = sum;
}

/* ---- Q2_K ---- */

void q2_k_to_float(const void *src, float *dst, int64_t n)
{
    const block_q2_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        int8_t q[QK_K];
        q2_k_levels(&b[i], q);
        float d = half_to_f32(b[i].d), dmin = half_to_f32(b[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            uint8_t sm = b[i].scales[e / 16];
            dst[e] = d * (sm & 0xf) * q[e] - dmin * (sm >> 4);
        }
    }
}

void q2_k_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const block_q2_k *x = w;
    const block_q8_k *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        q2_k_levels(&x[i], q);
        int32_t isum = 0, imin = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            isum += (x[i].scales[j] & 0xf) * dot_i8(q + 16 * j, y[i].qs + 16 * j, 16);
            imin += (x[i].scales[j] >> 4) * y[i].bsums[j];
        }
        sum += y[i].d * half_to_f32(x[i].d) * (float)isum - y[i].d * half_to_f32(x[i].dmin) * (float)imin;
    }
    *s = sum;
}

/* ---- Q3_K ---- */

void q3_k_to_float(const void *src, float *dst, int64_t n)
{
    const block_q3_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        int8_t sc[16], q[QK_K];
        k3_unpack_scales(b[i].scales, sc);
        q3_k_levels(&b[i], q);
        float d = half_to_f32(b[i].d);
        for (int e = 0; e < QK_K; e++)
            dst[e] = d * sc[e / 16] * q[e];
    }
}

void q3_k_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const block_q3_k *x = w;
    const block_q8_k *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K], sc[16];
        q3_k_levels(&x[i], q);
        k3_unpack_scales(x[i].scales, sc);
        int32_t isum = 0;
        for (int j = 0; j < QK_K / 16; j++)
            isum += sc[j] * dot_i8(q + 16 * j, y[i].qs + 16 * j, 16);
        sum += y[i].d * half_to_f32(x[i].d) * (float)isum;
    }
    *s = sum;
}

/* ---- Q4_K and Q5_K: eight 32-element sub-blocks with 6-bit scales and mins ---- */

/* Shared tail of the Q4_K / Q5_K dequantization: levels q (0..31) of one super-block, its packed
 * scales. */
static void k4_block_to_float(const int8_t q[QK_K], const uint8_t packed[12], uint16_t d16,
                              uint16_t dmin16, float *dst)
{
    uint8_t sc[8], m[8];
    k4_unpack_scales(packed, sc, m);
    float d = half_to_f32(d16), dmin = half_to_f32(dmin16);
    for (int e = 0; e < QK_K; e++)
        dst[e] = d * sc[e / 32] * q[e] - dmin * m[e / 32];
}

void q4_k_to_float(const void *src, float *dst, int64_t n)
{
    const block_q4_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        int8_t q[QK_K];
        q4_k_levels(&b[i], q);
        k4_block_to_float(q, b[i].scales, b[i].d, b[i].dmin, dst);
    }
}

void q5_k_to_float(const void *src, float *dst, int64_t n)
{
    const block_q5_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        int8_t q[QK_K];
        q5_k_levels(&b[i], q);
        k4_block_to_float(q, b[i].scales, b[i].d, b[i].dmin, dst);
    }
}

/* Shared tail of the Q4_K / Q5_K dot: levels q (0..31) of one super-block, its packed scales. */
static float k4_block_dot(const int8_t q[QK_K], const uint8_t packed[12], uint16_t d,
                          uint16_t dmin, const block_q8_k *y)
{
    uint8_t sc[8], m[8];
    k4_unpack_scales(packed, sc, m);
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        isum += sc[j] * dot_i8(q + 32 * j, y->qs + 32 * j, 32);
        imin += m[j] * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    return y->d * half_to_f32(d) * (float)isum - y->d * half_to_f32(dmin) * (float)imin;
}

void q4_k_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const block_q4_k *x = w;
    const block_q8_k *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        q4_k_levels(&x[i], q);
        sum += k4_block_dot(q, x[i].scales, x[i].d, x[i].dmin, &y[i]);
    }
    *s = sum;
}

void q5_k_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const block_q5_k *x = w;
    const block_q8_k *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        q5_k_levels(&x[i], q);
        sum += k4_block_dot(q, x[i].scales, x[i].d, x[i].dmin, &y[i]);
    }
    *s = sum;
}

/* ---- Q6_K ---- */

void q6_k_to_float(const void *src, float *dst, int64_t n)
{
    const block_q6_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        int8_t q[QK_K];
        q6_k_levels(&b[i], q);
        float d = half_to_f32(b[i].d);
        for (int e = 0; e < QK_K; e++)
            dst[e] = d * b[i].scales[e / 16] * q[e];
    }
}

void q6_k_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const block_q6_k *x = w;
    const block_q8_k *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        q6_k_levels(&x[i], q);
        int32_t isum = 0;
        for (int j = 0; j < QK_K / 16; j++)
            isum += x[i].scales[j] * dot_i8(q + 16 * j, y[i].qs + 16 * j, 16);
        sum += y[i].d * half_to_f32(x[i].d) * (float)isum;
    }
    *s = sum;
}
