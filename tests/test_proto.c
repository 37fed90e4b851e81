/* Wire layouts the protocol fixes, checked against bytes laid out here by hand (not with the
 * encoders under test): a STATS body is serial, rank, then the nine counters in their documented
 * order, each a little-endian u64, and nothing else. And the heartbeat never holds up the thread
 * that changes its set of links, even when a peer has stopped reading. */
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/proto.h"
#include "test.h"

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void stats_layout(void)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    conn a, b;
    conn_init(&a, sv[0], "a");
    conn_init(&b, sv[1], "b");
    msg_stats m = {.serial = 7, .rank = 2,
                   .c = {.compute_ns = 101, .wait_ns = 102, .major_faults = 103, .disk_bytes = 104,
                         .pages = 105, .pages_resident = 106, .bytes_sent = 107, .bytes_recv = 108,
                         .hops = 109}};
    char err[512];
    REQUIRE(send_stats(&a, &m, err, sizeof err) == 0, "%s", err);
    frame f;
    REQUIRE(conn_recv(&b, &f, 1000, err, sizeof err) == 0, "%s", err);
    CHECK(f.type == RM_STATS && f.len == 8 + 9 * 8, "STATS of %u bytes", f.len);
    if (f.len == 80) {
        CHECK(f.body[0] == 7 && f.body[4] == 2, "serial and rank first");
        for (int i = 0; i < 9; i++)
            CHECK(get64(f.body + 8 + 8 * i) == 101u + (unsigned)i, "counter %d is %llu", i,
                  (unsigned long long)get64(f.body + 8 + 8 * i));
    }
    msg_stats d;
    REQUIRE(decode_stats(&f, &d, err, sizeof err) == 0, "%s", err);
    CHECK(!memcmp(&d, &m, sizeof d), "decoded STATS differ");
    /* one byte more or less is malformed */
    frame g = f;
    g.len = f.len - 1;
    CHECK(decode_stats(&g, &d, err, sizeof err) == -1, "short STATS accepted");
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

int main(void)
{
    stats_layout();
    heartbeat_on_a_full_link();
    return test_done();
}
