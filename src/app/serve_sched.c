/* serve_sched.c — prima serve's slots: several requests generated at once, continuous batching.
 *
 * Each slot is one sequence of the runner's session (slot 0 the session itself, the others its
 * peers): its own history, KV region, logits, sampler, reply text and request. Between steps,
 * requests join free slots (the one whose cache serves the prompt best: its longest cached
 * prefix, less what it would drop) and finished or cancelled ones leave. A step is one
 * micro-batch: a row per generating slot in it (the token it sampled last) and at most one
 * chunk of one prompt (at most -b rows in all), so a new prompt holds the others up by at most
 * one chunk per step. As many micro-batches are kept in flight as the layers allow (a ring's
 * devices), the generating slots spread over them; each is sent again as soon as it is back and
 * its slots have sampled from their own logits. Since a row's result does not depend on the
 * other rows, each answer is the one it gets alone. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "app/serve_agents.h"
#include "app/serve_engine.h"
#include "cluster/stats.h"

/* What the token hook needs. */
typedef struct token_ctx {
    serve_engine *se;
    srv_job *job;
    const tokenizer *tk;
    int n_vocab, n_top;
    double last;               /* when the previous token was sampled (0: none yet) */
} token_ctx;

/* A micro-batch and the rows it carries: one per generating slot, and a prompt chunk last. */
struct serve_mb {
    session_mb *mb;
    bool busy;                 /* in flight */
    serve_slot *who[SERVE_MAX_SLOTS + 1];
    int nrow[SERVE_MAX_SLOTS + 1];
    int count, decode, chunk;
};

struct serve_slot {
    int id;
    srv_job *job;              /* NULL: free */
    session *s;                /* a peer of the runner's session (slot 0: NULL, it uses the
                                * runner's own, reopened after a ring failure) */
    sampler *smp;
    serve_constraint con;      /* the grammar its reply must follow (none: con.g NULL) */
    gen_opts go;
    gen_text gt;
    token_ctx tc;
    int32_t *toks;             /* the prompt, n of them; [0, fed) are in the cache */
    int n, fed;
    bool decoding;             /* the prompt is in; next is the token to evaluate */
    int32_t next;
    bool in_flight;            /* in a micro-batch not collected yet */
    int past;                  /* its history before that micro-batch */
    srv_result res;
    double t_admit, t_first;
    uint64_t admitted, used;   /* order of admission (prompts go first come, first served) and
                                * of the last use (a free slot unused longest is taken first) */
};

/* Live figures for the cluster view: tokens and decode time, and the ring's counters four
 * times a second. */
static void count_token(token_ctx *t)
{
    serve_engine *se = t->se;
    double now = se_now();
    pthread_mutex_lock(&se->mu);
    se->tokens++;
    if (t->last > 0)
        se->decode_s += now - t->last;
    bool stale = now - se->snap_at > 0.25;
    pthread_mutex_unlock(&se->mu);
    t->last = now;
    if (stale)
        se_snapshot(se);
}

static void token_prob(const tokenizer *tk, int32_t id, float lp, char *buf, size_t cap,
                       srv_token_prob *out)
{
    size_t n = tokenizer_piece(tk, id, false, buf, cap);
    *out = (srv_token_prob){buf, n < cap ? n : cap, lp};
}

/* Cancellation, and the log-probabilities of the token and its best alternatives (of the
 * model's distribution, before penalties and truncation). */
static int on_token(void *user, int32_t tok, const float *logits)
{
    token_ctx *t = user;
    if (srv_job_cancelled(t->job))
        return 1;
    count_token(t);
    if (!srv_job_request(t->job)->logprobs)
        return 0;
    float mx = logits[0];
    for (int i = 1; i < t->n_vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < t->n_vocab; i++)
        sum += exp((double)(logits[i] - mx));
    float lse = mx + (float)log(sum);
    int best[SRV_MAX_TOP_LOGPROBS];
    int nb = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        int at = nb;
        while (at > 0 && logits[best[at - 1]] < logits[i])
            at--;
        if (at >= t->n_top)
            continue;
        if (nb < t->n_top)
            nb++;
        memmove(best + at + 1, best + at, sizeof *best * (size_t)(nb - 1 - at));
        best[at] = i;
    }
    char pieces[SRV_MAX_TOP_LOGPROBS + 1][64];
    srv_token_prob me, top[SRV_MAX_TOP_LOGPROBS];
    token_prob(t->tk, tok, logits[tok] - lse, pieces[0], sizeof pieces[0], &me);
    for (int i = 0; i < nb; i++)
        token_prob(t->tk, best[i], logits[best[i]] - lse, pieces[i + 1], sizeof pieces[0],
                   &top[i]);
    srv_job_logprob(t->job, &me, top, nb);
    return 0;
}

