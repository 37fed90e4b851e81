/* Quantizers of the K-quant weight types (used by `prima mkmodel`).
 *
 * Each super-block is quantized in two levels, as the format is built:
 *  1. every sub-block gets the real-valued scale (and, for the affine types, offset) that
 *     minimizes its squared error: a grid of starting scales, each refined by alternating
 *     "nearest levels for this scale" and "least-squares scale for these levels" (each step can
 *     only lower the error), keeping the best;
 *  2. the sub-block scales are themselves quantized to the format's few bits against one fp16
 *     super-block scale; each sub-block then tries the neighbouring integer scales and keeps the
 *     one whose nearest levels give the least error, which recovers most of what this coarse
 *     second rounding costs.
 * The error measure is the plain squared error of the dequantized weights. */
#include <math.h>

#include "kernels/quant.h"

#define SEARCH_STEPS 10   /* starting scales tried on each side of the range-based one */
#define REFINE_ROUNDS 3   /* alternations of levels <-> least-squares scale per start */

/* ---- affine sub-blocks: x ≈ a*L + c, L in [0, nmax], a >= 0, c <= 0 (stored as a min -c) ---- */

static float affine_levels(const float *x, int n, int nmax, float a, float c, uint8_t *L)
{
    float ia = a > 0 ? 1.0f / a : 0.0f, err = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(q_round((x[i] - c) * ia), 0, nmax);
        float r = a * L[i] + c - x[i];
        err += r * r;
    }
    return err;
}

/* Least-squares a, c for fixed levels, with c constrained to <= 0. False if degenerate. */
static int affine_lsq(const float *x, const uint8_t *L, int n, float *a, float *c)
{
    float sl = 0, sll = 0, sx = 0, slx = 0;
    for (int i = 0; i < n; i++) {
        sl += L[i];
        sll += (float)L[i] * L[i];
        sx += x[i];
        slx += L[i] * x[i];
    }
    float det = n * sll - sl * sl;
    if (det <= 0)
        return 0;
    float na = (n * slx - sl * sx) / det, nc = (sx - na * sl) / n;
    if (nc > 0) {
        nc = 0;
        na = slx / sll;
    }
    if (!(na > 0))
        return 0;
    *a = na;
    *c = nc;
    return 1;
}

static void fit_affine(const float *x, int n, int nmax, float *a_out, float *c_out)
{
    float lo = 0, hi = x[0];
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    *a_out = 0;
    *c_out = lo;
    if (!(hi > lo))   /* constant sub-block (or non-finite input): the offset alone */
        return;
    uint8_t L[32];
    float best = INFINITY;
    for (int k = -SEARCH_STEPS; k <= SEARCH_STEPS; k++) {
        float a = (hi - lo) / (nmax + 0.1f * k), c = lo;
        float err = affine_levels(x, n, nmax, a, c, L);
        for (int r = 0; r < REFINE_ROUNDS; r++) {
            float na, nc;
            if (!affine_lsq(x, L, n, &na, &nc))
                break;
            uint8_t NL[32];
            float nerr = affine_levels(x, n, nmax, na, nc, NL);
            if (!(nerr < err))
                break;
            a = na, c = nc, err = nerr;
            memcpy(L, NL, (size_t)n);
        }
        if (err < best) {
            best = err;
            *a_out = a;
            *c_out = c;
        }
    }
}

/* One super-block of an affine type: fp16 d and dmin, integer scales sc and mins m in
 * [0, smax], levels L. nsub sub-blocks of `sub` values. */
