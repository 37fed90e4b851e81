/* request.h — a generation request, parsed and checked, whichever API it came in.
 *
 * The body of OpenAI's POST /v1/chat/completions or /v1/completions, Ollama's /api/chat or
 * /api/generate, or Anthropic's /v1/messages becomes an srv_request: the messages or the
 * prompt, the token limit, the sampling parameters (starting from the server's defaults), stop
 * strings, streaming and log-probability options. The generator reads the same fields whatever
 * the API; `api` says which wire format the answer goes out in. Anything of the wrong type or
 * out of range is refused with a one-line message naming the field; fields this server does not
 * know are ignored, as clients send many.
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

enum srv_endpoint { SRV_CHAT, SRV_COMPLETION, SRV_EMBED };
/* The wire format of the request and its answer. */
enum srv_api { SRV_API_OPENAI, SRV_API_OLLAMA, SRV_API_ANTHROPIC };

#define SRV_MAX_STOP 4          /* OpenAI's limit */
#define SRV_MAX_TOP_LOGPROBS 20 /* chat; completions allow 5 */
#define SRV_MAX_PROMPTS 16      /* completions: prompts (choices) in one request; each is a job
                                 * of its own in the queue, so a bound keeps one request from
                                 * filling it */

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

/* An input to embed: text, or token ids. */
typedef struct srv_input {
    const char *text;        /* NULL: toks */
    const int32_t *toks;
    int n_toks;
} srv_input;

typedef struct srv_request {
    enum srv_endpoint kind;
    chat_msg *msgs;          /* chat: n_msgs messages, roles system/user/assistant */
    int n_msgs;
    const char *prompt;      /* completions (with several prompts: "", see prompts) */
    srv_input *prompts;      /* completions given several prompts (OpenAI's array of strings or
                              * of id arrays): n_prompts (2..SRV_MAX_PROMPTS) of them, one
                              * choice each, their ids in the same block; NULL: one prompt, in
                              * prompt or prompt_toks */
    int n_prompts;
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
    enum srv_api api;
    const char *model;       /* the model the request names (NULL: none) */
    bool include_usage;      /* OpenAI streams: a final chunk with the usage */
    bool echo;               /* completions: the prompt's text before the generated text */
    int32_t *prompt_toks;    /* completions given token ids (n_prompt_toks) instead of text */
    int n_prompt_toks;
    bool load_only;          /* Ollama: no prompt, no messages: load the model, generate nothing */
    bool reply_as_text;      /* Ollama's /api/generate: the reply is "response", not a message */
    srv_input *inputs;       /* embeddings: n_inputs texts (token ids in prompt_toks) */
    int n_inputs;
    bool truncate;           /* embeddings: an input longer than the context is cut to it (else
                              * a 400) */
    bool base64;             /* OpenAI's embeddings as base64 of little-endian float32 */
    int dimensions;          /* embeddings: the size asked (0: the model's) */
    const char *out_param;   /* the field the output constraint came in (NULL: OpenAI's
                              * "response_format"; Ollama's "format") */
    void *api_json;          /* cJSON the API's parser made (Anthropic's tools in OpenAI's
                              * terms), which fields may point into (owned) */
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
/* The same for Ollama's /api/chat (kind SRV_CHAT) and /api/generate (SRV_COMPLETION; without
 * "raw": true its prompt and system become a chat, rendered with the model's template) and for
 * Anthropic's /v1/messages (kind SRV_CHAT). */
int srv_ollama_parse(srv_request *r, enum srv_endpoint kind, const char *body, size_t len,
                     const sampler_params *defaults, srv_refusal *why);
int srv_anthropic_parse(srv_request *r, const char *body, size_t len,
                        const sampler_params *defaults, srv_refusal *why);
/* POST /v1/embeddings (api SRV_API_OPENAI) or Ollama's /api/embed: kind SRV_EMBED. */
int srv_embed_parse(srv_request *r, enum srv_api api, const char *body, size_t len,
                    const sampler_params *defaults, srv_refusal *why);
void srv_request_free(srv_request *r);

#endif
