/* session.c — one or several sequences evaluated on this device or round a ring (session.h):
 * prompts cut into batches, positions and histories kept, logits made only for the rows asked
 * for and checked before anyone samples them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/session.h"

static int engine_eval_all(void *ctx, float *hidden, int n, const int32_t *pos,
                           const int32_t *seq, char *err, size_t errlen)
{
    session *s = ctx;
    if (engine_layers(s->e, hidden, n, pos, seq, 0, s->m->hp.n_layer) == 0)
        return 0;
    /* after session_eval's checks (this engine owns every layer) only the kernels running out
     * of memory is left, which engine_create's reservation rules out */
    snprintf(err, errlen, "evaluation failed at position %d (out of memory)", pos[0]);
    return -1;
}

static int engine_truncate(void *ctx, int seq, int p0)
{
    return engine_kv_truncate(((session *)ctx)->e, seq, p0);
}

static int engine_shift(void *ctx, int seq, int p0, int p1, int delta)
{
    return engine_kv_shift(((session *)ctx)->e, seq, p0, p1, delta);
}

session *session_create(const model *m, kern_ctx *kc, int n_ctx, int n_batch, char *err,
                        size_t errlen)
{
    return session_create_split(m, kc, n_ctx, n_batch, 1, NULL, NULL, err, errlen);
}

/* A session without an engine: its history and batch buffers. */
static session *session_alloc(const model *m, int n_ctx, int n_batch, char *err, size_t errlen)
{
    session *s = calloc(1, sizeof *s);
    if (s) {
        s->m = m;
        s->n_ctx = n_ctx;
        s->n_batch = n_batch;
        s->tokens = malloc(sizeof(int32_t) * (size_t)n_ctx);
        s->hidden = malloc(sizeof(float) * (size_t)n_batch * (size_t)m->hp.n_embd);
        s->pos = malloc(sizeof(int32_t) * (size_t)n_batch);
        s->seqs = calloc((size_t)n_batch, sizeof(int32_t));
        s->logits = calloc((size_t)m->hp.n_vocab, sizeof(float));
    }
    if (!s || !s->tokens || !s->hidden || !s->pos || !s->seqs || !s->logits) {
        snprintf(err, errlen, "out of memory");
        session_free(s);
        return NULL;
    }
    return s;
}

session *session_create_split(const model *m, kern_ctx *kc, int n_ctx, int n_batch, int n_seq,
                              const bool *owns, const session_layers *layers, char *err,
                              size_t errlen)
{
    if (n_batch > n_ctx)
        n_batch = n_ctx; /* a batch never holds more tokens than the context */
    session *s = session_alloc(m, n_ctx, n_batch, err, errlen);
    if (!s)
        return NULL;
    s->owner = s;
    s->e = engine_create_seqs(m, kc, n_ctx, n_batch, n_seq, owns, err, errlen);
    if (!s->e) {
        session_free(s);
        return NULL;
    }
    s->layers = layers ? *layers : (session_layers){s, engine_eval_all, engine_truncate,
                                                    engine_shift, NULL, NULL, NULL, NULL,
                                                    NULL};
    return s;
}

session *session_create_peer(session *owner, int seq, char *err, size_t errlen)
{
    if (seq < 1 || seq >= engine_n_seq(owner->e)) {
        snprintf(err, errlen, "sequence %d: the engine holds sequences 0..%d", seq,
                 engine_n_seq(owner->e) - 1);
        return NULL;
    }
    session *s = session_alloc(owner->m, owner->n_ctx, owner->n_batch, err, errlen);
    if (!s)
        return NULL;
    s->owner = owner;
    s->e = owner->e;
    s->layers = owner->layers;
    s->seq = seq;
    for (int t = 0; t < s->n_batch; t++)
        s->seqs[t] = seq;
    if (s->layers.kv_truncate(s->layers.ctx, seq, 0)) {
        snprintf(err, errlen, "sequence %d's KV cache could not be cleared", seq);
        session_free(s);
        return NULL;
    }
    return s;
}

