/* server.c — connections, routes, the queue and the engine thread; the APIs' wire formats are
 * in openai.c, ollama.c and anthropic.c, and the counters in metrics.c. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/internal.h"

/* How often a waiting connection thread looks whether its client is still there. */
#define POLL_MS 20
/* Connections beyond max_connections that are still let in, to answer them 503; the accept
 * loop resets any past these at once (conns.c). */
#define SPARE_CONNECTIONS 32
/* srv_config.request_s when not given */
#define REQUEST_S 10

struct srv {
    srv_config c;
    srv_engine e;
    struct MHD_Daemon *d;
    srv_conns *conns;
    pthread_t engine_thread;
    bool engine_started;
    pthread_mutex_t mu;          /* the queue, running, stopping */
    pthread_cond_t cv;
    srv_job *head, *tail;        /* queued */
    int queued;
    srv_job *running;            /* taken by the generator, linked by next */
    int n_running;
    bool stopping;
    atomic_uint_least64_t next_id;
    srv_metrics metrics;
};

/* ---- jobs ------------------------------------------------------------------------------- */

/* A member of a group is under its group's lock, and the group's condition wakes the connection
 * (internal.h). */
static pthread_mutex_t *job_mu(srv_job *j)
{
    return j->group ? &j->group->mu : &j->mu;
}

static pthread_cond_t *job_cv(srv_job *j)
{
    return j->group ? &j->group->cv : &j->cv;
}

static void job_lock(srv_job *j)
{
    pthread_mutex_lock(job_mu(j));
}

static void job_unlock(srv_job *j)
{
    pthread_mutex_unlock(job_mu(j));
}

/* What a job holds of its own; a member's request is its group's, but for its prompt's ids. */
static void job_free(srv_job *j)
{
    if (j->group)
        free(j->req.prompt_toks);
    else
        srv_request_free(&j->req);
    cJSON_Delete(j->lp);
    cJSON_Delete(j->calls);
    free(j->reasoning.p);
    free(j->emb);
    tool_parser_free(j->tp);
    free(j->out.p);
    free(j->text.p);
    for (int i = 0; i < j->n_members; i++)
        job_free(j->members[i]);
    free(j->members);
    if (!j->group) {
        pthread_mutex_destroy(&j->mu);
        pthread_cond_destroy(&j->cv);
    }
    free(j);
}

/* A member's references are its group's: the group and its members go together. */
static void job_unref(srv_job *j)
{
    if (j->group)
        j = j->group;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (!left)
        job_free(j);
}

static void job_ref(srv_job *j)
{
    if (j->group)
        j = j->group;
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

const srv_request *srv_job_request(const srv_job *j)
{
    return &j->req;
}

bool srv_job_cancelled(const srv_job *j)
{
    return atomic_load(&j->cancelled) || (j->group && atomic_load(&j->group->cancelled));
}

void srv_job_begin(srv_job *j, int prompt_tokens)
{
    job_lock(j);
    j->begun = true;
    j->prompt_tokens = prompt_tokens;
    if (j->req.stream)
        j->wire->begin(j);
    pthread_cond_broadcast(job_cv(j));
    job_unlock(j);
}

void srv_job_parse_reply(srv_job *j, enum tool_format f, bool think)
{
    job_lock(j);
    j->parse = true;
    j->tool_fmt = f;
    j->think = think;
    job_unlock(j);
}

/* The job is locked. Content, reasoning and calls: sent when streaming, kept for the answer
 * otherwise. */
static void add_content(srv_job *j, const char *text, size_t len)
{
    if (j->req.stream)
        j->wire->text(j, text, len);
    else
        strbuf_add(&j->text, text, len);
}

static void add_reasoning(srv_job *j, const char *text, size_t len)
{
    if (j->req.stream)
        j->wire->reasoning(j, text, len);
    else
        strbuf_add(&j->reasoning, text, len);
}

static void add_call(srv_job *j, const char *name, const char *arguments)
{
    if (!j->calls)
        j->calls = cJSON_CreateArray();
    /* an id of the job's own, in the form each API's ids take after their prefix */
    char id[64];
    snprintf(id, sizeof id, "%s%llx%llx_%d", j->req.api == SRV_API_ANTHROPIC ? "toolu_" : "call_",
             (unsigned long long)j->created, (unsigned long long)j->serial,
             cJSON_GetArraySize(j->calls));
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "name", name);
    cJSON_AddStringToObject(c, "arguments", arguments);
    cJSON_AddItemToArray(j->calls, c);
    if (j->req.stream)
        j->wire->tool_call(j, c);
}

/* What the reply's reader found certain. */
static void deliver(srv_job *j, const tool_delta *d)
{
    if (d->reasoning_len)
        add_reasoning(j, d->reasoning, d->reasoning_len);
    if (d->content_len)
        add_content(j, d->content, d->content_len);
    for (int k = d->first_call; k < d->n_calls; k++)
        add_call(j, d->calls[k].name, d->calls[k].arguments);
}

