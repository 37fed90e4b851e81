/* matmul_avx2.c — AVX2 tile kernels for kern_matmul (see matmul.h for the contract).
 *
 * A tile keeps one accumulator per (row, token) in registers, so each weight vector loaded (and,
 * for the quantized types, unpacked) is used for every token of the tile, and each activation
 * vector for every row. Each kernel is written once for a compile-time tile shape and
 * instantiated for every shape up to the largest; an output's arithmetic is the same in every
 * instantiation, which is what makes results independent of tiling and thread count. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/matmul.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Instantiate KERNEL(n, R, T, ...) for every tile shape up to 4 x MAX_T and dispatch on (nr, nt).
 * R and T are compile-time constants in every instance, so the accumulator arrays live in
 * registers and the loops over them unroll. */
#define TILE_CASE(KERNEL, R, T) \
    case (R) * 16 + (T): KERNEL(n, R, T, w, ws, a, as, y, ys); return;
#define TILE_ROWS(KERNEL, T) \
    TILE_CASE(KERNEL, 1, T) TILE_CASE(KERNEL, 2, T) TILE_CASE(KERNEL, 3, T) TILE_CASE(KERNEL, 4, T)
#define TILE_DISPATCH_HEAD(NAME)                                                               \
    static void NAME(int n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as, \
                     float *y, size_t ys)
#define DEFINE_TILE_4x3(NAME, KERNEL) \
    TILE_DISPATCH_HEAD(NAME) { switch (nr * 16 + nt) { TILE_ROWS(KERNEL, 1) TILE_ROWS(KERNEL, 2) TILE_ROWS(KERNEL, 3) } }
#define DEFINE_TILE_4x2(NAME, KERNEL) \
    TILE_DISPATCH_HEAD(NAME) { switch (nr * 16 + nt) { TILE_ROWS(KERNEL, 1) TILE_ROWS(KERNEL, 2) } }

/* ---- float weights (F32, F16, BF16) with F32 activations ---- */

ALWAYS_INLINE __m256 load8_f32(const void *p, size_t i)
{
    return _mm256_loadu_ps((const float *)p + i);
}

ALWAYS_INLINE __m256 load8_f16(const void *p, size_t i)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}

ALWAYS_INLINE __m256 load8_bf16(const void *p, size_t i)
{
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

ALWAYS_INLINE float scalar_f32(const void *p, size_t i)
{
    return ((const float *)p)[i];
}

ALWAYS_INLINE float scalar_f16(const void *p, size_t i)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(((const uint16_t *)p)[i])));
}

ALWAYS_INLINE float scalar_bf16(const void *p, size_t i)
{
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

typedef __m256 (*load8_fn)(const void *p, size_t i);
typedef float (*scalar_fn)(const void *p, size_t i);

/* Lanes accumulate 8-strided partial sums, reduced by hsum_ps; the last n % 8 elements are added
 * in order afterwards. */
ALWAYS_INLINE void float_tile(load8_fn load8, scalar_fn scalar, int n, int R, int T,
                              const void *w, size_t ws, const void *a, size_t as, float *y,
                              size_t ys)
{
    const uint8_t *wb = w;
    const float *ab = a;
    size_t af = as / sizeof(float);
    __m256 acc[4][3];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
    int n8 = n & ~7;
    for (int i = 0; i < n8; i += 8) {
        __m256 av[3];
        for (int t = 0; t < T; t++)
            av[t] = _mm256_loadu_ps(ab + t * af + i);
        for (int r = 0; r < R; r++) {
            __m256 wv = load8(wb + r * ws, (size_t)i);
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm256_fmadd_ps(wv, av[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float s = hsum_ps(acc[r][t]);
            for (int i = n8; i < n; i++)
                s += scalar(wb + r * ws, (size_t)i) * ab[t * af + i];
            y[t * ys + r] = s;
        }
}

#define F32_TILE(...) float_tile(load8_f32, scalar_f32, __VA_ARGS__)
#define F16_TILE(...) float_tile(load8_f16, scalar_f16, __VA_ARGS__)
#define BF16_TILE(...) float_tile(load8_bf16, scalar_bf16, __VA_ARGS__)
DEFINE_TILE_4x3(tile_f32, F32_TILE)
DEFINE_TILE_4x3(tile_f16, F16_TILE)
DEFINE_TILE_4x3(tile_bf16, BF16_TILE)

static const mm_kernel kernel_f32 = {tile_f32, 4, 3};
static const mm_kernel kernel_f16 = {tile_f16, 4, 3};
static const mm_kernel kernel_bf16 = {tile_bf16, 4, 3};

const mm_kernel *mm_kernel_avx2(enum dtype t)
{
    switch (t) {
    case DT_F32: return &kernel_f32;
    case DT_F16: return &kernel_f16;
    case DT_BF16: return &kernel_bf16;
    default: return NULL;
    }
}
