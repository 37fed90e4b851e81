/* Speculative decoding (model/spec.h) on the trained fixtures.
 *
 * Greedy: with a draft model equal to the target, TinyStories-656K Q8_0 drafting for its F16
 * file, a random-weight draft that shares stories260K's vocabulary (mostly refused) and n-gram
 * drafting, the tokens are the plain decoder's, token for token, on one device and through
 * rings of 1 to 3 devices (workers in threads of this process) with uneven windows and k > 1,
 * across context shifts; the same for a Qwen3-MoE model drafting for itself and by n-grams.
 * Sampling: the first two generated tokens, over thousands of seeds,
 * follow the exact distribution of sampling the target token by token (a chi-square bound).
 * Also: a draft with another vocabulary is refused, and drafts are cut to the context left. */
#include <stdlib.h>
#include <string.h>

#include "cluster/ring_engine.h"
#include "model/spec.h"
#include "model/synth.h"
#include "support/fake_ring.h"
#include "support/fidelity.h"
#include "support/synth_tmp.h"
#include "test.h"

enum { N_CTX = 40, N_BATCH = 24, N_GEN = 72 };

static const char *fx;

/* A fixture model, or a file given by its absolute path. */
static model *load(const char *name)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s%s%s", name[0] == '/' ? "" : fx,
             name[0] == '/' ? "" : "/models/", name);
    model *m = model_load(path, err, sizeof err);
    REQUIRE(m, "%s", err);
    return m;
}

static sampler_params greedy(void)
{
    sampler_params p;
    sampler_params_default(&p);
    p.temp = 0.0f;
    p.repeat_penalty = 1.1f; /* the penalty window must follow the kept tokens */
    return p;
}

/* Prompt, then n_gen tokens, shifting the context (keeping the first token) when it is full. */
static int generate(session *s, spec *sp, const sampler_params *spar, const fid_case *c,
                    int32_t *toks, spec_counts *cnt, char *err, size_t errlen)
{
    sampler *smp = sampler_create(spar, s->m->hp.n_vocab);
    int rc = session_eval(s, c->prompt, c->n_prompt, NULL, err, errlen);
    for (int i = 0; i < c->n_prompt; i++)
        sampler_accept(smp, c->prompt[i]);
    int k = 0;
    if (rc == 0) {
        toks[k++] = sampler_sample(smp, s->logits);
        sampler_accept(smp, toks[0]);
    }
    while (rc == 0 && k < N_GEN) {
        if (s->n_past == s->n_ctx) {
            int d = session_shift(s, 1);
            spec_shifted(sp, 1, d);
        }
        int32_t out[SPEC_MAX_DRAFT + 1];
        const int p0 = s->n_past;
        int n = spec_step(sp, s, smp, toks[k - 1], N_GEN - k, out, cnt, err, errlen);
        if (n < 1 || n > N_GEN - k) {
            if (n > 0)
                snprintf(err, errlen, "a step gave %d tokens where %d were asked for", n,
                         N_GEN - k);
            rc = -1;
            break;
        }
        /* the cache holds the step's token and the kept drafts: not the refused ones */
        if (s->n_past != p0 + n || s->tokens[p0] != toks[k - 1] ||
            memcmp(s->tokens + p0 + 1, out, sizeof(int32_t) * (size_t)(n - 1))) {
            snprintf(err, errlen, "after a step at %d the history does not end with the kept "
                                  "tokens (%d positions for %d tokens)", p0, s->n_past, n);
            rc = -1;
        }
        memcpy(toks + k, out, sizeof(int32_t) * (size_t)n);
        k += n;
    }
    sampler_free(smp);
    return rc;
}

/* ---- greedy identity through rings ---- */

static ring_model rm;
static engine_backend backends[2];
static fake_worker workers[2];

