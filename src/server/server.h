/* server.h — an HTTP server in front of one text generator, speaking three APIs.
 *
 *   OpenAI:    POST /v1/chat/completions, /v1/completions (stream: true as server-sent events),
 *              GET /v1/models, GET /v1/models/{id}
 *   Ollama:    POST /api/chat, /api/generate (NDJSON streams), /api/show;
 *              GET /api/tags, /api/ps, /api/version
 *   Anthropic: POST /v1/messages (its server-sent events)
 *   GET /health, GET /metrics (Prometheus text), GET / (a web page: chat and a cluster view),
 *   GET /cluster (the JSON the page polls), POST /apply-template
 *
 * libmicrohttpd serves every connection on its own thread, up to a bound; a request is read
 * (at most max_body bytes), checked (request.h) and queued; one engine thread runs the
 * generator (srv_engine.serve), which takes the queued requests in order, runs several at once
 * (its slots) and reports what each produces through the srv_job calls below. A full queue
 * answers 429. A client that
 * goes away has its job cancelled: srv_job_cancelled turns true within a poll interval, and a
 * generator that checks it once per token stops within one token.
 *
 * The server speaks HTTP and JSON; the generator speaks tokens and text. */
#ifndef PRIMA_SERVER_H
#define PRIMA_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "model/sample.h"
#include "server/request.h"
#include "text/toolcall.h"

typedef struct srv srv;
typedef struct srv_job srv_job;

/* How a job ended, as the generator reports it. */
enum srv_finish {
    SRV_FINISH_STOP,      /* an end-of-generation token or a stop string */
    SRV_FINISH_LENGTH,    /* max_tokens, or a full context */
    SRV_FINISH_CANCELLED, /* the client went away */
    SRV_FINISH_ERROR,     /* status and error say why */
};

typedef struct srv_result {
    enum srv_finish finish;
    int status;                  /* SRV_FINISH_ERROR: 400 for the request, 500 for the server */
    const char *error_param;     /* the request field a 400 is about, or NULL */
    const char *error_code;      /* a machine-readable reason ("context_length_exceeded"), or
                                  * NULL */
    char error[512];
    const char *stop_sequence;   /* the request's stop string that ended it, or NULL */
    int prompt_tokens, cached_tokens, completion_tokens;
    double prefill_s, decode_s;  /* time in the prompt, and in the generated tokens */
} srv_result;

/* The generator. serve is the engine thread's body: it takes the queued jobs (srv_take), runs
 * up to `slots` of them at once and finishes each (srv_job_finish), until srv_take says the
 * server is stopping. health, metrics and cluster are called from connection threads at any
 * time. */
typedef struct srv_engine {
    void *ctx;
    void (*serve)(void *ctx, srv *s);
    int slots;                   /* jobs it runs at once (>= 1) */
    /* Whether it can generate now (/health answers 503 otherwise), with a one-word state
     * ("ready", "connecting", "lost") and a line of detail in the JSON object given. */
    bool (*health)(void *ctx, void *cjson_obj);
    /* Append Prometheus lines (the generator's own metrics) to f. */
    void (*metrics)(void *ctx, FILE *f);
    /* The devices, their plan and counters, as a JSON object (a cJSON*) for GET /cluster. */
    void *(*cluster)(void *ctx);
    /* POST /apply-template: the prompt the model's chat format makes of vars (a cJSON object:
     * messages, tools, add_generation_prompt, ...), malloc'd (*len bytes), or NULL with err (the
     * template refused them: a 400). */
    char *(*apply_template)(void *ctx, const void *cjson_vars, size_t *len, char *err, size_t errlen);
} srv_engine;

/* What the model is, for Ollama's /api/tags, /api/show and /api/ps. */
typedef struct srv_model_info {
    char family[64];             /* the architecture (general.architecture) */
    char quantization[16];       /* the element type of most of the weights ("Q4_K") */
    double n_params;             /* weights, counted */
    double size;                 /* bytes of the file */
    long long modified;          /* the file's modification time (Unix) */
    int n_ctx;                   /* the context of one request */
    char *chat_template;         /* the template's text (Jinja), or NULL */
    char digest[65];             /* an identifier of the file (hex; not its SHA-256) */
} srv_model_info;

