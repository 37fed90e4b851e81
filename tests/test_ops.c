/* test_ops.c — the compute context and every op of kern.h against straightforward references.
 *
 * References are written independently of the kernels, in double precision. Sizes are chosen not
 * to be multiples of any SIMD width or tile size, and every op that splits work is run on 1, 2
 * and 3 threads, where the results must be bitwise identical. Each SIMD path the CPU offers is
 * checked, not just the fastest. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kern.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double rnd(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

/* test_matmul_out_of_memory asks for more memory than exists: under ASan the allocator must
 * return NULL, as malloc does, instead of reporting the request. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

static void fill(float *x, int n, double amp)
{
    for (int i = 0; i < n; i++)
        x[i] = (float)(amp * rnd());
}

/* The larger error, where NaN counts as the largest (fmax would drop it). */
static double worse(double worst, double err)
{
    return err <= worst ? worst : err;
}

static kern_ctx *ctx[4]; /* by thread count 1..3 */

/* ---- thread pool ---- */

struct count_job {
    _Atomic int calls;
    _Atomic int seen[8];
    int nth_seen;
};

static void count_fn(void *arg, int ith, int nth)
{
    struct count_job *J = arg;
    atomic_fetch_add(&J->calls, 1);
    atomic_fetch_add(&J->seen[ith], 1);
    J->nth_seen = nth;
}

static void test_pool(void)
{
    for (int nt = 1; nt <= 3; nt++) {
        REQUIRE(kern_ctx_threads(ctx[nt]) == nt, "ctx has %d threads", kern_ctx_threads(ctx[nt]));
        for (int round = 0; round < 2000; round++) {
            struct count_job J = {0};
            kern_parallel(ctx[nt], count_fn, &J);
            CHECK(atomic_load(&J.calls) == nt, "%d threads: job ran %d times", nt, atomic_load(&J.calls));
            for (int i = 0; i < nt; i++)
                CHECK(atomic_load(&J.seen[i]) == 1, "thread %d ran %d times", i, atomic_load(&J.seen[i]));
            CHECK(J.nth_seen == nt, "nth %d", J.nth_seen);
            if (test_failures)
                return;
            /* Long enough for the workers to park on their condition variable. */
            if (round == 1000)
                usleep(50 * 1000);
        }
    }
    CHECK(kern_ctx_create(0) == NULL, "a pool of 0 threads was created");
}

/* ---- element-wise ops ---- */

static void test_rmsnorm(void)
{
    enum { N = 4099 };
    static float x[N], w[N], out[N];
    fill(x, N, 3.0);
    fill(w, N, 1.0);
    float eps = 1e-5f;
    kern_rmsnorm(out, x, w, N, eps);
    double ss = 0;
    for (int i = 0; i < N; i++)
        ss += (double)x[i] * x[i];
    double scale = 1.0 / sqrt(ss / N + eps);
    for (int i = 0; i < N; i++) {
        double ref = x[i] * scale * w[i];
        CHECK(fabs(out[i] - ref) <= 1e-6 * fabs(ref) + 1e-7, "rmsnorm[%d] %g vs %g", i, out[i], ref);
    }
}

static void test_add_silu(void)
{
    enum { N = 1003 };
    float y[N], x[N], y0[N], g[N], up[N], g0[N];
    fill(y, N, 2.0);
    fill(x, N, 2.0);
    memcpy(y0, y, sizeof y);
    kern_add(y, x, N);
    for (int i = 0; i < N; i++)
        CHECK(y[i] == y0[i] + x[i], "add[%d]", i);
    fill(g, N, 12.0);
    fill(up, N, 3.0);
    memcpy(g0, g, sizeof g);
    kern_silu_mul(g, up, N);
    for (int i = 0; i < N; i++) {
        double ref = g0[i] / (1.0 + exp(-(double)g0[i])) * up[i];
        CHECK(fabs(g[i] - ref) <= 1e-6 * fabs(ref) + 1e-7, "silu_mul[%d] %g vs %g", i, g[i], ref);
    }
}

