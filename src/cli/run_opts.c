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

#include "cli/cli.h"
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

int parse_threads_arg(const char *flag, const char *s, int *out)
{
    return parse_int_arg(flag, s, 1, KERN_MAX_THREADS, out);
}

int default_threads(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu < 1 ? 1 : ncpu > KERN_MAX_THREADS ? KERN_MAX_THREADS : (int)ncpu;
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

void run_opts_init(run_opts *o, unsigned groups)
{
    memset(o, 0, sizeof *o);
    o->groups = groups;
    o->n_threads = default_threads();
    o->n_batch = 512;
    o->gpu_index = -1;
    sampler_params_default(&o->sp);
    o->n_predict = -1;
    o->n_keep = -1;
    o->display_prompt = true;
    spec_params sp;
    spec_params_default(&sp, SPEC_DRAFT);
    o->draft_max = sp.n_max;
    o->draft_min = sp.n_min;
    o->draft_p_min = sp.p_min;
}

enum opt_kind { OPT_FLAG, OPT_INT, OPT_FLOAT, OPT_STR, OPT_SEED, OPT_STOP };

struct opt_desc {
    const char *flag, *alt;
    unsigned group;
    enum opt_kind kind;
    size_t off;     /* of the field in run_opts */
    long lo, hi;    /* OPT_INT range */
};

#define F(field) offsetof(run_opts, field)
static const struct opt_desc opts[] = {
    {"-m", "--model", RUN_OPT_MODEL, OPT_STR, F(model), 0, 0},
    {"-t", "--threads", RUN_OPT_MODEL, OPT_INT, F(n_threads), 1, KERN_MAX_THREADS},
    {"-c", "--ctx-size", RUN_OPT_MODEL, OPT_INT, F(n_ctx), 1, 1 << 24},
    {"-b", "--batch-size", RUN_OPT_MODEL, OPT_INT, F(n_batch), 1, 1 << 16},
    {"--mlock", NULL, RUN_OPT_MODEL, OPT_FLAG, F(mlock), 0, 0},
    {"-ctk", "--cache-type-k", RUN_OPT_MODEL, OPT_STR, F(cache_type_k), 0, 0},
    {"-ctv", "--cache-type-v", RUN_OPT_MODEL, OPT_STR, F(cache_type_v), 0, 0},
    {"-ngl", "--n-gpu-layers", RUN_OPT_GPU, OPT_INT, F(n_gpu_layers), 0, INT_MAX},
    {"--gpu", NULL, RUN_OPT_GPU, OPT_INT, F(gpu_index), 0, 255},
    {"--no-gpu", NULL, RUN_OPT_GPU, OPT_FLAG, F(no_gpu), 0, 0},
    {"--gpu-mem", NULL, RUN_OPT_GPU, OPT_FLOAT, F(gpu_mem), 0, 0},
    {"--temp", NULL, RUN_OPT_SAMPLING, OPT_FLOAT, F(sp.temp), 0, 0},
    {"--top-k", NULL, RUN_OPT_SAMPLING, OPT_INT, F(sp.top_k), 0, INT_MAX},
    {"--top-p", NULL, RUN_OPT_SAMPLING, OPT_FLOAT, F(sp.top_p), 0, 0},
    {"--min-p", NULL, RUN_OPT_SAMPLING, OPT_FLOAT, F(sp.min_p), 0, 0},
    {"--repeat-penalty", NULL, RUN_OPT_SAMPLING, OPT_FLOAT, F(sp.repeat_penalty), 0, 0},
    {"--repeat-last-n", NULL, RUN_OPT_SAMPLING, OPT_INT, F(sp.repeat_last_n), 0, 1 << 20},
    {"--presence-penalty", NULL, RUN_OPT_SAMPLING, OPT_FLOAT, F(sp.presence_penalty), 0, 0},
    {"--frequency-penalty", NULL, RUN_OPT_SAMPLING, OPT_FLOAT, F(sp.frequency_penalty), 0, 0},
    {"-s", "--seed", RUN_OPT_SAMPLING, OPT_SEED, F(sp.seed), 0, 0},
    {"-p", "--prompt", RUN_OPT_GEN, OPT_STR, F(prompt), 0, 0},
    {"-f", "--file", RUN_OPT_GEN, OPT_STR, F(prompt_file), 0, 0},
    {"-n", "--n-predict", RUN_OPT_GEN, OPT_INT, F(n_predict), -1, INT_MAX},
    {"--stop", NULL, RUN_OPT_GEN, OPT_STOP, 0, 0, 0},
    {"--ignore-eos", NULL, RUN_OPT_GEN, OPT_FLAG, F(ignore_eos), 0, 0},
    {"--context-shift", NULL, RUN_OPT_GEN, OPT_FLAG, F(context_shift), 0, 0},
    {"--keep", NULL, RUN_OPT_GEN, OPT_INT, F(n_keep), -1, INT_MAX},
    {"-cnv", "--conversation", RUN_OPT_GEN, OPT_FLAG, F(conversation), 0, 0},
    {"--chat-template", NULL, RUN_OPT_CHAT, OPT_STR, F(chat_template_file), 0, 0},
    {"-md", "--model-draft", RUN_OPT_SPEC, OPT_STR, F(draft_model), 0, 0},
    {"--spec", NULL, RUN_OPT_SPEC, OPT_STR, F(spec_mode), 0, 0},
    {"--draft-max", NULL, RUN_OPT_SPEC, OPT_INT, F(draft_max), 1, SPEC_MAX_DRAFT},
    {"--draft-min", NULL, RUN_OPT_SPEC, OPT_INT, F(draft_min), 0, SPEC_MAX_DRAFT},
    {"--draft-p-min", NULL, RUN_OPT_SPEC, OPT_FLOAT, F(draft_p_min), 0, 0},
};
#undef F

int run_opts_parse(run_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--no-display-prompt") && (o->groups & RUN_OPT_GEN)) {
        o->display_prompt = false;
        return 1;
    }
    const struct opt_desc *d = NULL;
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++)
        if ((opts[k].group & o->groups) &&
            (!strcmp(a, opts[k].flag) || (opts[k].alt && !strcmp(a, opts[k].alt))))
            d = &opts[k];
    if (!d)
        return 0;
    char *field = (char *)o + d->off;
    if (d->kind == OPT_FLAG) {
        *(bool *)field = true;
        return 1;
    }
    if (*i + 1 >= argc) {
        cli_fail("%s needs a value", a);
        return -1;
    }
    const char *v = argv[++*i];
    switch (d->kind) {
    case OPT_INT:
        return parse_int_arg(a, v, d->lo, d->hi, (int *)field) ? -1 : 1;
    case OPT_FLOAT:
        return parse_float_arg(a, v, (float *)field) ? -1 : 1;
    case OPT_STR:
        *(const char **)field = v;
        return 1;
    case OPT_SEED: {
        char *end;
        errno = 0;
        unsigned long long seed = strtoull(v, &end, 10);
        if (errno || end == v || *end || *v == '-') {
            cli_fail("%s: expected a non-negative integer, got '%s'", a, v);
            return -1;
        }
        o->sp.seed = seed;
        o->seed_given = true;
        return 1;
    }
    case OPT_STOP:
        if (o->n_stop == RUN_OPTS_MAX_STOP) {
            cli_fail("--stop: at most %d stop strings", RUN_OPTS_MAX_STOP);
            return -1;
        }
        if (!*v) {
            cli_fail("--stop: the stop string is empty");
            return -1;
        }
        o->stop[o->n_stop++] = v;
        return 1;
    case OPT_FLAG:
        break;
    }
    return 1;
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

