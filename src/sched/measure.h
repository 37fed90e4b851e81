/* measure.h — profiling this device: the numbers of profile.h, measured in a few seconds.
 *
 * Trustworthiness: every figure comes from repeated runs, each long enough for timer and thread
 * wake-up costs to vanish: the CPU's are the median (profile_typical_rate) of runs spread over
 * a fraction of a second or more (a busy neighbour then sets only some of them), the disk's the
 * bytes of all runs over their time (sustained: a throttled disk lets a short run through
 * faster than it streams); the largest relative spread is kept in the profile (noise), and
 * kernel rates are checked against the FMA peak (a matrix-vector product cannot beat its
 * two flops per weight by more than the integer dot-product paths allow). Devices that share
 * hardware must be profiled one after another: the head asks its workers in turn.
 *
 * Limits: under 10 s, under 0.5 GiB of memory (a 128 MiB bandwidth buffer, then one 128 MiB
 * matrix at a time, a 1 MiB read buffer), no file written. */
#ifndef PRIMA_MEASURE_H
#define PRIMA_MEASURE_H

#include <stdbool.h>
#include <stddef.h>

#include "sched/profile.h"

/* Progress of a measurement, for a caller that shows it: called as each part starts, with what
 * it measures ("memory bandwidth", "Q4_K kernels", "disk", "GPU") and the share of the whole
 * measurement's time done before it (0 to 1, from the time each part is given); at last with
 * "done" and 1 when the measurement succeeded. */
typedef void (*profile_progress_fn)(void *ctx, const char *what, double done);

typedef struct profile_opts {
    const char *model_path;  /* NULL: no disk test, CPU rates for every type the kernels compute */
    int threads;             /* 0: every CPU this process may run on */
    bool gpu;                /* also measure the GPU (gpu_index; -1: the default device) */
    int gpu_index;
    char *gpu_why;           /* gpu and none usable: why, gpu_why_len bytes (may be NULL) */
    size_t gpu_why_len;
    profile_progress_fn progress;   /* NULL: none */
    void *progress_ctx;
} profile_opts;

/* Runs a figure may have (more are not counted under a quota). */
#define PROFILE_MAX_RUNS 16

/* The CPU figure (kernel rate, bandwidth, calls per second) of n repeated runs v (sorted in
 * place; the spread, interquartile range / median, raises *spread): the median. It is what
 * decoding takes on a device whose cores are shared; the fastest run is what it takes at its
 * best moment (measured on the 2-core VM, one thread: decode's matrix products took 1.03-1.19x
 * the time the fastest rates predict, 0.99-1.12x the medians'; across profiles a minute apart
 * the median moves no more than the fastest, and the bandwidth's much less, so plans are as
 * repeatable). Under a CFS quota smaller than the threads (quota_share = quota / threads < 1),
 * runs that hit the throttle are stretched by an amount that depends on where in the quota
 * period they fell: those the quota throttled (throttled[i], from the cgroup's cpu.stat; NULL:
 * none) are left out, and the median of the others is scaled to the share of time the quota
 * grants (every run throttled: the fastest, scaled). The fastest alone was 31 % above a
 * same-CPU device's median on the shared VM (the paper-4dev phone against the laptop), and the
 * phone computed 34-43 % slower than predicted. */
double profile_typical_rate(double *v, const bool *throttled, int n, double quota_share,
                            double *spread);

/* Returns 0, or -1 with a one-line error (an unreadable model file, a weight type the kernels
 * cannot compute, a measurement that fails its sanity check). */
int profile_measure(const profile_opts *o, dev_profile *p, char *err, size_t errlen);

/* The GPU part of a profile (measure_gpu.c): device, VRAM, copy bandwidth, transfers, submit
 * latency and the matrix shaders' rates for the types marked in types (those without shaders
 * stay 0). A device that cannot be opened leaves gpu_present false and says why in o->gpu_why;
 * returns -1 with err only when a measurement on an open device fails. */
int profile_measure_gpu(const profile_opts *o, const bool *types, dev_profile *p, char *err,
                        size_t errlen);

/* Whether the GPU o asks for (gpu_index) opens on this device now. */
bool profile_gpu_here(const profile_opts *o);

/* Whether a saved profile p (a profile cache) is what profile_measure(o) would measure here,
 * apart from noise: the same host name, usable cores, threads and SIMD path, a rate for every
 * weight type of o's model, a disk figure when o has a model, a GPU when o asks for one and
 * this device has one (profile_gpu_here). Its memory figures are read afresh by the caller
 * (profile_memory). */
bool profile_matches(const dev_profile *p, const profile_opts *o);

/* This process's memory as the planner sees it: /proc/meminfo and the memory cgroup. */
int profile_memory(dev_profile *p, char *err, size_t errlen);

#endif
