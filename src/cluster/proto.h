/* proto.h — the ring's wire protocol: framed, typed, versioned messages over TCP.
 *
 * Every connection starts with the handshake of link.h (plaintext or fresh session keys; with a
 * cluster key every frame is then sealed). A frame is a 16-byte header followed by `length`
 * body bytes, all little-endian:
 *     u32 magic "PRMA" | u16 version | u16 type | u32 sequence number | u32 length
 * The header is checked completely (magic, version, known type, the length bound of that type on
 * this connection, the next expected sequence number) before a single body byte is read, so a
 * damaged or hostile peer costs at most one bounded read and a dropped connection.
 *
 * Messages (who sends them):
 *   HELLO   head or peer -> worker   role, model identity, session + rank (peer)
 *   WELCOME worker -> head           instance id, model identity, shape, memory budget
 *   PLAN    head -> worker           ring order, windows, GPU layers, k, context, threads,
 *                                    successor, sequences
 *   READY   worker -> head           plan applied, successor connected (given GPU layers: one
 *                                    line on what became of them)
 *   BATCH   device -> successor      one hop: hidden states + positions + sequence ids
 *   RESULT  device -> head           the batch after the model's last layer
 *   KVOP    head -> ring             KV-cache edit of one sequence, forwarded round the ring
 *                                    in data order
 *   STATS   worker -> head           counters of one batch
 *   PING    both ways on head links  liveness
 *   ERROR   any                      a refusal or failure, one line, then the link closes
 *   BYE     head -> worker -> head   end of session
 *   PROFILE head -> worker -> head   before the plan: threads to measure with / the worker's
 *                                    device profile (JSON text) for the head's scheduler
 *   PROBE   head -> worker -> head   a payload the worker echoes: the link's delay and
 *                                    throughput for the scheduler
 *   DECODE  head -> worker           to the one device holding every layer: decode on your own
 *                                    (a token, its position, up to N steps, the sampler's state)
 *   TOKEN   worker -> head           each token it chose, with its sampler's random stream
 *   HALT    head -> worker           stop decoding (the head's reply ended)
 *   DONE    worker -> head           the answer to every DECODE: how many steps it made
 * To a worker that keeps a store (store.h) instead of a copy of the model:
 *   MANIFEST head -> worker          the model's manifest (manifest.h), when WELCOME asks for it
 *   FETCH   head -> worker           a plan (PLAN's body) whose chunks the worker should hold
 *   WANT    worker -> head           the chunks it lacks, as ranges, and their bytes; none: done
 *   CHUNK   head -> worker           chunk index + its bytes, each one checked against the
 *                                    manifest before it is kept
 *   HAVE    worker -> head           after a FETCH: the chunks it holds (a bitmap), so that the
 *                                    head can have other workers fetch them from it
 *   FROM    head -> worker           the answer to HAVE: a worker (address) to fetch some
 *                                    ranges from, or none; then the worker WANTs the rest
 * A worker fetching from another connects to it with HELLO role FETCHER, sends one WANT, and is
 * sent those chunks (CHUNK), each checked against the manifest as the head's are.
 */
#ifndef PRIMA_PROTO_H
#define PRIMA_PROTO_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/key.h"
#include "cluster/link.h"
#include "cluster/manifest.h"
#include "cluster/net.h"
#include "cluster/plan.h"
#include "model/sample.h"

#define PROTO_MAGIC 0x414d5250u   /* "PRMA" */
#define PROTO_VERSION 7           /* 2: the link handshake, sealed frames, no proofs in bodies;
                                   * 3: sequences (PLAN's n_seq, KVOP's seq); 4: DECODE;
                                   * 5: the tag on the handshake's keyed greeting;
                                   * 6: STATS' routed_bytes; 7: stores (WELCOME's flags,
                                   * MANIFEST, FETCH, WANT, CHUNK, HAVE, FROM) and the identity
                                   * as the manifest's hash */
