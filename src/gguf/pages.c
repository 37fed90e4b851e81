/* pages.c — backing model weights with 2 MB pages (see pages.h for what works and why). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gguf/pages.h"

#define HUGE_SIZE ((uintptr_t)2 << 20)
/* A range counts as backed by huge pages when this share of it is. */
#define ENOUGH_HUGE 0.9
/* A copy must leave at least this much memory available to everything else. */
#define COPY_RESERVE ((uint64_t)512 << 20)

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *pages_method_name(enum pages_method m)
{
    switch (m) {
    case PAGES_FILE: return "file";
    case PAGES_REREAD: return "reread";
    case PAGES_COPY: return "copy";
    case PAGES_SMALL: return "small";
    }
    return "unknown";
}

int64_t pages_huge_bytes(const void *p, size_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    uintptr_t lo = (uintptr_t)p, hi = lo + len;
    uint64_t total = 0, overlap = 0, vma_huge = 0;
    bool in_range = false;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        uintptr_t start, end;
        unsigned long long kb;
        /* A mapping's header line starts with its address range (lowercase hex); the counter
         * lines that follow start with a capitalized name. */
        bool header = (line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f');
        if (header && sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &start, &end) == 2) {
            if (in_range)
                total += vma_huge < overlap ? vma_huge : overlap;
            in_range = start < hi && end > lo;
            overlap = in_range ? (end < hi ? end : hi) - (start > lo ? start : lo) : 0;
            vma_huge = 0;
        } else if (in_range && (sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1 ||
                                sscanf(line, "AnonHugePages: %llu kB", &kb) == 1)) {
            vma_huge += kb << 10;
        }
    }
    if (in_range)
        total += vma_huge < overlap ? vma_huge : overlap;
    fclose(f);
    return (int64_t)total;
}

void pages_populate(const void *p, size_t n)
{
    if (madvise((void *)p, n, MADV_POPULATE_READ) == 0)
        return;
    /* Kernels before 5.14: touch every page. */
    volatile const uint8_t *b = p;
    for (size_t i = 0; i < n; i += 4096)
        (void)b[i];
}

static bool mostly_huge(void *p, size_t n)
{
    int64_t h = pages_huge_bytes(p, n);
    return h >= 0 && (double)h >= ENOUGH_HUGE * (double)n;
}

static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return (uint64_t)kb << 10;
}

/* Drop the file's cached pages of [off, off + n) (they must be clean and unmapped) and read the
 * range again through the mapping, which now faults it in as large folios. */
static bool reread(int fd, void *p, size_t n, off_t off)
{
    if (fdatasync(fd) != 0 || madvise(p, n, MADV_DONTNEED) != 0 ||
        posix_fadvise(fd, off, (off_t)n, POSIX_FADV_DONTNEED) != 0)
        return false;
    pages_populate(p, n);
    return mostly_huge(p, n);
}

/* Replace [p, p + n) (2 MB aligned) by an anonymous huge-page copy at the same address. */
static int copy_in_place(void *p, size_t n, char *err, size_t errlen)
{
    uint8_t *raw = mmap(NULL, n + HUGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        snprintf(err, errlen, "huge pages: cannot allocate %zu MiB for a copy: %s", n >> 20, strerror(errno));
        return -1;
    }
    /* Trim to a 2 MB aligned block so the kernel can use whole huge pages and mremap can move
     * them as such. */
    uint8_t *copy = (uint8_t *)(((uintptr_t)raw + HUGE_SIZE - 1) & ~(HUGE_SIZE - 1));
    if (copy > raw)
        munmap(raw, (size_t)(copy - raw));
    munmap(copy + n, (size_t)(raw + n + HUGE_SIZE - (copy + n)));
    madvise(copy, n, MADV_HUGEPAGE);
    memcpy(copy, p, n);
    mprotect(copy, n, PROT_READ);
    if (mremap(copy, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, p) == MAP_FAILED) {
        snprintf(err, errlen, "huge pages: cannot move the copy into place: %s", strerror(errno));
        munmap(copy, n);
        return -1;
    }
    return 0;
}

int pages_make_huge(const void *map, const void *p, size_t len, const char *path, unsigned allow,
                    pages_report *rep, char *err, size_t errlen)
{
    double t0 = now();
    uintptr_t a0 = ((uintptr_t)p + HUGE_SIZE - 1) & ~(HUGE_SIZE - 1);
    uintptr_t a1 = ((uintptr_t)p + len) & ~(HUGE_SIZE - 1);
    *rep = (pages_report){.method = PAGES_SMALL};
    if (a1 <= a0)
        return 0; /* smaller than one huge page */
    void *r = (void *)a0;
    size_t n = a1 - a0;
    rep->bytes = n;
    /* Advice first: pages read from now on come in as large folios and map as 2 MB. */
    madvise(r, n, MADV_HUGEPAGE);
    pages_populate(r, n);
    int rc = 0;
    if (mostly_huge(r, n)) {
        rep->method = PAGES_FILE;
    } else if (allow & (PAGES_ALLOW_REREAD | PAGES_ALLOW_COPY)) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        off_t off = (off_t)(a0 - (uintptr_t)map);
        if ((allow & PAGES_ALLOW_REREAD) && fd >= 0 && reread(fd, r, n, off)) {
            rep->method = PAGES_REREAD;
        } else if ((allow & PAGES_ALLOW_COPY) && mem_available() >= n + COPY_RESERVE) {
            rc = copy_in_place(r, n, err, errlen);
            if (rc == 0) {
                rep->method = PAGES_COPY;
                /* The cached file pages are now unused by this process; let them go. */
                if (fd >= 0)
                    posix_fadvise(fd, off, (off_t)n, POSIX_FADV_DONTNEED);
            }
        }
        if (fd >= 0)
            close(fd);
    }
    rep->huge_bytes = pages_huge_bytes(r, n);
    rep->seconds = now() - t0;
    return rc;
}
