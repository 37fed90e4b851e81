/* cpu.h — what the CPU this process runs on can execute, detected once.
 *
 * A SIMD feature counts only when the operating system also saves its registers across context
 * switches (x86: XCR0 via xgetbv), otherwise using it would fault or corrupt state. */
#ifndef PRIMA_KERNELS_CPU_H
#define PRIMA_KERNELS_CPU_H

#include <stdbool.h>
#include <stddef.h>

typedef struct cpu_features {
    /* x86-64 */
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    /* AArch64: Advanced SIMD, the SDOT/UDOT dot-product extension, half-precision arithmetic */
    bool neon, dotprod, fp16;
} cpu_features;

/* Detected on first call; thread-safe. */
const cpu_features *cpu_features_get(void);

/* Space-separated names of the detected features ("avx2 fma f16c"), for logs and benchmarks. */
void cpu_features_str(const cpu_features *f, char *buf, size_t len);

#endif