static void test_softmax(void)
{
    enum { N = 1001 };
    float x[N];
    double ref[N];
    /* Large logits: a naive exp would overflow. */
    fill(x, N, 40.0);
    x[17] = 95.0f;
    double max = -INFINITY, sum = 0;
    for (int i = 0; i < N; i++)
        max = x[i] > max ? x[i] : max;
    for (int i = 0; i < N; i++)
        sum += ref[i] = exp(x[i] - max);
    kern_softmax(x, N);
    double total = 0;
    for (int i = 0; i < N; i++) {
        ref[i] /= sum;
        total += x[i];
        CHECK(fabs(x[i] - ref[i]) <= 1e-6 * ref[i] + 1e-12, "softmax[%d] %g vs %g", i, x[i], ref[i]);
    }
    CHECK(fabs(total - 1.0) < 1e-5, "softmax sums to %g", total);
}

/* ---- RoPE ---- */

static void rope_reference(double *out, const float *x, int n_heads, int hd, int pos,
                           const rope_params *rp)
{
    for (int h = 0; h < n_heads; h++) {
        const float *v = x + h * hd;
        double *o = out + h * hd;
        for (int d = 0; d < hd; d++)
            o[d] = v[d];
        for (int i = 0; i < rp->n_rot / 2; i++) {
            double theta = pos * pow(rp->freq_base, -2.0 * i / rp->n_rot) * rp->freq_scale;
            if (rp->freq_factors)
                theta /= rp->freq_factors[i];
            int a = rp->neox ? i : 2 * i, b = rp->neox ? i + rp->n_rot / 2 : 2 * i + 1;
            o[a] = v[a] * cos(theta) - v[b] * sin(theta);
            o[b] = v[a] * sin(theta) + v[b] * cos(theta);
        }
    }
}

static void test_rope(void)
{
    enum { HEADS = 3, HD = 44, NROT = 36 };
    float factors[NROT / 2];
    for (int i = 0; i < NROT / 2; i++)
        factors[i] = 1.0f + (float)i / 4; /* Llama-3 style: divisors growing with wavelength */
    for (int variant = 0; variant < 4; variant++) {
        rope_params rp = {.n_rot = NROT, .freq_base = 500000.0f, .freq_scale = 1.0f,
                          .neox = variant & 1, .freq_factors = variant & 2 ? factors : NULL};
        if (variant == 3)
            rp.freq_scale = 0.25f;
        for (int pos = 0; pos < 9000; pos += 2999) {
            float x[HEADS * HD];
            double ref[HEADS * HD];
            fill(x, HEADS * HD, 1.0);
            rope_reference(ref, x, HEADS, HD, pos, &rp);
            kern_rope(x, HEADS, HD, pos, &rp);
            for (int i = 0; i < HEADS * HD; i++)
                CHECK(fabs(x[i] - ref[i]) <= 1e-6, "rope variant %d pos %d [%d]: %g vs %g",
                      variant, pos, i, x[i], ref[i]);
        }
    }
}

/* ---- attention ---- */

/* k and v: the cache's values as the kernel sees them (dequantized), each KV head's n_ctx rows
 * together (kern_kv); qk: the queries as they meet the keys (rounded to F16, or to Q8_0 for
 * quantized keys). */
static void attention_reference(double *out, const float *qk, int n_tokens, const int32_t *pos,
                                const float *k, const float *v, int n_ctx, int n_head, int n_kv,
                                int hd, float scale)
{
    double *s = malloc(sizeof(double) * (size_t)(pos[n_tokens - 1] + 1));
    for (int t = 0; t < n_tokens; t++)
        for (int h = 0; h < n_head; h++) {
            int kvh = h / (n_head / n_kv), nk = pos[t] + 1;
            const float *qh = qk + ((size_t)t * n_head + h) * hd;
            double max = -INFINITY, sum = 0;
            for (int j = 0; j < nk; j++) {
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)qh[e] * k[((size_t)kvh * n_ctx + j) * hd + e];
                s[j] = d * scale;
                max = s[j] > max ? s[j] : max;
            }
            for (int j = 0; j < nk; j++)
                sum += s[j] = exp(s[j] - max);
            double *o = out + ((size_t)t * n_head + h) * hd;
            for (int e = 0; e < hd; e++) {
                double acc = 0;
                for (int j = 0; j < nk; j++)
                    acc += s[j] * v[((size_t)kvh * n_ctx + j) * hd + e];
                o[e] = acc / sum;
            }
        }
    free(s);
}

