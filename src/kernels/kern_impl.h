/* kern_impl.h — internals shared by the kernel sources (not part of the kernels' contract). */
#ifndef PRIMA_KERN_IMPL_H
#define PRIMA_KERN_IMPL_H

#include <stddef.h>

#include "kernels/kern.h"

/* The x86-64 build compiles the *_avx2.c bodies (CMakeLists.txt); other builds have none. */
#if defined(__x86_64__) || defined(_M_X64)
#define KERN_X86 1
#else
#define KERN_X86 0
#endif

typedef struct kern_scratch {
    void *ptr;
    size_t size;
} kern_scratch;

enum { KERN_SCRATCH_ACT, KERN_SCRATCH_RANGES, KERN_SCRATCH_PANELS, KERN_SCRATCH_PREP, KERN_SCRATCH_COUNT };

/* A 64-byte aligned buffer of at least `bytes` owned by the context, one per slot, or NULL when
 * it cannot grow that far (out of memory; the slot keeps its smaller buffer). It grows on first
 * use (or kern_ctx_reserve), never shrinks, and is reused: ops do not allocate in steady state. */
void *kern_scratch_get(kern_ctx *c, int slot, size_t bytes);
/* mem_release of the slot's bytes past the first `keep`. */
void kern_scratch_release(kern_ctx *c, int slot, size_t keep);

/* Aborts naming the type if the kernels cannot compute with it: callers check types when they
 * load a model, so this only catches bugs. */
const kern_type *kern_type_require(enum dtype t);

/* True when the AVX2 bodies may run (the AVX-512 path includes them). */
static inline bool kern_avx2_active(void)
{
    enum kern_path p = kern_active_path();
    return p == KERN_AVX2 || p == KERN_AVX512;
}

#endif
