/* generate.c — the token loop that `prima run`, `prima serve` and the ring's head share
 * (generate.h): feeding the prompt, sampling and printing token by token, and holding back text
 * that may yet become a stop string, so that every command stops and prints alike. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/generate.h"
#include "util/strbuf.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A context shift of the session, followed by the draft's. */
static int shift(session *s, const gen_opts *o)
{
    int n_discard = session_shift(s, o->n_keep);
    if (n_discard > 0)
        spec_shifted(o->spec, o->n_keep, n_discard);
    return n_discard;
}

int gen_feed(session *s, sampler *smp, const gen_opts *o, const int32_t *tokens, int n,
             gen_stats *st, char *err, size_t errlen)
{
    while (n > s->n_ctx - s->n_past && o->context_shift && shift(s, o) > 0)
        st->n_shift++;
    double t0 = now_s();
    if (session_eval(s, tokens, n, NULL, err, errlen))
        return -1;
    st->prompt_s += now_s() - t0;
    st->n_prompt += n;
    for (int i = 0; i < n; i++)
        sampler_accept(smp, tokens[i]);
    return 0;
}

/* Where the earliest stop string starts in text (searching from `from`), or -1. Otherwise
 * *hold is how many trailing bytes could still become a stop string and must wait. */
static long find_stop(const strbuf *t, size_t from, const gen_opts *o, size_t *hold)
{
    long found = -1;
    *hold = 0;
    for (int i = 0; i < o->n_stop; i++) {
        size_t sl = strlen(o->stop[i]);
        size_t start = from >= sl ? from - sl + 1 : 0;
        if (start < t->len) {
            const char *hit = memmem(t->p + start, t->len - start, o->stop[i], sl);
            if (hit && (found < 0 || hit - t->p < found))
                found = hit - t->p;
        }
        for (size_t k = sl - 1; k > *hold; k--)
            if (k <= t->len && !memcmp(t->p + t->len - k, o->stop[i], k)) {
                *hold = k;
                break;
            }
    }
    return found;
}

void gen_text_init(gen_text *g, const tokenizer *tk, const gen_opts *o, gen_emit_fn emit,
                   void *user)
{
    *g = (gen_text){.tk = tk, .o = o, .emit = emit, .user = user};
    detok_init(&g->ds);
    g->ds.first = false; /* a reply continues the text before it: keep its leading space */
    g->ds.special = o->special_text;
}

bool gen_text_open(const gen_text *g)
{
    return g->o->n_predict < 0 || g->n_gen < g->o->n_predict;
}

bool gen_text_token(gen_text *g, int32_t tok, const float *logits, enum gen_end *end, char *err,
                    size_t errlen)
{
    const gen_opts *o = g->o;
    if (o->cancel && *o->cancel) {
        *end = GEN_CANCELLED;
        return false;
    }
    if (!o->ignore_eos && tokenizer_is_eog(g->tk, tok)) {
        *end = GEN_EOG;
        return false;
    }
    if (o->on_token && o->on_token(o->on_token_user, tok, logits)) {
        *end = GEN_CANCELLED;
        return false;
    }
    g->n_gen++;
    char piece[512];
    size_t np = detok_push(&g->ds, g->tk, tok, piece, sizeof piece);
    if (strbuf_add(&g->text, piece, np)) {
        snprintf(err, errlen, "out of memory");
        *end = GEN_ERROR;
        return false;
    }
    size_t hold;
    long at = find_stop(&g->text, g->printed, o, &hold);
    if (at >= 0) {
        g->emit(g->user, g->text.p + g->printed, (size_t)at - g->printed);
        g->text.len = (size_t)at;
        g->text.p[at] = '\0';
        g->printed = g->text.len;
        *end = GEN_STOP_STRING;
        return false;
    }
    if (g->text.len - hold > g->printed) {
        g->emit(g->user, g->text.p + g->printed, g->text.len - hold - g->printed);
        g->printed = g->text.len - hold;
    }
    return true;
}

