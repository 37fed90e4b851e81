/* ring.h — the head's side of a pipelined ring: the one call that evaluates a batch through
 * every layer of the model, on this device alone or round a ring of workers.
 *
 *   ring_connect  connect to each worker, run the link handshake (key.h, link.h), check versions and model identity, make the
 *                 plan (from -lw/-k, else the planner's, else by free memory)
 *   ring_start    give the head's own layers (an engine owning plan_owned_layers(plan, 0)), send
 *                 every worker its plan, wait until all are ready
 *   ring_eval     hidden (n x n_embd, after the embedding) -> hidden after the last layer
 *   ring_submit   the same without waiting, several batches round the ring at once;
 *   ring_collect  their results in order (pipelining: device 1 computes batch B while device 2
 *                 computes batch A)
 *   ring_kv_*     KV-cache edits of one sequence on every device, in order with the batches
 *   ring_close    say bye, collect the last counters, print the summary when verbose
 *
 * With no workers the ring is this device alone (k rounds of its window), so a generation loop
 * written against ring_eval runs unchanged on one device or many. Every device keeps a KV cache
 * for each of n_seq sequences (ring_opts); a batch's rows name their sequence. Any failure of a worker — a
 * refusal, a dropped link, five seconds of silence — makes the call fail with a one-line
 * message naming the device (ring_error); the ring is unusable afterwards, unless failover is
 * on (ring_set_failover): then the ring re-plans on the devices left and goes on. */
#ifndef PRIMA_RING_H
#define PRIMA_RING_H

#include <stdbool.h>
#include <stdio.h>

#include "cluster/device.h"
#include "cluster/key.h"
#include "gguf/dtype.h"
#include "model/sample.h"

typedef struct ring ring;

/* What a planner is asked for: a plan of n_dev devices (head first) for the model's n_layer
 * layers, with k rounds (0: its choice), for these buffers (a KV cache of n_ctx positions for
 * each of n_seq sequences) and this wire format. */
typedef struct ring_plan_request {
    int n_dev, n_layer, k, n_ctx, n_seq, max_batch, worker_threads;
    enum wire_type wire;
    bool prefetch;
} ring_plan_request;

/* Chooses the plan when no windows are given (the scheduler). It may ask the workers for their
 * profiles and probe the links (ring_worker_profile, ring_probe), and leave workers out:
 * drop[d] (false on entry) for a device with window 0 that should not even forward. The ring
 * then says goodbye to those and closes over the rest, numbered anew in the same order.
 * 0, or -1 with err. */
typedef struct ring_planner {
    void *ctx;
    int (*plan)(void *ctx, ring *r, const ring_plan_request *q, ring_plan *out, bool *drop,
                char *err, size_t errlen);
} ring_planner;

typedef struct ring_opts {
    const char *workers;           /* "host:port,host:port,..."; NULL or "": no workers */
    const int *lw;                 /* one window per device, head first (n_lw 0: by memory) */
    int n_lw;
    const int *gpu_layers;         /* with lw: n_m, GPU layers of each window, head first */
    int n_gpu_layers;              /* 0: none; else n_lw */
    int k;                         /* rounds; 0: as the windows need (1 without -lw) */
    int n_ctx, max_batch;
    int n_seq;                     /* sequences, each with a KV cache of n_ctx positions on
                                    * every device (0 or 1: one; at most PROTO_MAX_SEQ) */
    int worker_threads;            /* 0: each worker's own default */
    enum dtype kv_type[2];         /* K and V cache types of every device (DT_F32, 0: F16) */
    bool prefetch;
    enum release_policy release;
    enum prefetch_method method;
    enum wire_type wire;
    const ring_key *key;           /* the cluster key; NULL or unset: none */
    FILE *verbose;                 /* counters per batch and device, and a summary; NULL: quiet */
    FILE *stats;                   /* the same counters as batch events (cluster/stats.h) */
    const ring_planner *planner;   /* without -lw; NULL: windows by free memory */
    /* While the head sends the workers that keep a store (store.h) the chunks of the model they
     * lack (its header when greeted, their plan's share before the plan): device d's bytes sent
     * so far of total, seconds since its transfer began; called a few times a second, and once
     * with done == total at the end (0 of 0: it held them all). NULL: quiet. */
    void (*on_transfer)(void *ctx, int d, uint64_t done, uint64_t total, double seconds);
    void *transfer_ctx;
} ring_opts;

