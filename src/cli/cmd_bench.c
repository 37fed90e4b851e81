/* prima bench — benchmarks, one sub-benchmark per file (see bench.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/run_opts.h"
#include "kernels/kern.h"
#include "kernels/probe.h"

static const struct bench_sub *const subs[] = {&bench_kernels, &bench_pages, &bench_run, &bench_plan,
                                              &bench_ring, &bench_serve, &bench_grammar};
#define N_SUBS (sizeof subs / sizeof subs[0])

static void usage(FILE *out)
{
    fprintf(out, "usage: prima bench NAME [options]   (prima bench NAME --help for its options)\n\n"
                 "Measure prima's building blocks on this machine. Results go to stdout as a\n"
                 "table, or with --json as one JSON object per measurement and line.\n\n"
                 "benchmarks:\n");
    for (size_t i = 0; i < N_SUBS; i++)
        fprintf(out, "  %-10s %s\n", subs[i]->name, subs[i]->summary);
    fprintf(out, "\nExit status: 0 on success, 1 if a measurement cannot run, 2 on a usage error.\n");
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_SUBS; i++)
        if (!strcmp(argv[1], subs[i]->name))
            return subs[i]->run(argc - 1, argv + 1);
    cli_fail("bench: unknown benchmark '%s' (see prima bench --help)", argv[1]);
    return 2;
}

const struct cli_command cli_cmd_bench = {"bench", "measure kernels and the machine's bounds", run};

void bench_print_json(cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

void bench_print_path_json(const char *path, const char *cpu)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", "path");
    cJSON_AddStringToObject(o, "path", path);
    if (cpu)
        cJSON_AddStringToObject(o, "cpu", cpu);
    bench_print_json(o);
}

void bench_print(const bench_result *r, bool json)
{
    if (json) {
        cJSON *o = cJSON_CreateObject();
        if (r->type)
            cJSON_AddStringToObject(o, "type", r->type);
        cJSON_AddStringToObject(o, "op", r->op);
        if (r->shape)
            cJSON_AddStringToObject(o, "shape", r->shape);
        if (r->source)
            cJSON_AddStringToObject(o, "source", r->source);
        if (r->tokens)
            cJSON_AddNumberToObject(o, "tokens", r->tokens);
        cJSON_AddNumberToObject(o, "threads", r->threads);
        cJSON_AddNumberToObject(o, "value", r->value);
        cJSON_AddStringToObject(o, "unit", r->unit);
        if (r->fraction >= 0)
            cJSON_AddNumberToObject(o, "fraction", r->fraction);
        if (r->spread >= 0)
            cJSON_AddNumberToObject(o, "spread", r->spread);
        bench_print_json(o);
        return;
    }
    /* Fixed-width columns under one header row (printed before the first row); the free-text
     * column (what was measured, and on what) comes last so that no length can shift the
     * others. */
    static bool header_done;
    if (!header_done) {
        printf("%-7s %-11s %6s %3s %9s %-7s %7s %6s  %s\n", "type", "shape", "tokens", "thr",
               "value", "unit", "bound", "spread", "measurement");
        header_done = true;
    }
    char frac[16] = "", spread[16] = "";
    if (r->fraction >= 0)
        snprintf(frac, sizeof frac, "%5.1f%%", 100 * r->fraction);
    if (r->spread >= 0)
        snprintf(spread, sizeof spread, "±%.0f%%", 50 * r->spread);
    char tok[16] = "";
    if (r->tokens)
        snprintf(tok, sizeof tok, "%d", r->tokens);
    /* three significant digits or more; "±" is two bytes in one column */
    double mag = fabs(r->value);
    int decimals = mag > 0 && mag < 1 ? 3 : mag < 100 ? 2 : 1;
    printf("%-7s %-11s %6s %3d %9.*f %-7s %7s %*s  %s%s%s\n", r->type ? r->type : "",
           r->shape ? r->shape : "", tok, r->threads, decimals, r->value, r->unit, frac,
           spread[0] ? 7 : 6, spread, r->op, r->source ? " " : "", r->source ? r->source : "");
    fflush(stdout);
}

#define PATTERN_ROWS 16

static uint64_t rng = 0x243f6a8885a308d3ull;

float bench_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 52) - 1.0);
}

void bench_fill_weights(enum dtype t, uint8_t *w, int n_in, long n_rows)
{
    const kern_type *kt = kern_type_get(t);
    size_t row_bytes = dtype_row_bytes(t, (uint64_t)n_in);
    long pattern = n_rows < PATTERN_ROWS ? n_rows : PATTERN_ROWS;
    float *f = malloc(sizeof(float) * (size_t)n_in * (size_t)pattern);
    if (!f) {
        fprintf(stderr, "prima: bench: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < (long)n_in * pattern; i++)
        f[i] = bench_rand();
    kt->from_float(f, w, (int64_t)n_in * pattern);
    free(f);
    for (long r = pattern; r < n_rows; r++)
        memcpy(w + (size_t)r * row_bytes, w + (size_t)(r % pattern) * row_bytes, row_bytes);
}

double bench_median_spread(double *v, int n, double *spread)
{
    double m = probe_median_spread(v, n, spread);
    if (n < 4 || m <= 0)
        *spread = -1;
    return m;
}
