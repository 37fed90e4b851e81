/* ops.c — the element-wise ops of a transformer layer.
 *
 * The math follows the reference implementation's definitions: RMSNorm accumulates the squares in
 * double and applies 1/sqrt(mean + eps) before the weight; softmax sums exponentials in double;
 * SiLU is x / (1 + e^-x). These ops are a negligible share of a forward pass next to the matrix
 * products, so they stay portable C. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kern_impl.h"

const kern_type *kern_type_require(enum dtype t)
{
    const kern_type *kt = kern_type_get(t);
    if (!kt) {
        /* Callers validate tensor types when a model is loaded; reaching this is a bug. */
        const dtype_info *di = dtype_get((uint32_t)t);
        fprintf(stderr, "prima: kernels cannot compute with tensor type %s\n",
                di && di->name ? di->name : "(unknown)");
        abort();
    }
    return kt;
}

void kern_get_row(const void *w, enum dtype wt, int n_in, int row, float *out)
{
    const kern_type *kt = kern_type_require(wt);
    uint64_t row_bytes = dtype_row_bytes(wt, (uint64_t)n_in);
    kt->to_float((const uint8_t *)w + (uint64_t)row * row_bytes, out, n_in);
}

void kern_rmsnorm(float *out, const float *x, const float *weight, int n, float eps)
{
    /* Four partial sums keep the loop from being one long dependency chain; in double they
     * round no worse than a single sum. */
    double s[4] = {0, 0, 0, 0};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            s[k] += (double)(x[i + k] * x[i + k]);
    for (; i < n; i++)
        s[0] += (double)(x[i] * x[i]);
    float mean = (float)((s[0] + s[1] + s[2] + s[3]) / n);
    float scale = 1.0f / sqrtf(mean + eps);
    for (i = 0; i < n; i++)
        out[i] = (x[i] * scale) * weight[i];
}

void kern_add(float *y, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += x[i];
}

void kern_silu_mul(float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++)
        gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void kern_gelu_mul(float *gate, const float *up, int n)
{
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int i = 0; i < n; i++) {
        float x = gate[i];
        gate[i] = 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x))) * up[i];
    }
}

void kern_softmax(float *x, int n)
{
    float max = -INFINITY;
    for (int i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void kern_rope_angles(int pos, const rope_params *rp, float *cs, float *sn)
{
    /* freq_i = base^(-2i/n_rot) by repeated multiplication: in double the accumulated rounding
     * stays near 1e-14, far below float resolution. */
    const int half = rp->n_rot / 2;
    double step = pow(rp->freq_base, -2.0 / rp->n_rot), freq = 1.0;
    for (int i = 0; i < half; i++, freq *= step) {
        double theta = pos * freq * rp->freq_scale;
        if (rp->freq_factors)
            theta /= rp->freq_factors[i];
        cs[i] = (float)cos(theta);
        sn[i] = (float)sin(theta);
    }
}

void kern_rope(float *x, int n_heads, int head_dim, int pos, const rope_params *rp)
{
    /* One angle per rotated pair, shared by all heads; computed in double so that large
     * positions keep their precision before the final rounding to float. */
    int half = rp->n_rot / 2;
    if (half > KERN_MAX_HEAD_DIM / 2 || rp->n_rot > head_dim) {
        fprintf(stderr, "prima: rope: %d rotated dims of a %d-dim head (at most %d)\n", rp->n_rot,
                head_dim, KERN_MAX_HEAD_DIM);
        abort();
    }
    float cs[KERN_MAX_HEAD_DIM / 2], sn[KERN_MAX_HEAD_DIM / 2];
    kern_rope_angles(pos, rp, cs, sn);
    /* Normal ordering rotates adjacent pairs (2i, 2i+1); NeoX pairs the two halves. */
    int stride = rp->neox ? 1 : 2, other = rp->neox ? half : 1;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            float *a = v + i * stride, *b = a + other;
            float x0 = *a, x1 = *b;
            *a = x0 * cs[i] - x1 * sn[i];
            *b = x0 * sn[i] + x1 * cs[i];
        }
    }
}
