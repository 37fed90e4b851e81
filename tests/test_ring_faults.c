/* Failures of live devices, with workers in their own processes: a worker killed in the middle of
 * generation, a worker frozen (SIGSTOP), and a head that goes silent. The head must stop with an
 * error naming the device; the workers that are left must return to waiting and serve the next
 * head, with the same results as before.
 *
 * Times are checked against the protocol's own deadlines (proto.h), with room for a loaded
 * machine: a dead process is noticed by its closed connection, well before the silence deadline
 * could have fired; a frozen one by that deadline — not before the deadline less one ping
 * interval, and within three deadlines. */
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster/net.h"
#include "cluster/ring.h"
#include "support/fake_ring.h"
#include "test.h"

static const int32_t seq0[64];   /* sequence ids of one-sequence batches */

enum { N_LAYER = 6, N_EMBD = 8, N_CTX = 64, N_WORKERS = 3 };
#define DEAD_S (PROTO_DEAD_MS / 1e3)
#define PING_S (PROTO_PING_MS / 1e3)

static fake_model fm;
static pid_t pids[N_WORKERS];
static int ports[N_WORKERS];

static void start_workers(void)
{
    for (int i = 0; i < N_WORKERS; i++) {
        ports[i] = 0;
        pids[i] = fake_worker_fork(&fm, &ports[i]);
        REQUIRE(pids[i] > 0, "worker %d", i);
    }
}

