/* dtype.c — the GGUF element types' storage facts (dtype.h), as one table the reader checks
 * tensor sizes against. */
#include <string.h>
#include <strings.h>

#include "gguf/dtype.h"

/* Block layouts as the GGUF format defines them (QK_K = 256 for the K-quants). */
static const dtype_info infos[DT_COUNT] = {
    [DT_F32] = {"F32", 1, 4},          [DT_F16] = {"F16", 1, 2},
    [DT_Q4_0] = {"Q4_0", 32, 18},      [DT_Q4_1] = {"Q4_1", 32, 20},
    [DT_Q5_0] = {"Q5_0", 32, 22},      [DT_Q5_1] = {"Q5_1", 32, 24},
    [DT_Q8_0] = {"Q8_0", 32, 34},      [DT_Q8_1] = {"Q8_1", 32, 36},
    [DT_Q2_K] = {"Q2_K", 256, 84},     [DT_Q3_K] = {"Q3_K", 256, 110},
    [DT_Q4_K] = {"Q4_K", 256, 144},    [DT_Q5_K] = {"Q5_K", 256, 176},
    [DT_Q6_K] = {"Q6_K", 256, 210},    [DT_Q8_K] = {"Q8_K", 256, 292},
    [DT_IQ2_XXS] = {"IQ2_XXS", 256, 66}, [DT_IQ2_XS] = {"IQ2_XS", 256, 74},
    [DT_IQ3_XXS] = {"IQ3_XXS", 256, 98}, [DT_IQ1_S] = {"IQ1_S", 256, 50},
    [DT_IQ4_NL] = {"IQ4_NL", 32, 18},  [DT_IQ3_S] = {"IQ3_S", 256, 110},
    [DT_IQ2_S] = {"IQ2_S", 256, 82},   [DT_IQ4_XS] = {"IQ4_XS", 256, 136},
    [DT_I8] = {"I8", 1, 1},            [DT_I16] = {"I16", 1, 2},
    [DT_I32] = {"I32", 1, 4},          [DT_I64] = {"I64", 1, 8},
    [DT_F64] = {"F64", 1, 8},          [DT_IQ1_M] = {"IQ1_M", 256, 56},
    [DT_BF16] = {"BF16", 1, 2},        [DT_MXFP4] = {"MXFP4", 32, 17},
};

const dtype_info *dtype_get(uint32_t id)
{
    if (id >= DT_COUNT || !infos[id].name)
        return NULL;
    return &infos[id];
}

uint64_t dtype_row_bytes(enum dtype t, uint64_t n)
{
    const dtype_info *d = dtype_get(t);
    if (!d || n % d->block_size)
        return 0;
    return n / d->block_size * d->block_bytes;
}

int dtype_from_name(const char *name)
{
    for (int i = 0; i < DT_COUNT; i++)
        if (infos[i].name && !strcasecmp(infos[i].name, name))
            return i;
    return -1;
}
