/* toolcall.h — tool calls in a model's own words: which format a model family writes them in,
 * the grammar that makes any model write one, and the parser that turns its output back into
 * calls, reasoning and content (whole, or as it streams).
 *
 * The formats (one table in toolcall.c says how each is recognised):
 *   hermes    <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes, Qwen 2.5/3, ...)
 *   llama3    {"name": ..., "parameters": {...}}, optionally after <|python_tag|> (Llama 3.x)
 *   mistral   [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] or [TOOL_CALLS]NAME[ARGS]{...}
 *   gptoss    <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
 *   deepseek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
 *             ```json {...} ```<｜tool▁call▁end｜>... (R1, V3) or NAME<｜tool▁sep｜>{...} (V3.1)
 * Reasoning goes apart from the content: <think>...</think> (a reply may also start inside it,
 * when the prompt opened it) and gpt-oss's analysis channel. */
#ifndef PRIMA_TOOLCALL_H
#define PRIMA_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

enum tool_format { TOOL_HERMES, TOOL_LLAMA3, TOOL_MISTRAL, TOOL_GPTOSS, TOOL_DEEPSEEK };

/* The format of a model: from its chat template's source (what it writes for a tool call), else
 * its architecture or name (general.architecture, general.name; any may be NULL); hermes when
 * nothing tells. */
enum tool_format tool_format_detect(const char *template_src, size_t len, const char *arch,
                                    const char *name);
const char *tool_format_name(enum tool_format f);

/* GBNF (text/grammar.h) for a reply that is a call in format f: to the function named only
 * (NULL: any of tools), with arguments valid against its parameters' schema; several calls when
 * parallel. tools: OpenAI's array of {"type": "function", "function": {"name", "parameters"}}.
 * A malloc'd text, or NULL with err (a schema json_schema.h refuses, or no such function). */
char *tool_call_grammar(enum tool_format f, const cJSON *tools, const char *only, bool parallel,
                        char *err, size_t errlen);

/* One parsed call: the function's name and its arguments as JSON text (malloc'd). */
typedef struct tool_call {
    char *name;
    char *arguments;
} tool_call;

/* What a reply holds. */
typedef struct tool_reply {
    char *content;           /* malloc'd, NUL-terminated (content_len bytes; may hold NULs) */
    size_t content_len;
    char *reasoning;
    size_t reasoning_len;
    tool_call *calls;
    int n_calls;
} tool_reply;
void tool_reply_free(tool_reply *r);

/* The parser. think: the reply starts inside reasoning (the prompt ended with <think>). */
typedef struct tool_parser tool_parser;
tool_parser *tool_parser_new(enum tool_format f, bool think);
void tool_parser_free(tool_parser *p);

/* What became certain since the last call: content and reasoning text to append, and calls
 * complete (the first new one is calls[first_call]). Text that may still turn out to be part of
 * a marker or a call is held back until it is certain. */
typedef struct tool_delta {
    const char *content;
    size_t content_len;
    const char *reasoning;
    size_t reasoning_len;
    const tool_call *calls;  /* the parser's calls so far */
    int first_call, n_calls; /* new: calls[first_call .. n_calls) */
} tool_delta;
/* Append n bytes of the reply; *d says what is new (valid until the next call). 0, or -1 when
 * out of memory. */
int tool_parser_feed(tool_parser *p, const char *text, size_t n, tool_delta *d);
/* The reply is over: whatever was held back is decided (an unfinished call is content). */
int tool_parser_finish(tool_parser *p, tool_delta *d);
/* The whole reply at once (what feeding it and finishing gives): 0, or -1 out of memory. */
int tool_parse(enum tool_format f, bool think, const char *text, size_t n, tool_reply *out);

#endif
