/* prima mkmodel — write a random-weight model of any shape as a GGUF file (model/synth.h). */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "model/synth.h"

static const char usage_head[] =
    "usage: prima mkmodel -o OUT.gguf [options]\n"
    "\n"
    "Write a model with random weights as a GGUF file that prima (and llama.cpp) can load: the\n"
    "tensor and key names of a converted llama / qwen2 / qwen3 / gemma3 model, weights scaled so\n"
    "that activations stay sane (token_embd ~ N(0,1), matrices ~ N(0,1/n_in), norms ~\n"
    "N(1,0.05^2), qwen2 q/k/v biases ~ N(0,0.1^2)). The file is a pure function of the options (the seed\n"
    "included), whatever --threads says. It is streamed to disk in constant memory.\n"
    "\n";
static const char usage_tail[] =
    "\n"
    "The built-in vocabulary is byte-level BPE without merges: ids 0-255 are the bytes, 256 is\n"
    "BOS <|begin_of_text|>, 257 EOS <|end_of_text|>, the rest unused [PADn] tokens.\n"
    "Exit status: 0 on success, 1 if the model cannot be written, 2 on a usage error.\n";

/* What the command line gives; the shape's integers in over, -1 where not given (they apply
 * after the preset and the architecture's defaults). */
typedef struct mk_args {
    const char *out, *preset, *arch, *type, *vocab_from, *name;
    synth_params over;
    float rope_base, rms_eps;   /* 0: not given */
    long long seed;
    bool tied;
} mk_args;

static int parse_positive(void *dst, const char *flag, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || !isfinite((float)v))
        return cli_fail("mkmodel: %s needs a positive number, not '%s'", flag, s), -1;
    *(float *)((char *)dst + (!strcmp(flag, "--rope-base") ? offsetof(mk_args, rope_base)
                                                          : offsetof(mk_args, rms_eps))) = (float)v;
    return 0;
}

static int parse_seed(void *dst, const char *flag, const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return cli_fail("mkmodel: %s needs an integer in 0..%lld, not '%s'", flag, LLONG_MAX, s),
               -1;
    ((mk_args *)dst)->seed = v;
    return 0;
}

#define F(field) offsetof(mk_args, field)
#define SHAPE(field) CLI_INT, F(over.field), 0, 1 << 30
static const cli_opt mk_rows[] = {
    {"-o --output", "FILE", CLI_STR, F(out), .help = "the GGUF file to write (required)"},
    {"--preset", "NAME", CLI_STR, F(preset),
     .help = "shape, vocabulary size and hyper-parameters of a published model:\n"
             "llama3-8b llama3-70b qwen2.5-14b qwen2.5-32b qwen2.5-72b\n"
             "qwen3-30b-a3b qwen3-235b-a22b (128 experts, 8 used); any\n"
             "option below overrides it (e.g. --layers 4 for a smaller file)"},
    {"--arch", "A", CLI_STR, F(arch),
     .help = "llama | qwen2 (q/k/v biases) | qwen3 (q/k norms) |\n"
             "gemma3 (q/k norms, post-norms, GELU, sliding layers) |\n"
             "qwen3moe (q/k norms, experts)                      [llama]"},
    {"--layers", "N", SHAPE(n_layer), .help = "transformer blocks                                 [2]"},
    {"--embd", "N", SHAPE(n_embd), .help = "embedding width n_embd                             [256]"},
    {"--ff", "N", SHAPE(n_ff), .help = "feed-forward width n_ff                            [768]"},
    {"--heads", "N", SHAPE(n_head), .help = "attention heads                                    [8]"},
    {"--kv-heads", "N", SHAPE(n_head_kv),
     .help = "key/value heads (divides --heads)                  [4]"},
    {"--head-dim", "N", SHAPE(head_dim),
     .help = "size of one head                                   [embd/heads]"},
    {"--ctx", "N", SHAPE(n_ctx), .help = "training context length (metadata)                 [4096]"},
    {"--experts", "N", SHAPE(n_expert),
     .help = "experts per layer (llama: Mixtral-style; qwen3moe needs them);\n"
             "--ff is then an expert's width              [qwen3moe 8, else 0]"},
    {"--experts-used", "K", SHAPE(n_expert_used),
     .help = "experts a token is routed to                       [2]"},
    {"--swa", "N", SHAPE(n_swa),
     .help = "sliding window of the sliding layers (llama: every layer;\n"
             "gemma3: five of every six)             [gemma3 1024, else 0]"},
    {"--rope-base", "F", CLI_FN, .fn = parse_positive,
     .help = "rotary embedding frequency base      [llama 500000, qwen 1000000]"},
    {"--rms-eps", "F", CLI_FN, .fn = parse_positive,
     .help = "RMS norm epsilon                     [llama 1e-5, qwen 1e-6]"},
    {"--vocab", "N", SHAPE(n_vocab),
     .help = "size of the built-in vocabulary, >= 258            [512]"},
    {"--vocab-from", "FILE", CLI_STR, F(vocab_from),
     .help = "copy the tokenizer.* keys of this GGUF instead; the vocabulary\n"
             "size is then that file's"},
    {"--tied", NULL, CLI_FLAG, F(tied),
     .help = "no output.weight: the output layer reuses token_embd"},
    {"--type", "T", CLI_STR, F(type),
     .help = "weight types                                       [f32]\n"
             "  f32 f16 bf16 q8_0: every matrix of that type\n"
             "  q4_0 q4_k q5_k: that type, output.weight Q6_K\n"
             "  q6_k: every matrix Q6_K\n"
             "  q4_k_m q5_k_m: Q4_K / Q5_K, with Q6_K for output.weight and for\n"
             "  attn_v and ffn_down in the first and last eighth of the layers\n"
             "  and every third layer between (llama.cpp's Q4_K_M / Q5_K_M)\n"
             "Norms and biases are always F32. A matrix whose rows the type's\n"
             "block does not divide falls back to Q8_0, else F16. With --tied,\n"
             "token_embd gets the output.weight type."},
    {"--seed", "N", CLI_FN, .fn = parse_seed,
     .help = "random seed                                        [1]"},
    {"--name", "S", CLI_STR, F(name), .help = "general.name                                       [synthetic]"},
    {"--threads", "N", SHAPE(n_threads),
     .help = "generator threads                                  [2]"},
    {0},
};
#undef SHAPE
#undef F
static const cli_group mk_group = {NULL, mk_rows, NULL};

