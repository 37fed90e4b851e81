/* discover.c — discovery probes and beacons (discover.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/discover.h"

#define DISC_MAGIC "PRMD"
#define DISC_VERSION 1
enum { DISC_PROBE = 1, DISC_BEACON = 2 };
enum { PROBE_BYTES = 72, BEACON_BYTES = 136, MAC_BYTES = 32 };
#define DISC_GROUP4 "224.0.0.95"
#define DISC_GROUP6 "ff02::95"
#define DISC_SENDS 3              /* probes per wait, against loss */

int disc_keys_derive(const ring_key *key, disc_keys *out, char *err, size_t errlen)
{
    if (!key || !key->set) {
        snprintf(err, errlen, "discovery needs the cluster key: without it no beacon can "
                              "be told from a stranger's");
        return -1;
    }
    /* Sub-keys of their own (key.h): the public id reveals nothing of the MAC key or the key. */
    if (ring_key_derive(key, RING_KEY_CLUSTER_ID, out->cluster_id, sizeof out->cluster_id) ||
        ring_key_derive(key, RING_KEY_BEACON, out->mac_key, sizeof out->mac_key)) {
        snprintf(err, errlen, "cannot derive the discovery keys from the cluster key");
        return -1;
    }
    return 0;
}

/* ---- datagrams ---- */

static void put_u16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)get_u64((const uint8_t[8]){p[0], p[1], p[2], p[3]});
}

static void mac_of(const disc_keys *k, const uint8_t *msg, size_t len, uint8_t out[MAC_BYTES])
{
    crypto_generichash(out, MAC_BYTES, msg, len, k->mac_key, sizeof k->mac_key);
}

/* Header, cluster id and nonce: the first 40 bytes of both kinds. */
static void put_head(uint8_t *p, int type, const disc_keys *k, const uint8_t nonce[16])
{
    memcpy(p, DISC_MAGIC, 4);
    p[4] = DISC_VERSION;
    p[5] = (uint8_t)type;
    p[6] = p[7] = 0;
    memcpy(p + 8, k->cluster_id, 16);
    memcpy(p + 24, nonce, 16);
}

/* A datagram of this type and length for this cluster whose MAC holds. */
static bool verify(const disc_keys *k, const uint8_t *p, size_t len, int type, size_t want)
{
    if (len != want || memcmp(p, DISC_MAGIC, 4) || p[4] != DISC_VERSION || p[5] != type ||
        memcmp(p + 8, k->cluster_id, 16))
        return false;
    uint8_t mac[MAC_BYTES];
    mac_of(k, p, len - MAC_BYTES, mac);
    return sodium_memcmp(mac, p + len - MAC_BYTES, MAC_BYTES) == 0;
}

static void encode_beacon(const disc_keys *k, const uint8_t nonce[16], const disc_summary *s,
                          uint8_t out[BEACON_BYTES])
{
    memset(out, 0, BEACON_BYTES);
    put_head(out, DISC_BEACON, k, nonce);
    memcpy(out + 40, s->identity, PROTO_ID_BYTES);
    put_u16(out + 72, (uint32_t)s->port);
    put_u32(out + 76, s->n_layer);
    put_u32(out + 80, s->threads);
    put_u64(out + 88, s->mem_budget);
    put_u64(out + 96, s->instance);
    mac_of(k, out, BEACON_BYTES - MAC_BYTES, out + BEACON_BYTES - MAC_BYTES);
}

static void decode_beacon(const uint8_t *p, disc_summary *s)
{
    memcpy(s->identity, p + 40, PROTO_ID_BYTES);
    s->port = p[72] | p[73] << 8;
    s->n_layer = get_u32(p + 76);
    s->threads = get_u32(p + 80);
    s->mem_budget = get_u64(p + 88);
    s->instance = get_u64(p + 96);
}

/* ---- sockets ---- */

