/* ARM NEON dot products (ARMv8.2-A with the dot-product extension): SDOT multiplies signed bytes
 * directly, so levels are made signed (offsets subtracted in bytes) and each 16- or 32-element
 * sub-block's int32 sums are weighted by its integer scale before one float scaling per block. */
#include <arm_neon.h>

#include "kernels/quant.h"

/* fp16 -> fp32 in hardware; exact, so identical to half_to_f32. */
static inline float half_hw(uint16_t h)
{
    __fp16 f;
    memcpy(&f, &h, sizeof f);
    return (float)f;
}

/* sum over 32 signed bytes w[i] * a[i] as four int32 lanes */
static inline int32x4_t dot32(int8x16_t w0, int8x16_t w1, const int8_t *a)
{
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(a)), w1, vld1q_s8(a + 16));
}

/* ---- float weights, F32 activations ---- */

static inline float32x4_t load4_f32(const void *p, int i) { return vld1q_f32((const float *)p + i); }
static inline float32x4_t load4_f16(const void *p, int i)
{
    return vcvt_f32_f16(vld1_f16((const __fp16 *)p + i));
}
static inline float32x4_t load4_bf16(const void *p, int i)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p + i), 16));
}
static inline float one_f32(const void *p, int i) { return ((const float *)p)[i]; }
static inline float one_f16(const void *p, int i) { return half_hw(((const uint16_t *)p)[i]); }
static inline float one_bf16(const void *p, int i) { return bf16_to_f32(((const uint16_t *)p)[i]); }

static inline __attribute__((always_inline)) float
dot_float(int n, const void *w, const float *y, float32x4_t (*load4)(const void *, int),
          float (*one)(const void *, int))
{
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = vfmaq_f32(acc0, load4(w, i), vld1q_f32(y + i));
        acc1 = vfmaq_f32(acc1, load4(w, i + 4), vld1q_f32(y + i + 4));
        acc2 = vfmaq_f32(acc2, load4(w, i + 8), vld1q_f32(y + i + 8));
        acc3 = vfmaq_f32(acc3, load4(w, i + 12), vld1q_f32(y + i + 12));
    }
    for (; i + 4 <= n; i += 4)
        acc0 = vfmaq_f32(acc0, load4(w, i), vld1q_f32(y + i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc0, acc1), vaddq_f32(acc2, acc3)));
    for (; i < n; i++)
        sum += one(w, i) * y[i];
    return sum;
}

void f32_dot_neon(int n, float *s, const void *w, const void *a)
{
    *s = dot_float(n, w, a, load4_f32, one_f32);
}

void f16_dot_neon(int n, float *s, const void *w, const void *a)
{
    *s = dot_float(n, w, a, load4_f16, one_f16);
}

void bf16_dot_neon(int n, float *s, const void *w, const void *a)
{
    *s = dot_float(n, w, a, load4_bf16, one_bf16);
}

/* ---- 32-blocks against Q8_0 ---- */

/* The 32 signed weights of one block as two 16-byte halves (elements 0-15, 16-31). */
static inline void q8_0_weights(const block_q8_0 *b, int8x16_t *w0, int8x16_t *w1)
{
    *w0 = vld1q_s8(b->qs);
    *w1 = vld1q_s8(b->qs + 16);
}

static inline void q4_0_weights(const block_q4_0 *b, int8x16_t *w0, int8x16_t *w1)
{
    uint8x16_t bytes = vld1q_u8(b->qs);
    *w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(bytes, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    *w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(bytes, 4)), vdupq_n_s8(8));
}

/* The two halves of a block whose nibbles index a table of levels (IQ4_NL, MXFP4). */
static inline void table_weights(const int8_t *levels, const uint8_t *qs, int8x16_t *w0,
                                 int8x16_t *w1)
{
    const int8x16_t grid = vld1q_s8(levels);
    uint8x16_t bytes = vld1q_u8(qs);
    *w0 = vqtbl1q_s8(grid, vandq_u8(bytes, vdupq_n_u8(0x0f)));
    *w1 = vqtbl1q_s8(grid, vshrq_n_u8(bytes, 4));
}

static inline void iq4_nl_weights(const block_iq4_nl *b, int8x16_t *w0, int8x16_t *w1)
{
    table_weights(iq4nl_values, b->qs, w0, w1);
}

static inline void mxfp4_weights(const block_mxfp4 *b, int8x16_t *w0, int8x16_t *w1)
{
    table_weights(mxfp4_values, b->qs, w0, w1);
}

