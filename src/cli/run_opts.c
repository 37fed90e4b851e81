/* run_opts.c — the options every model-running command shares (run_opts.h), and the number
 * parsers all commands use, so that one flag means and is checked the same everywhere. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/runner.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "cluster/plan.h"
#include "model/spec.h"
#include "kernels/kern.h"

int parse_int_arg(const char *flag, const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_fail("%s: expected an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int parse_int_list(const char *s, long lo, long hi, int *out, int max)
{
    int n = 0;
    for (const char *p = s;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < lo || v > hi || (*end && *end != ',') || n == max)
            return -1;
        out[n++] = (int)v;
        if (!*end)
            return n;
        p = end + 1;
    }
}

int parse_counts_arg(const char *flag, const char *s, int *out, int *n)
{
    *n = parse_int_list(s, 0, 1 << 20, out, PRIMA_MAX_DEVICES);
    if (*n < 0) {
        *n = 0;
        cli_fail("%s: expected up to %d comma-separated layer counts (head first), got '%s'",
                 flag, PRIMA_MAX_DEVICES, s);
        return -1;
    }
    return 0;
}

int parse_float_arg(const char *flag, const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        cli_fail("%s: expected a number, got '%s'", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

int parse_gib_arg(const char *flag, const char *s, uint64_t *bytes)
{
    float v;
    if (parse_float_arg(flag, s, &v))
        return -1;
    if (v < 0 || v > 1e9f) {
        cli_fail("%s must be a non-negative size in GiB, got %s", flag, s);
        return -1;
    }
    *bytes = (uint64_t)((double)v * 1073741824.0);
    return 0;
}

/* --seed: a non-negative 64-bit integer, remembered as given (run_opts_finish draws one else). */
static int parse_seed(void *dst, const char *flag, const char *v)
{
    run_opts *o = dst;
    char *end;
    errno = 0;
    unsigned long long seed = strtoull(v, &end, 10);
    if (errno || end == v || *end || *v == '-') {
        cli_fail("%s: expected a non-negative integer, got '%s'", flag, v);
        return -1;
    }
    o->sp.seed = seed;
    o->seed_given = true;
    return 0;
}

/* --stop: repeatable, each a non-empty string. */
static int parse_stop(void *dst, const char *flag, const char *v)
{
    run_opts *o = dst;
    if (o->n_stop == RUN_OPTS_MAX_STOP) {
        cli_fail("%s: at most %d stop strings", flag, RUN_OPTS_MAX_STOP);
        return -1;
    }
    if (!*v) {
        cli_fail("%s: the stop string is empty", flag);
        return -1;
    }
    o->stop[o->n_stop++] = v;
    return 0;
}

