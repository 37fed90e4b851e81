/* runner.h — what a command that generates text holds: the options, the model, its tokenizer,
 * the compute threads, and the session it generates with (on this device, or as the head of a
 * ring). `prima run` and `prima serve` open it the same way; serve reopens the session after a
 * ring failure. */
#ifndef PRIMA_RUNNER_H
#define PRIMA_RUNNER_H

#include "app/generate.h"
#include "cli/progress.h"
#include "gpu/gpu.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "cluster/ring_engine.h"
#include "text/chat_format.h"

typedef struct runner {
    run_opts o;
    ring_args ra;
    ring_head rh;
    sched_planner sp;   /* plans the ring at the start and after a loss */
    cli_progress prog;  /* the planner's progress */
    model *m;
    model *draft;     /* -md */
    spec *spec;       /* -md or --spec (go.spec) */
    tokenizer *tk;
    chat_format *chat;  /* how conversations become prompts (-cnv, serve's chat endpoint) */
    kern_ctx *kc;
    session *s;
    gpu_dev *gpu;    /* the GPU holding some of the session's layers, or NULL */
    sampler *smp;
    gen_opts go;
    gen_stats st;
    int n_ctx;
    int n_seq;          /* sequences the session's engine holds, on every device of a ring (0:
                         * one; prima serve -np); with several, no failover */
    double load_s;
    double plan_s;      /* of load_s: the scheduler's profiling and planning (the last session) */
} runner;

/* The command line of a command that runs a model: the run options of `groups` and of
 * speculative decoding (RUN_OPT_SPEC: the runner opens the speculator), the ring's with
 * discovery and failover, and the command's own groups (own, n_own), then the options' final
 * checks; the help is head, those groups in that order, and tail. Returns 0 to go on, -1 after
 * printing the help (-h: exit 0), or the exit status after an error: 2 for a usage error, 1
 * for a prompt file that cannot be read. */
int runner_args(runner *r, unsigned groups, int argc, char **argv, const char *head,
                const char *tail, const cli_set *own, int n_own);
/* Load the model and tokenizer, start the threads, open the sampler and set go from the
 * options: everything but the session. 0, or 1 after printing an error. */
int runner_load(runner *r);
/* runner_load, then the session. 0, or 1 after printing an error. */
int runner_open(runner *r);
/* (Re)open the session: on this device, or connect and start the ring. 0, or -1 with err. */
int runner_session(runner *r, char *err, size_t errlen);
/* Between requests: workers lost earlier that answer again, and with --discover those found
 * anew, join the ring (ring_head_rejoin). 0, or -1 with err. */
int runner_rejoin(runner *r, char *err, size_t errlen);
/* Close the session (saying bye to the ring's workers first). */
void runner_session_close(runner *r);
void runner_close(runner *r);

#endif
