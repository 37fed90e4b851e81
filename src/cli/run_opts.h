/* run_opts.h — the options shared by every command that loads and runs a model (`prima run`,
 * `prima logits`, `prima bench run`, and the distributed commands): one parser, one help text,
 * llama.cpp's flag names. A command picks the groups it accepts. */
#ifndef PRIMA_RUN_OPTS_H
#define PRIMA_RUN_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/dtype.h"
#include "model/sample.h"

enum run_opt_group {
    RUN_OPT_SPEC = 16,    /* -md --spec --draft-max --draft-min --draft-p-min (runner_args) */
    RUN_OPT_MODEL = 1,    /* -m -t -c -b --mlock -ctk -ctv */
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
    const char *cache_type_k, *cache_type_v; /* -ctk, -ctv as given (NULL: f16) */
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
/* Parse argv[*i] (and its value, advancing *i) if it is an option of o's groups. Returns 1 if
 * consumed, 0 if it is not one of them, -1 after printing an error naming the flag. */
int run_opts_parse(run_opts *o, int argc, char **argv, int *i);
/* After the whole command line: check required options, read the prompt file, draw a seed.
 * Returns 0, or the exit status after printing an error: 2 for a usage error, 1 for a prompt
 * file that cannot be read (the rule for every file a command names, the model's included). */
int run_opts_finish(run_opts *o);
void run_opts_free(run_opts *o);
/* -ctk / -ctv on a loaded model: 0, or 1 after printing why the model cannot use them. */
struct model;
int run_opts_apply_kv(const run_opts *o, struct model *m);
/* The whole of a file named on the command line, NUL-terminated (its length in *len when not
 * NULL), or NULL after printing an error naming it. */
char *cli_read_file(const char *path, size_t *len);
/* A seed drawn from the clock and the process id: what a run without --seed samples with. */
uint64_t run_opts_fresh_seed(void);
/* The help lines of o's groups. */
void run_opts_usage(const run_opts *o, FILE *out);

/* Strict number parsing for command-line values: the whole string, in range. */
int parse_int_arg(const char *flag, const char *s, long lo, long hi, int *out);
/* "N,N,...": 1 to max integers in [lo, hi], none empty. The count, or -1 with nothing printed
 * (each list's caller says what it wanted). */
int parse_int_list(const char *s, long lo, long hi, int *out, int max);
/* Layer counts per device for FLAG (-lw, --gpu-layers): "N,N,...", head first, up to
 * PRIMA_MAX_DEVICES of them, into out and *n; -1 with the error printed. */
int parse_counts_arg(const char *flag, const char *s, int *out, int *n);
/* A thread count for FLAG: 1..KERN_MAX_THREADS, the one limit of every command (a count the
 * kernels cannot start is refused at start-up, not when a head connects). */
int parse_threads_arg(const char *flag, const char *s, int *out);
/* The default thread count: the online CPUs, within that limit. */
int default_threads(void);
int parse_float_arg(const char *flag, const char *s, float *out);
/* A size in GiB (>= 0, fractions allowed), as bytes. */
int parse_gib_arg(const char *flag, const char *s, uint64_t *bytes);

#endif