static int udp_socket(int family, const char *bind4, int port, char *err, size_t errlen)
{
    int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "UDP socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof one);
    int rc;
    if (family == AF_INET6) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                                 .sin6_addr = in6addr_any};
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_ANY)};
        if (bind4 && inet_pton(AF_INET, bind4, &a.sin_addr) != 1) {
            snprintf(err, errlen, "discovery: '%s' is not an IPv4 address", bind4);
            close(fd);
            return -1;
        }
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    }
    if (rc) {
        snprintf(err, errlen, "UDP port %d (%s): %s", port, family == AF_INET6 ? "IPv6" : "IPv4",
                 strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Join (or, for the prober, send on) the link-local groups of every multicast interface. */
typedef void (*iface_fn)(void *ctx, int family, unsigned index, const struct sockaddr_in *broadcast);

static void each_interface(iface_fn fn, void *ctx)
{
    struct ifaddrs *list;
    if (getifaddrs(&list))
        return;
    for (struct ifaddrs *i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || !(i->ifa_flags & IFF_UP))
            continue;
        int family = i->ifa_addr->sa_family;
        if (family != AF_INET && family != AF_INET6)
            continue;
        unsigned index = if_nametoindex(i->ifa_name);
        /* The broadcast address as configured, or (when none was set, as `ip addr add` leaves
         * it, and getifaddrs then reports the address itself) the subnet's: the address with
         * every host bit set. */
        struct sockaddr_in bc = {.sin_family = AF_INET};
        bool has_bc = family == AF_INET && (i->ifa_flags & IFF_BROADCAST);
        if (has_bc && i->ifa_broadaddr)
            bc.sin_addr = ((const struct sockaddr_in *)i->ifa_broadaddr)->sin_addr;
        in_addr_t self = has_bc ? ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr : 0;
        if (has_bc && (bc.sin_addr.s_addr == htonl(INADDR_ANY) || bc.sin_addr.s_addr == self) &&
            i->ifa_netmask)
            bc.sin_addr.s_addr =
                self | ~((const struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr;
        if (index)
            fn(ctx, (i->ifa_flags & IFF_MULTICAST) ? family : -family, index,
               has_bc && bc.sin_addr.s_addr != htonl(INADDR_ANY) ? &bc : NULL);
    }
    freeifaddrs(list);
}

typedef struct join_ctx {
    int fd4, fd6;
} join_ctx;

static void join_groups(void *ctx, int family, unsigned index, const struct sockaddr_in *broadcast)
{
    (void)broadcast;
    join_ctx *j = ctx;
    if (family == AF_INET && j->fd4 >= 0) {
        struct ip_mreqn m = {.imr_ifindex = (int)index};
        inet_pton(AF_INET, DISC_GROUP4, &m.imr_multiaddr);
        setsockopt(j->fd4, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m);   /* again: EADDRINUSE */
    } else if (family == AF_INET6 && j->fd6 >= 0) {
        struct ipv6_mreq m = {.ipv6mr_interface = index};
        inet_pton(AF_INET6, DISC_GROUP6, &m.ipv6mr_multiaddr);
        setsockopt(j->fd6, IPPROTO_IPV6, IPV6_JOIN_GROUP, &m, sizeof m);
    }
}

/* ---- the advertiser ---- */

struct disc_advertiser {
    disc_keys k;
    disc_summary s;
    int fd[2];                    /* IPv4, IPv6 (-1 when unavailable) */
    int stop[2];
    pthread_t thread;
    FILE *log;
};

static void *advertise(void *arg)
{
    disc_advertiser *a = arg;
    for (;;) {
        struct pollfd p[3] = {{.fd = a->stop[0], .events = POLLIN},
                              {.fd = a->fd[0], .events = POLLIN},
                              {.fd = a->fd[1], .events = POLLIN}};
        if (poll(p, 3, -1) < 0 && errno != EINTR)
            break;
        if (p[0].revents)
            break;
        for (int i = 0; i < 2; i++) {
            if (!p[i + 1].revents)
                continue;
            uint8_t buf[256], beacon[BEACON_BYTES];
            struct sockaddr_storage from;
            socklen_t fl = sizeof from;
            ssize_t n = recvfrom(a->fd[i], buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
            /* Only probes that prove the key get an answer: to anyone else this port is mute. */
            if (n < 0 || !verify(&a->k, buf, (size_t)n, DISC_PROBE, PROBE_BYTES))
                continue;
            encode_beacon(&a->k, buf + 24, &a->s, beacon);
            sendto(a->fd[i], beacon, sizeof beacon, 0, (struct sockaddr *)&from, fl);
        }
    }
    return NULL;
}

disc_advertiser *disc_advertise_start(const disc_keys *k, const disc_summary *s, int udp_port,
                                      const char *bind4, FILE *log, char *err, size_t errlen)
{
    disc_advertiser *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->k = *k;
    a->s = *s;
    a->log = log;
    a->stop[0] = a->stop[1] = -1;
    int port = udp_port ? udp_port : DISC_PORT;
    a->fd[0] = udp_socket(AF_INET, bind4, port, err, errlen);
    char err6[256];
    a->fd[1] = bind4 ? -1 : udp_socket(AF_INET6, NULL, port, err6, sizeof err6);
    if (a->fd[0] < 0 || pipe2(a->stop, O_CLOEXEC)) {
        if (a->fd[0] >= 0)
            snprintf(err, errlen, "pipe: %s", strerror(errno));
        disc_advertise_stop(a);
        return NULL;
    }
    join_ctx j = {a->fd[0], a->fd[1]};
    if (!bind4)
        each_interface(join_groups, &j);
    if (pthread_create(&a->thread, NULL, advertise, a)) {
        snprintf(err, errlen, "cannot start the discovery thread");
        close(a->stop[1]);
        a->stop[1] = -1;
        disc_advertise_stop(a);
        return NULL;
    }
    if (log) {
        fprintf(log, "prima worker: answering discovery probes on UDP port %d (%s%s%s)\n", port,
                bind4 ? bind4 : "IPv4 broadcast and " DISC_GROUP4,
                a->fd[1] >= 0 ? ", IPv6 " DISC_GROUP6 : "", bind4 || a->fd[1] >= 0 ? "" : "; no IPv6");
        fflush(log);
    }
    return a;
}

void disc_advertise_stop(disc_advertiser *a)
{
    if (!a)
        return;
    if (a->stop[1] >= 0) {
        ssize_t w = write(a->stop[1], "x", 1);
        (void)w;
        pthread_join(a->thread, NULL);
    }
    for (int i = 0; i < 2; i++) {
        if (a->fd[i] >= 0)
            close(a->fd[i]);
        if (a->stop[i] >= 0)
            close(a->stop[i]);
    }
    sodium_memzero(&a->k, sizeof a->k);
    free(a);
}

/* ---- the prober ---- */

typedef struct probe_ctx {
    int fd4, fd6, port, sent;
    const uint8_t *probe;
} probe_ctx;

static void send_to(probe_ctx *c, int fd, const struct sockaddr *to, socklen_t tl)
{
    if (fd >= 0 && sendto(fd, c->probe, PROBE_BYTES, 0, to, tl) == PROBE_BYTES)
        c->sent++;
}

static void probe_interface(void *ctx, int family, unsigned index, const struct sockaddr_in *broadcast)
{
    probe_ctx *c = ctx;
    if (broadcast) {
        struct sockaddr_in b = *broadcast;
        b.sin_port = htons((uint16_t)c->port);
        send_to(c, c->fd4, (struct sockaddr *)&b, sizeof b);
    }
    if (family == AF_INET && c->fd4 >= 0) {
        struct ip_mreqn m = {.imr_ifindex = (int)index};
        setsockopt(c->fd4, IPPROTO_IP, IP_MULTICAST_IF, &m, sizeof m);
        struct sockaddr_in g = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
        inet_pton(AF_INET, DISC_GROUP4, &g.sin_addr);
        send_to(c, c->fd4, (struct sockaddr *)&g, sizeof g);
    } else if (family == AF_INET6 && c->fd6 >= 0) {
        setsockopt(c->fd6, IPPROTO_IPV6, IPV6_MULTICAST_IF, &index, sizeof index);
        struct sockaddr_in6 g = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)c->port),
                                 .sin6_scope_id = index};
        inet_pton(AF_INET6, DISC_GROUP6, &g.sin6_addr);
        send_to(c, c->fd6, (struct sockaddr *)&g, sizeof g);
    }
}

/* Send one round of probes: to `to` only, or to every interface. */
static int send_probes(probe_ctx *c, const char *to)
{
    c->sent = 0;
    if (!to) {
        each_interface(probe_interface, c);
        return c->sent;
    }
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)c->port)};
    if (inet_pton(AF_INET, to, &a4.sin_addr) == 1)
        send_to(c, c->fd4, (struct sockaddr *)&a4, sizeof a4);
    else if (inet_pton(AF_INET6, to, &a6.sin6_addr) == 1)
        send_to(c, c->fd6, (struct sockaddr *)&a6, sizeof a6);
    return c->sent;
}

