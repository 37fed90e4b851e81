/* quant_check.h — one SIMD path of the kernels against the scalar reference (test_quant_PATH.c). */
#ifndef PRIMA_TEST_QUANT_CHECK_H
#define PRIMA_TEST_QUANT_CHECK_H

#include "kernels/types.h"

/* Skips the test (exit 77, with the reason) when this CPU or build cannot run the path;
 * otherwise returns the number of failed checks. */
int quant_check_path(enum kern_path path);

#endif
