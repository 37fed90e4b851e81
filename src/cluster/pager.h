/* pager.h — moving a device's layer windows between disk and memory.
 *
 * Weights are pages of a read-only file mapping, so "loading" a window means getting its pages
 * into the page cache and "releasing" it means letting the kernel drop them. A pager owns one
 * background thread that does both on request, so the device's compute thread never waits for it:
 * right after a device hands its activations on, it asks the pager to drop the window it just
 * computed (when the release policy says so) and to bring in the window it computes next.
 *
 * Prefetch methods (see docs/ring.md for the measurements):
 *   MADVISE: madvise(MADV_WILLNEED) on the window: the kernel queues the reads and returns.
 *   FADVISE: posix_fadvise(POSIX_FADV_WILLNEED): the same, through the file descriptor.
 *   TOUCH:   the thread faults the window in (MADV_POPULATE_READ, or one byte per page): it
 *            waits for the data and maps the pages, so compute takes neither major nor minor
 *            faults on them, and the kernel's readahead caches them in large folios (2 MB
 *            pages), where the hints leave 4 KB pages.
 * Release is madvise(MADV_DONTNEED) (unmap from this process) then posix_fadvise(DONTNEED)
 * (drop from the page cache); pages shared with a neighbouring tensor range are kept. */
#ifndef PRIMA_PAGER_H
#define PRIMA_PAGER_H

#include <stdint.h>

enum prefetch_method { PREFETCH_MADVISE, PREFETCH_FADVISE, PREFETCH_TOUCH };
/* "madvise" | "fadvise" | "touch" -> method, or -1. */
int prefetch_method_parse(const char *s);
const char *prefetch_method_name(enum prefetch_method m);

typedef struct byte_range {
    uint64_t begin, end;   /* file offsets, [begin, end) */
} byte_range;

typedef struct pager pager;

/* map/size: the whole file mapped read-only at offset 0; path: the same file (for fadvise). */
pager *pager_create(const char *path, const uint8_t *map, uint64_t size,
                    enum prefetch_method method, char *err, size_t errlen);
void pager_free(pager *p);
/* Replace any pending work with: drop the `drop` ranges, then bring in the `fetch` ranges. A
 * pending request's drops are kept (they run first), its fetches are not. Fetches already in
 * progress stop at their next chunk. Never blocks on I/O. */
void pager_request(pager *p, const byte_range *drop, int n_drop, const byte_range *fetch, int n_fetch);
/* From now on bring in exactly the requested ranges: no readahead past them (the kernel's
 * would read the neighbouring bytes, which for the experts of a layer are the experts a token
 * did not route to). The reads are hinted first, then faulted in (TOUCH), which maps 4 KB
 * pages rather than large folios. */
void pager_set_exact(pager *p);
/* Block until the thread has nothing left to do (tests and benchmarks). */
void pager_wait_idle(pager *p);
/* Major page faults taken by the pager's own thread so far. */
uint64_t pager_thread_faults(pager *p);

/* Pages of the ranges that are in memory right now (mincore), and how many pages they span. */
void pager_resident_pages(const uint8_t *map, uint64_t size, const byte_range *r, int n,
                          uint64_t *resident, uint64_t *total);
/* Bytes this process has caused to be read from storage so far (/proc/self/io), 0 if unknown. */
uint64_t pager_disk_read_bytes(void);

#endif
