/* run_opts.h — the options shared by every command that loads and runs a model (`prima run`,
 * `prima logits`, `prima bench run`, and the distributed commands): one parser, one help text,
 * llama.cpp's flag names. A command picks the groups it accepts. */
#ifndef PRIMA_RUN_OPTS_H
#define PRIMA_RUN_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "app/options.h"
#include "cli/opts.h"

struct runner;

/* The option groups of o->groups (opts.h), each filling o, into sets (RUN_OPT_GROUPS of room),
 * in the order of the help text. Returns their count. */
#define RUN_OPT_GROUPS 6
int run_opts_sets(run_opts *o, cli_set *sets);
/* After the whole command line: check required options, read the prompt file, draw a seed.
 * Returns 0, or the exit status after printing an error: 2 for a usage error, 1 for a prompt
 * file that cannot be read (the rule for every file a command names, the model's included). */
int run_opts_finish(run_opts *o);
/* The whole of a file named on the command line, NUL-terminated (its length in *len when not
 * NULL), or NULL after printing an error naming it. */
char *cli_read_file(const char *path, size_t *len);

/* The command line of a command that runs a model: the run options of `groups` and of
 * speculative decoding (RUN_OPT_SPEC: the runner opens the speculator), the ring's with
 * discovery and failover, and the command's own groups (own, n_own), then the options' final
 * checks; the help is head, those groups in that order, and tail. Returns 0 to go on, -1 after
 * printing the help (-h: exit 0), or the exit status after an error: 2 for a usage error, 1
 * for a prompt file that cannot be read. */
int runner_args(struct runner *r, unsigned groups, int argc, char **argv, const char *head,
                const char *tail, const cli_set *own, int n_own);

/* Strict number parsing for command-line values: the whole string, in range. */
int parse_int_arg(const char *flag, const char *s, long lo, long hi, int *out);
/* "N,N,...": 1 to max integers in [lo, hi], none empty. The count, or -1 with nothing printed
 * (each list's caller says what it wanted). */
int parse_int_list(const char *s, long lo, long hi, int *out, int max);
/* Layer counts per device for FLAG (-lw, --gpu-layers): "N,N,...", head first, up to
 * PRIMA_MAX_DEVICES of them, into out and *n; -1 with the error printed. */
int parse_counts_arg(const char *flag, const char *s, int *out, int *n);
int parse_float_arg(const char *flag, const char *s, float *out);
/* A size in GiB (>= 0, fractions allowed), as bytes. */
int parse_gib_arg(const char *flag, const char *s, uint64_t *bytes);

#endif