/* A block's scale: the fp16 d of most types, MXFP4's power of two. */
static inline float half_d(const void *b)
{
    uint16_t d;
    memcpy(&d, b, sizeof d);
    return half_hw(d);
}

static inline float mxfp4_d(const void *b)
{
    return mxfp4_scale(((const block_mxfp4 *)b)->e);
}

#define DOT_BLOCKS_Q8_0(block_t, weights, scale)                                            \
    const block_t *x = w;                                                                   \
    const block_q8_0 *y = a;                                                                \
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);                               \
    int nb = n / QK, i = 0;                                                                 \
    for (; i + 1 < nb; i += 2) {                                                            \
        int8x16_t w0, w1, v0, v1;                                                           \
        weights(&x[i], &w0, &w1);                                                           \
        weights(&x[i + 1], &v0, &v1);                                                       \
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(dot32(w0, w1, y[i].qs)),                     \
                           scale(&x[i]) * half_hw(y[i].d));                                 \
        acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(dot32(v0, v1, y[i + 1].qs)),                 \
                           scale(&x[i + 1]) * half_hw(y[i + 1].d));                         \
    }                                                                                       \
    if (i < nb) {                                                                           \
        int8x16_t w0, w1;                                                                   \
        weights(&x[i], &w0, &w1);                                                           \
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(dot32(w0, w1, y[i].qs)),                     \
                           scale(&x[i]) * half_hw(y[i].d));                                 \
    }                                                                                       \
    *s = vaddvq_f32(vaddq_f32(acc0, acc1));

void q8_0_dot_neon(int n, float *s, const void *w, const void *a)
{
    DOT_BLOCKS_Q8_0(block_q8_0, q8_0_weights, half_d)
}

void q4_0_dot_neon(int n, float *s, const void *w, const void *a)
{
    DOT_BLOCKS_Q8_0(block_q4_0, q4_0_weights, half_d)
}

void iq4_nl_dot_neon(int n, float *s, const void *w, const void *a)
{
    DOT_BLOCKS_Q8_0(block_iq4_nl, iq4_nl_weights, half_d)
}

void mxfp4_dot_neon(int n, float *s, const void *w, const void *a)
{
    DOT_BLOCKS_Q8_0(block_mxfp4, mxfp4_weights, mxfp4_d)
}

/* ---- K-quants against Q8_K ---- */

/* sum_k m[k] * (bsums[2k] + bsums[2k+1]) for the eight 32-element sub-blocks */
static inline int32_t mins_dot32(uint64_t m, const int16_t *bsums)
{
    int16x8_t pairs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    int16x8_t m16 = vreinterpretq_s16_u16(vmovl_u8(vcreate_u8(m)));
    int32x4_t p = vmull_s16(vget_low_s16(pairs), vget_low_s16(m16));
    return vaddvq_s32(vmlal_s16(p, vget_high_s16(pairs), vget_high_s16(m16)));
}

/* sum_k m[k] * bsums[k] for the sixteen 16-element sub-blocks (m as 16 bytes) */
static inline int32_t mins_dot16(uint8x16_t m, const int16_t *bsums)
{
    int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m)));
    int16x8_t m1 = vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(m)));
    int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
    int32x4_t p = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
    p = vmlal_s16(p, vget_high_s16(m0), vget_high_s16(b0));
    p = vmlal_s16(p, vget_low_s16(m1), vget_low_s16(b1));
    return vaddvq_s32(vmlal_s16(p, vget_high_s16(m1), vget_high_s16(b1)));
}

static inline int8x16_t s8(uint8x16_t v)
{
    return vreinterpretq_s8_u8(v);
}

/* Chunk c of a Q4_K / Q5_K block: the 32 levels of sub-block 2c (l0, l1) and of sub-block 2c+1
 * (u0, u1) times their activations, weighted by their scales, into acc. */
static inline int32x4_t k4_chunk_dot(int32x4_t acc, uint8x16_t l0, uint8x16_t l1, uint8x16_t u0,
                                     uint8x16_t u1, const int8_t *act, const uint8_t sc[8], int c)
{
    acc = vmlaq_n_s32(acc, dot32(s8(l0), s8(l1), act + 64 * c), sc[2 * c]);
    return vmlaq_n_s32(acc, dot32(s8(u0), s8(u1), act + 64 * c + 32), sc[2 * c + 1]);
}

/* A Q4_K / Q5_K block's value: its scale-weighted sub-block dots acc, less the minimum term. */
static inline float k4_block_total(int32x4_t acc, uint16_t d, uint16_t dmin, uint64_t mn64,
                                   const block_q8_k *y)
{
    return y->d * half_hw(d) * (float)vaddvq_s32(acc) -
           y->d * half_hw(dmin) * (float)mins_dot32(mn64, y->bsums);
}