/* A reply not streamed, read whole at its end: its text becomes the content. */
static void read_reply(srv_job *j)
{
    tool_reply r;
    if (tool_parse(j->tool_fmt, j->think, j->text.p ? j->text.p : "", j->text.len, &r))
        return; /* out of memory: the text stays as it came */
    j->text.len = 0;
    tool_delta d = {r.content, r.content_len, r.reasoning, r.reasoning_len, r.calls, 0,
                    r.n_calls};
    deliver(j, &d);
    tool_reply_free(&r);
}

void srv_job_text(srv_job *j, const char *text, size_t len)
{
    if (!len)
        return;
    job_lock(j);
    if (j->req.stream && j->parse) {
        tool_delta d;
        if (!j->tp)
            j->tp = tool_parser_new(j->tool_fmt, j->think);
        if (j->tp && !tool_parser_feed(j->tp, text, len, &d))
            deliver(j, &d);
    } else {
        add_content(j, text, len); /* not streaming (or read at the end), kept for the answer */
    }
    pthread_cond_broadcast(job_cv(j)); /* a stream's connection sends what came */
    job_unlock(j);
}

void srv_job_reasoning(srv_job *j, const char *text, size_t len)
{
    if (!len)
        return;
    job_lock(j);
    add_reasoning(j, text, len);
    pthread_cond_broadcast(job_cv(j));
    job_unlock(j);
}

void srv_job_tool_call(srv_job *j, const char *name, const char *arguments)
{
    job_lock(j);
    add_call(j, name, arguments);
    pthread_cond_broadcast(job_cv(j));
    job_unlock(j);
}

cJSON *srv_call_arguments(const cJSON *call)
{
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "arguments"));
    cJSON *args = text ? cJSON_Parse(text) : NULL;
    if (!cJSON_IsObject(args)) {
        cJSON_Delete(args);
        args = cJSON_CreateObject();
    }
    return args;
}

void srv_job_logprob(srv_job *j, const srv_token_prob *tok, const srv_token_prob *top, int n_top)
{
    job_lock(j);
    srv_logprob_add(j, tok, top, n_top);
    job_unlock(j);
}

/* The end of a job: the last chunk or the whole answer, then done. */
static void job_end(srv *s, srv_job *j, const srv_result *res)
{
    job_lock(j);
    j->res = *res;
    tool_delta d;
    if (j->req.stream && j->begun && j->tp && res->finish != SRV_FINISH_ERROR &&
        !tool_parser_finish(j->tp, &d))
        deliver(j, &d);
    if (!j->req.stream && j->parse && res->finish != SRV_FINISH_ERROR)
        read_reply(j);
    if (j->req.stream && j->begun)
        j->wire->end(j);
    j->done = true;
    if (j->group && res->finish == SRV_FINISH_ERROR && !j->group->failed) {
        /* the request fails with this error: its other choices are not wanted */
        j->group->failed = j;
        atomic_store(&j->group->cancelled, true);
    }
    pthread_cond_broadcast(job_cv(j));
    job_unlock(j);
    srv_metrics_job(&s->metrics, &j->req, res);
    if (s->c.log) {
        static const char *const ends[] = {"stop", "length", "cancelled", "error"};
        char choice[32] = "";
        if (j->group)
            snprintf(choice, sizeof choice, " choice %d", j->index);
        if (res->finish == SRV_FINISH_ERROR)
            fprintf(s->c.log, "prima: request %llu%s: %d %s\n", (unsigned long long)j->serial,
                    choice, res->status, res->error);
        else
            fprintf(s->c.log,
                    "prima: request %llu%s: %d prompt tokens (%d cached) in %.3f s, %d generated "
                    "in %.3f s, %s\n",
                    (unsigned long long)j->serial, choice, res->prompt_tokens, res->cached_tokens,
                    res->prefill_s, res->completion_tokens, res->decode_s, ends[res->finish]);
        fflush(s->c.log);
    }
    job_unref(j);
}

/* ---- the queue and the engine thread ---------------------------------------------------- */

static void enqueue(srv *s, srv_job *j)
{
    job_ref(j);
    j->next = NULL;
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    s->queued++;
}

