/* worker_serve.h — what a ring worker is asked to serve: `prima worker`, and the workers that
 * `prima cluster` and the benchmarks start on this machine (local_workers.h). */
#ifndef PRIMA_WORKER_SERVE_H
#define PRIMA_WORKER_SERVE_H

#include <stdbool.h>

#include "cluster/pager.h"
#include "model/offload.h"

typedef struct serve_opts {
    const char *model_path;
    const char *host;          /* NULL: all interfaces */
    int port;
    int listen_fd;             /* >= 0: serve on this listening socket instead */
    int threads;
    enum prefetch_method method;
    const char *key_file;      /* NULL: $PRIMA_KEY_FILE or none */
    bool insecure;             /* no key: serve plaintext links (refused otherwise) */
    bool verbose;              /* counters of every batch */
    const char *stats_file;    /* each head's plan for this device, for programs; NULL: none */
    const char *profile_cache; /* --profile-cache: this device's saved profile; NULL: none */
    bool quiet;                /* no log at all */
    bool advertise;            /* answer discovery probes (cluster/discover.h) */
    int discovery_port;        /* UDP; 0: DISC_PORT */
    offload_opts gpu;          /* where the plan's GPU layers of this device go */
} serve_opts;

#endif