static void start_workers(model *m)
{
    char err[512];
    REQUIRE(ring_model_init(&rm, m, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 2; i++) {
        engine_backend_init(&backends[i], &rm, m, NULL);
        REQUIRE(fake_worker_start_backend(&workers[i], &backends[i].b, NULL, 0) == 0, "worker");
    }
}

static void stop_workers(void)
{
    for (int i = 0; i < 2; i++)
        fake_worker_stop(&workers[i]);
    ring_model_release(&rm);
}

typedef struct ring_case {
    int n_dev;        /* 0: a session of this device, without the ring runtime */
    int lw[3];
    int k;
} ring_case;

typedef struct spec_case {
    const char *draft; /* model file; NULL: the target itself; "" with SPEC_NGRAM */
    enum spec_mode mode;
    int n_max;
    float p_min;
    bool saves;       /* fewer evaluations than tokens (not for a random draft) */
    int ngram_min;    /* 0: the default */
} spec_case;

static session *open_session(const model *m, const ring_case *rc, ring_head *h, kern_ctx *kc,
                             char *err, size_t errlen)
{
    if (rc->n_dev == 0)
        return session_create(m, kc, N_CTX, N_BATCH, err, errlen);
    char list[256];
    fake_worker_list(workers, rc->n_dev - 1, list, sizeof list);
    ring_opts ro = {.workers = list, .lw = rc->lw, .n_lw = rc->n_dev, .k = rc->k,
                    .prefetch = true, .release = RELEASE_AUTO, .method = PREFETCH_MADVISE,
                    .wire = WIRE_F32};
    return ring_head_session(h, &ro, NULL, m, kc, N_CTX, N_BATCH, err, errlen);
}

static void check_greedy(const char *case_json, float penalty, const spec_case *sc, int n_sc,
                         const ring_case *rcs, int n_rc)
{
    char err[512], dir[4096];
    fid_case c;
    snprintf(dir, sizeof dir, "%s/reference", fx);
    REQUIRE(fid_case_load(dir, case_json, &c, err, sizeof err) == 0, "%s", err);
    model *m = load(c.model_file);
    sampler_params sp = greedy();
    sp.repeat_penalty = penalty;
    kern_ctx *kc = kern_ctx_create(1);

    /* the plain decoder on this device: the tokens every other run must give */
    int32_t ref[N_GEN];
    session *s = session_create(m, kc, N_CTX, N_BATCH, err, sizeof err);
    REQUIRE(s, "%s", err);
    REQUIRE(generate(s, NULL, &sp, &c, ref, NULL, err, sizeof err) == 0, "%s", err);
    session_free(s);
    if (penalty == 1.0f) /* the harness decodes as the reference did (before the first shift) */
        CHECK(memcmp(ref, c.greedy, sizeof(int32_t) * 32) == 0, "%s: plain greedy tokens differ "
              "from the reference", c.model_file);

    start_workers(m);
    for (int i = 0; i < n_sc; i++) {
        model *dm = sc[i].mode == SPEC_DRAFT ? load(sc[i].draft ? sc[i].draft : c.model_file)
                                             : NULL;
        for (int j = 0; j < n_rc; j++) {
            const ring_case *rc = &rcs[j];
            ring_head h = {0};
            s = open_session(m, rc, &h, kc, err, sizeof err);
            REQUIRE(s, "%s: %d devices: %s", c.model_file, rc->n_dev, err);
            spec_params p;
            spec_params_default(&p, sc[i].mode);
            p.n_max = sc[i].n_max;
            p.p_min = sc[i].p_min;
            if (sc[i].ngram_min)
                p.ngram_min = sc[i].ngram_min;
            spec *sx = spec_create(&p, m, dm, kc, s->n_ctx, s->n_batch, 7, err, sizeof err);
            REQUIRE(sx, "%s", err);
            int32_t got[N_GEN];
            spec_counts cnt = {0};
            int rc_gen = generate(s, sx, &sp, &c, got, &cnt, err, sizeof err);
            const char *what = sc[i].mode == SPEC_NGRAM ? "n-gram" : sc[i].draft ? sc[i].draft
                                                                                  : "itself";
            CHECK(rc_gen == 0, "%s drafted by %s, %d devices: %s", c.model_file, what, rc->n_dev,
                  err);
            int diff = 0;
            while (diff < N_GEN && got[diff] == ref[diff])
                diff++;
            CHECK(rc_gen || diff == N_GEN, "%s drafted by %s, %d devices (lw %d,%d,%d k %d): "
                  "token %d is %d, plain decoding gives %d", c.model_file, what, rc->n_dev,
                  rc->lw[0], rc->lw[1], rc->lw[2], rc->k, diff, got[diff], ref[diff]);
            /* an n-gram drafter drafts only where the text repeats, which a random model's
             * need not (a case that must save evaluations says so with saves) */
            bool may_skip = sc[i].mode == SPEC_NGRAM && !sc[i].saves;
            CHECK((cnt.drafted > 0 || may_skip) && (!sc[i].saves || cnt.steps < N_GEN - 1),
                  "%s drafted by "
                  "%s: %ld drafts, %ld evaluations for %d tokens", c.model_file, what,
                  cnt.drafted, cnt.steps, N_GEN);
            if (sc[i].mode == SPEC_DRAFT && !sc[i].draft) /* the same model agrees with itself */
                CHECK(cnt.accepted == cnt.drafted, "%s drafting for itself, %d devices: %ld of "
                      "%ld drafts kept", c.model_file, rc->n_dev, cnt.accepted, cnt.drafted);
            if (getenv("PRIMA_TEST_VERBOSE"))
                fprintf(stderr, "%s by %s, %d devices: %ld evaluations, drafted %ld, kept %ld\n",
                        c.model_file, what, rc->n_dev, cnt.steps, cnt.drafted, cnt.accepted);
            spec_free(sx);
            if (rc->n_dev)
                ring_head_close(&h);
            session_free(s);
        }
        model_free(dm);
    }
    stop_workers();
    kern_ctx_free(kc);
    model_free(m);
    fid_case_free(&c);
}

/* ---- sampling follows the target's distribution ---- */

/* The chi-square value with df degrees of freedom exceeded with probability about 1e-5
 * (Wilson-Hilferty). */
static double chi2_bound(int df)
{
    const double z = 4.265, a = 2.0 / (9.0 * df);
    double t = 1.0 - a + z * sqrt(a);
    return df * t * t * t;
}

/* Pearson's statistic of counts (over trials) against probabilities, over the cells expected
 * at least 5 times, the others pooled into one; *tv: the total variation distance. */
static double chi_square(const double *prob, const long *count, size_t n, int trials,
                         int *cells, double *tv)
{
    double x2 = 0.0, pooled_e = 0.0;
    long pooled_o = 0;
    *cells = 0;
    *tv = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = prob[i] * trials;
        *tv += fabs((double)count[i] / trials - prob[i]) / 2;
        if (e >= 5.0) {
            x2 += ((double)count[i] - e) * ((double)count[i] - e) / e;
            ++*cells;
        } else {
            pooled_e += e;
            pooled_o += count[i];
        }
    }
    if (pooled_e > 0.0) {
        x2 += ((double)pooled_o - pooled_e) * ((double)pooled_o - pooled_e) / pooled_e;
        ++*cells;
    }
    return x2;
}

