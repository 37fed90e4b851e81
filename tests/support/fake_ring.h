/* fake_ring.h — a stand-in model for testing the ring runtime without the transformer: a small
 * file of "weights" (so prefetch and release have real pages to move) and layers that are a
 * cheap, order-sensitive function of the hidden state, the layer index and a per-layer cache of
 * earlier positions. Running the same batches through any split of the layers must give the
 * same floats bit for bit — exactly what a ring has to guarantee for the real model. */
#ifndef PRIMA_TEST_FAKE_RING_H
#define PRIMA_TEST_FAKE_RING_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/device.h"
#include "cluster/ring.h"
#include "cluster/worker.h"

typedef struct fake_model {
    ring_model rm;
    int fd;
    char path[256];
    uint64_t begin[64], end[64];
    ring_backend backend;
} fake_model;

/* A model of n_layer layers of layer_bytes each (after a head block) in an unlinked temporary
 * file. The identity is derived from id_seed: models with different seeds "differ". */
int fake_model_create(fake_model *fm, int n_layer, int n_embd, size_t layer_bytes, int id_seed);
void fake_model_destroy(fake_model *fm);

/* Layers with a cache for the owned ones (owns NULL: all), for one sequence or n_seq. */
int fake_layers_open(const fake_model *fm, const bool *owns, int n_ctx, ring_layers *out);
int fake_layers_open_seqs(const fake_model *fm, const bool *owns, int n_ctx, int n_seq,
                          ring_layers *out);
void fake_layers_close(ring_layers *l);

/* Fill fm->backend: layers opened with fake_layers_open for each session. */
void fake_backend_init(fake_model *fm);

/* A worker serving fm from a thread of this process. */
typedef struct fake_worker {
    worker *w;
    pthread_t thread;
    int port;
} fake_worker;

int fake_worker_start(fake_worker *fw, fake_model *fm, const ring_key *key);
/* The same with a deadline for a newcomer's handshake and HELLO (0: the default). */
int fake_worker_start_admit(fake_worker *fw, fake_model *fm, const ring_key *key, int admit_ms);
/* The same for any backend (a real model's engine_backend, say). */
int fake_worker_start_backend(fake_worker *fw, const ring_backend *b, const ring_key *key,
                              int admit_ms);
void fake_worker_stop(fake_worker *fw);

/* A worker serving fm in a child process on 127.0.0.1:*port (0: any free port; *port gets the
 * one bound), killed with the test. The child keeps no other descriptor of this process (a head's
 * links among them would outlive the head closing them). Returns the pid, or -1. */
int fake_worker_fork(fake_model *fm, int *port);

/* ring_connect, then the head's layers (a cache for those the plan gives it) into *layers.
 * NULL with err on failure. */
ring *fake_head_connect(const fake_model *fm, const ring_opts *o, ring_layers *layers, char *err,
                        size_t errlen);

/* A head of fm over `workers` ("host:port,...", a layer per device and round, a context of
 * 16) that evaluates one token and closes the ring: 0, or -1 with err. */
int fake_head_once(const fake_model *fm, const char *workers, const ring_key *key, char *err,
                   size_t errlen);

/* "127.0.0.1:p1,127.0.0.1:p2,..." */
void fake_worker_list(const fake_worker *fw, int n, char *out, size_t cap);

#endif
