/* request.h — an OpenAI-style generation request, parsed and checked.
 *
 * The body of POST /v1/chat/completions or /v1/completions becomes an srv_request: the
 * messages or the prompt, the token limit, the sampling parameters (starting from the server's
 * defaults), stop strings, streaming and log-probability options. Anything of the wrong type or
 * out of range is refused with a one-line message naming the field; fields this server does not
 * know are ignored, as OpenAI's clients send many. */
#ifndef PRIMA_SRV_REQUEST_H
#define PRIMA_SRV_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "model/sample.h"
#include "text/tokenizer.h"

enum srv_endpoint { SRV_CHAT, SRV_COMPLETION };

#define SRV_MAX_STOP 4          /* OpenAI's limit */
#define SRV_MAX_TOP_LOGPROBS 20 /* chat; completions allow 5 */

typedef struct srv_request {
    enum srv_endpoint kind;
    chat_msg *msgs;          /* chat: n_msgs messages, roles system/user/assistant */
    int n_msgs;
    const char *prompt;      /* completions */
    int max_tokens;          /* -1: until an end of generation or a full context */
    sampler_params sp;
    bool seed_given;
    const char *stop[SRV_MAX_STOP];
    int n_stop;
    bool stream;
    bool logprobs;           /* per generated token: its log-probability ... */
    int top_logprobs;        /* ... and the most likely alternatives' */
    void *json;              /* the parsed body, which the strings point into */
    char **owned;            /* texts joined from content parts */
    int n_owned;
} srv_request;

/* Why a request was refused: the message and the field it names (NULL: the whole body). */
typedef struct srv_refusal {
    char message[256];
    const char *param;
} srv_refusal;

/* Parse len bytes of body. defaults: the sampling parameters of a request that gives none
 * (seed_given says whether the request chose the seed). 0, or -1 with why filled in. */
int srv_request_parse(srv_request *r, enum srv_endpoint kind, const char *body, size_t len,
                      const sampler_params *defaults, srv_refusal *why);
void srv_request_free(srv_request *r);

#endif
