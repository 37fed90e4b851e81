/* The portable reference of the float types and the 32-element block types (Q4_0, Q8_0, IQ4_NL):
 * conversions, quantizers and dot products. Dot products against Q8_0 activations accumulate
 * each block exactly in integers and scale once per block. */
#include <math.h>
#include <string.h>

#include "kernels/quant.h"

const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1, 13, 25, 38, 53, 69, 89, 113};

/* ---- F32, F16, BF16: dot products take F32 activations ---- */

void f32_to_float(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void f32_from_float(const float *src, void *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void f16_to_float(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = half_to_f32(h[i]);
}

void f16_from_float(const float *src, void *dst, int64_t n)
{
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = f32_to_half(src[i]);
}

void bf16_to_float(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32(h[i]);
}

void bf16_from_float(const float *src, void *dst, int64_t n)
{
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = f32_to_bf16(src[i]);
}

/* The float dots accumulate in double: the reference should be the most exact of the paths. */
void f32_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const float *x = w, *y = a;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)x[i] * y[i];
    *s = (float)sum;
}

void f16_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w;
    const float *y = a;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)half_to_f32(x[i]) * y[i];
    *s = (float)sum;
}

void bf16_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w;
    const float *y = a;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)bf16_to_f32(x[i]) * y[i];
    *s = (float)sum;
}

/* ---- Q8_0: the activation format of the 32-blocks, and a weight type ---- */

/* d = max|x| / 127, q = round(x * 127 / max|x|). This is the activation quantizer of every
 * 32-block dot product on every path and device, so it is defined once, here. */
void q8_0_from_float(const float *src, void *dst, int64_t n)
{
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK) {
        float amax = q_abs_max(src, QK);
        float id = amax > 0 ? 127.0f / amax : 0.0f;
        b[i].d = f32_to_half(amax / 127.0f);
        for (int j = 0; j < QK; j++)
            b[i].qs[j] = (int8_t)clampi(q_round(src[j] * id), -127, 127);
    }
}

void q8_0_to_float(const void *src, float *dst, int64_t n)
{
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        float d = half_to_f32(b[i].d);
        for (int j = 0; j < QK; j++)
            dst[j] = d * b[i].qs[j];
    }
}

void q8_0_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const block_q8_0 *x = w, *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK; i++) {
        sum += half_to_f32(x[i].d) * half_to_f32(y[i].d) * (float)dot_i8(x[i].qs, y[i].qs, QK);
    }
    *s = sum;
}

/* ---- Q4_0 ---- */

/* The value of largest magnitude maps to level -8 (the grid is [-8, 7]), so its sign decides
 * which end of the grid gets the extra level. */
void q4_0_from_float(const float *src, void *dst, int64_t n)
{
    block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK) {
        float big = 0;
        for (int j = 0; j < QK; j++)
            if (fabsf(src[j]) > fabsf(big))
                big = src[j];
        b[i].d = f32_to_half(big / -8.0f);
        float d = half_to_f32(b[i].d);
        float id = d != 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < QK / 2; j++) {
            int lo = clampi(q_round(src[j] * id) + 8, 0, 15);
            int hi = clampi(q_round(src[j + QK / 2] * id) + 8, 0, 15);
            b[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

void q4_0_to_float(const void *src, float *dst, int64_t n)
{
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        float d = half_to_f32(b[i].d);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = d * ((b[i].qs[j] & 0xf) - 8);
            dst[j + QK / 2] = d * ((b[i].qs[j] >> 4) - 8);
        }
    }
}

void q4_0_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK; i++) {
        int8_t q[QK];
        for (int j = 0; j < QK / 2; j++) {
            q[j] = (int8_t)((x[i].qs[j] & 0xf) - 8);
            q[j + QK / 2] = (int8_t)((x[i].qs[j] >> 4) - 8);
        }
        sum += half_to_f32(x[i].d) * half_to_f32(y[i].d) * (float)dot_i8(q, y[i].qs, QK);
    }
    *s = sum;
}

/* ---- IQ4_NL ---- */