ring *ring_connect(const ring_opts *o, const ring_model *m, char *err, size_t errlen);
/* The model the ring was connected with. */
const ring_model *ring_get_model(const ring *r);
const ring_plan *ring_get_plan(const ring *r);
/* For planners, between connecting and the plan. Device d >= 1's profile, measured by the
 * worker for `threads` threads (0: its default), as JSON text (NUL-terminated, under cap bytes;
 * RING_PROFILE_MAX holds any); waits while the worker measures. 0, or -1 with ring_error(r)
 * set. */
int ring_worker_profile(ring *r, int d, int threads, char *json, size_t cap);
#define RING_PROFILE_MAX PROTO_SMALL_MAX
/* Seconds for a PROBE frame with `bytes` (at most RING_PROBE_MAX) of payload to reach device
 * d >= 1 and come back: the median of `reps` round trips. 0, or -1 with ring_error(r) set. */
int ring_probe(ring *r, int d, size_t bytes, int reps, double *seconds);
#define RING_PROBE_MAX PROTO_PROBE_MAX
/* Device d >= 1's address as listed ("host:port"). */
const char *ring_worker_addr(const ring *r, int d);
int ring_start(ring *r, const ring_layers *head, char *err, size_t errlen);
/* 0, or -1 with ring_error(r) set. Row t is position pos[t] of sequence seq[t] (seq NULL: all
 * of sequence 0; the rules of engine_layers). Not while batches are in flight. A batch of at
 * least 4 rows per device (a prompt) goes round as one micro-batch per device, all in flight at
 * once, also with failover on (a failure evaluates the whole batch again). */
int ring_eval(ring *r, float *hidden, int n, const int32_t *pos, const int32_t *seq);
/* Pipelining. ring_submit sends a batch on its way (the head computes its own first window
 * here) and returns without waiting for it; hidden stays the caller's until ring_collect hands
 * it back holding the result; pos and seq are copied. Batches come back in the order they were
 * submitted, and every device sees them in that order, so a later batch may continue a
 * sequence an earlier one is still carrying. At most ring_max_in_flight are submitted and not
 * collected: one per device (1 with failover on, which only ring_eval recovers from). Every
 * device reads frames as they arrive (conn_inbox_start), so batches of any size overlap
 * without a cycle of devices blocked sending to each other. 0, or -1 with ring_error
 * set: a refusal (too many in flight, a bad row, not started) leaves the ring usable; a failure
 * of a device ends it (and what was in flight). */
int ring_submit(ring *r, float *hidden, int n, const int32_t *pos, const int32_t *seq);
/* Wait for the oldest batch in flight; *hidden = the pointer given to its submit. */
int ring_collect(ring *r, float **hidden);
int ring_in_flight(const ring *r);
int ring_max_in_flight(const ring *r);
/* KV-cache edits of sequence seq. Refused (the ring stays usable) while a batch with rows of
 * that sequence is on its way; edits of other sequences travel in order with the batches. */
int ring_kv_truncate(ring *r, int seq, int p0);
int ring_kv_shift(ring *r, int seq, int p0, int p1, int delta);
/* Decoding handed to the one device that holds every layer (the head holds none): no round
 * trip to the head per token, so a model that fits one worker runs there at that worker's own
 * speed, the head only receiving the tokens. Whether this ring's plan is such a one and says so
 * (decode_alone), nothing is in flight, and smp's penalty window fits a DECODE. */
