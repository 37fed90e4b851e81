/* prima bench pages — decode speed against where the weights live and in what pages.
 *
 * The same matrix-vector products over the same bytes, held in: anonymous memory in 4 KB pages
 * and in transparent huge pages; a read-only mapping of a file just written (its page cache in
 * 4 KB pages), with and without MADV_HUGEPAGE; the same file after its cached pages were dropped
 * and read again (large folios), with and without MADV_HUGEPAGE; and the file handed to the
 * model loader's helper (gguf/pages.h) allowed only to re-read, or only to copy. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/run_opts.h"
#include "gguf/pages.h"
#include "kernels/kern.h"
#include "kernels/probe.h"

#define N_IN 4096
#define ROWS 4096

static const char usage_text[] =
    "usage: prima bench pages [--json] [-t N] [--type T] [--size MiB] [--dir DIR] [--reps N]\n"
    "\n"
    "Decode-style matrix-vector products (4096x4096 matrices of type T, one after another over\n"
    "the whole region, like one token through the layers) over a region of weights held:\n"
    "  anon-4k         anonymous memory, 4 KB pages (MADV_NOHUGEPAGE)\n"
    "  anon-thp        anonymous memory, transparent huge pages (MADV_HUGEPAGE)\n"
    "  written         a read-only mmap of a file just written 4 KB at a time, as downloads and\n"
    "                  copies do (its page cache in 4 KB pages)\n"
    "  written+advise  the same with MADV_HUGEPAGE on the mapping\n"
    "  cold            the file's cached pages dropped (POSIX_FADV_DONTNEED), then mapped and\n"
    "                  read in by page faults\n"
    "  cold+advise     the same with MADV_HUGEPAGE before the first touch\n"
    "  helper-reread   a file just written, given to the loader's huge-page helper allowed to\n"
    "                  drop and re-read the file's pages\n"
    "  helper-copy     the same, allowed only to copy into anonymous huge pages\n"
    "For each: matvec GB/s (median of passes, fraction of the read bandwidth measured first),\n"
    "the share of the region in 2 MB pages, and for the helper the seconds it took.\n"
    "The file is created in DIR and removed at the end; it needs SIZE MiB of disk.\n"
    "\n";

struct opts {
    bool json;
    int threads, reps, size_mib;
    enum dtype type;
    size_t size;
    const char *dir;
};

struct region {
    const uint8_t *w;
    size_t mat_bytes;
    int n_mats;
};

static double bench_region(const struct opts *o, kern_ctx *c, const struct region *r,
                           const float *x, float *y, double *spread)
{
    double *secs = malloc(sizeof(double) * (size_t)o->reps);
    for (int p = -1; p < o->reps; p++) { /* pass -1 warms up */
        double t0 = probe_now();
        for (int m = 0; m < r->n_mats; m++)
            kern_matmul(c, r->w + (size_t)m * r->mat_bytes, o->type, N_IN, ROWS, x, 1, y);
        if (p >= 0)
            secs[p] = probe_now() - t0;
    }
    double s = bench_median_spread(secs, o->reps, spread);
    free(secs);
    return (double)r->mat_bytes * r->n_mats / s / 1e9;
}

static void report(const struct opts *o, const char *source, const char *op, double value,
                   const char *unit, double fraction, double spread)
{
    bench_result r = {.type = dtype_get((uint32_t)o->type)->name, .op = op, .source = source,
                      .threads = o->threads, .value = value, .unit = unit,
                      .fraction = fraction, .spread = spread};
    bench_print(&r, o->json);
}

static void measure(const struct opts *o, kern_ctx *c, const char *source, const struct region *r,
                    const float *x, float *y, double bandwidth)
{
    double spread, gbs = bench_region(o, c, r, x, y, &spread);
    report(o, source, "matvec", gbs, "GB/s", gbs * 1e9 / bandwidth, spread);
    size_t n = r->mat_bytes * (size_t)r->n_mats;
    int64_t huge = pages_huge_bytes(r->w, n);
    if (huge >= 0)
        report(o, source, "in_2mb_pages", 100.0 * (double)huge / (double)n, "%", -1, -1);
}

/* (Re)write the file with n_mats copies of the pattern matrix, 4 KB per write as a download or
 * a copy tool does: the page cache then holds it in 4 KB pages. (Large writes get large folios
 * on file systems that support them.) */
static int write_file(int fd, const uint8_t *pattern, const struct region *r)
{
    if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0)
        return -1;
    for (int m = 0; m < r->n_mats; m++)
        for (size_t off = 0; off < r->mat_bytes;) {
            size_t piece = r->mat_bytes - off < 4096 ? r->mat_bytes - off : 4096;
            ssize_t k = write(fd, pattern + off, piece);
            if (k <= 0)
                return -1;
            off += (size_t)k;
        }
    return 0;
}

