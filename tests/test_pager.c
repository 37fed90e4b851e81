/* The pager against the kernel's own account of the page cache (mincore): each prefetch method
 * brings a cold file range into memory, release drops exactly the whole pages inside a range and
 * keeps its neighbours, and reading a cold range shows up in the process's disk-read counter.
 * Skipped where the file system keeps no evictable page cache (tmpfs and the like). */
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cluster/pager.h"
#include "test.h"

#define FILE_BYTES (64u << 20)
#define MIB (1u << 20)

static const uint8_t *map;
static int fd;

static double resident_fraction(uint64_t b, uint64_t e)
{
    byte_range r = {b, e};
    uint64_t res, tot;
    pager_resident_pages(map, FILE_BYTES, &r, 1, &res, &tot);
    return tot ? (double)res / (double)tot : 0;
}

static void evict(void)
{
    madvise((void *)map, FILE_BYTES, MADV_DONTNEED);
    posix_fadvise(fd, 0, FILE_BYTES, POSIX_FADV_DONTNEED);
}

/* Readahead hints complete in the background: allow them up to 10 s (seen: over 2 s for 4 MiB
 * with two dozen processes on two cores); the test asks for completion, not for speed. */
static double wait_resident(uint64_t b, uint64_t e)
{
    double f = 0;
    for (int i = 0; i < 1000 && (f = resident_fraction(b, e)) < 1.0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000000}, NULL);
    return f;
}

int main(void)
{
    char path[] = "/tmp/prima-test-pager-XXXXXX";
    fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    uint8_t *buf = malloc(FILE_BYTES);
    for (size_t i = 0; i < FILE_BYTES; i++)
        buf[i] = (uint8_t)(i * 7);
    REQUIRE(write(fd, buf, FILE_BYTES) == (ssize_t)FILE_BYTES, "write");
    free(buf);
    fsync(fd);
    map = mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED, "mmap");
    evict();
    if (resident_fraction(0, FILE_BYTES) > 0.5) {
        unlink(path);
        SKIP("the page cache of %s cannot be dropped here", path);
    }

    const enum prefetch_method methods[] = {PREFETCH_MADVISE, PREFETCH_FADVISE, PREFETCH_TOUCH};
    for (int i = 0; i < 3; i++) {
        char err[256];
        pager *p = pager_create(path, map, FILE_BYTES, methods[i], err, sizeof err);
        REQUIRE(p, "%s", err);
        evict();
        CHECK(resident_fraction(28 * MIB, 32 * MIB) < 0.1, "%s: not cold after eviction",
              prefetch_method_name(methods[i]));
        uint64_t disk0 = pager_disk_read_bytes();
        byte_range want = {28 * MIB + 100, 32 * MIB - 100};
        pager_request(p, NULL, 0, &want, 1);
        pager_wait_idle(p);
        double f = methods[i] == PREFETCH_TOUCH ? resident_fraction(want.begin, want.end)
                                                : wait_resident(want.begin, want.end);
        CHECK(f == 1.0, "%s: %.0f%% of the window resident", prefetch_method_name(methods[i]),
              100 * f);
        uint64_t disk = pager_disk_read_bytes() - disk0;
        CHECK(disk >= 3 * MIB, "%s: %llu bytes read from disk for a 4 MiB window",
              prefetch_method_name(methods[i]), (unsigned long long)disk);
        /* The hints ask for exactly the window: no kernel readahead past its end. Touch faults
         * it in, and the faults' readahead may read up to a readahead window (8 MiB on this
         * VM's disk) around it, not the whole file. */
        bool hint = methods[i] != PREFETCH_TOUCH;
        CHECK(resident_fraction(hint ? 33 * MIB : 48 * MIB, FILE_BYTES) < 0.5 &&
                  resident_fraction(0, hint ? 27 * MIB : 16 * MIB) < 0.5,
              "%s: brought in far more than asked", prefetch_method_name(methods[i]));
        pager_free(p);
    }

    /* Release: whole pages strictly inside the range go, the pages it shares with its
     * neighbours stay. */
    char err[256];
    pager *p = pager_create(path, map, FILE_BYTES, PREFETCH_TOUCH, err, sizeof err);
    REQUIRE(p, "%s", err);
    byte_range all = {0, FILE_BYTES};
    pager_request(p, NULL, 0, &all, 1);
    pager_wait_idle(p);
    /* A kernel may page out memory nobody touched for a while on its own (this VM runs DAMON's
     * pageout scheme): of 64 MiB, a few pages can go between two checks (seen: 64 of 16384,
     * 2 runs in 65). The checks over the whole file allow 1 %; those of single pages are exact. */
    CHECK(resident_fraction(0, FILE_BYTES) >= 0.99, "touch: file not resident: %.2f%%",
          100 * resident_fraction(0, FILE_BYTES));
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    byte_range drop = {MIB + 100, 5 * MIB - 100};
    pager_request(p, &drop, 1, NULL, 0);
    pager_wait_idle(p);
    CHECK(resident_fraction(MIB + page, 5 * MIB - page) == 0.0,
          "released range still resident: %.0f%%", 100 * resident_fraction(MIB + page, 5 * MIB - page));
    CHECK(resident_fraction(MIB, MIB + page) == 1.0,
          "the page shared with the range before was dropped");
    CHECK(resident_fraction(5 * MIB - page, 5 * MIB) == 1.0,
          "the page shared with the range after was dropped");
    CHECK(resident_fraction(0, MIB) == 1.0 && resident_fraction(5 * MIB, FILE_BYTES) >= 0.99,
          "pages outside the released range were dropped");

    /* A newer request replaces a pending one: the thread ends up with the newest work only. */
    evict();
    byte_range a = {0, 4 * MIB}, b = {4 * MIB, FILE_BYTES};
    pager_request(p, NULL, 0, &a, 1);
    pager_request(p, NULL, 0, &b, 1);
    pager_wait_idle(p);
    CHECK(resident_fraction(4 * MIB, FILE_BYTES) >= 0.99, "the newest request was not done");
    pager_free(p);

    munmap((void *)map, FILE_BYTES);
    close(fd);
    unlink(path);
    return test_done();
}
