/* bench.h — the sub-benchmarks of `prima bench`. Each lives in its own file (bench_NAME.c) and is
 * one entry in the table in cmd_bench.c; the helpers below give them one output format. */
#ifndef PRIMA_BENCH_H
#define PRIMA_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "kernels/types.h"

struct bench_sub {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the sub-benchmark's name */
};

extern const struct bench_sub bench_kernels;
extern const struct bench_sub bench_pages;
extern const struct bench_sub bench_run;
extern const struct bench_sub bench_plan;
extern const struct bench_sub bench_ring;
extern const struct bench_sub bench_serve;
extern const struct bench_sub bench_grammar;

/* One measurement. Absent fields: NULL strings, tokens 0, fraction and spread < 0. */
typedef struct bench_result {
    const char *type;   /* tensor type */
    const char *op;
    const char *shape;  /* "n_in x n_out" */
    const char *source; /* where the data came from (bench pages) */
    int tokens;
    int threads;
    double value;
    const char *unit;
    double fraction; /* of the measured bound (bandwidth or FMA peak) */
    double spread;   /* (p75 - p25) / median of the repetitions */
} bench_result;

/* Print as a text row, or with json as one JSON object on its own line. */
void bench_print(const bench_result *r, bool json);
/* Print o as one JSON line and free it: every JSON line goes through cJSON, so names that come
 * from the machine (a driver's, a CPU's) are escaped. */
void bench_print_json(cJSON *o);
/* The JSON line that opens a benchmark's output: the SIMD path, and the CPU's features when
 * cpu is not NULL. */
void bench_print_path_json(const char *path, const char *cpu);

/* Rows [0, n_rows) of weight type t with n_in elements each: quantized uniform random values.
 * Only the first few rows are quantized; the rest repeat them (the reference quantizers would
 * take longer than the benchmarks on matrices of Llama-3-8B size). */
void bench_fill_weights(enum dtype t, uint8_t *w, int n_in, long n_rows);

/* bench kernels --gpu (bench_gpu.c): the GPU's bounds, then the matrix shaders on the CPU
 * benchmark's shapes. */
typedef struct bench_gpu_args {
    bool json;
    int reps;
    const bool *only;         /* DT_COUNT entries, when filtered */
    bool filtered;
    const int (*shapes)[2];   /* matvec n_in x n_out */
    int n_shapes;
    const int *prefill;       /* the matmul's n_in x n_out */
    const int *tokens;        /* its token counts */
    int n_tokens;
} bench_gpu_args;
int bench_kernels_gpu(const bench_gpu_args *a);

/* Uniform in [-1, 1), from a fixed seed. */
float bench_rand(void);

/* Median and relative spread of n timings (sorts v); the spread is -1 below 4 timings, too few
 * for quartiles. */
double bench_median_spread(double *v, int n, double *spread);

#endif
