/* ring.h — the head's side of a pipelined ring: the one call that evaluates a batch through
 * every layer of the model, on this device alone or round a ring of workers.
 *
 *   ring_connect  connect to each worker, check versions, secrets and model identity, make the
 *                 plan (from -lw/-k, else by free memory)
 *   ring_start    give the head's own layers (an engine owning plan_owned_layers(plan, 0)), send
 *                 every worker its plan, wait until all are ready
 *   ring_eval     hidden (n x n_embd, after the embedding) -> hidden after the last layer
 *   ring_kv_*     KV-cache edits on every device, in order with the batches
 *   ring_close    say bye, collect the last counters, print the summary when verbose
 *
 * With no workers the ring is this device alone (k rounds of its window), so a generation loop
 * written against ring_eval runs unchanged on one device or many. Any failure of a worker — a
 * refusal, a dropped link, five seconds of silence — makes the call fail with a one-line
 * message naming the device (ring_error); the ring is unusable afterwards. */
#ifndef PRIMA_RING_H
#define PRIMA_RING_H

#include <stdbool.h>
#include <stdio.h>

#include "cluster/auth.h"
#include "cluster/device.h"

typedef struct ring_opts {
    const char *workers;           /* "host:port,host:port,..."; NULL or "": no workers */
    const int *lw;                 /* one window per device, head first (n_lw 0: by memory) */
    int n_lw;
    int k;                         /* rounds; 0: as the windows need (1 without -lw) */
    int n_ctx, max_batch;
    int worker_threads;            /* 0: each worker's own default */
    bool prefetch;
    enum release_policy release;
    enum prefetch_method method;
    enum wire_type wire;
    const ring_secret *secret;     /* NULL: none */
    FILE *verbose;                 /* counters per batch and device, and a summary; NULL: quiet */
} ring_opts;

typedef struct ring ring;

ring *ring_connect(const ring_opts *o, const ring_model *m, char *err, size_t errlen);
const ring_plan *ring_get_plan(const ring *r);
int ring_start(ring *r, const ring_layers *head, char *err, size_t errlen);
/* 0, or -1 with ring_error(r) set. pos: n positions of one sequence. */
int ring_eval(ring *r, float *hidden, int n, const int32_t *pos);
int ring_kv_truncate(ring *r, int p0);
int ring_kv_shift(ring *r, int p0, int p1, int delta);
const char *ring_error(const ring *r);
/* Counters of device d summed over every batch so far. */
void ring_totals(const ring *r, int d, ring_counters *out);
int ring_batches(const ring *r);
void ring_close(ring *r);

#endif