#define PROTO_HEADER_BYTES 16
#define PROTO_SMALL_MAX 4096      /* bound on every body except BATCH / RESULT */
#define PROTO_STALL_MS 5000       /* a frame in progress that makes no progress this long is dead */
#define PROTO_PING_MS 1000
#define PROTO_PING_SEND_MS 100    /* a ping that cannot be sent this soon is skipped or fails */
#define PROTO_ADMIT_MS 2000       /* a newcomer's whole handshake and HELLO, however it trickles */
#define PROTO_DEAD_MS 5000        /* a link silent this long (pings included) is dead */
#define PROTO_MAX_BATCH 8192      /* tokens per batch */
#define PROTO_ID_BYTES 32
#define PROTO_PROBE_MAX (1u << 20) /* bound on a PROBE body */
#define PROTO_NOTE_MAX 512        /* a READY note, its NUL included */
#define PROTO_MAX_SEQ 256         /* sequences (KV regions) per device */
#define PROTO_DECODE_WINDOW 512   /* bound on a DECODE's penalty window (repeat_last_n) */
#define PROTO_WANT_MAX 500        /* chunk ranges in one WANT */
#define PROTO_FROM_MAX 400        /* ... and in one FROM (beside an address) */

enum msg_type {
    RM_HELLO = 1, RM_WELCOME, RM_PLAN, RM_READY, RM_BATCH, RM_RESULT, RM_KVOP,
    RM_STATS, RM_PING, RM_ERROR, RM_BYE, RM_PROFILE, RM_PROBE, RM_DECODE, RM_TOKEN, RM_HALT,
    RM_DONE, RM_MANIFEST, RM_FETCH, RM_WANT, RM_CHUNK, RM_HAVE, RM_FROM, RM_TYPE_END
};
const char *proto_msg_name(int type);

enum wire_type { WIRE_F32 = 0, WIRE_F16 = 1 };
enum release_policy { RELEASE_AUTO = 0, RELEASE_NEVER = 1, RELEASE_ALWAYS = 2 };
enum kv_op { KVOP_TRUNCATE = 1, KVOP_SHIFT = 2 };
enum hello_role { ROLE_HEAD = 1, ROLE_PEER = 2, ROLE_FETCHER = 3 };

typedef struct conn_inbox conn_inbox;

/* One connection. Sending is serialized by send_lock (a heartbeat thread shares the head links);
 * receiving belongs to one thread (the inbox's, once it has one). */
typedef struct conn {
    int fd;
    char name[128];            /* names the peer in every message: "device 2 (10.0.0.5:9300)" */
    pthread_mutex_t send_lock;
    uint32_t seq_out, seq_in;
    uint32_t max_data;         /* bound on BATCH / RESULT bodies; 0 until a plan fixes it */
    uint8_t *buf;              /* receive buffer, grown to the largest valid frame seen */
    size_t cap;
    uint64_t bytes_sent, bytes_recv;
    int64_t last_seen_ns;      /* last time a frame arrived */
    link_crypto *sec;          /* sealing state; NULL on a plaintext link */
    int64_t deadline_ns;       /* nonzero: no receive goes on past this (monotonic) */
    bool broken;               /* a send failed part-way: the stream is garbled, send no more */
    conn_inbox *inbox;         /* NULL until conn_inbox_start */
} conn;

void conn_init(conn *c, int fd, const char *name);
/* The link handshake (link.h) on a fresh connection, as its dialer or listener, with the cluster
 * key (NULL or unset: plaintext), done by deadline_ns. 0, or -1 or LINK_FOREIGN with err (drop
 * the link; after LINK_FOREIGN an ERROR frame may still tell the peer why). */
int conn_handshake(conn *c, bool dialer, const ring_key *key, int64_t deadline_ns, char *err,
                   size_t errlen);
/* Connect to host:port and run the handshake as the dialer (conn_handshake), trying again
 * while the listener turns the connection away as busy, until deadline_ns. 0 with c open, or
 * -1 or LINK_FOREIGN with err and c closed. */
int conn_dial(conn *c, const char *host, int port, const char *name, const ring_key *key,
              int64_t deadline_ns, char *err, size_t errlen);
