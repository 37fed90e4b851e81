/* Keyed links (cluster/link.h) with a man in the middle: this test carries every byte between
 * the two ends of a link, and changes, replays, reorders, drops, truncates or injects handshake
 * messages and sealed frames. Both ends must agree only with the same key; a side with a key
 * never falls back to plaintext (downgrade); every manipulated frame drops the link with a
 * one-line reason; no plaintext of a frame's body is on the wire. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/proto.h"
#include "test.h"

static ring_key key_a, key_b;

/* Which handshake message (1..4) to change, and how. */
typedef struct edit {
    int msg;
    size_t off;
    uint8_t xor;
} edit;

typedef struct link_pair {
    conn a, b;                 /* a dialed, b listened */
    int a_wire, b_wire;        /* the test's ends: what a sends arrives on a_wire, and so on */
    int rc_a, rc_b;
    char err_a[512], err_b[512];
    atomic_bool vouched;       /* the listener found the greeting's tag right */
} link_pair;

typedef struct listener_arg {
    link_pair *p;
    const ring_key *key;
} listener_arg;

typedef struct relay_arg {
    link_pair *p;
    const edit *e;
    int n_edit;
} relay_arg;

static int64_t deadline(void)
{
    return net_now_ns() + 3000000000ll;
}

static void *listener_main(void *arg)
{
    listener_arg *l = arg;
    l->p->rc_b = link_handshake(l->p->b.fd, false, l->key, PROTO_VERSION, deadline(),
                                l->p->b.name, &l->p->vouched, &l->p->b.sec, l->p->err_b,
                                sizeof l->p->err_b);
    if (l->p->rc_b)   /* as the worker does: a failed handshake closes the link */
        shutdown(l->p->b.fd, SHUT_RDWR);
    return NULL;
}

/* Carry message `which` of n bytes (a greeting's n grows by the tag when its mode is keyed);
 * *mode gets its mode byte as sent, before any change. */
static bool move(int from, int to, uint8_t *m, size_t n, int which, const relay_arg *r,
                 uint8_t *mode)
{
    if (recv(from, m, n, MSG_WAITALL) != (ssize_t)n)
        return false;
    *mode = m[6];
    if (which == 1 && *mode == LINK_KEYED) {
        if (recv(from, m + n, LINK_TAG_BYTES, MSG_WAITALL) != LINK_TAG_BYTES)
            return false;
        n += LINK_TAG_BYTES;
    }
    for (int i = 0; i < r->n_edit; i++)
        if (r->e[i].msg == which)
            m[r->e[i].off] ^= r->e[i].xor;
    return send(to, m, n, MSG_NOSIGNAL) == (ssize_t)n;
}

/* Carry the handshake's messages, changed as told; on anything unexpected, close both ways (as
 * a real network would pass the close on). */
static void *relay_main(void *arg)
{
    relay_arg *r = arg;
    link_pair *p = r->p;
    uint8_t m1[40 + LINK_TAG_BYTES], m2[40], m3[56], m4[56], mode1 = 0, mode2 = 0, ignored;
    bool ok = move(p->a_wire, p->b_wire, m1, 40, 1, r, &mode1) &&
              move(p->b_wire, p->a_wire, m2, 40, 2, r, &mode2);
    /* Both sides keyed (whatever the relay made them say): proofs follow. Otherwise the
     * handshake is over, in plaintext or in a refusal. */
    if (ok && mode1 == LINK_KEYED && mode2 == LINK_KEYED)
        ok = move(p->a_wire, p->b_wire, m3, 56, 3, r, &ignored) &&
             move(p->b_wire, p->a_wire, m4, 56, 4, r, &ignored);
    if (!ok) {
        shutdown(p->a_wire, SHUT_RDWR);
        shutdown(p->b_wire, SHUT_RDWR);
    }
    return NULL;
}

