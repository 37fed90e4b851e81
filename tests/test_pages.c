/* test_pages.c — the huge-page helper keeps the weights' bytes and addresses whatever it does.
 *
 * A file is written 4 KB at a time (its page cache then sits in 4 KB pages), mapped read-only,
 * and handed to pages_make_huge() allowed to re-read, then to copy. The contents at the same
 * addresses must not change; whether 2 MB pages result depends on the kernel, so that is only
 * checked where anonymous huge pages demonstrably work. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf/pages.h"
#include "test.h"

#define SIZE ((size_t)12 << 20)

static uint8_t expected(size_t i)
{
    return (uint8_t)(i * 2654435761u >> 13);
}

static bool contents_ok(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != expected(i))
            return false;
    return true;
}

/* Whether this kernel gives an madvised anonymous region huge pages at all. */
static bool thp_available(void)
{
    size_t n = (size_t)8 << 20;
    uint8_t *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return false;
    madvise(p, n, MADV_HUGEPAGE);
    memset(p, 1, n);
    int64_t h = pages_huge_bytes(p, n);
    munmap(p, n);
    return h > 0;
}

/* (Re)write the file 4 KB at a time: its page cache is then in 4 KB pages. */
static void write_file(int fd)
{
    uint8_t page[4096];
    REQUIRE(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0, "truncate");
    for (size_t off = 0; off < SIZE; off += sizeof page) {
        for (size_t i = 0; i < sizeof page; i++)
            page[i] = expected(off + i);
        REQUIRE(write(fd, page, sizeof page) == (ssize_t)sizeof page, "write");
    }
}

static void check_method(const char *path, int fd, unsigned allow, bool thp)
{
    write_file(fd);
    uint8_t *map = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED, "mmap");
    /* An unaligned start, as a GGUF data section has. */
    const uint8_t *start = map + 12345;
    size_t len = SIZE - 12345 - 777;
    pages_report rep;
    char err[256];
    CHECK(pages_make_huge(map, start, len, path, allow, &rep, err, sizeof err) == 0, "%s", err);
    CHECK(contents_ok(map, SIZE), "allow %u: contents changed (method %s)", allow, pages_method_name(rep.method));
    CHECK(rep.bytes > 0 && rep.bytes <= len && rep.bytes % (2u << 20) == 0, "handled %llu bytes",
          (unsigned long long)rep.bytes);
    if (thp)
        CHECK(rep.method != PAGES_SMALL && rep.huge_bytes > 0,
              "allow %u: method %s, %lld bytes in 2 MB pages", allow, pages_method_name(rep.method),
              (long long)rep.huge_bytes);
    if (allow == PAGES_ALLOW_COPY)
        CHECK(rep.method == PAGES_COPY || rep.method == PAGES_FILE, "copy allowed, method %s",
              pages_method_name(rep.method));
    /* The whole mapping, copy included, goes away with one munmap. */
    CHECK(munmap(map, SIZE) == 0, "munmap");
}

int main(void)
{
    char path[] = "/tmp/prima-test-pages-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    bool thp = thp_available();
    if (!thp)
        fprintf(stderr, "note: no anonymous huge pages here; checking contents only\n");
    check_method(path, fd, PAGES_ALLOW_REREAD, false);
    check_method(path, fd, PAGES_ALLOW_COPY, thp);
    check_method(path, fd, 0, false);
    close(fd);
    unlink(path);
    return test_done();
}
