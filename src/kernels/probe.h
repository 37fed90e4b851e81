/* probe.h — measurements of the machine the kernels are bounded by: memory read bandwidth and
 * peak floating-point multiply-add throughput. Used by `prima bench kernels` to state how close
 * each kernel gets to its bound, and available to device profiling. */
#ifndef PRIMA_PROBE_H
#define PRIMA_PROBE_H

#include <stddef.h>

#include "kernels/kern.h"

/* Streaming read bandwidth in bytes/s over a buffer of `bytes` (make it much larger than the
 * last-level cache), read by every thread of c, each its own slice: the median of `reps` passes.
 * Returns -1 if the buffer cannot be allocated. */
double probe_read_bandwidth(kern_ctx *c, size_t bytes, int reps);

/* The same buffer kept for passes timed by the caller (device profiling spreads them over a
 * second): created filled and in memory (NULL if it cannot be allocated); a pass reads it all,
 * every thread of c its own slice, and returns its bytes. */
typedef struct probe_buf probe_buf;
probe_buf *probe_buf_create(kern_ctx *c, size_t bytes);
double probe_buf_pass(kern_ctx *c, probe_buf *b);
void probe_buf_free(probe_buf *b);

/* Peak single-precision FLOP/s (a multiply-add counts as 2) of independent FMA chains on every
 * thread of c, with the widest vectors of the active kernel path: the median of `reps` runs. */
double probe_fma_peak(kern_ctx *c, int reps);

/* Seconds on a monotonic clock. */
double probe_now(void);

/* Median of v[0..n) (sorts v in place). */
double probe_median(double *v, int n);
/* The same, and the runs' relative spread: interquartile range / median (0 when the median is
 * not positive). */
double probe_median_spread(double *v, int n, double *spread);

#endif
