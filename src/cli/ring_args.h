/* ring_args.h — the command-line options of a ring's head (`prima run`, `prima logits`,
 * `prima cluster`): which workers, which windows, and how devices move weights and activations,
 * read into a ring_args (app/options.h) beside run_opts. */
#ifndef PRIMA_RING_ARGS_H
#define PRIMA_RING_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "app/options.h"
#include "cli/opts.h"

/* The ring's option group (opts.h) filling a, and with answers the options of a head that
 * answers requests (run, logits, serve: discovery and failover; the benchmarks take no such
 * group), into sets (RING_ARGS_GROUPS of room). Returns their count. */
#define RING_ARGS_GROUPS 2
int ring_args_sets(ring_args *a, bool answers, cli_set *sets);
/* The help of --key, which heads and workers take alike. */
extern const char ring_args_key_help[];
/* --prefetch-method's value for flag (the head's and the worker's): 0, or -1 after an error. */
int parse_prefetch_method(const char *flag, const char *v, enum prefetch_method *out);
/* After the command line: check --gpu-layers against -lw, load the key; links to workers need
 * one, or --insecure. 0, or -1 after an error. */
int ring_args_finish(ring_args *a);
/* A --stats file (cluster/stats.h) opened for writing, or NULL after an error naming it. */
FILE *stats_file_open(const char *path);
/* -ngl and --repack are one device's: in a ring (ring_args_active) the plan's GPU layers
 * (--gpu-layers or the scheduler's) apply instead, every device reads its file as it is, and
 * both are refused. 0, or -1 after the error. */
int ring_args_check_local(const ring_args *a, const run_opts *o);

#endif