void session_free(session *s)
{
    if (!s)
        return;
    if (s->owner == s) {
        for (int i = 0; i < s->n_batch_mbs; i++)
            session_mb_free(s->batch_mbs[i]);
        free(s->batch_mbs);
        engine_free(s->e);
    }
    free(s->tokens);
    free(s->hidden);
    free(s->pos);
    free(s->seqs);
    free(s->logits);
    free(s);
}

/* n tokens can follow s's history. 0, or -1 with a message. */
static int check_tokens(const session *s, const int32_t *tokens, int n, char *err, size_t errlen)
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
    return 0;
}

int session_embed(session *s, const int32_t *tokens, int n, float *out, char *err,
                  size_t errlen)
{
    const int n_embd = s->m->hp.n_embd;
    if (check_tokens(s, tokens, n, err, errlen))
        return -1;
    float *normed = malloc(sizeof(float) * (size_t)s->n_batch * (size_t)n_embd);
    double *sum = calloc((size_t)n_embd, sizeof *sum);
    int rc = normed && sum ? 0 : -1;
    if (rc)
        snprintf(err, errlen, "out of memory for an embedding");
    for (int done = 0; !rc && done < n;) {
        int nb = n - done < s->n_batch ? n - done : s->n_batch;
        for (int t = 0; t < nb; t++)
            s->pos[t] = s->n_past + t;
        engine_embed(s->e, tokens + done, nb, s->hidden);
        rc = s->layers.eval(s->layers.ctx, s->hidden, nb, s->pos, s->seqs, err, errlen);
        if (rc)
            break;
        memcpy(s->tokens + s->n_past, tokens + done, sizeof(int32_t) * (size_t)nb);
        s->n_past += nb;
        done += nb;
        engine_output_norm(s->e, s->hidden, nb, normed);
        for (size_t i = 0; i < (size_t)nb * (size_t)n_embd; i++)
            sum[i % (size_t)n_embd] += normed[i];
    }
    double norm = 0;
    for (int i = 0; !rc && i < n_embd; i++)
        norm += sum[i] * sum[i];
    if (!rc && !(isfinite(norm) && norm > 0)) {
        snprintf(err, errlen, "the model's hidden states are not finite (or all zero): the "
                 "weights are damaged or the type is unsupported");
        rc = -1;
    }
    /* the mean, then unit length: the mean's 1/n cancels in the scaling */
    for (int i = 0; !rc && i < n_embd; i++)
        out[i] = (float)(sum[i] / sqrt(norm));
    free(normed);
    free(sum);
    return rc;
}