static void kquant_affine(const float *x, int sub, int nmax, int smax, uint16_t *d, uint16_t *dmin,
                          uint8_t *sc, uint8_t *m, uint8_t *L)
{
    int nsub = QK_K / sub;
    float a[16], b[16], amax = 0, bmax = 0;
    for (int j = 0; j < nsub; j++) {
        float c;
        fit_affine(x + sub * j, sub, nmax, &a[j], &c);
        b[j] = -c;
        amax = fmaxf(amax, a[j]);
        bmax = fmaxf(bmax, b[j]);
    }
    *d = f32_to_half(amax / smax);
    *dmin = f32_to_half(bmax / smax);
    float df = half_to_f32(*d), mf = half_to_f32(*dmin);
    float ids = df > 0 ? 1.0f / df : 0.0f, idm = mf > 0 ? 1.0f / mf : 0.0f;
    for (int j = 0; j < nsub; j++) {
        const float *xs = x + sub * j;
        int s0 = clampi(q_round(a[j] * ids), 0, smax), m0 = clampi(q_round(b[j] * idm), 0, smax);
        float best = INFINITY;
        sc[j] = (uint8_t)s0, m[j] = (uint8_t)m0;  /* kept if every error is NaN (bad input) */
        memset(L + sub * j, 0, (size_t)sub);
        for (int s = s0 - 1; s <= s0 + 1; s++)
            for (int mm = m0 - 1; mm <= m0 + 1; mm++) {
                if (s < 0 || s > smax || mm < 0 || mm > smax)
                    continue;
                uint8_t T[32];
                float err = affine_levels(xs, sub, nmax, df * s, -(mf * mm), T);
                if (err < best) {
                    best = err;
                    sc[j] = (uint8_t)s;
                    m[j] = (uint8_t)mm;
                    memcpy(L + sub * j, T, (size_t)sub);
                }
            }
    }
}

/* ---- symmetric sub-blocks: x ≈ a*L, L in [-nmax, nmax-1], a of either sign ---- */

static float sym_levels(const float *x, int n, int nmax, float a, int8_t *L)
{
    float ia = a != 0 ? 1.0f / a : 0.0f, err = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (int8_t)clampi(q_round(x[i] * ia), -nmax, nmax - 1);
        float r = a * L[i] - x[i];
        err += r * r;
    }
    return err;
}

static float fit_symmetric(const float *x, int n, int nmax)
{
    float big = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(big))
            big = x[i];
    if (!(fabsf(big) > 0))
        return 0;
    int8_t L[16];
    float best = INFINITY, best_a = 0;
    for (int k = -SEARCH_STEPS; k <= SEARCH_STEPS; k++) {
        /* the largest magnitude maps to the end of the grid with the extra level */
        float a = -big / (nmax + 0.1f * k);
        float err = sym_levels(x, n, nmax, a, L);
        for (int r = 0; r < REFINE_ROUNDS; r++) {
            float sxl = 0, sll = 0;
            for (int i = 0; i < n; i++) {
                sxl += x[i] * L[i];
                sll += (float)L[i] * L[i];
            }
            if (!(sll > 0))
                break;
            int8_t NL[16];
            float na = sxl / sll, nerr = sym_levels(x, n, nmax, na, NL);
            if (!(nerr < err))
                break;
            a = na, err = nerr;
            memcpy(L, NL, (size_t)n);
        }
        if (err < best) {
            best = err;
            best_a = a;
        }
    }
    return best_a;
}

/* One super-block of a symmetric type with 16 sub-blocks of 16: fp16 d, signed integer scales
 * sc in [-smax, smax], levels L. */
static void kquant_symmetric(const float *x, int nmax, int smax, uint16_t *d, int8_t *sc, int8_t *L)
{
    float a[16], amax = 0;
    for (int j = 0; j < 16; j++) {
        a[j] = fit_symmetric(x + 16 * j, 16, nmax);
        amax = fmaxf(amax, fabsf(a[j]));
    }
    *d = f32_to_half(amax / smax);
    float df = half_to_f32(*d), id = df > 0 ? 1.0f / df : 0.0f;
    for (int j = 0; j < 16; j++) {
        int s0 = clampi(q_round(a[j] * id), -smax, smax);
        float best = INFINITY;
        sc[j] = (int8_t)s0;  /* kept if every error is NaN (bad input) */
        memset(L + 16 * j, 0, 16);
        for (int s = s0 - 1; s <= s0 + 1; s++) {
            if (s < -smax || s > smax)
                continue;
            int8_t T[16];
            float err = sym_levels(x + 16 * j, 16, nmax, df * s, T);
            if (err < best) {
                best = err;
                sc[j] = (int8_t)s;
                memcpy(L + 16 * j, T, 16);
            }
        }
    }
}

