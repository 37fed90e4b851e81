/* session.h — one sequence on one device: the engine over all layers plus the token history.
 *
 * This is the single-device evaluation used by `prima run`, `prima logits`, the benchmarks and
 * the public API: it splits a prompt into batches, keeps the positions, and knows how full the
 * context is. Logits are produced only for the rows a caller asks for.
 *
 * Several sequences at once (a server's slots): the session that owns the engine is sequence 0
 * of an engine made for n_seq sequences; session_create_peer adds a session for each other
 * sequence, with its own history, on the same engine and layers. Every single-sequence call
 * works on a peer as on the owner; session_eval_batch and the micro-batches below evaluate
 * rows of several of them in one batch, pipelined round a ring when the layers can. */
#ifndef PRIMA_SESSION_H
#define PRIMA_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "model/sample.h"

/* Where a session's batches go through the model's layers: by default this session's engine;
 * the ring runtime (cluster/ring.h) plugs in here, so that one generation loop serves a single
 * device and a cluster alike. */
typedef struct session_layers {
    void *ctx;
    /* Every layer, in place on n rows of hidden: row t at position pos[t] of sequence seq[t]
     * (as engine_layers). 0, or -1 with a message. */
    int (*eval)(void *ctx, float *hidden, int n, const int32_t *pos, const int32_t *seq,
                char *err, size_t errlen);
    int (*kv_truncate)(void *ctx, int seq, int p0);
    int (*kv_shift)(void *ctx, int seq, int p0, int p1, int delta);
    /* Pipelining, optional (NULL: every batch goes through eval, one at a time). submit sends
     * a batch on its way without waiting; hidden stays the caller's until collect hands it
     * back (the oldest batch first) holding the result. At most max_in_flight(ctx) batches
     * are submitted and not collected. 0, or -1 with a message. */
    int (*submit)(void *ctx, float *hidden, int n, const int32_t *pos, const int32_t *seq,
                  char *err, size_t errlen);
    int (*collect)(void *ctx, float **hidden, char *err, size_t errlen);
    int (*max_in_flight)(void *ctx);
    /* Decoding on the layers' side, optional (NULL, or can_decode false: the caller chooses and
     * evaluates every token): as ring_decode, with a message. 0; 1 when cut short by a failure
     * the next eval recovers from; -1. */
    bool (*can_decode)(void *ctx, const sampler *smp);
    int (*decode)(void *ctx, int seq, int pos, int32_t token, int max_steps, sampler *smp,
                  int (*on_token)(void *user, int32_t token), void *user, int *n_tokens,
                  char *err, size_t errlen);
} session_layers;

typedef struct session_mb session_mb;

typedef struct session {
    const model *m;
    engine *e;
    session_layers layers;
    int n_ctx, n_batch;
    int n_past;        /* tokens in the cache, at positions [0, n_past) */
    int32_t *tokens;   /* n_ctx: the history */
    float *hidden;     /* n_batch x n_embd */
    int32_t *pos;      /* n_batch */
    int32_t *seqs;     /* n_batch copies of seq */
    float *logits;     /* n_vocab: the logits after the last evaluated token */
    int seq;           /* this session's sequence in the engine */
    struct session *owner;  /* the session owning the engine (itself for sequence 0's) */
    bool in_flight;    /* part of a micro-batch not yet collected */
    /* the owner's: micro-batches in flight, oldest first, and the one session_eval_batch uses */
    session_mb *fly_first, *fly_last;
    int n_fly;
    session_mb **batch_mbs;
    int n_batch_mbs;
} session;

session *session_create(const model *m, kern_ctx *kc, int n_ctx, int n_batch, char *err,
                        size_t errlen);
/* A session whose engine holds n_seq sequences (this session is sequence 0) and keeps a KV
 * cache only for the layers in owns (NULL: all), and whose batches run through `layers` (NULL:
 * the engine). The head of a ring uses this. */
session *session_create_split(const model *m, kern_ctx *kc, int n_ctx, int n_batch, int n_seq,
                              const bool *owns, const session_layers *layers, char *err,
                              size_t errlen);
/* A session for sequence seq (1 <= seq < the engine's n_seq) of owner's engine and layers,
 * with a history of its own; its KV region is cleared. Free every peer before its owner. */
session *session_create_peer(session *owner, int seq, char *err, size_t errlen);
void session_free(session *s);

/* Evaluate n tokens after the history, in batches of at most n_batch. all_logits (n x n_vocab)
 * receives the logits of every one of them when not NULL; s->logits always holds the last row.
 * Returns 0, or -1 with a message when a token id is out of range or the tokens do not fit the
 * context (nothing is evaluated then), or when a logit comes out NaN or infinite (the message
 * names its position; the tokens are then in the history). */
