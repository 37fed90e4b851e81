/* spec.h — speculative decoding: several tokens per evaluation of the target model.
 *
 * A step starts from the token just chosen (in the sampler's window, not yet evaluated), drafts
 * up to n_max tokens that may follow it — with a small draft model on this device, or by
 * finding the last few tokens earlier in the history and proposing what followed them there
 * (n-gram / prompt lookup) — and evaluates the chosen token and the drafts on the target session
 * in one batch: on a ring, one traversal pays the hops once for all of them.
 *
 * The drafts are checked in order with the standard rule: draft d, proposed with probability
 * q(d), is kept with probability min(1, p(d) / q(d)), p being the target's distribution at its
 * position; the first one refused is replaced by a token drawn from the normalised residual
 * max(0, p - q), and when every draft is kept one more token is drawn from the target's
 * distribution after the last. p and q are what the sampler's chain (penalties, top-k, top-p,
 * min-p, temperature) makes of each model's logits with the same penalty window, so the tokens
 * follow the distribution of sampling the target token by token; under greedy sampling they are
 * exactly its tokens. An n-gram draft is a point mass (q(d) = 1). Afterwards the target's KV
 * cache (on every device of a ring) and the draft's hold the kept tokens only. */
#ifndef PRIMA_SPEC_H
#define PRIMA_SPEC_H

#include <stdint.h>
#include <stdio.h>

#include "model/sample.h"
#include "model/session.h"

/* The most tokens one step drafts (n_max's upper bound). */
#define SPEC_MAX_DRAFT 256

enum spec_mode { SPEC_DRAFT, SPEC_NGRAM };

typedef struct spec_params {
    enum spec_mode mode;
    int n_max;       /* drafts per step at most (also cut to the context and batch left) */
    int n_min;       /* fewer drafts than this: the chosen token is evaluated alone */
    float p_min;     /* draft model: stop drafting when the probability of its most likely
                        token (softmax of its logits) is below p_min */
    int ngram_max, ngram_min;   /* n-gram: the longest and shortest suffix looked up */
    FILE *log;       /* one line per step; NULL: quiet */
} spec_params;

/* n_max 16, n_min 0, p_min 0.8; n-grams of 4 down to 2 tokens (single tokens recur too often
 * to predict much: on the fixtures they tripled the drafts for 8% fewer evaluations). */
void spec_params_default(spec_params *p, enum spec_mode mode);

/* What steps did, summed by spec_step. */
typedef struct spec_counts {
    long steps;      /* evaluations of the target model */
    long drafted;    /* draft tokens checked */
    long accepted;   /* draft tokens kept */
} spec_counts;

typedef struct spec spec;

/* A speculator for the target model: SPEC_DRAFT needs `draft`, which must have the target's
 * vocabulary (the same size and token texts: refused otherwise); its session (n_ctx positions,
 * batches of n_batch) computes on kc, which it may share with the target when steps never run
 * concurrently. The drafts are drawn with the chain and window of the sampler each step is
 * given, from a random stream of their own (seed). NULL with a message on failure. */
spec *spec_create(const spec_params *p, const model *target, const model *draft, kern_ctx *kc,
                  int n_ctx, int n_batch, uint64_t seed, char *err, size_t errlen);
void spec_free(spec *sp);

/* One step after tok (already in smp's window; t must have room for it): evaluates tok and the
 * drafts on t, writes the 1..max_out tokens that follow into out (capacity
 * min(max_out, SPEC_MAX_DRAFT + 1)), each accepted into smp; the last one is not evaluated (the
 * next step's tok). sp NULL: a plain step (tok evaluated, one token drawn). Returns the number
 * of tokens, or -1 with a message. */
int spec_step(spec *sp, session *t, sampler *smp, int32_t tok, int max_out, int32_t *out,
              spec_counts *cnt, char *err, size_t errlen);
/* The target's logits (before the sampler's chain) that token i of the last step's out was
 * chosen by: a row of the step's batch, or t->logits after a plain step (and with sp NULL).
 * Valid until t evaluates again. */
const float *spec_logits(const spec *sp, const session *t, int i);
/* The target session dropped n_discard tokens after n_keep (session_shift): the draft follows. */
void spec_shifted(spec *sp, int n_keep, int n_discard);

#endif
