/* Discovery on loopback only (unicast probes to 127.0.0.1; nothing is sent anywhere else): a
 * worker of this model and key is found with its port and summary; one of another model is
 * counted as such; one with another key stays mute; a forged beacon (claiming the cluster id,
 * without the key) and a replayed one (a real beacon of an earlier probe) are counted and
 * ignored; discovery without a key is refused.
 *
 * `test_discovery --forge [PORT]` is the forger of tests/discovery_ns.sh: it answers every probe
 * on UDP PORT (default DISC_PORT, all interfaces) with a beacon that claims the probe's cluster
 * id but cannot prove the key, until killed. */
#include <arpa/inet.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/discover.h"
#include "test.h"

enum { BEACON_BYTES = 136 };

static ring_key key_of(int seed)
{
    ring_key s = {.set = true};
    for (int i = 0; i < 32; i++)
        s.k[i] = (uint8_t)(seed * 31 + i);
    return s;
}

static disc_summary summary(int model, int port)
{
    disc_summary s = {.port = port, .n_layer = 5, .threads = 2, .mem_budget = 1u << 30};
    memset(s.identity, model, sizeof s.identity);
    ring_random(&s.instance, sizeof s.instance);
    return s;
}

/* A UDP socket on 127.0.0.1 (port 0: any) or on every interface. */
static int udp_on(const char *host, int port, int *bound)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = host ? inet_addr(host) : htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    if (bound)
        *bound = ntohs(a.sin_port);
    return fd;
}

/* A responder that answers each probe with `reply` (n bytes); with patch, the probe's cluster
 * id and nonce are copied in first (a forger that read the probe but has no key). */
typedef struct responder {
    int fd, port;
    uint8_t reply[BEACON_BYTES];
    bool patch;
    int answers;                  /* stop after this many */
    pthread_t t;
} responder;

