/* session.h — one sequence on one device: the engine over all layers plus the token history.
 *
 * This is the single-device evaluation used by `prima run`, `prima logits`, the benchmarks and
 * the public API: it splits a prompt into batches, keeps the positions, and knows how full the
 * context is. Logits are produced only for the rows a caller asks for. */
#ifndef PRIMA_SESSION_H
#define PRIMA_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* Where a session's batches go through the model's layers: by default this session's engine;
 * the ring runtime (cluster/ring.h) plugs in here, so that one generation loop serves a single
 * device and a cluster alike. */
typedef struct session_layers {
    void *ctx;
    /* Every layer, in place on n rows of hidden at positions pos. 0, or -1 with a message. */
    int (*eval)(void *ctx, float *hidden, int n, const int32_t *pos, char *err, size_t errlen);
    int (*kv_truncate)(void *ctx, int p0);
    int (*kv_shift)(void *ctx, int p0, int p1, int delta);
} session_layers;

typedef struct session {
    const model *m;
    engine *e;
    session_layers layers;
    int n_ctx, n_batch;
    int n_past;        /* tokens in the cache, at positions [0, n_past) */
    int32_t *tokens;   /* n_ctx: the history */
    float *hidden;     /* n_batch x n_embd */
    int32_t *pos;      /* n_batch */
    float *logits;     /* n_vocab: the logits after the last evaluated token */
} session;

session *session_create(const model *m, kern_ctx *kc, int n_ctx, int n_batch, char *err,
                        size_t errlen);
/* A session whose engine keeps a KV cache only for the layers in owns (NULL: all) and whose
 * batches run through `layers` (NULL: the engine). The head of a ring uses this. */
session *session_create_split(const model *m, kern_ctx *kc, int n_ctx, int n_batch,
                              const bool *owns, const session_layers *layers, char *err,
                              size_t errlen);
void session_free(session *s);

/* Evaluate n tokens after the history, in batches of at most n_batch. all_logits (n x n_vocab)
 * receives the logits of every one of them when not NULL; s->logits always holds the last row.
 * Returns 0, or -1 with a message when a token id is out of range or the tokens do not fit the
 * context (nothing is evaluated then), or when a logit comes out NaN or infinite (the message
 * names its position; the tokens are then in the history). */
int session_eval(session *s, const int32_t *tokens, int n, float *all_logits, char *err,
                 size_t errlen);
/* Context shift: drop the oldest half of the history after the first n_keep tokens, moving the
 * rest down (keys re-rotated). Returns the number of tokens dropped (0 if nothing to drop). */
int session_shift(session *s, int n_keep);
/* The same edit with the count given: drop the n_discard tokens after the first n_keep (a
 * session that mirrors another's shift, e.g. a draft model's). When fewer tokens follow, the
 * history is cut to n_keep instead and 0 returned. */
int session_discard(session *s, int n_keep, int n_discard);
/* Forget the history from position n_past on. */
void session_truncate(session *s, int n_past);

#endif
