/* A worker's wait counts the time it waits for a batch within the ring, not the head's idle
 * time between requests: two one-token batches 1.5 s apart on a 2-device loopback ring leave
 * the worker's wait far below the 1.5 s (and no more than the batches' time in the ring). */
#include <string.h>
#include <time.h>

#include "cluster/net.h"
#include "cluster/ring.h"
#include "support/fake_ring.h"
#include "test.h"

enum { N_LAYER = 4, N_EMBD = 8, N_CTX = 16 };

int main(void)
{
    fake_model fm;
    REQUIRE(fake_model_create(&fm, N_LAYER, N_EMBD, 16384, 1) == 0, "fake model");
    fake_worker w;
    REQUIRE(fake_worker_start(&w, &fm, NULL) == 0, "worker");
    char list[64], err[512] = "";
    fake_worker_list(&w, 1, list, sizeof list);
    int lw[2] = {2, 2};
    ring_opts o = {.workers = list, .lw = lw, .n_lw = 2, .n_ctx = N_CTX, .max_batch = 4};
    ring_layers head;
    ring *r = fake_head_connect(&fm, &o, &head, err, sizeof err);
    REQUIRE(r, "%s", err);
    REQUIRE(ring_start(r, &head, err, sizeof err) == 0, "%s", err);
    int64_t in_ring = 0;
    for (int32_t pos = 0; pos < 2; pos++) {
        if (pos) {   /* the head idle between two requests */
            struct timespec ts = {1, 500 * 1000000};
            nanosleep(&ts, NULL);
        }
        float h[N_EMBD] = {0.5f};
        int64_t t0 = net_now_ns();
        REQUIRE(ring_eval(r, h, 1, &pos, NULL) == 0, "%s", ring_error(r));
        in_ring += net_now_ns() - t0;
    }
    ring_finish(r);
    ring_counters c;
    ring_totals(r, 1, &c);
    fprintf(stderr, "ring_wait: worker wait %.3f ms, compute %.3f ms, batches in the ring "
            "%.3f ms\n", c.wait_ns / 1e6, c.compute_ns / 1e6, in_ring / 1e6);
    CHECK(c.wait_ns <= (uint64_t)in_ring, "the worker waited %.3f ms in batches that were "
          "%.3f ms in the ring (1.5 s idle between them)", c.wait_ns / 1e6, in_ring / 1e6);
    ring_close(r);
    fake_layers_close(&head);
    fake_worker_stop(&w);
    fake_model_destroy(&fm);
    return test_done();
}