void q4_k_dot_neon(int n, float *s, const void *w, const void *a)
{
    const block_q4_k *x = w;
    const block_q8_k *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        uint64_t sc64, mn64;
        k4_unpack_scales_u64(x[i].scales, &sc64, &mn64);
        uint8_t sc[8];
        memcpy(sc, &sc64, 8);
        const uint8_t *q = x[i].qs;
        const int8_t *act = y[i].qs;
        int32x4_t acc = vdupq_n_s32(0);
        for (int c = 0; c < 4; c++) {
            uint8x16_t b0 = vld1q_u8(q + 32 * c), b1 = vld1q_u8(q + 32 * c + 16);
            acc = k4_chunk_dot(acc, vandq_u8(b0, m4), vandq_u8(b1, m4), vshrq_n_u8(b0, 4), vshrq_n_u8(b1, 4),
                               act, sc, c);
        }
        sum += k4_block_total(acc, x[i].d, x[i].dmin, mn64, &y[i]);
    }
    *s = sum;
}

void q5_k_dot_neon(int n, float *s, const void *w, const void *a)
{
    const block_q5_k *x = w;
    const block_q8_k *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), one = vdupq_n_u8(1);
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        uint64_t sc64, mn64;
        k4_unpack_scales_u64(x[i].scales, &sc64, &mn64);
        uint8_t sc[8];
        memcpy(sc, &sc64, 8);
        const uint8_t *q = x[i].qs;
        const int8_t *act = y[i].qs;
        /* bit j of qh is sub-block j's fifth bit: consumed from bit 0 as j advances */
        uint8x16_t h0 = vld1q_u8(x[i].qh), h1 = vld1q_u8(x[i].qh + 16);
        int32x4_t acc = vdupq_n_s32(0);
        for (int c = 0; c < 4; c++) {
            uint8x16_t b0 = vld1q_u8(q + 32 * c), b1 = vld1q_u8(q + 32 * c + 16);
            uint8x16_t l0 = vorrq_u8(vandq_u8(b0, m4), vshlq_n_u8(vandq_u8(h0, one), 4));
            uint8x16_t l1 = vorrq_u8(vandq_u8(b1, m4), vshlq_n_u8(vandq_u8(h1, one), 4));
            uint8x16_t u0 = vorrq_u8(vshrq_n_u8(b0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h0, 1), one), 4));
            uint8x16_t u1 = vorrq_u8(vshrq_n_u8(b1, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h1, 1), one), 4));
            h0 = vshrq_n_u8(h0, 2);
            h1 = vshrq_n_u8(h1, 2);
            acc = k4_chunk_dot(acc, l0, l1, u0, u1, act, sc, c);
        }
        sum += k4_block_total(acc, x[i].d, x[i].dmin, mn64, &y[i]);
    }
    *s = sum;
}

/* 16 weights (signed) times 16 activations, weighted by `scale`, into acc */
static inline int32x4_t scaled16(int32x4_t acc, int8x16_t q, const int8_t *act, int scale)
{
    return vmlaq_n_s32(acc, vdotq_s32(vdupq_n_s32(0), q, vld1q_s8(act)), scale);
}

void q6_k_dot_neon(int n, float *s, const void *w, const void *a)
{
    const block_q6_k *x = w;
    const block_q8_k *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m2 = vdupq_n_u8(0x30);
    const int8x16_t off = vdupq_n_s8(32);
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h, *act = y[i].qs + 128 * h;
            for (int k = 0; k < 2; k++) {   /* the two 16-element halves of each 32-group */
                uint8x16_t l0 = vld1q_u8(ql + 16 * k), l1 = vld1q_u8(ql + 32 + 16 * k);
                uint8x16_t hb = vld1q_u8(qh + 16 * k);
                int8x16_t q0 = vsubq_s8(s8(vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m2))), off);
                int8x16_t q1 = vsubq_s8(s8(vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m2))), off);
                int8x16_t q2 = vsubq_s8(s8(vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m2))), off);
                int8x16_t q3 = vsubq_s8(s8(vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m2))), off);
                acc = scaled16(acc, q0, act + 16 * k, sc[k]);
                acc = scaled16(acc, q1, act + 32 + 16 * k, sc[2 + k]);
                acc = scaled16(acc, q2, act + 64 + 16 * k, sc[4 + k]);
                acc = scaled16(acc, q3, act + 96 + 16 * k, sc[6 + k]);
            }
        }
        sum += y[i].d * half_hw(x[i].d) * (float)vaddvq_s32(acc);
    }
    *s = sum;
}

