/* The quantized types against their format definitions and against independent references:
 *  - fp16 / bf16 conversions (every half value, rounding ties, NaN, overflow);
 *  - one hand-worked block of each format: the bytes the quantizer must produce (headers written
 *    out by hand, level fields placed by the layout rules restated here) and their dequantized
 *    values, chosen so every scale is exactly representable;
 *  - quantize -> dequantize error bounds per type on Gaussian data of varying scale;
 *  - the scalar dot products against a double-precision sum over the dequantized operands;
 *  - the fixture models: each quantized tensor, dequantized, is within its type's error of the
 *    same tensor of the F32 file, and our quantizer's error on that tensor is no worse than the
 *    converter's (by a stated margin).
 * The SIMD paths are checked against this scalar reference by test_quant_PATH.c. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "kernels/types.h"
#include "support/rng.h"
#include "test.h"

/* ---- fp16 / bf16 ---- */

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_half(void)
{
    static const struct { float f; uint16_t h; } cases[] = {
        {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff}, {0.0f, 0x0000}, {-0.0f, 0x8000},
        {65519.99f, 0x7bff}, {65520.0f, 0x7c00}, {1e9f, 0x7c00}, {-1e9f, 0xfc00},
        {6.103515625e-05f, 0x0400},            /* smallest normal 2^-14 */
        {5.960464477539063e-08f, 0x0001},      /* smallest subnormal 2^-24 */
        {2.98023223876953125e-08f, 0x0000},    /* 2^-25: tie between 0 and 2^-24 -> even (0) */
        {8.940696716308594e-08f, 0x0002},      /* 1.5 * 2^-24: tie -> even (2) */
        {1.00048828125f, 0x3c00},              /* 1 + 2^-11: tie -> even mantissa */
        {1.00146484375f, 0x3c02},              /* 1 + 3*2^-11: tie -> even (up) */
        {0.333333343f, 0x3555},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(fp32_to_fp16(cases[i].f) == cases[i].h, "fp16(%.9g) = 0x%04x, expected 0x%04x",
              cases[i].f, fp32_to_fp16(cases[i].f), cases[i].h);
    CHECK(isinf(fp16_to_fp32(0x7c00)) && fp16_to_fp32(0x7c00) > 0, "0x7c00 is +inf");
    CHECK(fp32_to_fp16(f32_of(0x7fc00000)) == 0x7e00, "quiet NaN");
    CHECK(fp32_to_fp16(f32_of(0xff800001)) == 0xfe00, "signalling NaN is quieted, sign kept");
    /* every finite half converts to float and back unchanged, and the float is the exact value */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00)
            continue;
        float f = fp16_to_fp32((uint16_t)h);
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double exact = (e ? ldexp(1024 + m, e - 25) : ldexp(m, -24)) * ((h & 0x8000) ? -1 : 1);
        if ((double)f != exact || fp32_to_fp16(f) != h)
            bad++;
    }
    CHECK(bad == 0, "%d finite halves do not round-trip exactly", bad);
    /* random floats round to the nearest half (ties to even) */
    test_rng r = {7};
    bad = 0;
    for (int i = 0; i < 100000; i++) {
        float f = (float)(rng_gauss(&r) * pow(2.0, (double)(rng_next(&r) % 40) - 26));
        uint16_t h = fp32_to_fp16(f);
        double got = fp16_to_fp32(h), err = fabs(got - f);
        double lo = fp16_to_fp32((uint16_t)(h - 1)), hi = fp16_to_fp32((uint16_t)(h + 1));
        if ((h & 0x7fff) != 0 && fabs(lo - f) < err)
            bad++;
        if ((h & 0x7fff) < 0x7bff && fabs(hi - f) < err)
            bad++;
    }
    CHECK(bad == 0, "%d random floats not rounded to the nearest half", bad);

    CHECK(fp32_to_bf16(1.0f) == 0x3f80, "bf16(1)");
    CHECK(fp32_to_bf16(f32_of(0x3f808000)) == 0x3f80, "bf16 tie to even (down)");
    CHECK(fp32_to_bf16(f32_of(0x3f818000)) == 0x3f82, "bf16 tie to even (up)");
    CHECK(fp32_to_bf16(f32_of(0x3f808001)) == 0x3f81, "bf16 above the tie rounds up");
    CHECK(fp32_to_bf16(f32_of(0x7f7fffff)) == 0x7f80, "bf16 overflow to inf");
    CHECK(fp32_to_bf16(f32_of(0x7f800001)) == 0x7fc0, "bf16 NaN quieted");
    CHECK(bf16_to_fp32(0xc040) == -3.0f, "bf16 -> f32");
}

