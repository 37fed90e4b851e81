/* probe_impl.h — the per-path inner loops of probe.c. */
#ifndef PRIMA_PROBE_IMPL_H
#define PRIMA_PROBE_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* Read n bytes (n a multiple of 256, p 64-byte aligned); returns a value depending on all of
 * them so the reads cannot be optimized away. */
uint64_t probe_read_avx2(const void *p, size_t n);
/* iters rounds of independent FMA chains; returns the number of floating-point operations. */
double probe_fma_avx2(long iters, float *sink);

#endif
