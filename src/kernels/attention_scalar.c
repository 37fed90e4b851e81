/* attention_scalar.c — the portable bodies of the attention primitives (attention.h). */
#include <stdbool.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/half.h"

static inline float load_row(const void *row, int d, bool f16)
{
    return f16 ? half_to_f32(((const uint16_t *)row)[d]) : ((const float *)row)[d];
}

static void scores_scalar(int n, int nh, const float *q, int nk, const uint16_t *k,
                          size_t stride, float scale, float *s, int ls)
{
    for (int j = 0; j < nk; j++) {
        const uint16_t *kr = k + (size_t)j * stride;
        for (int h = 0; h < nh; h++) {
            const float *qh = q + (size_t)h * n;
            float sum = 0;
            for (int d = 0; d < n; d++)
                sum += qh[d] * half_to_f32(kr[d]);
            s[(size_t)h * ls + j] = sum * scale;
        }
    }
}

static inline void accumulate_body(int n, int nh, float *acc, const float *p, int ls, int nk,
                                   const void *v, size_t stride, bool f16)
{
    for (int j = 0; j < nk; j++) {
        const void *vr = f16 ? (const void *)((const uint16_t *)v + (size_t)j * stride)
                             : (const void *)((const float *)v + (size_t)j * stride);
        for (int d = 0; d < n; d++) {
            float x = load_row(vr, d, f16);
            for (int h = 0; h < nh; h++)
                acc[(size_t)h * n + d] += p[(size_t)h * ls + j] * x;
        }
    }
}

static void accumulate_f16_scalar(int n, int nh, float *acc, const float *p, int ls, int nk,
                                  const uint16_t *v, size_t stride)
{
    accumulate_body(n, nh, acc, p, ls, nk, v, stride, true);
}

static void accumulate_f32_scalar(int n, int nh, float *acc, const float *p, int ls, int nk,
                                  const float *v, size_t stride)
{
    accumulate_body(n, nh, acc, p, ls, nk, v, stride, false);
}

static float exp_scalar(float x)
{
    if (x != x)
        return x;
    if (x < ATTN_EXP_MIN)
        return 0.0f;
    x = x > ATTN_EXP_MAX ? ATTN_EXP_MAX : x;
    float t = x * ATTN_LOG2E;
    float nf = (float)(int)(t < 0 ? t - 0.5f : t + 0.5f);
    float r = x - nf * ATTN_LN2_HI - nf * ATTN_LN2_LO;
    float p = ATTN_EXP_C6;
    p = p * r + ATTN_EXP_C5;
    p = p * r + ATTN_EXP_C4;
    p = p * r + ATTN_EXP_C3;
    p = p * r + ATTN_EXP_C2;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits = (uint32_t)((int)nf + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

static float exp_sum_scalar(int nk, float *s, float m)
{
    float sum = 0;
    for (int j = 0; j < nk; j++) {
        s[j] = exp_scalar(s[j] - m);
        sum += s[j];
    }
    return sum;
}

const attn_vec_ops attn_vec_ops_scalar = {scores_scalar, accumulate_f16_scalar,
                                          accumulate_f32_scalar, exp_sum_scalar};
