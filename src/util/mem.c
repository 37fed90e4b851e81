/* mem.c — giving a scratch buffer's pages back to the OS while keeping the allocation
 * (mem.h). */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/mem.h"

void mem_release(void *p, size_t len)
{
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + len) & ~(page - 1);
    if (!p || b <= a)
        return;
#if defined(__linux__)
    madvise((void *)a, b - a, MADV_DONTNEED);
#elif defined(MADV_FREE)
    madvise((void *)a, b - a, MADV_FREE);
#endif
}
