#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/serve_engine.h"
#include "sched/halda.h"

static double now_s(void);

/* The memory a device's windows hold, as its counters say: of the window pages it computed
 * since the last look, the share that was resident when compute started, times the windows'
 * bytes (kept while nothing ran; after a new session the counters start again). */
static void resident(struct serve_device *sd, const ring_counters *c, uint64_t window_bytes)
{
    if (c->pages < sd->at.pages)
        sd->at = (ring_counters){0};
    uint64_t pages = c->pages - sd->at.pages, res = c->pages_resident - sd->at.pages_resident;
    if (!pages)
        return;
    sd->resident_bytes = (uint64_t)((double)window_bytes * (double)res / (double)pages);
    sd->at = *c;
}

/* The ring's plan and counters, for health, metrics and the cluster view (engine thread). */
static void snapshot(serve_engine *se)
{
    pthread_mutex_lock(&se->mu);
    ring *rg = se->r->rh.r;
    if (rg) {
        se->plan = *ring_get_plan(rg);
        for (int d = 0; d < se->plan.n_dev; d++) {
            struct serve_device *sd = &se->devs[d];
            ring_totals(rg, d, &se->dev[d]);
            ring_device(rg, d, sd->addr, sizeof sd->addr, &sd->mem_budget);
            plan_format_layers(&se->plan, d, sd->layers, sizeof sd->layers);
            uint64_t window_bytes = 0;
            bool *owns = calloc((size_t)se->plan.n_layer, sizeof *owns);
            if (owns) {
                plan_owned_layers(&se->plan, d, owns);
                for (int il = 0; il < se->plan.n_layer; il++)
                    window_bytes += owns[il] ? model_layer_bytes(se->r->m, il) : 0;
            }
            free(owns);
            sd->weight_bytes = window_bytes + (d == 0 ? model_head_bytes(se->r->m) : 0);
            resident(sd, &se->dev[d], window_bytes);
        }
        se->batches = ring_batches(rg);
        se->n_left_out = se->r->sp.n_left_out;
        memcpy(se->left_out, se->r->sp.left_out, sizeof se->left_out);
    }
    se->snap_at = now_s();
    pthread_mutex_unlock(&se->mu);
}

static void set_state(serve_engine *se, const char *state, const char *detail)
{
    pthread_mutex_lock(&se->mu);
    se->state = state;
    snprintf(se->detail, sizeof se->detail, "%.400s", detail);
    pthread_mutex_unlock(&se->mu);
}

void serve_engine_init(serve_engine *se, runner *r)
{
    memset(se, 0, sizeof *se);
    se->r = r;
    bool warned;
    se->tpl = chat_template_detect(r->m->file, &warned);
    if (warned)
        fprintf(stderr, "prima: warning: chat template not recognised, using ChatML\n");
    pthread_mutex_init(&se->mu, NULL);
    se->ring = ring_args_active(&r->ra);
    se->state = r->s ? "ready" : "loading";
    snapshot(se);
}

/* Open the session if there is none yet (the ring connects while /health says "loading"). */
static void se_start(void *ctx)
{
    serve_engine *se = ctx;
    if (se->r->s)
        return;
    char err[512];
    if (runner_session(se->r, err, sizeof err)) {
        fprintf(stderr, "prima: %s (each request tries again)\n", err);
        set_state(se, "lost", err);
        return;
    }
    set_state(se, "ready", "");
    snapshot(se);
    halda_thread_done(); /* the engine thread planned the ring; it may end before the process */
}

void serve_engine_free(serve_engine *se)
{
    pthread_mutex_destroy(&se->mu);
}