/* synth_write names what is wrong by its synth_params field; these are the flags that set them. */
static const cli_term synth_terms[] = {
    {"n_layer", "--layers"},     {"n_embd", "--embd"},       {"n_ff", "--ff"},
    {"n_head", "--heads"},       {"n_head_kv", "--kv-heads"}, {"head_dim", "--head-dim"},
    {"n_ctx", "--ctx"},          {"n_vocab", "--vocab"},     {"n_threads", "--threads"},
    {"n_swa", "--swa"},          {"n_expert", "--experts"},  {"n_expert_used", "--experts-used"},
    {"rope_base", "--rope-base"}, {"rms_eps", "--rms-eps"},  {NULL, NULL},
};

static int mkmodel_main(int argc, char **argv)
{
    mk_args a = {.type = "f32", .seed = 1};
    memset(&a.over, 0xff, sizeof a.over);   /* every integer -1: not given */
    const cli_set set = {.g = &mk_group, .dst = &a};
    int rc = cli_opts_parse("mkmodel", &set, 1, argc, argv, usage_head, usage_tail, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    const char *out = a.out, *preset = a.preset, *arch = a.arch, *type = a.type;
    if (!out)
        return cli_fail("mkmodel: missing -o OUT.gguf (see prima mkmodel --help)"), 2;

    synth_params p;
    synth_defaults(&p);
    if (preset && synth_preset(&p, preset))
        return cli_fail("mkmodel: unknown preset '%s' (one of: %s)", preset, synth_preset_names()), 2;
    if (arch) {
        const arch_desc *ad = arch_find(arch);
        if (!ad)
            return cli_fail("mkmodel: unknown --arch '%s' (llama, qwen2, qwen3, gemma3 or "
                            "qwen3moe)", arch), 2;
        p.arch = arch_id(ad);
        if (!preset && p.arch != ARCH_LLAMA) {
            p.rope_base = 1000000.0f;
            p.rms_eps = 1e-6f;
        }
        if (p.arch == ARCH_GEMMA3)
            p.n_swa = 1024;   /* Gemma 3's published window */
        if (p.arch == ARCH_QWEN3MOE)
            p.n_expert = 8;
    }
    int ft = synth_ftype_from_name(type);
    if (ft < 0)
        return cli_fail("mkmodel: unknown --type '%s' (see prima mkmodel --help)", type), 2;
    p.ftype = (enum synth_ftype)ft;
    for (const cli_opt *r = mk_rows; r->names; r++) {   /* the shape's integers given */
        size_t at = r->off - offsetof(mk_args, over);
        if (r->kind == CLI_INT && *(int *)((char *)&a.over + at) >= 0)
            *(int *)((char *)&p + at) = *(int *)((char *)&a.over + at);
    }
    if (a.rope_base > 0)
        p.rope_base = a.rope_base;
    if (a.rms_eps > 0)
        p.rms_eps = a.rms_eps;
    p.tied = p.tied || a.tied;
    p.seed = (uint64_t)a.seed;
    p.vocab_from = a.vocab_from;
    if (a.name)
        p.name = a.name;
    else if (preset)
        p.name = preset;

    char err[512];
    synth_stats st;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (synth_write(&p, out, &st, err, sizeof err)) {
        cli_say_flags(err, sizeof err, synth_terms);
        return cli_fail("mkmodel: %s", err);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("wrote %s: %llu tensors, %llu parameters, %llu bytes (%s) in %.2f s, %.0f MB/s\n", out,
           (unsigned long long)st.n_tensors, (unsigned long long)st.n_params,
           (unsigned long long)st.n_bytes, synth_ftype_name(p.ftype), s,
           s > 0 ? st.n_bytes / s / 1e6 : 0.0);
    return 0;
}

const struct cli_command cli_cmd_mkmodel = {"mkmodel", "write a random-weight model (any shape, presets) as GGUF",
                                            mkmodel_main};
