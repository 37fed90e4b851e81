/* prima mkmodel — write a random-weight model of any shape as a GGUF file (model/synth.h). */
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "model/synth.h"

static const char usage_text[] =
    "usage: prima mkmodel -o OUT.gguf [options]\n"
    "\n"
    "Write a model with random weights as a GGUF file that prima (and llama.cpp) can load: the\n"
    "tensor and key names of a converted llama / qwen2 / qwen3 / gemma3 model, weights scaled so\n"
    "that activations stay sane (token_embd ~ N(0,1), matrices ~ N(0,1/n_in), norms ~\n"
    "N(1,0.05^2), qwen2 q/k/v biases ~ N(0,0.1^2)). The file is a pure function of the options (the seed\n"
    "included), whatever --threads says. It is streamed to disk in constant memory.\n"
    "\n"
    "  -o, --output FILE     the GGUF file to write (required)\n"
    "  --preset NAME         shape, vocabulary size and hyper-parameters of a published model:\n"
    "                        llama3-8b llama3-70b qwen2.5-14b qwen2.5-32b qwen2.5-72b\n"
    "                        qwen3-30b-a3b qwen3-235b-a22b (128 experts, 8 used); any\n"
    "                        option below overrides it (e.g. --layers 4 for a smaller file)\n"
    "  --arch A              llama | qwen2 (q/k/v biases) | qwen3 (q/k norms) |\n"
    "                        gemma3 (q/k norms, post-norms, GELU, sliding layers) |\n"
    "                        qwen3moe (q/k norms, experts)                      [llama]\n"
    "  --layers N            transformer blocks                                 [2]\n"
    "  --embd N              embedding width n_embd                             [256]\n"
    "  --ff N                feed-forward width n_ff                            [768]\n"
    "  --heads N             attention heads                                    [8]\n"
    "  --kv-heads N          key/value heads (divides --heads)                  [4]\n"
    "  --head-dim N          size of one head                                   [embd/heads]\n"
    "  --ctx N               training context length (metadata)                 [4096]\n"
    "  --experts N           experts per layer (llama: Mixtral-style; qwen3moe needs them);\n"
    "                        --ff is then an expert's width              [qwen3moe 8, else 0]\n"
    "  --experts-used K      experts a token is routed to                       [2]\n"
    "  --swa N               sliding window of the sliding layers (llama: every layer;\n"
    "                        gemma3: five of every six)             [gemma3 1024, else 0]\n"
    "  --rope-base F         rotary embedding frequency base      [llama 500000, qwen 1000000]\n"
    "  --rms-eps F           RMS norm epsilon                     [llama 1e-5, qwen 1e-6]\n"
    "  --vocab N             size of the built-in vocabulary, >= 258            [512]\n"
    "  --vocab-from FILE     copy the tokenizer.* keys of this GGUF instead; the vocabulary\n"
    "                        size is then that file's\n"
    "  --tied                no output.weight: the output layer reuses token_embd\n"
    "  --type T              weight types                                       [f32]\n"
    "                          f32 f16 bf16 q8_0: every matrix of that type\n"
    "                          q4_0 q4_k q5_k: that type, output.weight Q6_K\n"
    "                          q6_k: every matrix Q6_K\n"
    "                          q4_k_m q5_k_m: Q4_K / Q5_K, with Q6_K for output.weight and for\n"
    "                          attn_v and ffn_down in the first and last eighth of the layers\n"
    "                          and every third layer between (llama.cpp's Q4_K_M / Q5_K_M)\n"
    "                        Norms and biases are always F32. A matrix whose rows the type's\n"
    "                        block does not divide falls back to Q8_0, else F16. With --tied,\n"
    "                        token_embd gets the output.weight type.\n"
    "  --seed N              random seed                                        [1]\n"
    "  --name S              general.name                                       [synthetic]\n"
    "  --threads N           generator threads                                  [2]\n"
    "  -h, --help            show this help\n"
    "\n"
    "The built-in vocabulary is byte-level BPE without merges: ids 0-255 are the bytes, 256 is\n"
    "BOS <|begin_of_text|>, 257 EOS <|end_of_text|>, the rest unused [PADn] tokens.\n"
    "Exit status: 0 on success, 1 if the model cannot be written, 2 on a usage error.\n";

