/* chat_format.h — how a conversation becomes a model's prompt: the model's own chat template
 * (tokenizer.chat_template, Jinja, rendered by text/jinja.h), or a template given in its place,
 * or, for a file without one, the built-in format (text/chat.c) recognised from it. */
#ifndef PRIMA_CHAT_FORMAT_H
#define PRIMA_CHAT_FORMAT_H

#include <time.h>

#include "text/jinja.h"
#include "text/tokenizer.h"

typedef struct chat_format chat_format;

/* A template error while tokenizing a conversation (the message is in err): apart from every
 * TOK_ERR_* code. */
#define CHAT_ERR_TEMPLATE (-50)

/* The format for f's model: src (len bytes of Jinja) when not NULL, else the file's
 * tokenizer.chat_template, else the built-in one. t gives bos_token and eos_token. NULL with
 * err when the template does not parse. */
chat_format *chat_format_load(const gguf_file *f, const tokenizer *t, const char *src, size_t len,
                              char *err, size_t errlen);
void chat_format_free(chat_format *cf);
/* What the format is, in words ("the model's chat template", "built-in ChatML", ...). warned:
 * the file's template was not Jinja this interpreter could read, nor one recognised. */
const char *chat_format_describe(const chat_format *cf, bool *warned);

/* Renders vars (a JSON object: messages, tools, add_generation_prompt, extra variables) as the
 * template sees them, with bos_token and eos_token from the vocabulary where vars has none.
 * now: what strftime_now() formats. A malloc'd text (*len bytes) or NULL and *err. */
char *chat_format_apply(const chat_format *cf, const cJSON *vars, time_t now, size_t *len,
                        jinja_error *err);

/* Renders msgs (with the assistant-turn opener when add_assistant) and tokenizes the prompt.
 * The template's control-token text (<|im_start|>, ...) becomes control tokens, the messages'
 * contents stay plain text whatever they contain (jinja_render_marked tells them apart); BOS is
 * added as the vocabulary says unless the text starts with it. The count and a malloc'd array
 * in *out, or a TOK_ERR_* code, or CHAT_ERR_TEMPLATE with err. */
int chat_format_tokenize(const chat_format *cf, const tokenizer *t, const chat_msg *msgs, int n,
                         bool add_assistant, int32_t **out, char *err, size_t errlen);

/* chat_format_tokenize of a conversation as the template sees it: vars as chat_format_apply
 * takes them (messages with tool calls and results, tools, add_generation_prompt, ...). The
 * built-in formats read the messages' roles and text contents only. */
int chat_format_tokenize_vars(const chat_format *cf, const tokenizer *t, const cJSON *vars,
                              int32_t **out, char *err, size_t errlen);

/* The Jinja source in use (*len bytes), or NULL for a built-in format: what it writes for a tool
 * call tells the model's tool-call format (text/toolcall.h). */
const char *chat_format_source(const chat_format *cf, size_t *len);

#endif