/* ---- hand-worked blocks ---- */

/* from_float(x) must give exactly `expect`, and to_float(expect) exactly `deq`. */
static void check_block(enum dtype t, const float *x, const uint8_t *expect, const float *deq)
{
    const kern_type *k = kern_type_get(t);
    const dtype_info *di = dtype_get(t);
    REQUIRE(k && di, "type %d computable", t);
    uint8_t got[512];
    float back[256];
    k->from_float(x, got, di->block_size);
    for (uint32_t i = 0; i < di->block_bytes; i++)
        if (got[i] != expect[i]) {
            CHECK(got[i] == expect[i], "%s quantized byte %u: 0x%02x, expected 0x%02x", di->name, i,
                  got[i], expect[i]);
            break;
        }
    k->to_float(expect, back, di->block_size);
    for (uint32_t i = 0; i < di->block_size; i++)
        if (back[i] != deq[i]) {
            CHECK(back[i] == deq[i], "%s dequantized [%u]: %.9g, expected %.9g", di->name, i, back[i],
                  deq[i]);
            break;
        }
}

static void test_q8_0_block(void)
{
    /* max |x| = 63.5 -> d = 0.5, and x / d hits the rounding ties 2.5, 3.5, 60.5, 61.5, ... */
    static const float x[32] = {63.5f, -63.5f, 0, 0.5f, -0.5f, 1.25f, 1.75f, -1.25f, -1.75f, 5, 10,
                                -20, 30.25f, 30.75f, 0.25f, -0.25f, 0.75f, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                11, 12, 13, 14, -15, -16};
    static const uint8_t expect[34] = {
        0x00, 0x38, 0x7f, 0x81, 0x00, 0x01, 0xff, 0x02, 0x04, 0xfe, 0xfc, 0x0a, 0x14, 0xd8, 0x3c,
        0x3e, 0x00, 0x00, 0x02, 0x04, 0x06, 0x08, 0x0a, 0x0c, 0x0e, 0x10, 0x12, 0x14, 0x16, 0x18,
        0x1a, 0x1c, 0xe2, 0xe0};
    float deq[32];
    for (int j = 0; j < 32; j++)
        deq[j] = 0.5f * (int8_t)expect[2 + j];
    check_block(DT_Q8_0, x, expect, deq);
}

static void test_q4_0_block(void)
{
    /* d = 0.25 (the -2.0 maps to level 0); nibble j low, 15-j high */
    static const uint8_t expect[18] = {0x00, 0x34, 0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96,
                                       0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};
    float x[32];
    for (int j = 0; j < 16; j++) {
        x[j] = 0.25f * (j - 8);
        x[j + 16] = 0.25f * (7 - j);
    }
    check_block(DT_Q4_0, x, expect, x);
}

static void test_iq4_nl_block(void)
{
    static const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    static const uint8_t expect[18] = {0x00, 0x38, 0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96,
                                       0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};
    float x[32];
    for (int j = 0; j < 16; j++) {
        x[j] = 0.5f * grid[j];
        x[j + 16] = 0.5f * grid[15 - j];
    }
    check_block(DT_IQ4_NL, x, expect, x);
}

static void test_mxfp4_block(void)
{
    /* the 16 levels of MXFP4 (doubled FP4) at scale 2^-2 = 1/4: exponent byte 126; the
     * largest magnitude (12/4 = 3) is what fixes the scale */
    static const int levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    uint8_t expect[17] = {126};
    float x[32];
    for (int j = 0; j < 16; j++) {
        x[j] = 0.25f * levels[j];
        x[j + 16] = 0.25f * levels[15 - j];
        /* -0 (code 8) quantizes to +0 (code 0): the nearest level, the first found */
        int lo = j == 8 ? 0 : j, hi = 15 - j == 8 ? 0 : 15 - j;
        expect[1 + j] = (uint8_t)(lo | hi << 4);
    }
    check_block(DT_MXFP4, x, expect, x);
}

