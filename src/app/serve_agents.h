/* serve_agents.h — what `prima serve` does for agents, between a request's terms
 * (server/request.h) and the slots (serve_sched.c): the chat prompt with tool calls and results
 * and the tools for the template, the grammar that constrains a reply (a required tool call,
 * response_format, a GBNF grammar) applied to each token's logits, and the tool-call format the
 * reply is read in. */
#ifndef PRIMA_SERVE_AGENTS_H
#define PRIMA_SERVE_AGENTS_H

#include "app/serve_engine.h"
#include "text/grammar.h"

/* A slot's constraint (all NULL: none). */
typedef struct serve_constraint {
    grammar *g;
    grammar_state *st;
    uint8_t *allowed;
    float *logits;       /* the row with the refused tokens at -inf */
} serve_constraint;

/* The prompt's tokens for q: a chat through the model's chat format with q's conversation and
 * tools, a completion's prompt as it is. The count, a TOK_ERR_* code, or CHAT_ERR_TEMPLATE with
 * err. */
int serve_prompt(serve_engine *se, const srv_request *q, int32_t **toks, char *err, size_t errlen);

/* Tell the server how to read q's reply (tools asked for, a gpt-oss model, or a prompt that
 * opened <think>), given the prompt's tokens. Whether it is read so (its text is then to show
 * control tokens, which mark calls and channels). */
bool serve_reply_format(serve_engine *se, srv_job *job, const int32_t *toks, int n);

/* The constraint q asks for, into c. 0 (none, or ready), or -1 with err and *param naming the
 * request's field (a grammar or schema that does not compile: a 400), or -2 out of memory. */
int serve_constraint_open(serve_engine *se, const srv_request *q, serve_constraint *c,
                          const char **param, char *err, size_t errlen);
/* The logits to sample from: logits itself without a constraint, else c->logits with the
 * tokens the grammar refuses at -inf. NULL with err when no token may come (the grammar cannot
 * go on with this vocabulary) or memory ran out. */
const float *serve_constraint_mask(serve_engine *se, serve_constraint *c, const float *logits,
                                   char *err, size_t errlen);
/* The chosen token: whether the reply is over (the grammar is complete and allows nothing
 * more). */
bool serve_constraint_take(serve_engine *se, serve_constraint *c, int32_t tok);
void serve_constraint_close(serve_constraint *c);

#endif