void conn_close(conn *c);
/* Close after a refusal: stop sending, swallow (briefly, boundedly) what the peer still sends, so
 * the close does not turn into a reset that could destroy the refusal before it is read. */
void conn_close_gently(conn *c);
/* Move an open connection (without an inbox) into dst (initialised in place; src is left
 * closed and freed). */
void conn_move(conn *dst, conn *src);
/* Bound on data frames for a model of n_embd and batches of max_batch tokens. */
uint32_t proto_data_bound(int n_embd, int max_batch, enum wire_type wire);

typedef struct frame {
    int type;
    const uint8_t *body;       /* inside the connection's buffer: valid until the next recv */
    uint32_t len;
} frame;

/* Send one frame. Returns 0 or -1 (err set). */
int conn_send(conn *c, int type, const void *body, size_t len, char *err, size_t errlen);
/* Receive one frame, waiting up to wait_ms (-1: forever) for it to start. Returns 0, 1 when
 * nothing arrived in time, or -1 (err set: closed, stalled or malformed — drop the link). */
int conn_recv(conn *c, frame *f, int wait_ms, char *err, size_t errlen);
/* From now on a thread of the connection's own reads its frames as they arrive, checked as
 * conn_recv checks them, into a queue that conn_recv then takes them from (an error comes after
 * the frames before it, and stays). The peer's sends never wait for this side to finish
 * computing, so a ring may have any number of batches of any size on their way without a cycle
 * of devices each blocked sending to the next. Poll conn_wait_fd() for input; conn_close ends
 * the thread. The connection must stay where it is (no conn_move) and its max_data is fixed.
 * 0, or -1 with err (no thread: conn_recv reads the socket as before). */
int conn_inbox_start(conn *c, char *err, size_t errlen);
/* What to poll for this connection's input: its inbox's signal, or its socket. */
int conn_wait_fd(const conn *c);

/* A thread that sends PING on a set of connections every PROTO_PING_MS, so that the other side
 * of each link knows this one is alive even while it computes for a long time. */
typedef struct heartbeat {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
    conn **conns;
    int n;
} heartbeat;

int heartbeat_start(heartbeat *h, conn **conns, int n);
/* Change the set (the connections must stay valid until the next change or the stop). */
void heartbeat_set(heartbeat *h, conn **conns, int n);
void heartbeat_stop(heartbeat *h);

/* ---- message bodies ---- */

typedef struct msg_hello {
    uint8_t role;
    uint8_t identity[PROTO_ID_BYTES];  /* of the sender's model file */
    uint8_t session[16];               /* peer: the session it belongs to */
    uint32_t rank;                     /* peer: its place in the ring */
} msg_hello;

typedef struct msg_welcome {
    uint64_t instance;                 /* random per worker process: spots one worker listed twice */
    uint8_t identity[PROTO_ID_BYTES];
    uint32_t n_layer, n_embd, threads;
    uint64_t mem_budget;               /* bytes this device can give to weights and KV */
    uint8_t store;                     /* WELCOME_* flags */
} msg_welcome;
#define WELCOME_STORE 1                /* keeps a store: send it its chunks (FETCH) */
#define WELCOME_NEED_MANIFEST 2        /* with STORE: lacks the model; MANIFEST, then its WANTs,
                                        * then another WELCOME with the shape */

/* The chunks a store lacks: ranges [first, first + count), and the bytes of all it lacks (for
 * progress; the ranges may be only the first PROTO_WANT_MAX). n == 0: it holds all it needs. */
typedef struct msg_want {
    uint64_t bytes;
    uint32_t n;
    uint32_t first[PROTO_WANT_MAX], count[PROTO_WANT_MAX];
} msg_want;