/* A sampler whose window holds the prompt, x0 and extra (if >= 0). */
static sampler *fresh_sampler(sampler_params *sp, uint64_t seed, int nv, const int32_t *prompt,
                              int n_prompt, int32_t x0, int32_t extra)
{
    sp->seed = seed;
    sampler *smp = sampler_create(sp, nv);
    REQUIRE(smp, "sampler_create");
    for (int i = 0; i < n_prompt; i++)
        sampler_accept(smp, prompt[i]);
    sampler_accept(smp, x0);
    if (extra >= 0)
        sampler_accept(smp, extra);
    return smp;
}

/* Over `trials` seeds, the first two tokens generated after prompt + x0 against their exact
 * joint distribution under the sampler's chain (every filter on, a penalty included). */
static void check_distribution(const char *target, model *dm, const char *draft,
                               enum spec_mode mode, bool plain, const int32_t *prompt,
                               int n_prompt, int32_t x0, int trials)
{
    char err[512];
    model *m = load(target);
    const int nv = m->hp.n_vocab;
    kern_ctx *kc = kern_ctx_create(1);
    session *s = session_create(m, kc, 64, 16, err, sizeof err);
    REQUIRE(s, "%s", err);
    sampler_params sp = {.temp = 0.9f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                         .repeat_penalty = 1.2f, .repeat_last_n = 64, .seed = 1};
    /* exact: P(t1, t2) = p1(t1) p2(t2 | t1) */
    REQUIRE(session_eval(s, prompt, n_prompt, NULL, err, sizeof err) == 0, "%s", err);
    REQUIRE(session_eval(s, &x0, 1, NULL, err, sizeof err) == 0, "%s", err);
    double *p1 = calloc((size_t)nv, sizeof *p1), *joint = calloc((size_t)nv * nv, sizeof *joint);
    double *row = calloc((size_t)nv, sizeof *row);
    sampler *smp;
    smp = fresh_sampler(&sp, 1, nv, prompt, n_prompt, x0, -1);
    sampler_probs(smp, s->logits, p1);
    sampler_free(smp);
    for (int32_t t1 = 0; t1 < nv; t1++) {
        if (p1[t1] <= 0.0)
            continue;
        session_truncate(s, n_prompt + 1);
        REQUIRE(session_eval(s, &t1, 1, NULL, err, sizeof err) == 0, "%s", err);
        smp = fresh_sampler(&sp, 1, nv, prompt, n_prompt, x0, t1);
        sampler_probs(smp, s->logits, row);
        sampler_free(smp);
        for (int t2 = 0; t2 < nv; t2++)
            joint[(size_t)t1 * nv + t2] = p1[t1] * row[t2];
    }

    spec *sx = NULL;
    if (!plain) {
        spec_params p;
        spec_params_default(&p, mode);
        p.n_max = 4;
        p.p_min = 0.0f;
        sx = spec_create(&p, m, dm, kc, s->n_ctx, s->n_batch, 7, err, sizeof err);
        REQUIRE(sx, "%s", err);
    }
    long *count = calloc((size_t)nv * nv, sizeof *count);
    spec_counts cnt = {0};
    for (int t = 0; t < trials; t++) {
        session_truncate(s, n_prompt);
        smp = fresh_sampler(&sp, 1000 + (uint64_t)t, nv, prompt, n_prompt, x0, -1);
        int32_t got[2 + SPEC_MAX_DRAFT + 1], tok = x0;
        int k = 0;
        while (k < 2) {
            int n = spec_step(sx, s, smp, tok, 8, got + k, &cnt, err, sizeof err);
            REQUIRE(n > 0, "%s", err);
            k += n;
            tok = got[k - 1];
        }
        count[(size_t)got[0] * nv + got[1]]++;
        sampler_free(smp);
    }

    /* the pairs, and the first token alone (more power against a bias in the first check) */
    double tv;
    int cells;
    double x2 = chi_square(joint, count, (size_t)nv * nv, trials, &cells, &tv);
    double *m1 = calloc((size_t)nv, sizeof *m1);
    long *c1 = calloc((size_t)nv, sizeof *c1);
    for (size_t i = 0; i < (size_t)nv * nv; i++) {
        m1[i / nv] += joint[i];
        c1[i / nv] += count[i];
    }
    double tv1;
    int cells1;
    double x2_1 = chi_square(m1, c1, (size_t)nv, trials, &cells1, &tv1);
    free(m1);
    free(c1);
    const char *what = plain ? "plain" : mode == SPEC_NGRAM ? "n-gram" : draft;
    double bound = chi2_bound(cells - 1), bound1 = chi2_bound(cells1 - 1);
    CHECK(x2 <= bound, "%s drafted by %s: pairs: chi-square %.1f over %d cells exceeds %.1f "
          "(p ~ 1e-5); total variation %.3f", target, what, x2, cells, bound, tv);
    CHECK(x2_1 <= bound1, "%s drafted by %s: first token: chi-square %.1f over %d cells exceeds "
          "%.1f (p ~ 1e-5); total variation %.3f", target, what, x2_1, cells1, bound1, tv1);
    if (!plain)
        CHECK(cnt.drafted > 0 && cnt.accepted > 0 && cnt.accepted < cnt.drafted,
              "%s drafted by %s: %ld drafts, %ld kept: the test needs both outcomes", target,
              what, cnt.drafted, cnt.accepted);
    if (getenv("PRIMA_TEST_VERBOSE"))
        fprintf(stderr, "%s by %s: pairs chi-square %.1f, %d cells (bound %.1f), TV %.3f; first "
                        "token %.1f, %d cells (bound %.1f), TV %.3f; drafted %ld, kept %ld\n",
                target, what, x2, cells, bound, tv, x2_1, cells1, bound1, tv1, cnt.drafted,
                cnt.accepted);
    free(count);
    free(p1);
    free(joint);
    free(row);
    spec_free(sx);
    session_free(s);
    kern_ctx_free(kc);
    model_free(m);
}