void q2_k_dot_neon(int n, float *s, const void *w, const void *a)
{
    const block_q2_k *x = w;
    const block_q8_k *y = a;
    const uint8x16_t m3 = vdupq_n_u8(3);
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        uint8x16_t packed = vld1q_u8(x[i].scales);
        uint8_t sc[16];
        vst1q_u8(sc, vandq_u8(packed, vdupq_n_u8(0x0f)));
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            uint8x16_t b0 = vld1q_u8(x[i].qs + 32 * h), b1 = vld1q_u8(x[i].qs + 32 * h + 16);
            const int8_t *act = y[i].qs + 128 * h;
            const uint8_t *s8h = sc + 8 * h;
            acc = scaled16(acc, s8(vandq_u8(b0, m3)), act, s8h[0]);
            acc = scaled16(acc, s8(vandq_u8(b1, m3)), act + 16, s8h[1]);
            acc = scaled16(acc, s8(vandq_u8(vshrq_n_u8(b0, 2), m3)), act + 32, s8h[2]);
            acc = scaled16(acc, s8(vandq_u8(vshrq_n_u8(b1, 2), m3)), act + 48, s8h[3]);
            acc = scaled16(acc, s8(vandq_u8(vshrq_n_u8(b0, 4), m3)), act + 64, s8h[4]);
            acc = scaled16(acc, s8(vandq_u8(vshrq_n_u8(b1, 4), m3)), act + 80, s8h[5]);
            acc = scaled16(acc, s8(vshrq_n_u8(b0, 6)), act + 96, s8h[6]);
            acc = scaled16(acc, s8(vshrq_n_u8(b1, 6)), act + 112, s8h[7]);
        }
        sum += y[i].d * half_hw(x[i].d) * (float)vaddvq_s32(acc) -
               y[i].d * half_hw(x[i].dmin) * (float)mins_dot16(vshrq_n_u8(packed, 4), y[i].bsums);
    }
    *s = sum;
}

/* Q3_K level = low 2 bits + 4 * high bit - 4, made signed in bytes before SDOT. */
void q3_k_dot_neon(int n, float *s, const void *w, const void *a)
{
    const block_q3_k *x = w;
    const block_q8_k *y = a;
    const uint8x16_t m3 = vdupq_n_u8(3), one = vdupq_n_u8(1);
    const int8x16_t four = vdupq_n_s8(4);
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        k3_unpack_scales(x[i].scales, sc);
        uint8x16_t hm0 = vld1q_u8(x[i].hmask), hm1 = vld1q_u8(x[i].hmask + 16);
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            uint8x16_t b0 = vld1q_u8(x[i].qs + 32 * h), b1 = vld1q_u8(x[i].qs + 32 * h + 16);
            const int8_t *act = y[i].qs + 128 * h;
            for (int g = 0; g < 4; g++) {
                int shift = 2 * g;
                uint8x16_t lo0 = vandq_u8(vshlq_u8(b0, vdupq_n_s8((int8_t)-shift)), m3);
                uint8x16_t lo1 = vandq_u8(vshlq_u8(b1, vdupq_n_s8((int8_t)-shift)), m3);
                /* hm0/hm1 hold the high bits of this group in bit 0 (shifted as g advances) */
                uint8x16_t q0 = vorrq_u8(lo0, vshlq_n_u8(vandq_u8(hm0, one), 2));
                uint8x16_t q1 = vorrq_u8(lo1, vshlq_n_u8(vandq_u8(hm1, one), 2));
                hm0 = vshrq_n_u8(hm0, 1);
                hm1 = vshrq_n_u8(hm1, 1);
                acc = scaled16(acc, vsubq_s8(s8(q0), four), act + 32 * g, sc[8 * h + 2 * g]);
                acc = scaled16(acc, vsubq_s8(s8(q1), four), act + 32 * g + 16, sc[8 * h + 2 * g + 1]);
            }
        }
        sum += y[i].d * half_hw(x[i].d) * (float)vaddvq_s32(acc);
    }
    *s = sum;
}

void q8_k_dot_neon(int n, float *s, const void *w, const void *a)
{
    const block_q8_k *x = w, *y = a;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int k = 0; k < QK_K; k += 32)
            acc = vaddq_s32(acc, dot32(vld1q_s8(x[i].qs + k), vld1q_s8(x[i].qs + k + 16), y[i].qs + k));
        sum += x[i].d * y[i].d * (float)vaddvq_s32(acc);
    }
    *s = sum;
}