static void test_q8_k_block(void)
{
    /* max |x| = 31.75 -> d = 0.25 (float), levels -127..127 exactly */
    float x[256];
    uint8_t expect[292] = {0x00, 0x00, 0x80, 0x3e};
    for (int j = 0; j < 256; j++) {
        int v = (j * 13) % 255 - 127;
        x[j] = 0.25f * v;
        expect[4 + j] = (uint8_t)(int8_t)v;
    }
    for (int k = 0; k < 16; k++) {
        int sum = 0;
        for (int l = 0; l < 16; l++)
            sum += (int8_t)expect[4 + 16 * k + l];
        expect[260 + 2 * k] = (uint8_t)(sum & 0xff);
        expect[261 + 2 * k] = (uint8_t)((sum >> 8) & 0xff);
    }
    check_block(DT_Q8_K, x, expect, x);
}

/* The K-quant level fields, restated from the format: element e of the 256 is in sub-group
 * g = e/32 of half h = e/128 (Q2_K, Q3_K, Q6_K) or of quarter e/64 (Q4_K, Q5_K). */
static void put_2bit(uint8_t *qs, int e, int v)
{
    qs[32 * (e / 128) + e % 32] |= (uint8_t)(v << (2 * ((e / 32) % 4)));
}

static void put_4bit(uint8_t *qs, int e, int v)
{
    qs[32 * (e / 64) + e % 32] |= (uint8_t)(v << (4 * ((e / 32) % 2)));
}

static void test_q2_k_block(void)
{
    static const int sc[16] = {15, 1, 7, 3, 9, 12, 2, 5, 11, 4, 13, 6, 8, 10, 14, 1};
    static const int m[16] = {0, 15, 3, 7, 1, 9, 4, 12, 2, 6, 10, 5, 8, 11, 13, 14};
    static const uint8_t scales[16] = {0x0f, 0xf1, 0x37, 0x73, 0x19, 0x9c, 0x42, 0xc5,
                                       0x2b, 0x64, 0xad, 0x56, 0x88, 0xba, 0xde, 0xe1};
    uint8_t expect[84] = {0};
    memcpy(expect, scales, 16);
    expect[80] = 0x00, expect[81] = 0x38;  /* d = 0.5 */
    expect[82] = 0x00, expect[83] = 0x34;  /* dmin = 0.25 */
    float x[256];
    for (int e = 0; e < 256; e++) {
        int j = e / 16, L = (e % 16 + j) % 4;
        x[e] = 0.5f * sc[j] * L - 0.25f * m[j];
        put_2bit(expect + 16, e, L);
    }
    check_block(DT_Q2_K, x, expect, x);
}

static void test_q3_k_block(void)
{
    static const int sc[16] = {31, -5, 12, -31, 1, 20, -14, 7, 3, -9, 25, -2, 16, -27, 8, 30};
    static const uint8_t scales[12] = {0x3f, 0x7b, 0x9c, 0xe1, 0x01, 0x54, 0x82, 0xe7,
                                       0xeb, 0x1d, 0xb6, 0xd8};
    uint8_t expect[110] = {0};
    memcpy(expect + 96, scales, 12);
    expect[108] = 0x00, expect[109] = 0x30;  /* d = 0.125 */
    float x[256];
    for (int e = 0; e < 256; e++) {
        int j = e / 16, l = e % 16, L = l == 0 ? -4 : (l + j) % 7 - 3;
        x[e] = 0.125f * sc[j] * L;
        int u = L + 4;           /* stored: low 2 bits in qs, bit 2 in hmask */
        put_2bit(expect + 32, e, u & 3);
        expect[e % 32] |= (uint8_t)((u >> 2) << (e / 32));
    }
    check_block(DT_Q3_K, x, expect, x);
}

static void test_q4_k_block(void)
{
    static const int sc[8] = {63, 1, 17, 40, 5, 33, 48, 12}, m[8] = {0, 63, 7, 20, 35, 1, 16, 50};
    /* d = 2^-4, dmin = 2^-5, then the 6-bit scales and mins packed into 12 bytes */
    static const uint8_t head[16] = {0x00, 0x2c, 0x00, 0x28, 0x3f, 0x81, 0xd1, 0x28,
                                     0x80, 0x3f, 0x47, 0xd4, 0x35, 0x11, 0x00, 0x2c};
    uint8_t expect[144] = {0};
    memcpy(expect, head, 16);
    float x[256];
    for (int e = 0; e < 256; e++) {
        int j = e / 32, L = (e % 32 + j) % 16;
        x[e] = 0.0625f * sc[j] * L - 0.03125f * m[j];
        put_4bit(expect + 16, e, L);
    }
    check_block(DT_Q4_K, x, expect, x);
}

