/* probe_avx2.c — AVX2 inner loops of the machine probes (probe.c). */
#include <immintrin.h>

#include "kernels/probe_impl.h"

uint64_t probe_read_avx2(const void *p, size_t n)
{
    /* Eight independent streams of 32-byte loads, combined with the cheapest integer op. */
    const __m256i *v = p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (size_t i = 0; i < n / 32; i += 8) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(v + i));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(v + i + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(v + i + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(v + i + 3));
        a4 = _mm256_xor_si256(a4, _mm256_load_si256(v + i + 4));
        a5 = _mm256_xor_si256(a5, _mm256_load_si256(v + i + 5));
        a6 = _mm256_xor_si256(a6, _mm256_load_si256(v + i + 6));
        a7 = _mm256_xor_si256(a7, _mm256_load_si256(v + i + 7));
    }
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3)),
                                 _mm256_xor_si256(_mm256_xor_si256(a4, a5), _mm256_xor_si256(a6, a7)));
    return (uint64_t)_mm256_extract_epi64(s, 0) ^ (uint64_t)_mm256_extract_epi64(s, 3);
}

double probe_fma_avx2(long iters, float *sink)
{
    /* Twelve chains cover the FMA latency (4-5 cycles) times two FMA pipes with room to spare. */
    __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 x[12];
    for (int k = 0; k < 12; k++)
        x[k] = _mm256_set1_ps(1.0f + (float)k);
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++)
            x[k] = _mm256_fmadd_ps(x[k], m, c);
    __m256 s = x[0];
    for (int k = 1; k < 12; k++)
        s = _mm256_add_ps(s, x[k]);
    *sink = _mm256_cvtss_f32(s);
    return (double)iters * 12 * 8 * 2;
}
