/* server.c — connections, the queue and the engine thread; the OpenAI wire format is in
 * openai.c and the counters in metrics.c. */
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

static void job_unref(srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left)
        return;
    srv_request_free(&j->req);
    cJSON_Delete(j->lp);
    tool_parser_free(j->tp);
    free(j->out.p);
    free(j->text.p);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static void job_ref(srv_job *j)
{
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
    return atomic_load(&j->cancelled);
}

void srv_job_begin(srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->begun = true;
    if (j->req.stream)
        srv_sse_begin(j);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_parse_reply(srv_job *j, enum tool_format f, bool think)
{
    pthread_mutex_lock(&j->mu);
    j->parse = true;
    j->tool_fmt = f;
    j->think = think;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_text(srv_job *j, const char *text, size_t len)
{
    if (!len)
        return;
    pthread_mutex_lock(&j->mu);
    if (j->req.stream && j->parse) {
        tool_delta d;
        if (!j->tp)
            j->tp = tool_parser_new(j->tool_fmt, j->think);
        if (j->tp && !tool_parser_feed(j->tp, text, len, &d))
            srv_sse_delta(j, &d);
        pthread_cond_broadcast(&j->cv);
    } else if (j->req.stream) {
        srv_sse_text(j, text, len);
        pthread_cond_broadcast(&j->cv); /* the connection sends it; otherwise it waits for the end */
    } else {
        strbuf_add(&j->text, text, len);
    }
    pthread_mutex_unlock(&j->mu);
}

void srv_job_logprob(srv_job *j, const srv_token_prob *tok, const srv_token_prob *top, int n_top)
{
    pthread_mutex_lock(&j->mu);
    srv_logprob_add(j, tok, top, n_top);
    pthread_mutex_unlock(&j->mu);
}

/* The end of a job: the last chunk or the whole answer, then done. */
static void job_end(srv *s, srv_job *j, const srv_result *res)
{
    pthread_mutex_lock(&j->mu);
    j->res = *res;
    tool_delta d;
    if (j->req.stream && j->begun && j->tp && res->finish != SRV_FINISH_ERROR &&
        !tool_parser_finish(j->tp, &d))
        srv_sse_delta(j, &d);
    if (j->req.stream && j->begun)
        srv_sse_end(j);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    srv_metrics_job(&s->metrics, &j->req, res);
    if (s->c.log) {
        static const char *const ends[] = {"stop", "length", "cancelled", "error"};
        if (res->finish == SRV_FINISH_ERROR)
            fprintf(s->c.log, "prima: request %llu: %d %s\n", (unsigned long long)j->serial,
                    res->status, res->error);
        else
            fprintf(s->c.log,
                    "prima: request %llu: %d prompt tokens (%d cached) in %.3f s, %d generated "
                    "in %.3f s, %s\n",
                    (unsigned long long)j->serial, res->prompt_tokens, res->cached_tokens,
                    res->prefill_s, res->completion_tokens, res->decode_s, ends[res->finish]);
        fflush(s->c.log);
    }
    job_unref(j);
}

/* ---- the queue and the engine thread ---------------------------------------------------- */

/* 0 queued, or the HTTP status of the refusal. */
static int submit(srv *s, srv_job *j)
{
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->stopping)
        rc = 503;
    else if (s->queued + s->n_running >= s->c.queue_max + s->e.slots)
        rc = 429; /* every slot busy, and queue_max waiting */
    if (!rc) {
        job_ref(j);
        j->next = NULL;
        if (s->tail)
            s->tail->next = j;
        else
            s->head = j;
        s->tail = j;
        s->queued++;
        pthread_cond_signal(&s->cv);
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

enum route { R_NONE, R_CHAT, R_COMPLETION, R_MODELS, R_HEALTH, R_METRICS, R_PAGE, R_CLUSTER,
             R_TEMPLATE };

/* The routes that take a JSON body (the others are GETs). */
static bool posts_json(enum route r)
{
    return r == R_CHAT || r == R_COMPLETION || r == R_TEMPLATE;
}

typedef struct conn_ctx {
    enum route route;
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

static enum MHD_Result respond_error(srv *s, struct MHD_Connection *c, int status,
                                     const char *param, const char *message)
{
    return respond_json(s, c, status, srv_error_json(status, param, message));
}

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

static bool is_done(const srv_job *j)
{
    return j->done;
}

static bool is_begun_or_done(const srv_job *j)
{
    return j->begun || j->done;
}

static bool has_output(const srv_job *j)
{
    return j->out.len > j->out_sent || j->done;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    ssize_t n = MHD_CONTENT_READER_END_OF_STREAM;
    if (!wait_job(j, has_output)) {
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
static enum MHD_Result run_request(srv *s, struct MHD_Connection *c, conn_ctx *cc)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return respond_error(s, c, 500, NULL, "out of memory");
    srv_refusal why;
    enum srv_endpoint kind = cc->route == R_CHAT ? SRV_CHAT : SRV_COMPLETION;
    if (srv_request_parse(&j->req, kind, cc->body.p ? cc->body.p : "", cc->body.len,
                          &s->c.defaults, &why)) {
        free(j);
        return respond_error(s, c, 400, why.param, why.message);
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->fd = client_fd(c);
    j->serial = atomic_fetch_add(&s->next_id, 1) + 1;
    j->created = (long long)time(NULL);
    j->model_id = s->c.model_id;
    cc->job = j;
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
    bool streaming = here && j->req.stream && j->begun;
    srv_result res = j->res;
    cJSON *answer = here && !streaming && res.finish != SRV_FINISH_ERROR ? srv_answer_json(j)
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
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        srv_metrics_status(&s->metrics, 200);
        return queue(s, c, 200, r);
    }
    if (res.finish == SRV_FINISH_ERROR)
        return respond_error(s, c, res.status, res.error_param, res.error);
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

static enum MHD_Result get_route(srv *s, struct MHD_Connection *c, enum route r)
{
    if (r == R_MODELS)
        return respond_json(s, c, 200, srv_models_json(s->c.model_id));
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

static enum route find_route(const char *url, const char *method, bool *bad_method)
{
    static const struct {
        const char *url, *method;
        enum route r;
    } routes[] = {
        {"/v1/chat/completions", "POST", R_CHAT}, {"/v1/completions", "POST", R_COMPLETION},
        {"/v1/models", "GET", R_MODELS},          {"/health", "GET", R_HEALTH},
        {"/metrics", "GET", R_METRICS},           {"/", "GET", R_PAGE},
        {"/index.html", "GET", R_PAGE},           {"/cluster", "GET", R_CLUSTER},
        {"/apply-template", "POST", R_TEMPLATE},
    };
    *bad_method = false;
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

static bool authorized(const srv *s, struct MHD_Connection *c)
{
    if (!s->c.api_key)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return h && !strncmp(h, "Bearer ", 7) && key_matches(h + 7, s->c.api_key);
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
                            "Authorization, Content-Type");
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
    unsigned open = srv_conns_open_before(s->conns, c);
    if (open >= (unsigned)s->c.max_connections) {
        char msg[128];
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
    char authority[256], msg[300];
    const char *path = srv_origin_form(url, authority, sizeof authority);
    int refused = foreign(s, c, authority, msg, sizeof msg);
    if (refused)
        return respond_error(s, c, refused, NULL, msg);
    bool bad_method;
    cc->route = find_route(path, method, &bad_method);
    if (cc->route == R_NONE && bad_method && !strcmp(method, MHD_HTTP_METHOD_OPTIONS))
        return preflight(s, c);
    if (cc->route == R_NONE) {
        snprintf(msg, sizeof msg, bad_method ? "%s is not allowed on %.100s" : "%s %.100s: no such endpoint",
                 method, path);
        return respond_error(s, c, bad_method ? 405 : 404, NULL, msg);
    }
    if (cc->route != R_HEALTH && cc->route != R_PAGE && !authorized(s, c))
        return respond_error(s, c, 401, NULL,
                             "missing or wrong API key (send Authorization: Bearer KEY)");
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
        return get_route(s, c, cc->route);
    if (cc->too_big) {
        char msg[96];
        too_big_message(s, msg, sizeof msg);
        return respond_error(s, c, 413, NULL, msg);
    }
    if (cc->route == R_TEMPLATE)
        return apply_template(s, c, cc);
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
