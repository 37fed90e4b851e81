/* types.h — what the kernels can compute with each weight type: one table of traits.
 *
 * Each computable type names the activation format its dot product consumes (act_type): the
 * integer paths quantize activations on the fly to an 8-bit block type (Q8_0 for the 32-blocks,
 * Q8_K for the 256-blocks), the float types take F32 activations. The choice is fixed per type and
 * identical on every device, so a ring computes exactly what one device computes:
 *
 *   weight type                       act_type  why
 *   F32, F16, BF16                    F32       no activation rounding; float FMA keeps up with
 *                                               memory at 2-4 bytes per weight
 *   Q4_0, Q8_0, IQ4_NL, MXFP4         Q8_0      32-element blocks: one 8-bit block per weight block
 *   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K      Q8_K      256-element super-blocks; Q8_K's 16-element sums
 *                                               apply the sub-block minimums/offsets in one step
 *   Q8_K (activation format only)     Q8_K
 *
 * The activation quantizers are kern_type_get(act_type)->from_float: one scalar definition
 * (round to nearest, ties to even) used by every path, so they give the same bytes everywhere.
 * from_float of the weight types is the reference quantizer (scale search for the K-quants);
 * n passed to to_float / from_float / vec_dot is a multiple of the type's block size.
 *
 * vec_dot, tile and quantize are resolved once by kern_init() from the CPU's features (cpu.h):
 * each path may give a type its own tile kernel (kern_matmul's inner loop) and an activation
 * format its own quantizer; a path without one uses the next narrower path's (AVX-512 -> AVX2 ->
 * scalar). Every path must agree with the scalar reference within the tolerance stated in
 * tests/support/quant_check.c, and every quantizer must give the reference bytes exactly. */
#ifndef PRIMA_KERNEL_TYPES_H
#define PRIMA_KERNEL_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/dtype.h"

/* s = dot(row of n weights at w, n activations at a in act_type's layout) */
typedef void (*vec_dot_fn)(int n, float *s, const void *w, const void *a);

/* A tile kernel computes an nr x nt block of outputs (nr <= rows weight rows, nt <= tokens
 * tokens) over the whole inner dimension n:
 *     y[t * y_stride + r] = dot(weight row r, activation row t)
 * Each output's arithmetic must not depend on nr, nt or its place in the tile: kern_matmul
 * promises results that do not depend on the thread count, and that prefill computes exactly
 * what decode computes. */
typedef void (*mm_tile_fn)(int n, int nr, int nt, const void *w, size_t w_stride,
                           const void *a, size_t a_stride, float *y, size_t y_stride);

/* Batches of up to this many tokens (decode, and the few rows of several sequences decoding
 * together) stream their weights once, as decode does: rows are cut into decode blocks, a tile
 * takes decode_rows rows and the tiles prefetch their weights. Beyond it prefill's blocking
 * (weights reused from L2 by token blocks) wins: measured single-thread on a Zen 4 VM, a
 * 4096 x 4096 Q4_K | Q8_0 matrix from DRAM, ms per call at 1, 2, 3, 4 tokens: streamed
 * 0.58-0.60, 0.79-0.80, 1.04, 1.27-1.30 | 1.07-1.12, 1.25-1.32, 1.61-1.74, 2.2-2.3; prefill's
 * blocking 0.57, 1.04-1.07, 1.10-1.20, 1.20-1.32 | 1.00-1.16, 1.71-1.80, 1.92-1.94, 2.22-2.33. */
#define MM_STREAM_TOKENS 3

/* Prefill's packed tiles (optional, per path and type). For a batch of at least
 * min_tokens tokens kern_matmul rearranges each row block's weights once into panels of
 * `rows` interleaved rows, in the path's own layout (levels one per byte, scales widened, so that
 * one vector holds the same few inputs of every row of the panel and one instruction multiplies
 * them by a token's broadcast activations), in the context's scratch and never stored; then every
 * token block of the batch runs over the panels. The packing costs about as much as a few tokens'
 * arithmetic and is repaid by the rest of the batch. A path that packs a type computes, in its
 * ordinary tile too, exactly what its packed tile computes (the mm_tile_fn contract). */