typedef struct srv_config {
    const char *host;            /* bind address (numeric or a name) */
    int port;                    /* 0: any free port (srv_port says which) */
    const char *api_key;         /* NULL: no authentication */
    const char *model_id;        /* the name /v1/models lists */
    const char *const *model_names; /* other names a request may give (general.name, aliases) */
    int n_model_names;
    const srv_model_info *info;  /* NULL: the Ollama model views answer with less */
    const char *version;         /* the server's version (Ollama's /api/version) */
    bool embeddings;             /* POST /v1/embeddings and /api/embed answer (else 501) */
    const char *embeddings_how;  /* how to enable them, said in the 501 (NULL: nothing) */
    int queue_max;               /* requests waiting beyond those being generated */
    int max_connections;         /* served at once; a few more are answered 503, then refused */
    size_t max_body;             /* bytes; larger bodies get 413 */
    unsigned timeout_s;          /* a connection idle this long is closed */
    unsigned request_s;          /* a request's headers and body must arrive within this many
                                  * seconds of its connection's start or previous answer (0: 10) */
    const char *cors_origins;    /* origins whose pages may call the server ("*": any; several
                                  * separated by commas); NULL: none but its own */
    sampler_params defaults;     /* for fields a request does not give */
    FILE *log;                   /* one line per request; NULL: quiet */
    const char *page;            /* the web page served at / (page_len bytes of HTML); NULL: */
    size_t page_len;             /* none was built, and / says so */
} srv_config;

srv *srv_start(const srv_config *c, const srv_engine *e, char *err, size_t errlen);
int srv_port(const srv *s);
/* Stop accepting, cancel what is queued or running, wait for the engine thread. */
void srv_stop(srv *s);

/* For the generator's serve loop. The next queued job (in arrival order); with wait, block
 * until one comes. NULL: none is queued (without wait), or the server is stopping and none is
 * left (with wait: then serve finishes what it runs and returns). Jobs whose client left while
 * queued are finished (cancelled) here, never returned. */
srv_job *srv_take(srv *s, bool wait);
/* The job is over: its answer (or last chunk) goes out; the job is not to be used after. */
void srv_job_finish(srv *s, srv_job *j, const srv_result *res);

/* For the generator, while it runs a job: */
const srv_request *srv_job_request(const srv_job *j);
bool srv_job_cancelled(const srv_job *j);
/* The prompt is accepted (tokenized, fits: prompt_tokens of them): a stream starts now. */
void srv_job_begin(srv_job *j, int prompt_tokens);
/* Before srv_job_begin: the reply is to be read as a model of format f writes (think: it starts
 * inside reasoning), its tool calls and reasoning given apart from the content (text/toolcall.h,
 * then srv_job_reasoning and srv_job_tool_call below); otherwise it is content as it comes. */
void srv_job_parse_reply(srv_job *j, enum tool_format f, bool think);
/* Generated text, in order (complete UTF-8 sequences): the reply's content (or, when it is
 * read as srv_job_parse_reply says, the reply to read). */
void srv_job_text(srv_job *j, const char *text, size_t len);
/* The reply's reasoning (a model's <think> text), apart from its content. */
void srv_job_reasoning(srv_job *j, const char *text, size_t len);
/* A tool call the reply makes, complete: the function's name and its arguments (JSON text of
 * an object). Each API says it in its own terms (OpenAI's tool_calls and finish_reason
 * "tool_calls", Ollama's message.tool_calls, Anthropic's tool_use blocks and stop_reason
 * "tool_use"), streamed or in the answer, with an id of its own. */
void srv_job_tool_call(srv_job *j, const char *name, const char *arguments);
/* Embeddings: input `index`'s vector (n floats; every input's of the same n). */
void srv_job_embedding(srv_job *j, int index, const float *v, int n);
/* A generated token's log-probability (natural log) and its n_top most likely alternatives,
 * when the request asked for them; called before the token's text. */
typedef struct srv_token_prob {
    const char *piece;
    size_t len;
    float logprob;
} srv_token_prob;
void srv_job_logprob(srv_job *j, const srv_token_prob *tok, const srv_token_prob *top, int n_top);

#endif