static int parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return cli_fail("mkmodel: %s needs an integer in %lld..%lld, not '%s'", flag, lo, hi, s);
    *out = v;
    return 0;
}

static int parse_float(const char *flag, const char *s, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || !isfinite((float)v))
        return cli_fail("mkmodel: %s needs a positive number, not '%s'", flag, s);
    *out = (float)v;
    return 0;
}

/* Integer options, applied after the preset and the architecture's defaults. */
static const struct int_opt {
    const char *flag;
    size_t offset;
} int_opts[] = {
    {"--layers", offsetof(synth_params, n_layer)},   {"--embd", offsetof(synth_params, n_embd)},
    {"--ff", offsetof(synth_params, n_ff)},          {"--heads", offsetof(synth_params, n_head)},
    {"--kv-heads", offsetof(synth_params, n_head_kv)}, {"--head-dim", offsetof(synth_params, head_dim)},
    {"--ctx", offsetof(synth_params, n_ctx)},        {"--vocab", offsetof(synth_params, n_vocab)},
    {"--threads", offsetof(synth_params, n_threads)}, {"--swa", offsetof(synth_params, n_swa)},
    {"--experts", offsetof(synth_params, n_expert)},
    {"--experts-used", offsetof(synth_params, n_expert_used)},
};
#define N_INT_OPTS (sizeof int_opts / sizeof int_opts[0])

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
    const char *out = NULL, *preset = NULL, *arch = NULL, *type = "f32", *vocab_from = NULL;
    const char *name = NULL;
    long long ints[N_INT_OPTS];
    bool int_set[N_INT_OPTS] = {false}, tied = false;
    float rope_base = 0, rms_eps = 0;
    long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(a, "--tied")) {
            tied = true;
            continue;
        }
        if (a[0] != '-')
            return cli_fail("mkmodel: unexpected argument '%s' (see prima mkmodel --help)", a), 2;
        if (i + 1 >= argc)
            return cli_fail("mkmodel: %s needs a value (see prima mkmodel --help)", a), 2;
        const char *v = argv[++i];
        size_t k = 0;
        while (k < N_INT_OPTS && strcmp(a, int_opts[k].flag))
            k++;
        if (k < N_INT_OPTS) {
            if (parse_int(a, v, 0, 1ll << 30, &ints[k]))
                return 2;
            int_set[k] = true;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = v;
        } else if (!strcmp(a, "--preset")) {
            preset = v;
        } else if (!strcmp(a, "--arch")) {
            arch = v;
        } else if (!strcmp(a, "--type")) {
            type = v;
        } else if (!strcmp(a, "--vocab-from")) {
            vocab_from = v;
        } else if (!strcmp(a, "--name")) {
            name = v;
        } else if (!strcmp(a, "--seed")) {
            if (parse_int(a, v, 0, 0x7fffffffffffffffll, &seed))
                return 2;
        } else if (!strcmp(a, "--rope-base")) {
            if (parse_float(a, v, &rope_base))
                return 2;
        } else if (!strcmp(a, "--rms-eps")) {
            if (parse_float(a, v, &rms_eps))
                return 2;
        } else {
            return cli_fail("mkmodel: unknown option '%s' (see prima mkmodel --help)", a), 2;
        }
    }
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
    for (size_t k = 0; k < N_INT_OPTS; k++)
        if (int_set[k])
            *(int *)((char *)&p + int_opts[k].offset) = (int)ints[k];
    if (rope_base > 0)
        p.rope_base = rope_base;
    if (rms_eps > 0)
        p.rms_eps = rms_eps;
    p.tied = p.tied || tied;
    p.seed = (uint64_t)seed;
    p.vocab_from = vocab_from;
    if (name)
        p.name = name;
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
