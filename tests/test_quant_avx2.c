/* The avx2 dot products against the scalar reference (tests/support/quant_check.c).
 * Skipped (exit 77) on a CPU or build without this path. */
#include "support/quant_check.h"

int main(void)
{
    return quant_check_path(KERN_AVX2) ? 1 : 0;
}
