/* experts.h — how a model of experts routes, for Halda (cost.h: Disk).
 *
 * A device that cannot hold its layers of experts keeps the hottest experts (cluster/device.c)
 * and reads the others from disk when a token is routed to them. How much the hottest ones
 * cover depends on the model: the routing curve (sched_model.expert_cover) says what share of
 * a layer's routings its hottest experts take. It is measured on the head before a ring's
 * first plan: a short built-in text, one token at a time, through every layer of the model
 * (each token routes once per layer, as a decoded token does). The curve is the whole model's
 * (the experts of every layer sorted together by frequency, as a device's hot set is chosen
 * across its layers), so the planner takes any device's layers as typical of the model. */
#ifndef PRIMA_EXPERTS_H
#define PRIMA_EXPERTS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "sched/cost.h"

/* The routing curve (SCHED_COVER_POINTS + 1 values into cover, from 0 to 1) from counts of
 * routings: counts[il * n_expert + e], layer il's routings to expert e, over tokens tokens
 * (k of them a token in a layer of experts; layers with none, dense ones, are left out). Each
 * expert is counted one routing more than measured: a few dozen tokens leave most experts
 * with a handful, and that noise would read as skew. Returns -1 (cover untouched) when no
 * layer has a routing. */
int sched_expert_cover(const uint32_t *counts, int n_layer, int n_expert, double *cover);

/* Measure the routing curve of model m (of experts) with `threads` threads: about
 * SCHED_CALIBRATION_TOKENS tokens of a built-in text. Reads the experts those tokens route to,
 * from the page cache or the disk. 0, or -1 with one line in err. */
#define SCHED_CALIBRATION_TOKENS 48
int sched_calibrate_experts(const model *m, int threads, double *cover, char *err,
                            size_t errlen);

#endif