int session_eval(session *s, const int32_t *tokens, int n, float *all_logits, char *err,
                 size_t errlen);
/* An embedding of n tokens evaluated after the history: the mean of their last hidden states
 * (after the final norm), scaled to unit length, into out (n_embd floats). The history then holds
 * them (truncate it to reuse the room). 0, or -1 with a message (as session_eval; also a state
 * that is not finite). */
int session_embed(session *s, const int32_t *tokens, int n, float *out, char *err,
                  size_t errlen);
/* Context shift: drop the oldest half of the history after the first n_keep tokens, moving the
 * rest down (keys re-rotated). Returns the number of tokens dropped (0 if nothing to drop). */
int session_shift(session *s, int n_keep);
/* The same edit with the count given: drop the n_discard tokens after the first n_keep (a
 * session that mirrors another's shift, e.g. a draft model's). When fewer tokens follow, the
 * history is cut to n_keep instead and 0 returned. */
int session_discard(session *s, int n_keep, int n_discard);
/* Decoding without a round trip per token where the layers can (a ring whose one worker holds
 * every layer: ring_decode). Evaluates `token` after the history, then the layers' side
 * chooses tokens with smp's state and evaluates them, up to max_steps chosen (at most the room
 * left in the context), each taken into smp and given to on_token (non-zero halts). The
 * history then holds `token` and every chosen token but the last, as for a caller that
 * evaluates each token it chose before choosing the next and stops after choosing the last;
 * s->logits are not updated. Returns 0 with *n_tokens chosen; 1 when the layers cannot decode
 * so, or were cut short by a failure the next evaluation recovers from, after *n_tokens chosen
 * (0: nothing was done) — go on choosing and evaluating as usual from the last one (or from
 * `token`); -1 with a message. */
int session_decode(session *s, int32_t token, int max_steps, sampler *smp,
                   int (*on_token)(void *user, int32_t token), void *user, int *n_tokens,
                   char *err, size_t errlen);
/* Forget the history from position n_past on: all of it when the model's sliding layers no
 * longer hold the window position n_past attends to (model_kv_resume); s->n_past says what is
 * kept. */
void session_truncate(session *s, int n_past);

/* ---- several sequences in one batch (session_batch.c) ---- */

/* Sessions of one engine, each at most once: ss[i] gets tokens[i][0..n[i]) appended (n[i] >= 1,
 * any length: long parts go in several batches), and then ss[i]->logits holds the logits after
 * its last token. The rows are cut into micro-batches of at most n_batch rows, pipelined round
 * the ring (up to session_max_in_flight at once; a step of fewer than 4 rows per device goes
 * as one batch, since cutting it would only add stages; with room for one batch in flight,
 * every batch goes through the layers' eval, as session_eval's do, so that a ring with failover
 * recovers from a lost worker here too). Returns 0, or -1 with a message: checked as
 * session_eval before anything is evaluated (token ids, room in each context, sessions); after
 * a failure of the layers the histories hold the tokens of the batches sent (truncate them). */
int session_eval_batch(session *const *ss, const int32_t *const *tokens, const int *n,
                       int count, char *err, size_t errlen);

/* The asynchronous form, for a scheduler that keeps the ring full across steps: while one
 * micro-batch's tokens are sampled, the others are still in the ring. A micro-batch holds the
 * buffers of one batch in flight; create up to session_max_in_flight of them per owner. */
session_mb *session_mb_create(session *owner, char *err, size_t errlen);
/* Free a micro-batch collected, never sent, or lost with a failure of the layers (the ring's
 * failure ends everything in flight); not one still on its way round a working ring (collect
 * it first), and before its owner and the sessions in it. */
void session_mb_free(session_mb *mb);
/* Send ss[i]'s tokens[i][0..n[i]) (sum of n at most n_batch; sessions of mb's owner, none of
 * them in flight) on their way: the histories grow at once, the logits come with collect.
 * 0, or -1 with a message: nothing sent (bad tokens, no room, too many rows, a busy session,
 * too many micro-batches in flight), or the layers failed (the histories then hold the
 * tokens: truncate them). */
int session_mb_submit(session_mb *mb, session *const *ss, const int32_t *const *tokens,
                      const int *n, int count, char *err, size_t errlen);
/* Wait for the oldest micro-batch in flight of owner's engine, set the logits of its sessions
 * (after each one's last token) and return it; NULL with a message when none is in flight or
 * the layers failed (the ring's reason) or a logit came out NaN or infinite. */
session_mb *session_mb_collect(session *owner, char *err, size_t errlen);
int session_in_flight(const session *owner);
/* 1 on one device; round a ring, the ring's bound (its number of devices). */
int session_max_in_flight(const session *owner);

#endif
