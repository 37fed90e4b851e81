/* Which layers a device streams (drops after computing and reads again next token) under each
 * release policy, against budgets worked out by hand: `auto` keeps the first layers in ring
 * order that fit beside room for two of its largest layers in flight, and the start of the
 * next as far as the budget reaches, and streams the rest. */
#include <string.h>

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
        uint64_t room = DEVICE_STREAM_ROOM_LAYERS * (rank == 0 ? 300 : 100);
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
    return test_done();
}