static void emit(void *user, const char *text, size_t len)
{
    srv_job_text(((token_ctx *)user)->job, text, len);
}

/* The request's seed, else the command line's, else a fresh one. */
static uint64_t request_seed(const runner *r, const srv_request *q)
{
    if (q->seed_given)
        return q->sp.seed;
    if (r->o.seed_given)
        return r->o.sp.seed;
    return run_opts_fresh_seed();
}

/* ---- slots ------------------------------------------------------------------------------ */

static session *slot_session(serve_engine *se, serve_slot *sl)
{
    return sl->id ? sl->s : se->r->s;
}

/* Sequences 1.. of the runner's session: a session each, on its engine (with the ring: on
 * every device), for the slots after the first. */
static int slots_attach(serve_engine *se, char *err, size_t errlen)
{
    for (int i = 1; i < se->n_slots; i++)
        if (!(se->slots[i].s = session_create_peer(se->r->s, i, err, errlen)))
            return -1;
    /* as many micro-batches as can be in flight (the ring's devices), no more than slots */
    int n = session_max_in_flight(se->r->s);
    if (se->max_mbs > 0 && se->max_mbs < n)
        n = se->max_mbs;
    se->n_mbs = n < se->n_slots ? n : se->n_slots;
    for (int i = 0; i < se->n_mbs; i++)
        if (!(se->mbs[i].mb = session_mb_create(se->r->s, err, errlen)))
            return -1;
    return 0;
}

/* Before the runner's session closes (its micro-batches and peers go first). */
static void slots_detach(serve_engine *se)
{
    for (int i = 0; i < se->n_mbs; i++) {
        session_mb_free(se->mbs[i].mb);
        se->mbs[i] = (serve_mb){0};
    }
    se->n_mbs = 0;
    for (int i = 1; i < se->n_slots; i++) {
        session_free(se->slots[i].s);
        se->slots[i].s = NULL;
    }
}

int serve_slots_check(const runner *r, int n_slots, char *err, size_t errlen)
{
    if (n_slots < 1 || n_slots > SERVE_MAX_SLOTS)
        snprintf(err, errlen, "slots %d: expected 1 to %d", n_slots, SERVE_MAX_SLOTS);
    else if (n_slots > 1 && r->o.speculate)
        snprintf(err, errlen, "slots %d: speculative decoding (a draft model or n-gram drafts) "
                 "drafts for one sequence: give slots 1", n_slots);
    else if (n_slots > 1 && r->o.n_gpu_layers > 0 && !r->o.no_gpu)
        snprintf(err, errlen, "slots %d: GPU layers (of this device) hold one sequence's KV "
                 "cache: give slots 1 with them", n_slots);
    else if (n_slots > 1 && r->ra.n_gl)
        snprintf(err, errlen, "slots %d: GPU layers (of the ring's windows) hold one sequence's "
                 "KV cache: give slots 1 with them", n_slots);
    else
        return 0;
    return -1;
}

int serve_slots_open(serve_engine *se, int n, char *err, size_t errlen)
{
    if (serve_slots_check(se->r, n, err, errlen))
        return -1;
    se->slots = calloc((size_t)n, sizeof *se->slots);
    se->mbs = calloc(PRIMA_MAX_DEVICES, sizeof *se->mbs);
    if (!se->slots || !se->mbs) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    se->n_slots = n;
    for (int i = 0; i < n; i++)
        se->slots[i].id = i;
    return se->r->s ? slots_attach(se, err, errlen) : 0;
}

int serve_slots_session(serve_engine *se, char *err, size_t errlen)
{
    if (runner_session(se->r, err, errlen))
        return -1;
    if (slots_attach(se, err, errlen)) {
        serve_slots_session_close(se);
        return -1;
    }
    return 0;
}

