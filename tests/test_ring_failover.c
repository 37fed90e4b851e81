/* Failover with workers in their own processes: a worker killed (SIGKILL) or frozen (SIGSTOP)
 * between batches, during a prefill batch and after a KV edit; the ring re-plans on the
 * survivors, rebuilds the KV caches and every output equals one device's. Batches of 16 rows go
 * round as micro-batches, several in flight when a worker is lost. A worker that comes
 * back joins at the next ring_rejoin. When the planner finds no plan for the devices left, the
 * batch fails at once with a message saying so. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster/net.h"
#include "cluster/ring.h"
#include "support/fake_ring.h"
#include "test.h"

static const int32_t seq0[64];   /* sequence ids of one-sequence batches */

enum { N_LAYER = 6, N_EMBD = 8, N_CTX = 64, N_WORKERS = 3, BATCH = 16, STEPS = 24 };

static fake_model fm;
static pid_t pids[N_WORKERS];
static int ports[N_WORKERS];

static void start_worker(int i)
{
    pids[i] = fake_worker_fork(&fm, &ports[i]);
    REQUIRE(pids[i] > 0, "worker %d", i);
}

static void stop_worker(int i)
{
    if (pids[i] > 0) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
        pids[i] = 0;
    }
}

/* The input of position p: what the embedding would give. */
static void input_of(int p, float *x)
{
    for (int j = 0; j < N_EMBD; j++)
        x[j] = 0.25f * (float)(j - p) + 0.01f * (float)(p % 7);
}

typedef struct head {
    ring *r;
    ring_layers layers;
    bool open;
    int n_dev_min;        /* the test planner's: fewer devices have no plan */
    ring_planner planner;
} head;

static void head_close(head *h)
{
    ring_close(h->r);
    if (h->open)
        fake_layers_close(&h->layers);
}

static int reown(void *ctx, const bool *owns, ring_layers *out, char *err, size_t errlen)
{
    head *h = ctx;
    (void)err;
    (void)errlen;
    if (h->open)
        fake_layers_close(&h->layers);
    fake_layers_open(&fm, owns, N_CTX, &h->layers);
    h->open = true;
    *out = h->layers;
    return 0;
}

static int inputs(void *ctx, int p0, int n, float *hidden)
{
    (void)ctx;
    for (int t = 0; t < n; t++)
        input_of(p0 + t, hidden + (size_t)t * N_EMBD);
    return 0;
}

/* One layer per device and round, as long as there are n_dev_min devices. */
static int plan_min(void *ctx, ring *r, const ring_plan_request *q, ring_plan *out, bool *drop,
                    char *err, size_t errlen)
{
    head *h = ctx;
    (void)r;
    (void)drop;
    if (q->n_dev < h->n_dev_min) {
        snprintf(err, errlen, "this test needs %d devices", h->n_dev_min);
        return -1;
    }
    uint64_t mem[PRIMA_MAX_DEVICES] = {0};
    return plan_by_memory(out, q->n_dev, q->n_layer, 0, mem, err, errlen);
}

static int head_open(head *h, const char *workers, int n_dev, int n_dev_min, char *err,
                     size_t errlen)
{
    memset(h, 0, sizeof *h);
    int lw[4] = {1, 2, 1, 2};
    ring_opts o = {.workers = workers, .lw = lw, .n_lw = n_dev, .n_ctx = N_CTX,
                   .max_batch = BATCH, .prefetch = true};
    h->r = fake_head_connect(&fm, &o, &h->layers, err, errlen);
    if (!h->r)
        return -1;
    h->open = true;
    h->n_dev_min = n_dev_min;
    h->planner = (ring_planner){.ctx = h, .plan = plan_min};
    ring_failover f = {.ctx = h, .reown = reown, .inputs = inputs,
                       .planner = n_dev_min ? &h->planner : NULL,
                       .log = getenv("PRIMA_TEST_VERBOSE") ? stderr : NULL};
    if (ring_start(h->r, &h->layers, err, errlen) == 0 &&
        ring_set_failover(h->r, &f, err, errlen) == 0)
        return 0;
    head_close(h);
    return -1;
}

/* Positions [p, p + n) in batches of up to BATCH; out gets the first value of each output. */
static int run(head *h, int p, int n, float *out)
{
    float x[BATCH * N_EMBD];
    int32_t pos[BATCH];
    for (int done = 0; done < n;) {
        int nb = n - done < BATCH ? n - done : BATCH;
        for (int t = 0; t < nb; t++) {
            pos[t] = p + done + t;
            input_of(pos[t], x + t * N_EMBD);
        }
        if (ring_eval(h->r, x, nb, pos, NULL))
            return -1;
        for (int t = 0; t < nb; t++)
            out[done + t] = x[t * N_EMBD];
        done += nb;
    }
    return 0;
}

static void reference(float *out)
{
    ring_layers all;
    fake_layers_open(&fm, NULL, N_CTX, &all);
    float x[N_EMBD];
    for (int s = 0; s < STEPS; s++) {
        input_of(s, x);
        int32_t pos = s;
        all.eval(all.ctx, x, 1, &pos, seq0, 0, N_LAYER);
        out[s] = x[0];
    }
    fake_layers_close(&all);
}

