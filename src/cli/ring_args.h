/* ring_args.h — the command-line options of a ring's head (`prima run`, `prima logits`,
 * `prima cluster`): which workers, which windows, and how devices move weights and activations.
 * Parsed beside run_opts; turned into cluster/ring.h options. */
#ifndef PRIMA_RING_ARGS_H
#define PRIMA_RING_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "cli/opts.h"
#include "cluster/key.h"
#include "cluster/ring_engine.h"
#include "sched/startup.h"

typedef struct ring_args {
    const char *workers;
    int lw[PRIMA_MAX_DEVICES];
    int n_lw;
    int gl[PRIMA_MAX_DEVICES];         /* --gpu-layers: GPU layers of each window */
    int n_gl;
    int k;
    int worker_threads;
    bool no_prefetch;
    bool no_failover;
    bool discover;
    int discovery_port;                /* 0: DISC_PORT */
    char all_workers[2048];            /* --workers, then the workers discovered */
    char discovered[2048];             /* the workers the last discovery found */
    bool discovery_done;               /* the first discovery added its workers */
    int64_t discovered_ns;             /* when the last discovery ran */
    enum release_policy release;
    enum prefetch_method method;
    enum wire_type wire;
    bool verbose;
    const char *key_file;          /* --key (or its old name --secret-file) */
    bool insecure;                 /* --insecure: plaintext links without a key */
    ring_key key;
    const char *stats_file;
    const char *profile_cache;     /* --profile-cache: the head's saved profile; NULL: none */
    FILE *stats;               /* opened by ring_args_finish; NULL without --stats */
} ring_args;

void ring_args_init(ring_args *a);
/* The ring's option group (opts.h) filling a, and with answers the options of a head that
 * answers requests (run, logits, serve: discovery and failover; the benchmarks take no such
 * group), into sets (RING_ARGS_GROUPS of room). Returns their count. */
#define RING_ARGS_GROUPS 2
int ring_args_sets(ring_args *a, bool answers, cli_set *sets);
/* --prefetch-method's value for flag (the head's and the worker's): 0, or -1 after an error. */
int parse_prefetch_method(const char *flag, const char *v, enum prefetch_method *out);
/* After the command line: check --gpu-layers against -lw, load the key; links to workers need
 * one, or --insecure. 0, or -1 after an error. */
int ring_args_finish(ring_args *a);
/* Whether the run goes through the ring runtime (workers, windows or rounds were given). */
bool ring_args_active(const ring_args *a);
/* The options for ring_connect (n_ctx and max_batch are the caller's). */
ring_opts ring_args_opts(const ring_args *a);
/* With --discover: probe the network for workers holding m's model with the same key, say
 * in one line on stderr what was found (the first time, and whenever it changes), and add
 * them after those of --workers (the first time; later calls, between requests, only update
 * a->discovered, with a shorter wait and at most every 10 s). 0, or -1 with
 * err. */
int ring_args_discover(ring_args *a, const model *m, char *err, size_t errlen);
/* Failover for a head's session s, unless --no-failover: new plans by Halda on sp's profiles
 * when the windows were not given by hand, else by free memory; one line per recovery on
 * stderr. sp must outlive the ring. 0, or -1 with err. */
int ring_args_failover(const ring_args *a, ring_head *h, session *s, sched_planner *sp,
                       char *err, size_t errlen);
/* A --stats file (cluster/stats.h) opened for writing, or NULL after an error naming it. */
FILE *stats_file_open(const char *path);

#endif