void gen_text_end(gen_text *g, enum gen_end end, char **reply)
{
    if (end != GEN_STOP_STRING) {
        char piece[512];
        size_t np = detok_flush(&g->ds, piece, sizeof piece);
        if (strbuf_add(&g->text, piece, np) == 0 && g->text.len > g->printed)
            g->emit(g->user, g->text.p + g->printed, g->text.len - g->printed);
    }
    if (reply)
        *reply = g->text.p ? g->text.p : calloc(1, 1);
    else
        free(g->text.p);
    g->text = (strbuf){0};
}

/* Tokens chosen on the layers' side (session_decode) go through the text side here. */
typedef struct decoded {
    gen_text *g;
    gen_stats *st;
    int32_t last;
    enum gen_end end;
    bool ended;
    char *err;
    size_t errlen;
} decoded;

static int decoded_token(void *user, int32_t tok)
{
    decoded *d = user;
    d->last = tok;
    if (!gen_text_token(d->g, tok, NULL, &d->end, d->err, d->errlen)) {
        d->ended = true;
        return 1;
    }
    d->st->n_gen++;
    return !gen_text_open(d->g);
}

enum gen_end gen_reply(session *s, const tokenizer *tk, sampler *smp, const gen_opts *o,
                       gen_emit_fn emit, void *user, char **reply, gen_stats *st, char *err,
                       size_t errlen)
{
    gen_text g;
    gen_text_init(&g, tk, o, emit, user);
    enum gen_end end = GEN_LIMIT;
    double t0 = now_s();

    /* out[used..n_out): chosen tokens still to print; the last one is not evaluated yet */
    int32_t out[SPEC_MAX_DRAFT + 1];
    int n_out = 0, used = 0;
    bool stepped = false; /* out came from a step (else from the logits after the prompt) */
    while (gen_text_open(&g)) {
        if (n_out == 0) { /* the first token, from the logits after the prompt */
            out[n_out++] = sampler_sample(smp, s->logits);
            sampler_accept(smp, out[0]);
        } else if (used == n_out) {
            if (s->n_past == s->n_ctx) {
                if (!o->context_shift || shift(s, o) == 0) {
                    end = GEN_CONTEXT_FULL;
                    break;
                }
                st->n_shift++;
            }
            /* Where one device holds every layer, it decodes on its own (no logits come back:
             * not with speculation or a hook that reads them). */
            if (!o->spec && !o->on_token) {
                decoded d = {.g = &g, .st = st, .err = err, .errlen = errlen};
                int limit = o->n_predict < 0 ? s->n_ctx : o->n_predict - g.n_gen, n_tok;
                int rc = session_decode(s, out[n_out - 1], limit, smp, decoded_token, &d, &n_tok,
                                        err, errlen);
                if (rc < 0) {
                    n_out = used = 0;
                    end = GEN_ERROR;
                    break;
                }
                if (n_tok > 0) {
                    out[0] = d.last;   /* chosen, not evaluated */
                    n_out = used = 1;
                    if (d.ended) {
                        end = d.end;
                        break;
                    }
                    continue;
                }
            }
            int want = o->n_predict < 0 ? SPEC_MAX_DRAFT + 1 : o->n_predict - g.n_gen;
            n_out = spec_step(o->spec, s, smp, out[n_out - 1], want, out, &st->spec, err, errlen);
            used = 0;
            stepped = true;
            if (n_out < 0) {
                n_out = 0;
                end = GEN_ERROR;
                break;
            }
        }
        int32_t tok = out[used++];
        const float *logits = stepped ? spec_logits(o->spec, s, used - 1) : s->logits;
        if (!gen_text_token(&g, tok, logits, &end, err, errlen))
            break;
        st->n_gen++;
    }
    /* Tokens a step evaluated after the one generation stopped at are forgotten: the session
     * ends as without speculation, the last chosen token not evaluated. */
    if (used < n_out)
        session_truncate(s, s->n_past - (n_out - used));
    gen_text_end(&g, end, reply);
    st->gen_s += now_s() - t0;
    return end;
}
