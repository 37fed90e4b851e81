/* The sampler against distributions computed by hand: greedy ties, top-k / top-p / min-p
 * truncation, temperature draws matching softmax probabilities, the three penalties and their
 * window, seed reproducibility, and non-finite logits. */
#include <math.h>

#include "model/sample.h"
#include "test.h"

static sampler_params plain(void)
{
    /* everything off: temperature 1 over the full distribution */
    return (sampler_params){.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                            .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 42};
}

/* Relative frequency of each token over many draws. */
static void frequencies(const sampler_params *p, const float *logits, int n, int draws,
                        double *freq)
{
    sampler *s = sampler_create(p, n);
    REQUIRE(s, "sampler_create");
    int count[16] = {0};
    REQUIRE(n <= 16, "at most 16 tokens");
    for (int i = 0; i < draws; i++) {
        int32_t t = sampler_sample(s, logits);
        REQUIRE(t >= 0 && t < n, "token %d out of range", t);
        count[t]++;
    }
    for (int i = 0; i < n; i++)
        freq[i] = (double)count[i] / draws;
    sampler_free(s);
}

static void test_greedy(void)
{
    sampler_params p = plain();
    p.temp = 0.0f;
    sampler *s = sampler_create(&p, 5);
    float l[5] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
    CHECK(sampler_sample(s, l) == 1, "greedy tie must go to the lowest id");
    l[4] = 3.5f;
    CHECK(sampler_sample(s, l) == 4, "greedy must take the maximum");
    sampler_free(s);
}

static void test_temperature(void)
{
    const float probs[4] = {0.5f, 0.3f, 0.15f, 0.05f};
    float l[4];
    for (int i = 0; i < 4; i++)
        l[i] = logf(probs[i]) + 7.0f; /* an offset must not matter */
    double f[4];
    sampler_params p = plain();
    frequencies(&p, l, 4, 40000, f);
    for (int i = 0; i < 4; i++)
        CHECK(fabs(f[i] - probs[i]) < 0.015, "T=1: token %d drawn %.3f, p = %.3f", i, f[i],
              (double)probs[i]);
    /* T = 0.5 squares the probabilities (renormalized) */
    p.temp = 0.5f;
    frequencies(&p, l, 4, 40000, f);
    double z = 0.25 + 0.09 + 0.0225 + 0.0025;
    for (int i = 0; i < 4; i++) {
        double want = (double)probs[i] * probs[i] / z;
        CHECK(fabs(f[i] - want) < 0.015, "T=0.5: token %d drawn %.3f, want %.3f", i, f[i], want);
    }
}

static void test_truncation(void)
{
    const float probs[5] = {0.4f, 0.3f, 0.15f, 0.1f, 0.05f};
    float l[5];
    for (int i = 0; i < 5; i++)
        l[i] = logf(probs[i]);
    double f[5];

    sampler_params p = plain();
    p.top_k = 2; /* renormalized 0.4 : 0.3 */
    frequencies(&p, l, 5, 40000, f);
    CHECK(f[2] == 0 && f[3] == 0 && f[4] == 0, "top-k 2 drew a token outside the top 2");
    CHECK(fabs(f[0] - 4.0 / 7.0) < 0.015, "top-k 2: token 0 drawn %.3f, want %.3f", f[0], 4.0 / 7.0);

    p = plain();
    p.top_p = 0.8f; /* 0.4 + 0.3 < 0.8 <= 0.4 + 0.3 + 0.15: three tokens */
    frequencies(&p, l, 5, 40000, f);
    CHECK(f[2] > 0 && f[3] == 0 && f[4] == 0, "top-p 0.8 must keep exactly tokens 0..2");
    CHECK(fabs(f[2] - 0.15 / 0.85) < 0.015, "top-p: token 2 drawn %.3f, want %.3f", f[2],
          0.15 / 0.85);

    p = plain();
    p.min_p = 0.3f; /* p >= 0.12: tokens 0..2 */
    frequencies(&p, l, 5, 40000, f);
    CHECK(f[2] > 0 && f[3] == 0 && f[4] == 0, "min-p 0.3 must keep exactly tokens 0..2");

    p = plain();
    p.top_k = 1; /* whatever the temperature, only the best token */
    p.temp = 5.0f;
    frequencies(&p, l, 5, 1000, f);
    CHECK(f[0] == 1.0, "top-k 1 must always give the most likely token");
}