/* A one-layer random-weight model written to a temporary file, loaded, the file unlinked: with
 * stories260K's vocabulary (vocab_from) or the built-in one of n_vocab tokens. */
static model *random_model(const char *vocab_from, int n_vocab)
{
    char err[512];
    synth_params q;
    synth_defaults(&q);
    q.n_layer = 1;
    q.n_embd = 32;
    q.n_ff = 64;
    q.n_head = q.n_head_kv = 2;
    q.n_vocab = n_vocab;
    q.vocab_from = vocab_from;
    model *m = synth_tmp_load(&q, err, sizeof err);
    REQUIRE(m, "%s", err);
    return m;
}

/* ---- refusals and limits ---- */

static void check_vocab_refused(void)
{
    char err[512];
    model *t = load("stories260K.gguf"), *other = load("tinystories-656k-q8_0.gguf");
    kern_ctx *kc = kern_ctx_create(1);
    spec_params p;
    spec_params_default(&p, SPEC_DRAFT);
    spec *sx = spec_create(&p, t, other, kc, 32, 8, 7, err, sizeof err);
    CHECK(!sx && strstr(err, "vocabulary"), "a 2048-token draft for a 512-token model: %s",
          sx ? "accepted" : err);
    spec_free(sx);

    /* the same size, other texts: a synthetic model with the built-in byte-level vocabulary */
    model *same_size = random_model(NULL, t->hp.n_vocab);
    REQUIRE(same_size->hp.n_vocab == t->hp.n_vocab, "vocabulary of %d", same_size->hp.n_vocab);
    sx = spec_create(&p, t, same_size, kc, 32, 8, 7, err, sizeof err);
    CHECK(!sx && strstr(err, "vocabulary") && strstr(err, "token"),
          "a draft with other token texts: %s", sx ? "accepted" : err);
    spec_free(sx);
    model_free(same_size);
    kern_ctx_free(kc);
    model_free(other);
    model_free(t);
}

