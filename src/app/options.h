/* options.h — what a run of a model is asked to do, as the application takes it: the model and
 * its compute, the GPU, sampling, generation, chat and speculative decoding (run_opts), and the
 * ring: workers, windows, how devices move weights and activations, discovery and failover
 * (ring_args). The command line fills them from its option tables (cli/run_opts.h,
 * cli/ring_args.h); a program may fill them itself. */
#ifndef PRIMA_APP_OPTIONS_H
#define PRIMA_APP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cluster/key.h"
#include "gguf/dtype.h"
#include "cluster/ring_engine.h"
#include "model/sample.h"
#include "sched/startup.h"

/* The parts of run_opts a program takes (the command line's option groups, cli/run_opts.h):
 * what run_opts_init sets up and run_opts_finish checks. */
enum run_opt_group {
    RUN_OPT_SPEC = 16,    /* -md --spec --draft-max --draft-min --draft-p-min (runner_args) */
    RUN_OPT_MODEL = 1,    /* -m -t -c -b --mlock --repack -ctk -ctv */
    RUN_OPT_SAMPLING = 2, /* --temp --top-k --top-p --min-p penalties --seed */
    RUN_OPT_GEN = 4,      /* -p -f -n --stop --context-shift --keep -cnv --no-display-prompt */
    RUN_OPT_GPU = 8,      /* -ngl --gpu --no-gpu --gpu-mem */
    RUN_OPT_CHAT = 32,    /* --chat-template */
};

#define RUN_OPTS_MAX_STOP 16

typedef struct run_opts {
    unsigned groups;
    /* model */
    const char *model;
    int n_threads;
    int n_ctx;           /* 0: min(4096, the model's training context) */
    int n_batch;
    bool mlock;
    bool repack;         /* keep the CPU layers' weights packed (model_keep_weights) */
    const char *cache_type_k, *cache_type_v; /* the KV cache's types as given (NULL: f16) */
    enum dtype kv_type[2];                   /* ... as types, by run_opts_finish */
    /* GPU */
    int n_gpu_layers;    /* the last N layers on the GPU (0: none, the GPU is not opened) */
    int gpu_index;       /* -1: the first discrete GPU, else the first device */
    bool no_gpu;
    float gpu_mem;       /* GiB of VRAM prima may use; 0: what is free */
    /* sampling */
    sampler_params sp;
    bool seed_given;
    /* generation */
    const char *prompt;
    const char *prompt_file;
    char *prompt_owned;  /* contents of prompt_file */
    int n_predict;       /* -1: until end of generation or a full context */
    bool ignore_eos;     /* an end-of-generation token is generated like any other */
    const char *stop[RUN_OPTS_MAX_STOP];
    int n_stop;
    bool context_shift;
    int n_keep;          /* -1: keep just the BOS token on a context shift */
    bool conversation;
    bool display_prompt;
    /* chat */
    const char *chat_template_file;
    char *chat_template;    /* its contents (NULL: the model's template) */
    size_t chat_template_len;
    /* speculative decoding */
    const char *draft_model;
    const char *spec_mode;  /* --spec: "ngram" */
    int draft_max, draft_min;
    float draft_p_min;
    bool speculate;         /* -md or --spec given */
} run_opts;

void run_opts_init(run_opts *o, unsigned groups);
void run_opts_free(run_opts *o);
/* A seed drawn from the clock and the process id: what a run without a seed samples with. */
uint64_t run_opts_fresh_seed(void);
struct model;
/* Give m's KV cache the types of o (kv_type): 0, or -1 with err. */
int run_opts_apply_kv(const run_opts *o, struct model *m, char *err, size_t errlen);
/* --repack against the device's weight budget (util/sysmem.h): 0 when not asked for or the
 * model's weights fit, else -1 with err. */
int run_opts_check_repack(const run_opts *o, const struct model *m, char *err, size_t errlen);
/* --repack: run_opts_check_repack, then the layers session s runs on the CPU, and the output,
 * kept packed (model_keep_weights): in a file in the cache directory (util/cachedir.h), or in
 * memory, with a warning, when that fails. 0 (also when not asked for), or -1 with err. */
int run_opts_apply_repack(const run_opts *o, struct model *m, kern_ctx *kc, const session *s,
                          char *err, size_t errlen);
/* The default thread count: the online CPUs, at most KERN_MAX_THREADS. */
int default_threads(void);

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

#endif