/* 0 queued (a group: all its members, in order), or the HTTP status of the refusal. */
static int submit(srv *s, srv_job *j)
{
    pthread_mutex_lock(&s->mu);
    int rc = 0, cap = s->c.queue_max + s->e.slots;
    /* a group needs room for its members; one larger than the whole server is let in when the
     * server is idle, or it could never be */
    int need = j->members ? j->n_members : 1;
    if (need > cap)
        need = cap;
    if (s->stopping)
        rc = 503;
    else if (s->queued + s->n_running + need > cap)
        rc = 429; /* every slot busy, and queue_max waiting */
    if (!rc) {
        if (j->members)
            for (int i = 0; i < j->n_members; i++)
                enqueue(s, j->members[i]);
        else
            enqueue(s, j);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

srv_job *srv_take(srv *s, bool wait)
{
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (wait && !s->head && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        srv_job *j = s->head;
        if (!j)
            break; /* none queued (without wait), or stopping with none left */
        s->head = j->next;
        if (!s->head)
            s->tail = NULL;
        s->queued--;
        if (srv_job_cancelled(j)) {
            pthread_mutex_unlock(&s->mu);
            job_end(s, j, &(srv_result){.finish = SRV_FINISH_CANCELLED});
            pthread_mutex_lock(&s->mu);
            continue;
        }
        j->next = s->running;
        s->running = j;
        s->n_running++;
        pthread_mutex_unlock(&s->mu);
        return j;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void srv_job_finish(srv *s, srv_job *j, const srv_result *res)
{
    pthread_mutex_lock(&s->mu);
    for (srv_job **p = &s->running; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            s->n_running--;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    job_end(s, j, res);
}

static void *engine_main(void *arg)
{
    srv *s = arg;
    s->e.serve(s->e.ctx, s); /* until srv_take says stop, with nothing left */
    return NULL;
}

/* ---- HTTP ------------------------------------------------------------------------------- */

enum route { R_NONE, R_CHAT, R_COMPLETION, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_PAGE,
             R_CLUSTER, R_TEMPLATE, R_MESSAGES, R_OLLAMA_CHAT, R_OLLAMA_GENERATE, R_OLLAMA_SHOW,
             R_OLLAMA_TAGS, R_OLLAMA_PS, R_OLLAMA_VERSION, R_EMBEDDINGS, R_OLLAMA_EMBED };

/* The routes that take a JSON body (the others are GETs). */
static bool posts_json(enum route r)
{
    return r == R_CHAT || r == R_COMPLETION || r == R_TEMPLATE || r == R_MESSAGES ||
           r == R_OLLAMA_CHAT || r == R_OLLAMA_GENERATE || r == R_OLLAMA_SHOW ||
           r == R_EMBEDDINGS || r == R_OLLAMA_EMBED;
}

/* Whose error format a path's answers use: Ollama's under /api/, Anthropic's for /v1/messages,
 * OpenAI's for the rest. */
static enum srv_api api_of_path(const char *path)
{
    if (!strncmp(path, "/api/", 5))
        return SRV_API_OLLAMA;
    if (!strcmp(path, "/v1/messages"))
        return SRV_API_ANTHROPIC;
    return SRV_API_OPENAI;
}

typedef struct conn_ctx {
    enum route route;
    enum srv_api api;            /* the error format of its answers */
    char model[256];             /* R_MODEL: the id asked for (in the URL) */
    strbuf body;
    bool too_big;
    srv_job *job;
} conn_ctx;

/* The CORS headers of an answer to an allowed cross-origin request. */
static void cors_headers(const srv *s, struct MHD_Connection *c, struct MHD_Response *r)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (s->c.cors_origins)   /* the answer depends on the Origin: caches must keep them apart */
        MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ORIGIN);
    if (srv_origin_check(&s->c, origin, host) == SRV_ORIGIN_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, origin);
}

/* Queue r as the answer, with the CORS headers, and let go of it. */
static enum MHD_Result queue(const srv *s, struct MHD_Connection *c, int status,
                            struct MHD_Response *r)
{
    cors_headers(s, c, r);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result respond(const srv *s, struct MHD_Connection *c, int status,
                               const char *type, char *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    if (type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 429 || status == 503)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    /* 503: overloaded or not ready: free the connection for others. 400: the request may be
     * one whose end is in doubt (Content-Length and Transfer-Encoding both): read no more. */
    if (status == 503 || status == 400)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    return queue(s, c, status, r);
}

static enum MHD_Result respond_json(srv *s, struct MHD_Connection *c, int status, cJSON *obj)
{
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    srv_metrics_status(&s->metrics, status);
    if (!text)
        return MHD_NO;
    return respond(s, c, status, "application/json", text, strlen(text));
}

/* An error in the format of the API asked (cc NULL: OpenAI's). */
static enum MHD_Result respond_error_code(srv *s, struct MHD_Connection *c, const conn_ctx *cc,
                                          int status, const char *param, const char *code,
                                          const char *message)
{
    const srv_wire *w = srv_wire_of(cc ? cc->api : SRV_API_OPENAI);
    return respond_json(s, c, status, w->error(status, param, code, message));
}

#define respond_error(s, c, status, param, message) \
    respond_error_code(s, c, cc, status, param, NULL, message)

static int client_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* The client closed its end (or the connection broke). */
static bool client_gone(int fd)
{
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Wait (job locked) until cond holds or the client leaves; false: it left (job cancelled).
 * The client is looked at every POLL_MS however often the job wakes us. */
static bool wait_job(srv_job *j, bool (*cond)(const srv_job *))
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    while (!cond(j)) {
        ts.tv_nsec += POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!cond(j) && pthread_cond_timedwait(&j->cv, &j->mu, &ts) != ETIMEDOUT) {
        }
        if (!cond(j) && client_gone(j->fd)) {
            atomic_store(&j->cancelled, true);
            return false;
        }
    }
    return true;
}

/* A group is over when every member is, or when one failed (the others are cancelled then). */
static bool group_over(const srv_job *g)
{
    if (g->failed)
        return true;
    for (int i = 0; i < g->n_members; i++)
        if (!g->members[i]->done)
            return false;
    return true;
}

static bool is_done(const srv_job *j)
{
    return j->members ? group_over(j) : j->done;
}

/* A group's stream starts with its first member's: with one slot, the others wait their turn
 * in the queue. */
static bool job_begun(const srv_job *j)
{
    for (int i = 0; i < j->n_members; i++)
        if (j->members[i]->begun)
            return true;
    return j->begun;
}

static bool is_begun_or_done(const srv_job *j)
{
    return job_begun(j) || is_done(j);
}

static bool has_output(const srv_job *j)
{
    if (j->out.len > j->out_sent || j->done)
        return true;
    for (int i = 0; i < j->n_members; i++)
        if (j->members[i]->out.len)
            return true;
    return j->members && group_over(j);
}

/* A group's result: its failed member's, or its choices' usage summed (cancelled if one was). */
static srv_result group_result(const srv_job *g)
{
    if (g->failed)
        return g->failed->res;
    srv_result r = {.finish = SRV_FINISH_STOP};
    for (int i = 0; i < g->n_members; i++) {
        const srv_result *m = &g->members[i]->res;
        if (m->finish == SRV_FINISH_CANCELLED)
            r.finish = SRV_FINISH_CANCELLED;
        r.prompt_tokens += m->prompt_tokens;
        r.cached_tokens += m->cached_tokens;
        r.completion_tokens += m->completion_tokens;
        r.prefill_s += m->prefill_s;
        r.decode_s += m->decode_s;
    }
    return r;
}

/* A group's stream (locked): its members' events so far into its own out, each member's whole
 * (a member writes whole events, so theirs never interleave within one), and once it is over
 * its last events (the usage of all, [DONE]); what members write after that is dropped. */
static void group_gather(srv_job *g)
{
    if (g->done)
        return;
    for (int i = 0; i < g->n_members; i++) {
        srv_job *m = g->members[i];
        if (m->out.len)   /* (out of memory loses events, as srv_send_event's would) */
            strbuf_add(&g->out, m->out.p, m->out.len);
        m->out.len = 0;
    }
    if (group_over(g)) {
        g->res = group_result(g);
        g->wire->end(g);
        g->done = true;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    ssize_t n = MHD_CONTENT_READER_END_OF_STREAM;
    bool here = wait_job(j, has_output);
    if (here && j->members)
        group_gather(j);
    if (!here) {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (j->out.len > j->out_sent) {
        size_t k = j->out.len - j->out_sent;
        if (k > max)
            k = max;
        memcpy(buf, j->out.p + j->out_sent, k);
        j->out_sent += k;
        if (j->out_sent == j->out.len)
            j->out.len = j->out_sent = 0;
        n = (ssize_t)k;
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

static void stream_free(void *cls)
{
    srv_job *j = cls;
    atomic_store(&j->cancelled, true); /* a no-op when it has finished */
    job_unref(j);
}

/* After the whole body: check it, queue the job, and answer when it is done (or, streaming,
 * when it begins). */
/* The body of a generating route, parsed in its API's terms: 0, or -1 with why. */
static int parse_request(srv *s, const conn_ctx *cc, srv_request *r, srv_refusal *why)
{
    const char *body = cc->body.p ? cc->body.p : "";
    switch (cc->route) {
    case R_MESSAGES:
        return srv_anthropic_parse(r, body, cc->body.len, &s->c.defaults, why);
    case R_EMBEDDINGS:
    case R_OLLAMA_EMBED:
        return srv_embed_parse(r, cc->route == R_EMBEDDINGS ? SRV_API_OPENAI : SRV_API_OLLAMA,
                               body, cc->body.len, &s->c.defaults, why);
    case R_OLLAMA_CHAT:
    case R_OLLAMA_GENERATE:
        return srv_ollama_parse(r, cc->route == R_OLLAMA_CHAT ? SRV_CHAT : SRV_COMPLETION, body,
                                cc->body.len, &s->c.defaults, why);
    default:
        return srv_request_parse(r, cc->route == R_CHAT ? SRV_CHAT : SRV_COMPLETION, body,
                                 cc->body.len, &s->c.defaults, why);
    }
}

double srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A request naming another model than this one: 404 in the API's terms. */
static enum MHD_Result unknown_model(srv *s, struct MHD_Connection *c, const conn_ctx *cc,
                                     const char *name)
{
    char msg[300];
    snprintf(msg, sizeof msg, "the model '%.100s' does not exist: this server serves '%.100s' "
             "(GET /v1/models)", name, s->c.model_id);
    return respond_error_code(s, c, cc, 404, "model", "model_not_found", msg);
}

/* A request of several prompts: a member job per prompt (a copy of the request with its own
 * prompt), queued as requests of their own; the group answers with their choices. */
static int make_members(srv_job *g)
{
    g->members = calloc((size_t)g->req.n_prompts, sizeof *g->members);
    if (!g->members)
        return -1;
    for (int i = 0; i < g->req.n_prompts; i++) {
        const srv_input *in = &g->req.prompts[i];
        srv_job *m = calloc(1, sizeof *m);
        if (!m)
            return -1;
        g->members[g->n_members++] = m;
        m->group = g;
        m->index = i;
        m->req = g->req;
        m->req.prompts = NULL;
        m->req.n_prompts = 0;
        m->req.prompt = in->text ? in->text : "";
        m->req.prompt_toks = NULL;
        m->req.n_prompt_toks = 0;
        if (!in->text) {   /* its own copy: the generator may keep a prompt's ids as it likes */
            m->req.prompt_toks = malloc(sizeof *m->req.prompt_toks * (size_t)in->n_toks);
            if (!m->req.prompt_toks)
                return -1;
            memcpy(m->req.prompt_toks, in->toks, sizeof *in->toks * (size_t)in->n_toks);
            m->req.n_prompt_toks = in->n_toks;
        }
        m->serial = g->serial;   /* one answer: its chunks carry the group's id */
        m->created = g->created;
        m->model_id = g->model_id;
        m->wire = g->wire;
        m->t_start = g->t_start;
        m->fd = -1;              /* the connection watches its client through the group */
    }
    return 0;
}

static enum MHD_Result run_request(srv *s, struct MHD_Connection *c, conn_ctx *cc)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return respond_error(s, c, 500, NULL, "out of memory");
    srv_refusal why;
    if (parse_request(s, cc, &j->req, &why)) {
        free(j);
        return respond_error(s, c, 400, why.param, why.message);
    }
    j->wire = srv_wire_of(j->req.api);
    if (j->req.model && !srv_name_matches(&s->c, j->req.model)) {
        enum MHD_Result rc = unknown_model(s, c, cc, j->req.model);
        srv_request_free(&j->req);
        free(j);
        return rc;
    }
    j->t_start = srv_now();
    j->serial = atomic_fetch_add(&s->next_id, 1) + 1;
    j->created = (long long)time(NULL);
    j->model_id = s->c.model_id;
    if (j->req.load_only) {   /* Ollama's "load the model": it is loaded; nothing to generate */
        cJSON *answer = j->wire->answer(j);
        srv_request_free(&j->req);
        free(j);
        return respond_json(s, c, 200, answer);
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->fd = client_fd(c);
    cc->job = j;
    if (j->req.prompts && make_members(j))
        return respond_error(s, c, 500, NULL, "out of memory");
    int busy = submit(s, j);
    if (busy == 429) {
        char msg[128];
        snprintf(msg, sizeof msg, "server busy: %d requests are waiting; retry later",
                 s->c.queue_max);
        return respond_error(s, c, 429, NULL, msg);
    }
    if (busy)
        return respond_error(s, c, busy, NULL, "the server is shutting down");
    pthread_mutex_lock(&j->mu);
    bool here = wait_job(j, j->req.stream ? is_begun_or_done : is_done);
    bool streaming = here && j->req.stream && job_begun(j);
    if (here && !streaming && j->members) {
        j->res = group_result(j);
        j->done = true;
    }
    srv_result res = j->res;
    cJSON *answer = here && !streaming && res.finish != SRV_FINISH_ERROR ? j->wire->answer(j)
                                                                         : NULL;
    pthread_mutex_unlock(&j->mu);
    if (!here)
        return MHD_NO; /* the client left: close */
    if (streaming) {
        job_ref(j);
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, j,
                                              stream_free);
        if (!r) {
            job_unref(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, j->wire->stream_type);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        srv_metrics_status(&s->metrics, 200);
        return queue(s, c, 200, r);
    }
    if (res.finish == SRV_FINISH_ERROR)
        return respond_error_code(s, c, cc, res.status, res.error_param, res.error_code,
                                  res.error);
    if (res.finish == SRV_FINISH_CANCELLED)
        return respond_error(s, c, 503, NULL, "the request was cancelled: the server is stopping");
    return respond_json(s, c, 200, answer);
}

/* POST /apply-template: {"prompt": the text}, rendered on this connection's thread (templates
 * are read-only once parsed; nothing is generated, so the queue is not involved). */
static enum MHD_Result apply_template(srv *s, struct MHD_Connection *c, conn_ctx *cc)
{
    cJSON *vars = cJSON_ParseWithLength(cc->body.p ? cc->body.p : "", cc->body.len);
    if (!cJSON_IsObject(vars)) {
        cJSON_Delete(vars);
        return respond_error(s, c, 400, NULL, "the body is not a JSON object");
    }
    char err[512];
    size_t len = 0;
    char *text = s->e.apply_template(s->e.ctx, vars, &len, err, sizeof err);
    cJSON_Delete(vars);
    if (!text)
        return respond_error(s, c, 400, "messages", err);
    cJSON *answer = cJSON_CreateObject();
    /* cJSON strings end at a NUL: a template that writes one is cut there */
    if (answer && !cJSON_AddStringToObject(answer, "prompt", text)) {
        cJSON_Delete(answer);
        answer = NULL;
    }
    free(text);
    if (!answer)
        return respond_error(s, c, 500, NULL, "out of memory");
    return respond_json(s, c, 200, answer);
}

static void slots_json(srv *s, cJSON *obj)
{
    pthread_mutex_lock(&s->mu);
    cJSON *slots = cJSON_AddObjectToObject(obj, "slots");
    cJSON_AddNumberToObject(slots, "total", s->e.slots);
    cJSON_AddNumberToObject(slots, "busy", s->n_running);
    cJSON_AddNumberToObject(slots, "queued", s->queued);
    cJSON_AddNumberToObject(slots, "queue_max", s->c.queue_max);
    pthread_mutex_unlock(&s->mu);
}

/* POST /api/show: the model's details, in Ollama's terms. */
static enum MHD_Result ollama_show(srv *s, struct MHD_Connection *c, conn_ctx *cc)
{
    cJSON *body = cJSON_ParseWithLength(cc->body.p ? cc->body.p : "", cc->body.len);
    int status = 400;
    char msg[300] = "the body is not a JSON object";
    cJSON *answer = cJSON_IsObject(body) ? srv_ollama_show(&s->c, body, &status, msg, sizeof msg)
                                         : NULL;
    cJSON_Delete(body);
    if (!answer)
        return respond_error(s, c, status, "model", msg);
    return respond_json(s, c, 200, answer);
}

static enum MHD_Result get_route(srv *s, struct MHD_Connection *c, conn_ctx *cc)
{
    enum route r = cc->route;
    if (r == R_MODELS)
        return respond_json(s, c, 200, srv_models_json(s->c.model_id));
    if (r == R_MODEL) {
        if (!srv_name_matches(&s->c, cc->model))
            return unknown_model(s, c, cc, cc->model);
        return respond_json(s, c, 200, srv_model_json(s->c.model_id));
    }
    if (r == R_OLLAMA_TAGS || r == R_OLLAMA_PS)
        return respond_json(s, c, 200, srv_ollama_tags(&s->c, r == R_OLLAMA_PS));
    if (r == R_OLLAMA_VERSION) {
        cJSON *v = cJSON_CreateObject();
        cJSON_AddStringToObject(v, "version", s->c.version ? s->c.version : "0");
        return respond_json(s, c, 200, v);
    }
    if (r == R_PAGE) {
        if (!s->c.page)
            return respond_error(s, c, 404, NULL,
                                 "this prima was built without its web page (Node and the npm "
                                 "packages of web/page were not there at build time)");
        char *page = malloc(s->c.page_len);
        if (!page)
            return respond_error(s, c, 500, NULL, "out of memory");
        memcpy(page, s->c.page, s->c.page_len);
        srv_metrics_status(&s->metrics, 200);
        return respond(s, c, 200, "text/html; charset=utf-8", page, s->c.page_len);
    }
    if (r == R_CLUSTER) {
        cJSON *o = s->e.cluster(s->e.ctx);
        if (!o)
            return respond_error(s, c, 500, NULL, "out of memory");
        cJSON_AddStringToObject(o, "model", s->c.model_id);
        slots_json(s, o);
        srv_metrics_json(&s->metrics, o);
        return respond_json(s, c, 200, o);
    }
    if (r == R_HEALTH) {
        cJSON *h = cJSON_CreateObject();
        bool ok = s->e.health(s->e.ctx, h);
        slots_json(s, h);
        cJSON_AddStringToObject(h, "model", s->c.model_id);
        return respond_json(s, c, ok ? 200 : 503, h);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return respond_error(s, c, 500, NULL, "out of memory");
    pthread_mutex_lock(&s->mu);
    int busy = s->n_running, queued = s->queued;
    pthread_mutex_unlock(&s->mu);
    srv_metrics_write(&s->metrics, f, busy, queued);
    s->e.metrics(s->e.ctx, f);
    fclose(f);
    srv_metrics_status(&s->metrics, 200);
    return respond(s, c, 200, "text/plain; version=0.0.4", text, len);
}

/* The route of a path and method; bad_method: the path is one, with another method. model:
 * the id of GET /v1/models/{id}. */
static enum route find_route(const char *url, const char *method, bool *bad_method,
                             const char **model)
{
    static const struct {
        const char *url, *method;
        enum route r;
    } routes[] = {
        {"/v1/chat/completions", "POST", R_CHAT}, {"/v1/completions", "POST", R_COMPLETION},
        {"/v1/models", "GET", R_MODELS},          {"/health", "GET", R_HEALTH},
        {"/metrics", "GET", R_METRICS},           {"/", "GET", R_PAGE},
        {"/index.html", "GET", R_PAGE},           {"/cluster", "GET", R_CLUSTER},
        {"/apply-template", "POST", R_TEMPLATE},  {"/v1/messages", "POST", R_MESSAGES},
        {"/api/chat", "POST", R_OLLAMA_CHAT},     {"/api/generate", "POST", R_OLLAMA_GENERATE},
        {"/api/show", "POST", R_OLLAMA_SHOW},     {"/api/tags", "GET", R_OLLAMA_TAGS},
        {"/api/ps", "GET", R_OLLAMA_PS},          {"/api/version", "GET", R_OLLAMA_VERSION},
        {"/v1/embeddings", "POST", R_EMBEDDINGS}, {"/api/embed", "POST", R_OLLAMA_EMBED},
    };
    *bad_method = false;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        *model = url + 11;
        *bad_method = strcmp(method, "GET") != 0;
        return *bad_method ? R_NONE : R_MODEL;
    }
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].url)) {
            if (!strcmp(method, routes[i].method))
                return routes[i].r;
            *bad_method = true;
        }
    return R_NONE;
}

/* Compares in time independent of where the strings differ. */
static bool key_matches(const char *given, const char *key)
{
    size_t n = strlen(key);
    if (strlen(given) != n)
        return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(given[i] ^ key[i]);
    return diff == 0;
}

/* The key as "Authorization: Bearer KEY" (OpenAI's, Ollama's clients) or "x-api-key: KEY"
 * (Anthropic's). */
static bool authorized(const srv *s, struct MHD_Connection *c)
{
    if (!s->c.api_key)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    return (h && !strncmp(h, "Bearer ", 7) && key_matches(h + 7, s->c.api_key)) ||
           (x && key_matches(x, s->c.api_key));
}

/* An answer to a CORS preflight (OPTIONS): what a page of an allowed origin may send. */
static enum MHD_Result preflight(srv *s, struct MHD_Connection *c)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, POST, OPTIONS");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_METHODS, "GET, POST, OPTIONS");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_HEADERS,
                            "Authorization, Content-Type, x-api-key, anthropic-version");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_MAX_AGE, "600");
    srv_metrics_status(&s->metrics, 204);
    return queue(s, c, 204, r);
}

/* Whether a browser on another website may have sent this request (guard.c): 0, or the status
 * of the refusal with its message. */
static int foreign(const srv *s, struct MHD_Connection *c, const char *authority, char *msg,
                   size_t cap)
{
    const char *host = authority[0] ? authority
                       : MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    /* (an HTTP/1.0 request may name no host; no browser sends one) */
    if (host && !srv_host_allowed(&s->c, host)) {
        snprintf(msg, cap, "Host %.100s is not a name of this server (it answers to its "
                 "addresses, localhost and its own names; or to any name with an API key)", host);
        return 403;
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
    if (srv_origin_check(&s->c, origin, host) == SRV_ORIGIN_REFUSED) {
        snprintf(msg, cap, "requests from pages of %.100s are not allowed: it is not one of the "
                 "origins this server allows", origin);
        return 403;
    }
    return 0;
}

/* The first call of a request: route, authenticate, answer GETs, refuse announced huge bodies. */
static enum MHD_Result first_call(srv *s, struct MHD_Connection *c, conn_ctx *cc,
                                  const char *url, const char *method)
{
    char authority[256], msg[300];
    const char *path = srv_origin_form(url, authority, sizeof authority);
    cc->api = api_of_path(path);
    unsigned open = srv_conns_open_before(s->conns, c);
    if (open >= (unsigned)s->c.max_connections) {
        snprintf(msg, sizeof msg, "server busy: %u connections are open, the limit is %d; retry "
                 "later", open + 1, s->c.max_connections);
        return respond_error(s, c, 503, NULL, msg);
    }
    /* Both at once make the body's end a matter of opinion (request smuggling): RFC 9112 6.3
     * lets a server refuse, and it then closes the connection. */
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return respond_error(s, c, 400, NULL, "a request with both Content-Length and "
                             "Transfer-Encoding: its body's end is ambiguous");
    int refused = foreign(s, c, authority, msg, sizeof msg);
    if (refused)
        return respond_error(s, c, refused, NULL, msg);
    bool bad_method;
    const char *model = NULL;
    cc->route = find_route(path, method, &bad_method, &model);
    if (model)
        snprintf(cc->model, sizeof cc->model, "%s", model);
    if (cc->route == R_NONE && bad_method && !strcmp(method, MHD_HTTP_METHOD_OPTIONS))
        return preflight(s, c);
    if (cc->route == R_NONE) {
        snprintf(msg, sizeof msg, bad_method ? "%s is not allowed on %.100s" : "%s %.100s: no such endpoint",
                 method, path);
        return respond_error(s, c, bad_method ? 405 : 404, NULL, msg);
    }
    if (cc->route != R_HEALTH && cc->route != R_PAGE && !authorized(s, c))
        return respond_error(s, c, 401, NULL, "missing or wrong API key (send "
                             "Authorization: Bearer KEY, or x-api-key: KEY)");
    /* A GET is answered at the next call, once libmicrohttpd has the whole request: an answer
     * queued now would close the connection, and the page polls /cluster every second. */
    if (!posts_json(cc->route))
        return MHD_YES;
    /* A page on another website can send a text/plain POST without asking; JSON only after a
     * CORS preflight, which this server answers for the origins it allows. */
    const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!srv_json_type(type)) {
        snprintf(msg, sizeof msg, "the body must be JSON, sent as Content-Type: application/json "
                 "(not %.100s)", type ? type : "none");
        return respond_error(s, c, 415, NULL, msg);
    }
    if (cl && strtoull(cl, NULL, 10) > s->c.max_body)
        cc->too_big = true;
    return MHD_YES;
}

static void too_big_message(const srv *s, char *msg, size_t cap)
{
    snprintf(msg, cap, "the request body is larger than %zu bytes", s->c.max_body);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **con_cls)
{
    (void)version;
    srv *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc)
            return MHD_NO;
        *con_cls = cc;
        enum MHD_Result rc = first_call(s, c, cc, url, method);
        if (rc != MHD_YES || !cc->too_big)
            return rc;
        char msg[96];
        too_big_message(s, msg, sizeof msg);
        return respond_error(s, c, 413, NULL, msg);
    }
    if (*size) {
        if (!cc->too_big && cc->body.len + *size > s->c.max_body)
            cc->too_big = true;
        if (!cc->too_big && strbuf_add(&cc->body, data, *size))
            return MHD_NO;
        *size = 0;
        return MHD_YES;
    }
    srv_conns_deadline(s->conns, c, false);   /* the request is whole */
    if (!posts_json(cc->route))
        return get_route(s, c, cc);
    if (cc->too_big) {
        char msg[96];
        too_big_message(s, msg, sizeof msg);
        return respond_error(s, c, 413, NULL, msg);
    }
    if (cc->route == R_TEMPLATE)
        return apply_template(s, c, cc);
    if (cc->route == R_OLLAMA_SHOW)
        return ollama_show(s, c, cc);
    if ((cc->route == R_EMBEDDINGS || cc->route == R_OLLAMA_EMBED) && !s->c.embeddings) {
        char msg[256];
        snprintf(msg, sizeof msg, "embeddings are not enabled on this server%s%s",
                 s->c.embeddings_how ? ": " : "", s->c.embeddings_how ? s->c.embeddings_how : "");
        return respond_error(s, c, 501, NULL, msg);
    }
    return run_request(s, c, cc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    srv *s = cls;
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)   /* the next request's time starts */
        srv_conns_deadline(s->conns, c, true);
    conn_ctx *cc = *con_cls;
    if (!cc)
        return;
    if (cc->job) {
        atomic_store(&cc->job->cancelled, true);
        job_unref(cc->job);
    }
    free(cc->body.p);
    free(cc);
    *con_cls = NULL;
}