static void format_addr(const struct sockaddr_storage *from, int port, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?", ifname[IF_NAMESIZE] = "";
    if (from->ss_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)from)->sin_addr, host, sizeof host);
        snprintf(out, cap, "%s:%d", host, port);
        return;
    }
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)from;
    inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof host);
    if (a6->sin6_scope_id && if_indextoname(a6->sin6_scope_id, ifname))
        snprintf(out, cap, "[%s%%%s]:%d", host, ifname, port);
    else
        snprintf(out, cap, "[%s]:%d", host, port);
}

/* Keep a beacon: a worker seen before (by instance) keeps its IPv4 address, which every device
 * can dial, over a link-local IPv6 one, which names this device's interface. */
static void record(disc_result *r, uint64_t *others, const disc_summary *s,
                   const uint8_t identity[PROTO_ID_BYTES], const struct sockaddr_storage *from)
{
    if (memcmp(s->identity, identity, PROTO_ID_BYTES)) {
        for (int i = 0; i < r->other_model; i++)
            if (others[i] == s->instance)
                return;
        if (r->other_model < PRIMA_MAX_DEVICES)
            others[r->other_model++] = s->instance;
        return;
    }
    disc_worker *w = NULL;
    for (int i = 0; i < r->n && !w; i++)
        if (r->w[i].s.instance == s->instance)
            w = &r->w[i];
    if (w && (from->ss_family == AF_INET6 || w->addr[0] != '['))
        return;
    if (!w) {
        if (r->n == PRIMA_MAX_DEVICES - 1)
            return;
        w = &r->w[r->n++];
    }
    w->s = *s;
    format_addr(from, s->port, w->addr, sizeof w->addr);
}