void serve_slots_session_close(serve_engine *se)
{
    slots_detach(se);
    runner_session_close(se->r);
}

void serve_slots_close(serve_engine *se)
{
    if (se->slots)
        slots_detach(se);
    free(se->slots);
    free(se->mbs);
    se->slots = NULL;
    se->mbs = NULL;
    se->n_slots = 0;
}

/* The free slot for a prompt: the one whose cache serves it best — the cached prefix it reuses,
 * less the cached tokens it would drop, so a chat's next turn goes to the slot holding the
 * conversation (its longest cached prefix), and a new conversation does not evict another's
 * for a few shared tokens of a template; among equals, the one unused longest. */
static serve_slot *choose_slot(serve_engine *se, const int32_t *toks, int n)
{
    serve_slot *best = NULL;
    long best_score = 0;
    for (int i = 0; i < se->n_slots; i++) {
        serve_slot *sl = &se->slots[i];
        if (sl->job)
            continue;
        session *s = slot_session(se, sl);
        int common = 0, cached = s ? s->n_past : 0;
        while (common < n && common < cached && toks[common] == s->tokens[common])
            common++;
        long score = 2L * common - cached;
        if (!best || score > best_score || (score == best_score && sl->used < best->used)) {
            best = sl;
            best_score = score;
        }
    }
    return best;
}

static void fail(srv_result *res, int status, const char *param, const char *fmt, const char *arg)
{
    res->finish = SRV_FINISH_ERROR;
    res->status = status;
    res->error_param = param;
    snprintf(res->error, sizeof res->error, fmt, arg);
}

/* The slot's request is over. */
static void slot_finish(serve_engine *se, srv *sv, serve_slot *sl, enum gen_end end)
{
    gen_text_end(&sl->gt, end, NULL);
    srv_result *res = &sl->res;
    res->completion_tokens = sl->gt.n_gen;
    if (sl->decoding)
        res->decode_s = se_now() - sl->t_first;
    switch (end) {
    case GEN_EOG:
    case GEN_STOP_STRING: res->finish = SRV_FINISH_STOP; break;
    case GEN_LIMIT:
    case GEN_CONTEXT_FULL: res->finish = SRV_FINISH_LENGTH; break;
    case GEN_CANCELLED: res->finish = SRV_FINISH_CANCELLED; break;
    case GEN_ERROR: break; /* res says why */
    }
    sampler_free(sl->smp);
    sl->smp = NULL;
    serve_constraint_close(&sl->con);
    free(sl->toks);
    sl->toks = NULL;
    srv_job_finish(sv, sl->job, res);
    sl->job = NULL;
    sl->used = ++se->clock;
    se_snapshot(se); /* the views see the request's counters */
}