srv *srv_start(const srv_config *c, const srv_engine *e, char *err, size_t errlen)
{
    srv *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->c = *c;
    s->e = *e;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    srv_metrics_init(&s->metrics);
    int request_s = c->request_s ? (int)c->request_s : REQUEST_S;
    s->conns = srv_conns_listen(c->host, c->port, c->max_connections, SPARE_CONNECTIONS,
                                request_s * 1000, err, errlen);
    if (!s->conns) {
        srv_stop(s);
        return NULL;
    }
    if (pthread_create(&s->engine_thread, NULL, engine_main, s)) {
        snprintf(err, errlen, "cannot start the engine thread");
        srv_stop(s);
        return NULL;
    }
    s->engine_started = true;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            /* above the accept loop's own bound: libmicrohttpd counts a
                             * connection a little longer than the loop does */
                            MHD_OPTION_CONNECTION_LIMIT,
                            2 * ((unsigned)c->max_connections + SPARE_CONNECTIONS),
                            MHD_OPTION_CONNECTION_TIMEOUT, c->timeout_s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, srv_conns_notify, s->conns,
                            MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, errlen, "cannot start the HTTP daemon");
        srv_stop(s);
        return NULL;
    }
    if (srv_conns_run(s->conns, s->d, err, errlen)) {
        srv_stop(s);
        return NULL;
    }
    return s;
}

int srv_port(const srv *s)
{
    return srv_conns_port(s->conns);
}

void srv_stop(srv *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (srv_job *j = s->head; j; j = j->next)
        atomic_store(&j->cancelled, true);
    for (srv_job *j = s->running; j; j = j->next)
        atomic_store(&j->cancelled, true);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->engine_started)
        pthread_join(s->engine_thread, NULL);
    srv_conns_stop(s->conns);
    if (s->d)
        MHD_stop_daemon(s->d);
    srv_conns_free(s->conns);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    srv_metrics_free(&s->metrics);
    free(s);
}