typedef struct mm_packed {
    int rows, tokens; /* rows per panel; the largest token tile */
    /* The smallest batch that packs: packing costs about a token's products or more, so the
     * smallest batches keep the ordinary tiles. */
    int min_tokens;
    size_t (*bytes)(int n); /* one panel of n inputs: a multiple of 64 */
    /* Pack nr <= rows weight rows (the rest of the panel zero) into a 64-byte aligned panel. */
    void (*pack)(int n, int nr, const void *w, size_t w_stride, void *panel);
    /* y[t * y_stride + r] = dot(row r of the panel, activation row t), r < nr, t < nt <= tokens */
    void (*tile)(int n, int nr, int nt, const void *panel, const void *a, size_t a_stride,
                 float *y, size_t y_stride);
    /* Optional (NULL: the tile reads the quantized activations as they are): one token's
     * activations rewritten once per batch into act_bytes(n) bytes of the tile's own form, e.g.
     * with the per-block sums every panel would otherwise compute again. */
    size_t (*act_bytes)(int n);
    void (*act_prep)(int n, const void *a, void *dst);
    /* Optional: what pack + tile compute, for nt <= tokens tokens, straight from nr <= rows
     * weight rows: each superblock packed into a small buffer just before its products. A batch
     * of one tile's tokens uses each panel once, and packing a whole row block first left memory
     * idle while the tiles computed and the tiles idle while packing waited on memory. */
    void (*stream)(int n, int nr, int nt, const void *w, size_t w_stride, const void *a,
                   size_t a_stride, float *y, size_t y_stride);
} mm_packed;

/* A type's kept form on a path (kern_keep, kern.h): panels made once per matrix that keep its
 * size within a few percent (levels with their bits as stored, scales as bytes), so that decode
 * reads them as fast as the blocks; every batch, one token or many, runs over them without
 * packing. Their arithmetic is the packed tiles' (and so the ordinary tiles'). */
typedef struct mm_kept {
    mm_packed form; /* the kept panels and their tile (min_tokens 1, no stream) */
    /* From wide_tokens tokens on (0: never) a row block's kept panels are unpacked into the
     * packed tiles' panels (unpack: one panel of n inputs; the same rows per panel) in scratch
     * first: the kept tile unpacks its levels for every tile of tokens, the packed tile once
     * for the whole batch. */
    int wide_tokens;
    void (*unpack)(int n, const void *kept, void *panel);
    const char *layout; /* the path's name for its kept layouts (kern_keep_layout), all types' */
} mm_kept;

typedef struct mm_kernel {
    mm_tile_fn tile;
    int rows, tokens; /* the largest tile */
    /* Rows per tile for up to MM_STREAM_TOKENS tokens. One row keeps the weights a single
     * sequential stream; kernels whose per-row accumulation is one short dependency chain need
     * a few rows in flight. */
    int decode_rows;
    const mm_packed *packed; /* NULL: prefill uses the tile above */
    const mm_kept *kept; /* NULL: no kept form of the type on this path */
} mm_kernel;

/* An activation quantizer: exactly the bytes of the format's from_float. */
typedef void (*act_quantize_fn)(const float *src, void *dst, int64_t n);

typedef struct kern_type {
    enum dtype type;
    enum dtype act_type;
    /* An activation format only (Q8_K): GGUF files do not hold weights in it, so benchmarks and
     * tests of weight types leave it out (its dot product still computes). */
    bool act_only;
    void (*to_float)(const void *src, float *dst, int64_t n);   /* n multiple of block size */
    void (*from_float)(const float *src, void *dst, int64_t n); /* reference quantizer */
    vec_dot_fn vec_dot;
    /* kern_matmul's tile kernel for this weight type on the bound path; NULL: one vec_dot per
     * output. */
    const mm_kernel *tile;
    /* For the formats activations are quantized to (Q8_0, Q8_K): the bound path's quantizer,
     * the same bytes as from_float; NULL for the other types. */
    act_quantize_fn quantize;
} kern_type;

/* NULL if the kernels cannot compute with this type (the caller reports it by name). */
const kern_type *kern_type_get(enum dtype t);

enum kern_path { KERN_SCALAR, KERN_AVX2, KERN_AVX512, KERN_NEON };

/* Detect the CPU and bind the fastest available path. Idempotent and thread-safe. */
void kern_init(void);
/* Tests and benchmarks: bind a specific path; returns -1 if this CPU/build cannot run it. */
int kern_use_path(enum kern_path p);
enum kern_path kern_active_path(void);
const char *kern_path_name(enum kern_path p);

/* IEEE half and bfloat16 conversions (round to nearest even). */
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

#endif
