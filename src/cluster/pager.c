/* pager.c — the background thread that prefetches and releases layer windows (pager.h), in
 * chunks so that a newer request overtakes an outdated one, and the residency and disk-read
 * counters the ring reports. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cluster/pager.h"
#include "gguf/pages.h"

/* Work is done in chunks so that a newer request can cut an outdated one short. */
#define CHUNK_BYTES (4u << 20)

struct pager {
    int fd;
    const uint8_t *map;
    uint64_t size;
    uint64_t page;
    enum prefetch_method method;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop, pending, busy;
    _Atomic bool exact;        /* pager_set_exact */
    /* The pending request, and the one the thread works on: swapped under the lock, so the
     * requester never writes ranges the thread is reading. */
    struct job {
        byte_range *drop, *fetch;
        int n_drop, n_fetch, cap_drop, cap_fetch;
    } req, work;
    _Atomic uint64_t faults;
};

int prefetch_method_parse(const char *s)
{
    if (!strcmp(s, "madvise"))
        return PREFETCH_MADVISE;
    if (!strcmp(s, "fadvise"))
        return PREFETCH_FADVISE;
    if (!strcmp(s, "touch"))
        return PREFETCH_TOUCH;
    return -1;
}

const char *prefetch_method_name(enum prefetch_method m)
{
    return m == PREFETCH_MADVISE ? "madvise" : m == PREFETCH_FADVISE ? "fadvise" : "touch";
}

static uint64_t thread_major_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (uint64_t)ru.ru_majflt;
}

/* Whole pages strictly inside [b, e): releasing must not drop a neighbour's bytes. */
static bool inner_pages(const pager *p, byte_range r, uint64_t *b, uint64_t *e)
{
    *b = (r.begin + p->page - 1) / p->page * p->page;
    *e = (r.end > p->size ? p->size : r.end) / p->page * p->page;
    return *b < *e;
}

static void drop_range(pager *p, byte_range r)
{
    uint64_t b, e;
    if (!inner_pages(p, r, &b, &e))
        return;
    madvise((void *)(p->map + b), e - b, MADV_DONTNEED);
    posix_fadvise(p->fd, (off_t)b, (off_t)(e - b), POSIX_FADV_DONTNEED);
}

static bool chunk_resident(const pager *p, uint64_t b, uint64_t e)
{
    byte_range r = {b, e};
    uint64_t res, tot;
    pager_resident_pages(p->map, p->size, &r, 1, &res, &tot);
    return res == tot;
}

/* Start reading a chunk: the kernel queues the reads and returns. */
static void hint_chunk(pager *p, uint64_t b, uint64_t e)
{
    if (p->method == PREFETCH_FADVISE)
        posix_fadvise(p->fd, (off_t)b, (off_t)(e - b), POSIX_FADV_WILLNEED);
    else
        madvise((void *)(p->map + b), e - b, MADV_WILLNEED);
}

static bool superseded(pager *p)
{
    pthread_mutex_lock(&p->lock);
    bool s = p->pending || p->stop;
    pthread_mutex_unlock(&p->lock);
    return s;
}

