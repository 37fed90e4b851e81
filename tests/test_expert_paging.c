/* Paging by expert (device.c): a device that streams layers of experts keeps the hottest
 * experts its budget holds and drops the others once computed (keeping every shared part, which
 * the budget holds as well), reads ahead the shared parts and
 * the hot experts, and the last batch's experts only while that guess has been paying off;
 * it counts the routed experts' bytes. Checked with mincore on a file whose page cache can be
 * dropped, with stand-in layers that read the pages a layer of experts reads (its shared part
 * and its routed experts) and report the routing a script gives them. */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cluster/device.h"
#include "test.h"

#define N_LAYER 4
#define N_EXPERT 8
#define SLICE (64u << 10)                      /* one expert's bytes in one tensor */
#define SHARED (64u << 10)                     /* attention, router, norms */
#define LAYER (SHARED + 3 * N_EXPERT * SLICE)  /* shared part, then gate, up, down */

static const uint8_t *map;
static uint64_t routing[N_LAYER];              /* what the next eval routes, per layer */
static uint64_t begin[N_LAYER], end[N_LAYER];
static uint64_t xbegin[N_LAYER][RING_EXPERT_TENSORS], xslice[N_LAYER][RING_EXPERT_TENSORS];

static uint64_t expert_at(int il, int j, int x)
{
    return begin[il] + SHARED + (uint64_t)j * N_EXPERT * SLICE + (uint64_t)x * SLICE;
}

static void touch(uint64_t b, uint64_t e)
{
    volatile uint8_t sink = 0;
    for (uint64_t o = b; o < e; o += 4096)
        sink ^= map[o];
    (void)sink;
}

static int eval(void *ctx, float *hidden, int n, const int32_t *pos, const int32_t *seq,
                int first, int last)
{
    (void)ctx, (void)hidden, (void)n, (void)pos, (void)seq;
    for (int il = first; il < last; il++) {
        touch(begin[il], begin[il] + SHARED);
        for (int x = 0; x < N_EXPERT; x++)
            for (int j = 0; j < 3 && (routing[il] >> x & 1); j++)
                touch(expert_at(il, j, x), expert_at(il, j, x) + SLICE);
    }
    return 0;
}

static const uint64_t *routed(void *ctx, int il)
{
    (void)ctx;
    return &routing[il];
}

static double resident(uint64_t b, uint64_t e)
{
    byte_range r = {b, e};
    uint64_t res, tot;
    pager_resident_pages(map, (uint64_t)N_LAYER * LAYER, &r, 1, &res, &tot);
    return tot ? (double)res / (double)tot : 0;
}

/* Share of expert x of layer il (all three tensors) in memory. */
static double expert_resident(int il, int x)
{
    double s = 0;
    for (int j = 0; j < 3; j++)
        s += resident(expert_at(il, j, x), expert_at(il, j, x) + SLICE);
    return s / 3;
}

/* One token: every layer routes to `mask` (or mask0 for layer 0), then the hand-off and its
 * drop and read-ahead, to the end. Returns the batch's routed bytes. */
static uint64_t token(device *d, uint64_t mask0, uint64_t mask)
{
    for (int il = 0; il < N_LAYER; il++)
        routing[il] = il == 0 ? mask0 : mask;
    float hidden[4] = {0};
    int32_t pos = 0, seq = 0;
    REQUIRE(device_compute(d, 0, hidden, 1, &pos, &seq) == 0, "compute");
    device_handed_on(d, 0);
    pager_wait_idle(d->pg);
    ring_counters c;
    device_take_counters(d, &c);
    return c.routed_bytes;
}

static void init(device *d, const ring_model *m, uint64_t hot_experts, bool prefetch)
{
    ring_plan p = {.n_dev = 1, .n_layer = N_LAYER, .k = 1, .window = {N_LAYER}};
    ring_layers layers = {.eval = eval, .routed = routed};
    /* the room for two layers in flight, the shared parts, and hot_experts experts */
    uint64_t budget = 2 * (uint64_t)LAYER + N_LAYER * (uint64_t)SHARED + hot_experts * 3 * SLICE;
    device_opts o = {.prefetch = prefetch, .release = RELEASE_AUTO, .method = PREFETCH_TOUCH,
                     .mem_budget = budget};
    char err[256];
    REQUIRE(device_init(d, m, &p, 0, &layers, &o, err, sizeof err) == 0, "%s", err);
    /* The device turned read-around off on the expert tensors; the stand-in's faults on the
     * shared parts would still read around them (8 MiB on the development VM), into experts
     * whose residency is checked here: what the device does, not the kernel, is under test. */
    madvise((void *)map, (size_t)N_LAYER * LAYER, MADV_RANDOM);
    CHECK(d->n_streamed == N_LAYER && d->cut == 0 && d->hot_room == hot_experts * 3 * SLICE,
          "%d layers streamed from layer %d, %llu bytes for hot experts", d->n_streamed, d->cut,
          (unsigned long long)d->hot_room);
}

