/* worker.h — a ring device other than the head: `prima worker`.
 *
 * A worker listens on one port. A head connects, proves (if configured) the cluster key,
 * checks that both hold the same model and sends a plan; the worker then sets up the layers it
 * owns, connects to its successor in the ring and serves batches until the head says bye or
 * disappears. Then it is back to waiting for the next head: one worker process serves any number
 * of runs. While it serves one head it refuses any other, naming the one it serves. */
#ifndef PRIMA_WORKER_H
#define PRIMA_WORKER_H

#include <stdbool.h>
#include <stdio.h>

#include "cluster/key.h"
#include "cluster/device.h"
#include "cluster/pager.h"
#include "cluster/store.h"

/* How a worker turns a plan into computable layers; opened for every session. */
typedef struct ring_backend {
    const ring_model *model;
    void *ctx;
    /* KV cache for the layers in owns only, for n_seq sequences of n_ctx positions each;
     * batches of at most max_batch tokens; K and V cached in kv_type (dtype ids, the head's;
     * 0: F16).
     * on_gpu (NULL: none) marks the owned layers the plan
     * puts on this device's GPU; note gets one line on what became of them (they run on the
     * CPU when there is no usable GPU), "" without them. */
    int (*open)(void *ctx, const bool *owns, const bool *on_gpu, int n_ctx, int n_seq,
                int max_batch, int threads, const uint8_t kv_type[2], ring_layers *out,
                char *note, size_t notelen, char *err, size_t errlen);
    void (*close)(void *ctx, ring_layers *layers);
} ring_backend;

typedef struct worker_opts {
    const char *host;          /* listen address (NULL: all interfaces) */
    int port;                  /* 0: any free port */
    int listen_fd;             /* >= 0: an already listening socket to use instead */
    int threads;               /* default compute threads when the head does not say */
    enum prefetch_method method;
    const ring_key *key;       /* the cluster key; NULL or unset: plaintext links only */
    int admit_ms;              /* a newcomer's handshake and HELLO deadline (0: PROTO_ADMIT_MS) */
    FILE *log;                 /* sessions, refusals and dropped links; NULL: silent */
    bool verbose;              /* also the counters of every batch */
    FILE *stats;               /* each head's plan for this device as worker_plan events
                                * (cluster/stats.h); NULL: none */
    /* A head's PROFILE request: this device measured for `threads` compute threads (0: the
     * worker's default), as NUL-terminated JSON text of under cap bytes. 0, or -1 with err.
     * NULL: profile requests are refused. */
    int (*profile)(void *ctx, int threads, char *json, size_t cap, char *err, size_t errlen);
    void *profile_ctx;
    /* A worker without a copy of the model: each head's model is fetched, chunk by chunk and
     * only the chunks its plan needs, into this store (store.h), from the head. NULL: the
     * backend's model only. With a store the backend given to worker_create may be NULL. */
    struct store *store;
    /* With a store: make the store's file of a model (path; its manifest mf, kept valid until
     * unload) computable: 0 with *out (valid until unload), or -1 with err. One at a time. */
    int (*load)(void *ctx, const char *path, const struct manifest *mf, const ring_backend **out,
                char *err, size_t errlen);
    void (*unload)(void *ctx);
    void *load_ctx;
} worker_opts;

typedef struct worker worker;

worker *worker_create(const worker_opts *o, const ring_backend *b, char *err, size_t errlen);
int worker_port(const worker *w);
/* Serve heads until worker_stop(); returns 0. */
int worker_run(worker *w);
/* Ask worker_run to return (async-signal-safe; any thread). */
void worker_stop(worker *w);
void worker_free(worker *w);

#endif
