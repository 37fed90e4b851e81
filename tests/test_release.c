/* Which layers a device streams (drops after computing and reads again next token) under each
 * release policy, against budgets worked out by hand: `auto` keeps the first layers in ring
 * order that fit beside room for two of its largest layers in flight, and the start of the
 * next as far as the budget reaches, and streams the rest. */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cluster/device.h"
#include "test.h"

#define MAX_LAYERS 32

static uint64_t begin[MAX_LAYERS], end[MAX_LAYERS];

/* A model of n_layer layers of `layer_bytes` each, laid out back to back. */
static ring_model model(int n_layer, uint64_t layer_bytes, uint64_t head_bytes)
{
    for (int il = 0; il < n_layer; il++) {
        begin[il] = 1000 + (uint64_t)il * layer_bytes;
        end[il] = begin[il] + layer_bytes;
    }
    return (ring_model){.n_layer = n_layer, .layer_begin = begin, .layer_end = end,
                        .head_bytes = head_bytes};
}

static ring_plan plan2(int n_layer, int w0, int w1, int k)
{
    ring_plan p = {.n_dev = 2, .n_layer = n_layer, .k = k};
    p.window[0] = w0;
    p.window[1] = w1;
    char err[256];
    REQUIRE(plan_validate(&p, err, sizeof err) == 0, "%s", err);
    return p;
}

static uint64_t kept;   /* of the last pattern's cut layer */

/* One character per layer of the model: '.' another device's, 'r' resident, 's' streamed, 'p'
 * streamed but for its first `kept` bytes. */
static const char *pattern(const ring_model *m, const ring_plan *p, int rank,
                           enum release_policy policy, uint64_t budget, int *n)
{
    static char out[MAX_LAYERS + 1];
    int cut;
    *n = device_streamed_layers(m, p, rank, policy, budget, &cut, &kept);
    bool owns[MAX_LAYERS];
    plan_owned_layers(p, rank, owns);
    for (int il = 0; il < p->n_layer; il++)
        out[il] = !owns[il] ? '.' : il == cut && kept ? 'p' : il >= cut ? 's' : 'r';
    out[p->n_layer] = 0;
    return out;
}

static void expect(const ring_model *m, const ring_plan *p, int rank, enum release_policy policy,
                   uint64_t budget, const char *want)
{
    int n, streamed = 0;
    const char *got = pattern(m, p, rank, policy, budget, &n);
    for (const char *c = want; *c; c++)
        streamed += *c == 's' || *c == 'p';
    CHECK(strcmp(got, want) == 0 && n == streamed,
          "device %d, policy %d, budget %llu: %s (%d streamed), want %s", rank, policy,
          (unsigned long long)budget, got, n, want);
}

/* The device at run time: one device, eight layers of 1 MiB, a budget for 3.5 of them beside
 * the room. Computing a token faults every layer in (the stand-in below reads a byte a page);
 * the streamed bytes are dropped, the resident ones and the cut layer's first half stay. */
#define RT_LAYERS 8
#define RT_LAYER (1u << 20)

static const uint8_t *rt_map;

static int rt_eval(void *ctx, float *hidden, int n, const int32_t *pos, const int32_t *seq,
                   int first, int last)
{
    (void)ctx, (void)hidden, (void)n, (void)pos, (void)seq;
    volatile uint8_t sink = 0;
    for (uint64_t o = (uint64_t)first * RT_LAYER; o < (uint64_t)last * RT_LAYER; o += 4096)
        sink ^= rt_map[o];
    (void)sink;
    return 0;
}

static double rt_resident(uint64_t b, uint64_t e)
{
    byte_range r = {b, e};
    uint64_t res, tot;
    pager_resident_pages(rt_map, (uint64_t)RT_LAYERS * RT_LAYER, &r, 1, &res, &tot);
    return tot ? (double)res / (double)tot : 0;
}

