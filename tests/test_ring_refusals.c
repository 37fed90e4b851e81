/* Everything a ring must refuse, with a clear message and without crashing or wedging anyone:
 * malformed frames of every kind (built here byte by byte, not with the protocol code under
 * test), a wrong protocol version, a different model, a worker listed twice, a second head, a
 * missing or wrong cluster key, and workers that answer nonsense or nothing. After each
 * refusal the worker must still serve a proper head. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/net.h"
#include "cluster/ring.h"
#include "support/fake_ring.h"
#include "test.h"

enum { N_LAYER = 4, N_EMBD = 8, N_CTX = 16 };

static fake_model fm, other;

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The plaintext handshake greeting (link.h): "PRMA", version, mode 1 (plain), 32 zero bytes. */
static void plain_greeting(uint8_t m[40], int version)
{
    memset(m, 0, 40);
    put32(m, 0x414d5250);
    m[4] = (uint8_t)version;
    m[6] = 1;
}

static int dial_raw(int port)
{
    char err[256];
    int fd = net_connect("127.0.0.1", port, 2000, err, sizeof err);
    REQUIRE(fd >= 0, "%s", err);
    return fd;
}

/* Connected, with the plaintext handshake done by hand. */
static int dial(int port)
{
    int fd = dial_raw(port);
    uint8_t m[40], got[40];
    plain_greeting(m, PROTO_VERSION);
    REQUIRE(write(fd, m, sizeof m) == (ssize_t)sizeof m, "short write");
    struct timeval tv = {6, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    REQUIRE(recv(fd, got, sizeof got, MSG_WAITALL) == (ssize_t)sizeof got, "no greeting back");
    CHECK(!memcmp(got, m, sizeof m), "the worker's plaintext greeting differs from the dialer's");
    return fd;
}

/* A frame header as the protocol defines it: "PRMA", version, type, sequence, length. */
static void header(uint8_t *h, uint32_t magic, int version, int type, uint32_t seq, uint32_t len)
{
    put32(h, magic);
    h[4] = (uint8_t)version;
    h[5] = (uint8_t)(version >> 8);
    h[6] = (uint8_t)type;
    h[7] = (uint8_t)(type >> 8);
    put32(h + 8, seq);
    put32(h + 12, len);
}

static void send_raw(int fd, const void *p, size_t n)
{
    REQUIRE(write(fd, p, n) == (ssize_t)n, "short write");
}

/* Read one frame as raw bytes (type and body text); returns the type, or -1 on EOF. */
static int read_raw(int fd, char *text, size_t cap)
{
    uint8_t h[16];
    struct timeval tv = {6, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (recv(fd, h, 16, MSG_WAITALL) != 16)
        return -1;
    uint32_t len = h[12] | h[13] << 8 | h[14] << 16 | (uint32_t)h[15] << 24;
    uint8_t body[4096];
    if (len > sizeof body || recv(fd, body, len, MSG_WAITALL) != (ssize_t)len)
        return -1;
    /* ERROR: u64 instance, u32 length, text */
    text[0] = 0;
    if (len >= 12) {
        uint32_t tl = body[8] | body[9] << 8 | body[10] << 16 | (uint32_t)body[11] << 24;
        if (tl < cap && 12 + tl <= len) {
            memcpy(text, body + 12, tl);
            text[tl] = 0;
        }
    }
    return h[6] | h[7] << 8;
}

static bool closed_by_peer(int fd)
{
    char c;
    struct timeval tv = {6, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    /* A close with unread input in the worker's buffer arrives as a reset instead of an EOF. */
    ssize_t n = recv(fd, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* Send bytes to a fresh connection (after the plaintext handshake unless raw); expect an ERROR
 * containing `want`, then the close. */
static void expect_refusal_on(int port, bool raw, const void *bytes, size_t n, const char *want,
                              const char *what)
{
    int fd = raw ? dial_raw(port) : dial(port);
    send_raw(fd, bytes, n);
    char text[512];
    int type = read_raw(fd, text, sizeof text);
    CHECK(type == RM_ERROR && strstr(text, want), "%s: got type %d '%s', wanted an ERROR with '%s'",
          what, type, text, want);
    CHECK(closed_by_peer(fd), "%s: the worker kept the connection", what);
    close(fd);
}

static void expect_refusal(int port, const void *bytes, size_t n, const char *want, const char *what)
{
    expect_refusal_on(port, false, bytes, n, want, what);
}

/* A HELLO body as the protocol lays it out: role, identity, session, rank. */
static size_t hello_body(uint8_t *b, const uint8_t *identity)
{
    size_t n = 0;
    b[n++] = ROLE_HEAD;
    memcpy(b + n, identity, 32);
    n += 32;
    memset(b + n, 0, 16 + 4);
    return n + 16 + 4;
}

static void worker_refusals(void)
{
    fake_worker w;
    REQUIRE(fake_worker_start(&w, &fm, NULL) == 0, "worker");
    uint8_t f[16 + 256], body[200];
    size_t bl = hello_body(body, fm.rm.identity);

    static const char http[] = "GET / HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
    expect_refusal_on(w.port, true, http, sizeof http - 1, "not a prima connection", "HTTP request");
    /* a head of protocol version 1 (no handshake): its first frame header */
    header(f, 0x414d5250, 1, RM_HELLO, 0, 117);
    memset(f + 16, 0, 117);
    expect_refusal_on(w.port, true, f, 16 + 117, "speaks protocol version 1", "version 1 HELLO");
    /* a frame of the next version after this version's handshake */
    header(f, 0x414d5250, PROTO_VERSION + 1, RM_HELLO, 0, (uint32_t)bl);
    memcpy(f + 16, body, bl);
    char want[64];
    snprintf(want, sizeof want, "protocol version %d", PROTO_VERSION + 1);
    expect_refusal(w.port, f, 16 + bl, want, "a frame of the next version after the handshake");
    header(f, 0x414d5250, PROTO_VERSION, RM_HELLO, 0, 1u << 30);
    expect_refusal(w.port, f, 16, "exceeds the bound", "1 GiB HELLO");
    header(f, 0x414d5250, PROTO_VERSION, RM_HELLO, 5, (uint32_t)bl);
    memcpy(f + 16, body, bl);
    expect_refusal(w.port, f, 16 + bl, "sequence number 5", "HELLO out of sequence");
    header(f, 0x414d5250, PROTO_VERSION, 99, 0, 0);
    expect_refusal(w.port, f, 16, "unknown message type 99", "type 99");
    header(f, 0x414d5250, PROTO_VERSION, RM_HELLO, 0, 10);
    memset(f + 16, 1, 10);
    expect_refusal(w.port, f, 26, "malformed HELLO", "short HELLO");
    header(f, 0x414d5250, PROTO_VERSION, RM_HELLO, 0, (uint32_t)bl + 3);
    memcpy(f + 16, body, bl);
    memset(f + 16 + bl, 0, 3);
    expect_refusal(w.port, f, 16 + bl + 3, "malformed HELLO", "HELLO with trailing bytes");
    header(f, 0x414d5250, PROTO_VERSION, RM_PLAN, 0, 0);
    expect_refusal(w.port, f, 16, "expected HELLO", "PLAN first");
    uint8_t wrong[200];
    size_t wl = hello_body(wrong, other.rm.identity);
    header(f, 0x414d5250, PROTO_VERSION, RM_HELLO, 0, (uint32_t)wl);
    memcpy(f + 16, wrong, wl);
    expect_refusal(w.port, f, 16 + wl, "model mismatch", "other model");

    /* A frame cut off in the middle, then silence: dropped, nothing to answer. */
    int fd = dial(w.port);
    header(f, 0x414d5250, PROTO_VERSION, RM_HELLO, 0, (uint32_t)bl);
    send_raw(fd, f, 16 + 20);
    close(fd);

    /* A proper head, then a PLAN that makes no sense: refused, session over. */
    fd = dial(w.port);
    header(f, 0x414d5250, PROTO_VERSION, RM_HELLO, 0, (uint32_t)bl);
    memcpy(f + 16, body, bl);
    send_raw(fd, f, 16 + bl);
    char text[512];
    CHECK(read_raw(fd, text, sizeof text) == RM_WELCOME, "no WELCOME for a proper HELLO");
    uint8_t plan[16 + 16];
    header(f, 0x414d5250, PROTO_VERSION, RM_PLAN, 1, sizeof plan);
    memset(plan, 0, sizeof plan);
    put32(plan + 16, 1);    /* rank 1 */
    put32(plan + 20, 99);   /* of 99 devices */
    memcpy(f + 16, plan, sizeof plan);
    send_raw(fd, f, 16 + sizeof plan);
    int type;
    while ((type = read_raw(fd, text, sizeof text)) == RM_PING)
        ;
    CHECK(type == RM_ERROR && strstr(text, "99 devices"), "absurd PLAN: type %d '%s'", type, text);
    close(fd);

    /* After all that, the worker serves a real head. */
    char list[64], err[512] = "";
    fake_worker_list(&w, 1, list, sizeof list);
    CHECK(fake_head_once(&fm, list, NULL, err, sizeof err) == 0, "worker after the refusals: %s", err);

    /* The same worker twice in one ring. */
    char twice[128];
    snprintf(twice, sizeof twice, "%s,%s", list, list);
    CHECK(fake_head_once(&fm, twice, NULL, err, sizeof err) != 0 && strstr(err, "same worker as device 1"),
          "worker listed twice: '%s'", err);

    /* A second head while the first is connected. */
    int lw[2] = {2, 2};
    ring_opts o = {.workers = list, .lw = lw, .n_lw = 2, .n_ctx = N_CTX, .max_batch = 4};
    ring *first = ring_connect(&o, &fm.rm, err, sizeof err);
    CHECK(first != NULL, "first head: %s", err);
    ring *second = ring_connect(&o, &fm.rm, err, sizeof err);
    CHECK(!second && strstr(err, "busy: serving the head at"), "second head: '%s'", err);
    ring_close(second);
    ring_close(first);
    CHECK(fake_head_once(&fm, list, NULL, err, sizeof err) == 0, "worker after the first head left: %s", err);

    /* The model mismatch, seen from the head. */
    ring_opts om = o;
    ring *r = ring_connect(&om, &other.rm, err, sizeof err);
    CHECK(!r && strstr(err, "model mismatch"), "head with another model: '%s'", err);
    ring_close(r);
    fake_worker_stop(&w);
}

static void key_refusals(void)
{
    char path[] = "/tmp/prima-test-secret-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    FILE *f = fopen(path, "w");
    fputs("correct horse battery staple\n", f);
    fclose(f);
    ring_key good, bad;
    char err[512] = "";
    REQUIRE(ring_key_load(&good, path, err, sizeof err) == 0 && good.set, "%s", err);
    f = fopen(path, "w");
    fputs("something else", f);
    fclose(f);
    REQUIRE(ring_key_load(&bad, path, err, sizeof err) == 0, "%s", err);
    unlink(path);

    fake_worker w1, w2;
    REQUIRE(fake_worker_start(&w1, &fm, &good) == 0, "worker with the key");
    REQUIRE(fake_worker_start(&w2, &fm, &good) == 0, "worker with the key");
    char list[128];
    fake_worker w[2] = {w1, w2};
    fake_worker_list(w, 2, list, sizeof list);
    CHECK(fake_head_once(&fm, list, &good, err, sizeof err) == 0, "same key everywhere: %s", err);
    CHECK(fake_head_once(&fm, list, NULL, err, sizeof err) != 0 && strstr(err, "requires a cluster key"),
          "head without the key: '%s'", err);
    CHECK(fake_head_once(&fm, list, &bad, err, sizeof err) != 0 && strstr(err, "does not hold this cluster key"),
          "head with another key: '%s'", err);
    CHECK(fake_head_once(&fm, list, &good, err, sizeof err) == 0, "after the refusals: %s", err);
    fake_worker_stop(&w1);
    fake_worker_stop(&w2);

    fake_worker open;
    REQUIRE(fake_worker_start(&open, &fm, NULL) == 0, "worker without a key");
    fake_worker_list(&open, 1, list, sizeof list);
    CHECK(fake_head_once(&fm, list, &good, err, sizeof err) != 0 && strstr(err, "has no cluster key"),
          "worker without the key: '%s'", err);
    fake_worker_stop(&open);
}

/* Connections that never finish their handshake: one says nothing, one trickles a byte at a
 * time. Neither may hold up a real head (the worker greets newcomers side by side), and the
 * trickle is cut off by the overall deadline however steadily it comes. */
typedef struct dripper {
    int fd, interval_ms;
    _Atomic int sent, max;
    _Atomic bool closed;       /* the worker hung up */
    pthread_t t;
} dripper;

static void *drip_main(void *arg)
{
    dripper *d = arg;
    uint8_t m[40];
    plain_greeting(m, PROTO_VERSION);
    for (; d->sent < d->max; d->sent++) {
        struct timespec ts = {0, (long)d->interval_ms * 1000000};
        nanosleep(&ts, NULL);
        if (send(d->fd, m + d->sent, 1, MSG_NOSIGNAL) != 1)
            break;
        char c;
        ssize_t n = recv(d->fd, &c, 1, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            d->closed = true;
            return NULL;
        }
    }
    return NULL;
}

static bool still_open(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

static void dawdlers(void)
{
    char list[64], err[512] = "";
    /* Side by side: with a deadline long enough that neither dawdler is cut off first, a real
     * head is served while both are pending (a worker that greeted one newcomer at a time would
     * serve the head only after giving up on them). */
    fake_worker w;
    REQUIRE(fake_worker_start_admit(&w, &fm, NULL, 30000) == 0, "worker");
    fake_worker_list(&w, 1, list, sizeof list);
    int idle = dial_raw(w.port);
    dripper d = {.fd = dial_raw(w.port), .interval_ms = 200, .max = 39};
    pthread_create(&d.t, NULL, drip_main, &d);
    struct timespec settle = {0, 300 * 1000000};
    nanosleep(&settle, NULL);
    CHECK(fake_head_once(&fm, list, NULL, err, sizeof err) == 0, "head beside two dawdlers: %s", err);
    CHECK(still_open(idle), "the idle connection was dropped before the head was served");
    CHECK(!d.closed && d.sent < d.max, "the trickle ended (%d bytes, %s) before the head was served",
          d.sent, d.closed ? "closed" : "done");
    d.max = 0;   /* stop dripping */
    pthread_join(d.t, NULL);
    close(idle);
    close(d.fd);
    fake_worker_stop(&w);

    /* The deadline is for the whole greeting: a trickle of a byte every 250 ms (each byte in
     * time for any per-byte timeout) is cut off after 1 s, long before its 15th byte. */
    REQUIRE(fake_worker_start_admit(&w, &fm, NULL, 1000) == 0, "worker");
    dripper t = {.fd = dial_raw(w.port), .interval_ms = 250, .max = 15};
    drip_main(&t);
    CHECK(t.closed, "a trickle of %d bytes over %.1f s was not cut off", t.sent, t.sent * 0.25);
    close(t.fd);
    /* and the idle connection, given the same deadline, is dropped too */
    idle = dial_raw(w.port);
    struct timeval tv = {10, 0};
    setsockopt(idle, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c;
    CHECK(recv(idle, &c, 1, 0) <= 0, "an idle connection was kept past the deadline");
    close(idle);
    fake_worker_list(&w, 1, list, sizeof list);
    CHECK(fake_head_once(&fm, list, NULL, err, sizeof err) == 0, "after the dawdlers: %s", err);
    fake_worker_stop(&w);
}

/* A "worker" that answers a HELLO with the given bytes (or closes, or says nothing). */
typedef struct impostor {
    int lfd, port;
    const uint8_t *reply;
    size_t n;
    bool silent;
    pthread_t t;
} impostor;

static void *impostor_main(void *arg)
{
    impostor *im = arg;
    int fd = accept(im->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    uint8_t buf[4096];
    ssize_t got = recv(fd, buf, sizeof buf, 0);
    (void)got;
    if (im->n)
        send(fd, im->reply, im->n, MSG_NOSIGNAL);
    if (im->silent)
        sleep(6);
    close(fd);
    return NULL;
}

static void expect_head_refusal(const uint8_t *reply, size_t n, bool silent, const char *want,
                                const char *what)
{
    impostor im = {.reply = reply, .n = n, .silent = silent};
    char err[512] = "";
    im.lfd = net_listen("127.0.0.1", 0, &im.port, err, sizeof err);
    REQUIRE(im.lfd >= 0, "%s", err);
    fcntl(im.lfd, F_SETFL, 0);   /* net_listen makes it non-blocking; this thread waits */
    pthread_create(&im.t, NULL, impostor_main, &im);
    char list[64];
    snprintf(list, sizeof list, "127.0.0.1:%d", im.port);
    int64_t t0 = net_now_ns();
    CHECK(fake_head_once(&fm, list, NULL, err, sizeof err) != 0 && strstr(err, want),
          "%s: '%s' (wanted '%s')", what, err, want);
    CHECK(net_now_ns() - t0 < 7000000000ll, "%s: took %.1f s", what, (net_now_ns() - t0) / 1e9);
    pthread_join(im.t, NULL);
    close(im.lfd);
}

static void head_refusals(void)
{
    uint8_t f[40 + 16 + 64];
    expect_head_refusal((const uint8_t *)"SSH-2.0-OpenSSH_9.2\r\nand some more bytes\r\n", 42,
                        false, "not a prima connection", "an ssh server");
    plain_greeting(f, 9);
    expect_head_refusal(f, 40, false, "speaks protocol version 9", "a version 9 worker");
    /* frames after a proper plaintext handshake */
    plain_greeting(f, PROTO_VERSION);
    header(f + 40, 0x414d5250, PROTO_VERSION, RM_WELCOME, 0, 7);
    memset(f + 56, 0, 7);
    expect_head_refusal(f, 56 + 7, false, "malformed WELCOME", "a short WELCOME");
    header(f + 40, 0x414d5250, PROTO_VERSION, RM_WELCOME, 0, 1u << 31);
    expect_head_refusal(f, 56, false, "exceeds the bound", "a 2 GiB WELCOME");
    expect_head_refusal(f, 40, true, "did not answer within 5 s", "a worker silent after the handshake");
    expect_head_refusal(NULL, 0, false, "connection closed", "a worker that hangs up");
    expect_head_refusal(NULL, 0, true, "handshake did not finish in time", "a silent worker");
    char err[512] = "";
    int lw[2] = {2, 2};
    /* nobody listens on port 1 */
    ring_opts o = {.workers = "127.0.0.1:1", .lw = lw, .n_lw = 2, .n_ctx = N_CTX, .max_batch = 4};
    ring *r = ring_connect(&o, &fm.rm, err, sizeof err);
    CHECK(!r && strstr(err, "device 1 (127.0.0.1:1): connect to 127.0.0.1:1"), "nobody listening: '%s'", err);
    o.workers = "127.0.0.1:99999";
    r = ring_connect(&o, &fm.rm, err, sizeof err);
    CHECK(!r && strstr(err, "port must be 1..65535"), "bad port: '%s'", err);
}

int main(void)
{
    REQUIRE(fake_model_create(&fm, N_LAYER, N_EMBD, 16384, 1) == 0, "fake model");
    REQUIRE(fake_model_create(&other, N_LAYER, N_EMBD, 16384, 2) == 0, "other fake model");
    worker_refusals();
    key_refusals();
    dawdlers();
    head_refusals();
    fake_model_destroy(&fm);
    fake_model_destroy(&other);
    return test_done();
}
