/* spec.c — speculative decoding (spec.h): drafting by a small model or by n-gram lookup, then
 * verifying the drafts on the target in one batch with the standard acceptance rule, so that the
 * tokens follow the target's distribution whatever the drafts were. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "model/spec.h"

struct spec {
    spec_params p;
    int n_vocab;
    session *draft;      /* SPEC_DRAFT */
    bool batched;        /* the last step evaluated a batch: rows hold its logits */
    sampler *dsmp;       /* draws the drafts (SPEC_DRAFT) */
    float *q_logits;     /* n_max x n_vocab: the draft's logits behind each draft (SPEC_DRAFT) */
    float *rows;         /* (n_max + 1) x n_vocab: the target's logits of a step's batch */
    double *pt, *qd;     /* n_vocab: target and draft distributions at the position checked */
    int32_t *hist;       /* n_ctx + 1: the target's history and the chosen token */
    int32_t batch[SPEC_MAX_DRAFT + 1];
};

void spec_params_default(spec_params *p, enum spec_mode mode)
{
    *p = (spec_params){.mode = mode, .n_max = 16, .n_min = 0, .p_min = 0.8f, .ngram_max = 4,
                       .ngram_min = 2};
}

/* Same size and the same text for every token: the draft's ids mean the target's tokens. */
static int check_vocab(const model *t, const model *d, char *err, size_t errlen)
{
    const gguf_array *tt = gguf_get_arr(t->file, "tokenizer.ggml.tokens");
    const gguf_array *dt = gguf_get_arr(d->file, "tokenizer.ggml.tokens");
    if (t->hp.n_vocab != d->hp.n_vocab || !tt || !dt || tt->n != dt->n ||
        tt->type != GGUF_STRING || dt->type != GGUF_STRING) {
        snprintf(err, errlen, "draft model %s: its vocabulary (%d tokens) is not the target's "
                              "(%d tokens); a draft must share the target's vocabulary",
                 d->file->path, d->hp.n_vocab, t->hp.n_vocab);
        return -1;
    }
    for (uint64_t i = 0; i < tt->n; i++)
        if (tt->strs[i].len != dt->strs[i].len ||
            memcmp(tt->strs[i].ptr, dt->strs[i].ptr, tt->strs[i].len)) {
            snprintf(err, errlen, "draft model %s: token %llu is not the target's token %llu; a "
                                  "draft must share the target's vocabulary",
                     d->file->path, (unsigned long long)i, (unsigned long long)i);
            return -1;
        }
    return 0;
}

spec *spec_create(const spec_params *p, const model *target, const model *draft, kern_ctx *kc,
                  int n_ctx, int n_batch, uint64_t seed, char *err, size_t errlen)
{
    if (p->n_max < 1 || p->n_max > SPEC_MAX_DRAFT || p->n_min < 0 || p->ngram_min < 1 ||
        p->ngram_max < p->ngram_min) {
        snprintf(err, errlen, "speculation: drafts per step must be in [1, %d] and n-gram "
                              "lengths at least 1", SPEC_MAX_DRAFT);
        return NULL;
    }
    if (p->mode == SPEC_DRAFT && !draft) {
        snprintf(err, errlen, "speculation: no draft model");
        return NULL;
    }
    if (p->mode == SPEC_DRAFT && check_vocab(target, draft, err, errlen))
        return NULL;
    spec *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->p = *p;
    s->n_vocab = target->hp.n_vocab;
    const size_t nv = (size_t)s->n_vocab, nm = (size_t)p->n_max;
    s->rows = malloc(sizeof(float) * (nm + 1) * nv);
    s->pt = malloc(sizeof(double) * nv);
    s->qd = malloc(sizeof(double) * nv);
    s->hist = malloc(sizeof(int32_t) * ((size_t)n_ctx + 1));
    if (!s->rows || !s->pt || !s->qd || !s->hist)
        goto oom;
    if (p->mode == SPEC_DRAFT) {
        s->draft = session_create(draft, kc, n_ctx, n_batch, err, errlen);
        if (!s->draft) {
            spec_free(s);
            return NULL;
        }
        sampler_params dp;   /* the chain is the step's sampler's (sampler_mirror) */
        sampler_params_default(&dp);
        dp.seed = seed;
        s->dsmp = sampler_create(&dp, s->n_vocab);
        s->q_logits = malloc(sizeof(float) * nm * nv);
        if (!s->dsmp || !s->q_logits)
            goto oom;
    }
    return s;
oom:
    snprintf(err, errlen, "out of memory for speculation (%d drafts of %d-token rows)", p->n_max,
             s->n_vocab);
    spec_free(s);
    return NULL;
}

void spec_free(spec *s)
{
    if (!s)
        return;
    session_free(s->draft);
    sampler_free(s->dsmp);
    free(s->q_logits);
    free(s->rows);
    free(s->pt);
    free(s->qd);
    free(s->hist);
    free(s);
}

void spec_shifted(spec *s, int n_keep, int n_discard)
{
    if (s && s->draft)
        session_discard(s->draft, n_keep, n_discard);
}

/* Prompt lookup: the most recent earlier occurrence of the history's last g tokens (the longest
 * g that has one), and up to n of the tokens that followed it. */
static int draft_ngram(const spec *s, int len, int n, int32_t *out)
{
    const int32_t *h = s->hist;
    for (int g = s->p.ngram_max; g >= s->p.ngram_min; g--) {
        if (g >= len)
            continue;
        const int32_t *suffix = h + len - g;
        for (int j = len - g - 1; j >= 0; j--)
            if (!memcmp(h + j, suffix, sizeof(int32_t) * (size_t)g)) {
                int k = 0;
                while (k < n && j + g + k < len) {
                    out[k] = h[j + g + k];
                    k++;
                }
                return k;
            }
    }
    return 0;
}