#define F(field) offsetof(run_opts, field)
static const cli_opt model_rows[] = {
    {"-m --model", "FILE", CLI_STR, F(model),
     .help = "GGUF model (llama, qwen2, qwen3 or gemma3 architecture)"},
    {"-t --threads", "N", CLI_INT, F(n_threads), 1, KERN_MAX_THREADS,
     .help = "compute threads (default: the online CPUs)"},
    {"-c --ctx-size", "N", CLI_INT, F(n_ctx), 1, 1 << 24,
     .help = "context size in tokens (default: the model's training\ncontext, at most 4096)"},
    {"-b --batch-size", "N", CLI_INT, F(n_batch), 1, 1 << 16,
     .help = "prompt tokens evaluated per batch (default 512)"},
    {"--mlock", NULL, CLI_FLAG, F(mlock), .help = "lock the model's weights in RAM"},
    {"--repack", NULL, CLI_FLAG, F(repack),
     .help = "read the layers run on the CPU from a repacked copy\n"
             "of their weights (x86: Q4_K, Q8_0, on AVX-512 also Q6_K):\n"
             "faster decode and small batches; the copy is a file in\n"
             "the cache directory ($PRIMA_CACHE_DIR, else\n"
             "~/.cache/prima), made by the first run (docs/kernels.md)"},
    {"-ctk --cache-type-k", "T", CLI_STR, F(cache_type_k),
     .help = "KV cache type of the keys: f16 (default), q8_0 or q4_0\n"
             "(q8_0 about halves the cache; docs/kv-cache.md)"},
    {"-ctv --cache-type-v", "T", CLI_STR, F(cache_type_v), .help = "likewise for the values"},
    {0},
};
static const cli_opt gpu_rows[] = {
    {"-ngl --n-gpu-layers", "N", CLI_INT, F(n_gpu_layers), 0, INT_MAX,
     .help = "run the last N layers on the GPU (default 0; more than\nthe model has: all of them)"},
    {"--gpu", "N", CLI_INT, F(gpu_index), 0, 255,
     .help = "use Vulkan device N (default: the first discrete GPU,\nelse the first device)"},
    {"--no-gpu", NULL, CLI_FLAG, F(no_gpu), .help = "never use a GPU (overrides -ngl)"},
    {"--gpu-mem", "GiB", CLI_FLOAT, F(gpu_mem),
     .help = "VRAM prima may use (default: what is free); layers\nthat do not fit stay on the "
             "CPU, said at start-up"},
    {0},
};
static const cli_opt sampling_rows[] = {
    {"--repeat-penalty", "R", CLI_FLOAT, F(sp.repeat_penalty),
     .help = "divide positive / multiply negative logits of tokens in\nthe penalty window by R "
             "(default 1.0 = off)"},
    {"--presence-penalty", "P", CLI_FLOAT, F(sp.presence_penalty),
     .help = "subtract P from tokens in the window (default 0)"},
    {"--frequency-penalty", "F", CLI_FLOAT, F(sp.frequency_penalty),
     .help = "subtract F per occurrence in the window (default 0)"},
    {"--repeat-last-n", "N", CLI_INT, F(sp.repeat_last_n), 0, 1 << 20,
     .help = "penalty window: the last N tokens (default 64, 0 = off)"},
    {"--top-k", "K", CLI_INT, F(sp.top_k), 0, INT_MAX,
     .help = "keep the K most likely tokens (default 40, 0 = off)"},
    {"--top-p", "P", CLI_FLOAT, F(sp.top_p),
     .help = "keep the smallest set with probability >= P (default\n0.95, 1 = off)"},
    {"--min-p", "M", CLI_FLOAT, F(sp.min_p),
     .help = "keep tokens with p >= M * p_max (default 0.05, 0 = off)"},
    {"--temp", "T", CLI_FLOAT, F(sp.temp),
     .help = "temperature (default 0.8; 0 = greedy: the most likely\ntoken, ties to the lowest id)"},
    {"-s --seed", "S", CLI_FN, .fn = parse_seed,
     .help = "random seed (default: drawn from the clock, printed)"},
    {0},
};
static const cli_opt gen_rows[] = {
    {"-p --prompt", "TEXT", CLI_STR, F(prompt),
     .help = "the prompt (with -cnv: the system message)"},
    {"-f --file", "FILE", CLI_STR, F(prompt_file), .help = "read the prompt from FILE"},
    {"-n --n-predict", "N", CLI_INT, F(n_predict), -1, INT_MAX,
     .help = "tokens to generate (default -1: until an end-of-\ngeneration token or a full "
             "context)"},
    {"--ignore-eos", NULL, CLI_FLAG, F(ignore_eos),
     .help = "an end-of-generation token does not end the reply:\nit is generated like any "
             "other (random weights,\nbenchmarks: exactly -n tokens)"},
    {"--stop", "STR", CLI_FN, .fn = parse_stop,
     .help = "stop when the output contains STR (not printed);\nrepeatable, up to 16"},
    {"--context-shift", NULL, CLI_FLAG, F(context_shift),
     .help = "when the context is full, drop the oldest half of it\nafter the kept tokens and "
             "go on (default: stop)"},
    {"--keep", "N", CLI_INT, F(n_keep), -1, INT_MAX,
     .help = "tokens kept at the start on a context shift (default:\nthe BOS token if any; -1 = "
             "that default)"},
    {"-cnv --conversation", NULL, CLI_FLAG, F(conversation),
     .help = "interactive chat with the model's chat template (line\nediting and history at a "
             "terminal); Ctrl-C stops a\nreply; /help lists the commands (/clear, /save FILE);\n"
             "/exit, Ctrl-D or Ctrl-C at an empty prompt quits"},
    {"--no-display-prompt", NULL, CLI_UNSET, F(display_prompt),
     .help = "do not echo the prompt before the answer"},
    {0},
};
static const cli_opt chat_rows[] = {
    {"--chat-template", "FILE", CLI_STR, F(chat_template_file),
     .help = "format conversations with the Jinja template in FILE\ninstead of the model's "
             "(tokenizer.chat_template; a\nmodel without one gets a built-in format)"},
    {0},
};
static const cli_opt spec_rows[] = {
    {"-md --model-draft", "FILE", CLI_STR, F(draft_model),
     .help = "a draft model with the model's vocabulary, run on this\ndevice (the head)"},
    {"--spec", "ngram", CLI_STR, F(spec_mode),
     .help = "draft without a model: propose what followed the last\ntokens where they "
             "occurred before in the text"},
    {"--draft-max", "N", CLI_INT, F(draft_max), 1, SPEC_MAX_DRAFT,
     .help = "tokens drafted per step at most (default 16)"},
    {"--draft-min", "N", CLI_INT, F(draft_min), 0, SPEC_MAX_DRAFT,
     .help = "evaluate drafts of at least N tokens only (default 0)"},
    {"--draft-p-min", "P", CLI_FLOAT, F(draft_p_min),
     .help = "stop drafting when the draft model's most likely token\nhas a probability below "
             "P (default 0.8)"},
    {0},
};
#undef F

