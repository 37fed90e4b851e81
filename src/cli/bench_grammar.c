/* prima bench grammar — what constrained output costs per token: the token mask of a JSON
 * schema's grammar over a model's vocabulary (text/grammar.h), measured along random walks
 * (each token drawn among those the mask allows, a walk ending where the grammar is complete),
 * to set beside the model's time per output token (prima bench run). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "text/grammar.h"
#include "text/json_schema.h"

/* A tool call's arguments as agents declare them: strings, an enum, numbers, an array of
 * objects, optional properties, a date. */
static const char default_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\",\"maxLength\":40},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1},"
    "\"when\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"stops\":{\"type\":\"array\",\"maxItems\":3,\"items\":{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":24},\"lat\":{\"type\":\"number\"},"
    "\"lon\":{\"type\":\"number\"}},\"required\":[\"name\",\"lat\",\"lon\"]}},"
    "\"note\":{\"type\":[\"string\",\"null\"],\"maxLength\":60}},"
    "\"required\":[\"city\",\"unit\",\"stops\"],\"additionalProperties\":false}";

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char usage_text[] =
    "usage: prima bench grammar -m FILE [--schema FILE] [--tokens N] [--seed N] [--json]\n"
    "\n"
    "Measure the token mask of constrained output: a JSON schema's grammar (a tool\n"
    "call's arguments by default) over the vocabulary of FILE (any GGUF with a\n"
    "tokenizer), along random walks of N tokens in all, each token drawn among those\n"
    "the mask allows. Prints the vocabulary trie's build time and size, and per token\n"
    "the mask's time (mean, median, 95th percentile, max; wall and this thread's CPU\n"
    "time) and the tokens it allowed, to set beside the model's decode ms per token\n"
    "(prima bench run).\n"
    "\n";

typedef struct grammar_bench_args {
    const char *model, *schema;
    int tokens, seed;
    bool json;
} grammar_bench_args;

#define F(field) offsetof(grammar_bench_args, field)
static const cli_opt grammar_rows[] = {
    {"-m --model", "FILE", CLI_STR, F(model), .help = "a GGUF file with a tokenizer (required)"},
    {"--schema", "FILE", CLI_STR, F(schema), .help = "a JSON schema (default: a tool call's arguments)"},
    {"--tokens", "N", CLI_INT, F(tokens), 1, 1000000, .help = "tokens measured (default 256)"},
    {"--seed", "N", CLI_INT, F(seed), 0, 1 << 30, .help = "the walks' random seed (default 1)"},
    {"--json", NULL, CLI_FLAG, F(json),
     .help = "one JSON object per measurement and line (see prima bench\nkernels)"},
    {0},
};
#undef F
static const cli_group grammar_group = {NULL, grammar_rows, NULL};