/* x (n values) stored in type t at dst, and read back into x */
static void as_cache(enum dtype t, float *x, size_t n, void *dst)
{
    const kern_type *kt = kern_type_get(t);
    kt->from_float(x, dst, (int64_t)n);
    kt->to_float(dst, x, (int64_t)n);
}

static void check_attention_types(int n_head, int n_kv, int hd, int n_tokens, int first_pos,
                                  double q_amp, enum dtype kt, enum dtype vt)
{
    int n_ctx = first_pos + n_tokens, n_q = n_tokens * n_head * hd;
    size_t kv_n = (size_t)n_ctx * n_kv * hd;
    float *q = malloc(sizeof(float) * (size_t)n_q), *qk = malloc(sizeof(float) * (size_t)n_q);
    float *kf = malloc(sizeof(float) * kv_n), *vf = malloc(sizeof(float) * kv_n);
    void *k = malloc(dtype_row_bytes(kt, kv_n)), *v = malloc(dtype_row_bytes(vt, kv_n));
    double *ref = malloc(sizeof(double) * (size_t)n_q);
    float *out[4];
    int32_t pos[64];
    fill(q, n_q, q_amp);
    fill(kf, (int)kv_n, 1.5);
    fill(vf, (int)kv_n, 1.0);
    as_cache(kt, kf, kv_n, k);
    as_cache(vt, vf, kv_n, v);
    /* the queries as they meet the keys */
    memcpy(qk, q, sizeof(float) * (size_t)n_q);
    if (kt == DT_F16) {
        for (int i = 0; i < n_q; i++)
            qk[i] = fp16_to_fp32(fp32_to_fp16(q[i]));
    } else {
        void *qa = malloc(dtype_row_bytes(DT_Q8_0, (uint64_t)n_q));
        as_cache(DT_Q8_0, qk, (size_t)n_q, qa);
        free(qa);
    }
    for (int t = 0; t < n_tokens; t++)
        pos[t] = first_pos + t;
    float scale = 1.0f / sqrtf((float)hd);
    attention_reference(ref, qk, n_tokens, pos, kf, vf, n_ctx, n_head, n_kv, hd, scale);
    const kern_kv kv = {k, v, kt, vt};
    for (int nt = 1; nt <= 3; nt++) {
        out[nt] = malloc(sizeof(float) * (size_t)n_q);
        kern_attention(ctx[nt], out[nt], q, n_tokens, pos, NULL, (size_t)n_ctx, 0, NULL, &kv,
                       n_head, n_kv, hd, scale);
        if (nt > 1)
            CHECK(!memcmp(out[nt], out[1], sizeof(float) * (size_t)n_q),
                  "attention differs between 1 and %d threads", nt);
    }
    double worst = 0;
    for (int i = 0; i < n_q; i++)
        worst = worse(worst, fabs(out[1][i] - ref[i]));
    /* Float scores carry a relative error of a few ulp, which moves the weights by that much
     * times the score's size. */
    CHECK(worst < 2e-5 * q_amp,
          "attention %d/%d heads hd %d, %d tokens from %d, cache %s/%s (%s): error %g", n_head,
          n_kv, hd, n_tokens, first_pos, dtype_get(kt)->name, dtype_get(vt)->name,
          kern_path_name(kern_active_path()), worst);
    for (int nt = 1; nt <= 3; nt++)
        free(out[nt]);
    free(q);
    free(qk);
    free(kf);
    free(vf);
    free(k);
    free(v);
    free(ref);
}

static void check_attention(int n_head, int n_kv, int hd, int n_tokens, int first_pos, double q_amp)
{
    check_attention_types(n_head, n_kv, hd, n_tokens, first_pos, q_amp, DT_F16, DT_F16);
}

