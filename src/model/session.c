#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/session.h"

static int engine_eval_all(void *ctx, float *hidden, int n, const int32_t *pos, char *err,
                           size_t errlen)
{
    session *s = ctx;
    if (engine_layers(s->e, hidden, n, pos, 0, s->m->hp.n_layer) == 0)
        return 0;
    /* after session_eval's checks (this engine owns every layer) only the kernels running out
     * of memory is left, which engine_create's reservation rules out */
    snprintf(err, errlen, "evaluation failed at position %d (out of memory)", pos[0]);
    return -1;
}

static int engine_truncate(void *ctx, int p0)
{
    return engine_kv_truncate(((session *)ctx)->e, p0);
}

static int engine_shift(void *ctx, int p0, int p1, int delta)
{
    return engine_kv_shift(((session *)ctx)->e, p0, p1, delta);
}

session *session_create(const model *m, kern_ctx *kc, int n_ctx, int n_batch, char *err,
                        size_t errlen)
{
    return session_create_split(m, kc, n_ctx, n_batch, NULL, NULL, err, errlen);
}

session *session_create_split(const model *m, kern_ctx *kc, int n_ctx, int n_batch,
                              const bool *owns, const session_layers *layers, char *err,
                              size_t errlen)
{
    if (n_batch > n_ctx)
        n_batch = n_ctx; /* a batch never holds more tokens than the context */
    session *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->e = engine_create(m, kc, n_ctx, n_batch, owns, err, errlen);
    if (!s->e) {
        free(s);
        return NULL;
    }
    s->layers = layers ? *layers : (session_layers){s, engine_eval_all, engine_truncate, engine_shift};
    s->tokens = malloc(sizeof(int32_t) * (size_t)n_ctx);
    s->hidden = malloc(sizeof(float) * (size_t)n_batch * (size_t)m->hp.n_embd);
    s->pos = malloc(sizeof(int32_t) * (size_t)n_batch);
    s->logits = calloc((size_t)m->hp.n_vocab, sizeof(float));
    if (!s->tokens || !s->hidden || !s->pos || !s->logits) {
        snprintf(err, errlen, "out of memory");
        session_free(s);
        return NULL;
    }
    return s;
}

void session_free(session *s)
{
    if (!s)
        return;
    engine_free(s->e);
    free(s->tokens);
    free(s->hidden);
    free(s->pos);
    free(s->logits);
    free(s);
}

int session_eval(session *s, const int32_t *tokens, int n, float *all_logits, char *err,
                 size_t errlen)
{
    const int n_vocab = s->m->hp.n_vocab;
    if (n < 1) {
        snprintf(err, errlen, "nothing to evaluate");
        return -1;
    }
    if (n > s->n_ctx - s->n_past) {
        snprintf(err, errlen, "%d tokens do not fit: %d of %d context positions are used", n,
                 s->n_past, s->n_ctx);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            snprintf(err, errlen, "token id %d is outside the vocabulary (0..%d)", tokens[i],
                     n_vocab - 1);
            return -1;
        }
    for (int done = 0; done < n;) {
        int nb = n - done < s->n_batch ? n - done : s->n_batch;
        for (int t = 0; t < nb; t++)
            s->pos[t] = s->n_past + t;
        engine_embed(s->e, tokens + done, nb, s->hidden);
        if (s->layers.eval(s->layers.ctx, s->hidden, nb, s->pos, err, errlen))
            return -1;
        memcpy(s->tokens + s->n_past, tokens + done, sizeof(int32_t) * (size_t)nb);
        s->n_past += nb;
        done += nb;
        int out = 0;
        if (all_logits)
            out = engine_output(s->e, s->hidden, 0, nb,
                                all_logits + (size_t)(done - nb) * (size_t)n_vocab);
        else if (done == n)
            out = engine_output(s->e, s->hidden, nb - 1, 1, s->logits);
        if (out) {
            snprintf(err, errlen, "out of memory computing the logits at position %d",
                     s->n_past - 1);
            return -1;
        }
    }
    if (all_logits)
        memcpy(s->logits, all_logits + (size_t)(n - 1) * (size_t)n_vocab,
               sizeof(float) * (size_t)n_vocab);
    /* Damaged weights (or a kernel bug) show up here first: nothing downstream can choose a
     * token from a NaN, so say so where it happens instead of sampling garbage. */
    const float *l = all_logits ? all_logits : s->logits;
    const int row0 = all_logits ? 0 : n - 1;
    for (size_t i = 0; i < (size_t)(n - row0) * (size_t)n_vocab; i++)
        if (!isfinite(l[i])) {
            snprintf(err, errlen,
                     "the model produced %s logits at position %d: the weights are damaged or "
                     "the type is unsupported",
                     isnan(l[i]) ? "NaN" : "infinite",
                     s->n_past - n + row0 + (int)(i / (size_t)n_vocab));
            return -1;
        }
    return 0;
}

int session_shift(session *s, int n_keep)
{
    if (n_keep < 0)
        n_keep = 0;
    int n_discard = (s->n_past - n_keep) / 2;
    return session_discard(s, n_keep, n_discard);
}

int session_discard(session *s, int n_keep, int n_discard)
{
    if (n_keep < 0)
        n_keep = 0;
    if (n_discard <= 0 || n_keep >= s->n_past)
        return 0;
    if (n_keep + n_discard >= s->n_past) {
        session_truncate(s, n_keep);
        return 0;
    }
    s->layers.kv_shift(s->layers.ctx, n_keep + n_discard, s->n_past, -n_discard);
    memmove(s->tokens + n_keep, s->tokens + n_keep + n_discard,
            sizeof(int32_t) * (size_t)(s->n_past - n_keep - n_discard));
    s->n_past -= n_discard;
    return n_discard;
}

void session_truncate(session *s, int n_past)
{
    if (n_past < 0 || n_past >= s->n_past)
        return;
    s->layers.kv_truncate(s->layers.ctx, n_past);
    s->n_past = n_past;
}