/* Take a job into a free slot: tokenize, check, reuse the cached prefix. Refusals finish it. */
static void admit(serve_engine *se, srv *sv, srv_job *job)
{
    runner *r = se->r;
    const srv_request *q = srv_job_request(job);
    const char *param = q->kind == SRV_CHAT ? "messages" : "prompt";
    srv_result res = {0};
    int32_t *toks = NULL;
    char terr[400];   /* fits the answer's error text */
    int n = serve_prompt(se, q, &toks, terr, sizeof terr);
    if (n == CHAT_ERR_TEMPLATE)
        fail(&res, 400, param, "%s", terr);
    else if (n < 0) /* the text's fault (400), unless memory ran out */
        fail(&res, n == TOK_ERR_NOMEM ? 500 : 400, n == TOK_ERR_NOMEM ? NULL : param,
             "cannot tokenize the prompt: %s", tokenizer_strerror(n));
    else if (n == 0)
        fail(&res, 400, param, "%s", "the prompt is empty and the vocabulary adds no BOS token");
    else if (n > r->n_ctx) {
        char why[64];
        snprintf(why, sizeof why, "%d tokens; the context holds %d", n, r->n_ctx);
        fail(&res, 400, param, "the prompt has %s", why);
    }
    serve_constraint con = {0};
    if (res.finish != SRV_FINISH_ERROR) {
        const char *cparam = NULL;
        int rc = serve_constraint_open(se, q, &con, &cparam, terr, sizeof terr);
        if (rc)
            fail(&res, rc == -1 ? 400 : 500, rc == -1 ? cparam : NULL, "%s", terr);
    }
    serve_slot *sl = res.finish == SRV_FINISH_ERROR ? NULL : choose_slot(se, toks, n);
    sampler_params sp = q->sp;
    sp.seed = request_seed(r, q);
    sampler *smp = sl ? sampler_create(&sp, r->m->hp.n_vocab) : NULL;
    if (sl && !smp)
        fail(&res, 500, NULL, "%s", "out of memory");
    if (res.finish == SRV_FINISH_ERROR) {
        free(toks);
        serve_constraint_close(&con);
        srv_job_finish(sv, job, &res);
        return;
    }
    bool parsed = serve_reply_format(se, job, toks, n);
    session *s = slot_session(se, sl);
    int common = 0;
    while (common < n && common < s->n_past && toks[common] == s->tokens[common])
        common++;
    if (common == n) /* at least one token is evaluated, for fresh logits */
        common--;
    session_truncate(s, common);
    common = s->n_past;
    for (int i = 0; i < common; i++)
        sampler_accept(smp, toks[i]);
    *sl = (serve_slot){.id = sl->id, .s = sl->s, .job = job,
                       .smp = smp, .con = con, .toks = toks, .n = n, .fed = common,
                       .t_admit = se_now(), .admitted = ++se->clock, .used = sl->used};
    sl->tc = (token_ctx){se, job, r->tk, r->m->hp.n_vocab, q->top_logprobs, 0};
    sl->go = (gen_opts){.n_predict = q->max_tokens, .stop = q->stop, .n_stop = q->n_stop,
                        .on_token = on_token, .on_token_user = &sl->tc,
                        /* a reply read for calls sees the control tokens' text (gpt-oss's
                         * channels) */
                        .special_text = parsed};
    gen_text_init(&sl->gt, r->tk, &sl->go, emit, &sl->tc);
    sl->res.prompt_tokens = n;
    sl->res.cached_tokens = common;
}

/* Sample the slot's next token from its logits and take it into its reply. */
static void slot_sample(serve_engine *se, srv *sv, serve_slot *sl)
{
    session *s = slot_session(se, sl);
    if (!gen_text_open(&sl->gt)) {
        slot_finish(se, sv, sl, GEN_LIMIT);
        return;
    }
    enum gen_end end;
    char err[256];
    const float *logits = serve_constraint_mask(se, &sl->con, s->logits, err, sizeof err);
    if (!logits) {
        fail(&sl->res, 500, NULL, "%s", err);
        slot_finish(se, sv, sl, GEN_ERROR);
        return;
    }
    int32_t tok = sampler_sample(sl->smp, logits);
    sampler_accept(sl->smp, tok);
    bool done = serve_constraint_take(se, &sl->con, tok);
    if (!gen_text_token(&sl->gt, tok, logits, &end, err, sizeof err)) {
        if (end == GEN_ERROR)
            fail(&sl->res, 500, NULL, "%s", err);
        slot_finish(se, sv, sl, end);
    } else if (done) {
        slot_finish(se, sv, sl, GEN_EOG); /* the grammar is complete: nothing more may come */
    } else if (!gen_text_open(&sl->gt)) {
        slot_finish(se, sv, sl, GEN_LIMIT);
    } else if (s->n_past == s->n_ctx) {
        slot_finish(se, sv, sl, GEN_CONTEXT_FULL);
    } else {
        sl->next = tok;
    }
}

/* A step failed (the ring, or a logit that came out NaN): 500 to every request running. The
 * histories of the slots in flight are cut back to what was evaluated before, so that no
 * slot's cache claims tokens it lacks; a ring's session is closed (the next request connects
 * it again). */
static void step_failed(serve_engine *se, srv *sv, const char *err)
{
    for (int i = 0; i < se->n_mbs; i++)
        se->mbs[i].busy = false;
    for (int i = 0; i < se->n_slots; i++) {
        serve_slot *sl = &se->slots[i];
        if (!sl->job)
            continue;
        if (sl->in_flight)
            session_truncate(slot_session(se, sl), sl->past);
        sl->in_flight = false;
        fail(&sl->res, 500, NULL, se->ring ? "the ring failed: %.400s" : "%.400s", err);
        slot_finish(se, sv, sl, GEN_ERROR);
    }
    se_ring_failed(se, err);
}