static void runtime_cut(void)
{
    char path[] = "/tmp/prima-test-release-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    uint64_t size = (uint64_t)RT_LAYERS * RT_LAYER;
    uint8_t *buf = calloc(1, size);
    REQUIRE(buf && write(fd, buf, size) == (ssize_t)size && fsync(fd) == 0, "writing %s", path);
    free(buf);
    rt_map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(rt_map != MAP_FAILED, "mmap");
    posix_fadvise(fd, 0, (off_t)size, POSIX_FADV_DONTNEED);
    if (rt_resident(0, size) > 0.5) {
        fprintf(stderr, "note: the page cache of %s cannot be dropped here: no run-time check\n", path);
    } else {
        for (int il = 0; il < RT_LAYERS; il++) {
            begin[il] = (uint64_t)il * RT_LAYER;
            end[il] = begin[il] + RT_LAYER;
        }
        ring_model m = {.n_layer = RT_LAYERS, .path = path, .map = rt_map, .map_size = size,
                        .layer_begin = begin, .layer_end = end};
        ring_plan p = {.n_dev = 1, .n_layer = RT_LAYERS, .k = 1, .window = {RT_LAYERS}};
        ring_layers layers = {.eval = rt_eval};
        device_opts o = {.release = RELEASE_AUTO, .method = PREFETCH_TOUCH,
                         .mem_budget = device_weight_budget(&m, &p, 0, 3.5)};
        device d;
        char err[256];
        REQUIRE(device_init(&d, &m, &p, 0, &layers, &o, err, sizeof err) == 0, "%s", err);
        CHECK(d.n_streamed == 5 && d.cut == 3 && d.cut_offset == 3 * RT_LAYER + RT_LAYER / 2,
              "%d streamed from layer %d, at offset %llu", d.n_streamed, d.cut,
              (unsigned long long)d.cut_offset);
        float hidden[4] = {0};
        int32_t pos = 0, seq = 0;
        REQUIRE(device_compute(&d, 0, hidden, 1, &pos, &seq) == 0, "compute");
        device_handed_on(&d, 0);
        pager_wait_idle(d.pg);
        /* a kernel may page out a few idle pages on its own (test_pager.c): 1 % allowed */
        CHECK(rt_resident(0, 3 * RT_LAYER + RT_LAYER / 2) >= 0.99,
              "the resident layers and the cut layer's first half: %.1f%% resident",
              100 * rt_resident(0, 3 * RT_LAYER + RT_LAYER / 2));
        CHECK(rt_resident(7 * RT_LAYER, 8 * RT_LAYER) == 0,
              "the last streamed layer was not dropped at the hand-off: %.1f%% resident",
              100 * rt_resident(7 * RT_LAYER, 8 * RT_LAYER));
        device_free(&d);
    }
    munmap((void *)rt_map, size);
    close(fd);
    unlink(path);
}

