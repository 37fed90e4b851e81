/* generate.h — the token loop shared by the commands that produce text: feed a prompt, then
 * sample, print and evaluate one token at a time (several with speculative decoding, spec.h)
 * until an end-of-generation token, a user stop string, the token limit or a full context
 * (optionally shifted away). */
#ifndef PRIMA_GENERATE_H
#define PRIMA_GENERATE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/sample.h"
#include "model/session.h"
#include "model/spec.h"
#include "text/tokenizer.h"
#include "util/strbuf.h"

typedef struct gen_opts {
    int n_predict;              /* tokens per reply; -1: no limit */
    bool ignore_eos;            /* an end-of-generation token does not end the reply */
    /* Non-zero (set by a signal handler, say) ends the reply before its next token with
     * GEN_CANCELLED. NULL: none. (A chat's Ctrl-C.) */
    volatile sig_atomic_t *cancel;
    const char *const *stop;    /* stop strings (not printed) */
    int n_stop;
    bool special_text;          /* control tokens print their text (else nothing) */
    bool context_shift;
    int n_keep;                 /* tokens kept at the start on a context shift */
    /* Called with every sampled token that is not an end of generation, and the logits it was
     * drawn from, before it is printed; non-zero ends the reply at once with GEN_CANCELLED (the
     * token is dropped). NULL: none. (The server's cancellation and log-probabilities.) */
    int (*on_token)(void *user, int32_t token, const float *logits);
    void *on_token_user;
    /* Speculative decoding: its steps replace single evaluations (its draft follows the
     * session; any sampler may be used with it). NULL: one token per evaluation. */
    spec *spec;
} gen_opts;

typedef struct gen_stats {
    int n_prompt, n_gen, n_shift;
    double prompt_s, gen_s;
    spec_counts spec;           /* evaluations of the model while generating, drafts */
} gen_stats;

enum gen_end { GEN_EOG, GEN_STOP_STRING, GEN_LIMIT, GEN_CONTEXT_FULL, GEN_CANCELLED, GEN_ERROR };

/* Printable output, in order, complete UTF-8 sequences only. */
typedef void (*gen_emit_fn)(void *user, const char *text, size_t len);

/* Evaluate n tokens after the history and record them in the sampler's penalty window. When
 * they do not fit, a context shift makes room if allowed (and possible). */
int gen_feed(session *s, sampler *smp, const gen_opts *o, const int32_t *tokens, int n,
             gen_stats *st, char *err, size_t errlen);

/* The text side of a reply, token by token: what gen_reply does with each chosen token (the
 * end-of-generation check, the on_token hook, detokenizing, stop strings across token
 * boundaries, printing), for a caller that chooses and evaluates the tokens itself (the
 * server's slots, several replies at once). */
typedef struct gen_text {
    const tokenizer *tk;
    const gen_opts *o;
    gen_emit_fn emit;
    void *user;
    strbuf text;                /* the reply so far; [0, printed) is emitted */
    size_t printed;
    detok_stream ds;
    int n_gen;
} gen_text;

void gen_text_init(gen_text *g, const tokenizer *tk, const gen_opts *o, gen_emit_fn emit,
                   void *user);
/* Whether the reply may take another token (not yet n_predict). */
bool gen_text_open(const gen_text *g);
/* A chosen token and the logits it was drawn from: false with *end when the reply ends with it
 * (GEN_EOG, GEN_STOP_STRING, GEN_CANCELLED, GEN_ERROR with err; the token is then not
 * counted), else true (it is counted and what can be printed is). */
bool gen_text_token(gen_text *g, int32_t tok, const float *logits, enum gen_end *end, char *err,
                    size_t errlen);
/* The reply ended with end: print what is held back (unless a stop string ended it), give the
 * text in *reply (malloc'd; NULL: freed). */
void gen_text_end(gen_text *g, enum gen_end end, char **reply);

/* Generate from the current logits. reply (if not NULL) receives the printed text, malloc'd.
 * GEN_ERROR comes with a message in err. */
enum gen_end gen_reply(session *s, const tokenizer *tk, sampler *smp, const gen_opts *o,
                       gen_emit_fn emit, void *user, char **reply, gen_stats *st, char *err,
                       size_t errlen);

#endif
