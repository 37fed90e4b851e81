#include <string.h>

#include "cluster/plan.h"
#include "test.h"

/* Round-robin layout with a partial last round: every layer is computed by exactly one
 * (device, round), in ascending order around the ring. */
static void check_cover(const int *w, int n_dev, int n_layer)
{
    ring_plan p = {.n_dev = n_dev, .n_layer = n_layer};
    memcpy(p.window, w, sizeof(int) * (size_t)n_dev);
    p.k = plan_rounds_needed(w, n_dev, n_layer);
    char err[256];
    CHECK(plan_validate(&p, err, sizeof err) == 0, "%s", err);
    int next = 0;
    for (int r = 0; r < p.k; r++)
        for (int d = 0; d < n_dev; d++) {
            int a, b;
            plan_range(&p, d, r, &a, &b);
            CHECK(a == next || a == b, "round %d dev %d starts at %d, expected %d", r, d, a, next);
            if (a < b)
                next = b;
        }
    CHECK(next == n_layer, "layout ends at %d of %d", next, n_layer);
}

int main(void)
{
    check_cover((int[]){4, 4, 8}, 3, 16);
    check_cover((int[]){2, 2, 2, 2, 2, 2}, 6, 36);
    check_cover((int[]){3, 1}, 2, 5);      /* partial last round */
    check_cover((int[]){1, 0, 2}, 3, 7);   /* a forwarding device */

    ring_plan bad = {.n_dev = 2, .n_layer = 10, .k = 1, .window = {2, 2}};
    char err[256];
    CHECK(plan_validate(&bad, err, sizeof err) != 0, "k=1 of 4 layers accepted for 10 layers");
    /* A window larger than the model is refused naming the device (-lw 9,9,9 on 5 layers
     * covers them in one round, but is not what the user meant), as is a huge one a head may
     * send (each window is checked before the sum). */
    ring_plan big = {.n_dev = 3, .n_layer = 5, .k = 1, .window = {1, 9, 9}};
    CHECK(plan_validate(&big, err, sizeof err) != 0 &&
              !strcmp(err, "device 1 has a window of 9 layers, but the model has 5 (a window is "
                           "0..5 layers)"),
          "window 9 of 5 layers: '%s'", err);
    ring_plan huge = {.n_dev = 2, .n_layer = 5, .k = 1, .window = {1, 2147483647}};
    CHECK(plan_validate(&huge, err, sizeof err) != 0 && strstr(err, "device 1 has a window"),
          "window INT_MAX: '%s'", err);
    ring_plan gpu = {.n_dev = 1, .n_layer = 5, .k = 1, .window = {5}, .gpu_layers = {6}};
    CHECK(plan_validate(&gpu, err, sizeof err) != 0 &&
              !strcmp(err, "device 0 has 6 GPU layers in a window of 5 layers"),
          "6 GPU layers of 5: '%s'", err);
    ring_plan p = {.n_dev = 2, .n_layer = 5, .k = 2, .window = {2, 1}};
    bool owns[5];
    plan_owned_layers(&p, 1, owns);
    CHECK(!owns[0] && !owns[1] && owns[2] && !owns[3] && !owns[4], "device 1 owns the wrong layers");

    /* Default windows: proportional to free memory, largest remainders first. */
    ring_plan m;
    CHECK(plan_by_memory(&m, 3, 16, 1, (uint64_t[]){4ull << 30, 2ull << 30, 2ull << 30}, err, sizeof err) == 0,
          "%s", err);
    CHECK(m.k == 1 && m.window[0] == 8 && m.window[1] == 4 && m.window[2] == 4,
          "memory 4:2:2 over 16 layers gave %d,%d,%d k=%d", m.window[0], m.window[1], m.window[2], m.k);
    CHECK(plan_by_memory(&m, 3, 16, 1, (uint64_t[]){0, 0, 0}, err, sizeof err) == 0 &&
              m.window[0] == 6 && m.window[1] == 5 && m.window[2] == 5,
          "unknown memory: %d,%d,%d", m.window[0], m.window[1], m.window[2]);
    CHECK(plan_by_memory(&m, 3, 16, 2, (uint64_t[]){4ull << 30, 2ull << 30, 2ull << 30}, err, sizeof err) == 0 &&
              m.k == 2 && m.window[0] == 4 && m.window[1] == 2 && m.window[2] == 2,
          "k=2: %d,%d,%d k=%d", m.window[0], m.window[1], m.window[2], m.k);
    CHECK(plan_by_memory(&m, 2, 7, 3, (uint64_t[]){1, 1}, err, sizeof err) == 0 && m.k == 3 &&
              m.window[0] + m.window[1] == 3,
          "7 layers in 3 rounds: %d,%d k=%d", m.window[0], m.window[1], m.k);

    /* GPU layers: the last n of every round's range, fewer in a short partial last round (as
     * the cost model counts them). Windows 3,2 over 8 layers: device 0 has 0-2 and 5-7, device 1
     * has 3-4 only. */
    ring_plan g = {.n_dev = 2, .n_layer = 8, .k = 2, .window = {3, 2}, .gpu_layers = {2, 1}};
    bool on[8];
    CHECK(plan_gpu_mask(&g, 0, on) == 4 && !on[0] && on[1] && on[2] && !on[5] && on[6] && on[7],
          "device 0's GPU layers of windows 3,2 with 2 on the GPU");
    CHECK(plan_gpu_mask(&g, 1, on) == 1 && on[4] && !on[3] && !on[0], "device 1's GPU layer");
    ring_plan part = {.n_dev = 2, .n_layer = 8, .k = 2, .window = {2, 3}, .gpu_layers = {0, 3}};
    CHECK(plan_gpu_mask(&part, 1, on) == 4 && on[2] && on[3] && on[4] && on[7] && !on[5] && !on[6],
          "a partial last round of 1 layer keeps 1 of the 3 GPU layers");
    CHECK(plan_gpu_mask(&part, 0, on) == 0, "no GPU layers on device 0");

    char text[64];
    plan_format_layers(&p, 0, text, sizeof text);
    CHECK(!strcmp(text, "0-1 3-4"), "device 0 of windows 2,1 over 5 layers: '%s'", text);
    plan_format_layers(&p, 1, text, sizeof text);
    CHECK(!strcmp(text, "2"), "device 1: '%s'", text);
    return test_done();
}