static void test_attention(void)
{
    check_attention(6, 2, 20, 1, 0, 1.5);     /* the very first token: attends to itself only */
    check_attention(6, 2, 20, 1, 150, 1.5);   /* decode across several key chunks */
    check_attention(8, 8, 44, 5, 70, 1.5);    /* a causal batch, no grouping */
    check_attention(12, 1, 128, 3, 200, 1.5); /* one KV head shared by many query heads */
    check_attention(4, 2, 64, 17, 0, 1.5);    /* a prompt from position 0 */
    /* Scores in the hundreds: exp() overflows unless the running maximum is kept right. */
    check_attention(2, 1, 24, 2, 300, 400.0);
    /* quantized caches: Q8_0 / Q4_0 keys meet a Q8_0 query; values dequantized in tiles */
    check_attention_types(8, 2, 64, 3, 150, 1.5, DT_Q8_0, DT_Q8_0);
    check_attention_types(6, 3, 32, 2, 90, 1.5, DT_Q4_0, DT_Q4_0);
    check_attention_types(4, 1, 128, 1, 200, 1.5, DT_F16, DT_Q8_0);
    check_attention_types(4, 2, 96, 17, 0, 1.5, DT_Q8_0, DT_F16);
}

/* ---- matmul ---- */

static double norm2(const double *a, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += a[i] * a[i];
    return sqrt(s);
}

/* Inner sizes: not a multiple of any SIMD width for the float types; for block types the
 * smallest odd multiple of the block (and of two blocks) above a few hundred. */
static int inner_size(enum dtype t)
{
    uint32_t bs = dtype_get(t)->block_size;
    return bs == 1 ? 101 : bs == 256 ? 768 : (int)bs * 7;
}

