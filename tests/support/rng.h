/* rng.h — a small seeded generator for tests: same data on every run and machine. */
#ifndef PRIMA_TEST_RNG_H
#define PRIMA_TEST_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct { uint64_t s; } test_rng;

static inline uint64_t rng_next(test_rng *r)   /* splitmix64 */
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline double rng_uniform(test_rng *r)  /* in (0, 1) */
{
    return ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

static inline float rng_gauss(test_rng *r)
{
    double u = rng_uniform(r), v = rng_uniform(r);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#endif