int session_eval(session *s, const int32_t *tokens, int n, float *all_logits, char *err,
                 size_t errlen)
{
    const int n_vocab = s->m->hp.n_vocab;
    if (check_tokens(s, tokens, n, err, errlen))
        return -1;
    for (int done = 0; done < n;) {
        int nb = n - done < s->n_batch ? n - done : s->n_batch;
        for (int t = 0; t < nb; t++)
            s->pos[t] = s->n_past + t;
        engine_embed(s->e, tokens + done, nb, s->hidden);
        if (s->layers.eval(s->layers.ctx, s->hidden, nb, s->pos, s->seqs, err, errlen))
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
    const int row0 = all_logits ? 0 : n - 1;
    return logits_check(all_logits ? all_logits : s->logits, n - row0, n_vocab,
                        s->n_past - n + row0, err, errlen);
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
    s->layers.kv_shift(s->layers.ctx, s->seq, n_keep + n_discard, s->n_past, -n_discard);
    memmove(s->tokens + n_keep, s->tokens + n_keep + n_discard,
            sizeof(int32_t) * (size_t)(s->n_past - n_keep - n_discard));
    s->n_past -= n_discard;
    return n_discard;
}

/* session_decode's view of each chosen token: the one before it was evaluated. */
typedef struct decode_relay {
    session *s;
    int32_t prev;
    int (*on_token)(void *user, int32_t token);
    void *user;
} decode_relay;

static int relay_token(void *user, int32_t token)
{
    decode_relay *d = user;
    d->s->tokens[d->s->n_past++] = d->prev;
    d->prev = token;
    return d->on_token(d->user, token);
}

int session_decode(session *s, int32_t token, int max_steps, sampler *smp,
                   int (*on_token)(void *user, int32_t token), void *user, int *n_tokens,
                   char *err, size_t errlen)
{
    *n_tokens = 0;
    const session_layers *l = &s->layers;
    if (!l->decode || !l->can_decode(l->ctx, smp) || s->in_flight || s->n_past >= s->n_ctx)
        return 1;
    if (check_tokens(s, &token, 1, err, errlen))
        return -1;
    if (max_steps > s->n_ctx - s->n_past)
        max_steps = s->n_ctx - s->n_past;
    decode_relay d = {s, token, on_token, user};
    return l->decode(l->ctx, s->seq, s->n_past, token, max_steps, smp, relay_token, &d,
                     n_tokens, err, errlen);
}

void session_truncate(session *s, int n_past)
{
    if (n_past < 0 || n_past >= s->n_past)
        return;
    n_past = model_kv_resume(s->m, s->n_ctx, s->n_batch, s->n_past, n_past);
    s->layers.kv_truncate(s->layers.ctx, s->seq, n_past);
    s->n_past = n_past;
}

/* ---- several sequences in one batch ---- */

/* session_eval_batch pipelines a step only with at least this many rows per device. */
#define PIPE_MIN_ROWS 4

struct session_mb {
    session *owner;
    float *hidden;             /* n_batch x n_embd */
    int32_t *pos, *seq;        /* n_batch */
    int n;                     /* rows */
    /* the sessions whose last row of this step is here, and that row */
    session **parts;           /* n_batch */
    int *last_row;
    int n_parts;
    /* the sessions with rows here (cleared of in_flight by collect) */
    session **members;
    int n_members;
    bool in_flight;
    bool evaluated;            /* sent through eval: the result is in hidden already */
    session_mb *next;          /* the next one in flight */
};

session_mb *session_mb_create(session *owner, char *err, size_t errlen)
{
    size_t B = (size_t)owner->n_batch;
    session_mb *mb = calloc(1, sizeof *mb);
    if (mb) {
        mb->owner = owner;
        mb->hidden = malloc(sizeof(float) * B * (size_t)owner->m->hp.n_embd);
        mb->pos = malloc(sizeof(int32_t) * B);
        mb->seq = malloc(sizeof(int32_t) * B);
        mb->parts = malloc(sizeof(session *) * B);
        mb->last_row = malloc(sizeof(int) * B);
        mb->members = malloc(sizeof(session *) * B);
    }
    if (!mb || !mb->hidden || !mb->pos || !mb->seq || !mb->parts || !mb->last_row ||
        !mb->members) {
        snprintf(err, errlen, "out of memory");
        session_mb_free(mb);
        return NULL;
    }
    return mb;
}

void session_mb_free(session_mb *mb)
{
    if (!mb)
        return;
    if (mb->in_flight) {   /* after a failure of the layers: forget it was sent */
        session *o = mb->owner;
        session_mb **link = &o->fly_first, *prev = NULL;
        while (*link && *link != mb) {
            prev = *link;
            link = &(*link)->next;
        }
        if (*link) {
            *link = mb->next;
            if (o->fly_last == mb)
                o->fly_last = prev;
            o->n_fly--;
        }
        for (int i = 0; i < mb->n_members; i++)
            mb->members[i]->in_flight = false;
    }
    free(mb->hidden);
    free(mb->pos);
    free(mb->seq);
    free(mb->parts);
    free(mb->last_row);
    free(mb->members);
    free(mb);
}

int session_in_flight(const session *owner)
{
    return owner->n_fly;
}

int session_max_in_flight(const session *owner)
{
    const session_layers *l = &owner->layers;
    return l->submit ? l->max_in_flight(l->ctx) : 1;
}

/* Sessions of owner's engine, each at most once, none in flight. */
static int check_sessions(session *owner, session *const *ss, int count, char *err,
                          size_t errlen)
{
    if (count < 1) {
        snprintf(err, errlen, "no sequence to evaluate");
        return -1;
    }
    for (int i = 0; i < count; i++) {
        if (ss[i]->owner != owner) {
            snprintf(err, errlen, "sequence %d belongs to another engine", ss[i]->seq);
            return -1;
        }
        if (ss[i]->in_flight) {
            snprintf(err, errlen, "sequence %d is in a batch still in flight", ss[i]->seq);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (ss[j] == ss[i]) {
                snprintf(err, errlen, "sequence %d is given twice", ss[i]->seq);
                return -1;
            }
    }
    return 0;
}

/* Rows [from, from + take) of part i (its tokens from `from` on) into mb; `last`: they end
 * the part's tokens of this step. */
static void mb_add(session_mb *mb, session *s, const int32_t *tokens, int take, bool last)
{
    engine_embed(s->e, tokens, take,
                 mb->hidden + (size_t)mb->n * (size_t)s->m->hp.n_embd);
    for (int t = 0; t < take; t++) {
        mb->pos[mb->n + t] = s->n_past + t;
        mb->seq[mb->n + t] = s->seq;
    }
    memcpy(s->tokens + s->n_past, tokens, sizeof(int32_t) * (size_t)take);
    s->n_past += take;
    mb->n += take;
    s->in_flight = true;
    mb->members[mb->n_members++] = s;
    if (last) {
        mb->parts[mb->n_parts] = s;
        mb->last_row[mb->n_parts++] = mb->n - 1;
    }
}

/* Send mb (filled) through the layers: at once, or pipelined. */
static int mb_send(session_mb *mb, char *err, size_t errlen)
{
    session *o = mb->owner;
    const session_layers *l = &o->layers;
    /* With room for one batch in flight nothing overlaps: eval, where a ring recovers from a
     * lost worker (failover, which only ring_eval does), has the result at once. */
    mb->evaluated = session_max_in_flight(o) == 1;
    int rc = mb->evaluated ? l->eval(l->ctx, mb->hidden, mb->n, mb->pos, mb->seq, err, errlen)
                           : l->submit(l->ctx, mb->hidden, mb->n, mb->pos, mb->seq, err, errlen);
    if (rc) {
        for (int i = 0; i < mb->n_members; i++)
            mb->members[i]->in_flight = false;
        return -1;
    }
    mb->in_flight = true;
    mb->next = NULL;
    if (o->fly_last)
        o->fly_last->next = mb;
    else
        o->fly_first = mb;
    o->fly_last = mb;
    o->n_fly++;
    return 0;
}

int session_mb_submit(session_mb *mb, session *const *ss, const int32_t *const *tokens,
                      const int *n, int count, char *err, size_t errlen)
{
    session *o = mb->owner;
    if (mb->in_flight) {
        snprintf(err, errlen, "this micro-batch is still in flight");
        return -1;
    }
    if (o->n_fly >= session_max_in_flight(o)) {
        snprintf(err, errlen, "%d micro-batches are in flight already (at most %d)", o->n_fly,
                 session_max_in_flight(o));
        return -1;
    }
    if (check_sessions(o, ss, count, err, errlen))
        return -1;
    int rows = 0;
    for (int i = 0; i < count; i++) {
        if (check_tokens(ss[i], tokens[i], n[i], err, errlen))
            return -1;
        rows += n[i];
    }
    if (rows > o->n_batch) {
        snprintf(err, errlen, "%d rows in one micro-batch (at most %d)", rows, o->n_batch);
        return -1;
    }
    mb->n = mb->n_parts = mb->n_members = 0;
    for (int i = 0; i < count; i++)
        mb_add(mb, ss[i], tokens[i], n[i], true);
    return mb_send(mb, err, errlen);
}

session_mb *session_mb_collect(session *owner, char *err, size_t errlen)
{
    session_mb *mb = owner->fly_first;
    if (!mb) {
        snprintf(err, errlen, "no micro-batch in flight");
        return NULL;
    }
    owner->fly_first = mb->next;
    if (!owner->fly_first)
        owner->fly_last = NULL;
    owner->n_fly--;
    mb->in_flight = false;
    for (int i = 0; i < mb->n_members; i++)
        mb->members[i]->in_flight = false;
    const session_layers *l = &owner->layers;
    float *back = mb->hidden;
    if (!mb->evaluated && l->collect(l->ctx, &back, err, errlen))
        return NULL;
    if (back != mb->hidden) {
        snprintf(err, errlen, "the layers returned another batch than the oldest in flight");
        return NULL;
    }
    for (int i = 0; i < mb->n_parts; i++) {
        session *s = mb->parts[i];
        if (engine_output(owner->e, mb->hidden, mb->last_row[i], 1, s->logits)) {
            snprintf(err, errlen, "out of memory computing the logits at position %d",
                     mb->pos[mb->last_row[i]]);
            return NULL;
        }
        if (logits_check(s->logits, 1, s->m->hp.n_vocab, mb->pos[mb->last_row[i]], err, errlen))
            return NULL;
    }
    return mb;
}

/* The owner's micro-batches for session_eval_batch: as many as may be in flight. */
static int batch_mbs(session *o, int want, char *err, size_t errlen)
{
    if (o->n_batch_mbs >= want)
        return 0;
    session_mb **m = realloc(o->batch_mbs, sizeof *m * (size_t)want);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    o->batch_mbs = m;
    for (; o->n_batch_mbs < want; o->n_batch_mbs++)
        if (!(m[o->n_batch_mbs] = session_mb_create(o, err, errlen)))
            return -1;
    return 0;
}

/* Collect every micro-batch in flight; the first failure's message is kept. */
static int drain(session *o, int rc, char *err, size_t errlen)
{
    char why[512];
    while (o->n_fly)
        if (!session_mb_collect(o, why, sizeof why) && rc == 0) {
            snprintf(err, errlen, "%s", why);
            rc = -1;
        }
    return rc;
}

int session_eval_batch(session *const *ss, const int32_t *const *tokens, const int *n,
                       int count, char *err, size_t errlen)
{
    if (count < 1) {
        snprintf(err, errlen, "no sequence to evaluate");
        return -1;
    }
    session *o = ss[0]->owner;
    if (o->n_fly) {
        snprintf(err, errlen, "micro-batches of this engine are still in flight");
        return -1;
    }
    if (check_sessions(o, ss, count, err, errlen))
        return -1;
    int rows = 0;
    for (int i = 0; i < count; i++) {
        if (check_tokens(ss[i], tokens[i], n[i], err, errlen))
            return -1;
        rows += n[i];
    }
    /* As many micro-batches as the ring keeps in flight, of even sizes (so that each device's
     * share of the step takes about as long), none over n_batch — when the step is big enough:
     * a few rows cost a device about what one row costs (its weights are read once either
     * way), so cutting a step of fewer than PIPE_MIN_ROWS rows per device would only add
     * stages to wait for. (A scheduler that keeps several micro-batches in flight across steps
     * uses session_mb_submit.) */
    int depth = session_max_in_flight(o);
    int n_mb = (rows + o->n_batch - 1) / o->n_batch;
    if (n_mb < depth && rows >= PIPE_MIN_ROWS * depth)
        n_mb = depth;
    if (batch_mbs(o, depth, err, errlen))
        return -1;
    int part = 0, from = 0, rc = 0;
    for (int b = 0; b < n_mb && rc == 0; b++) {
        /* rows of micro-batch b: an even share of what is left */
        int size = (rows + n_mb - b - 1) / (n_mb - b);
        rows -= size;
        if (o->n_fly == depth && !session_mb_collect(o, err, errlen)) {
            rc = -1;
            break;
        }
        session_mb *mb = o->batch_mbs[b % depth];
        mb->n = mb->n_parts = mb->n_members = 0;
        while (size > 0) {
            int take = n[part] - from < size ? n[part] - from : size;
            mb_add(mb, ss[part], tokens[part] + from, take, from + take == n[part]);
            from += take;
            size -= take;
            if (from == n[part]) {
                part++;
                from = 0;
            }
        }
        rc = mb_send(mb, err, errlen);
    }
    return drain(o, rc, err, errlen);
}
