/* request.h — an OpenAI-style generation request, parsed and checked.
 *
 * The body of POST /v1/chat/completions or /v1/completions becomes an srv_request: the
 * messages or the prompt, the token limit, the sampling parameters (starting from the server's
 * defaults), stop strings, streaming and log-probability options. Anything of the wrong type or
 * out of range is refused with a one-line message naming the field; fields this server does not
 * know are ignored, as OpenAI's clients send many.
 *
 * Agents' fields are parsed into API-neutral terms that every API maps onto (OpenAI's here;
 * Ollama's format/tools and Anthropic's tool use likewise): the tools (OpenAI's array of
 * {"type": "function", "function": {name, description, parameters}}), the choice among them,
 * and the constraint on the output (a GBNF grammar, any JSON object, or a JSON schema); the
 * conversation as the chat template sees it (role "tool", tool_call_id, assistant tool_calls
 * with their arguments as objects, as Hugging Face's apply_chat_template is given them). */
#ifndef PRIMA_SRV_REQUEST_H
#define PRIMA_SRV_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "model/sample.h"
#include "text/tokenizer.h"

enum srv_endpoint { SRV_CHAT, SRV_COMPLETION };

#define SRV_MAX_STOP 4          /* OpenAI's limit */
#define SRV_MAX_TOP_LOGPROBS 20 /* chat; completions allow 5 */

enum srv_tool_choice {
    SRV_TOOLS_AUTO,       /* the model may call a tool or answer */
    SRV_TOOLS_NONE,       /* no call: the tools are shown to the template, the output is text */
    SRV_TOOLS_REQUIRED,   /* at least one call (the output is constrained to calls) */
    SRV_TOOLS_NAMED,      /* a call to tool_name */
};

enum srv_constraint {
    SRV_OUT_TEXT,         /* unconstrained */
    SRV_OUT_GRAMMAR,      /* grammar: GBNF */
    SRV_OUT_JSON,         /* any JSON object */
    SRV_OUT_SCHEMA,       /* JSON valid against schema */
};

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
    /* Agents (chat only). */
    void *chat_json;         /* cJSON array: the messages for the chat template (owned; NULL:
                              * msgs, roles and texts only, are the conversation) */
    const void *tools;       /* cJSON array of tools (into json), NULL: none */
    int n_tools;
    enum srv_tool_choice tool_choice;
    const char *tool_name;   /* SRV_TOOLS_NAMED */
    bool parallel_tool_calls;
    enum srv_constraint out;
    const char *grammar;     /* SRV_OUT_GRAMMAR */
    const void *schema;      /* SRV_OUT_SCHEMA: a cJSON schema (into json) */
    bool strict;             /* json_schema's strict flag (the output is constrained either way) */
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
