/* serve_engine.h — `prima serve`'s generator: the server's requests (server/server.h) run
 * through the same session layer and token loop as `prima run`, on this device or round the
 * ring, so an answer equals `prima run`'s with the same settings and seed.
 *
 * Up to n_slots requests are generated at once (serve_sched.c: continuous batching, a prompt
 * cache per slot). When the ring fails, the requests running get a 500 naming the device, the
 * session is closed, and the next request connects the ring again. */
#ifndef PRIMA_SERVE_ENGINE_H
#define PRIMA_SERVE_ENGINE_H

#include <pthread.h>

#include "app/runner.h"
#include "server/server.h"
#include "text/grammar.h"

#define SERVE_MAX_SLOTS 64

typedef struct serve_slot serve_slot;
typedef struct serve_mb serve_mb;

typedef struct serve_engine {
    runner *r;                 /* opened; its session may be closed and reopened */
    pthread_mutex_t mu;        /* what health and metrics read: */
    const char *state;         /* "ready", "connecting", "lost" */
    char detail[512];
    bool ring;                 /* a ring (else this device alone) */
    ring_plan plan;
    ring_counters dev[PRIMA_MAX_DEVICES];  /* totals per device of the current ring */
    int batches;
    uint64_t tokens;           /* generated, counted as they are sampled */
    double decode_s;           /* between consecutive tokens of a request */
    double snap_at;            /* when the counters were last read */
    struct serve_device {
        char addr[64];         /* as in --workers; "" for this device */
        char layers[128];      /* "0-2 6-8" */
        uint64_t mem_budget, weight_bytes;
        uint64_t resident_bytes;   /* of its windows, in memory when computed (last interval) */
        ring_counters at;          /* the counters when resident_bytes was last worked out */
    } devs[PRIMA_MAX_DEVICES];
    struct sched_left_out left_out[PRIMA_MAX_DEVICES];  /* the scheduler's, and why */
    int n_left_out;
    uint64_t steps, step_decode_rows, step_prefill_rows, steps_mixed;  /* the slots' steps */
    /* the engine thread's alone: */
    serve_slot *slots;
    int n_slots;
    serve_mb *mbs;             /* PRIMA_MAX_DEVICES, n_mbs of them in use */
    int n_mbs, max_mbs;        /* max_mbs: the in_flight asked for (0: no bound) */
    uint64_t clock;            /* orders the slots' admissions and uses */
    int next_slot;             /* where the next micro-batch starts looking for slots */
    grammar_vocab *gv;         /* the vocabulary's trie for constrained replies (made at the
                                * first one) */
    enum tool_format tool_fmt; /* how the model writes tool calls (found at the first use) */
    bool tool_fmt_known;
    bool thinks;               /* its template knows <think>: replies may open with reasoning */
    srv_job *embed;            /* an embeddings request waiting for a free slot and for the
                                * micro-batches in flight to come back */
} serve_engine;

/* Whether n_slots sequences at once go with the options (the runner's n_seq is to be
 * n_slots before its session opens): 1..SERVE_MAX_SLOTS, one with GPU layers or
 * speculative decoding (its drafts follow one sequence), one on a ring (its devices keep one
 * KV cache each). 0, or -1 with err naming the option. */
int serve_slots_check(const runner *r, int n_slots, char *err, size_t errlen);
/* n_slots sequences at once (serve_slots_check), in at most in_flight micro-batches at a time
 * (0: as many as the layers allow, a ring's devices; 1: every step one batch). 0, or -1 with
 * err. */
int serve_engine_init(serve_engine *se, runner *r, int n_slots, int in_flight, char *err,
                      size_t errlen);
void serve_engine_free(serve_engine *se);
/* What the model is, for the server's model views (Ollama's /api/tags and /api/show): its
 * general.name in name (cap bytes; "" without one), the rest in info, whose chat_template is
 * malloc'd (free it; NULL when the file has none). */
void serve_model_info(const runner *r, srv_model_info *info, char *name, size_t cap);
srv_engine serve_engine_iface(serve_engine *se);

/* Between serve_engine.c (the views: health, metrics, the cluster; the ring's state) and
 * serve_sched.c (the slots): */
double se_now(void);
/* Read the ring's plan and counters for the views (engine thread). */
void se_snapshot(serve_engine *se);
/* Before a request when nothing runs: (re)connect the ring, or let lost workers rejoin. false,
 * or true after finishing job with the 500 that says why. */
bool se_ring_ready(serve_engine *se, srv *sv, srv_job *job);
/* The ring failed (err): close its session, /health says lost. Nothing on one device. */
void se_ring_failed(serve_engine *se, const char *err);
/* The slots over the runner's session (its sequences; the session opened already, or later by
 * serve_slots_session). 0, or -1 with err. */
int serve_slots_open(serve_engine *se, int n, char *err, size_t errlen);
/* (Re)open the runner's session and the slots' sequences on it; close them (peers first). */
int serve_slots_session(serve_engine *se, char *err, size_t errlen);
void serve_slots_session_close(serve_engine *se);
void serve_slots_close(serve_engine *se);
/* The engine thread's body (srv_engine.serve), until the server stops. */
void serve_slots_loop(serve_engine *se, srv *sv);
/* serve_embed.c: answer an embeddings request with s, the session of a free slot and nothing
 * in flight (its history is evaluated over, and left empty), and finish it. false when the
 * layers failed (a ring: its session is to be closed, err says why; the job has its 500). */
bool serve_embed(serve_engine *se, srv *sv, srv_job *job, session *s, char *err, size_t errlen);

#endif
