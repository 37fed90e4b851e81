/* serve_engine.h — `prima serve`'s generator: the server's requests (server/server.h) run
 * through the same session and generation loop as `prima run`, on this device or round the
 * ring, so an answer equals `prima run`'s with the same settings and seed.
 *
 * Requests are generated one at a time in the one session; a request whose prompt starts with
 * the tokens already in the cache (a chat's next turn) evaluates only the rest. When the ring
 * fails, the request gets a 500 naming the device, the session is closed, and the next request
 * connects the ring again. */
#ifndef PRIMA_SERVE_ENGINE_H
#define PRIMA_SERVE_ENGINE_H

#include <pthread.h>

#include "cli/runner.h"
#include "server/server.h"

typedef struct serve_engine {
    runner *r;                 /* opened; its session may be closed and reopened */
    enum chat_template tpl;
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
} serve_engine;

void serve_engine_init(serve_engine *se, runner *r);
void serve_engine_free(serve_engine *se);
srv_engine serve_engine_iface(serve_engine *se);

#endif
