/* metrics.c — the server's counters in Prometheus' text format. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "server/internal.h"

/* Upper bounds (seconds): time per output token, and prefill time. */
static const double tpot_le[SRV_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                 0.1,   0.25,   0.5,   1,    2.5,   5};
static const double prefill_le[SRV_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                    0.5,   1,    2.5,   5,    10,  30};

void srv_metrics_init(srv_metrics *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_free(srv_metrics *m)
{
    pthread_mutex_destroy(&m->mu);
}

void srv_metrics_status(srv_metrics *m, int status)
{
    int k = status >= 200 && status < 600 ? status / 100 - 2 : 4;
    pthread_mutex_lock(&m->mu);
    m->by_status[k]++;
    pthread_mutex_unlock(&m->mu);
}

static void hist_add(srv_hist *h, const double *le, double v)
{
    int i = 0;
    while (i < SRV_HIST_BUCKETS && v > le[i])
        i++;
    h->count[i]++;
    h->sum += v;
}

void srv_metrics_job(srv_metrics *m, const srv_request *req, const srv_result *res)
{
    pthread_mutex_lock(&m->mu);
    m->requests[req->kind]++;
    m->finished[res->finish]++;
    m->prompt_tokens += (uint64_t)res->prompt_tokens;
    m->cached_tokens += (uint64_t)res->cached_tokens;
    m->completion_tokens += (uint64_t)res->completion_tokens;
    if (res->completion_tokens > 0)
        hist_add(&m->tpot, tpot_le, res->decode_s / res->completion_tokens);
    if (res->prompt_tokens > res->cached_tokens)
        hist_add(&m->prefill, prefill_le, res->prefill_s);
    pthread_mutex_unlock(&m->mu);
}

static void hist_write(FILE *f, const char *name, const char *help, const srv_hist *h,
                       const double *le)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i <= SRV_HIST_BUCKETS; i++) {
        cum += h->count[i];
        if (i < SRV_HIST_BUCKETS)
            fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, le[i], (unsigned long long)cum);
        else
            fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    fprintf(f, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)cum);
}

static void counter(FILE *f, const char *name, const char *help, unsigned long long v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, v);
}

void srv_metrics_write(srv_metrics *m, FILE *f, int busy, int queued)
{
    pthread_mutex_lock(&m->mu);
    srv_metrics c = *m;
    pthread_mutex_unlock(&m->mu);
    fputs("# HELP prima_http_responses_total HTTP responses by status class\n"
          "# TYPE prima_http_responses_total counter\n",
          f);
    static const char *const classes[] = {"2xx", "3xx", "4xx", "5xx", "other"};
    for (int i = 0; i < 5; i++)
        fprintf(f, "prima_http_responses_total{code=\"%s\"} %llu\n", classes[i],
                (unsigned long long)c.by_status[i]);
    fputs("# HELP prima_requests_total generation requests by endpoint\n"
          "# TYPE prima_requests_total counter\n",
          f);
    fprintf(f, "prima_requests_total{endpoint=\"chat\"} %llu\n",
            (unsigned long long)c.requests[SRV_CHAT]);
    fprintf(f, "prima_requests_total{endpoint=\"completions\"} %llu\n",
            (unsigned long long)c.requests[SRV_COMPLETION]);
    fprintf(f, "prima_requests_total{endpoint=\"embeddings\"} %llu\n",
            (unsigned long long)c.requests[SRV_EMBED]);
    fputs("# HELP prima_requests_finished_total generation requests by how they ended\n"
          "# TYPE prima_requests_finished_total counter\n",
          f);
    static const char *const ends[] = {"stop", "length", "cancelled", "error"};
    for (int i = 0; i < 4; i++)
        fprintf(f, "prima_requests_finished_total{reason=\"%s\"} %llu\n", ends[i],
                (unsigned long long)c.finished[i]);
    counter(f, "prima_prompt_tokens_total", "prompt tokens of the requests", c.prompt_tokens);
    counter(f, "prima_prompt_tokens_cached_total", "prompt tokens found in the cache",
            c.cached_tokens);
    counter(f, "prima_generated_tokens_total", "tokens generated", c.completion_tokens);
    hist_write(f, "prima_tpot_seconds", "time per output token of each request", &c.tpot,
               tpot_le);
    hist_write(f, "prima_prefill_seconds", "prompt evaluation time of each request", &c.prefill,
               prefill_le);
    fprintf(f, "# HELP prima_slots_busy sequences being generated\n# TYPE prima_slots_busy gauge\n"
               "prima_slots_busy %d\n",
            busy);
    fprintf(f, "# HELP prima_queue_length requests waiting\n# TYPE prima_queue_length gauge\n"
               "prima_queue_length %d\n",
            queued);
}

void srv_metrics_json(srv_metrics *m, cJSON *obj)
{
    pthread_mutex_lock(&m->mu);
    srv_metrics c = *m;
    pthread_mutex_unlock(&m->mu);
    cJSON_AddNumberToObject(obj, "requests",
                            (double)(c.requests[0] + c.requests[1] + c.requests[2]));
    cJSON_AddNumberToObject(obj, "prompt_tokens", (double)c.prompt_tokens);
    cJSON_AddNumberToObject(obj, "completion_tokens", (double)c.completion_tokens);
}