static void *pager_main(void *arg)
{
    pager *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        p->busy = false;
        pthread_cond_broadcast(&p->cond);
        while (!p->pending && !p->stop)
            pthread_cond_wait(&p->cond, &p->lock);
        if (p->stop)
            break;
        struct job t = p->work;
        p->work = p->req;
        p->req = t;
        p->pending = false;
        p->busy = true;
        pthread_mutex_unlock(&p->lock);

        uint64_t f0 = thread_major_faults();
        const struct job *j = &p->work;
        for (int i = 0; i < j->n_drop; i++)
            drop_range(p, j->drop[i]);
        /* MADVISE and FADVISE hint the whole window, so the disk sees all of it queued and
         * reads exactly the window; TOUCH reads it chunk by chunk through faults, waiting for
         * the data (pages_populate), whose readahead runs up to 8 MiB past the window but reads
         * faster (1.0-2.3 GB/s against 0.2-1.4 for hints then touches, this VM's disk) and
         * caches large folios that map as 2 MB pages; a MADV_WILLNEED hint first had it read in
         * 4 KB pages: a worker's 48 layers of the 14B-like had 110 of 1659 MB in 2 MB mappings
         * that way, 1649 MB now, and decoded at 57.7-61.2 ms per token against 52.5-59.5 (two
         * alternating pairs). */
        for (int i = 0; i < j->n_fetch && !superseded(p); i++) {
            uint64_t b = j->fetch[i].begin / p->page * p->page;
            uint64_t e = j->fetch[i].end > p->size ? p->size : j->fetch[i].end;
            for (; b < e && !superseded(p); b += CHUNK_BYTES) {
                uint64_t ce = b + CHUNK_BYTES < e ? b + CHUNK_BYTES : e;
                /* A window that stayed in memory costs one mincore per chunk, not a walk of
                 * the page cache or a load per page. */
                if (chunk_resident(p, b, ce))
                    continue;
                if (atomic_load(&p->exact)) {
                    /* the hint reads exactly [b, ce) (never outside the file's range); a
                     * fault on a page it cached reads nothing more */
                    posix_fadvise(p->fd, (off_t)b, (off_t)(ce - b), POSIX_FADV_WILLNEED);
                    if (p->method == PREFETCH_TOUCH)
                        pages_populate(p->map + b, ce - b);
                } else if (p->method == PREFETCH_TOUCH) {
                    pages_populate(p->map + b, ce - b);
                } else {
                    hint_chunk(p, b, ce);
                }
            }
        }
        atomic_fetch_add(&p->faults, thread_major_faults() - f0);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

pager *pager_create(const char *path, const uint8_t *map, uint64_t size,
                    enum prefetch_method method, char *err, size_t errlen)
{
    pager *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "pager: out of memory");
        return NULL;
    }
    p->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (p->fd < 0) {
        snprintf(err, errlen, "%s: cannot open for prefetching", path);
        free(p);
        return NULL;
    }
    p->map = map;
    p->size = size;
    p->page = (uint64_t)sysconf(_SC_PAGESIZE);
    p->method = method;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->busy = true;   /* until the thread has started and parked */
    if (pthread_create(&p->thread, NULL, pager_main, p)) {
        snprintf(err, errlen, "pager: cannot start its thread");
        close(p->fd);
        free(p);
        return NULL;
    }
    return p;
}

void pager_free(pager *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    close(p->fd);
    free(p->req.drop);
    free(p->req.fetch);
    free(p->work.drop);
    free(p->work.fetch);
    free(p);
}

/* Room for n ranges in *r (its capacity *cap); false when out of memory. */
static bool reserve(byte_range **r, int *cap, int n)
{
    if (n <= *cap)
        return true;
    /* a few ranges per layer (per expert of a layer of experts): this stops growing quickly */
    byte_range *g = realloc(*r, sizeof *g * (size_t)n);
    if (!g)
        return false;
    *r = g;
    *cap = n;
    return true;
}

void pager_request(pager *p, const byte_range *drop, int n_drop, const byte_range *fetch, int n_fetch)
{
    pthread_mutex_lock(&p->lock);
    struct job *j = &p->req;
    /* A pending request's fetches are outdated, but its drops are not: dropping is what keeps
     * a device within its budget, so they stay, and the new ones follow. */
    int kept = p->pending ? j->n_drop : 0;
    if (!reserve(&j->drop, &j->cap_drop, kept + n_drop) ||
        !reserve(&j->fetch, &j->cap_fetch, n_fetch)) {
        pthread_mutex_unlock(&p->lock);
        return;   /* prefetching is an optimisation: skipping it is always correct */
    }
    if (n_drop)
        memcpy(j->drop + kept, drop, sizeof *drop * (size_t)n_drop);
    if (n_fetch)
        memcpy(j->fetch, fetch, sizeof *fetch * (size_t)n_fetch);
    j->n_drop = kept + n_drop;
    j->n_fetch = n_fetch;
    p->pending = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

void pager_set_exact(pager *p)
{
    atomic_store(&p->exact, true);
}

void pager_wait_idle(pager *p)
{
    pthread_mutex_lock(&p->lock);
    while (p->pending || p->busy)
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

uint64_t pager_thread_faults(pager *p)
{
    return atomic_load(&p->faults);
}

void pager_resident_pages(const uint8_t *map, uint64_t size, const byte_range *r, int n,
                          uint64_t *resident, uint64_t *total)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    unsigned char vec[4096];
    *resident = *total = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = r[i].begin / page * page;
        uint64_t e = r[i].end > size ? size : r[i].end;
        while (b < e) {
            uint64_t len = e - b < sizeof vec * page ? e - b : sizeof vec * page;
            uint64_t np = (len + page - 1) / page;
            if (mincore((void *)(map + b), len, vec) == 0)
                for (uint64_t j = 0; j < np; j++)
                    *resident += vec[j] & 1;
            *total += np;
            b += len;
        }
    }
}

uint64_t pager_disk_read_bytes(void)
{
    /* Read once per batch on every device: a single read of the whole file, no stdio. */
    int fd = open("/proc/self/io", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *p = strstr(buf, "\nread_bytes:");
    return p ? strtoull(p + strlen("\nread_bytes:"), NULL, 10) : 0;
}