/* The probability of the most likely token under softmax(logits). */
static double top_prob(const float *l, int n)
{
    float max = l[0];
    for (int i = 1; i < n; i++)
        if (l[i] > max)
            max = l[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(l[i] - max));
    return 1.0 / sum;
}

/* The draft model's proposals after the history (len tokens, the chosen one last). Its session
 * keeps the longest prefix it shares with the history and evaluates the rest, at least the
 * chosen token (its logits must be fresh). Each draft is drawn with smp's chain and window. */
static int draft_model(spec *s, const sampler *smp, int len, int n, int32_t *out, char *err,
                       size_t errlen)
{
    session *d = s->draft;
    int c = 0;
    while (c < d->n_past && c < len - 1 && d->tokens[c] == s->hist[c])
        c++;
    session_truncate(d, c);
    if (session_eval(d, s->hist + c, len - c, NULL, err, errlen))
        return -1;
    if (sampler_mirror(s->dsmp, smp)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int k = 0;
    while (k < n) {
        if (s->p.p_min > 0.0f && top_prob(d->logits, s->n_vocab) < (double)s->p.p_min)
            break;
        memcpy(s->q_logits + (size_t)k * (size_t)s->n_vocab, d->logits,
               sizeof(float) * (size_t)s->n_vocab);
        out[k] = sampler_sample(s->dsmp, d->logits);
        sampler_accept(s->dsmp, out[k]);
        k++;
        if (k < n && session_eval(d, &out[k - 1], 1, NULL, err, errlen))
            return -1;
    }
    return k;
}

/* Check draft i against the target's row: kept (1) or replaced by a draw from the residual
 * (0, *repl set). */
static int verify(spec *s, sampler *smp, int i, const int32_t *drafts, int32_t *repl)
{
    const int nv = s->n_vocab;
    int32_t d = drafts[i];
    sampler_probs(smp, s->rows + (size_t)i * (size_t)nv, s->pt);
    double p = s->pt[d], q = 1.0;
    if (s->draft) {
        sampler_probs(smp, s->q_logits + (size_t)i * (size_t)nv, s->qd);
        q = s->qd[d];
    }
    if (p >= q || sampler_uniform(smp) * q < p)
        return 1;
    /* the residual max(0, p - q); sampler_draw ignores the non-positive weights */
    for (int v = 0; v < nv; v++)
        s->pt[v] -= s->draft ? s->qd[v] : (v == d);
    *repl = sampler_draw(smp, s->pt);
    if (*repl < 0) /* p <= q everywhere: only rounding can leave nothing; draw from p */
        *repl = sampler_sample(smp, s->rows + (size_t)i * (size_t)nv);
    return 0;
}

const float *spec_logits(const spec *s, const session *t, int i)
{
    return s && s->batched ? s->rows + (size_t)i * (size_t)s->n_vocab : t->logits;
}

static int plain_step(spec *s, session *t, sampler *smp, int32_t tok, int32_t *out,
                      spec_counts *cnt, char *err, size_t errlen)
{
    if (s)
        s->batched = false;
    if (session_eval(t, &tok, 1, NULL, err, errlen))
        return -1;
    out[0] = sampler_sample(smp, t->logits);
    sampler_accept(smp, out[0]);
    if (cnt)
        cnt->steps++;
    return 1;
}

int spec_step(spec *s, session *t, sampler *smp, int32_t tok, int max_out, int32_t *out,
              spec_counts *cnt, char *err, size_t errlen)
{
    const int p0 = t->n_past;
    /* one batch, inside the context: the chosen token plus the drafts */
    int room = t->n_ctx - p0 - 1, n = s ? s->p.n_max : 0;
    if (n > max_out - 1)
        n = max_out - 1;
    if (n > room)
        n = room;
    if (n > t->n_batch - 1)
        n = t->n_batch - 1;
    if (n < 1 || n < s->p.n_min)
        return plain_step(s, t, smp, tok, out, cnt, err, errlen);

    int32_t *drafts = s->batch + 1;
    memcpy(s->hist, t->tokens, sizeof(int32_t) * (size_t)p0);
    s->hist[p0] = tok;
    int nd = s->draft ? draft_model(s, smp, p0 + 1, n, drafts, err, errlen)
                      : draft_ngram(s, p0 + 1, n, drafts);
    if (nd < 0)
        return -1;
    if (nd < 1 || nd < s->p.n_min)
        return plain_step(s, t, smp, tok, out, cnt, err, errlen);

    s->batch[0] = tok;
    s->batched = true;
    if (session_eval(t, s->batch, nd + 1, s->rows, err, errlen))
        return -1;
    int kept = 0;
    int32_t next = -1;
    while (kept < nd && verify(s, smp, kept, drafts, &next)) {
        out[kept] = drafts[kept];
        sampler_accept(smp, drafts[kept]);
        kept++;
    }
    if (kept == nd) /* all kept: the target's own token after the last */
        next = sampler_sample(smp, s->rows + (size_t)nd * (size_t)s->n_vocab);
    out[kept] = next;
    sampler_accept(smp, next);
    /* the cache holds tok and the kept drafts; the rest is forgotten on every device */
    session_truncate(t, p0 + 1 + kept);
    if (s->draft && s->draft->n_past > p0 + 1 + kept)
        session_truncate(s->draft, p0 + 1 + kept);
    if (cnt) {
        cnt->steps++;
        cnt->drafted += nd;
        cnt->accepted += kept;
    }
    if (s->p.log)
        fprintf(s->p.log, "spec: position %d: drafted %d, accepted %d\n", p0, nd, kept);
    return kept + 1;
}
