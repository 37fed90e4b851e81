/* local_workers.h — ring workers started as child processes of this one, on loopback ports
 * (prima cluster, prima bench ring). They never outlive their parent, even a killed one. */
#ifndef PRIMA_LOCAL_WORKERS_H
#define PRIMA_LOCAL_WORKERS_H

#include <stddef.h>
#include <sys/types.h>

#include "app/worker_serve.h"
#include "cluster/plan.h"

typedef struct local_workers {
    pid_t pid[PRIMA_MAX_DEVICES];
    int port[PRIMA_MAX_DEVICES];
    int n;
} local_workers;

/* Start n workers on free 127.0.0.1 ports, each a child process that runs serve(base, with its
 * listening socket) and exits with what it returns. cgroup (NULL: none) is a cgroup directory
 * each worker joins before it loads anything, so its memory (page cache of its layers
 * included) is held to that cgroup's limit. Call this before starting threads. Returns 0, or
 * -1 with err (nothing left running). */
int local_workers_start(local_workers *w, int n, const serve_opts *base, const char *cgroup,
                        int (*serve)(const serve_opts *o), char *err, size_t errlen);
/* "127.0.0.1:P1,127.0.0.1:P2,..." */
void local_workers_list(const local_workers *w, char *out, size_t cap);
/* SIGTERM, then SIGKILL after two seconds; waits for all. */
void local_workers_stop(local_workers *w);

#endif