static void pair_open(link_pair *p, const ring_key *ka, const ring_key *kb, const edit *e,
                      int n_edit)
{
    memset(p, 0, sizeof *p);
    int sa[2], sb[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sa) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, sb) == 0,
            "socketpair");
    struct timeval tv = {3, 0};
    for (int i = 0; i < 2; i++) {
        setsockopt(sa[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(sb[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    conn_init(&p->a, sa[0], "peer b");
    conn_init(&p->b, sb[0], "peer a");
    p->a_wire = sa[1];
    p->b_wire = sb[1];
    listener_arg l = {p, kb};
    relay_arg r = {p, e, n_edit};
    pthread_t tl, tr;
    pthread_create(&tl, NULL, listener_main, &l);
    pthread_create(&tr, NULL, relay_main, &r);
    p->rc_a = conn_handshake(&p->a, true, ka, deadline(), p->err_a, sizeof p->err_a);
    if (p->rc_a)   /* a gave up: let b (and the relay) see the close */
        shutdown(p->a.fd, SHUT_RDWR);
    pthread_join(tr, NULL);
    pthread_join(tl, NULL);
}

static void pair_close(link_pair *p)
{
    conn_close(&p->a);
    conn_close(&p->b);
    close(p->a_wire);
    close(p->b_wire);
}

static bool one_line(const char *s)
{
    return *s && !strchr(s, '\n');
}

/* ---- the handshake ---- */

static void handshakes(void)
{
    link_pair p;
    pair_open(&p, &key_a, &key_a, NULL, 0);
    CHECK(p.rc_a == 0 && p.rc_b == 0, "same key: '%s' / '%s'", p.err_a, p.err_b);
    CHECK(p.a.sec && p.b.sec, "same key but a plaintext link");
    CHECK(p.vouched, "same key, but the greeting's tag was not found right");
    pair_close(&p);

    pair_open(&p, NULL, NULL, NULL, 0);
    CHECK(p.rc_a == 0 && p.rc_b == 0 && !p.a.sec && !p.b.sec, "no keys: plaintext: '%s' / '%s'",
          p.err_a, p.err_b);
    pair_close(&p);

    pair_open(&p, &key_a, &key_b, NULL, 0);
    /* the listener's first, cheap check: the tag of the greeting, before any key exchange */
    CHECK(p.rc_b && strstr(p.err_b, "does not hold this cluster key (the tag of its greeting"),
          "wrong key, listener: '%s'", p.err_b);
    CHECK(!p.vouched, "wrong key, but the greeting's tag was found right");
    CHECK(p.rc_a && strstr(p.err_a, "does not hold this cluster key"), "wrong key, dialer: '%s'",
          p.err_a);
    pair_close(&p);

    /* no key on one side: each side refuses, and says what is missing */
    pair_open(&p, NULL, &key_a, NULL, 0);
    CHECK(p.rc_a && strstr(p.err_a, "requires a cluster key"), "keyless dialer: '%s'", p.err_a);
    CHECK(p.rc_b && strstr(p.err_b, "has no cluster key"), "keyed listener: '%s'", p.err_b);
    pair_close(&p);
    pair_open(&p, &key_a, NULL, NULL, 0);
    CHECK(p.rc_a && strstr(p.err_a, "has no cluster key"), "keyed dialer: '%s'", p.err_a);
    CHECK(p.rc_b && strstr(p.err_b, "requires a cluster key"), "keyless listener: '%s'", p.err_b);
    pair_close(&p);

    /* downgrade: the man in the middle says "plaintext" for one side, or for both */
    const edit to_plain1 = {1, 6, LINK_KEYED ^ LINK_PLAIN}, to_plain2 = {2, 6, LINK_KEYED ^ LINK_PLAIN};
    const edit both[2] = {to_plain1, to_plain2};
    const struct {
        const edit *e;
        int n;
        const char *what;
    } downgrades[] = {{&to_plain1, 1, "dialer's mode"}, {&to_plain2, 1, "listener's mode"},
                      {both, 2, "both modes"}};
    for (size_t i = 0; i < sizeof downgrades / sizeof *downgrades; i++) {
        pair_open(&p, &key_a, &key_a, downgrades[i].e, downgrades[i].n);
        CHECK(p.rc_a && p.rc_b, "downgrade of the %s: dialer %d '%s', listener %d '%s'",
              downgrades[i].what, p.rc_a, p.err_a, p.rc_b, p.err_b);
        CHECK(!p.a.sec && !p.b.sec, "downgrade of the %s left a link", downgrades[i].what);
        CHECK(one_line(p.err_a) && one_line(p.err_b), "downgrade: not one line each");
        pair_close(&p);
    }

    /* changed ephemeral keys, proofs, stream headers, versions */
    const struct {
        edit e;
        const char *what;
    } changes[] = {
        {{1, 8, 0x01}, "the dialer's ephemeral key"}, {{2, 39, 0x80}, "the listener's ephemeral key"},
        {{3, 0, 0x01}, "the dialer's proof"},         {{4, 31, 0x01}, "the listener's proof"},
        {{3, 40, 0x01}, "the dialer's stream header"}, {{1, 4, 0x03}, "the dialer's version"},
        {{1, 40, 0x01}, "the tag of the dialer's greeting"},
    };
    for (size_t i = 0; i < sizeof changes / sizeof *changes; i++) {
        pair_open(&p, &key_a, &key_a, &changes[i].e, 1);
        bool refused = p.rc_a || p.rc_b;
        /* A changed stream header is caught by the first frame instead (it is no proof). */
        if (!refused && changes[i].e.msg == 3) {
            char err[512];
            frame f;
            REQUIRE(conn_send(&p.a, RM_PING, NULL, 0, err, sizeof err) == 0, "%s", err);
            uint8_t wire[64];
            ssize_t n = recv(p.a_wire, wire, sizeof wire, 0);
            REQUIRE(n > 0 && send(p.b_wire, wire, (size_t)n, 0) == n, "carry");
            refused = conn_recv(&p.b, &f, 1000, err, sizeof err) == -1 &&
                      strstr(err, "failed authentication");
        }
        CHECK(refused, "a link although the man in the middle changed %s", changes[i].what);
        pair_close(&p);
    }
}

/* ---- sealed frames ---- */

/* a sends a PROBE with this body; returns the sealed bytes as they cross the wire */
static size_t sent_frame(link_pair *p, const void *body, size_t len, uint8_t *wire, size_t cap)
{
    char err[512];
    REQUIRE(conn_send(&p->a, RM_PROBE, body, len, err, sizeof err) == 0, "%s", err);
    size_t n = LINK_SEALED_HEADER + (len ? len + LINK_ABYTES : 0);
    REQUIRE(n <= cap && recv(p->a_wire, wire, n, MSG_WAITALL) == (ssize_t)n, "wire bytes");
    return n;
}

static void deliver(link_pair *p, const uint8_t *wire, size_t n)
{
    REQUIRE(send(p->b_wire, wire, n, MSG_NOSIGNAL) == (ssize_t)n, "deliver");
}

/* b receives; returns 0 and checks the body, or -1 with err */
static int received(link_pair *p, const void *body, size_t len, char *err, size_t errlen)
{
    frame f;
    int rc = conn_recv(&p->b, &f, 1000, err, errlen);
    if (rc == 1)
        snprintf(err, errlen, "nothing arrived");
    if (rc)
        return -1;
    CHECK(f.type == RM_PROBE && f.len == len && !memcmp(f.body, body, len), "frame changed");
    return 0;
}

static void keyed_pair(link_pair *p)
{
    pair_open(p, &key_a, &key_a, NULL, 0);
    REQUIRE(p->rc_a == 0 && p->rc_b == 0, "handshake: '%s' / '%s'", p->err_a, p->err_b);
}

static void expect_dropped(link_pair *p, const char *want, const char *what)
{
    char err[512] = "";
    frame f;
    int rc = conn_recv(&p->b, &f, 1000, err, sizeof err);
    CHECK(rc == -1 && strstr(err, want) && one_line(err), "%s: rc %d '%s' (wanted '%s')", what, rc,
          err, want);
}

/* A fresh keyed link, a sends two PROBEs; their sealed bytes are in w1, w2 (not delivered). */
static void two_frames(link_pair *p, const char *b1, const char *b2, uint8_t *w1, size_t *n1,
                       uint8_t *w2, size_t *n2)
{
    keyed_pair(p);
    *n1 = sent_frame(p, b1, strlen(b1) + 1, w1, 256);
    *n2 = sent_frame(p, b2, strlen(b2) + 1, w2, 256);
}

static void frames(void)
{
    static const char one[] = "the first frame: a secret prompt", two[] = "the second frame";
    uint8_t w1[256], w2[256];
    char err[512];
    link_pair p;

    /* carried faithfully: both frames arrive, and neither body is readable on the wire */
    keyed_pair(&p);
    size_t n1 = sent_frame(&p, one, sizeof one, w1, sizeof w1);
    size_t n2 = sent_frame(&p, two, sizeof two, w2, sizeof w2);
    CHECK(!memmem(w1, n1, "secret", 6) && !memmem(w2, n2, "second", 6), "plaintext on the wire");
    deliver(&p, w1, n1);
    deliver(&p, w2, n2);
    CHECK(received(&p, one, sizeof one, err, sizeof err) == 0, "first: %s", err);
    CHECK(received(&p, two, sizeof two, err, sizeof err) == 0, "second: %s", err);
    /* and the other way round */
    REQUIRE(conn_send(&p.b, RM_PROBE, two, sizeof two, err, sizeof err) == 0, "%s", err);
    n2 = LINK_SEALED_HEADER + sizeof two + LINK_ABYTES;
    REQUIRE(recv(p.b_wire, w2, n2, MSG_WAITALL) == (ssize_t)n2, "wire");
    REQUIRE(send(p.a_wire, w2, n2, 0) == (ssize_t)n2, "wire");
    frame f;
    CHECK(conn_recv(&p.a, &f, 1000, err, sizeof err) == 0 && f.len == sizeof two, "b to a: %s", err);
    pair_close(&p);

    /* one bit of the header, one bit of the body */
    keyed_pair(&p);
    n1 = sent_frame(&p, one, sizeof one, w1, sizeof w1);
    w1[5] ^= 0x10;
    deliver(&p, w1, n1);
    expect_dropped(&p, "a frame failed authentication", "changed header");
    pair_close(&p);
    keyed_pair(&p);
    n1 = sent_frame(&p, one, sizeof one, w1, sizeof w1);
    w1[n1 - 20] ^= 0x01;
    deliver(&p, w1, n1);
    expect_dropped(&p, "the body of a PROBE failed authentication", "changed body");
    pair_close(&p);

    /* replayed */
    keyed_pair(&p);
    n1 = sent_frame(&p, one, sizeof one, w1, sizeof w1);
    deliver(&p, w1, n1);
    CHECK(received(&p, one, sizeof one, err, sizeof err) == 0, "%s", err);
    deliver(&p, w1, n1);
    expect_dropped(&p, "failed authentication", "replayed frame");
    pair_close(&p);

    /* reordered; the second without the first (dropped) */
    two_frames(&p, one, two, w1, &n1, w2, &n2);
    deliver(&p, w2, n2);
    deliver(&p, w1, n1);
    expect_dropped(&p, "failed authentication", "reordered frames");
    pair_close(&p);
    two_frames(&p, one, two, w1, &n1, w2, &n2);
    deliver(&p, w2, n2);
    expect_dropped(&p, "failed authentication", "dropped frame");
    pair_close(&p);

    /* the body of one frame under the header of another of the same size */
    two_frames(&p, one, one, w1, &n1, w2, &n2);
    memcpy(w1 + LINK_SEALED_HEADER, w2 + LINK_SEALED_HEADER, n1 - LINK_SEALED_HEADER);
    deliver(&p, w1, n1);
    expect_dropped(&p, "the body of a PROBE failed authentication", "spliced frame");
    pair_close(&p);

    /* truncated: half a frame, then the connection closes */
    keyed_pair(&p);
    n1 = sent_frame(&p, one, sizeof one, w1, sizeof w1);
    deliver(&p, w1, n1 / 2);
    shutdown(p.b_wire, SHUT_WR);
    expect_dropped(&p, "connection closed", "truncated frame");
    pair_close(&p);

    /* injected: random bytes, and a well-formed plaintext frame */
    keyed_pair(&p);
    uint8_t junk[LINK_SEALED_HEADER];
    REQUIRE(ring_random(junk, sizeof junk) == 0, "random");
    deliver(&p, junk, sizeof junk);
    expect_dropped(&p, "a frame failed authentication", "injected random bytes");
    pair_close(&p);
    keyed_pair(&p);
    uint8_t ping[LINK_SEALED_HEADER] = {'P', 'R', 'M', 'A', PROTO_VERSION, 0, RM_PING, 0};
    deliver(&p, ping, sizeof ping);
    expect_dropped(&p, "a frame failed authentication", "injected plaintext PING");
    pair_close(&p);

    /* a frame sealed for another link (another handshake with the same key) */
    link_pair q;
    keyed_pair(&p);
    keyed_pair(&q);
    n1 = sent_frame(&q, one, sizeof one, w1, sizeof w1);
    deliver(&p, w1, n1);
    expect_dropped(&p, "a frame failed authentication", "a frame of another link");
    pair_close(&p);
    pair_close(&q);
}

int main(void)
{
    char err[512];
    REQUIRE(ring_key_random(&key_a, err, sizeof err) == 0 && ring_key_random(&key_b, err, sizeof err) == 0,
            "%s", err);
    handshakes();
    frames();
    return test_done();
}
