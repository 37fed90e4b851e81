/* sample.h — choosing the next token from a row of logits.
 *
 * The chain, in order: repetition / presence / frequency penalties over the last repeat_last_n
 * tokens seen, then (temp > 0) top-k, top-p, min-p, temperature and a draw from the
 * distribution; temp <= 0 takes the argmax (ties -> lowest id) after the penalties.
 * The random stream is the sampler's own (seeded), so a seed reproduces a run exactly. */
#ifndef PRIMA_SAMPLE_H
#define PRIMA_SAMPLE_H

#include <stdint.h>

typedef struct sampler_params {
    float temp;              /* <= 0: greedy */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off; keeps tokens with p >= min_p * p_max */
    float repeat_penalty;    /* 1: off; logit / r if positive, * r if negative */
    int repeat_last_n;       /* penalty window; 0: off */
    float presence_penalty;  /* subtracted once from each token in the window */
    float frequency_penalty; /* subtracted per occurrence in the window */
    uint64_t seed;
} sampler_params;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalties (window 64). */
void sampler_params_default(sampler_params *p);

typedef struct sampler sampler;

sampler *sampler_create(const sampler_params *p, int n_vocab);
void sampler_free(sampler *s);
/* Record a token of the sequence (prompt or generated) in the penalty window. */
void sampler_accept(sampler *s, int32_t token);
/* Forget the window (a new sequence). */
void sampler_reset(sampler *s);
/* Choose a token from n_vocab logits (not modified). Does not accept it. Always an id in
 * [0, n_vocab): a NaN logit ranks below every number, and an infinite one on top is taken as
 * it is. (session_eval refuses non-finite logits, so this only guards other callers.) */
int32_t sampler_sample(sampler *s, const float *logits);

/* For speculative decoding, which must apply the chain identically to the target's and the
 * draft's logits and draw from what the chain leaves: */
/* The distribution sampler_sample draws from, as n_vocab probabilities (0 for the tokens the
 * chain removes; greedy: 1 for the argmax). Uses the current penalty window. */
void sampler_probs(sampler *s, const float *logits, double *probs);
/* A uniform number in [0, 1) from the sampler's random stream. */
double sampler_uniform(sampler *s);
/* A token drawn with probability proportional to w[id] (n_vocab weights, those <= 0 never),
 * or -1 when no weight is positive. */
int32_t sampler_draw(sampler *s, const double *w);
/* Make dst choose as src does: src's parameters and penalty window, but dst's own random
 * stream (the vocabularies must have the same size). 0, or -1 when out of memory. */
int sampler_mirror(sampler *dst, const sampler *src);

/* For a device that samples on the sampler's behalf (a ring's device decoding on its own,
 * session_decode): the whole state, to rebuild there as sampler_create(params), set_rng and
 * sampler_accept of the window in order, and the random stream to take back after each token
 * it chose (with sampler_accept of that token, the sampler is then as if it had chosen it). */
const sampler_params *sampler_get_params(const sampler *s);
/* The penalty window, oldest token first, into out (room for repeat_last_n); the count. */
int sampler_window(const sampler *s, int32_t *out);
void sampler_get_rng(const sampler *s, uint64_t state[4]);
void sampler_set_rng(sampler *s, const uint64_t state[4]);

#endif