/* ---- packing, the inverse of the *_levels() decoders in quant.h ---- */

static void k4_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t packed[12])
{
    for (int j = 0; j < 4; j++) {
        packed[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        packed[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        packed[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | (m[j + 4] & 0xf) << 4);
    }
}

/* The 2-bit fields shared by Q2_K and Q3_K: element e in byte 32*(e/128) + e%32. */
static void pack_2bit(const uint8_t *u, uint8_t qs[QK_K / 4])
{
    memset(qs, 0, QK_K / 4);
    for (int e = 0; e < QK_K; e++)
        qs[32 * (e / 128) + e % 32] |= (uint8_t)((u[e] & 3) << (2 * ((e / 32) % 4)));
}

/* The nibbles shared by Q4_K and Q5_K: element e in byte 32*(e/64) + e%32. */
static void pack_4bit(const uint8_t *u, uint8_t qs[QK_K / 2])
{
    memset(qs, 0, QK_K / 2);
    for (int e = 0; e < QK_K; e++)
        qs[32 * (e / 64) + e % 32] |= (uint8_t)((u[e] & 0xf) << (4 * ((e / 32) % 2)));
}

void q2_k_from_float(const float *src, void *dst, int64_t n)
{
    block_q2_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        uint8_t sc[16], m[16], L[QK_K];
        kquant_affine(src, 16, 3, 15, &b[i].d, &b[i].dmin, sc, m, L);
        for (int j = 0; j < 16; j++)
            b[i].scales[j] = (uint8_t)(sc[j] | m[j] << 4);
        pack_2bit(L, b[i].qs);
    }
}

void q3_k_from_float(const float *src, void *dst, int64_t n)
{
    block_q3_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        int8_t sc[16], L[QK_K];
        kquant_symmetric(src, 4, 31, &b[i].d, sc, L);
        memset(b[i].scales, 0, sizeof b[i].scales);
        for (int j = 0; j < 16; j++) {
            int u = sc[j] + 32;
            b[i].scales[j % 8] |= (uint8_t)((u & 0xf) << (4 * (j / 8)));
            b[i].scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
        }
        uint8_t u[QK_K];
        memset(b[i].hmask, 0, sizeof b[i].hmask);
        for (int e = 0; e < QK_K; e++) {
            u[e] = (uint8_t)(L[e] + 4);
            b[i].hmask[e % 32] |= (uint8_t)((u[e] >> 2) << (e / 32));
        }
        pack_2bit(u, b[i].qs);
    }
}

void q4_k_from_float(const float *src, void *dst, int64_t n)
{
    block_q4_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        uint8_t sc[8], m[8], L[QK_K];
        kquant_affine(src, 32, 15, 63, &b[i].d, &b[i].dmin, sc, m, L);
        k4_pack_scales(sc, m, b[i].scales);
        pack_4bit(L, b[i].qs);
    }
}

void q5_k_from_float(const float *src, void *dst, int64_t n)
{
    block_q5_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        uint8_t sc[8], m[8], L[QK_K];
        kquant_affine(src, 32, 31, 63, &b[i].d, &b[i].dmin, sc, m, L);
        k4_pack_scales(sc, m, b[i].scales);
        pack_4bit(L, b[i].qs);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int e = 0; e < QK_K; e++)
            b[i].qh[e % 32] |= (uint8_t)((L[e] >> 4) << (e / 32));
    }
}

void q6_k_from_float(const float *src, void *dst, int64_t n)
{
    block_q6_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        int8_t L[QK_K];
        kquant_symmetric(src, 32, 127, &b[i].d, b[i].scales, L);
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int e = 0; e < QK_K; e++) {
            int u = L[e] + 32, h = e / 128, g = (e % 128) / 32, l = e % 32;
            b[i].ql[64 * h + 32 * (g % 2) + l] |= (uint8_t)((u & 0xf) << (4 * (g / 2)));
            b[i].qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * g));
        }
    }
}
