/* A stranger without the cluster key floods a keyed worker with connections that say nothing
 * (and some that say garbage), from the same address as the head (loopback). The head must
 * still get in, every time, within its deadline; the worker's log must not grow with the flood
 * (its lines about refusals are limited, the rest counted); and once the flood stops, the
 * count is told. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/net.h"
#include "cluster/ring.h"
#include "cluster/worker.h"
#include "support/fake_ring.h"
#include "test.h"

enum { N_LAYER = 4, N_EMBD = 8, HELD = 256, FLOOD_MAX = 4000 };

static fake_model fm;

typedef struct flood {
    int port;
    atomic_bool stop;
    int made;                  /* connections opened */
    pthread_t t;
} flood;

/* Open connections as fast as the worker accepts them (a few ms apart), keep the last HELD
 * open and silent, send 72 bytes of garbage on every fourth; at most FLOOD_MAX. */
static void *flood_main(void *arg)
{
    flood *f = arg;
    int fds[HELD];
    for (int i = 0; i < HELD; i++)
        fds[i] = -1;
    uint8_t junk[72];
    memset(junk, 0x5a, sizeof junk);
    memcpy(junk, "PRMA", 4);
    for (int i = 0; i < FLOOD_MAX && !f->stop; i++) {
        char err[256];
        int fd = net_connect("127.0.0.1", f->port, 1000, err, sizeof err);
        if (fd < 0)
            continue;
        f->made++;
        if (i % 4 == 3) {
            ssize_t n = send(fd, junk, sizeof junk, MSG_NOSIGNAL);
            (void)n;
        }
        if (fds[i % HELD] >= 0)
            close(fds[i % HELD]);
        fds[i % HELD] = fd;
        struct timespec ts = {0, 3 * 1000000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < HELD; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return NULL;
}

static void *worker_main(void *arg)
{
    worker_run(arg);
    return NULL;
}

static int count_lines(FILE *f, const char *needle)
{
    char line[4096];
    int n = 0;
    rewind(f);
    while (fgets(line, sizeof line, f))
        n += !needle || strstr(line, needle) != NULL;
    return n;
}

int main(void)
{
    REQUIRE(fake_model_create(&fm, N_LAYER, N_EMBD, 16384, 1) == 0, "fake model");
    fake_backend_init(&fm);
    ring_key key;
    char err[1024] = "";
    REQUIRE(ring_key_random(&key, err, sizeof err) == 0, "%s", err);
    FILE *log = tmpfile();
    REQUIRE(log, "tmpfile");
    worker_opts o = {.host = "127.0.0.1", .listen_fd = -1, .threads = 1,
                     .method = PREFETCH_MADVISE, .key = &key, .log = log};
    worker *w = worker_create(&o, &fm.backend, err, sizeof err);
    REQUIRE(w, "%s", err);
    pthread_t wt;
    REQUIRE(pthread_create(&wt, NULL, worker_main, w) == 0, "worker thread");
    char list[64];
    snprintf(list, sizeof list, "127.0.0.1:%d", worker_port(w));

    flood f = {.port = worker_port(w)};
    pthread_create(&f.t, NULL, flood_main, &f);
    struct timespec settle = {0, 500 * 1000000};
    nanosleep(&settle, NULL);
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        int64_t t0 = net_now_ns();
        int rc = fake_head_once(&fm, list, &key, err, sizeof err);
        CHECK(rc == 0, "head %d during the flood (%.2f s): %s", i + 1,
              (net_now_ns() - t0) / 1e9, err);
        ok += rc == 0;
        nanosleep(&settle, NULL);   /* the flood goes on between heads */
    }
    f.stop = true;
    pthread_join(f.t, NULL);
    fprintf(stderr, "flood: %d connections; %d of 4 heads served\n", f.made, ok);
    CHECK(f.made > 100, "the flood made only %d connections", f.made);

    worker_stop(w);
    pthread_join(wt, NULL);
    worker_free(w);
    fflush(log);
    if (getenv("PRIMA_TEST_VERBOSE")) {
        char line[4096];
        rewind(log);
        while (fgets(line, sizeof line, log))
            fputs(line, stderr);
    }
    int lines = count_lines(log, NULL), refusals = count_lines(log, "turned away") +
                count_lines(log, "dropped") + count_lines(log, "refused");
    int told = count_lines(log, "more connections refused or dropped");
    fprintf(stderr, "worker log: %d lines, %d about refusals, %d with counts\n", lines, refusals,
            told);
    /* 5 lines per 10 s window, and the heads' own sessions (serving, ended): a flood of a few
     * seconds may span two windows. */
    CHECK(refusals <= 12, "%d log lines about refused connections (%d connections)", refusals,
          f.made);
    CHECK(told >= 1, "the refusals held back were never counted in the log");
    fclose(log);
    fake_model_destroy(&fm);
    return test_done();
}