static void test_q5_k_block(void)
{
    static const int sc[8] = {2, 63, 9, 30, 44, 17, 5, 60}, m[8] = {63, 0, 12, 3, 47, 28, 9, 33};
    static const uint8_t head[16] = {0x00, 0x28, 0x00, 0x2c, 0x82, 0x7f, 0x09, 0xde,
                                     0xbf, 0x40, 0x0c, 0x83, 0xfc, 0xc1, 0x95, 0x1c};
    uint8_t expect[176] = {0};
    memcpy(expect, head, 16);
    float x[256];
    for (int e = 0; e < 256; e++) {
        int j = e / 32, L = (3 * (e % 32) + j) % 32;
        x[e] = 0.03125f * sc[j] * L - 0.0625f * m[j];
        put_4bit(expect + 48, e, L & 0xf);
        expect[16 + e % 32] |= (uint8_t)((L >> 4) << j);   /* fifth bit: qh bit e/32 */
    }
    check_block(DT_Q5_K, x, expect, x);
}

static void test_q6_k_block(void)
{
    static const int8_t sc[16] = {127, -3, 50, -80, 1, 99, -127, 7, 64, -1, 20, 33, -45, 88, 5, -100};
    uint8_t expect[210] = {0};
    memcpy(expect + 192, sc, 16);
    expect[208] = 0x00, expect[209] = 0x24;  /* d = 2^-6 */
    float x[256];
    for (int e = 0; e < 256; e++) {
        int j = e / 16, l = e % 16, L = l == 0 ? -32 : (5 * l + j) % 63 - 31;
        x[e] = 0.015625f * sc[j] * L;
        int u = L + 32, h = e / 128, g = (e % 128) / 32, r = e % 32;
        expect[64 * h + 32 * (g % 2) + r] |= (uint8_t)((u & 0xf) << (4 * (g / 2)));  /* ql */
        expect[128 + 32 * h + r] |= (uint8_t)((u >> 4) << (2 * g));                    /* qh */
    }
    check_block(DT_Q6_K, x, expect, x);
}

/* ---- round trips and dot products on random data ---- */

/* Gaussian values whose scale changes every 32 (so blocks see different ranges), with one
 * all-zero block and one outlier. */
static void random_weights(test_rng *r, float *x, int n)
{
    float scale = 1;
    for (int i = 0; i < n; i++) {
        if (i % 32 == 0)
            scale = (float)pow(10.0, 2 * rng_uniform(r) - 1);
        x[i] = scale * rng_gauss(r);
    }
    if (n >= 128) {
        memset(x + 64, 0, 32 * sizeof(float));
        x[100] = 40 * scale;
    }
}

struct type_bound {
    enum dtype t;
    double rel_rmse;   /* bound on sqrt(sum err^2 / sum x^2) for random_weights() data */
};

/* Measured here: our quantizer on random_weights() (16384 values) and the reference converter on
 * the fixture tensors (N(0, 1/n) data) both stay within about 88% of these bounds. */
static const struct type_bound bounds[] = {
    {DT_F32, 0},       {DT_F16, 2.6e-4},  {DT_BF16, 1.9e-3}, {DT_Q8_0, 6.3e-3},
    {DT_Q4_0, 0.105},  {DT_IQ4_NL, 0.087}, {DT_MXFP4, 0.14},  {DT_Q2_K, 0.30},  {DT_Q3_K, 0.167},
    {DT_Q4_K, 0.082},  {DT_Q5_K, 0.041},  {DT_Q6_K, 0.0203}, {DT_Q8_K, 0.0145},
};