static int iq4nl_nearest(float v)
{
    int lo = 0, hi = 15;  /* binary search the sorted grid for the closest level */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < iq4nl_values[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - iq4nl_values[lo] <= iq4nl_values[hi] - v ? lo : hi;
}

/* Least-squares error of x ≈ d * grid[idx] with the best d for a given assignment. */
static float iq4nl_fit(const float *x, float iscale, uint8_t idx[QK], float *d)
{
    float sxv = 0, svv = 0, sxx = 0;
    for (int j = 0; j < QK; j++) {
        idx[j] = (uint8_t)iq4nl_nearest(x[j] * iscale);
        float v = iq4nl_values[idx[j]];
        sxv += x[j] * v;
        svv += v * v;
        sxx += x[j] * x[j];
    }
    *d = svv > 0 ? sxv / svv : 0;
    return sxx - *d * sxv;
}

/* Search scales around "largest magnitude -> level -127" and keep the least-squares best. */
void iq4_nl_from_float(const float *src, void *dst, int64_t n)
{
    block_iq4_nl *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK) {
        float big = 0;
        for (int j = 0; j < QK; j++)
            if (fabsf(src[j]) > fabsf(big))
                big = src[j];
        float d = 0;
        if (big != 0) {
            uint8_t idx[QK];
            float best_err = INFINITY;
            for (int k = -12; k <= 12; k++) {
                float cand, err = iq4nl_fit(src, (-127.0f + 2.0f * k) / big, idx, &cand);
                if (err < best_err) {
                    best_err = err;
                    d = cand;
                }
            }
        }
        b[i].d = f32_to_half(d);
        float dq = half_to_f32(b[i].d);
        float id = dq != 0 ? 1.0f / dq : 0.0f;
        for (int j = 0; j < QK / 2; j++)
            b[i].qs[j] = (uint8_t)(iq4nl_nearest(src[j] * id) | iq4nl_nearest(src[j + QK / 2] * id) << 4);
    }
}

/* ---- MXFP4 ---- */

const int8_t mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* The code of the level nearest v (in doubled units; ties: the smaller magnitude). */
static int mxfp4_nearest(float v)
{
    int best = 0;
    for (int c = 1; c < 16; c++)
        if (fabsf(v - mxfp4_values[c]) < fabsf(v - mxfp4_values[best]))
            best = c;
    return best;
}

/* The smallest power-of-two scale that brings the block's largest magnitude within the
 * largest level (12), then each value to its nearest level. */
void mxfp4_from_float(const float *src, void *dst, int64_t n)
{
    block_mxfp4 *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK) {
        float amax = 0;
        for (int j = 0; j < QK; j++)
            amax = fabsf(src[j]) > amax ? fabsf(src[j]) : amax;
        int e = 0;
        while (e < 254 && amax > 12.0f * mxfp4_scale((uint8_t)e))
            e++;
        b[i].e = (uint8_t)e;
        const float id = 1.0f / mxfp4_scale((uint8_t)e);
        for (int j = 0; j < QK / 2; j++)
            b[i].qs[j] = (uint8_t)(mxfp4_nearest(src[j] * id) |
                                   mxfp4_nearest(src[j + QK / 2] * id) << 4);
    }
}

/* The 32 levels of a block whose nibbles index a table (MXFP4, IQ4_NL), in element order. */
static void table_levels(const int8_t *levels, const uint8_t *qs, int8_t q[QK])
{
    for (int j = 0; j < QK / 2; j++) {
        q[j] = levels[qs[j] & 0xf];
        q[j + QK / 2] = levels[qs[j] >> 4];
    }
}

static void table_to_float(const int8_t *levels, const uint8_t *qs, float d, float *dst)
{
    int8_t q[QK];
    table_levels(levels, qs, q);
    for (int j = 0; j < QK; j++)
        dst[j] = d * q[j];
}

void mxfp4_to_float(const void *src, float *dst, int64_t n)
{
    const block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK)
        table_to_float(mxfp4_values, b[i].qs, mxfp4_scale(b[i].e), dst);
}

void mxfp4_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const block_mxfp4 *x = w;
    const block_q8_0 *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK; i++) {
        int8_t q[QK];
        table_levels(mxfp4_values, x[i].qs, q);
        sum += mxfp4_scale(x[i].e) * half_to_f32(y[i].d) * (float)dot_i8(q, y[i].qs, QK);
    }
    *s = sum;
}

void iq4_nl_to_float(const void *src, float *dst, int64_t n)
{
    const block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK)
        table_to_float(iq4nl_values, b[i].qs, half_to_f32(b[i].d), dst);
}

void iq4_nl_dot_scalar(int n, float *s, const void *w, const void *a)
{
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK; i++) {
        int8_t q[QK];
        table_levels(iq4nl_values, x[i].qs, q);
        sum += half_to_f32(x[i].d) * half_to_f32(y[i].d) * (float)dot_i8(q, y[i].qs, QK);
    }
    *s = sum;
}
