/* slurp.h — a whole file in memory, for the tests that compare against fixture files. */
#ifndef PRIMA_TEST_SLURP_H
#define PRIMA_TEST_SLURP_H

#include <stddef.h>

/* The file's bytes with a NUL after them (their count in *len), or NULL if it cannot be read. */
char *slurp(const char *path, size_t *len);

#endif
