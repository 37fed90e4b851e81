/* The table of per-type traits and the binding of each type's kernels to a code path.
 * Adding a type = its kernels (quant.h and matmul.h declare them by name) + one row in `impls`. */
#include <pthread.h>
#include <stdbool.h>

#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

/* Only the current architecture's SIMD files are built (CMakeLists.txt). */
#if defined(__x86_64__)
#define ON_X86 1
#define AVX2(f) f
#define AVX512(f) f
#else
#define ON_X86 0
#define AVX2(f) NULL
#define AVX512(f) NULL
#endif
#if defined(__aarch64__)
#define ON_ARM 1
#define NEON(f) f
#else
#define ON_ARM 0
#define NEON(f) NULL
#endif

#define KERN_PATHS 4

/* Each per-path column is indexed by enum kern_path; NULL falls back (fallback_of). */
struct type_impl {
    enum dtype type, act_type;
    bool act_only;
    void (*to_float)(const void *src, float *dst, int64_t n);
    void (*from_float)(const float *src, void *dst, int64_t n);
    vec_dot_fn dot[KERN_PATHS];
    const mm_kernel *tile[KERN_PATHS];
    act_quantize_fn quantize[KERN_PATHS]; /* scalar: from_float */
};

/* A type whose tile serves a path needs no dot product of its own there: kern_matmul calls the
 * tile for decode and prefill alike, and the tests compare the tile with the scalar dot. */
#define TILES(name) {NULL, AVX2(&mm_##name##_avx2), AVX512(&mm_##name##_avx512), NULL}
#define NO_TILES {NULL, NULL, NULL, NULL}
#define NO_QUANTIZER {NULL, NULL, NULL, NULL}

/* Activation formats: F32 for the float weights (activations keep full precision, and with 2-4
 * bytes per weight the float FMA keeps up with memory), Q8_0 for the 32-blocks, Q8_K for the
 * K-quants. The float types' tiles are AVX2 on the AVX-512 path too: their decode is bound by
 * memory and 512-bit FMAs do not raise the prefill peak of a CPU that splits them in two. */
static const struct type_impl impls[] = {
    {DT_F32, DT_F32, false, f32_to_float, f32_from_float,
     {f32_dot_scalar, NULL, NULL, NEON(f32_dot_neon)},
     {NULL, AVX2(&mm_f32_avx2), NULL, NULL}, NO_QUANTIZER},
    {DT_F16, DT_F32, false, f16_to_float, f16_from_float,
     {f16_dot_scalar, NULL, NULL, NEON(f16_dot_neon)},
     {NULL, AVX2(&mm_f16_avx2), NULL, NULL}, NO_QUANTIZER},
    {DT_BF16, DT_F32, false, bf16_to_float, bf16_from_float,
     {bf16_dot_scalar, NULL, NULL, NEON(bf16_dot_neon)},
     {NULL, AVX2(&mm_bf16_avx2), NULL, NULL}, NO_QUANTIZER},
    {DT_Q4_0, DT_Q8_0, false, q4_0_to_float, q4_0_from_float,
     {q4_0_dot_scalar, NULL, NULL, NEON(q4_0_dot_neon)}, TILES(q4_0), NO_QUANTIZER},
    {DT_Q8_0, DT_Q8_0, false, q8_0_to_float, q8_0_from_float,
     {q8_0_dot_scalar, NULL, NULL, NEON(q8_0_dot_neon)}, TILES(q8_0),
     {q8_0_from_float, AVX2(q8_0_quantize_avx2), NULL, NULL}},
    {DT_IQ4_NL, DT_Q8_0, false, iq4_nl_to_float, iq4_nl_from_float,
     {iq4_nl_dot_scalar, NULL, NULL, NEON(iq4_nl_dot_neon)}, TILES(iq4_nl), NO_QUANTIZER},
    {DT_MXFP4, DT_Q8_0, false, mxfp4_to_float, mxfp4_from_float,
     {mxfp4_dot_scalar, NULL, NULL, NEON(mxfp4_dot_neon)}, TILES(mxfp4), NO_QUANTIZER},
    {DT_Q2_K, DT_Q8_K, false, q2_k_to_float, q2_k_from_float,
     {q2_k_dot_scalar, AVX2(q2_k_dot_avx2), NULL, NEON(q2_k_dot_neon)}, NO_TILES, NO_QUANTIZER},
    {DT_Q3_K, DT_Q8_K, false, q3_k_to_float, q3_k_from_float,
     {q3_k_dot_scalar, AVX2(q3_k_dot_avx2), NULL, NEON(q3_k_dot_neon)}, NO_TILES, NO_QUANTIZER},
    {DT_Q4_K, DT_Q8_K, false, q4_k_to_float, q4_k_from_float,
     {q4_k_dot_scalar, NULL, NULL, NEON(q4_k_dot_neon)}, TILES(q4_k), NO_QUANTIZER},
    {DT_Q5_K, DT_Q8_K, false, q5_k_to_float, q5_k_from_float,
     {q5_k_dot_scalar, NULL, NULL, NEON(q5_k_dot_neon)}, TILES(q5_k), NO_QUANTIZER},
    {DT_Q6_K, DT_Q8_K, false, q6_k_to_float, q6_k_from_float,
     {q6_k_dot_scalar, NULL, NULL, NEON(q6_k_dot_neon)}, TILES(q6_k), NO_QUANTIZER},
    {DT_Q8_K, DT_Q8_K, true, q8_k_to_float, q8_k_from_float,
     {q8_k_dot_scalar, AVX2(q8_k_dot_avx2), NULL, NEON(q8_k_dot_neon)}, NO_TILES,
     {q8_k_from_float, AVX2(q8_k_quantize_avx2), NULL, NULL}},
};