static void check_matmul_type(enum dtype wt)
{
    const kern_type *kt = kern_type_get(wt);
    const int n_in = inner_size(wt), n_out = 67, max_tok = 64;
    const char *name = dtype_get(wt)->name;
    uint64_t w_bytes = dtype_row_bytes(wt, (uint64_t)n_in) * n_out;
    float *wf = malloc(sizeof(float) * (size_t)n_in * n_out);
    float *x = malloc(sizeof(float) * (size_t)n_in * max_tok);
    float *xq = malloc(sizeof(float) * (size_t)n_in * max_tok);
    void *w = malloc(w_bytes);
    fill(wf, n_in * n_out, 0.5);
    fill(x, n_in * max_tok, 2.0);
    kt->from_float(wf, w, (int64_t)n_in * n_out);
    kt->to_float(w, wf, (int64_t)n_in * n_out); /* wf: exactly the weights the kernel sees */
    /* xq: exactly the activations the kernel sees */
    if (kt->act_type == DT_F32) {
        memcpy(xq, x, sizeof(float) * (size_t)n_in * max_tok);
    } else {
        const kern_type *at = kern_type_get(kt->act_type);
        void *aq = malloc(dtype_row_bytes(kt->act_type, (uint64_t)n_in) * max_tok);
        at->from_float(x, aq, (int64_t)n_in * max_tok);
        at->to_float(aq, xq, (int64_t)n_in * max_tok);
        free(aq);
    }
    double *ref = malloc(sizeof(double) * n_out * max_tok), *ref_f = malloc(sizeof(double) * n_out * max_tok);
    double *mag = malloc(sizeof(double) * n_out * max_tok);
    for (int t = 0; t < max_tok; t++)
        for (int o = 0; o < n_out; o++) {
            double s = 0, sf = 0, m = 0;
            for (int i = 0; i < n_in; i++) {
                double wv = wf[(size_t)o * n_in + i];
                s += wv * xq[(size_t)t * n_in + i];
                sf += wv * x[(size_t)t * n_in + i];
                m += fabs(wv * xq[(size_t)t * n_in + i]);
            }
            ref[t * n_out + o] = s;
            ref_f[t * n_out + o] = sf;
            mag[t * n_out + o] = m;
        }

    /* Where the path keeps this type packed, the kept matrix computes the same bits. */
    size_t kept_bytes = kern_keep_bytes(wt, n_in, n_out);
    void *kept = kept_bytes ? aligned_alloc(64, kept_bytes) : NULL;
    if (kept)
        kern_keep(ctx[2], w, wt, n_in, n_out, kept);
    float *y[4], *y1 = malloc(sizeof(float) * n_out);
    /* 3, 4 and 7: a batch of one tile's tokens that streams (mm_packed.stream) */
    static const int token_counts[] = {1, 3, 4, 7, 17, 64};
    for (size_t k = 0; k < sizeof token_counts / sizeof token_counts[0]; k++) {
        int nt_tok = token_counts[k];
        for (int nt = 1; nt <= 3; nt++) {
            y[nt] = malloc(sizeof(float) * n_out * nt_tok);
            kern_matmul(ctx[nt], w, wt, n_in, n_out, x, nt_tok, y[nt]);
            if (nt > 1)
                CHECK(!memcmp(y[nt], y[1], sizeof(float) * n_out * nt_tok),
                      "%s: %d tokens differ between 1 and %d threads", name, nt_tok, nt);
        }
        /* Same quantized activations => every output within float rounding of the exact dot. */
        double worst = 0;
        for (int i = 0; i < n_out * nt_tok; i++)
            worst = worse(worst, fabs(y[1][i] - ref[i]) / (mag[i] + 1e-30));
        CHECK(worst < 1e-5, "%s (%s): %d tokens: error %g of the magnitude", name,
              kern_path_name(kern_active_path()), nt_tok, worst);
        /* Against unquantized activations: only the activation quantization differs. */
        double diff[64 * 67], want[64 * 67];
        for (int i = 0; i < n_out * nt_tok; i++) {
            diff[i] = y[1][i] - ref_f[i];
            want[i] = ref_f[i];
        }
        double rel = norm2(diff, n_out * nt_tok) / norm2(want, n_out * nt_tok);
        CHECK(rel < (kt->act_type == DT_F32 ? 1e-6 : 1e-2), "%s: %d tokens: %g from the float result",
              name, nt_tok, rel);
        /* A token's outputs do not depend on the batch it was computed in. */
        int last = nt_tok - 1;
        kern_matmul(ctx[2], w, wt, n_in, n_out, x + (size_t)last * n_in, 1, y1);
        CHECK(!memcmp(y1, y[1] + (size_t)last * n_out, sizeof(float) * n_out),
              "%s: token %d alone differs from token %d of a batch of %d", name, last, last, nt_tok);
        for (int nt = 1; kept && nt <= 3; nt++) {
            float *yk = malloc(sizeof(float) * n_out * nt_tok);
            kern_matmul_kept(ctx[nt], kept, wt, n_in, n_out, x, nt_tok, yk);
            CHECK(!memcmp(yk, y[1], sizeof(float) * n_out * nt_tok),
                  "%s (%s): %d tokens of the kept matrix differ from the matrix's (%d threads)", name,
                  kern_path_name(kern_active_path()), nt_tok, nt);
            free(yk);
        }
        for (int nt = 1; nt <= 3; nt++)
            free(y[nt]);
    }
    free(kept);
    free(y1);
    free(ref);
    free(ref_f);
    free(mag);
    free(wf);
    free(x);
    free(xq);
    free(w);
}

/* A batch wide enough that a kept matrix is unpacked into the packed tiles' panels first
 * (mm_kept.wide_tokens, up to 256) computes what the matrix does, on 1 and 3 threads. */
