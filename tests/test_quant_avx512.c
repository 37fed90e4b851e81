/* The avx512 path: on a CPU that has it, kern_init binds it and kern_matmul runs its tile kernels
 * (not the AVX2 ones), and every type's product agrees with the scalar reference
 * (tests/support/quant_check.c). Skipped (exit 77) on a CPU or build without this path. */
#include "kernels/matmul.h"
#include "support/quant_check.h"
#include "test.h"

/* What the fastest path binds, checked before quant_check_path rebinds anything. */
static void check_dispatch(void)
{
    kern_init();
    if (kern_active_path() != KERN_AVX512)
        return; /* quant_check_path skips with the CPU's features */
    static const struct { enum dtype t; const mm_kernel *tile; } want[] = {
        {DT_Q4_0, &mm_q4_0_avx512}, {DT_Q8_0, &mm_q8_0_avx512}, {DT_IQ4_NL, &mm_iq4_nl_avx512},
        {DT_Q4_K, &mm_q4_k_avx512}, {DT_Q5_K, &mm_q5_k_avx512}, {DT_Q6_K, &mm_q6_k_avx512},
        {DT_MXFP4, &mm_mxfp4_avx512},
        {DT_F16, &mm_f16_avx2},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(kern_type_get(want[i].t)->tile == want[i].tile, "%s: the avx512 path binds another tile",
              dtype_get((uint32_t)want[i].t)->name);
}

int main(void)
{
    check_dispatch();
    int failures = quant_check_path(KERN_AVX512);
    return failures || test_failures ? 1 : 0;
}