static void fail(srv_result *res, int status, const char *param, const char *fmt, const char *arg)
{
    res->finish = SRV_FINISH_ERROR;
    res->status = status;
    res->error_param = param;
    snprintf(res->error, sizeof res->error, fmt, arg);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What the token hook needs. */
typedef struct token_ctx {
    serve_engine *se;
    srv_job *job;
    const tokenizer *tk;
    int n_vocab, n_top;
    double last;               /* when the previous token was sampled (0: none yet) */
} token_ctx;

/* Live figures for the cluster view: tokens and decode time, and the ring's counters four
 * times a second. */
static void count_token(token_ctx *t)
{
    serve_engine *se = t->se;
    double now = now_s();
    pthread_mutex_lock(&se->mu);
    se->tokens++;
    if (t->last > 0)
        se->decode_s += now - t->last;
    bool stale = now - se->snap_at > 0.25;
    pthread_mutex_unlock(&se->mu);
    t->last = now;
    if (stale)
        snapshot(se);
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
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
}

/* The ring failed: answer 500, close it, and connect again at the next request. */
static void ring_failed(serve_engine *se, srv_result *res, const char *err)
{
    fail(res, 500, NULL, "the ring failed: %.400s", err);
    if (se->ring) {
        snapshot(se);
        runner_session_close(se->r);
        set_state(se, "lost", err);
    }
}

/* Chat: the template's control tokens, the messages as plain text (chat_tokenize); a
 * completion's prompt is the client's own text, control tokens and all, as prima run -p takes
 * it. The count, or a TOK_ERR_* code. */
static int prompt_tokens(serve_engine *se, const srv_request *q, int32_t **toks)
{
    if (q->kind == SRV_CHAT)
        return chat_tokenize(se->r->tk, se->tpl, q->msgs, q->n_msgs, true, toks);
    return tokenizer_encode(se->r->tk, q->prompt, strlen(q->prompt), true, true, toks);
}

static void generate(serve_engine *se, srv_job *job, session *s, const int32_t *toks, int n,
                     srv_result *res)
{
    runner *r = se->r;
    const srv_request *q = srv_job_request(job);
    int common = 0;
    while (common < n && common < s->n_past && toks[common] == s->tokens[common])
        common++;
    if (common == n) /* at least one token is evaluated, for fresh logits */
        common--;
    session_truncate(s, common);
    sampler_params sp = q->sp;
    sp.seed = request_seed(r, q);
    sampler *smp = sampler_create(&sp, r->m->hp.n_vocab);
    if (!smp) {
        fail(res, 500, NULL, "%s", "out of memory");
        return;
    }
    for (int i = 0; i < common; i++)
        sampler_accept(smp, toks[i]);
    token_ctx tc = {se, job, r->tk, r->m->hp.n_vocab, q->top_logprobs, 0};
    gen_opts go = {.n_predict = q->max_tokens, .stop = q->stop, .n_stop = q->n_stop,
                   .on_token = on_token, .on_token_user = &tc, .spec = r->spec};
    gen_stats st = {0};
    char err[512];
    res->prompt_tokens = n;
    res->cached_tokens = common;
    if (gen_feed(s, smp, &go, toks + common, n - common, &st, err, sizeof err)) {
        sampler_free(smp);
        ring_failed(se, res, err);
        return;
    }
    res->prefill_s = st.prompt_s;
    srv_job_begin(job);
    enum gen_end end = gen_reply(s, r->tk, smp, &go, emit, &tc, NULL, &st, err, sizeof err);
    sampler_free(smp);
    res->completion_tokens = st.n_gen;
    res->decode_s = st.gen_s;
    switch (end) {
    case GEN_EOG:
    case GEN_STOP_STRING: res->finish = SRV_FINISH_STOP; break;
    case GEN_LIMIT:
    case GEN_CONTEXT_FULL: res->finish = SRV_FINISH_LENGTH; break;
    case GEN_CANCELLED: res->finish = SRV_FINISH_CANCELLED; break;
    case GEN_ERROR: ring_failed(se, res, err); break;
    }
}

static void se_run(void *ctx, srv_job *job, srv_result *res)
{
    serve_engine *se = ctx;
    runner *r = se->r;
    const srv_request *q = srv_job_request(job);
    const char *param = q->kind == SRV_CHAT ? "messages" : "prompt";
    if (!r->s) {
        set_state(se, "connecting", "connecting the ring again");
        char err[512];
        if (runner_session(r, err, sizeof err)) {
            set_state(se, "lost", err);
            fail(res, 500, NULL, "the ring is unavailable: %.400s", err);
            return;
        }
        set_state(se, "ready", "");
    } else if (se->ring) {
        /* Workers lost (and planned around) earlier that answer again join for this request. */
        char err[512];
        if (runner_rejoin(r, err, sizeof err)) {
            ring_failed(se, res, err);
            return;
        }
    }
    int32_t *toks = NULL;
    int n = prompt_tokens(se, q, &toks);
    if (n < 0) /* the text's fault (400), unless memory ran out */
        fail(res, n == TOK_ERR_NOMEM ? 500 : 400, n == TOK_ERR_NOMEM ? NULL : param,
             "cannot tokenize the prompt: %s", tokenizer_strerror(n));
    else if (n == 0)
        fail(res, 400, param, "%s", "the prompt is empty and the vocabulary adds no BOS token");
    else if (n > r->s->n_ctx) {
        char why[64];
        snprintf(why, sizeof why, "%d tokens; the context holds %d", n, r->s->n_ctx);
        fail(res, 400, param, "the prompt has %s", why);
    } else {
        generate(se, job, r->s, toks, n, res);
    }
    free(toks);
    snapshot(se);
    halda_thread_done(); /* a failover or a rejoin may have planned again */
}

static bool se_health(void *ctx, void *obj)
{
    serve_engine *se = ctx;
    cJSON *h = obj;
    pthread_mutex_lock(&se->mu);
    bool ok = !strcmp(se->state, "ready");
    cJSON_AddStringToObject(h, "status", ok ? "ok" : "unavailable");
    cJSON *rg = cJSON_AddObjectToObject(h, "ring");
    cJSON_AddStringToObject(rg, "state", se->state);
    if (*se->detail)
        cJSON_AddStringToObject(rg, "detail", se->detail);
    cJSON *devs = cJSON_AddArrayToObject(rg, "devices");
    for (int d = 0; se->ring && d < se->plan.n_dev; d++) {
        cJSON *dv = cJSON_CreateObject();
        cJSON_AddNumberToObject(dv, "rank", d);
        cJSON_AddNumberToObject(dv, "window", se->plan.window[d]);
        cJSON_AddItemToArray(devs, dv);
    }
    if (se->ring)
        cJSON_AddNumberToObject(rg, "rounds", se->plan.k);
    pthread_mutex_unlock(&se->mu);
    return ok;
}

static void se_metrics(void *ctx, FILE *f)
{
    serve_engine *se = ctx;
    if (!se->ring)
        return;
    static const struct {
        const char *name, *help;
        size_t off;
        double scale;
    } m[] = {
        {"prima_device_compute_seconds_total", "time in the device's layers",
         offsetof(ring_counters, compute_ns), 1e-9},
        {"prima_device_wait_seconds_total", "time the device waited for the previous one",
         offsetof(ring_counters, wait_ns), 1e-9},
        {"prima_device_disk_bytes_total", "bytes the device read from storage",
         offsetof(ring_counters, disk_bytes), 1},
        {"prima_device_major_faults_total", "major page faults during compute",
         offsetof(ring_counters, major_faults), 1},
    };
    pthread_mutex_lock(&se->mu);
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", m[i].name, m[i].help, m[i].name);
        for (int d = 0; d < se->plan.n_dev; d++) {
            uint64_t v;
            memcpy(&v, (const char *)&se->dev[d] + m[i].off, sizeof v);
            fprintf(f, "%s{device=\"%d\"} %.9g\n", m[i].name, d, (double)v * m[i].scale);
        }
    }
    fprintf(f, "# HELP prima_ring_batches_total batches the ring evaluated\n"
               "# TYPE prima_ring_batches_total counter\nprima_ring_batches_total %d\n",
            se->batches);
    pthread_mutex_unlock(&se->mu);
}