static void check_kept_wide(enum dtype wt)
{
    const kern_type *kt = kern_type_get(wt);
    const int n_in = inner_size(wt), n_out = 37, n_tok = 300;
    size_t kept_bytes = kern_keep_bytes(wt, n_in, n_out);
    if (!kept_bytes)
        return;
    float *wf = malloc(sizeof(float) * (size_t)n_in * n_out);
    float *x = malloc(sizeof(float) * (size_t)n_in * n_tok);
    float *y = malloc(sizeof(float) * n_out * n_tok), *yk = malloc(sizeof(float) * n_out * n_tok);
    void *w = malloc(dtype_row_bytes(wt, (uint64_t)n_in) * n_out), *kept = aligned_alloc(64, kept_bytes);
    fill(wf, n_in * n_out, 0.5);
    fill(x, n_in * n_tok, 2.0);
    kt->from_float(wf, w, (int64_t)n_in * n_out);
    kern_keep(ctx[3], w, wt, n_in, n_out, kept);
    kern_matmul(ctx[1], w, wt, n_in, n_out, x, n_tok, y);
    for (int nt = 1; nt <= 3; nt += 2) {
        kern_matmul_kept(ctx[nt], kept, wt, n_in, n_out, x, n_tok, yk);
        CHECK(!memcmp(y, yk, sizeof(float) * n_out * n_tok),
              "%s (%s): %d tokens of the kept matrix differ from the matrix's (%d threads)",
              dtype_get(wt)->name, kern_path_name(kern_active_path()), n_tok, nt);
    }
    free(wf);
    free(x);
    free(y);
    free(yk);
    free(w);
    free(kept);
}

/* A NaN in one token's activations makes all of that token's outputs NaN and leaves the other
 * tokens alone, whatever the weight type: a quantized path must not launder it into a finite
 * block (the old activation quantizers skipped NaNs as fmaxf does, so a damaged model produced
 * finite garbage instead of stopping at session_eval's check). */
static void check_matmul_nan(enum dtype wt)
{
    const kern_type *kt = kern_type_get(wt);
    const int n_in = inner_size(wt), n_out = 13, n_tok = 3;
    float *wf = malloc(sizeof(float) * (size_t)n_in * n_out);
    float *x = malloc(sizeof(float) * (size_t)n_in * n_tok);
    float *y = malloc(sizeof(float) * n_out * n_tok), *y0 = malloc(sizeof(float) * n_out * n_tok);
    void *w = malloc(dtype_row_bytes(wt, (uint64_t)n_in) * n_out);
    fill(wf, n_in * n_out, 0.5);
    fill(x, n_in * n_tok, 2.0);
    kt->from_float(wf, w, (int64_t)n_in * n_out);
    kern_matmul(ctx[2], w, wt, n_in, n_out, x, n_tok, y0);
    x[n_in + n_in / 2] = NAN;
    kern_matmul(ctx[2], w, wt, n_in, n_out, x, n_tok, y);
    int nan_outputs = 0;
    for (int o = 0; o < n_out; o++)
        nan_outputs += isnan(y[n_out + o]) != 0;
    CHECK(nan_outputs == n_out, "%s (%s): a NaN activation gave %d of %d NaN outputs",
          dtype_get(wt)->name, kern_path_name(kern_active_path()), nan_outputs, n_out);
    CHECK(!memcmp(y, y0, sizeof(float) * n_out) &&
              !memcmp(y + 2 * n_out, y0 + 2 * n_out, sizeof(float) * n_out),
          "%s: a NaN in token 1 changed tokens 0 or 2", dtype_get(wt)->name);
    free(wf);
    free(x);
    free(y);
    free(y0);
    free(w);
}

static void test_matmul(void)
{
    int tested = 0;
    for (int t = 0; t < DT_COUNT; t++) {
        const dtype_info *di = dtype_get((uint32_t)t);
        if (!di || !di->name || !kern_type_get((enum dtype)t) || kern_type_get((enum dtype)t)->act_only)
            continue;
        check_matmul_type((enum dtype)t);
        check_kept_wide((enum dtype)t);
        check_matmul_nan((enum dtype)t);
        tested++;
    }
    CHECK(tested > 0, "no weight type to test");
}

/* The kernels' scratch running out is an error, not an abort (it used to abort): a product
 * whose activations need more scratch than any allocator gives — 2^30 tokens of 2^20 Q8_0
 * inputs, about 1.2 PB — returns -1 before it reads anything, a reservation that large fails,
 * and the context still works afterwards. */
