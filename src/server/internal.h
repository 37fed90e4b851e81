/* internal.h — what the server's files share: a job's state, the wire formats that turn it into
 * an API's JSON, server-sent events or NDJSON (openai.c, ollama.c, anthropic.c), the parsing
 * helpers of the APIs' requests (request.c), and the counters (metrics.c). */
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
typedef struct srv_wire srv_wire;

struct srv_job {
    srv_request req;
    uint64_t serial;
    long long created;            /* Unix time, for the answer */
    const char *model_id;
    const srv_wire *wire;         /* the API it came in */
    double t_start;               /* CLOCK_MONOTONIC seconds when it arrived */
    int prompt_tokens;            /* as srv_job_begin says */
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
    strbuf reasoning;             /* not streaming: the reasoning so far */
    cJSON *calls;                 /* the tool calls so far: [{id, name, arguments}] */
    int block, n_blocks;          /* Anthropic streams: the open content block's kind (0: none,
                                   * 1: text, 2: thinking) and the blocks begun */
    cJSON *lp;                    /* log-probabilities not yet sent, in the endpoint's format */
    bool parse;                   /* the reply is read for tool calls and reasoning: */
    enum tool_format tool_fmt;
    bool think;                   /* (it starts inside reasoning) */
    tool_parser *tp;              /* streaming: the reading so far */
    float *emb;                   /* embeddings: n_inputs x emb_dim */
    int emb_dim;
    /* A completions request of several prompts is a group: a job the connection waits on,
     * never queued, whose members (one per prompt, queued as requests of their own) are its
     * choices. A member is under its group's lock and references (mu, cv and refs are the
     * group's), so the connection waits on one condition for all of them, and lives as long as
     * its group. */
    srv_job *group;               /* a member: its group; NULL otherwise */
    int index;                    /* a member: its choice's index (0 otherwise) */
    srv_job **members;            /* a group: its n_members members, by index */
    int n_members;
    srv_job *failed;              /* a group: the first member that ended in an error */
};

/* An API's wire format. The stream calls append to the job's out (the job is locked). */
struct srv_wire {
    const char *stream_type;      /* the Content-Type of a stream */
    void (*begin)(srv_job *j);
    void (*text)(srv_job *j, const char *text, size_t len);
    void (*reasoning)(srv_job *j, const char *text, size_t len);
    void (*tool_call)(srv_job *j, const cJSON *call);   /* {id, name, arguments}, streaming */
    void (*end)(srv_job *j);      /* the last events: j->res says how it ended */
    cJSON *(*answer)(srv_job *j); /* the whole answer, not streaming */
    /* An error object: status, the field it is about (or NULL), a code (or NULL). */
    cJSON *(*error)(int status, const char *param, const char *code, const char *message);
};
extern const srv_wire srv_openai_wire, srv_ollama_wire, srv_anthropic_wire;
const srv_wire *srv_wire_of(enum srv_api api);

/* server.c: CLOCK_MONOTONIC in seconds. */
double srv_now(void);
/* A call's arguments (JSON text) as an object; {} when they do not parse as one. */
cJSON *srv_call_arguments(const cJSON *call);

/* openai.c. Length of the valid UTF-8 sequence (RFC 3629) at s (at most n bytes), or 0. */
size_t srv_utf8_seq(const unsigned char *s, size_t n);
/* A JSON string of the bytes: invalid UTF-8 as U+FFFD, a NUL kept as \u0000. */
cJSON *srv_utf8_string(const char *p, size_t n);
void srv_logprob_add(srv_job *j, const srv_token_prob *tok, const srv_token_prob *top, int n_top);
/* One server-sent event (event: NULL for none) of obj, deleted, appended to the job's out. */
void srv_send_event(srv_job *j, const char *event, cJSON *obj);
cJSON *srv_error_json(int status, const char *param, const char *message);
cJSON *srv_models_json(const char *model_id);
cJSON *srv_model_json(const char *model_id);

/* request.c: reading a body and the helpers every API's parser uses (request.h's rules). The
 * body's JSON object, kept in r (NULL: refused, r freed); r starts from the defaults. */
cJSON *srv_request_json(srv_request *r, enum srv_endpoint kind, const char *body, size_t len,
                        const sampler_params *defaults, srv_refusal *why);
int srv_refuse(srv_refusal *why, const char *param, const char *message);
/* A member that is absent or null is not given (NULL). */
const cJSON *srv_field(const cJSON *obj, const char *name);
/* 1 given, 0 not, -1 refused (name is the field's name in messages and param). */
int srv_get_int(const cJSON *obj, const char *name, double lo, double hi, double *out,
                srv_refusal *why);
/* 0 (given or not), -1 refused. */
int srv_get_float(const cJSON *obj, const char *name, double lo, double hi, float *dst,
                  srv_refusal *why);
int srv_get_bool(const cJSON *obj, const char *name, bool *dst, srv_refusal *why);
/* An array of up to SRV_MAX_STOP strings into r->stop. */
int srv_parse_stop(srv_request *r, const cJSON *obj, const char *name, srv_refusal *why);
/* A seed; a negative one (Ollama's "any") is not a choice. */
int srv_parse_seed(srv_request *r, const cJSON *obj, srv_refusal *why);
/* text (malloc'd) is freed with r; NULL when text is NULL or memory ran out. */
char *srv_keep(srv_request *r, char *text);
/* OpenAI's "tools", "tool_choice" and "parallel_tool_calls" members of obj into r (the other
 * APIs give theirs in these terms). */
int srv_parse_tools(srv_request *r, const cJSON *obj, srv_refusal *why);
/* An assistant's tool calls ({id?, function: {name, arguments: JSON text or object}}) as the
 * chat template sees them (arguments as objects); message `at` names it in a refusal. */
cJSON *srv_template_calls(const cJSON *calls, int at, srv_refusal *why);
/* The function name of the call with this id in the template's messages so far, or NULL. */
const char *srv_call_name(const cJSON *tmsgs, const char *id);

/* embed.c: an embeddings answer, in the job's API's terms. */
cJSON *srv_embed_answer(srv_job *j);

/* ollama.c: the model views, and names: whether name is one of the served model's (as Ollama
 * names it, ":latest" may follow). */
bool srv_name_matches(const srv_config *c, const char *name);
cJSON *srv_ollama_tags(const srv_config *c, bool running);
/* /api/show of body (a JSON object naming the model); NULL with *status (400 or 404) and msg. */
cJSON *srv_ollama_show(const srv_config *c, const cJSON *body, int *status, char *msg,
                       size_t cap);
/* RFC 3339 UTC with nanoseconds, as Ollama writes created_at. */
void srv_ollama_time(char *buf, size_t cap);

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
    uint64_t requests[3], finished[4];      /* by endpoint, by finish */
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