#define N_IMPLS (sizeof impls / sizeof impls[0])

static kern_type bound[DT_COUNT];
static bool computable[DT_COUNT];
static enum kern_path active = KERN_SCALAR;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* A path without its own kernel for a type uses the next narrower one. */
static enum kern_path fallback_of(enum kern_path p)
{
    return p == KERN_AVX512 ? KERN_AVX2 : KERN_SCALAR;
}

static bool path_runs_here(enum kern_path p)
{
    const cpu_features *f = cpu_features_get();
    switch (p) {
    case KERN_SCALAR:
        return true;
    case KERN_AVX2:
        return ON_X86 && f->avx2 && f->fma && f->f16c;
    case KERN_AVX512:
        /* the *_avx512.c files are built for this whole set (CMakeLists.txt) */
        return ON_X86 && f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw &&
               f->avx512vl && f->avx512dq && f->avx512vnni && f->avx512bf16;
    case KERN_NEON:
        return ON_ARM && f->neon && f->dotprod && f->fp16;
    }
    return false;
}

/* p, or the nearest narrower path whose bit is set in `have` (scalar ends the search). */
static enum kern_path resolve(enum kern_path p, unsigned have)
{
    while (p != KERN_SCALAR && !(have >> p & 1))
        p = fallback_of(p);
    return p;
}

/* The entry of a per-path column for path p, or of the nearest narrower path that has one. */
#define HAVE(c) \
    ((unsigned)((c)[0] != NULL) | ((c)[1] != NULL) << 1 | ((c)[2] != NULL) << 2 | ((c)[3] != NULL) << 3)
#define RESOLVE(c, p) ((c)[resolve((p), HAVE(c))])

static void bind(enum kern_path p)
{
    for (size_t i = 0; i < N_IMPLS; i++) {
        const struct type_impl *t = &impls[i];
        bound[t->type] = (kern_type){
            .type = t->type, .act_type = t->act_type, .act_only = t->act_only,
            .to_float = t->to_float, .from_float = t->from_float,
            .vec_dot = RESOLVE(t->dot, p), .tile = RESOLVE(t->tile, p),
            .quantize = RESOLVE(t->quantize, p),
        };
        computable[t->type] = true;
    }
    active = p;
}

static void init_fastest(void)
{
    static const enum kern_path order[] = {KERN_AVX512, KERN_AVX2, KERN_NEON, KERN_SCALAR};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (path_runs_here(order[i])) {
            bind(order[i]);
            return;
        }
}

void kern_init(void)
{
    pthread_once(&init_once, init_fastest);
}

int kern_use_path(enum kern_path p)
{
    kern_init();
    if ((unsigned)p >= KERN_PATHS || !path_runs_here(p))
        return -1;
    bind(p);
    return 0;
}

enum kern_path kern_active_path(void)
{
    kern_init();
    return active;
}

const char *kern_path_name(enum kern_path p)
{
    switch (p) {
    case KERN_SCALAR: return "scalar";
    case KERN_AVX2: return "avx2";
    case KERN_AVX512: return "avx512";
    case KERN_NEON: return "neon";
    }
    return "unknown";
}

const kern_type *kern_type_get(enum dtype t)
{
    kern_init();
    if ((unsigned)t >= DT_COUNT || !computable[t])
        return NULL;
    return &bound[t];
}

float fp16_to_fp32(uint16_t h) { return half_to_f32(h); }
uint16_t fp32_to_fp16(float f) { return f32_to_half(f); }
float bf16_to_fp32(uint16_t h) { return bf16_to_f32(h); }
uint16_t fp32_to_bf16(float f) { return f32_to_bf16(f); }
