/* prima.c — the public library API (include/prima.h) over the model, session, sampler and
 * tokenizer modules, and the application layer's token loop (app/generate.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/generate.h"
#include "model/sample.h"
#include "model/session.h"
#include "prima.h"
#include "text/tokenizer.h"

struct prima_model {
    model *m;
    tokenizer *tk;
};

struct prima_session {
    prima_model *pm;
    kern_ctx *kc;
    session *s;
    sampler *smp;
    int repeat_last_n;
};

prima_model_params prima_model_default_params(void)
{
    return (prima_model_params){.mlock = false};
}

prima_session_params prima_session_default_params(void)
{
    sampler_params sp;
    sampler_params_default(&sp);
    return (prima_session_params){
        .n_ctx = 0, .n_batch = 512, .n_threads = 0, .temp = sp.temp, .top_k = sp.top_k,
        .top_p = sp.top_p, .min_p = sp.min_p, .repeat_penalty = sp.repeat_penalty,
        .repeat_last_n = sp.repeat_last_n, .presence_penalty = sp.presence_penalty,
        .frequency_penalty = sp.frequency_penalty, .seed = sp.seed};
}

prima_model *prima_model_open(const char *path, const prima_model_params *params, char *err,
                              size_t errlen)
{
    prima_model_params p = params ? *params : prima_model_default_params();
    prima_model *pm = calloc(1, sizeof *pm);
    if (!pm) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pm->m = model_load(path, err, errlen);
    if (!pm->m || (p.mlock && model_mlock(pm->m, err, errlen)))
        goto fail;
    pm->tk = tokenizer_load(pm->m->file, err, errlen);
    if (!pm->tk)
        goto fail;
    return pm;
fail:
    prima_model_free(pm);
    return NULL;
}

void prima_model_free(prima_model *pm)
{
    if (!pm)
        return;
    tokenizer_free(pm->tk);
    model_free(pm->m);
    free(pm);
}

int prima_model_n_vocab(const prima_model *pm)
{
    return pm->m->hp.n_vocab;
}

int prima_model_n_ctx_train(const prima_model *pm)
{
    return pm->m->hp.n_ctx_train;
}

int prima_model_n_layer(const prima_model *pm)
{
    return pm->m->hp.n_layer;
}

int prima_tokenize(const prima_model *pm, const char *text, int32_t *tokens, int cap,
                   bool add_special, bool parse_special, char *err, size_t errlen)
{
    int32_t *ids = NULL;
    size_t len = strlen(text);
    int n = tokenizer_encode(pm->tk, text, len, add_special, parse_special, &ids);
    if (n < 0) {
        snprintf(err, errlen, "cannot tokenize %zu bytes of text: %s", len, tokenizer_strerror(n));
        return -1;
    }
    memcpy(tokens, ids, sizeof(int32_t) * (size_t)(n < cap ? n : cap));
    free(ids);
    return n;
}

size_t prima_token_piece(const prima_model *pm, int32_t id, char *buf, size_t cap)
{
    if (id < 0 || id >= pm->m->hp.n_vocab)
        return 0;
    return tokenizer_piece(pm->tk, id, false, buf, cap);
}

bool prima_token_is_eog(const prima_model *pm, int32_t id)
{
    return tokenizer_is_eog(pm->tk, id);
}

int32_t prima_token_bos(const prima_model *pm)
{
    return tokenizer_bos(pm->tk);
}

prima_session *prima_session_create(prima_model *pm, const prima_session_params *params,
                                    char *err, size_t errlen)
{
    prima_session_params p = params ? *params : prima_session_default_params();
    const model_hparams *hp = &pm->m->hp;
    int n_ctx = p.n_ctx > 0 ? p.n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    int n_threads = p.n_threads;
    if (n_threads <= 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = ncpu > 0 ? (int)ncpu : 1;
    }
    if (p.n_batch <= 0) {
        snprintf(err, errlen, "n_batch must be positive, got %d", p.n_batch);
        return NULL;
    }
    prima_session *ps = calloc(1, sizeof *ps);
    if (!ps) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ps->pm = pm;
    ps->kc = kern_ctx_create(n_threads);
    if (!ps->kc) {
        snprintf(err, errlen, "cannot start %d compute threads", n_threads);
        goto fail;
    }
    ps->s = session_create(pm->m, ps->kc, n_ctx, p.n_batch, err, errlen);
    if (!ps->s)
        goto fail;
    sampler_params sp = {.temp = p.temp, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p,
                         .repeat_penalty = p.repeat_penalty, .repeat_last_n = p.repeat_last_n,
                         .presence_penalty = p.presence_penalty,
                         .frequency_penalty = p.frequency_penalty, .seed = p.seed};
    ps->repeat_last_n = p.repeat_last_n > 0 ? p.repeat_last_n : 0;
    ps->smp = sampler_create(&sp, hp->n_vocab);
    if (!ps->smp) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    return ps;
fail:
    prima_session_free(ps);
    return NULL;
}

void prima_session_free(prima_session *ps)
{
    if (!ps)
        return;
    sampler_free(ps->smp);
    session_free(ps->s);
    kern_ctx_free(ps->kc);
    free(ps);
}

int prima_eval(prima_session *ps, const int32_t *tokens, int n, char *err, size_t errlen)
{
    if (session_eval(ps->s, tokens, n, NULL, err, errlen))
        return -1;
    for (int i = 0; i < n; i++)
        sampler_accept(ps->smp, tokens[i]);
    return 0;
}

const float *prima_logits(const prima_session *ps)
{
    return ps->s->logits;
}

int32_t prima_sample(prima_session *ps)
{
    return sampler_sample(ps->smp, ps->s->logits);
}

int prima_session_n_past(const prima_session *ps)
{
    return ps->s->n_past;
}

void prima_session_rewind(prima_session *ps, int n_past)
{
    session_truncate(ps->s, n_past);
    /* the penalty window again holds the last tokens of what remains */
    sampler_reset(ps->smp);
    int from = ps->s->n_past > ps->repeat_last_n ? ps->s->n_past - ps->repeat_last_n : 0;
    for (int i = from; i < ps->s->n_past; i++)
        sampler_accept(ps->smp, ps->s->tokens[i]);
}

/* prima_generate's text callback, and whether it asked to stop. */
struct gen_user {
    prima_text_fn on_text;
    void *user;
    volatile sig_atomic_t stop;
};

static void emit_text(void *arg, const char *text, size_t len)
{
    struct gen_user *u = arg;
    if (u->on_text && !u->stop && u->on_text(u->user, text, len))
        u->stop = 1;
}

prima_end prima_generate(prima_session *ps, int n_predict, const char *const *stop, int n_stop,
                         prima_text_fn on_text, void *user, char **reply, char *err,
                         size_t errlen)
{
    struct gen_user u = {.on_text = on_text, .user = user};
    const gen_opts o = {.n_predict = n_predict, .cancel = &u.stop, .stop = stop,
                        .n_stop = stop ? n_stop : 0};
    gen_stats st = {0};
    enum gen_end end = gen_reply(ps->s, ps->pm->tk, ps->smp, &o, emit_text, &u, reply, &st, err,
                                 errlen);
    switch (end) {
    case GEN_EOG: return PRIMA_END_EOG;
    case GEN_STOP_STRING: return PRIMA_END_STOP;
    case GEN_LIMIT: return PRIMA_END_LIMIT;
    case GEN_CONTEXT_FULL: return PRIMA_END_CONTEXT_FULL;
    case GEN_CANCELLED: return PRIMA_END_CANCELLED;
    case GEN_ERROR: break;
    }
    return PRIMA_END_ERROR;
}