static void test_penalties(void)
{
    sampler_params p = plain();
    p.temp = 0.0f;
    p.repeat_penalty = 1.25f;
    sampler *s = sampler_create(&p, 4);
    float l[4] = {2.0f, 1.7f, -1.0f, -1.1f};
    sampler_accept(s, 0);
    /* 2.0 / 1.25 = 1.6 < 1.7 */
    CHECK(sampler_sample(s, l) == 1, "repeat penalty must divide a positive logit");
    float neg[4] = {-5.0f, -5.0f, -1.0f, -1.1f};
    sampler_accept(s, 2);
    /* -1.0 * 1.25 = -1.25 < -1.1 */
    CHECK(sampler_sample(s, neg) == 3, "repeat penalty must multiply a negative logit");
    sampler_free(s);

    p = plain();
    p.temp = 0.0f;
    p.frequency_penalty = 0.2f;
    p.presence_penalty = 0.05f;
    s = sampler_create(&p, 3);
    float f[3] = {1.0f, 0.6f, 0.0f};
    sampler_accept(s, 0);
    CHECK(sampler_sample(s, f) == 0, "one occurrence: 1.0 - 0.25 = 0.75 still wins");
    sampler_accept(s, 0);
    /* two occurrences: 1.0 - 0.4 - 0.05 = 0.55 < 0.6 */
    CHECK(sampler_sample(s, f) == 1, "frequency penalty must count occurrences");
    sampler_free(s);

    /* the window forgets tokens older than repeat_last_n */
    p = plain();
    p.temp = 0.0f;
    p.repeat_penalty = 10.0f;
    p.repeat_last_n = 2;
    s = sampler_create(&p, 3);
    float w[3] = {1.0f, 0.5f, 0.0f};
    sampler_accept(s, 0);
    CHECK(sampler_sample(s, w) == 1, "token 0 is in the window");
    sampler_accept(s, 2);
    sampler_accept(s, 2);
    CHECK(sampler_sample(s, w) == 0, "token 0 has left the window of 2");
    sampler_reset(s);
    sampler_accept(s, 0);
    CHECK(sampler_sample(s, w) == 1, "after a reset the window starts again");
    sampler_free(s);
}

static void test_seed(void)
{
    float l[64];
    for (int i = 0; i < 64; i++)
        l[i] = (float)(i % 7) * 0.3f;
    sampler_params p = plain();
    sampler *a = sampler_create(&p, 64), *b = sampler_create(&p, 64);
    p.seed = 43;
    sampler *c = sampler_create(&p, 64);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 200; i++) {
        int32_t ta = sampler_sample(a, l), tb = sampler_sample(b, l), tc = sampler_sample(c, l);
        same_ab += ta == tb;
        same_ac += ta == tc;
    }
    CHECK(same_ab == 200, "the same seed must give the same tokens (%d/200)", same_ab);
    CHECK(same_ac < 50, "different seeds gave %d/200 equal tokens", same_ac);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}

/* NaN and infinite logits, under every filter chain the CLI offers: the token is always one of
 * the candidates (on the old code all-NaN logits left min-p with none and the fallback read
 * c[-1]), NaNs rank below every number, and a +inf logit wins. */
static void test_non_finite(void)
{
    enum { N = 8 };
    sampler_params chains[4];
    sampler_params_default(&chains[0]);                     /* top-k, top-p, min-p */
    chains[1] = chains[0], chains[1].temp = 0.0f;           /* greedy */
    chains[2] = chains[0], chains[2].repeat_penalty = 1.1f; /* a penalty on the window */
    chains[3] = plain();                                    /* no filter */
    float all_nan[N], some_nan[N], pos_inf[N], neg_inf[N];
    for (int i = 0; i < N; i++) {
        all_nan[i] = NAN;
        some_nan[i] = i == 5 ? 1.0f : NAN;
        pos_inf[i] = i == 3 ? INFINITY : (float)i;
        neg_inf[i] = -INFINITY;
    }
    for (int c = 0; c < 4; c++) {
        sampler *s = sampler_create(&chains[c], N);
        REQUIRE(s, "sampler_create");
        for (int k = 0; k < N; k++)
            sampler_accept(s, k); /* the penalty sees every token */
        for (int rep = 0; rep < 20; rep++) {
            int32_t t = sampler_sample(s, all_nan);
            CHECK(t >= 0 && t < N, "chain %d: all-NaN logits gave token %d", c, t);
            t = sampler_sample(s, neg_inf);
            CHECK(t >= 0 && t < N, "chain %d: all -inf logits gave token %d", c, t);
            CHECK(sampler_sample(s, some_nan) == 5, "chain %d: a NaN was chosen over 1.0", c);
            CHECK(sampler_sample(s, pos_inf) == 3, "chain %d: +inf was not chosen", c);
        }
        sampler_free(s);
    }
}

int main(void)
{
    test_non_finite();
    test_greedy();
    test_temperature();
    test_truncation();
    test_penalties();
    test_seed();
    return test_done();
}