static void add_counters(cJSON *o, const ring_counters *c)
{
    cJSON_AddNumberToObject(o, "compute_seconds", (double)c->compute_ns * 1e-9);
    cJSON_AddNumberToObject(o, "wait_seconds", (double)c->wait_ns * 1e-9);
    cJSON_AddNumberToObject(o, "disk_bytes", (double)c->disk_bytes);
    cJSON_AddNumberToObject(o, "major_faults", (double)c->major_faults);
    cJSON_AddNumberToObject(o, "pages", (double)c->pages);
    cJSON_AddNumberToObject(o, "pages_resident", (double)c->pages_resident);
}

/* Workers of --workers that are not in the ring: the scheduler left them out. */
static void add_left_out(const serve_engine *se, cJSON *arr)
{
    const char *list = se->r->ra.workers;
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        bool in = false;
        for (int d = 1; d < se->plan.n_dev; d++)
            in |= strlen(se->devs[d].addr) == len && !strncmp(se->devs[d].addr, p, len);
        if (!in && len) {
            cJSON *o = cJSON_CreateObject();
            char addr[64];
            snprintf(addr, sizeof addr, "%.*s", (int)(len < 63 ? len : 63), p);
            cJSON_AddStringToObject(o, "addr", addr);
            const char *why = "not in the ring: lost, or not answering when the ring was planned";
            for (int i = 0; i < se->n_left_out; i++)
                if (!strcmp(se->left_out[i].addr, addr))
                    why = se->left_out[i].why;
            cJSON_AddStringToObject(o, "why", why);
            cJSON_AddItemToArray(arr, o);
        }
        p += len + (p[len] == ',');
    }
}

