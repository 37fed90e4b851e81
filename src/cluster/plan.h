/* plan.h — how a model's layers are laid out on a ring of devices.
 *
 * Devices are numbered in ring order; device 0 is the head. Round r (0 <= r < k) lays out
 * window[0] layers on device 0, then window[1] on device 1, ... A token's forward pass visits
 * the devices in that order k times. When n_layer is not a multiple of the total window, the last
 * round is partial: it ends where the layers run out. A window of 0 means the device computes
 * nothing (it only forwards, or is left out). */
#ifndef PRIMA_PLAN_H
#define PRIMA_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PRIMA_MAX_DEVICES 32

/* Streamed layers of a device that cannot hold all of them are in memory at most this many at
 * a time: the one being computed and the next one being read. The runtime (cluster/device.c)
 * keeps that room and the scheduler's cost model (sched/cost.h) plans with it, so it lives with
 * the plan both read. */
#define PLAN_STREAM_ROOM_LAYERS 2

typedef struct ring_plan {
    int n_dev;
    int n_layer;
    int k;                              /* rounds */
    int window[PRIMA_MAX_DEVICES];      /* w_m: layers per round */
    int gpu_layers[PRIMA_MAX_DEVICES];  /* n_m: of those, on the GPU (last n of each window) */
    uint64_t weight_budget[PRIMA_MAX_DEVICES];  /* bytes of RAM the plan gives each device's
                                                 * weights (resident layers, streaming room, the
                                                 * head's own), which the release policy fills;
                                                 * 0: the device's own measure of free memory */
    bool decode_alone;                  /* the head holds no layer and one worker all of them:
                                         * that worker decodes on its own, no hop per token
                                         * (ring.h, ring_decode); false: every token goes
                                         * through the head */
} ring_plan;

/* The one check of a plan against its model, used wherever a plan is made or received: every
 * window is 0..n_layer layers (at least one not 0), GPU layers fit their window, and k rounds
 * cover n_layer exactly (the last one possibly partial). Writes a one-line reason naming the
 * device into err on failure. */
int plan_validate(const ring_plan *p, char *err, size_t errlen);
/* The layers device dev computes in round r: [*first, *last) (empty when first == last). */
void plan_range(const ring_plan *p, int dev, int round, int *first, int *last);
/* owns[il] = true for every layer device dev computes in any round (n_layer entries). */
void plan_owned_layers(const ring_plan *p, int dev, bool *owns);
/* on_gpu[il] = true for the layers of device dev that run on its GPU: in every round, the last
 * gpu_layers[dev] layers of its range (all of it when the range is shorter, as a partial last
 * round may be). Returns how many (n_layer entries). */
int plan_gpu_mask(const ring_plan *p, int dev, bool *on_gpu);
/* The layers device dev computes, as "0-2 6-8" ("none" when there are none). */
void plan_format_layers(const ring_plan *p, int dev, char *out, size_t cap);
/* Smallest k that covers n_layer with the given windows. */
int plan_rounds_needed(const int *window, int n_dev, int n_layer);
/* The plan of windows given by hand (head first), with GPU layers gpu (NULL: none): k is the
 * rounds they need, which a k > 0 must match; a plan without layers on the head has its one
 * worker decode on its own (the faster; ring.h). Returns 0, or -1 with a one-line reason
 * that starts with the windows ("9,9,9: device 0 ..."). */
int plan_from_windows(ring_plan *p, int n_dev, int n_layer, const int *window, const int *gpu,
                      int k, char *err, size_t errlen);
/* The default plan when the user gives no windows: k rounds (1 if k < 1) of ceil(n_layer / k)
 * layers, split between the devices in proportion to their free memory mem[d] (equal shares
 * when no memory is known), largest remainders first. This is the one place the scheduler
 * replaces. Returns 0, or -1 (err set) when the plan cannot be made. */
int plan_by_memory(ring_plan *p, int n_dev, int n_layer, int k, const uint64_t *mem, char *err,
                   size_t errlen);

#endif