/* Near the end of the context a step drafts only what fits beside the token it evaluates. */
static void check_context_cut(enum spec_mode mode)
{
    char err[512];
    model *m = load("stories260K.gguf");
    kern_ctx *kc = kern_ctx_create(1);
    const int n_ctx = 16;
    session *s = session_create(m, kc, n_ctx, 16, err, sizeof err);
    REQUIRE(s, "%s", err);
    sampler_params sp = greedy();
    sampler *smp = sampler_create(&sp, m->hp.n_vocab);
    spec_params p;
    spec_params_default(&p, mode);
    p.p_min = 0.0f;
    spec *sx = spec_create(&p, m, mode == SPEC_DRAFT ? m : NULL, kc, n_ctx, 16, 7, err,
                           sizeof err);
    REQUIRE(sx, "%s", err);
    /* a prompt that repeats itself, so that n-grams find a continuation too */
    int32_t prompt[13] = {1, 400, 261, 378, 400, 261, 378, 400, 261, 378, 400, 261, 378};
    REQUIRE(session_eval(s, prompt, 13, NULL, err, sizeof err) == 0, "%s", err);
    int32_t tok = 400, out[SPEC_MAX_DRAFT + 1];
    spec_counts cnt = {0};
    while (s->n_past < n_ctx) {
        const int room = n_ctx - s->n_past - 1;
        long before = cnt.drafted;
        int n = spec_step(sx, s, smp, tok, 100, out, &cnt, err, sizeof err);
        REQUIRE(n > 0, "at %d of %d positions: %s", s->n_past, n_ctx, err);
        CHECK(cnt.drafted - before <= room, "%ld drafts with room for %d", cnt.drafted - before,
              room);
        CHECK(s->n_past <= n_ctx, "the step overran the context");
        tok = out[n - 1];
    }
    CHECK(cnt.drafted > 0, "%s: nothing drafted", mode == SPEC_NGRAM ? "n-gram" : "draft model");
    spec_free(sx);
    sampler_free(smp);
    session_free(s);
    kern_ctx_free(kc);
    model_free(m);
}

