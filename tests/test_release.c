/* Which windows a device streams (drops after computing and reads again next token) under each
 * release policy, against budgets worked out by hand: `auto` keeps the first windows in ring
 * order that fit beside two windows in flight, and streams the rest. */
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

/* "0111": which rounds are streamed. */
static const char *pattern(const ring_model *m, const ring_plan *p, int rank,
                           enum release_policy policy, uint64_t budget, int *n)
{
    static char out[MAX_LAYERS + 1];
    bool stream[MAX_LAYERS];
    *n = device_streamed_windows(m, p, rank, policy, budget, stream);
    for (int r = 0; r < p->k; r++)
        out[r] = stream[r] ? '1' : '0';
    out[p->k] = 0;
    return out;
}

static void expect(const ring_model *m, const ring_plan *p, int rank, enum release_policy policy,
                   uint64_t budget, const char *want)
{
    int n, ones = 0;
    const char *got = pattern(m, p, rank, policy, budget, &n);
    for (const char *c = want; *c; c++)
        ones += *c == '1';
    CHECK(strcmp(got, want) == 0 && n == ones,
          "device %d, policy %d, budget %llu: streams %s (%d), want %s", rank, policy,
          (unsigned long long)budget, got, n, want);
}

int main(void)
{
    /* 12 layers of 100 bytes, windows 1 + 2, k = 4: device 1 owns four windows of 200 bytes. */
    ring_model m = model(12, 100, 0);
    ring_plan p = plan2(12, 1, 2, 4);
    expect(&m, &p, 1, RELEASE_NEVER, 1, "0000");
    expect(&m, &p, 1, RELEASE_ALWAYS, 1u << 30, "1111");
    expect(&m, &p, 1, RELEASE_AUTO, 800, "0000");   /* everything fits */
    /* 799: room for 799 - 2 * 200 = 399 bytes of resident windows, so one. */
    expect(&m, &p, 1, RELEASE_AUTO, 799, "0111");
    expect(&m, &p, 1, RELEASE_AUTO, 600, "0111");
    expect(&m, &p, 1, RELEASE_AUTO, 599, "1111");
    expect(&m, &p, 1, RELEASE_AUTO, 0, "1111");

    /* k = 8, device 1 owns 1,600 bytes in windows of 200; 1,000 bytes leave room for three. */
    m = model(24, 100, 0);
    p = plan2(24, 1, 2, 8);
    expect(&m, &p, 1, RELEASE_AUTO, 1000, "00011111");
    expect(&m, &p, 1, RELEASE_AUTO, 1599, "00000111");

    /* The head's own weights (300 bytes) are always in use: they come off its room first.
     * Without them its 800 bytes of windows fit in 1,000; with them, room 1,000 - 300 - 2 * 100
     * = 500: five windows. */
    expect(&m, &p, 0, RELEASE_AUTO, 1000, "00000000");
    m = model(24, 100, 300);
    expect(&m, &p, 0, RELEASE_AUTO, 1000, "00000111");
    expect(&m, &p, 0, RELEASE_AUTO, 1100, "00000000");

    /* A partial last round leaves device 1 without a window in round 3: nothing to stream there. */
    m = model(10, 100, 0);
    p = plan2(10, 1, 2, 4);
    expect(&m, &p, 1, RELEASE_ALWAYS, 0, "1110");
    expect(&m, &p, 1, RELEASE_AUTO, 599, "1110");
    /* Here device 1's last window is one layer: windows of 200, 200, 200, 200, 100 bytes; the
     * in-flight room is sized by the largest, so 800 bytes keep two resident. */
    m = model(14, 100, 0);
    p = plan2(14, 1, 2, 5);
    expect(&m, &p, 1, RELEASE_AUTO, 800, "00111");

    /* One window: what it drops is what it needs next, so nothing is streamed whatever the
     * budget. */
    m = model(3, 100, 0);
    p = plan2(3, 1, 2, 1);
    expect(&m, &p, 1, RELEASE_ALWAYS, 0, "0");
    expect(&m, &p, 1, RELEASE_AUTO, 0, "0");
    return test_done();
}
