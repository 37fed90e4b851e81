/* matmul.h — the tile kernels kern_matmul is built from.
 *
 * A tile kernel computes an nr x nt block of outputs (nr <= rows weight rows, nt <= tokens
 * tokens) over the whole inner dimension n:
 *     y[t * y_stride + r] = dot(weight row r, activation row t)
 * Each output's arithmetic must not depend on nr, nt or its place in the tile: kern_matmul
 * promises results that do not depend on the thread count, and that prefill computes exactly
 * what decode computes. */
#ifndef PRIMA_MATMUL_H
#define PRIMA_MATMUL_H

#include <stddef.h>

#include "kernels/types.h"

typedef void (*mm_tile_fn)(int n, int nr, int nt, const void *w, size_t w_stride,
                           const void *a, size_t a_stride, float *y, size_t y_stride);

typedef struct mm_kernel {
    mm_tile_fn tile;
    int rows, tokens; /* the largest tile */
    /* Rows per tile for one token. One row keeps the weights a single sequential stream; kernels
     * whose per-row accumulation is one short dependency chain need a few rows in flight. */
    int decode_rows;
} mm_kernel;

/* The AVX2 tile kernel for a weight type, or NULL to use the type's vec_dot. */
const mm_kernel *mm_kernel_avx2(enum dtype t);

/* An activation quantizer that gives exactly the bytes of kern_type_get(act)->from_float. */
typedef void (*act_quantize_fn)(const float *src, void *dst, int64_t n);

/* The AVX2 quantizer for an activation format, or NULL to use the reference one. */
act_quantize_fn mm_quantizer_avx2(enum dtype act);

#endif