static double rel_rmse(const float *x, const float *y, int64_t n)
{
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

static void test_round_trips(void)
{
    enum { N = 16384 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    test_rng r = {11};
    random_weights(&r, x, N);
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        const kern_type *k = kern_type_get(bounds[i].t);
        REQUIRE(k, "%s computable", dtype_get(bounds[i].t)->name);
        k->from_float(x, q, N);
        k->to_float(q, y, N);
        double e = rel_rmse(x, y, N);
        printf("round trip %-6s rel rmse %.5f (bound %.5f)\n", dtype_get(bounds[i].t)->name, e,
               bounds[i].rel_rmse);
        CHECK(e <= bounds[i].rel_rmse, "%s round trip error %.5f over %.5f",
              dtype_get(bounds[i].t)->name, e, bounds[i].rel_rmse);
    }
}

/* NaN and infinities in one block quantize without a crash and without touching other blocks. */
static void test_bad_values_contained(void)
{
    enum { N = 3 * 256 };
    static float x[N], y[N];
    static uint8_t q[N * 4], clean[N * 4];
    test_rng r = {3};
    random_weights(&r, x, N);
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        const kern_type *k = kern_type_get(bounds[i].t);
        const dtype_info *di = dtype_get(bounds[i].t);
        size_t bs = di->block_size > 1 ? di->block_size : 256;  /* "block" of a float type */
        k->from_float(x, clean, N);
        float saved[3] = {x[bs + 1], x[bs + 5], x[bs + 9]};
        x[bs + 1] = NAN, x[bs + 5] = INFINITY, x[bs + 9] = -INFINITY;
        k->from_float(x, q, N);
        k->to_float(q, y, N);
        size_t rb = dtype_row_bytes(k->type, bs);
        CHECK(!memcmp(q, clean, rb) && !memcmp(q + 2 * rb, clean + 2 * rb, rb),
              "%s: non-finite values in block 1 changed blocks 0 or 2", di->name);
        x[bs + 1] = saved[0], x[bs + 5] = saved[1], x[bs + 9] = saved[2];
    }
}

/* The scalar dot products against sum(dequantized w * dequantized activation) in double. */
static void test_scalar_dots(void)
{
    REQUIRE(kern_use_path(KERN_SCALAR) == 0, "scalar path always available");
    static const int nblocks[] = {1, 2, 3, 7, 13};
    test_rng r = {5};
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        const kern_type *k = kern_type_get(bounds[i].t);
        const kern_type *ka = kern_type_get(k->act_type);
        const dtype_info *di = dtype_get(k->type), *da = dtype_get(k->act_type);
        REQUIRE(ka && da->block_size == (k->type == DT_F32 || k->type == DT_F16 || k->type == DT_BF16
                                             ? 1u : di->block_size),
                "%s: activation blocks match the weight blocks", di->name);
        for (size_t b = 0; b < sizeof nblocks / sizeof nblocks[0]; b++) {
            int n = (int)(nblocks[b] * (di->block_size > 1 ? di->block_size : 37));
            float *w = malloc(sizeof(float) * n), *a = malloc(sizeof(float) * n);
            float *wd = malloc(sizeof(float) * n), *ad = malloc(sizeof(float) * n);
            uint8_t *wq = malloc(dtype_row_bytes(k->type, n)), *aq = malloc(dtype_row_bytes(k->act_type, n));
            random_weights(&r, w, n);
            for (int j = 0; j < n; j++)
                a[j] = rng_gauss(&r);
            k->from_float(w, wq, n);
            ka->from_float(a, aq, n);
            k->to_float(wq, wd, n);
            ka->to_float(aq, ad, n);
            double ref = 0, mag = 0;
            for (int j = 0; j < n; j++) {
                ref += (double)wd[j] * ad[j];
                mag += fabs((double)wd[j] * ad[j]);
            }
            float got;
            k->vec_dot(n, &got, wq, aq);
            CHECK(fabs(got - ref) <= 2e-5 * mag, "%s dot n=%d: %.9g, reference %.9g (scale %.3g)",
                  di->name, n, got, ref, mag);
            free(w), free(a), free(wd), free(ad), free(wq), free(aq);
        }
    }
    kern_init();
}

static void test_table(void)
{
    static const enum dtype unsupported[] = {DT_Q4_1, DT_Q5_0, DT_Q8_1, DT_IQ2_XXS, DT_I32, DT_F64};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        CHECK(kern_type_get(unsupported[i]) == NULL, "%s has no kernels", dtype_get(unsupported[i])->name);
    CHECK(kern_type_get((enum dtype)999) == NULL, "out-of-range type");
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        const kern_type *k = kern_type_get(bounds[i].t);
        CHECK(k && k->type == bounds[i].t && k->to_float && k->from_float && k->vec_dot,
              "complete row for %s", dtype_get(bounds[i].t)->name);
    }
    CHECK(kern_use_path((enum kern_path)17) == -1, "unknown path refused");
    printf("active path: %s\n", kern_path_name(kern_active_path()));
}

