/* shape.h — a loaded model as the cost model sees it (cost.h's sched_model). */
#ifndef PRIMA_SHAPE_H
#define PRIMA_SHAPE_H

#include "model/model.h"
#include "sched/cost.h"

/* Layer means, KV cache for n_ctx positions of n_seq sequences, buffers for max_batch-token
 * batches and n_seq-row decode steps, activations of act_bytes per value on the wire (4: F32,
 * 2: F16). Fails (one line) for a context, batch or sequence count below 1. */
int sched_model_from(const model *m, int n_ctx, int max_batch, int n_seq, int act_bytes,
                     sched_model *sm, char *err, size_t errlen);

#endif