int main(void)
{
    fx = test_fixtures();
    check_vocab_refused();
    check_context_cut(SPEC_DRAFT);
    check_context_cut(SPEC_NGRAM);

    /* stories260K: 5 layers */
    const ring_case rings5[] = {
        {0, {0}, 0},
        {1, {2}, 0},                /* one device, its layers in 3 windows (the last partial) */
        {2, {1, 1}, 3},             /* 3 rounds, partial */
        {3, {1, 2, 2}, 0},          /* uneven */
        {3, {1, 1, 1}, 2},          /* 2 rounds, partial */
    };
    /* tinystories-656k: 2 layers */
    const ring_case rings2[] = {
        {0, {0}, 0},
        {1, {1}, 2},
        {2, {1, 0}, 2},             /* a forwarder, 2 rounds */
        {3, {1, 0, 1}, 0},
    };
    const spec_case stories[] = {
        {NULL, SPEC_DRAFT, 16, 0.8f, true, 0},
        {"synth-spm512-l4-e256-q4_0.gguf", SPEC_DRAFT, 3, 0.0f, false, 0}, /* random: refused */
        {"", SPEC_NGRAM, 16, 0.0f, true, 0},
    };
    check_greedy("stories260K.once.json", 1.0f, stories, 3, rings5, 5);
    const spec_case tiny[] = {
        {NULL, SPEC_DRAFT, 16, 0.8f, true, 0},
        {"tinystories-656k-q8_0.gguf", SPEC_DRAFT, 6, 0.0f, true, 0},
        {"", SPEC_NGRAM, 16, 0.0f, true, 1}, /* its text repeats single tokens only */
    };
    check_greedy("tinystories-656k-f16.lily.json", 1.1f, tiny, 3, rings2, 4);
    /* a model of experts (2 layers): a verified batch routes each row as its token alone, so
     * the tokens are plain decoding's; drafting for itself it is named as another file, since
     * its drafts after a context shift (evaluated afresh, where the target's cache was moved
     * and re-rotated) may route differently at this random model's near-ties and be refused */
    const spec_case experts[] = {
        {"synth-qwen3moe-l2-e64-q8_0.gguf", SPEC_DRAFT, 8, 0.0f, true, 0},
        {"", SPEC_NGRAM, 16, 0.0f, false, 1},
    };
    check_greedy("synth-qwen3moe-l2-e64-q8_0.route.json", 1.0f, experts, 2, rings2, 4);

    /* prompt: a reference prompt, 12 tokens of its greedy continuation, then the first three
     * again, so that n-grams find the earlier occurrence; the 4th follows (x0) */
    char stories_path[4096];
    snprintf(stories_path, sizeof stories_path, "%s/models/stories260K.gguf", fx);
    struct { const char *json, *draft; } dist[] = {
        {"stories260K.once.json", "a random draft"},  /* mostly refused: the residual matters */
        {"tinystories-656k-f16.lily.json", "tinystories-656k-q8_0.gguf"}, /* mostly kept */
    };
    for (int i = 0; i < 2; i++) {
        char err[512], dir[4096];
        fid_case c;
        snprintf(dir, sizeof dir, "%s/reference", fx);
        REQUIRE(fid_case_load(dir, dist[i].json, &c, err, sizeof err) == 0, "%s", err);
        int32_t prompt[64];
        int n = 0;
        for (int j = 0; j < c.n_prompt; j++)
            prompt[n++] = c.prompt[j];
        for (int j = 0; j < 12; j++)
            prompt[n++] = c.greedy[j];
        for (int j = 0; j < 3; j++)
            prompt[n++] = c.greedy[j];
        const int trials = 2000;
        model *dm = i == 0 ? random_model(stories_path, 0) : load(dist[i].draft);
        check_distribution(c.model_file, NULL, "", SPEC_DRAFT, true, prompt, n, c.greedy[3],
                           trials);
        check_distribution(c.model_file, dm, dist[i].draft, SPEC_DRAFT, false, prompt, n,
                           c.greedy[3], trials);
        check_distribution(c.model_file, NULL, "", SPEC_NGRAM, false, prompt, n, c.greedy[3],
                           trials);
        model_free(dm);
        fid_case_free(&c);
    }
    return test_done();
}