static void stop_workers(void)
{
    for (int i = 0; i < N_WORKERS; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
}

static void list_of(const int *which, int n, char *out, size_t cap)
{
    size_t off = 0;
    for (int i = 0; i < n; i++)
        off += (size_t)snprintf(out + off, cap - off, "%s127.0.0.1:%d", i ? "," : "", ports[which[i]]);
}

typedef struct head {
    ring *r;
    ring_layers layers;
} head;

static int head_open(head *h, const char *workers, int n_dev, char *err, size_t errlen)
{
    int lw[4] = {1, 1, 1, 1};
    ring_opts o = {.workers = workers, .lw = lw, .n_lw = n_dev, .n_ctx = N_CTX, .max_batch = 4,
                   .prefetch = true};
    h->r = fake_head_connect(&fm, &o, &h->layers, err, errlen);
    if (!h->r)
        return -1;
    if (ring_start(h->r, &h->layers, err, errlen)) {
        ring_close(h->r);
        fake_layers_close(&h->layers);
        return -1;
    }
    return 0;
}

static void head_close(head *h)
{
    ring_close(h->r);
    fake_layers_close(&h->layers);
}

/* Decode steps from position p; out gets the first value of each output. */
static int decode(head *h, int p, int steps, float *out)
{
    float x[N_EMBD];
    for (int s = 0; s < steps; s++) {
        for (int j = 0; j < N_EMBD; j++)
            x[j] = 0.25f * (float)(j - s);
        int32_t pos = p + s;
        if (ring_eval(h->r, x, 1, &pos, NULL))
            return -1;
        out[s] = x[0];
    }
    return 0;
}

static void reference(int steps, float *out)
{
    ring_layers all;
    fake_layers_open(&fm, NULL, N_CTX, &all);
    float x[N_EMBD];
    for (int s = 0; s < steps; s++) {
        for (int j = 0; j < N_EMBD; j++)
            x[j] = 0.25f * (float)(j - s);
        int32_t pos = s;
        all.eval(all.ctx, x, 1, &pos, seq0, 0, N_LAYER);
        out[s] = x[0];
    }
    fake_layers_close(&all);
}

int main(void)
{
    REQUIRE(fake_model_create(&fm, N_LAYER, N_EMBD, 16384, 1) == 0, "fake model");
    start_workers();
    float ref[8], got[8];
    reference(8, ref);
    char list[256], err[512] = "";

    /* A worker killed mid-generation. */
    head h;
    list_of((int[]){0, 1, 2}, 3, list, sizeof list);
    REQUIRE(head_open(&h, list, 4, err, sizeof err) == 0, "4-device ring: %s", err);
    CHECK(decode(&h, 0, 3, got) == 0, "decode before the kill: %s", ring_error(h.r));
    kill(pids[1], SIGKILL);
    waitpid(pids[1], NULL, 0);
    pids[1] = 0;
    int64_t t0 = net_now_ns();
    CHECK(decode(&h, 3, 3, got) != 0, "decode went on without device 2");
    double took = (net_now_ns() - t0) / 1e9;
    CHECK(took < DEAD_S, "noticed the dead worker after %.1f s: the silence deadline, not the "
          "closed connection", took);
    if (getenv("PRIMA_TEST_VERBOSE"))
        fprintf(stderr, "head: %s\n", ring_error(h.r));
    CHECK(strstr(ring_error(h.r), "device 2"), "error does not name device 2: '%s'", ring_error(h.r));
    CHECK(!strstr(ring_error(h.r), "stopped responding"),
          "a dead worker was taken for a silent one: '%s'", ring_error(h.r));
    head_close(&h);

    /* The survivors serve the next head, computing what one device computes. */
    list_of((int[]){0, 2}, 2, list, sizeof list);
    REQUIRE(head_open(&h, list, 3, err, sizeof err) == 0, "survivors: %s", err);
    CHECK(decode(&h, 0, 8, got) == 0 && memcmp(got, ref, sizeof ref) == 0,
          "survivors' ring differs from one device (%s)", ring_error(h.r));

    /* A frozen worker: no crash, no hang, a named device once the silence deadline passes. */
    kill(pids[2], SIGSTOP);
    t0 = net_now_ns();
    CHECK(decode(&h, 8, 1, got) != 0, "decode went on with device 2 frozen");
    took = (net_now_ns() - t0) / 1e9;
    CHECK(took >= DEAD_S - PING_S - 0.1 && took < 3 * DEAD_S,
          "noticed the frozen worker after %.1f s (deadline %.0f s)", took, DEAD_S);
    if (getenv("PRIMA_TEST_VERBOSE"))
        fprintf(stderr, "head: %s\n", ring_error(h.r));
    CHECK(strstr(ring_error(h.r), "device 2") && strstr(ring_error(h.r), "stopped responding"),
          "frozen worker: '%s'", ring_error(h.r));
    head_close(&h);
    kill(pids[2], SIGKILL);
    waitpid(pids[2], NULL, 0);
    pids[2] = 0;

    /* A head that greets a worker and then goes silent: the worker gives up on it and serves
     * the next head (asked again every half second, for up to three deadlines). */
    int fd = net_connect("127.0.0.1", ports[0], 2000, err, sizeof err);
    REQUIRE(fd >= 0, "%s", err);
    conn c;
    conn_init(&c, fd, "silent head");
    REQUIRE(conn_handshake(&c, true, NULL, net_now_ns() + 5000000000ll, err, sizeof err) == 0,
            "%s", err);
    msg_hello hello = {.role = ROLE_HEAD};
    memcpy(hello.identity, fm.rm.identity, sizeof hello.identity);
    REQUIRE(proto_send_hello(&c, &hello, err, sizeof err) == 0, "%s", err);
    /* its WELCOME read: the worker serves it (hellos are read by threads of their own, so a
     * later head's could otherwise be admitted first on a busy machine) */
    frame welcome;
    REQUIRE(conn_recv(&c, &welcome, 5000, err, sizeof err) == 0 && welcome.type == RM_WELCOME,
            "the silent head was not welcomed: %s", err);
    list_of((int[]){0}, 1, list, sizeof list);
    CHECK(head_open(&h, list, 2, err, sizeof err) != 0 && strstr(err, "busy"),
          "a second head while the silent one holds the worker: '%s'", err);
    t0 = net_now_ns();
    int rc;
    while ((rc = head_open(&h, list, 2, err, sizeof err)) != 0 &&
           (net_now_ns() - t0) / 1e9 < 3 * DEAD_S)
        usleep(500 * 1000);
    REQUIRE(rc == 0, "after the silent head (%.1f s): %s", (net_now_ns() - t0) / 1e9, err);
    CHECK(decode(&h, 0, 8, got) == 0 && memcmp(got, ref, sizeof ref) == 0,
          "2-device ring differs from one device (%s)", ring_error(h.r));
    head_close(&h);
    conn_close(&c);

    stop_workers();
    fake_model_destroy(&fm);
    return test_done();
}
