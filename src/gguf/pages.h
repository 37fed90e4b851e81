/* pages.h — backing a model's weights with 2 MB pages.
 *
 * Decode streams every weight once per token; with 4 KB pages that is one TLB entry per 4 KB and
 * the kernels stall on page walks. What `prima bench pages` found on Linux 6.x (ext4):
 *   - a file read cold is cached in large folios and, mapped read-only, gets 2 MB mappings;
 *     MADV_HUGEPAGE on the mapping before the first touch makes that complete;
 *   - a file just written (or copied) sits in the page cache in 4 KB pages, and stays so:
 *     MADV_HUGEPAGE does not change cached pages, and MADV_COLLAPSE refuses regular files
 *     unless the kernel has CONFIG_READ_ONLY_THP_FOR_FS;
 *   - such a file gets 2 MB pages back either by dropping its cached pages and reading it
 *     again (a disk read, no extra memory), or by copying the weights into anonymous
 *     transparent huge pages (a memory copy, needs the memory).
 * pages_make_huge() tries those in order of cost. Everything here is advice: on a kernel or file
 * system without huge pages it leaves the weights where they are and says so. */
#ifndef PRIMA_PAGES_H
#define PRIMA_PAGES_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

enum pages_method {
    PAGES_FILE,   /* the file's own page cache is mapped with 2 MB pages */
    PAGES_REREAD, /* ... after dropping its 4 KB pages and reading it again */
    PAGES_COPY,   /* the range was replaced, at the same address, by an anonymous huge-page copy */
    PAGES_SMALL,  /* left in small pages: no huge pages to be had, or not allowed to try */
};

/* What may be tried beyond advice; 0 = advise only. */
enum {
    PAGES_ALLOW_REREAD = 1, /* drop the file's cached pages and read them again */
    /* Copy into anonymous memory when MemAvailable allows. The copy is private memory no longer
     * backed by the file: releasing it with MADV_DONTNEED (as a pager that drops layers does)
     * would zero it, so only allow this for weights that stay resident. */
    PAGES_ALLOW_COPY = 2,
};

typedef struct pages_report {
    enum pages_method method;
    uint64_t bytes;      /* of the range handled (whole 2 MB pages inside the range asked for) */
    int64_t huge_bytes;  /* of it mapped by 2 MB pages afterwards (-1 if unknown) */
    double seconds;      /* spent, including reading the weights in */
} pages_report;

/* Bytes of [p, p + len) mapped by 2 MB pages in this process (FilePmdMapped + AnonHugePages of
 * the mappings it overlaps, clipped to the range), or -1 if /proc/self/smaps is unavailable. */
int64_t pages_huge_bytes(const void *p, size_t len);
/* Fault [p, p + n) in, reading from the file what is not cached: MADV_POPULATE_READ, or on
 * kernels before 5.14 a load per page. Returns once the data is mapped. */
void pages_populate(const void *p, size_t n);

/* Back [p, p + len), part of a read-only MAP_SHARED mapping of the file `path` that starts at
 * file offset 0 at address `map`, with 2 MB pages, reading it in. Pointers into the range stay
 * valid whatever the method (a copy replaces the pages at the same addresses, and munmap of the
 * whole mapping still releases it). Returns 0, or -1 with a one-line error (a failed step that
 * leaves the weights readable where they were is not an error: method says what happened). */
int pages_make_huge(const void *map, const void *p, size_t len, const char *path, unsigned allow,
                    pages_report *rep, char *err, size_t errlen);

const char *pages_method_name(enum pages_method m);

#endif
