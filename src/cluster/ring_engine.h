/* ring_engine.h — the ring runtime over prima's model: what the runtime needs to know about a
 * model file, a worker backend that computes with the engine, and the hook that makes a
 * session's batches go round the ring.
 *
 * Model identity: the root of the file's manifest (manifest.h: BLAKE2b-256 of every 4 MiB
 * chunk, computed once per file and cached), so two devices with the same identity hold the
 * same bytes, weights included. */
#ifndef PRIMA_RING_ENGINE_H
#define PRIMA_RING_ENGINE_H

#include "cluster/ring.h"
#include "cluster/worker.h"
#include "model/model.h"
#include "model/offload.h"
#include "model/session.h"

/* Fill rm from m (allocates the layer ranges; free with ring_model_release), with the manifest
 * of m's file, read from its cache or computed (reading the whole file once). */
int ring_model_init(ring_model *rm, const model *m, char *err, size_t errlen);
/* The same with the manifest mf (kept by the caller while rm lives): a store's model, whose
 * file holds only some chunks. It must describe m's file (size, header). */
int ring_model_init_with(ring_model *rm, const model *m, const struct manifest *mf, char *err,
                         size_t errlen);
void ring_model_release(ring_model *rm);


/* A worker backend over m: every session gets its own compute threads and an engine with KV
 * for the layers it owns, and the layers the plan puts on this device's GPU go to the GPU of
 * gpu (NULL: none; the layers then run on the CPU, said in the session's note). rm must
 * describe m. */
typedef struct engine_backend {
    ring_backend b;
    model *m;           /* its cache types are set per session, as the head's plan says */
    kern_ctx *kc;       /* the current session's threads: a worker serves one head at a time */
    offload_opts gpu;
    gpu_dev *dev;       /* the current session's GPU, when it holds layers */
} engine_backend;

void engine_backend_init(engine_backend *eb, const ring_model *rm, model *m,
                         const offload_opts *gpu);

/* A worker without a copy of the model: the model it computes is loaded from the file its
 * store holds in part (worker_opts.load and unload, with ctx an engine_loader). The layers
 * the plan puts on the GPU go to the GPU of gpu. */
typedef struct engine_loader {
    offload_opts gpu;
    model *m;           /* the model loaded, or NULL */
    ring_model rm;
    engine_backend eb;
} engine_loader;

int engine_loader_load(void *ctx, const char *path, const struct manifest *mf,
                       const ring_backend **out, char *err, size_t errlen);
void engine_loader_unload(void *ctx);

/* Send a session's batches round r (all layers: r's plan decides who computes what). */
session_layers ring_session_layers(ring *r);

/* A head: the ring and what it refers to. */
typedef struct ring_head {
    ring_model rm;
    ring *r;
    session *s;         /* the session whose engine computes the head's layers */
    kern_ctx *kc;       /* its threads */
    offload_opts gpu;   /* where the plan's GPU layers of the head go */
    gpu_dev *dev;       /* the GPU holding some of the head's layers, or NULL: close it
                         * (gpu_close) after freeing the session, which uses it */
    char note[PROTO_NOTE_MAX];  /* what became of the head's GPU layers ("" when it has none) */
} ring_head;

/* The session of a ring's head: connects per o (its n_ctx and max_batch are set here), creates
 * a session owning the head's layers only (sequence 0 of o->n_seq: session_create_peer gives
 * the others), puts the plan's GPU layers of the head on the GPU of gpu (NULL: none; they run
 * on the CPU, said in h->note), and starts the ring. Close the head before freeing the
 * session, and its GPU after. NULL with a message on failure (h is then closed and its GPU
 * too). */
session *ring_head_session(ring_head *h, const ring_opts *o, const offload_opts *gpu,
                           const model *m, kern_ctx *kc, int n_ctx, int n_batch, char *err,
                           size_t errlen);
/* Failover for the head's session s (see ring_set_failover): the head's engine takes the layers
 * of each new plan (with a GPU: a new engine, its GPU layers uploaded anew), and the cache is
 * rebuilt from the session's tokens. planner: for new plans
 * (NULL: by free memory); log: one line per recovery. 0, or -1 with err. */
int ring_head_failover(ring_head *h, session *s, const ring_planner *planner, FILE *log,
                       char *err, size_t errlen);
/* Between requests: lost workers that answer again, and those of `workers` (NULL: none), join
 * the ring (ring_rejoin). 0, or -1 with err. */
int ring_head_rejoin(ring_head *h, const char *workers, char *err, size_t errlen);
void ring_head_close(ring_head *h);

#endif