/* ---- fixtures: tensors quantized by the reference converter ---- */

struct fixture_case {
    const char *file;
    double margin;   /* our quantizer's error may exceed the converter's by at most this factor */
};

static void test_fixtures_against_f32(void)
{
    static const struct fixture_case files[] = {
        {"synth-spm512-l4-e256-f16.gguf", 1.0}, {"synth-spm512-l4-e256-bf16.gguf", 1.0},
        {"synth-spm512-l4-e256-q8_0.gguf", 1.02}, {"synth-spm512-l4-e256-q4_0.gguf", 1.02},
        {"synth-spm512-l4-e256-q4_k_m.gguf", 1.0}, {"synth-spm512-l4-e256-q5_k_m.gguf", 1.0},
        {"synth-spm512-l4-e256-q6_k.gguf", 1.0},  {"synth-spm512-l4-e256-q4_k_s.gguf", 1.0},
    };
    const char *dir = test_fixtures();
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/models/synth-spm512-l4-e256-f32.gguf", dir);
    gguf_file *ref = gguf_open(path, err, sizeof err);
    REQUIRE(ref, "%s", err);
    int compared = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        snprintf(path, sizeof path, "%s/models/%s", dir, files[f].file);
        gguf_file *g = gguf_open(path, err, sizeof err);
        REQUIRE(g, "%s", err);
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *t = &g->tensors[i];
            if (t->n_dims != 2)
                continue;
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
            const gguf_tensor *rt = gguf_tensor_find(ref, name);
            REQUIRE(rt && rt->type == DT_F32 && rt->ne[0] == t->ne[0] && rt->ne[1] == t->ne[1],
                    "%s: %s has an F32 twin", files[f].file, name);
            const kern_type *k = kern_type_get(t->type);
            REQUIRE(k, "%s: %s type %d computable", files[f].file, name, t->type);
            int64_t n = (int64_t)(t->ne[0] * t->ne[1]);
            float *y = malloc(sizeof(float) * n), *z = malloc(sizeof(float) * n);
            uint8_t *q = malloc(t->nbytes);
            k->to_float(t->data, y, n);
            double theirs = rel_rmse(rt->data, y, n);
            /* requantizing every tensor would make this test slow; layer 0 and the output
             * layer cover every type and both tensor shapes */
            bool requantize = !strncmp(name, "blk.0.", 6) || !strcmp(name, "output.weight");
            double ours = 0;
            if (requantize) {
                k->from_float(rt->data, q, n);
                k->to_float(q, z, n);
                ours = rel_rmse(rt->data, z, n);
            }
            double bound = 0;
            for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++)
                if (bounds[b].t == t->type)
                    bound = bounds[b].rel_rmse;
            CHECK(theirs <= bound, "%s %s (%s): file differs from F32 by %.5f, over %.5f",
                  files[f].file, name, dtype_get(t->type)->name, theirs, bound);
            CHECK(ours <= theirs * files[f].margin + 1e-7,
                  "%s %s (%s): our quantizer's error %.5f vs converter's %.5f", files[f].file, name,
                  dtype_get(t->type)->name, ours, theirs);
            if (!strcmp(name, "blk.0.ffn_up.weight"))
                printf("%-34s %-6s converter %.5f ours %.5f\n", files[f].file,
                       dtype_get(t->type)->name, theirs, ours);
            compared++;
            free(y), free(z), free(q);
        }
        gguf_close(g);
    }
    gguf_close(ref);
    CHECK(compared >= 8 * 29, "compared %d tensors", compared);
}

int main(void)
{
    kern_init();
    test_table();
    test_half();
    test_q8_0_block();
    test_q4_0_block();
    test_iq4_nl_block();
    test_mxfp4_block();
    test_q8_k_block();
    test_q2_k_block();
    test_q3_k_block();
    test_q4_k_block();
    test_q5_k_block();
    test_q6_k_block();
    test_round_trips();
    test_bad_values_contained();
    test_scalar_dots();
    test_fixtures_against_f32();
    return test_done();
}
