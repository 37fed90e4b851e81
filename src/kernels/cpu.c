/* cpu.c — detecting the CPU's SIMD features once (cpu.h), counting a feature only when the OS
 * saves its registers, so that the kernels never pick a path that would fault. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu.h"

#if defined(__x86_64__)
#include <cpuid.h>

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(cpu_features *f)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    bool osxsave = c & (1u << 27), avx = c & (1u << 28);
    if (!osxsave || !avx)
        return;
    uint64_t xcr0 = read_xcr0();
    bool ymm_state = (xcr0 & 0x6) == 0x6;    /* SSE + AVX register state */
    bool zmm_state = (xcr0 & 0xe6) == 0xe6;  /* + opmask, upper ZMM0-15, ZMM16-31 */
    if (!ymm_state)
        return;
    f->fma = c & (1u << 12);
    f->f16c = c & (1u << 29);
    if (__get_cpuid_max(0, NULL) < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = b & (1u << 5);
    if (zmm_state) {
        f->avx512f = b & (1u << 16);
        f->avx512dq = b & (1u << 17);
        f->avx512bw = b & (1u << 30);
        f->avx512vl = b & (1u << 31);
        f->avx512vnni = c & (1u << 11);
        unsigned max_sub = a;
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            f->avx512bf16 = a & (1u << 5);
        }
    }
}

#elif defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>

static void detect(cpu_features *f)
{
    unsigned long hw = getauxval(AT_HWCAP);
    f->neon = hw & HWCAP_ASIMD;
    f->dotprod = hw & HWCAP_ASIMDDP;
    f->fp16 = (hw & HWCAP_FPHP) && (hw & HWCAP_ASIMDHP);
}

#elif defined(__aarch64__) && defined(__APPLE__)
/* Every Apple silicon core (M1 and later) has these. */
static void detect(cpu_features *f)
{
    f->neon = f->dotprod = f->fp16 = true;
}

#else
static void detect(cpu_features *f)
{
    (void)f;
}
#endif

static cpu_features features;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void detect_once(void)
{
    detect(&features);
}

const cpu_features *cpu_features_get(void)
{
    pthread_once(&once, detect_once);
    return &features;
}

void cpu_features_str(const cpu_features *f, char *buf, size_t len)
{
    const struct { bool on; const char *name; } all[] = {
        {f->avx2, "avx2"}, {f->fma, "fma"}, {f->f16c, "f16c"}, {f->avx512f, "avx512f"},
        {f->avx512bw, "avx512bw"}, {f->avx512vl, "avx512vl"}, {f->avx512dq, "avx512dq"},
        {f->avx512vnni, "avx512vnni"}, {f->avx512bf16, "avx512bf16"}, {f->neon, "neon"},
        {f->dotprod, "dotprod"}, {f->fp16, "fp16"},
    };
    size_t used = 0;
    if (len)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (!all[i].on || used >= len)
            continue;
        int w = snprintf(buf + used, len - used, "%s%s", used ? " " : "", all[i].name);
        if (w > 0)
            used += (size_t)w;
    }
    if (used == 0 && len)
        snprintf(buf, len, "none");
}