bool ring_can_decode(const ring *r, const sampler *smp);
/* Evaluate `token` at position pos of sequence seq on that device, which then chooses the next
 * token with smp's state, evaluates it, and so on, up to max_steps tokens chosen. Each chosen
 * token is taken into smp (sampler_accept, and its random stream: smp is as if it had chosen
 * it) and given to on_token; non-zero from on_token halts. *n_tokens: the tokens given to
 * on_token; the KV caches then hold positions up to pos + *n_tokens - 1 (the input token and
 * every chosen one but the last: work the device did beyond is undone). 0; 1 when a worker was lost and failover can
 * recover (ring_eval does, before its batch: go on with it), *n_tokens as above; or -1 with
 * ring_error set (a refusal, when ring_can_decode is false, leaves the ring usable). */
int ring_decode(ring *r, int seq, int pos, int32_t token, int max_steps, sampler *smp,
                int (*on_token)(void *user, int32_t token), void *user, int *n_tokens);
const char *ring_error(const ring *r);
/* Device d's address as given in the workers' list ("" for the head, d = 0), and the memory
 * budget it reported when it greeted the head (the head's: read now). */
void ring_device(const ring *r, int d, char *addr, size_t cap, uint64_t *mem_budget);
/* Device d >= 1's line on what became of its GPU layers when it last became ready ("" when the
 * plan gave it none, or from a worker that sends no such line). */
const char *ring_device_note(const ring *r, int d);
/* Counters of device d summed over the batches counted so far. */
void ring_totals(const ring *r, int d, ring_counters *out);
/* Batches evaluated so far (the next one's serial number). */
int ring_batches(const ring *r);
/* Count only batches from this serial number on (e.g. decode steps, not the prompt); totals
 * restart from zero. Workers' counters of earlier batches that arrive later are left out. */
void ring_count_from(ring *r, int serial);
/* Failover. Without it, any failure of a worker ends the ring (above). With it, a worker whose
 * link closes, breaks or goes silent does not fail ring_eval or the KV edits: the head drops
 * every link, greets again the workers not known to be lost (one that does not answer is lost
 * too), plans over those that do (with `planner`, else by free memory; windows given by hand no
 * longer apply), gives the head its new layers (reown), brings every device's KV cache back to
 * the positions it held by running their inputs through the new ring, and evaluates the batch
 * again. The caller sees the batch's result, and one line on `log`: what was lost, the new plan,
 * how long the recovery took. F32 on the wire and a batch-size-invariant engine make the rebuilt
 * cache, and so the rest of the answer, exactly the uninterrupted run's; after a context shift
 * the rebuilt cache holds the shifted tokens computed afresh (not exact). It fails (ring_error)
 * only when no plan fits the devices left or this device itself fails. */
typedef struct ring_failover {
    void *ctx;
    /* The head's layers for a new plan: a KV cache for exactly the layers in owns, empty.
     * 0, or -1 with err. */
    int (*reown)(void *ctx, const bool *owns, ring_layers *out, char *err, size_t errlen);
    /* The ring's inputs (the hidden states after the embedding) at positions [p0, p0 + n) of
     * the sequence in the KV cache, n <= max_batch, into hidden. 0 or -1. */
    int (*inputs)(void *ctx, int p0, int n, float *hidden);
    const ring_planner *planner;   /* NULL: by free memory */
    FILE *log;                     /* one line per recovery; NULL: quiet */
} ring_failover;

/* After ring_start. 0, or -1 (out of memory, or more than one sequence on the ring: failover
 * rebuilds one sequence's cache). */
int ring_set_failover(ring *r, const ring_failover *f, char *err, size_t errlen);
/* Between requests, with failover on: the workers lost so far that accept a connection again,
 * and those of `workers` ("host:port,..."; NULL: none) not in the ring, join it: a new plan over
 * all of them, and the KV cache rebuilt as after a loss. Returns the number of workers in the
 * ring (unchanged when nobody new answers), or -1 with ring_error(r) set. */
int ring_rejoin(ring *r, const char *workers);
/* Say bye to every worker and collect their last counters (ring_totals is complete after it);
 * the ring evaluates nothing more. ring_close does this too. */
void ring_finish(ring *r);
void ring_close(ring *r);

#endif