static int by_addr(const void *a, const void *b)
{
    return strcmp(((const disc_worker *)a)->addr, ((const disc_worker *)b)->addr);
}

int disc_probe(const disc_keys *k, const uint8_t identity[PROTO_ID_BYTES], const disc_opts *o,
               disc_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int port = o && o->port ? o->port : DISC_PORT;
    int wait_ms = o && o->wait_ms ? o->wait_ms : DISC_WAIT_MS;
    const char *to = o ? o->to : NULL;
    char e6[256];
    int fd4 = udp_socket(AF_INET, NULL, 0, err, errlen);
    int fd6 = udp_socket(AF_INET6, NULL, 0, e6, sizeof e6);
    if (fd4 < 0 && fd6 < 0)
        return -1;
    uint8_t probe[PROBE_BYTES], nonce[16];
    ring_random(nonce, sizeof nonce);
    put_head(probe, DISC_PROBE, k, nonce);
    mac_of(k, probe, PROBE_BYTES - MAC_BYTES, probe + PROBE_BYTES - MAC_BYTES);
    probe_ctx c = {.fd4 = fd4, .fd6 = fd6, .port = port, .probe = probe};
    uint64_t others[PRIMA_MAX_DEVICES];
    int64_t start = net_now_ns(), until = start + (int64_t)wait_ms * 1000000;
    int sends = 0, delivered = 0;
    for (int64_t now = start; now < until; now = net_now_ns()) {
        if (sends < DISC_SENDS && now >= start + (int64_t)sends * wait_ms / DISC_SENDS * 1000000) {
            delivered += send_probes(&c, to);
            sends++;
        }
        int64_t next = sends < DISC_SENDS ? start + (int64_t)sends * wait_ms / DISC_SENDS * 1000000
                                          : until;
        struct pollfd p[2] = {{.fd = fd4, .events = POLLIN}, {.fd = fd6, .events = POLLIN}};
        int ms = (int)((next - now) / 1000000) + 1;
        if (poll(p, 2, ms) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            uint8_t buf[256];
            struct sockaddr_storage from;
            socklen_t fl = sizeof from;
            ssize_t n = recvfrom(p[i].fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
            if (n < 0)
                continue;
            /* Ours: this cluster's key proven, and our nonce (not an old beacon replayed). */
            if (!verify(k, buf, (size_t)n, DISC_BEACON, BEACON_BYTES) ||
                memcmp(buf + 24, nonce, sizeof nonce)) {
                out->rejected++;
                continue;
            }
            disc_summary s;
            decode_beacon(buf, &s);
            record(out, others, &s, identity, &from);
        }
    }
    if (fd4 >= 0)
        close(fd4);
    if (fd6 >= 0)
        close(fd6);
    if (!delivered) {
        snprintf(err, errlen, "discovery: no probe could be sent (no interface with IPv4 "
                              "broadcast or multicast is up)");
        return -1;
    }
    qsort(out->w, (size_t)out->n, sizeof *out->w, by_addr);
    return 0;
}

void disc_describe(const disc_result *r, char *out, size_t cap)
{
    size_t off = (size_t)snprintf(out, cap, "found %d worker%s with this model", r->n,
                                  r->n == 1 ? "" : "s");
    for (int i = 0; i < r->n && off < cap; i++)
        off += (size_t)snprintf(out + off, cap - off, "%s%s", i ? ", " : " (", r->w[i].addr);
    if (r->n && off < cap)
        off += (size_t)snprintf(out + off, cap - off, ")");
    if (r->other_model && off < cap)
        off += (size_t)snprintf(out + off, cap - off, "; %d advertised another model",
                                r->other_model);
    if (r->rejected && off < cap)
        snprintf(out + off, cap - off, "; ignored %d beacon%s that did not prove the key",
                 r->rejected, r->rejected == 1 ? "" : "s");
}