static void list_of(const int *which, int n, char *out, size_t cap)
{
    size_t off = 0;
    for (int i = 0; i < n; i++)
        off += (size_t)snprintf(out + off, cap - off, "%s127.0.0.1:%d", i ? "," : "",
                                ports[which[i]]);
}

int main(void)
{
    REQUIRE(fake_model_create(&fm, N_LAYER, N_EMBD, 16384, 1) == 0, "fake model");
    for (int i = 0; i < N_WORKERS; i++)
        start_worker(i);
    float ref[STEPS], got[STEPS];
    reference(ref);
    char list[256], err[512] = "";
    head h;

    /* Killed between batches (prefill of 6, then decode), then frozen: each time the ring goes
     * on with the devices left, as one device would. */
    list_of((int[]){0, 1, 2}, 3, list, sizeof list);
    REQUIRE(head_open(&h, list, 4, 0, err, sizeof err) == 0, "4-device ring: %s", err);
    CHECK(run(&h, 0, 6, got) == 0, "prefill: %s", ring_error(h.r));
    CHECK(run(&h, 6, 2, got + 6) == 0, "decode: %s", ring_error(h.r));
    stop_worker(1);
    CHECK(run(&h, 8, 4, got + 8) == 0, "decode after the kill: %s", ring_error(h.r));
    CHECK(ring_get_plan(h.r)->n_dev == 3, "plan of %d devices after the loss",
          ring_get_plan(h.r)->n_dev);
    kill(pids[2], SIGSTOP);
    int64_t t0 = net_now_ns();
    CHECK(run(&h, 12, 1, got + 12) == 0, "decode with a frozen worker: %s", ring_error(h.r));
    double took = (double)(net_now_ns() - t0) * 1e-9;
    CHECK(took < 8.0, "recovered from the frozen worker after %.1f s", took);
    CHECK(ring_get_plan(h.r)->n_dev == 2, "plan of %d devices after the freeze",
          ring_get_plan(h.r)->n_dev);
    stop_worker(2);

    /* A KV edit that cannot reach the ring: the next batch rebuilds to the truncated length. */
    start_worker(1);
    start_worker(2);
    CHECK(ring_rejoin(h.r, NULL) == 3, "rejoin of the restarted workers: %s", ring_error(h.r));
    CHECK(ring_get_plan(h.r)->n_dev == 4, "plan of %d devices after the rejoin",
          ring_get_plan(h.r)->n_dev);
    CHECK(run(&h, 13, 3, got + 13) == 0, "after the rejoin: %s", ring_error(h.r));
    stop_worker(0);
    CHECK(ring_kv_truncate(h.r, 0, 14) == 0, "truncate with a worker gone: %s", ring_error(h.r));
    CHECK(run(&h, 14, STEPS - 14, got + 14) == 0, "after the truncate: %s", ring_error(h.r));
    CHECK(memcmp(got, ref, sizeof ref) == 0, "outputs differ from one device's");
    head_close(&h);

    /* Killed at any moment, batches going round the ring: the whole sequence again and again
     * until the loss has happened (each pass equal to one device's). */
    start_worker(0);
    list_of((int[]){0, 1, 2}, 3, list, sizeof list);
    REQUIRE(head_open(&h, list, 4, 0, err, sizeof err) == 0, "4-device ring: %s", err);
    pid_t killer = fork();
    if (killer == 0) {
        usleep(3000);
        kill(pids[2], SIGKILL);
        _exit(0);
    }
    t0 = net_now_ns();
    for (int pass = 0; ring_get_plan(h.r)->n_dev == 4 && net_now_ns() - t0 < 3000000000ll;
         pass++) {
        CHECK(ring_kv_truncate(h.r, 0, 0) == 0 && run(&h, 0, STEPS, got) == 0, "pass %d: %s", pass,
              ring_error(h.r));
        CHECK(memcmp(got, ref, sizeof ref) == 0, "pass %d differs from one device", pass);
    }
    CHECK(ring_kv_truncate(h.r, 0, 0) == 0 && run(&h, 0, STEPS, got) == 0 &&
              memcmp(got, ref, sizeof ref) == 0, "after the loss: %s", ring_error(h.r));
    CHECK(ring_get_plan(h.r)->n_dev == 3, "no loss seen");
    waitpid(killer, NULL, 0);
    stop_worker(2);
    head_close(&h);

    /* No plan for the devices left: the batch fails at once, saying so. */
    start_worker(2);
    list_of((int[]){0, 1, 2}, 3, list, sizeof list);
    REQUIRE(head_open(&h, list, 4, 4, err, sizeof err) == 0, "4-device ring: %s", err);
    CHECK(run(&h, 0, 4, got) == 0, "prefill: %s", ring_error(h.r));
    stop_worker(0);
    t0 = net_now_ns();
    CHECK(run(&h, 4, 1, got) != 0, "decode went on without a plan");
    took = (double)(net_now_ns() - t0) * 1e-9;
    CHECK(took < 5.0, "gave up after %.1f s", took);
    CHECK(strstr(ring_error(h.r), "no plan fits the 3 device(s) left: this test needs 4"),
          "no plan: '%s'", ring_error(h.r));
    CHECK(run(&h, 5, 1, got) != 0, "the ring went on after giving up");
    head_close(&h);

    for (int i = 0; i < N_WORKERS; i++)
        stop_worker(i);
    fake_model_destroy(&fm);
    return test_done();
}
