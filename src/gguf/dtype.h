/* dtype.h — the tensor element types of the GGUF format and their storage layout.
 *
 * These are format facts (ids, block size, bytes per block) that the reader needs to validate a
 * file. What the kernels can *compute* with a type is in kernels/types.h, keyed by the same enum. */
#ifndef PRIMA_DTYPE_H
#define PRIMA_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dtype {
    DT_F32 = 0, DT_F16 = 1, DT_Q4_0 = 2, DT_Q4_1 = 3, DT_Q5_0 = 6, DT_Q5_1 = 7, DT_Q8_0 = 8,
    DT_Q8_1 = 9, DT_Q2_K = 10, DT_Q3_K = 11, DT_Q4_K = 12, DT_Q5_K = 13, DT_Q6_K = 14,
    DT_Q8_K = 15, DT_IQ2_XXS = 16, DT_IQ2_XS = 17, DT_IQ3_XXS = 18, DT_IQ1_S = 19,
    DT_IQ4_NL = 20, DT_IQ3_S = 21, DT_IQ2_S = 22, DT_IQ4_XS = 23, DT_I8 = 24, DT_I16 = 25,
    DT_I32 = 26, DT_I64 = 27, DT_F64 = 28, DT_IQ1_M = 29, DT_BF16 = 30, DT_MXFP4 = 39,
    DT_COUNT = 40
};

typedef struct dtype_info {
    const char *name;     /* NULL for ids the format does not define */
    uint32_t block_size;  /* elements per block */
    uint32_t block_bytes; /* bytes per block */
} dtype_info;

/* NULL for an id outside the format. */
const dtype_info *dtype_get(uint32_t id);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size. */
uint64_t dtype_row_bytes(enum dtype t, uint64_t n);
/* Parse "q4_k" / "Q4_K" etc.; returns -1 if unknown. */
int dtype_from_name(const char *name);

#endif
