/* experts.h — how a model of experts routes, for Halda (cost.h: Disk).
 *
 * A device that cannot hold its layers of experts keeps the hottest experts (cluster/device.c)
 * and reads the others from disk when a token is routed to them. How much the hottest ones
 * cover depends on the model: the routing curve (sched_model.expert_cover) says what share of
 * a layer's routings its hottest experts take. It is measured on the head before a ring's
 * first plan: a short built-in text, one token at a time, through every layer of the model
 * (each token routes once per layer, as a decoded token does). The curve is the whole model's
 * (the experts of every layer sorted together by frequency, as a device's hot set is chosen
 * across its layers), so the planner takes any device's layers as typical of the model.
 *
 * The calibration cache: a curve measured once is kept in the user's cache directory
 * (util/cachedir.h) as experts-IDENTITY.json, IDENTITY the model's (cluster/manifest.h: the hash
 * of its chunks' hashes, so another file, even one of the same name and size, has its own
 * entry), with the calibration's version (a hash of the built-in text, the token count and the
 * curve's points: changing any of them measures again). Later starts read it and skip the
 * evaluation, which reads the experts the text routes to (for a model beyond the head's memory
 * most of the file, once). The curve is a property of the model and the text, not of the device,
 * so the entry holds for any thread count. An entry is trusted only as a curve the cost model can
 * use (SCHED_COVER_POINTS + 1 numbers from 0 to 1, rising ever less steeply: miss pieces are a
 * maximum of lines, cost.c); one that is not (truncated, edited, another model's) is ignored with
 * a warning and replaced by a fresh measurement. The cache is best effort: one that cannot be
 * written is said and the measured curve used. */
#ifndef PRIMA_EXPERTS_H
#define PRIMA_EXPERTS_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/manifest.h"
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

/* What sched_calibrate_kept did. */
typedef struct sched_calib_info {
    bool cached;                /* the curve came from the cache, not measured */
    bool stored;                /* measured and written to the cache */
    char entry[4200];           /* the cache entry ("": no cache directory) */
    char warning[4800];         /* one line when an entry was ignored or not written; "" if none */
} sched_calib_info;

/* The routing curve of model m, whose identity is given (MANIFEST_HASH bytes), from the
 * calibration cache when it holds a sound entry for this model and calibration, else measured
 * (sched_calibrate_experts) and stored; with fresh, measured and stored in any case. 0, or -1
 * with one line in err when the measurement fails (nothing stored). */
int sched_calibrate_kept(const model *m, const uint8_t *identity, int threads, bool fresh,
                         double *cover, sched_calib_info *info, char *err, size_t errlen);

#endif