/* Whether a micro-batch in flight carries a prompt chunk. */
static bool chunk_in_flight(const serve_engine *se)
{
    for (int i = 0; i < se->n_mbs; i++)
        if (se->mbs[i].busy && se->mbs[i].chunk)
            return true;
    return false;
}

/* Fill micro-batch b with slots that are not in flight and send it (with one micro-batch, it is
 * evaluated at once): the generating slots spread
 * over the micro-batches still free, and, while no other prompt chunk is in flight, one chunk
 * (at most -b rows in all) of the oldest prompt not in yet. 0 sent, 1 nothing to send, -1
 * failed (err). */
static int send(serve_engine *se, srv *sv, serve_mb *b, char *err, size_t errlen)
{
    int ready = 0, free_mbs = 0;
    serve_slot *prefill = NULL;
    for (int i = 0; i < se->n_slots; i++) {
        serve_slot *sl = &se->slots[i];
        if (!sl->job || sl->in_flight)
            continue;
        if (srv_job_cancelled(sl->job))
            slot_finish(se, sv, sl, GEN_CANCELLED); /* its slot is free before the next step */
        else if (sl->decoding)
            ready++;
        else if (!prefill || sl->admitted < prefill->admitted)
            prefill = sl;
    }
    for (int i = 0; i < se->n_mbs; i++)
        free_mbs += !se->mbs[i].busy;
    int take = (ready + free_mbs - 1) / free_mbs, n_batch = se->r->s->n_batch;
    bool chunk = prefill && !chunk_in_flight(se);
    if (take > n_batch - chunk) /* more slots than a batch holds: the prompt still gets a row */
        take = n_batch - chunk;
    b->count = b->decode = b->chunk = 0;
    /* from where the last micro-batch stopped, so that every slot gets its turn */
    for (int k = 0, start = se->next_slot; k < se->n_slots && b->decode < take; k++) {
        serve_slot *sl = &se->slots[(start + k) % se->n_slots];
        if (sl->job && !sl->in_flight && sl->decoding) {
            b->who[b->count] = sl;
            b->nrow[b->count++] = 1;
            b->decode++;
            se->next_slot = (sl->id + 1) % se->n_slots;
        }
    }
    if (chunk) {
        b->chunk = prefill->n - prefill->fed;
        if (b->chunk > n_batch - b->decode)
            b->chunk = n_batch - b->decode;
        b->who[b->count] = prefill;
        b->nrow[b->count++] = b->chunk;
    }
    if (!b->count)
        return 1;
    session *ss[SERVE_MAX_SLOTS + 1];
    const int32_t *tk[SERVE_MAX_SLOTS + 1];
    for (int i = 0; i < b->count; i++) {
        serve_slot *sl = b->who[i];
        ss[i] = slot_session(se, sl);
        tk[i] = sl->decoding ? &sl->next : sl->toks + sl->fed;
        sl->past = ss[i]->n_past;
        sl->in_flight = true;
    }
    b->busy = true;
    /* One micro-batch at a time: evaluated at once (on a ring with room for one batch in
     * flight through ring_eval, where failover recovers a lost worker: session.h). */
    if (se->n_mbs == 1)
        return session_eval_batch(ss, tk, b->nrow, b->count, err, errlen) ? -1 : 0;
    return session_mb_submit(b->mb, ss, tk, b->nrow, b->count, err, errlen) ? -1 : 0;
}

/* What a step did, for /metrics and the --stats step event. */
static void count_step(serve_engine *se, const serve_mb *b, int in_flight)
{
    pthread_mutex_lock(&se->mu);
    se->steps++;
    se->step_decode_rows += (uint64_t)b->decode;
    se->step_prefill_rows += (uint64_t)b->chunk;
    se->steps_mixed += b->decode && b->chunk;
    pthread_mutex_unlock(&se->mu);
    if (!se->r->ra.stats)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step", (double)se->steps);
    cJSON_AddNumberToObject(o, "decode_rows", b->decode);
    cJSON_AddNumberToObject(o, "prefill_rows", b->chunk);
    cJSON_AddNumberToObject(o, "prefill_slot", b->chunk ? b->who[b->count - 1]->id : -1);
    cJSON_AddNumberToObject(o, "in_flight", in_flight);
    stats_emit(se->r->ra.stats, "step", o);
}

