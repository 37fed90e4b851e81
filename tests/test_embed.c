/* session_embed: the mean of the last hidden states after the final norm, unit length. Checked
 * against a computation of its own: the rows the layers leave in the session's buffer after one
 * batch of every token (session_eval), normed here in double precision with the file's norm
 * weights, averaged and scaled, while the embedding itself is evaluated in batches of 2 (so that
 * it pools across batches); and it is the same after another sequence was in the cache. On the
 * fixture models. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/session.h"
#include "test.h"

#define N_TOK 7

static void reference(const model *m, kern_ctx *kc, const int32_t *toks, double *ref)
{
    const int d = m->hp.n_embd;
    char err[256];
    session *s = session_create(m, kc, 64, 16, err, sizeof err);
    REQUIRE(s, "%s", err);
    REQUIRE(session_eval(s, toks, N_TOK, NULL, err, sizeof err) == 0, "%s", err);
    const float *w = m->output_norm->data;
    memset(ref, 0, sizeof *ref * (size_t)d);
    for (int t = 0; t < N_TOK; t++) {
        const float *h = s->hidden + (size_t)t * (size_t)d;
        double ss = 0;
        for (int i = 0; i < d; i++)
            ss += (double)h[i] * h[i];
        double scale = 1.0 / sqrt(ss / d + m->hp.rms_eps);
        for (int i = 0; i < d; i++)
            ref[i] += h[i] * scale * w[i] / N_TOK;
    }
    double norm = 0;
    for (int i = 0; i < d; i++)
        norm += ref[i] * ref[i];
    for (int i = 0; i < d; i++)
        ref[i] /= sqrt(norm);
    session_free(s);
}

static void check_model(const char *name, const model *m, kern_ctx *kc)
{
    const int d = m->hp.n_embd;
    int32_t toks[N_TOK], other[3] = {5, 6, 7};
    for (int i = 0; i < N_TOK; i++)
        toks[i] = (int32_t)((i * 37 + 11) % m->hp.n_vocab);
    double *ref = malloc(sizeof *ref * (size_t)d);
    float *got = malloc(sizeof *got * (size_t)d), *again = malloc(sizeof *again * (size_t)d);
    REQUIRE(ref && got && again, "memory");
    reference(m, kc, toks, ref);
    char err[256];
    session *s = session_create(m, kc, 64, 2, err, sizeof err);
    REQUIRE(s, "%s", err);
    REQUIRE(session_embed(s, toks, N_TOK, got, err, sizeof err) == 0, "%s: %s", name, err);
    CHECK(s->n_past == N_TOK, "%s: history %d", name, s->n_past);
    double worst = 0, norm = 0;
    for (int i = 0; i < d; i++) {
        worst = fmax(worst, fabs(got[i] - ref[i]));
        norm += (double)got[i] * got[i];
    }
    CHECK(worst < 1e-4, "%s: differs from the reference by %g", name, worst);
    CHECK(fabs(norm - 1) < 1e-5, "%s: length^2 %g", name, norm);
    /* another text in the cache before: truncated, the same vector */
    session_truncate(s, 0);
    REQUIRE(session_embed(s, other, 3, again, err, sizeof err) == 0, "%s", err);
    session_truncate(s, 0);
    REQUIRE(session_embed(s, toks, N_TOK, again, err, sizeof err) == 0, "%s", err);
    CHECK(!memcmp(got, again, sizeof *got * (size_t)d), "%s: not the same after a truncation", name);
    int32_t bad = m->hp.n_vocab;
    CHECK(session_embed(s, &bad, 1, again, err, sizeof err) == -1, "%s: a token out of range", name);
    session_free(s);
    free(ref);
    free(got);
    free(again);
}

int main(void)
{
    const char *fx = test_fixtures();
    static const char *models[] = {"stories260K.gguf", "synth-qwen2-l2-e64-q8_0.gguf",
                                   "synth-gemma3-l6-e64-f32.gguf"};
    kern_ctx *kc = kern_ctx_create(1);
    REQUIRE(kc, "threads");
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/models/%s", fx, models[k]);
        model *m = model_load(path, err, sizeof err);
        REQUIRE(m, "%s", err);
        check_model(models[k], m, kc);
        model_free(m);
    }
    kern_ctx_free(kc);
    return test_done();
}
