/* discover.h — finding the workers of a cluster on the local network, with no addresses typed.
 *
 * A head sends a probe by UDP to every interface's IPv4 broadcast address, to the IPv4
 * link-local multicast group 224.0.0.95 and to the IPv6 link-local group ff02::95 (on every
 * interface), a few times over the wait. A worker that advertises (`prima worker --advertise`)
 * answers each probe it can verify with a beacon sent back to the prober. Both carry:
 *
 *   probe   "PRMD" | version 1 | type 1 | 0 0 | cluster id (16) | nonce (16) | MAC (32)
 *   beacon  "PRMD" | version 1 | type 2 | 0 0 | cluster id (16) | the probe's nonce (16) |
 *           model identity (32) | TCP port (u16) | 0 (u16) | layers (u32) | threads (u32) |
 *           0 (u32) | memory budget (u64) | instance (u64) | MAC (32)
 *
 * all little-endian. The cluster id and the MAC key are derived from the cluster key (keyed
 * BLAKE2b with distinct labels), so the id names the cluster without revealing the key, and the
 * MAC (keyed BLAKE2b-256 over everything before it) proves the sender holds the key. A worker
 * answers only probes that prove the key (a stranger learns nothing, not even that it runs
 * prima); a head keeps only beacons that prove the key and echo its fresh nonce (a forged or
 * replayed beacon is counted and ignored). Discovery needs a key: without one there is nothing
 * to tell a cluster's beacons from anyone else's.
 *
 * Multicast is often dropped by home Wi-Fi (client isolation, phones without a multicast lock)
 * and broadcast does not cross routers: what discovery does not find, --workers still names. */
#ifndef PRIMA_DISCOVER_H
#define PRIMA_DISCOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/key.h"
#include "cluster/net.h"
#include "cluster/plan.h"
#include "cluster/proto.h"

#define DISC_PORT 9499            /* UDP, on every device */
#define DISC_WAIT_MS 1000         /* how long a head collects beacons */

typedef struct disc_keys {
    uint8_t cluster_id[16];
    uint8_t mac_key[32];
} disc_keys;

/* The discovery keys of a cluster key. The one place that knows where the key comes from.
 * 0, or -1 with err (no key). */
int disc_keys_derive(const ring_key *key, disc_keys *out, char *err, size_t errlen);

/* What a worker says about itself. */
typedef struct disc_summary {
    uint8_t identity[PROTO_ID_BYTES];
    int port;                     /* its ring (TCP) port */
    uint32_t n_layer, threads;
    uint64_t mem_budget;
    uint64_t instance;            /* random per advertiser: the same worker seen twice */
} disc_summary;

typedef struct disc_advertiser disc_advertiser;

/* Answer probes on UDP port udp_port (0: DISC_PORT) from a thread, until stopped: on every
 * interface (IPv4 broadcast and multicast, IPv6 multicast, joining the groups on the
 * interfaces present now), or with bind4 (an IPv4 address) only there, unicast. log: one line
 * when it starts; NULL: silent. NULL with err on failure. */
disc_advertiser *disc_advertise_start(const disc_keys *k, const disc_summary *s, int udp_port,
                                      const char *bind4, FILE *log, char *err, size_t errlen);
void disc_advertise_stop(disc_advertiser *a);

typedef struct disc_worker {
    char addr[NET_HOST_MAX + 8];  /* "10.0.0.2:9500" or "[fe80::1%eth0]:9500" */
    disc_summary s;
} disc_worker;

typedef struct disc_result {
    disc_worker w[PRIMA_MAX_DEVICES];
    int n;                        /* workers with this model, by address */
    int other_model;              /* workers (by instance) that advertised another model */
    int rejected;                 /* beacons that failed the key or nonce check */
} disc_result;

typedef struct disc_opts {
    int port;                     /* 0: DISC_PORT */
    int wait_ms;                  /* 0: DISC_WAIT_MS */
    const char *to;               /* NULL: every interface; else only this IPv4/IPv6 address */
} disc_opts;

/* Probe and collect the beacons of the workers holding the model `identity`. 0, or -1 with err
 * (no socket could send). */
int disc_probe(const disc_keys *k, const uint8_t identity[PROTO_ID_BYTES], const disc_opts *o,
               disc_result *out, char *err, size_t errlen);
/* One line: "found 2 workers with this model (a, b); 1 advertised another model; ..." */
void disc_describe(const disc_result *r, char *out, size_t cap);

#endif