typedef struct msg_plan {
    uint8_t session[16];
    uint32_t rank, n_dev, k, n_layer;
    uint32_t window[PRIMA_MAX_DEVICES];
    uint32_t n_ctx, max_batch, threads;
    uint8_t wire, prefetch, release, verbose;
    char succ_host[NET_HOST_MAX];      /* empty when the successor is the head */
    uint32_t succ_port;
    uint32_t n_seq;                    /* KV regions (sequences) to keep, 1..PROTO_MAX_SEQ */
    /* n_m per device. On the wire after n_seq, and only when one is not 0 (or a weight budget
     * follows). */
    uint32_t gpu_layers[PRIMA_MAX_DEVICES];
    /* The receiver's ring_plan.weight_budget: after the GPU layers, only when not 0 (or cache
     * types follow). */
    uint64_t weight_budget;
    /* The KV cache's K and V types (dtype ids: F16, Q8_0, Q4_0; 0, never a cache type, also
     * means F16), the same on every device: after the weight budget, only when one is neither
     * (absent: 0). */
    uint8_t kv_type[2];
} msg_plan;

typedef struct msg_batch {
    uint32_t serial;                   /* the head's batch counter */
    uint32_t round;                    /* the round the receiver computes */
    uint32_t n;
    uint8_t wire;
    const void *pos, *seq;             /* n int32 each, inside the frame (maybe unaligned) */
    const void *hidden;                /* n x n_embd in the wire type, inside the frame */
} msg_batch;

typedef struct msg_kvop {
    uint8_t op;
    int32_t seq;                       /* the sequence edited */
    int32_t p0, p1, delta;
} msg_kvop;

/* Decoding handed to the device that holds every layer (k = 1): it evaluates `token` at `pos`
 * of sequence seq, chooses the next token with the sampler rebuilt from this state, sends it
 * as a TOKEN (step i is batch serial + i), evaluates it, and so on for up to max_steps tokens,
 * or until a HALT; then DONE with the steps made. Every step evaluated its input token; the
 * last token chosen is not evaluated. */
typedef struct msg_decode {
    uint32_t serial, max_steps;
    int32_t seq, pos, token;
    sampler_params sp;                 /* the seed is not sent: rng is the stream's state */
    uint64_t rng[4];
    uint32_t n_window;                 /* the penalty window, oldest first */
    int32_t window[PROTO_DECODE_WINDOW];
} msg_decode;

typedef struct msg_token {
    uint32_t serial;                   /* the step that chose it */
    int32_t token;
    uint64_t rng[4];                   /* the sampler's random stream after choosing it */
} msg_token;

/* A device's counters, summed over the hops of one batch (or of a whole run). */
typedef struct ring_counters {
    uint64_t compute_ns;       /* inside this device's layers */
    uint64_t wait_ns;          /* idle, waiting for the previous device */
    uint64_t major_faults;     /* taken by compute (the prefetch thread's own are not counted) */
    uint64_t disk_bytes;       /* read from storage by the process, prefetching included */
    uint64_t pages;            /* pages of the windows computed (device.c: RESIDENCY_EVERY) */
    uint64_t pages_resident;   /* of those, already in memory when compute started */
    uint64_t bytes_sent, bytes_recv;
    uint64_t hops;             /* windows computed or forwarded */
    uint64_t routed_bytes;     /* of the experts the batch's rows were routed to, every layer
                                * computed: what paging by expert must read at most */
} ring_counters;

typedef struct msg_stats {
    uint32_t serial, rank;
    ring_counters c;
} msg_stats;

typedef struct msg_error {
    uint64_t instance;
    char text[256];
} msg_error;

/* Encoders send the message; decoders check the body's exact shape (err set on failure). */
int proto_send_hello(conn *c, const msg_hello *m, char *err, size_t errlen);
int proto_send_welcome(conn *c, const msg_welcome *m, char *err, size_t errlen);
int proto_send_plan(conn *c, const msg_plan *m, char *err, size_t errlen);
/* FETCH: a plan's body; proto_decode_plan decodes it too. */
int proto_send_fetch(conn *c, const msg_plan *m, char *err, size_t errlen);
int proto_send_want(conn *c, const msg_want *m, char *err, size_t errlen);
/* Ranges are checked against the file's n_chunks (non-empty, inside, not more than it has). */
int proto_decode_want(const frame *f, uint32_t n_chunks, msg_want *m, char *err, size_t errlen);
/* HAVE: n_chunks flags (0 or 1) as a bitmap; decoding checks its length against n_chunks. */
int proto_send_have(conn *c, const uint8_t *flags, uint32_t n_chunks, char *err, size_t errlen);
int proto_decode_have(const frame *f, uint32_t n_chunks, uint8_t *flags, char *err,
                      size_t errlen);
