/* Wire layouts the protocol fixes, checked against bytes laid out here by hand (not with the
 * encoders under test): a STATS body is serial, rank, then the nine counters in their documented
 * order, each a little-endian u64, and nothing else. A PLAN without GPU layers ends with the
 * sequences; with them, one u32 per device follows, and a READY carries a worker's one-line
 * note only when it has one. And the heartbeat never holds up the thread
 * that changes its set of links, even when a peer has stopped reading. Sequence ids in BATCH,
 * KVOP and PLAN. A connection with an inbox reads ahead: its peer sends far more than a socket
 * holds while this side reads nothing, and the frames come out whole and in order, then the
 * peer's hang-up, again and again. */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/proto.h"
#include "cluster/wire.h"
#include "gguf/dtype.h"
#include "test.h"

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Two ends of a connected socket pair. */
static void link_pair(conn *a, conn *b)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    conn_init(a, sv[0], "a");
    conn_init(b, sv[1], "b");
}

static void stats_layout(void)
{
    conn a, b;
    link_pair(&a, &b);
    msg_stats m = {.serial = 7, .rank = 2,
                   .c = {.compute_ns = 101, .wait_ns = 102, .major_faults = 103, .disk_bytes = 104,
                         .pages = 105, .pages_resident = 106, .bytes_sent = 107, .bytes_recv = 108,
                         .hops = 109, .routed_bytes = 110}};
    char err[512];
    REQUIRE(proto_send_stats(&a, &m, err, sizeof err) == 0, "%s", err);
    frame f;
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(f.type == RM_STATS && f.len == 8 + 10 * 8, "STATS of %u bytes", f.len);
    if (f.len == 88) {
        CHECK(f.body[0] == 7 && f.body[4] == 2, "serial and rank first");
        for (int i = 0; i < 10; i++)
            CHECK(get64(f.body + 8 + 8 * i) == 101u + (unsigned)i, "counter %d is %llu", i,
                  (unsigned long long)get64(f.body + 8 + 8 * i));
    }
    msg_stats d;
    REQUIRE(proto_decode_stats(&f, &d, err, sizeof err) == 0, "%s", err);
    CHECK(!memcmp(&d, &m, sizeof d), "decoded STATS differ");
    /* one byte more or less is malformed */
    frame g = f;
    g.len = f.len - 1;
    CHECK(proto_decode_stats(&g, &d, err, sizeof err) == -1, "short STATS accepted");
    conn_close(&a);
    conn_close(&b);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void plan_layout(void)
{
    conn a, b;
    link_pair(&a, &b);
    msg_plan m = {.rank = 1, .n_dev = 3, .k = 2, .n_layer = 8, .window = {1, 2, 1},
                  .n_ctx = 64, .max_batch = 8, .threads = 2, .wire = WIRE_F32, .prefetch = 1,
                  .succ_host = "127.0.0.1", .succ_port = 9501, .n_seq = 1};
    /* session, rank, n_dev, k, n_layer, 3 windows, n_ctx, max_batch, threads, 4 flag bytes,
     * the host as length + bytes, the port, the sequences */
    const uint32_t old_len = 16 + 4 * 4 + 3 * 4 + 3 * 4 + 4 + 4 + 9 + 4 + 4;
    char err[512];
    frame f;
    msg_plan d;
    REQUIRE(proto_send_plan(&a, &m, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(f.len == old_len, "a PLAN without GPU layers has %u bytes, not %u", f.len, old_len);
    CHECK(proto_decode_plan(&f, &d, err, sizeof err) == 0 && !memcmp(&d, &m, sizeof d),
          "PLAN without GPU layers: %s", err);

    m.gpu_layers[1] = 2;
    m.gpu_layers[2] = 1;
    REQUIRE(proto_send_plan(&a, &m, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(f.len == old_len + 3 * 4, "a PLAN with GPU layers has %u bytes", f.len);
    if (f.len == old_len + 12)
        CHECK(get32(f.body + old_len) == 0 && get32(f.body + old_len + 4) == 2 &&
                  get32(f.body + old_len + 8) == 1,
              "GPU layers after the sequences, head first");
    CHECK(proto_decode_plan(&f, &d, err, sizeof err) == 0 && !memcmp(&d, &m, sizeof d),
          "PLAN with GPU layers: %s", err);
    frame g = f;
    g.len = f.len - 1;
    CHECK(proto_decode_plan(&g, &d, err, sizeof err) == -1, "a cut GPU section accepted");
    g.len = old_len + 4;
    CHECK(proto_decode_plan(&g, &d, err, sizeof err) == -1,
          "GPU layers for 1 of 3 devices accepted");

    /* KV cache types: last, after the GPU layers and a (zero) weight budget */
    m.kv_type[0] = DT_Q8_0;
    m.kv_type[1] = DT_Q4_0;
    REQUIRE(proto_send_plan(&a, &m, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(f.len == old_len + 3 * 4 + 8 + 2, "a PLAN with cache types has %u bytes", f.len);
    if (f.len == old_len + 22)
        CHECK(f.body[old_len + 20] == DT_Q8_0 && f.body[old_len + 21] == DT_Q4_0,
              "cache types K then V, last");
    CHECK(proto_decode_plan(&f, &d, err, sizeof err) == 0 && !memcmp(&d, &m, sizeof d),
          "PLAN with cache types: %s", err);
    g = f;
    if (f.len == old_len + 22)
        ((uint8_t *)g.body)[old_len + 21] = DT_Q4_K;
    CHECK(proto_decode_plan(&g, &d, err, sizeof err) == -1 && strstr(err, "KV cache type"),
          "a PLAN with a Q4_K cache accepted");
    if (f.len == old_len + 22)
        ((uint8_t *)g.body)[old_len + 21] = DT_Q4_0;
    m.kv_type[0] = m.kv_type[1] = 0;

    char note[PROTO_NOTE_MAX];
    REQUIRE(proto_send_ready(&a, "", err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(f.type == RM_READY && f.len == 0, "an empty READY has %u bytes", f.len);
    CHECK(proto_decode_ready(&f, note, sizeof note, err, sizeof err) == 0 && !note[0],
          "empty READY");
    REQUIRE(proto_send_ready(&a, "GPU: none\nhere", err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(proto_decode_ready(&f, note, sizeof note, err, sizeof err) == 0 &&
              !strcmp(note, "GPU: none here"), "READY note '%s'", note);
    g = f;
    g.len = f.len - 1;
    CHECK(proto_decode_ready(&g, note, sizeof note, err, sizeof err) == -1,
          "a cut READY note accepted");
    conn_close(&a);
    conn_close(&b);
}

/* A peer that stopped reading: its socket buffer is full. The heartbeat's ping to it must give
 * way at once, so heartbeat_set and heartbeat_stop return promptly (they used to wait up to the
 * 5 s stall bound of a blocked send, with the heartbeat's lock held). */
static void heartbeat_on_a_full_link(void)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    int small = 4096;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    static uint8_t junk[65536];
    while (send(sv[0], junk, sizeof junk, MSG_DONTWAIT) > 0)
        ;
    conn c;
    conn_init(&c, sv[0], "a full link");
    conn *set[1] = {&c};
    heartbeat h;
    REQUIRE(heartbeat_start(&h, set, 1) == 0, "heartbeat");
    struct timespec ts = {1, 300 * 1000000};   /* past the first ping */
    nanosleep(&ts, NULL);
    int64_t t0 = net_now_ns();
    heartbeat_set(&h, NULL, 0);
    double took = (double)(net_now_ns() - t0) / 1e9;
    /* A bound with a wide margin for a loaded machine; the old code took about 4 s here. */
    CHECK(took < 2.0, "heartbeat_set waited %.2f s for a ping to a full link", took);
    heartbeat_stop(&h);
    conn_close(&c);
    close(sv[1]);
}

#define AHEAD_FRAMES 24
#define AHEAD_BYTES (PROTO_PROBE_MAX / 2)

typedef struct ahead {
    conn *c;
    int sent;              /* frames sent so far */
    pthread_mutex_t lock;
} ahead;

static void *send_ahead(void *arg)
{
    ahead *a = arg;
    uint8_t *body = malloc(AHEAD_BYTES);
    char err[256];
    for (int i = 0; body && i < AHEAD_FRAMES; i++) {
        memset(body, i + 1, AHEAD_BYTES);
        if (conn_send(a->c, RM_PROBE, body, AHEAD_BYTES, err, sizeof err))
            break;
        pthread_mutex_lock(&a->lock);
        a->sent++;
        pthread_mutex_unlock(&a->lock);
    }
    free(body);
    return NULL;
}

/* 12 MiB sent to a side that reads nothing: without reading ahead the sender stalls once the
 * socket's few hundred KiB are full (and gives up after PROTO_STALL_MS). */
static void inbox_reads_ahead(void)
{
    conn a, b;
    link_pair(&a, &b);
    char err[256];
    REQUIRE(conn_inbox_start(&b, err, sizeof err) == 0, "inbox: %s", err);
    CHECK(conn_wait_fd(&b) != b.fd, "the inbox's signal is polled, not the socket");
    ahead ah = {.c = &a};
    pthread_mutex_init(&ah.lock, NULL);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, send_ahead, &ah) == 0, "sender thread");
    int sent = 0;
    for (int64_t until = net_now_ns() + 4000000000ll; sent < AHEAD_FRAMES && net_now_ns() < until;) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&ah.lock);
        sent = ah.sent;
        pthread_mutex_unlock(&ah.lock);
    }
    CHECK(sent == AHEAD_FRAMES, "the peer sent %d of %d frames to a side not reading",
          sent, AHEAD_FRAMES);
    pthread_join(t, NULL);
    for (int i = 0; i < sent; i++) {
        frame f;
        int rc = conn_recv(&b, &f, 1000, err, sizeof err);
        REQUIRE(rc == 0, "frame %d: %d %s", i, rc, rc < 0 ? err : "nothing");
        bool same = f.type == RM_PROBE && f.len == AHEAD_BYTES;
        for (uint32_t j = 0; same && j < f.len; j += 4099)
            same = f.body[j] == (uint8_t)(i + 1);
        CHECK(same, "frame %d came out changed or out of order (type %d, %u bytes)", i, f.type,
              f.len);
    }
    frame f;
    CHECK(conn_recv(&b, &f, 0, err, sizeof err) == 1, "a frame more than was sent");
    conn_close(&a);
    for (int i = 0; i < 2; i++)
        CHECK(conn_recv(&b, &f, 1000, err, sizeof err) == -1 && strstr(err, "b: "),
              "the hang-up, read %d: '%s'", i, err);
    conn_close(&b);
    pthread_mutex_destroy(&ah.lock);
}

/* Sequence ids: a batch's rows keep theirs through the wire; an id outside the plan's
 * sequences, a KVOP of a negative sequence and a PLAN for no sequence are refused, each with a
 * message naming the sequence. */
static void sequences(void)
{
    conn a, b;
    link_pair(&a, &b);
    a.max_data = b.max_data = proto_data_bound(4, 8, WIRE_F32);
    char err[512];
    hop_buffers hb;
    REQUIRE(hop_buffers_init(&hb, 4, 8, err, sizeof err) == 0, "%s", err);
    float h[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, got[3 * 4];
    const int32_t pos[3] = {4, 0, 5}, seq[3] = {0, 2, 0};
    int32_t gpos[3], gseq[3];
    msg_batch m = {.serial = 3, .round = 0, .n = 3, .wire = WIRE_F32};
    frame f;
    msg_batch d;
    hop_limits lim = {.k = 1, .n_ctx = 16, .n_seq = 3, .max_batch = 8};
    for (int n_seq = 3; n_seq >= 2; n_seq--) {
        REQUIRE(hop_send(&hb, &a, RM_BATCH, &m, h, pos, seq, err, sizeof err) == 0, "%s", err);
        REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
        REQUIRE(proto_decode_batch(&f, 4, &d, err, sizeof err) == 0, "%s", err);
        lim.n_seq = n_seq;
        int rc = hop_unpack(&hb, &d, &lim, got, gpos, gseq, err, sizeof err);
        if (n_seq == 3)
            CHECK(rc == 0 && !memcmp(gseq, seq, sizeof seq) && !memcmp(gpos, pos, sizeof pos) &&
                      !memcmp(got, h, sizeof h), "rows and their sequences through the wire");
        else
            CHECK(rc == -1 && strstr(err, "sequence 2") && strstr(err, "sequences 0..1"),
                  "a sequence id past the plan's: %s", rc ? err : "accepted");
    }
    const int32_t neg[3] = {0, -1, 0};
    REQUIRE(hop_send(&hb, &a, RM_BATCH, &m, h, pos, neg, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    REQUIRE(proto_decode_batch(&f, 4, &d, err, sizeof err) == 0, "%s", err);
    CHECK(hop_unpack(&hb, &d, &lim, got, gpos, gseq, err, sizeof err) == -1 &&
              strstr(err, "sequence -1"), "a negative sequence id: %s", err);

    msg_kvop k = {.op = KVOP_SHIFT, .seq = 5, .p0 = 2, .p1 = 9, .delta = -1}, kd;
    REQUIRE(proto_send_kvop(&a, &k, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(proto_decode_kvop(&f, &kd, err, sizeof err) == 0 && kd.seq == 5 && kd.p0 == 2 &&
              kd.p1 == 9 && kd.delta == -1, "KVOP names its sequence");
    k.seq = -3;
    REQUIRE(proto_send_kvop(&a, &k, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(proto_decode_kvop(&f, &kd, err, sizeof err) == -1 && strstr(err, "sequence -3"),
          "KVOP of a negative sequence: %s", err);

    msg_plan p = {.rank = 1, .n_dev = 2, .k = 1, .n_layer = 2, .window = {1, 1}, .n_ctx = 16,
                  .max_batch = 8, .n_seq = 4}, pd;
    REQUIRE(proto_send_plan(&a, &p, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(proto_decode_plan(&f, &pd, err, sizeof err) == 0 && pd.n_seq == 4, "PLAN's sequences: %s",
          err);
    p.n_seq = 0;
    REQUIRE(proto_send_plan(&a, &p, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(proto_decode_plan(&f, &pd, err, sizeof err) == -1 && strstr(err, "0 sequences"),
          "a PLAN for no sequence: %s", err);
    hop_buffers_free(&hb);
    conn_close(&a);
    conn_close(&b);
}

/* DECODE carries the sampler's whole state and TOKEN its random stream after each choice:
 * both through the wire unchanged; DONE its count. Malformed requests are refused naming what
 * is wrong: a window longer than the sampler's, or than the bound, a sampler number that is not
 * finite, no steps, a negative position, a body cut short. */
static void decode_messages(void)
{
    conn a, b;
    link_pair(&a, &b);
    char err[512];
    frame f;
    msg_decode *q = calloc(1, sizeof *q), *d = calloc(1, sizeof *d);
    REQUIRE(q && d, "out of memory");
    *q = (msg_decode){.serial = 7, .max_steps = 300, .seq = 2, .pos = 41, .token = 99,
                      .rng = {1, 2, 3, 0xfedcba9876543210ull}, .n_window = 3,
                      .window = {5, 6, 7}};
    sampler_params_default(&q->sp);
    q->sp.repeat_penalty = 1.25f;
    q->sp.presence_penalty = -0.5f;
    q->sp.seed = 0;   /* not sent */
    REQUIRE(proto_send_decode(&a, q, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(proto_decode_decode(&f, d, err, sizeof err) == 0 && d->serial == 7 &&
              d->max_steps == 300 && d->seq == 2 && d->pos == 41 && d->token == 99 &&
              !memcmp(&d->sp, &q->sp, sizeof d->sp) && !memcmp(d->rng, q->rng, sizeof d->rng) &&
              d->n_window == 3 && !memcmp(d->window, q->window, 3 * sizeof *d->window),
          "DECODE through the wire: %s", err);

    struct { const char *what, *want; } bad[] = {
        {"window", "window 3 of 2"},
        {"bound", "window 3 of 600"},
        {"nan", "not finite"},
        {"steps", "0 steps"},
        {"pos", "position -1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg_decode x = *q;
        if (i == 0)
            x.sp.repeat_last_n = 2;
        else if (i == 1)
            x.sp.repeat_last_n = 600;
        else if (i == 2)
            x.sp.top_p = NAN;
        else if (i == 3)
            x.max_steps = 0;
        else
            x.pos = -1;
        REQUIRE(proto_send_decode(&a, &x, err, sizeof err) == 0, "%s", err);
        REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
        CHECK(proto_decode_decode(&f, d, err, sizeof err) == -1 && strstr(err, bad[i].want),
              "DECODE with a bad %s: %s", bad[i].what, err);
    }
    REQUIRE(proto_send_decode(&a, q, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    f.len -= 4;   /* the window's last token cut off */
    CHECK(proto_decode_decode(&f, d, err, sizeof err) == -1 && strstr(err, "malformed DECODE"),
          "a DECODE cut short: %s", err);

    msg_token t = {.serial = 9, .token = 511, .rng = {~0ull, 0, 42, 7}}, td;
    REQUIRE(proto_send_token(&a, &t, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(proto_decode_token(&f, &td, err, sizeof err) == 0 && !memcmp(&t, &td, sizeof t),
          "TOKEN through the wire: %s", err);
    uint32_t steps = 0;
    REQUIRE(proto_send_done(&a, 12, err, sizeof err) == 0, "%s", err);
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(proto_decode_done(&f, &steps, err, sizeof err) == 0 && steps == 12, "DONE: %s", err);
    CHECK(proto_decode_token(&f, &td, err, sizeof err) == -1 &&
              strstr(err, "expected TOKEN, got DONE"),
          "a DONE for a TOKEN: %s", err);
    free(q);
    free(d);
    conn_close(&a);
    conn_close(&b);
}

int main(void)
{
    stats_layout();
    decode_messages();
    plan_layout();
    sequences();
    heartbeat_on_a_full_link();
    inbox_reads_ahead();
    return test_done();
}