int main(void)
{
    char path[] = "/tmp/prima-test-experts-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    const uint64_t size = (uint64_t)N_LAYER * LAYER;
    uint8_t *buf = calloc(1, size);
    REQUIRE(buf && write(fd, buf, size) == (ssize_t)size && fsync(fd) == 0, "writing %s", path);
    free(buf);
    map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED, "mmap");
    posix_fadvise(fd, 0, (off_t)size, POSIX_FADV_DONTNEED);
    if (resident(0, size) > 0.5) {
        unlink(path);
        SKIP("the page cache of %s cannot be dropped here (tmpfs?): no paging to check", path);
    }
    for (int il = 0; il < N_LAYER; il++) {
        begin[il] = (uint64_t)il * LAYER;
        end[il] = begin[il] + LAYER;
        for (int j = 0; j < 3; j++) {
            xbegin[il][j] = expert_at(il, j, 0);
            xslice[il][j] = SLICE;
        }
    }
    ring_model m = {.n_layer = N_LAYER, .path = path, .map = map, .map_size = size,
                    .layer_begin = begin, .layer_end = end, .n_expert = N_EXPERT,
                    .expert_begin = xbegin, .expert_slice = xslice};
    const uint64_t expert = 3 * SLICE;

    /* Room for two hot experts. Token 1 routes experts 0 and 1 everywhere: the hottest two
     * (ties: the lowest layer) are layer 0's, which the read-ahead brings back with every
     * layer's shared part; every other expert was dropped once computed. */
    device d;
    init(&d, &m, 2, true);
    uint64_t rb = token(&d, 0x3, 0x3);
    CHECK(rb == N_LAYER * 2 * expert, "token 1: %llu routed bytes, want %llu",
          (unsigned long long)rb, (unsigned long long)(N_LAYER * 2 * expert));
    for (int il = 0; il < N_LAYER; il++) {
        CHECK(resident(begin[il], begin[il] + SHARED) >= 0.99, "layer %d's shared part: %.0f%%",
              il, 100 * resident(begin[il], begin[il] + SHARED));
        for (int x = 0; x < N_EXPERT; x++) {
            bool hot = il == 0 && x < 2;
            CHECK(hot ? expert_resident(il, x) >= 0.99 : expert_resident(il, x) == 0,
                  "token 1: layer %d expert %d %.0f%% in memory, want %s", il, x,
                  100 * expert_resident(il, x), hot ? "all" : "none");
        }
    }
    /* Token 2: layer 0 again 0 and 1 (hot: kept, though computed), the others 2 and 3 (cold:
     * dropped once computed, and no read-ahead: the last batch's guess, 0 and 1, was wrong). */
    rb = token(&d, 0x3, 0xc);
    CHECK(rb == N_LAYER * 2 * expert, "token 2: %llu routed bytes", (unsigned long long)rb);
    CHECK(expert_resident(0, 0) >= 0.99 && expert_resident(0, 1) >= 0.99,
          "token 2: layer 0's hot experts %.0f%% and %.0f%% in memory", 100 * expert_resident(0, 0),
          100 * expert_resident(0, 1));
    for (int il = 1; il < N_LAYER; il++)
        for (int x = 0; x < N_EXPERT; x++)
            CHECK(expert_resident(il, x) == 0, "token 2: layer %d expert %d %.0f%% in memory",
                  il, x, 100 * expert_resident(il, x));
    device_free(&d);
    posix_fadvise(fd, 0, (off_t)size, POSIX_FADV_DONTNEED);

    /* No room for hot experts: a routing that repeats is guessed (read ahead after the batch
     * that repeated it), one that changes every token stops the guessing. */
    init(&d, &m, 0, true);
    token(&d, 0x30, 0x30);
    token(&d, 0x30, 0x30);
    for (int il = 0; il < N_LAYER; il++)
        for (int x = 0; x < N_EXPERT; x++) {
            bool guessed = x == 4 || x == 5;
            CHECK(guessed ? expert_resident(il, x) >= 0.99 : expert_resident(il, x) == 0,
                  "a repeated routing: layer %d expert %d %.0f%% in memory, want %s", il, x,
                  100 * expert_resident(il, x), guessed ? "all (read ahead)" : "none");
        }
    token(&d, 0x3, 0x3);
    token(&d, 0xc0, 0xc0);
    for (int il = 0; il < N_LAYER; il++)
        for (int x = 0; x < N_EXPERT; x++)
            CHECK(expert_resident(il, x) == 0, "a changing routing: layer %d expert %d %.0f%% "
                  "in memory, want none (guessing it reads bytes for nothing)", il, x,
                  100 * expert_resident(il, x));
    device_free(&d);
    posix_fadvise(fd, 0, (off_t)size, POSIX_FADV_DONTNEED);

    /* The budget holds the shared parts: without read-ahead they stay in memory once computed
     * (they are not read again every token), and the cold experts still go. */
    init(&d, &m, 0, false);
    token(&d, 0x3, 0x3);
    token(&d, 0x3, 0x3);
    for (int il = 0; il < N_LAYER; il++) {
        CHECK(resident(begin[il], begin[il] + SHARED) >= 0.99, "no read-ahead: layer %d's "
              "shared part %.0f%% in memory", il, 100 * resident(begin[il], begin[il] + SHARED));
        for (int x = 0; x < 2; x++)
            CHECK(expert_resident(il, x) == 0, "no read-ahead: layer %d expert %d %.0f%% in "
                  "memory", il, x, 100 * expert_resident(il, x));
    }
    device_free(&d);

    munmap((void *)map, size);
    close(fd);
    unlink(path);
    return test_done();
}