/* Drop the file's cached pages (they must be written back first). */
static void drop_cache(int fd)
{
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

static int run_file_variants(const struct opts *o, kern_ctx *c, const char *path, int fd,
                             const uint8_t *pattern, struct region r, const float *x, float *y,
                             double bw)
{
    size_t n = r.mat_bytes * (size_t)r.n_mats;
    static const struct {
        const char *name;
        bool cold, advise;
        unsigned helper; /* 0: not the helper */
    } variants[] = {
        {"written", false, false, 0},     {"written+advise", false, true, 0},
        {"cold", true, false, 0},         {"cold+advise", true, true, 0},
        {"helper-reread", false, false, PAGES_ALLOW_REREAD},
        {"helper-copy", false, false, PAGES_ALLOW_COPY},
    };
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        if (write_file(fd, pattern, &r) != 0)
            return cli_fail("bench pages: cannot write %zu MiB to %s: %s", n >> 20, path, strerror(errno));
        if (variants[v].cold)
            drop_cache(fd);
        uint8_t *map = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED)
            return cli_fail("bench pages: cannot map %s: %s", path, strerror(errno));
        if (variants[v].advise)
            madvise(map, n, MADV_HUGEPAGE);
        if (variants[v].helper) {
            pages_report rep;
            char err[256];
            if (pages_make_huge(map, map, n, path, variants[v].helper, &rep, err, sizeof err) != 0)
                fprintf(stderr, "prima: bench pages: %s\n", err);
            report(o, variants[v].name, pages_method_name(rep.method), rep.seconds, "s", -1, -1);
        }
        r.w = map;
        measure(o, c, variants[v].name, &r, x, y, bw);
        munmap(map, n);
    }
    return 0;
}

static int parse_type(void *dst, const char *flag, const char *v)
{
    int t = dtype_from_name(v);
    if (t < 0 || !kern_type_get((enum dtype)t) || kern_type_get((enum dtype)t)->act_only)
        return cli_fail("bench pages: %s: '%s' is not a weight type the kernels compute with",
                        flag, v), -1;
    ((struct opts *)dst)->type = (enum dtype)t;
    return 0;
}

#define F(field) offsetof(struct opts, field)
static const cli_opt pages_rows[] = {
    {"-t --threads", "N", CLI_INT, F(threads), 1, KERN_MAX_THREADS,
     .help = "threads (default: the number of online CPUs)"},
    {"--type", "T", CLI_FN, .fn = parse_type, .help = "weight type (default q4_k)"},
    {"--size", "MiB", CLI_INT, F(size_mib), 64, 2047,
     .help = "region size, 64 to 2047 (default 1024; make it much larger\nthan the caches)"},
    {"--dir", "DIR", CLI_STR, F(dir),
     .help = "where to create the file (default $TMPDIR, else /tmp)"},
    {"--reps", "N", CLI_INT, F(reps), 1, 1000, .help = "passes per measurement (default 9)"},
    {"--json", NULL, CLI_FLAG, F(json),
     .help = "one JSON object per measurement and line (see prima bench\n"
             "kernels --help); source names the variant"},
    {0},
};
#undef F
static const cli_group pages_group = {NULL, pages_rows, NULL};

static int parse(struct opts *o, int argc, char **argv)
{
    o->threads = default_threads();
    o->reps = 9;
    o->type = DT_Q4_K;
    o->size_mib = 1024;
    o->dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    const cli_set set = {.g = &pages_group, .dst = o};
    int rc = cli_opts_parse("bench pages", &set, 1, argc, argv, usage_text, NULL, NULL);
    o->size = (size_t)o->size_mib << 20;
    return rc;
}

static int run(int argc, char **argv)
{
    struct opts o = {0};
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    struct region r = {.mat_bytes = dtype_row_bytes(o.type, N_IN) * ROWS};
    r.n_mats = (int)(o.size / r.mat_bytes);
    size_t n = r.mat_bytes * (size_t)r.n_mats;
    kern_ctx *c = kern_ctx_create(o.threads);
    uint8_t *pattern = malloc(r.mat_bytes);
    float *x = malloc(sizeof(float) * N_IN), *y = malloc(sizeof(float) * ROWS);
    char path[4096];
    snprintf(path, sizeof path, "%s/prima-bench-pages-XXXXXX", o.dir);
    int fd = c && !kern_ctx_reserve(c, N_IN, 1) && pattern && x && y ? mkstemp(path) : -1;
    if (fd < 0) {
        rc = cli_fail("bench pages: cannot create a file in %s: %s", o.dir, strerror(errno));
        goto done;
    }
    bench_fill_weights(o.type, pattern, N_IN, ROWS);
    for (int i = 0; i < N_IN; i++)
        x[i] = bench_rand();

    double bw = probe_read_bandwidth(c, (size_t)512 << 20, o.reps);
    report(&o, NULL, "read_bandwidth", bw / 1e9, "GB/s", -1, -1);
    static const struct { const char *name; int advice; } anon[] = {
        {"anon-4k", MADV_NOHUGEPAGE}, {"anon-thp", MADV_HUGEPAGE}};
    for (size_t k = 0; k < 2; k++) {
        uint8_t *w = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (w == MAP_FAILED) {
            rc = cli_fail("bench pages: cannot allocate %zu MiB", n >> 20);
            goto done;
        }
        madvise(w, n, anon[k].advice);
        for (int m = 0; m < r.n_mats; m++)
            memcpy(w + (size_t)m * r.mat_bytes, pattern, r.mat_bytes);
        r.w = w;
        measure(&o, c, anon[k].name, &r, x, y, bw);
        munmap(w, n);
    }
    rc = run_file_variants(&o, c, path, fd, pattern, r, x, y, bw);
done:
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    free(pattern), free(x), free(y);
    kern_ctx_free(c);
    return rc;
}

const struct bench_sub bench_pages = {"pages", "matvec speed by where the weights live: anonymous, file cache, 4 KB or 2 MB pages", run};
