/* internal.h — what server.c, openai.c and metrics.c share: a job's state, and the functions
 * that turn it into OpenAI's JSON and server-sent events and count it. */
#ifndef PRIMA_SRV_INTERNAL_H
#define PRIMA_SRV_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "server/server.h"
#include "text/toolcall.h"
#include "util/strbuf.h"

typedef struct cJSON cJSON;

struct srv_job {
    srv_request req;
    uint64_t serial;
    long long created;            /* Unix time, for the answer */
    const char *model_id;
    int fd;                       /* the client's socket: polled by its connection thread only */
    atomic_bool cancelled;
    srv_job *next;                /* in the queue */
    pthread_mutex_t mu;           /* everything below */
    pthread_cond_t cv;
    int refs;
    bool begun, done;
    srv_result res;
    strbuf text;                 /* not streaming: the answer so far */
    strbuf out;                  /* streaming: event bytes not yet sent from out_sent on */
    size_t out_sent;
    size_t text_offset;           /* bytes of the token pieces so far (completions' text_offset) */
    cJSON *lp;                    /* log-probabilities not yet sent, in the endpoint's format */
    bool parse;                   /* the reply is read for tool calls and reasoning: */
    enum tool_format tool_fmt;
    bool think;                   /* (it starts inside reasoning) */
    tool_parser *tp;              /* streaming: the reading so far */
    int n_calls;                  /* calls sent (streaming) or found (not) */
};

/* openai.c. Length of the valid UTF-8 sequence (RFC 3629) at s (at most n bytes), or 0. */
size_t srv_utf8_seq(const unsigned char *s, size_t n);
/* The job is locked. */
void srv_sse_begin(srv_job *j);
void srv_sse_text(srv_job *j, const char *text, size_t len);
void srv_sse_end(srv_job *j);
/* Streaming a parsed reply: what became certain (content, reasoning, calls). */
void srv_sse_delta(srv_job *j, const tool_delta *d);
void srv_logprob_add(srv_job *j, const srv_token_prob *tok, const srv_token_prob *top, int n_top);
cJSON *srv_answer_json(srv_job *j);
cJSON *srv_error_json(int status, const char *param, const char *message);
cJSON *srv_models_json(const char *model_id);

/* guard.c: which requests a browser may make (see there). */
/* The path of a request target, past an absolute form's "http://authority" (RFC 9112 3.2.2),
 * whose authority goes to authority (else ""). */
const char *srv_origin_form(const char *url, char *authority, size_t cap);
/* Whether a request naming this authority (its Host) is for this server. */
bool srv_host_allowed(const srv_config *c, const char *authority);
enum srv_origin { SRV_ORIGIN_SAME, SRV_ORIGIN_ALLOWED, SRV_ORIGIN_REFUSED };
/* A request's Origin header (NULL: none) against the server's own (host: its Host). */
enum srv_origin srv_origin_check(const srv_config *c, const char *origin, const char *host);
/* Whether a Content-Type is application/json (parameters allowed). */
bool srv_json_type(const char *content_type);

/* conns.c: the accept loop, the count of open connections and the request deadline. */
typedef struct srv_conns srv_conns;
/* Listen on host:port; limit + spare connections are let in, the others reset at once. A request
 * must arrive whole within request_ms of its connection's start or of the previous answer. */
srv_conns *srv_conns_listen(const char *host, int port, int limit, int spare, int request_ms,
                            char *err, size_t errlen);
/* Start accepting into d (started with MHD_USE_NO_LISTEN_SOCKET and srv_conns_notify). */
int srv_conns_run(srv_conns *cs, struct MHD_Daemon *d, char *err, size_t errlen);
int srv_conns_port(const srv_conns *cs);
/* The connections open when c came (not counting c). */
unsigned srv_conns_open_before(srv_conns *cs, struct MHD_Connection *c);
/* Stop accepting (before the daemon stops); free (after). */
void srv_conns_stop(srv_conns *cs);
void srv_conns_free(srv_conns *cs);
/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback, cls the srv_conns. */
void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode code);
/* The connection's request deadline: armed (an answer is done: the next request's starts) or
 * not (a request arrived whole and is being answered). */
void srv_conns_deadline(srv_conns *cs, struct MHD_Connection *c, bool arm);

/* metrics.c */
#define SRV_HIST_BUCKETS 12
typedef struct srv_hist {
    uint64_t count[SRV_HIST_BUCKETS + 1];   /* the last: +Inf */
    double sum;
} srv_hist;

typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t by_status[5];                  /* 2xx..5xx, other */
    uint64_t requests[2], finished[4];      /* by endpoint, by finish */
    uint64_t prompt_tokens, cached_tokens, completion_tokens;
    srv_hist tpot, prefill;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_free(srv_metrics *m);
void srv_metrics_status(srv_metrics *m, int status);
void srv_metrics_job(srv_metrics *m, const srv_request *req, const srv_result *res);
void srv_metrics_write(srv_metrics *m, FILE *f, int busy, int queued);
/* Request and token totals of the finished requests, added to obj (a cJSON object). */
void srv_metrics_json(srv_metrics *m, cJSON *obj);

#endif