/* Keep the micro-batches in flight (with a ring, each on another device: pipelining), then take
 * the oldest back: its prompt chunk goes in, its generating slots sample. */
static void step(serve_engine *se, srv *sv)
{
    char err[512];
    for (int i = 0; i < se->n_mbs; i++) {
        if (se->mbs[i].busy)
            continue;
        int rc = send(se, sv, &se->mbs[i], err, sizeof err);
        if (rc < 0) {
            step_failed(se, sv, err);
            return;
        }
        if (rc > 0)
            break; /* nothing left to send */
    }
    int in_flight = 0;
    for (int i = 0; i < se->n_mbs; i++)
        in_flight += se->mbs[i].busy;
    if (!in_flight)
        return; /* every slot left (cancelled) */
    serve_mb *b = se->n_mbs == 1 ? &se->mbs[0] : NULL; /* one: evaluated as it was sent */
    session_mb *got = b ? NULL : session_mb_collect(se->r->s, err, sizeof err);
    for (int i = 0; got && i < se->n_mbs; i++)
        b = se->mbs[i].mb == got ? &se->mbs[i] : b;
    if (!b) {
        step_failed(se, sv, got ? "a micro-batch came back that was not sent" : err);
        return;
    }
    b->busy = false;
    count_step(se, b, in_flight);
    for (int i = 0; i < b->count; i++) {
        serve_slot *sl = b->who[i];
        sl->in_flight = false;
        if (!sl->decoding) {
            for (int k = 0; k < b->nrow[i]; k++)
                sampler_accept(sl->smp, sl->toks[sl->fed + k]);
            sl->fed += b->nrow[i];
            if (sl->fed < sl->n)
                continue;
            sl->decoding = true;
            sl->t_first = se_now();
            sl->res.prefill_s = sl->t_first - sl->t_admit;
            srv_job_begin(sl->job);
        }
        slot_sample(se, sv, sl);
    }
}

/* Speculative decoding (-md, --spec) drafts for one sequence: one request at a time, through
 * prima run's loop. */
static void run_solo(serve_engine *se, srv *sv, serve_slot *sl)
{
    runner *r = se->r;
    session *s = slot_session(se, sl);
    sl->go.spec = r->spec;
    gen_stats st = {0};
    char err[512];
    if (gen_feed(s, sl->smp, &sl->go, sl->toks + sl->fed, sl->n - sl->fed, &st, err,
                 sizeof err)) {
        step_failed(se, sv, err);
        return;
    }
    sl->res.prefill_s = st.prompt_s;
    sl->decoding = true;
    sl->t_first = se_now();
    srv_job_begin(sl->job);
    enum gen_end end = gen_reply(s, r->tk, sl->smp, &sl->go, emit, &sl->tc, NULL, &st, err,
                                 sizeof err);
    sl->gt.n_gen = st.n_gen;
    if (end == GEN_ERROR) {
        step_failed(se, sv, err);
        return;
    }
    slot_finish(se, sv, sl, end);
}

static int busy_slots(const serve_engine *se)
{
    int n = 0;
    for (int i = 0; i < se->n_slots; i++)
        n += se->slots[i].job != NULL;
    return n;
}

void serve_slots_loop(serve_engine *se, srv *sv)
{
    for (;;) {
        int busy = busy_slots(se);
        /* join: while a slot is free (waiting for a job only when nothing runs) */
        while (busy < se->n_slots) {
            srv_job *j = srv_take(sv, busy == 0);
            if (!j)
                break;
            if (busy == 0 && se_ring_ready(se, sv, j))
                continue; /* the ring could not be connected: the job got its 500 */
            admit(se, sv, j);
            busy = busy_slots(se);
        }
        if (busy == 0)
            return; /* stopping, nothing left */
        if (se->r->spec)
            run_solo(se, sv, &se->slots[0]);
        else
            step(se, sv);
    }
}