/* FROM: fetch m's ranges (at most PROTO_FROM_MAX) from the worker at host:port (port 0, no
 * ranges: from nobody). */
typedef struct msg_from {
    char host[NET_HOST_MAX];
    uint32_t port;
    msg_want want;                     /* bytes: of the ranges */
} msg_from;
int proto_send_from(conn *c, const msg_from *m, char *err, size_t errlen);
int proto_decode_from(const frame *f, uint32_t n_chunks, msg_from *m, char *err, size_t errlen);
/* MANIFEST is sent with conn_send (its bytes are checked by manifest_parse). CHUNK: */
int proto_send_chunk(conn *c, uint32_t index, const void *data, size_t len, char *err,
                     size_t errlen);
/* *data points into the frame; the receiver checks index and length against its manifest. */
int proto_decode_chunk(const frame *f, uint32_t *index, const uint8_t **data, size_t *len,
                       char *err, size_t errlen);
int proto_send_batch(conn *c, int type, const msg_batch *m, size_t hidden_bytes, char *err,
                     size_t errlen);
int proto_send_kvop(conn *c, const msg_kvop *m, char *err, size_t errlen);
int proto_send_stats(conn *c, const msg_stats *m, char *err, size_t errlen);
/* READY: an empty body, or (from a worker given GPU layers, so by a head that knows them) one
 * line for the head's user on what became of them (cut to PROTO_NOTE_MAX - 1 bytes).
 * decode_ready: note (cap >= PROTO_NOTE_MAX) is "" for an empty body. */
int proto_send_ready(conn *c, const char *note, char *err, size_t errlen);
int proto_decode_ready(const frame *f, char *note, size_t cap, char *err, size_t errlen);
/* PROFILE request: the threads the worker should measure with (0: its own default). The reply
 * is JSON text, sent with conn_send. */
int proto_send_profile_request(conn *c, uint32_t threads, char *err, size_t errlen);
/* DECODE, TOKEN, DONE (steps made); HALT has no body (conn_send). */
int proto_send_decode(conn *c, const msg_decode *m, char *err, size_t errlen);
int proto_send_token(conn *c, const msg_token *m, char *err, size_t errlen);
int proto_send_done(conn *c, uint32_t steps, char *err, size_t errlen);
/* Best effort (the link is being dropped anyway); never fails loudly. */
void proto_send_error(conn *c, uint64_t instance, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

int proto_decode_hello(const frame *f, msg_hello *m, char *err, size_t errlen);
int proto_decode_welcome(const frame *f, msg_welcome *m, char *err, size_t errlen);
int proto_decode_plan(const frame *f, msg_plan *m, char *err, size_t errlen);
/* n_embd: the model's; the body must hold exactly n rows of it in the stated wire type. */
int proto_decode_batch(const frame *f, int n_embd, msg_batch *m, char *err, size_t errlen);
int proto_decode_kvop(const frame *f, msg_kvop *m, char *err, size_t errlen);
int proto_decode_stats(const frame *f, msg_stats *m, char *err, size_t errlen);
int proto_decode_profile_request(const frame *f, uint32_t *threads, char *err, size_t errlen);
/* The shape is checked here (positions, counts, a window within repeat_last_n <=
 * PROTO_DECODE_WINDOW, finite sampler numbers); the receiver checks the model's bounds. */
int proto_decode_decode(const frame *f, msg_decode *m, char *err, size_t errlen);
int proto_decode_token(const frame *f, msg_token *m, char *err, size_t errlen);
int proto_decode_done(const frame *f, uint32_t *steps, char *err, size_t errlen);
int proto_decode_error(const frame *f, msg_error *m, char *err, size_t errlen);

#endif
