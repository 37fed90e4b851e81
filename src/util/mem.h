/* mem.h — handing scratch memory back to the OS without freeing it. Needs nothing but libc and
 * mmap, so any layer may use it. */
#ifndef PRIMA_UTIL_MEM_H
#define PRIMA_UTIL_MEM_H

#include <stddef.h>

/* Returns the whole pages inside [p, p + len) to the OS and keeps the allocation: they read as
 * zeros when next touched. For scratch whose contents do not outlive one use, sized for the
 * widest use but mostly used narrow (a prompt's batch, then one row per decoded token): under a
 * memory limit its untouched-again pages would otherwise crowd out page cache. Linux frees them
 * at once (MADV_DONTNEED); elsewhere the OS takes them back when it needs memory (MADV_FREE). */
void mem_release(void *p, size_t len);

#endif