static void *respond(void *arg)
{
    responder *r = arg;
    for (int i = 0; i < r->answers; i++) {
        uint8_t buf[256];
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(r->fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
        if (n < 40)
            continue;
        if (r->patch)
            memcpy(r->reply + 8, buf + 8, 32);
        sendto(r->fd, r->reply, sizeof r->reply, 0, (struct sockaddr *)&from, fl);
    }
    return NULL;
}

static int forge(int port)
{
    responder r = {.fd = udp_on(NULL, port, NULL), .patch = true, .answers = 1 << 30};
    if (r.fd < 0)
        return 1;
    memcpy(r.reply, "PRMD\1\2", 6);
    ring_random(r.reply + 40, sizeof r.reply - 40);
    respond(&r);
    return 0;
}

/* An advertiser on 127.0.0.1 on a free UDP port. */
static disc_advertiser *advertiser(const disc_keys *k, const disc_summary *s, int *port)
{
    char err[256];
    for (int tries = 0; tries < 50; tries++) {
        int probe = udp_on("127.0.0.1", 0, port);   /* a port that was free a moment ago */
        close(probe);
        disc_advertiser *a = disc_advertise_start(k, s, *port, "127.0.0.1", NULL, err, sizeof err);
        if (a)
            return a;
    }
    REQUIRE(0, "no advertiser: %s", err);
    return NULL;
}

static void probe(const disc_keys *k, int model, int port, disc_result *out)
{
    char err[256];
    uint8_t id[PROTO_ID_BYTES];
    memset(id, model, sizeof id);
    disc_opts o = {.port = port, .wait_ms = 300, .to = "127.0.0.1"};
    REQUIRE(disc_probe(k, id, &o, out, err, sizeof err) == 0, "probe: %s", err);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--forge"))
        return forge(argc > 2 ? atoi(argv[2]) : DISC_PORT);
    char err[256], line[512];
    ring_key key = key_of(1), other_key = key_of(2), none = {0};
    disc_keys k, k2;
    REQUIRE(disc_keys_derive(&key, &k, err, sizeof err) == 0, "%s", err);
    REQUIRE(disc_keys_derive(&other_key, &k2, err, sizeof err) == 0, "%s", err);
    CHECK(disc_keys_derive(&none, &k, err, sizeof err) != 0 && strstr(err, "cluster key"),
          "discovery without a key: '%s'", err);
    CHECK(memcmp(k.cluster_id, k2.cluster_id, sizeof k.cluster_id) != 0, "the same cluster id");
    CHECK(memcmp(k.cluster_id, key.k, sizeof k.cluster_id) != 0, "the cluster id is the key");

    /* Found: this model, this key. */
    int port;
    disc_summary s = summary(7, 9500);
    disc_advertiser *a = advertiser(&k, &s, &port);
    disc_result r;
    probe(&k, 7, port, &r);
    CHECK(r.n == 1 && !strcmp(r.w[0].addr, "127.0.0.1:9500") && r.w[0].s.n_layer == 5 &&
              r.w[0].s.threads == 2 && r.w[0].s.mem_budget == 1u << 30 &&
              r.w[0].s.instance == s.instance && r.other_model == 0 && r.rejected == 0,
          "found %d (%s), other %d, rejected %d", r.n, r.n ? r.w[0].addr : "", r.other_model,
          r.rejected);
    disc_describe(&r, line, sizeof line);
    CHECK(!strcmp(line, "found 1 worker with this model (127.0.0.1:9500)"), "'%s'", line);

    /* Another model: counted, not used. */
    probe(&k, 8, port, &r);
    disc_describe(&r, line, sizeof line);
    CHECK(r.n == 0 && r.other_model == 1 &&
              !strcmp(line, "found 0 workers with this model; 1 advertised another model"),
          "another model: '%s'", line);

    /* Another key: the worker does not answer at all. */
    probe(&k2, 7, port, &r);
    CHECK(r.n == 0 && r.other_model == 0 && r.rejected == 0, "another key: %d %d %d", r.n,
          r.other_model, r.rejected);

    /* A real beacon, captured, replayed to a later probe: rejected (stale nonce). */
    int cport;
    int cap = udp_on("127.0.0.1", 0, &cport);
    uint8_t probe_bytes[72];
    memcpy(probe_bytes, "PRMD\1\1\0\0", 8);
    memcpy(probe_bytes + 8, k.cluster_id, 16);
    ring_random(probe_bytes + 24, 16);
    crypto_generichash(probe_bytes + 40, 32, probe_bytes, 40, k.mac_key, sizeof k.mac_key);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = inet_addr("127.0.0.1")};
    sendto(cap, probe_bytes, sizeof probe_bytes, 0, (struct sockaddr *)&to, sizeof to);
    responder replay = {.answers = 3};
    struct timeval tv = {.tv_sec = 2};
    setsockopt(cap, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    CHECK(recv(cap, replay.reply, sizeof replay.reply, 0) == BEACON_BYTES,
          "no beacon for a hand-made probe");
    close(cap);
    disc_advertise_stop(a);
    replay.fd = udp_on("127.0.0.1", 0, &replay.port);
    pthread_create(&replay.t, NULL, respond, &replay);
    probe(&k, 7, replay.port, &r);
    pthread_join(replay.t, NULL);
    close(replay.fd);
    disc_describe(&r, line, sizeof line);
    CHECK(r.n == 0 && r.rejected == 3 &&
              !strcmp(line, "found 0 workers with this model; ignored 3 beacons that did not "
                            "prove the key"),
          "replayed: '%s'", line);

    /* Forged: the probe's cluster id and nonce, a made-up body and MAC. */
    responder forged = {.patch = true, .answers = 3};
    memcpy(forged.reply, "PRMD\1\2", 6);
    ring_random(forged.reply + 40, sizeof forged.reply - 40);
    memset(forged.reply + 40, 7, PROTO_ID_BYTES);
    forged.fd = udp_on("127.0.0.1", 0, &forged.port);
    pthread_create(&forged.t, NULL, respond, &forged);
    probe(&k, 7, forged.port, &r);
    pthread_join(forged.t, NULL);
    close(forged.fd);
    CHECK(r.n == 0 && r.rejected == 3, "forged: found %d, rejected %d", r.n, r.rejected);

    /* The same worker over two probes' answers is one worker. */
    a = advertiser(&k, &s, &port);
    disc_summary s2 = summary(7, 9501);
    int port2;
    disc_advertiser *b = advertiser(&k, &s2, &port2);
    probe(&k, 7, port, &r);
    CHECK(r.n == 1, "one advertiser seen %d times", r.n);
    disc_advertise_stop(b);
    disc_advertise_stop(a);
    return test_done();
}