static void test_matmul_out_of_memory(void)
{
    float x[64] = {0}, y[4];
    const int huge_in = 1 << 20, huge_tokens = 1 << 30;
    CHECK(kern_matmul(ctx[2], x, DT_Q8_0, huge_in, 1, x, huge_tokens, y) == -1,
          "a product needing 1.2 PB of scratch did not fail");
    CHECK(kern_ctx_reserve(ctx[2], huge_in, huge_tokens) == -1, "a 1.2 PB reservation succeeded");
    CHECK(kern_ctx_reserve(ctx[2], 64, 4) == 0, "a small reservation failed");
    uint8_t w[4 * 2 * 34] = {0};
    CHECK(kern_matmul(ctx[2], w, DT_Q8_0, 64, 4, x, 1, y) == 0 && y[0] == 0.0f,
          "the context does not work after running out of memory");
}

/* Every path's activation quantizers must produce exactly the reference bytes: the kernels'
 * results are defined by the reference quantization. Run on the bound path. */
static void test_act_quantizers(void)
{
    enum { N = 256 * 6 };
    static float x[N];
    fill(x, N, 3.0);
    for (int i = 256; i < 512; i++) /* a block of zeros */
        x[i] = 0;
    for (int i = 512; i < 768; i++) /* amax 127: id is 1 and every x.5 is a tie */
        x[i] = (float)((i % 255) - 127) + (i % 2 ? 0.5f : 0.0f);
    x[512] = 127.0f;
    for (int i = 768; i < 1024; i++) /* tiny values */
        x[i] *= 1e-30f;
    x[1100] = 5e4f; /* one outlier */
    const char *path = kern_path_name(kern_active_path());
    for (int t = 0; t < DT_COUNT; t++) {
        const kern_type *kt = kern_type_get((enum dtype)t);
        if (!kt)
            continue;
        const kern_type *at = kern_type_get(kt->act_type);
        CHECK(at->act_type == DT_F32 || at->quantize, "%s (%s): its activation format %s has no quantizer",
              dtype_get((uint32_t)t)->name, path, dtype_get((uint32_t)kt->act_type)->name);
        if (!kt->quantize)
            continue;
        size_t bytes = dtype_row_bytes((enum dtype)t, N);
        uint8_t *want = malloc(bytes), *got = malloc(bytes);
        kt->from_float(x, want, N);
        kt->quantize(x, got, N);
        CHECK(!memcmp(want, got, bytes), "%s (%s): the quantizer differs from the reference",
              dtype_get((uint32_t)t)->name, path);
        free(want);
        free(got);
    }
}

static void test_get_row(void)
{
    enum { N_IN = 256 * 3, ROWS = 5 };
    for (int t = 0; t < DT_COUNT; t++) {
        const dtype_info *di = dtype_get((uint32_t)t);
        const kern_type *kt = di && di->name ? kern_type_get((enum dtype)t) : NULL;
        if (!kt || kt->act_only)
            continue;
        float wf[N_IN * ROWS], all[N_IN * ROWS], row[N_IN];
        uint8_t *w = malloc(dtype_row_bytes((enum dtype)t, N_IN) * ROWS);
        fill(wf, N_IN * ROWS, 1.0);
        kt->from_float(wf, w, N_IN * ROWS);
        kt->to_float(w, all, N_IN * ROWS);
        kern_get_row(w, (enum dtype)t, N_IN, 3, row);
        CHECK(!memcmp(row, all + 3 * N_IN, sizeof row), "%s: row 3 differs", di->name);
        free(w);
    }
}

int main(void)
{
    for (int nt = 1; nt <= 3; nt++)
        REQUIRE((ctx[nt] = kern_ctx_create(nt)), "kern_ctx_create(%d)", nt);
    test_pool();
    test_rmsnorm();
    test_add_silu();
    test_softmax();
    test_rope();
    test_get_row();
    test_matmul_out_of_memory();
    static const enum kern_path paths[] = {KERN_SCALAR, KERN_AVX2, KERN_AVX512, KERN_NEON};
    enum kern_path best = kern_active_path();
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if (kern_use_path(paths[p]) != 0)
            continue;
        fprintf(stderr, "path %s\n", kern_path_name(paths[p]));
        test_act_quantizers();
        test_attention();
        test_matmul();
    }
    kern_use_path(best);
    for (int nt = 1; nt <= 3; nt++)
        kern_ctx_free(ctx[nt]);
    return test_done();
}
