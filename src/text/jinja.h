/* jinja.h — the chat templates models ship (tokenizer.chat_template, Jinja source), rendered as
 * Hugging Face's apply_chat_template renders them: Python's jinja2 with trim_blocks,
 * lstrip_blocks, the loop controls extension, a `tojson` that keeps non-ASCII text as it is,
 * and the globals raise_exception(message) and strftime_now(format).
 *
 * Why an interpreter of our own: no Jinja engine for C is packaged in Debian 12 (the only
 * dependencies this project takes), and the chat templates published with models use a small,
 * well-known subset of the language (statements if/for/set/macro, expressions, a few dozen
 * filters, tests and string/dict methods). This module implements that subset from the
 * language's documentation; a template outside it fails with a one-line error naming its line.
 *
 * Untrusted templates (a GGUF from anywhere, --chat-template FILE) are safe to render: parsing
 * and rendering are bounded in nesting depth, steps, memory and output size, and every failure
 * is an error message, never a crash. */
#ifndef PRIMA_JINJA_H
#define PRIMA_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cjson/cJSON.h>

typedef struct jinja_template jinja_template;

/* Why parsing or rendering failed, in one line. raised: the template called
 * raise_exception(msg), and msg is its message as it gave it (control characters as spaces);
 * otherwise msg says what went wrong ("line N: ..."). */
typedef struct jinja_error {
    bool raised;
    int line;          /* the template line (from 1), 0 if none applies */
    char msg[512];
} jinja_error;

/* Bounds on one render: what a template may not exceed. */
#define JINJA_MAX_OUTPUT ((size_t)64 << 20)   /* bytes of rendered text */
#define JINJA_MAX_MEMORY ((size_t)256 << 20)  /* bytes of values made while rendering */
#ifndef JINJA_MAX_STEPS                       /* (the fuzzing build sets a smaller one) */
#define JINJA_MAX_STEPS 50000000L             /* expressions and statements evaluated */
#endif

/* Parses len bytes of template source. NULL and *err on a syntax error (or out of memory). */
jinja_template *jinja_parse(const char *src, size_t len, jinja_error *err);
void jinja_free(jinja_template *t);

/* Renders t with the members of vars (a JSON object) as its variables: `messages`, `tools`,
 * `add_generation_prompt`, `bos_token`, ... now: the time strftime_now() formats (local time).
 * A malloc'd, NUL-terminated text (its length in *len) or NULL and *err. */
char *jinja_render(const jinja_template *t, const cJSON *vars, time_t now, size_t *len,
                   jinja_error *err);
/* jinja_render, telling the bytes that came from user text: the strings of the variables named
 * in plain_vars (NULL-terminated; messages, tools), and what the template made of them (trimmed,
 * sliced, joined, in JSON). *plain: malloc'd, a byte per byte of the text, 1 for those. So a
 * prompt's control-token text can be told from a message that merely contains it. */
char *jinja_render_marked(const jinja_template *t, const cJSON *vars, const char *const *plain_vars,
                          time_t now, size_t *len, uint8_t **plain, jinja_error *err);

#endif