int run_opts_apply_kv(const run_opts *o, model *m)
{
    char err[256];
    if (model_set_kv_types(m, o->kv_type[0], o->kv_type[1], err, sizeof err))
        return cli_fail("-ctk/-ctv: %s", err);
    return 0;
}

uint64_t run_opts_fresh_seed(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
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

void run_opts_free(run_opts *o)
{
    free(o->prompt_owned);
    o->prompt_owned = NULL;
    free(o->chat_template);
    o->chat_template = NULL;
}

void run_opts_usage(const run_opts *o, FILE *out)
{
    if (o->groups & RUN_OPT_MODEL)
        fputs("model and compute:\n"
              "  -m, --model FILE        GGUF model (llama, qwen2, qwen3 or gemma3 architecture)\n"
              "  -t, --threads N         compute threads (default: the online CPUs)\n"
              "  -c, --ctx-size N        context size in tokens (default: the model's training\n"
              "                          context, at most 4096)\n"
              "  -b, --batch-size N      prompt tokens evaluated per batch (default 512)\n"
              "  --mlock                 lock the model's weights in RAM\n"
              "  -ctk, --cache-type-k T  KV cache type of the keys: f16 (default), q8_0 or q4_0\n"
              "                          (q8_0 about halves the cache; docs/kv-cache.md)\n"
              "  -ctv, --cache-type-v T  likewise for the values\n",
              out);
    if (o->groups & RUN_OPT_GPU)
        fputs("GPU (Vulkan; whole layers with their KV cache in VRAM):\n"
              "  -ngl, --n-gpu-layers N  run the last N layers on the GPU (default 0; more than\n"
              "                          the model has: all of them)\n"
              "  --gpu N                 use Vulkan device N (default: the first discrete GPU,\n"
              "                          else the first device)\n"
              "  --no-gpu                never use a GPU (overrides -ngl)\n"
              "  --gpu-mem GiB           VRAM prima may use (default: what is free); layers\n"
              "                          that do not fit stay on the CPU, said at start-up\n"
              "  In a ring, -ngl is refused: the plan's GPU layers apply (--gpu-layers, or the\n"
              "  scheduler's, which profiles this device's GPU unless --no-gpu), on the GPU\n"
              "  that --gpu, --no-gpu and --gpu-mem choose.\n",
              out);
    if (o->groups & RUN_OPT_SAMPLING)
        fputs("sampling (applied in this order):\n"
              "  --repeat-penalty R      divide positive / multiply negative logits of tokens in\n"
              "                          the penalty window by R (default 1.0 = off)\n"
              "  --presence-penalty P    subtract P from tokens in the window (default 0)\n"
              "  --frequency-penalty F   subtract F per occurrence in the window (default 0)\n"
              "  --repeat-last-n N       penalty window: the last N tokens (default 64, 0 = off)\n"
              "  --top-k K               keep the K most likely tokens (default 40, 0 = off)\n"
              "  --top-p P               keep the smallest set with probability >= P (default\n"
              "                          0.95, 1 = off)\n"
              "  --min-p M               keep tokens with p >= M * p_max (default 0.05, 0 = off)\n"
              "  --temp T                temperature (default 0.8; 0 = greedy: the most likely\n"
              "                          token, ties to the lowest id)\n"
              "  -s, --seed S            random seed (default: drawn from the clock, printed)\n",
              out);
    if (o->groups & RUN_OPT_GEN)
        fputs("generation:\n"
              "  -p, --prompt TEXT       the prompt (with -cnv: the system message)\n"
              "  -f, --file FILE         read the prompt from FILE\n"
              "  -n, --n-predict N       tokens to generate (default -1: until an end-of-\n"
              "                          generation token or a full context)\n"
              "  --ignore-eos            an end-of-generation token does not end the reply:\n"
              "                          it is generated like any other (random weights,\n"
              "                          benchmarks: exactly -n tokens)\n"
              "  --stop STR              stop when the output contains STR (not printed);\n"
              "                          repeatable, up to 16\n"
              "  --context-shift         when the context is full, drop the oldest half of it\n"
              "                          after the kept tokens and go on (default: stop)\n"
              "  --keep N                tokens kept at the start on a context shift (default:\n"
              "                          the BOS token if any; -1 = that default)\n"
              "  -cnv, --conversation    interactive chat with the model's chat template (line\n"
              "                          editing and history at a terminal); Ctrl-C stops a\n"
              "                          reply; /help lists the commands (/clear, /save FILE);\n"
              "                          /exit, Ctrl-D or Ctrl-C at an empty prompt quits\n"
              "  --no-display-prompt     do not echo the prompt before the answer\n",
              out);
    if (o->groups & RUN_OPT_CHAT)
        fputs("chat:\n"
              "  --chat-template FILE    format conversations with the Jinja template in FILE\n"
              "                          instead of the model's (tokenizer.chat_template; a\n"
              "                          model without one gets a built-in format)\n",
              out);
    if (o->groups & RUN_OPT_SPEC)
        fputs("speculative decoding (a draft proposes tokens and the model checks several in one\n"
              "evaluation, one pass round a ring; the output follows the model's distribution,\n"
              "and under greedy sampling it is the same text):\n"
              "  -md, --model-draft FILE a draft model with the model's vocabulary, run on this\n"
              "                          device (the head)\n"
              "  --spec ngram            draft without a model: propose what followed the last\n"
              "                          tokens where they occurred before in the text\n"
              "  --draft-max N           tokens drafted per step at most (default 16)\n"
              "  --draft-min N           evaluate drafts of at least N tokens only (default 0)\n"
              "  --draft-p-min P         stop drafting when the draft model's most likely token\n"
              "                          has a probability below P (default 0.8)\n",
              out);
}
