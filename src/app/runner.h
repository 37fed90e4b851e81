/* runner.h — what a program that generates text holds: the options (app/options.h), the model,
 * its tokenizer, the compute threads, and the session it generates with (on this device, or as
 * the head of a ring). `prima run`, `prima cluster`'s head and `prima serve` open it the same
 * way; serve reopens the session after a ring failure. Errors come back as err strings. */
#ifndef PRIMA_RUNNER_H
#define PRIMA_RUNNER_H

#include "app/generate.h"
#include "app/options.h"
#include "app/progress.h"
#include "gpu/gpu.h"
#include "cluster/ring_engine.h"
#include "text/chat_format.h"

typedef struct runner {
    run_opts o;
    ring_args ra;
    ring_head rh;
    sched_planner sp;   /* plans the ring at the start and after a loss */
    app_progress prog;  /* the planner's progress */
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

/* Load the model and tokenizer, start the threads, open the sampler and set go from the
 * options: everything but the session. 0, or -1 with err. */
int runner_load(runner *r, char *err, size_t errlen);
/* runner_load, then the session. 0, or -1 with err. */
int runner_open(runner *r, char *err, size_t errlen);
/* (Re)open the session: on this device, or connect and start the ring. 0, or -1 with err. */
int runner_session(runner *r, char *err, size_t errlen);
/* Between requests: workers lost earlier that answer again, and with --discover those found
 * anew, join the ring (ring_head_rejoin). 0, or -1 with err. */
int runner_rejoin(runner *r, char *err, size_t errlen);
/* Close the session (saying bye to the ring's workers first). */
void runner_session_close(runner *r);
void runner_close(runner *r);

#endif
