/* greedy.h — a sequence's reference logits: what a session gives one sequence alone, to compare
 * runs that batch several sequences with (test_multiseq, test_ring_seqs). */
#ifndef PRIMA_TEST_GREEDY_H
#define PRIMA_TEST_GREEDY_H

#include "model/session.h"

/* Evaluate prompt[0..n) in s, then `steps` greedy tokens one at a time: the logits after the
 * prompt and after each token ((steps + 1) x n_vocab, malloc'ed), or NULL with err. */
float *greedy_logits(session *s, const int32_t *prompt, int n, int steps, char *err,
                     size_t errlen);
/* The next step of count sessions decoding greedily together: next[i] = the argmax of
 * ss[i]->logits, tok[i] = &next[i], n[i] = 1 (the arguments of session_eval_batch). */
void greedy_step(session *const *ss, int count, int32_t *next, const int32_t **tok, int *n);

#endif
