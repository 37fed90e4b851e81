/* internal.h — what server.c, openai.c and metrics.c share: a job's state, and the functions
 * that turn it into OpenAI's JSON and server-sent events and count it. */
#ifndef PRIMA_SRV_INTERNAL_H
#define PRIMA_SRV_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "server/server.h"
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
};

/* openai.c; the job is locked. */
void srv_sse_begin(srv_job *j);
void srv_sse_text(srv_job *j, const char *text, size_t len);
void srv_sse_end(srv_job *j);
void srv_logprob_add(srv_job *j, const srv_token_prob *tok, const srv_token_prob *top, int n_top);
cJSON *srv_answer_json(srv_job *j);
cJSON *srv_error_json(int status, const char *param, const char *message);
cJSON *srv_models_json(const char *model_id);

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