/* In the order of the help text; each group with the bit of run_opt_group that selects it. */
static const struct {
    unsigned bit;
    cli_group g;
} group_table[] = {
    {RUN_OPT_MODEL, {"model and compute:", model_rows, NULL}},
    {RUN_OPT_GPU, {"GPU (Vulkan; whole layers with their KV cache in VRAM):", gpu_rows,
                   "  In a ring, -ngl is refused: the plan's GPU layers apply (--gpu-layers, or the\n"
                   "  scheduler's, which profiles this device's GPU unless --no-gpu), on the GPU\n"
                   "  that --gpu, --no-gpu and --gpu-mem choose.\n"}},
    {RUN_OPT_SAMPLING, {"sampling (applied in this order):", sampling_rows, NULL}},
    {RUN_OPT_GEN, {"generation:", gen_rows, NULL}},
    {RUN_OPT_CHAT, {"chat:", chat_rows, NULL}},
    {RUN_OPT_SPEC, {"speculative decoding (a draft proposes tokens and the model checks several in one\n"
                    "evaluation, one pass round a ring; the output follows the model's distribution,\n"
                    "and under greedy sampling it is the same text):", spec_rows, NULL}},
};

int run_opts_sets(run_opts *o, cli_set *sets)
{
    int n = 0;
    for (size_t k = 0; k < sizeof group_table / sizeof group_table[0]; k++)
        if (o->groups & group_table[k].bit)
            sets[n++] = (cli_set){.g = &group_table[k].g, .dst = o};
    return n;
}

char *cli_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_fail("%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            cli_fail("%s: out of memory", path);
            return NULL;
        }
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1)
            break;
        cap *= 2;
        char *nb = realloc(buf, cap);
        if (!nb)
            free(buf);
        buf = nb;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        cli_fail("%s: read error", path);
        return NULL;
    }
    buf[len] = '\0';
    if (n)
        *n = len;
    return buf;
}