static int run(int argc, char **argv)
{
    grammar_bench_args ga = {.tokens = 256, .seed = 1};
    const cli_set set = {.g = &grammar_group, .dst = &ga};
    int rc0 = cli_opts_parse("bench grammar", &set, 1, argc, argv, usage_text, NULL, NULL);
    if (rc0)
        return rc0 < 0 ? 0 : rc0;
    const char *model = ga.model, *schema_file = ga.schema;
    int tokens = ga.tokens;
    unsigned long long seed = (unsigned long long)ga.seed;
    bool json = ga.json;
    if (!model) {
        cli_fail("bench grammar: -m FILE is required (see --help)");
        return 2;
    }
    char err[512];
    char *text = NULL;
    if (schema_file) {
        FILE *f = fopen(schema_file, "rb");
        size_t cap = 1 << 20, n = 0;
        text = f ? malloc(cap + 1) : NULL;
        if (text)
            n = fread(text, 1, cap, f);
        if (f)
            fclose(f);
        if (!text) {
            cli_fail("bench grammar: cannot read %s", schema_file);
            return 1;
        }
        text[n] = '\0';
    }
    cJSON *schema = cJSON_Parse(text ? text : default_schema);
    free(text);
    char *gbnf = schema ? json_schema_grammar(schema, NULL, err, sizeof err) : NULL;
    cJSON_Delete(schema);
    if (!gbnf) {
        cli_fail("bench grammar: %s: %s", schema_file ? schema_file : "the schema",
                 schema ? err : "not JSON");
        return 1;
    }
    grammar *g = grammar_parse(gbnf, strlen(gbnf), err, sizeof err);
    free(gbnf);
    gguf_file *f = g ? gguf_open(model, err, sizeof err) : NULL;
    tokenizer *t = f ? tokenizer_load(f, err, sizeof err) : NULL;
    if (!t) {
        cli_fail("bench grammar: %s: %s", g ? model : "the schema's grammar", err);
        gguf_close(f);
        grammar_free(g);
        return 1;
    }
    double t0 = clock_s(CLOCK_MONOTONIC);
    grammar_vocab *v = grammar_vocab_new(t);
    double build = clock_s(CLOCK_MONOTONIC) - t0;
    int n_vocab = tokenizer_n_vocab(t);
    uint8_t *allowed = malloc((size_t)n_vocab);
    int32_t *ids = malloc(sizeof *ids * (size_t)n_vocab);
    double *wall = malloc(sizeof *wall * (size_t)tokens), *cpu = malloc(sizeof *cpu * (size_t)tokens);
    grammar_state *st = v ? grammar_state_new(g) : NULL;
    int rc = 0, walks = 1;
    double allowed_sum = 0;
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int k = 0; st && allowed && ids && wall && cpu && k < tokens; k++) {
        double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        int count = grammar_state_mask(st, v, allowed);
        cpu[k] = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        wall[k] = clock_s(CLOCK_MONOTONIC) - w0;
        if (count <= 0) {
            cli_fail("bench grammar: the mask allows no token (%d)", count);
            rc = 1;
            break;
        }
        allowed_sum += count;
        int n = 0;
        for (int id = 0; id < n_vocab; id++)
            if (allowed[id])
                ids[n++] = id;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        int32_t pick = ids[rng % (uint64_t)n];
        if (tokenizer_is_eog(t, pick) || !grammar_state_accept_token(st, v, pick) ||
            (grammar_state_complete(st) && !grammar_state_open(st))) {
            grammar_state_free(st); /* the walk is over: the next one starts */
            st = grammar_state_new(g);
            walks++;
        }
    }
    if (!st || !allowed || !ids || !wall || !cpu) {
        cli_fail("bench grammar: out of memory");
        rc = 1;
    }
    if (!rc) {
        double wall_sum = 0, cpu_sum = 0;
        for (int k = 0; k < tokens; k++) {
            wall_sum += wall[k];
            cpu_sum += cpu[k];
        }
        qsort(wall, (size_t)tokens, sizeof *wall, cmp_double);
        qsort(cpu, (size_t)tokens, sizeof *cpu, cmp_double);
        int p95 = (int)(0.95 * (tokens - 1));
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "op", "grammar_mask");
            cJSON_AddNumberToObject(o, "n_vocab", n_vocab);
            cJSON_AddNumberToObject(o, "trie_build_s", build);
            cJSON_AddNumberToObject(o, "tokens", tokens);
            cJSON_AddNumberToObject(o, "walks", walks);
            cJSON_AddNumberToObject(o, "allowed_mean", allowed_sum / tokens);
            cJSON_AddNumberToObject(o, "mask_ms_mean", wall_sum / tokens * 1e3);
            cJSON_AddNumberToObject(o, "mask_cpu_ms_mean", cpu_sum / tokens * 1e3);
            cJSON_AddNumberToObject(o, "mask_ms_median", wall[tokens / 2] * 1e3);
            cJSON_AddNumberToObject(o, "mask_ms_p95", wall[p95] * 1e3);
            cJSON_AddNumberToObject(o, "mask_ms_max", wall[tokens - 1] * 1e3);
            cJSON_AddNumberToObject(o, "mask_cpu_ms_median", cpu[tokens / 2] * 1e3);
            cJSON_AddNumberToObject(o, "mask_cpu_ms_p95", cpu[p95] * 1e3);
            cJSON_AddNumberToObject(o, "mask_cpu_ms_max", cpu[tokens - 1] * 1e3);
            bench_print_json(o);
        } else {
            printf("vocabulary %d tokens, trie built in %.3f s\n", n_vocab, build);
            printf("%d tokens in %d walks, %.0f tokens allowed per step on average\n", tokens,
                   walks, allowed_sum / tokens);
            printf("mask per token: wall ms mean %.3f, median %.3f, p95 %.3f, max %.3f; CPU ms "
                   "mean %.3f, median %.3f, p95 %.3f, max %.3f\n", wall_sum / tokens * 1e3,
                   wall[tokens / 2] * 1e3, wall[p95] * 1e3, wall[tokens - 1] * 1e3,
                   cpu_sum / tokens * 1e3, cpu[tokens / 2] * 1e3, cpu[p95] * 1e3,
                   cpu[tokens - 1] * 1e3);
        }
    }
    free(allowed);
    free(ids);
    free(wall);
    free(cpu);
    grammar_state_free(st);
    grammar_vocab_free(v);
    grammar_free(g);
    tokenizer_free(t);
    gguf_close(f);
    return rc;
}

const struct bench_sub bench_grammar = {"grammar", "the token mask of constrained output, per token", run};