static void *se_cluster(void *ctx)
{
    serve_engine *se = ctx;
    const model_hparams *hp = &se->r->m->hp;
    cJSON *o = cJSON_CreateObject();
    pthread_mutex_lock(&se->mu);
    cJSON_AddStringToObject(o, "state", se->state);
    cJSON_AddStringToObject(o, "detail", se->detail);
    cJSON_AddBoolToObject(o, "ring", se->ring);
    cJSON_AddNumberToObject(o, "n_layer", hp->n_layer);
    cJSON_AddNumberToObject(o, "n_ctx", se->r->n_ctx);
    cJSON_AddNumberToObject(o, "rounds", se->ring ? se->plan.k : 1);
    cJSON_AddNumberToObject(o, "batches", se->batches);
    cJSON_AddNumberToObject(o, "generated_tokens", (double)se->tokens);
    cJSON_AddNumberToObject(o, "decode_seconds", se->decode_s);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    int n = se->ring ? se->plan.n_dev : 1;
    for (int d = 0; d < n; d++) {
        cJSON *dv = cJSON_CreateObject();
        cJSON_AddNumberToObject(dv, "rank", d);
        if (se->ring) {
            const struct serve_device *sd = &se->devs[d];
            cJSON_AddStringToObject(dv, "addr", d ? sd->addr : "head (this device)");
            cJSON_AddNumberToObject(dv, "window", se->plan.window[d]);
            cJSON_AddNumberToObject(dv, "gpu_layers", se->plan.gpu_layers[d]);
            cJSON_AddStringToObject(dv, "layers", sd->layers);
            cJSON_AddNumberToObject(dv, "weight_bytes", (double)sd->weight_bytes);
            cJSON_AddNumberToObject(dv, "mem_budget", (double)sd->mem_budget);
            cJSON_AddNumberToObject(dv, "resident_bytes", (double)sd->resident_bytes);
            add_counters(dv, &se->dev[d]);
        } else {
            cJSON_AddStringToObject(dv, "addr", "this device");
            cJSON_AddNumberToObject(dv, "window", hp->n_layer);
            cJSON_AddNumberToObject(dv, "gpu_layers", 0);
            cJSON_AddNumberToObject(dv, "weight_bytes", (double)se->r->m->file->size);
        }
        cJSON_AddItemToArray(devs, dv);
    }
    add_left_out(se, cJSON_AddArrayToObject(o, "left_out"));
    pthread_mutex_unlock(&se->mu);
    return o;
}

srv_engine serve_engine_iface(serve_engine *se)
{
    return (srv_engine){.ctx = se, .run = se_run, .start = se_start, .health = se_health,
                        .metrics = se_metrics, .cluster = se_cluster};
}