int run_opts_finish(run_opts *o)
{
    if ((o->groups & RUN_OPT_MODEL) && !o->model) {
        cli_fail("no model given (-m FILE)");
        return 2;
    }
    const char *kv[2] = {o->cache_type_k, o->cache_type_v};
    for (int i = 0; i < 2; i++) {
        o->kv_type[i] = DT_F16;
        if (kv[i] && !strcmp(kv[i], "q8_0"))
            o->kv_type[i] = DT_Q8_0;
        else if (kv[i] && !strcmp(kv[i], "q4_0"))
            o->kv_type[i] = DT_Q4_0;
        else if (kv[i] && strcmp(kv[i], "f16")) {
            cli_fail("%s: expected f16, q8_0 or q4_0, got '%s'", i ? "-ctv" : "-ctk", kv[i]);
            return 2;
        }
    }
    if ((o->groups & RUN_OPT_GPU) && !(o->gpu_mem >= 0.0f)) {
        cli_fail("--gpu-mem must be a non-negative size in GiB, got %g", (double)o->gpu_mem);
        return 2;
    }
    if (o->groups & RUN_OPT_SAMPLING) {
        if (o->sp.top_p <= 0.0f || o->sp.top_p > 1.0f) {
            cli_fail("--top-p must be in (0, 1], got %g", (double)o->sp.top_p);
            return 2;
        }
        if (o->sp.min_p < 0.0f || o->sp.min_p > 1.0f) {
            cli_fail("--min-p must be in [0, 1], got %g", (double)o->sp.min_p);
            return 2;
        }
        if (o->sp.repeat_penalty <= 0.0f) {
            cli_fail("--repeat-penalty must be positive, got %g", (double)o->sp.repeat_penalty);
            return 2;
        }
        if (!o->seed_given)
            o->sp.seed = run_opts_fresh_seed();
    }
    if (o->groups & RUN_OPT_GEN) {
        if (o->prompt && o->prompt_file) {
            cli_fail("give the prompt with -p or -f, not both");
            return 2;
        }
        if (o->prompt_file) {
            o->prompt_owned = cli_read_file(o->prompt_file, NULL);
            if (!o->prompt_owned)
                return 1;
            o->prompt = o->prompt_owned;
        }
    }
    if ((o->groups & RUN_OPT_CHAT) && o->chat_template_file &&
        !(o->chat_template = cli_read_file(o->chat_template_file, &o->chat_template_len)))
        return 1;
    if (o->groups & RUN_OPT_SPEC) {
        if (o->spec_mode && strcmp(o->spec_mode, "ngram")) {
            cli_fail("--spec: expected 'ngram', got '%s'", o->spec_mode);
            return 2;
        }
        if (o->spec_mode && o->draft_model) {
            cli_fail("give a draft model (-md) or --spec ngram, not both");
            return 2;
        }
        if (o->draft_min > o->draft_max) {
            cli_fail("--draft-min %d is larger than --draft-max %d", o->draft_min, o->draft_max);
            return 2;
        }
        if (o->draft_p_min < 0.0f || o->draft_p_min > 1.0f) {
            cli_fail("--draft-p-min must be in [0, 1], got %g", (double)o->draft_p_min);
            return 2;
        }
        o->speculate = o->spec_mode || o->draft_model;
    }
    return 0;
}

int runner_args(runner *r, unsigned groups, int argc, char **argv, const char *head,
                const char *tail, const cli_set *own, int n_own)
{
    run_opts_init(&r->o, groups | RUN_OPT_SPEC); /* every runner can speculate (runner_load) */
    ring_args_init(&r->ra);
    cli_set sets[CLI_MAX_SETS];
    int n = run_opts_sets(&r->o, sets);
    n += ring_args_sets(&r->ra, true, sets + n);
    for (int k = 0; k < n_own && n < CLI_MAX_SETS; k++)
        sets[n++] = own[k];
    int arc = cli_opts_parse(argv[0], sets, n, argc, argv, head, tail, NULL);
    if (arc)
        return arc;
    int rc = run_opts_finish(&r->o);   /* 2, or 1 for a prompt file that cannot be read */
    if (!rc && (ring_args_finish(&r->ra) || ring_args_check_local(&r->ra, &r->o)))
        rc = 2;
    if (rc)
        run_opts_free(&r->o);
    return rc;
}