int main(void)
{
    /* 12 layers of 100 bytes, windows 1 + 2, k = 4: device 1 owns eight layers, 800 bytes. */
    ring_model m = model(12, 100, 0);
    ring_plan p = plan2(12, 1, 2, 4);
    expect(&m, &p, 1, RELEASE_NEVER, 1, ".rr.rr.rr.rr");
    expect(&m, &p, 1, RELEASE_ALWAYS, 1u << 30, ".ss.ss.ss.ss");
    expect(&m, &p, 1, RELEASE_AUTO, 800, ".rr.rr.rr.rr");   /* everything fits */
    /* 799: room for 799 - 2 * 100 = 599 bytes of resident layers: five, and 99 bytes of the
     * sixth, which streams the rest. */
    expect(&m, &p, 1, RELEASE_AUTO, 799, ".rr.rr.rp.ss");
    CHECK(kept == 99, "799: %llu bytes of the cut layer kept, want 99", (unsigned long long)kept);
    expect(&m, &p, 1, RELEASE_AUTO, 700, ".rr.rr.rs.ss");
    expect(&m, &p, 1, RELEASE_AUTO, 699, ".rr.rr.ps.ss");
    expect(&m, &p, 1, RELEASE_AUTO, 300, ".rs.ss.ss.ss");
    expect(&m, &p, 1, RELEASE_AUTO, 250, ".ps.ss.ss.ss");
    expect(&m, &p, 1, RELEASE_AUTO, 200, ".ss.ss.ss.ss");
    expect(&m, &p, 1, RELEASE_AUTO, 0, ".ss.ss.ss.ss");

    /* The head's own weights (300 bytes) are always in use: they come off its room first.
     * Without them its 800 bytes of layers fit in 1,000; with them, room 1,000 - 300 - 2 * 100
     * = 500: five layers. */
    m = model(24, 100, 0);
    p = plan2(24, 1, 2, 8);
    expect(&m, &p, 0, RELEASE_AUTO, 1000, "r..r..r..r..r..r..r..r..");
    m = model(24, 100, 300);
    expect(&m, &p, 0, RELEASE_AUTO, 1000, "r..r..r..r..r..s..s..s..");
    expect(&m, &p, 0, RELEASE_AUTO, 1040, "r..r..r..r..r..p..s..s..");
    CHECK(kept == 40, "1040: %llu bytes of the cut layer kept, want 40", (unsigned long long)kept);
    expect(&m, &p, 0, RELEASE_AUTO, 1100, "r..r..r..r..r..r..r..r..");

    /* One window (k = 1) streams too: the layers beyond the budget cycle through the room,
     * the others stay. Only `always` keeps a single window, which it would drop only to read
     * it again. */
    m = model(10, 100, 0);
    p = plan2(10, 2, 8, 1);
    expect(&m, &p, 1, RELEASE_AUTO, 500, "..rrrsssss");
    expect(&m, &p, 1, RELEASE_AUTO, 550, "..rrrpssss");
    expect(&m, &p, 1, RELEASE_AUTO, 800, "..rrrrrrrr");
    expect(&m, &p, 1, RELEASE_ALWAYS, 0, "..rrrrrrrr");
    /* the room is sized by the largest layer: layer 9 of 300 bytes leaves 900 - 600 = 300 */
    end[9] += 200;
    expect(&m, &p, 1, RELEASE_AUTO, 900, "..rrrsssss");
    expect(&m, &p, 1, RELEASE_AUTO, 950, "..rrrpssss");

    /* The budget a scheduler sends for R resident layers gives back exactly R, whole and
     * fractional, on the head (its own weights) and on a worker, with uneven layers (layer 9
     * is 300 bytes here) */
    m = model(12, 100, 250);
    end[9] += 200;
    p = plan2(12, 1, 2, 4);
    for (int rank = 0; rank < 2; rank++) {
        /* the layers device `rank` owns, in ring order, and the room (twice the largest) */
        int mine[12], owned = 0;
        for (int il = 0; il < 12; il++)
            if (il % 3 == 0 ? rank == 0 : rank == 1)
                mine[owned++] = il;
        uint64_t room = PLAN_STREAM_ROOM_LAYERS * (rank == 0 ? 300 : 100);
        for (int quarter = 0; quarter <= 4 * owned; quarter++) {
            double want = quarter / 4.0;
            int whole = quarter / 4, cut;
            uint64_t keep;
            int n = device_streamed_layers(&m, &p, rank, RELEASE_AUTO,
                                           device_weight_budget(&m, &p, rank, want), &cut, &keep);
            /* what is left over fits in the room: then every layer stays */
            uint64_t left = 0, part = 0;
            for (int i = whole; i < owned; i++)
                left += end[mine[i]] - begin[mine[i]];
            if (whole < owned)
                part = (uint64_t)((want - whole) * (double)(end[mine[whole]] - begin[mine[whole]]));
            bool all = left - part <= room;
            CHECK(all ? n == 0 : n == owned - whole && cut == mine[whole] && keep == part,
                  "device %d, %.2f resident wanted: %d streamed from layer %d, %llu bytes kept",
                  rank, want, n, cut, (unsigned long long)keep);
        }
    }

    /* A partial last round leaves device 1 without a window in round 3: nothing there. */
    m = model(10, 100, 0);
    p = plan2(10, 1, 2, 4);
    expect(&m, &p, 1, RELEASE_ALWAYS, 0, ".ss.ss.ss.");
    expect(&m, &p, 1, RELEASE_AUTO, 599, ".rr.rp.ss.");
    expect(&m, &p, 1, RELEASE_AUTO, 500, ".rr.rs.ss.");

    runtime_cut();
    return test_done();
}
