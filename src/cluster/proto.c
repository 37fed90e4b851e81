/* proto.c — the ring's frames and messages (proto.h): sending and receiving whole frames with
 * sequence numbers and per-type bounds checked before a body byte is read, the heartbeat, and
 * every message's encoder and exact-shape decoder. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/proto.h"
#include "gguf/dtype.h"

/* Bodies are little-endian on the wire; arrays of positions and hidden states are sent as they lie
 * in memory, which is only right on little-endian hosts (every target prima has). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ring protocol sends arrays in host order: little-endian hosts only"
#endif

static const char *const names[RM_TYPE_END] = {
    [RM_HELLO] = "HELLO", [RM_WELCOME] = "WELCOME", [RM_PLAN] = "PLAN", [RM_READY] = "READY",
    [RM_BATCH] = "BATCH", [RM_RESULT] = "RESULT", [RM_KVOP] = "KVOP", [RM_STATS] = "STATS",
    [RM_PING] = "PING", [RM_ERROR] = "ERROR", [RM_BYE] = "BYE", [RM_PROFILE] = "PROFILE",
    [RM_PROBE] = "PROBE", [RM_DECODE] = "DECODE", [RM_TOKEN] = "TOKEN", [RM_HALT] = "HALT",
    [RM_DONE] = "DONE", [RM_MANIFEST] = "MANIFEST", [RM_FETCH] = "FETCH", [RM_WANT] = "WANT",
    [RM_CHUNK] = "CHUNK", [RM_HAVE] = "HAVE", [RM_FROM] = "FROM",
};

const char *proto_msg_name(int type)
{
    return type > 0 && type < RM_TYPE_END ? names[type] : "unknown";
}

void conn_init(conn *c, int fd, const char *name)
{
    memset(c, 0, sizeof *c);
    c->fd = fd;
    snprintf(c->name, sizeof c->name, "%s", name);
    pthread_mutex_init(&c->send_lock, NULL);
    c->last_seen_ns = net_now_ns();
}

int conn_handshake(conn *c, bool dialer, const ring_key *key, int64_t deadline_ns, char *err,
                   size_t errlen)
{
    return link_handshake(c->fd, dialer, key, PROTO_VERSION, deadline_ns, c->name, NULL, &c->sec,
                          err, errlen);
}

int conn_dial(conn *c, const char *host, int port, const char *name, const ring_key *key,
              int64_t deadline_ns, char *err, size_t errlen)
{
    int64_t t0 = net_now_ns();
    int turned_away = 0;
    char first[256] = "";
    /* A worker flooded by strangers turns some connections away (or drops them before they are
     * answered); it keeps those whose greeting carries the key's tag, so trying again soon
     * gets in. Pauses double from 20 ms up to 320 ms. */
    for (int pause_ms = 20;; pause_ms = pause_ms < 320 ? 2 * pause_ms : pause_ms) {
        char why[256];
        int fd = net_connect(host, port, PROTO_STALL_MS, why, sizeof why);
        int rc = -1;
        if (fd < 0) {
            snprintf(err, errlen, "%s: %s", name, why);
        } else {
            conn_init(c, fd, name);
            rc = conn_handshake(c, true, key, deadline_ns, err, errlen);
            if (rc == 0)
                return 0;
            conn_close(c);
        }
        if (rc != LINK_BUSY_RC) {
            if (turned_away) {   /* the first refusal is the likelier cause */
                size_t n = strlen(err);
                snprintf(err + n, errlen - n, " (after %d tries turned away: %s)", turned_away,
                         first);
            }
            return rc;
        }
        if (!turned_away++)
            snprintf(first, sizeof first, "%s", err);
        if (net_now_ns() + (int64_t)pause_ms * 1000000 >= deadline_ns) {
            size_t n = strlen(err);
            snprintf(err + n, errlen - n, "; tried %d times in %.1f s", turned_away,
                     (double)(net_now_ns() - t0) / 1e9);
            return -1;
        }
        poll(NULL, 0, pause_ms);
    }
}

/* Frames an inbox queues before its reader waits for room: far more than a ring ever has on its
 * way to one device (a batch per device in flight, a few control messages), so only a peer
 * that floods this side meets it, and then TCP's own flow control holds that peer back. */
#define INBOX_MAX 64

static void inbox_stop(conn *c);

void conn_close(conn *c)
{
    if (c->inbox)
        inbox_stop(c);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    link_free(c->sec);
    c->sec = NULL;
    free(c->buf);
    c->buf = NULL;
    c->cap = 0;
    pthread_mutex_destroy(&c->send_lock);
}

static int inbox_recv(conn *c, frame *f, int wait_ms, char *err, size_t errlen);

void conn_close_gently(conn *c)
{
    if (c->fd >= 0) {
        shutdown(c->fd, SHUT_WR);
        int64_t until = net_now_ns() + 200 * 1000000ll;
        if (c->inbox) {   /* its reader swallows what still comes, until the peer's end */
            frame f;
            char err[256];
            for (int i = 0; i < INBOX_MAX && net_now_ns() < until; i++)
                if (inbox_recv(c, &f, 50, err, sizeof err))
                    break;
        } else {
            uint8_t sink[4096];
            for (int i = 0; i < 16 && net_now_ns() < until; i++) {
                struct pollfd p = {.fd = c->fd, .events = POLLIN};
                if (poll(&p, 1, 50) <= 0 || recv(c->fd, sink, sizeof sink, MSG_DONTWAIT) <= 0)
                    break;
            }
        }
    }
    conn_close(c);
}

void conn_move(conn *dst, conn *src)
{
    conn_init(dst, src->fd, src->name);
    dst->seq_out = src->seq_out;
    dst->seq_in = src->seq_in;
    dst->max_data = src->max_data;
    dst->buf = src->buf;
    dst->cap = src->cap;
    dst->bytes_sent = src->bytes_sent;
    dst->bytes_recv = src->bytes_recv;
    dst->last_seen_ns = src->last_seen_ns;
    dst->sec = src->sec;
    dst->deadline_ns = src->deadline_ns;
    dst->broken = src->broken;
    src->fd = -1;
    src->buf = NULL;
    src->sec = NULL;
    conn_close(src);
}

uint32_t proto_data_bound(int n_embd, int max_batch, enum wire_type wire)
{
    uint64_t row = (uint64_t)n_embd * (wire == WIRE_F16 ? 2 : 4) + 8;
    uint64_t b = 13 + row * (uint64_t)max_batch;
    return b > UINT32_MAX ? UINT32_MAX : (uint32_t)b;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A send that failed part-way (see conn.broken). */
#define NET_BROKEN (-100002)

/* With send_lock held: the header into hdr, then header and body out (sealed on a keyed link).
 * iov[1..n] is the body; iov[0] is filled here. 0 or a net_* result. */
static int send_locked(conn *c, int type, struct iovec *iov, int n, uint64_t len, uint8_t *hdr,
                       int stall_ms)
{
    if (c->broken)
        return NET_BROKEN;
    put32(hdr, PROTO_MAGIC);
    hdr[4] = PROTO_VERSION & 0xff;
    hdr[5] = PROTO_VERSION >> 8;
    hdr[6] = (uint8_t)type;
    hdr[7] = (uint8_t)(type >> 8);
    put32(hdr + 8, c->seq_out++);
    put32(hdr + 12, (uint32_t)len);
    int rc;
    if (c->sec) {
        struct iovec sealed;
        if (link_seal(c->sec, hdr, iov + 1, n, (size_t)len, &sealed))
            return -ENOMEM;
        rc = net_send_all(c->fd, &sealed, 1, stall_ms);
        if (rc == 0)
            c->bytes_sent += sealed.iov_len;
    } else {
        iov[0] = (struct iovec){hdr, PROTO_HEADER_BYTES};
        rc = net_send_all(c->fd, iov, n + 1, stall_ms);
        if (rc == 0)
            c->bytes_sent += PROTO_HEADER_BYTES + len;
    }
    /* After a frame cut short (or a sequence number spent on a frame never sent) the stream is
     * garbled, sealed or not: nothing more may follow it. */
    if (rc)
        c->broken = true;
    return rc;
}

/* Send one frame whose body is the concatenation of body[0..n). Returns 0 or -1 (err set). */
static int conn_sendv(conn *c, int type, const struct iovec *body, int n, char *err,
                      size_t errlen)
{
    struct iovec iov[8];
    uint8_t hdr[PROTO_HEADER_BYTES];
    uint64_t len = 0;
    if (n > 7) {
        snprintf(err, errlen, "%s: frame of %d pieces", c->name, n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        iov[i + 1] = body[i];
        len += body[i].iov_len;
    }
    if (len > UINT32_MAX) {
        snprintf(err, errlen, "%s: %s of %llu bytes is too large", c->name, proto_msg_name(type),
                 (unsigned long long)len);
        return -1;
    }
    pthread_mutex_lock(&c->send_lock);
    int rc = send_locked(c, type, iov, n, len, hdr, PROTO_STALL_MS);
    pthread_mutex_unlock(&c->send_lock);
    if (rc) {
        snprintf(err, errlen, "%s: sending %s: %s", c->name, proto_msg_name(type),
                 rc == NET_BROKEN ? "an earlier send failed part-way" : net_strerror(rc));
        return -1;
    }
    return 0;
}

/* A PING that never holds anyone up: skipped when another send is in progress or the socket
 * has no room, and given up on after PROTO_PING_SEND_MS (which breaks the link). */
static void conn_ping(conn *c)
{
    uint8_t hdr[PROTO_HEADER_BYTES];
    struct iovec iov[1];
    if (pthread_mutex_trylock(&c->send_lock))
        return;   /* a frame is on its way: the peer hears from this side anyway */
    struct pollfd p = {.fd = c->fd, .events = POLLOUT};
    if (c->fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLOUT))
        send_locked(c, RM_PING, iov, 0, 0, hdr, PROTO_PING_SEND_MS);
    pthread_mutex_unlock(&c->send_lock);
}

int conn_send(conn *c, int type, const void *body, size_t len, char *err, size_t errlen)
{
    struct iovec iov = {(void *)body, len};
    return conn_sendv(c, type, &iov, len ? 1 : 0, err, errlen);
}

static uint32_t body_bound(const conn *c, int type)
{
    switch (type) {
    case RM_PING:
    case RM_BYE:
    case RM_HALT:
        return 0;
    case RM_BATCH:
    case RM_RESULT:
        return c->max_data;
    case RM_PROBE:
        return PROTO_PROBE_MAX;
    case RM_MANIFEST:
        return MANIFEST_MAX;
    case RM_HAVE:
        return (MANIFEST_MAX - MANIFEST_FIXED) / MANIFEST_HASH / 8;
    case RM_CHUNK:
        return 4 + MANIFEST_CHUNK;
    default:
        return PROTO_SMALL_MAX;
    }
}

/* One frame from the socket into c->buf; *wire gets its bytes on the wire. Returns 0, 1 when
 * nothing arrived within wait_ms, or -1 (err set). */
static int read_frame(conn *c, frame *f, int wait_ms, uint64_t *wire_bytes, char *err,
                      size_t errlen)
{
    uint8_t hdr[PROTO_HEADER_BYTES];
    /* Wait for the frame to start, then let the rest arrive at the pace of a live peer. */
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int prc;
    do
        prc = poll(&p, 1, wait_ms);
    while (prc < 0 && errno == EINTR);
    if (prc == 0)
        return 1;
    uint8_t sealed[LINK_SEALED_HEADER];
    int rc = net_recv_until(c->fd, c->sec ? sealed : hdr, c->sec ? sizeof sealed : sizeof hdr,
                            PROTO_STALL_MS, c->deadline_ns);
    if (rc) {
        snprintf(err, errlen, "%s: %s", c->name, net_strerror(rc));
        return -1;
    }
    if (c->sec && link_open_header(c->sec, sealed, hdr)) {
        snprintf(err, errlen, "%s: a frame failed authentication (changed, replayed, reordered "
                 "or injected on the way): link dropped", c->name);
        return -1;
    }
    uint32_t magic = get32(hdr), seq = get32(hdr + 8), len = get32(hdr + 12);
    int version = hdr[4] | hdr[5] << 8, type = hdr[6] | hdr[7] << 8;
    if (magic != PROTO_MAGIC) {
        snprintf(err, errlen, "%s: not a prima frame (magic %08x)", c->name, magic);
        return -1;
    }
    if (version != PROTO_VERSION) {
        snprintf(err, errlen, "%s speaks protocol version %d, this side speaks %d", c->name,
                 version, PROTO_VERSION);
        return -1;
    }
    if (type <= 0 || type >= RM_TYPE_END) {
        snprintf(err, errlen, "%s: unknown message type %d", c->name, type);
        return -1;
    }
    if (seq != c->seq_in) {
        snprintf(err, errlen, "%s: %s has sequence number %u, expected %u", c->name,
                 proto_msg_name(type), seq, c->seq_in);
        return -1;
    }
    if (len > body_bound(c, type)) {
        snprintf(err, errlen, "%s: %s of %u bytes exceeds the bound of %u", c->name,
                 proto_msg_name(type), len, body_bound(c, type));
        return -1;
    }
    if (len > c->cap) {
        uint8_t *nb = realloc(c->buf, len);
        if (!nb) {
            snprintf(err, errlen, "%s: no memory for a %u-byte %s", c->name, len,
                     proto_msg_name(type));
            return -1;
        }
        c->buf = nb;
        c->cap = len;
    }
    size_t wire = len;
    if (len && c->sec) {
        uint8_t *in = link_body_buffer(c->sec, len);
        if (!in) {
            snprintf(err, errlen, "%s: no memory for a %u-byte %s", c->name, len,
                     proto_msg_name(type));
            return -1;
        }
        wire += LINK_ABYTES;
        rc = net_recv_until(c->fd, in, wire, PROTO_STALL_MS, c->deadline_ns);
        if (rc == 0 && link_open_body(c->sec, len, c->buf)) {
            snprintf(err, errlen, "%s: the body of a %s failed authentication (changed, replayed, "
                     "reordered or injected on the way): link dropped", c->name,
                     proto_msg_name(type));
            return -1;
        }
    } else if (len) {
        rc = net_recv_until(c->fd, c->buf, len, PROTO_STALL_MS, c->deadline_ns);
    }
    if (rc) {
        snprintf(err, errlen, "%s: reading %s: %s", c->name, proto_msg_name(type),
                 net_strerror(rc));
        return -1;
    }
    c->seq_in++;
    *wire_bytes = (c->sec ? sizeof sealed : sizeof hdr) + wire;
    *f = (frame){type, c->buf, len};
    return 0;
}

/* ---- the inbox (conn_inbox_start) ---- */

typedef struct inbox_item {
    struct inbox_item *next;
    int type;                  /* 0: the reader failed with err */
    uint8_t *body;             /* malloc'd: the receive buffer the frame was read into */
    uint32_t len;
    uint64_t wire;
    char err[256];
} inbox_item;

struct conn_inbox {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t room;
    int signal[2];             /* a byte per item queued, so that poll sees the queue */
    inbox_item *first, *last;
    int count;
    bool stop;
    uint8_t *held;             /* the body conn_recv handed out last */
};

static void *inbox_main(void *arg)
{
    conn *c = arg;
    conn_inbox *in = c->inbox;
    for (bool failed = false; !failed;) {
        pthread_mutex_lock(&in->lock);
        while (in->count >= INBOX_MAX && !in->stop)
            pthread_cond_wait(&in->room, &in->lock);
        bool stop = in->stop;
        pthread_mutex_unlock(&in->lock);
        inbox_item *it = stop ? NULL : calloc(1, sizeof *it);
        if (!it)
            break;   /* stopping, or no memory: the latter is seen as the link going quiet */
        frame f;
        failed = read_frame(c, &f, -1, &it->wire, it->err, sizeof it->err) != 0;
        if (!failed) {
            it->type = f.type;
            it->len = f.len;
            if (f.len) {   /* the buffer goes with the frame; the next one gets another */
                it->body = c->buf;
                c->buf = NULL;
                c->cap = 0;
            }
        }
        pthread_mutex_lock(&in->lock);
        stop = in->stop;
        if (!stop) {
            *(in->first ? &in->last->next : &in->first) = it;
            in->last = it;
            in->count++;
        }
        pthread_mutex_unlock(&in->lock);
        if (stop) {
            free(it->body);
            free(it);
            break;
        }
        if (write(in->signal[1], "", 1) != 1)
            break;
    }
    return NULL;
}

int conn_inbox_start(conn *c, char *err, size_t errlen)
{
    if (c->inbox)
        return 0;
    conn_inbox *in = calloc(1, sizeof *in);
    if (!in || pipe(in->signal)) {
        free(in);
        snprintf(err, errlen, "%s: no memory or descriptors for its inbox", c->name);
        return -1;
    }
    pthread_mutex_init(&in->lock, NULL);
    pthread_cond_init(&in->room, NULL);
    c->inbox = in;
    if (pthread_create(&in->thread, NULL, inbox_main, c)) {
        c->inbox = NULL;
        close(in->signal[0]);
        close(in->signal[1]);
        pthread_mutex_destroy(&in->lock);
        pthread_cond_destroy(&in->room);
        free(in);
        snprintf(err, errlen, "%s: cannot start its reading thread", c->name);
        return -1;
    }
    return 0;
}

static void inbox_stop(conn *c)
{
    conn_inbox *in = c->inbox;
    pthread_mutex_lock(&in->lock);
    in->stop = true;
    pthread_cond_broadcast(&in->room);
    pthread_mutex_unlock(&in->lock);
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RD);   /* wakes the reader in poll or recv */
    pthread_join(in->thread, NULL);
    while (in->first) {
        inbox_item *it = in->first;
        in->first = it->next;
        free(it->body);
        free(it);
    }
    free(in->held);
    close(in->signal[0]);
    close(in->signal[1]);
    pthread_mutex_destroy(&in->lock);
    pthread_cond_destroy(&in->room);
    free(in);
    c->inbox = NULL;
}

int conn_wait_fd(const conn *c)
{
    return c->inbox ? c->inbox->signal[0] : c->fd;
}

static int inbox_recv(conn *c, frame *f, int wait_ms, char *err, size_t errlen)
{
    conn_inbox *in = c->inbox;
    struct pollfd p = {.fd = in->signal[0], .events = POLLIN};
    int prc;
    do
        prc = poll(&p, 1, wait_ms);
    while (prc < 0 && errno == EINTR);
    if (prc == 0)
        return 1;
    pthread_mutex_lock(&in->lock);
    inbox_item *it = in->first;
    if (it && it->type) {
        in->first = it->next;
        in->count--;
        pthread_cond_signal(&in->room);
    }
    pthread_mutex_unlock(&in->lock);
    if (!it) {   /* cannot be: a byte is written only after its item is queued */
        snprintf(err, errlen, "%s: its inbox signalled without a frame", c->name);
        return -1;
    }
    if (!it->type) {   /* the reader's failure stays at the front, its byte unread */
        snprintf(err, errlen, "%s", it->err);
        return -1;
    }
    uint8_t byte;
    if (read(in->signal[0], &byte, 1) != 1) {
        snprintf(err, errlen, "%s: reading its inbox's signal: %s", c->name, strerror(errno));
        free(it->body);
        free(it);
        return -1;
    }
    free(in->held);
    in->held = it->body;
    c->bytes_recv += it->wire;
    c->last_seen_ns = net_now_ns();
    *f = (frame){it->type, it->body, it->len};
    free(it);
    return 0;
}

int conn_recv(conn *c, frame *f, int wait_ms, char *err, size_t errlen)
{
    if (c->inbox)
        return inbox_recv(c, f, wait_ms, err, errlen);
    uint64_t wire;
    int rc = read_frame(c, f, wait_ms, &wire, err, errlen);
    if (rc == 0) {
        c->bytes_recv += wire;
        c->last_seen_ns = net_now_ns();
    }
    return rc;
}

static void *heartbeat_main(void *arg)
{
    heartbeat *h = arg;
    pthread_mutex_lock(&h->lock);
    while (!h->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)PROTO_PING_MS * 1000000;
        until.tv_sec += until.tv_nsec / 1000000000;
        until.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&h->cond, &h->lock, &until);
        if (h->stop)
            break;
        /* A failed ping is not reported here: the reader of that link sees the failure too.
         * Each ping gives up within PROTO_PING_SEND_MS, so heartbeat_set (which waits for this
         * lock) is never held up by a peer that stopped reading. */
        for (int i = 0; i < h->n; i++)
            if (h->conns[i] && h->conns[i]->fd >= 0)
                conn_ping(h->conns[i]);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

int heartbeat_start(heartbeat *h, conn **conns, int n)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    h->conns = conns;
    h->n = n;
    if (pthread_create(&h->thread, NULL, heartbeat_main, h)) {
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->cond);
        return -1;
    }
    return 0;
}

void heartbeat_set(heartbeat *h, conn **conns, int n)
{
    pthread_mutex_lock(&h->lock);
    h->conns = conns;
    h->n = n;
    pthread_mutex_unlock(&h->lock);
}

void heartbeat_stop(heartbeat *h)
{
    pthread_mutex_lock(&h->lock);
    h->stop = true;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
}

/* ---- body encoding ---- */

typedef struct wr {
    uint8_t b[PROTO_SMALL_MAX];
    size_t n;
} wr;

static void w_bytes(wr *w, const void *p, size_t n)
{
    memcpy(w->b + w->n, p, n);   /* every small message is far below PROTO_SMALL_MAX */
    w->n += n;
}
static void w_u8(wr *w, uint8_t v) { w_bytes(w, &v, 1); }
static void w_u32(wr *w, uint32_t v)
{
    put32(w->b + w->n, v);
    w->n += 4;
}
static void w_u64(wr *w, uint64_t v)
{
    w_u32(w, (uint32_t)v);
    w_u32(w, (uint32_t)(v >> 32));
}
static void w_str(wr *w, const char *s)
{
    size_t n = strlen(s);
    w_u32(w, (uint32_t)n);
    w_bytes(w, s, n);
}

typedef struct rd {
    const uint8_t *p;
    size_t n, off;
    bool bad;
} rd;

static const uint8_t *r_take(rd *r, size_t n)
{
    if (r->bad || r->n - r->off < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *q = r->p + r->off;
    r->off += n;
    return q;
}
static void r_bytes(rd *r, void *out, size_t n)
{
    const uint8_t *q = r_take(r, n);
    if (q)
        memcpy(out, q, n);
    else
        memset(out, 0, n);
}
static uint8_t r_u8(rd *r)
{
    const uint8_t *q = r_take(r, 1);
    return q ? *q : 0;
}
static uint32_t r_u32(rd *r)
{
    const uint8_t *q = r_take(r, 4);
    return q ? get32(q) : 0;
}
static uint64_t r_u64(rd *r)
{
    uint64_t lo = r_u32(r);
    return lo | (uint64_t)r_u32(r) << 32;
}
static void r_str(rd *r, char *out, size_t cap)
{
    uint32_t n = r_u32(r);
    if (n >= cap) {
        r->bad = true;
        out[0] = 0;
        return;
    }
    r_bytes(r, out, n);
    out[r->bad ? 0 : n] = 0;
}

static rd reader(const frame *f) { return (rd){f->body, f->len, 0, false}; }

/* The body must have been consumed exactly: a shorter or longer one is malformed. */
static int r_done(const rd *r, const frame *f, char *err, size_t errlen)
{
    if (r->bad || r->off != r->n) {
        snprintf(err, errlen, "malformed %s (%u bytes)", proto_msg_name(f->type), f->len);
        return -1;
    }
    return 0;
}

static int expect(const frame *f, int type, char *err, size_t errlen)
{
    if (f->type != type) {
        snprintf(err, errlen, "expected %s, got %s", proto_msg_name(type), proto_msg_name(f->type));
        return -1;
    }
    return 0;
}

int proto_send_hello(conn *c, const msg_hello *m, char *err, size_t errlen)
{
    wr w = {.n = 0};
    w_u8(&w, m->role);
    w_bytes(&w, m->identity, sizeof m->identity);
    w_bytes(&w, m->session, sizeof m->session);
    w_u32(&w, m->rank);
    return conn_send(c, RM_HELLO, w.b, w.n, err, errlen);
}

int proto_decode_hello(const frame *f, msg_hello *m, char *err, size_t errlen)
{
    if (expect(f, RM_HELLO, err, errlen))
        return -1;
    rd r = reader(f);
    m->role = r_u8(&r);
    r_bytes(&r, m->identity, sizeof m->identity);
    r_bytes(&r, m->session, sizeof m->session);
    m->rank = r_u32(&r);
    if (r_done(&r, f, err, errlen))
        return -1;
    if (m->role != ROLE_HEAD && m->role != ROLE_PEER && m->role != ROLE_FETCHER) {
        snprintf(err, errlen, "HELLO with unknown role %u", m->role);
        return -1;
    }
    return 0;
}

int proto_send_welcome(conn *c, const msg_welcome *m, char *err, size_t errlen)
{
    wr w = {.n = 0};
    w_u64(&w, m->instance);
    w_bytes(&w, m->identity, sizeof m->identity);
    w_u32(&w, m->n_layer);
    w_u32(&w, m->n_embd);
    w_u32(&w, m->threads);
    w_u64(&w, m->mem_budget);
    w_u8(&w, m->store);
    return conn_send(c, RM_WELCOME, w.b, w.n, err, errlen);
}

int proto_decode_welcome(const frame *f, msg_welcome *m, char *err, size_t errlen)
{
    if (expect(f, RM_WELCOME, err, errlen))
        return -1;
    rd r = reader(f);
    m->instance = r_u64(&r);
    r_bytes(&r, m->identity, sizeof m->identity);
    m->n_layer = r_u32(&r);
    m->n_embd = r_u32(&r);
    m->threads = r_u32(&r);
    m->mem_budget = r_u64(&r);
    m->store = r_u8(&r);
    if (r_done(&r, f, err, errlen))
        return -1;
    if (m->store > (WELCOME_STORE | WELCOME_NEED_MANIFEST) ||
        (m->store == WELCOME_NEED_MANIFEST)) {
        snprintf(err, errlen, "WELCOME with unknown store flags %u", m->store);
        return -1;
    }
    return 0;
}

/* PLAN and FETCH: the same body. */
static int send_plan_as(conn *c, int type, const msg_plan *m, char *err, size_t errlen)
{
    wr w = {.n = 0};
    w_bytes(&w, m->session, sizeof m->session);
    w_u32(&w, m->rank);
    w_u32(&w, m->n_dev);
    w_u32(&w, m->k);
    w_u32(&w, m->n_layer);
    for (uint32_t d = 0; d < m->n_dev && d < PRIMA_MAX_DEVICES; d++)
        w_u32(&w, m->window[d]);
    w_u32(&w, m->n_ctx);
    w_u32(&w, m->max_batch);
    w_u32(&w, m->threads);
    w_u8(&w, m->wire);
    w_u8(&w, m->prefetch);
    w_u8(&w, m->release);
    w_u8(&w, m->verbose);
    w_str(&w, m->succ_host);
    w_u32(&w, m->succ_port);
    w_u32(&w, m->n_seq);
    /* optional fields, in order: each present when it or a later one is */
    bool kv = false;
    for (int i = 0; i < 2; i++)
        kv |= m->kv_type[i] != 0 && m->kv_type[i] != DT_F16;
    const bool budget = kv || m->weight_budget != 0;
    bool gpu = budget;
    for (uint32_t d = 0; d < m->n_dev && d < PRIMA_MAX_DEVICES; d++)
        gpu |= m->gpu_layers[d] != 0;
    for (uint32_t d = 0; gpu && d < m->n_dev && d < PRIMA_MAX_DEVICES; d++)
        w_u32(&w, m->gpu_layers[d]);
    if (budget)
        w_u64(&w, m->weight_budget);
    if (kv) {
        w_u8(&w, m->kv_type[0]);
        w_u8(&w, m->kv_type[1]);
    }
    return conn_send(c, type, w.b, w.n, err, errlen);
}

int proto_send_plan(conn *c, const msg_plan *m, char *err, size_t errlen)
{
    return send_plan_as(c, RM_PLAN, m, err, errlen);
}

int proto_send_fetch(conn *c, const msg_plan *m, char *err, size_t errlen)
{
    return send_plan_as(c, RM_FETCH, m, err, errlen);
}

int proto_decode_plan(const frame *f, msg_plan *m, char *err, size_t errlen)
{
    if (f->type != RM_FETCH && expect(f, RM_PLAN, err, errlen))
        return -1;
    rd r = reader(f);
    memset(m, 0, sizeof *m);
    r_bytes(&r, m->session, sizeof m->session);
    m->rank = r_u32(&r);
    m->n_dev = r_u32(&r);
    m->k = r_u32(&r);
    m->n_layer = r_u32(&r);
    if (m->n_dev < 2 || m->n_dev > PRIMA_MAX_DEVICES || m->rank < 1 || m->rank >= m->n_dev) {
        snprintf(err, errlen, "PLAN for rank %u of %u devices", m->rank, m->n_dev);
        return -1;
    }
    for (uint32_t d = 0; d < m->n_dev; d++)
        m->window[d] = r_u32(&r);
    m->n_ctx = r_u32(&r);
    m->max_batch = r_u32(&r);
    m->threads = r_u32(&r);
    m->wire = r_u8(&r);
    m->prefetch = r_u8(&r);
    m->release = r_u8(&r);
    m->verbose = r_u8(&r);
    r_str(&r, m->succ_host, sizeof m->succ_host);
    m->succ_port = r_u32(&r);
    m->n_seq = r_u32(&r);
    if (r.off < r.n)   /* absent: no GPU layers; present: one per device */
        for (uint32_t d = 0; d < m->n_dev; d++)
            m->gpu_layers[d] = r_u32(&r);
    if (r.off < r.n)   /* absent: the device's own measure of its memory */
        m->weight_budget = r_u64(&r);
    if (r.off < r.n) {
        m->kv_type[0] = r_u8(&r);
        m->kv_type[1] = r_u8(&r);
    }
    if (r_done(&r, f, err, errlen))
        return -1;
    for (int i = 0; i < 2; i++)
        if (m->kv_type[i] != 0 && m->kv_type[i] != DT_F16 && m->kv_type[i] != DT_Q8_0 &&
            m->kv_type[i] != DT_Q4_0) {
            snprintf(err, errlen, "PLAN with KV cache type %u (not F16, Q8_0 or Q4_0)",
                     m->kv_type[i]);
            return -1;
        }
    if (m->n_seq < 1 || m->n_seq > PROTO_MAX_SEQ) {
        snprintf(err, errlen, "PLAN for %u sequences (1 to %d)", m->n_seq, PROTO_MAX_SEQ);
        return -1;
    }
    if (m->wire > WIRE_F16 || m->release > RELEASE_ALWAYS || m->succ_port > 65535 ||
        m->max_batch < 1 || m->max_batch > PROTO_MAX_BATCH || m->n_ctx < 1 || m->threads > 4096) {
        snprintf(err, errlen, "PLAN with out-of-range settings (wire %u, release %u, port %u, "
                 "batch %u, context %u, threads %u)", m->wire, m->release, m->succ_port,
                 m->max_batch, m->n_ctx, m->threads);
        return -1;
    }
    return 0;
}

int proto_send_ready(conn *c, const char *note, char *err, size_t errlen)
{
    wr w = {.n = 0};
    char line[PROTO_NOTE_MAX];
    snprintf(line, sizeof line, "%s", note ? note : "");
    if (line[0])
        w_str(&w, line);
    return conn_send(c, RM_READY, w.b, w.n, err, errlen);
}

/* Text shown to the user: kept to one printable line. */
static void one_line(char *s)
{
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
}

int proto_decode_ready(const frame *f, char *note, size_t cap, char *err, size_t errlen)
{
    if (expect(f, RM_READY, err, errlen))
        return -1;
    note[0] = 0;
    if (f->len == 0)
        return 0;
    rd r = reader(f);
    r_str(&r, note, cap);
    if (r_done(&r, f, err, errlen))
        return -1;
    one_line(note);
    return 0;
}

int proto_send_batch(conn *c, int type, const msg_batch *m, size_t hidden_bytes, char *err,
                     size_t errlen)
{
    wr w = {.n = 0};
    w_u32(&w, m->serial);
    w_u32(&w, m->round);
    w_u32(&w, m->n);
    w_u8(&w, m->wire);
    struct iovec iov[4] = {
        {w.b, w.n},
        {(void *)m->pos, sizeof(int32_t) * m->n},
        {(void *)m->seq, sizeof(int32_t) * m->n},
        {(void *)m->hidden, hidden_bytes},
    };
    return conn_sendv(c, type, iov, 4, err, errlen);
}

int proto_decode_batch(const frame *f, int n_embd, msg_batch *m, char *err, size_t errlen)
{
    if (f->type != RM_BATCH && f->type != RM_RESULT) {
        snprintf(err, errlen, "expected BATCH or RESULT, got %s", proto_msg_name(f->type));
        return -1;
    }
    rd r = reader(f);
    m->serial = r_u32(&r);
    m->round = r_u32(&r);
    m->n = r_u32(&r);
    m->wire = r_u8(&r);
    if (r.bad || m->n < 1 || m->n > PROTO_MAX_BATCH || m->wire > WIRE_F16) {
        snprintf(err, errlen, "malformed %s header (%u tokens, wire %u)", proto_msg_name(f->type),
                 m->n, m->wire);
        return -1;
    }
    size_t elt = m->wire == WIRE_F16 ? 2 : 4;
    m->pos = r_take(&r, sizeof(int32_t) * m->n);
    m->seq = r_take(&r, sizeof(int32_t) * m->n);
    m->hidden = r_take(&r, elt * (size_t)n_embd * m->n);
    return r_done(&r, f, err, errlen);
}

int proto_send_kvop(conn *c, const msg_kvop *m, char *err, size_t errlen)
{
    wr w = {.n = 0};
    w_u8(&w, m->op);
    w_u32(&w, (uint32_t)m->seq);
    w_u32(&w, (uint32_t)m->p0);
    w_u32(&w, (uint32_t)m->p1);
    w_u32(&w, (uint32_t)m->delta);
    return conn_send(c, RM_KVOP, w.b, w.n, err, errlen);
}

int proto_decode_kvop(const frame *f, msg_kvop *m, char *err, size_t errlen)
{
    if (expect(f, RM_KVOP, err, errlen))
        return -1;
    rd r = reader(f);
    m->op = r_u8(&r);
    m->seq = (int32_t)r_u32(&r);
    m->p0 = (int32_t)r_u32(&r);
    m->p1 = (int32_t)r_u32(&r);
    m->delta = (int32_t)r_u32(&r);
    if (r_done(&r, f, err, errlen))
        return -1;
    if ((m->op != KVOP_TRUNCATE && m->op != KVOP_SHIFT) || m->p0 < 0 || m->p1 < m->p0 ||
        m->seq < 0 || m->seq >= PROTO_MAX_SEQ) {
        snprintf(err, errlen, "KVOP %u of sequence %d with positions %d..%d", m->op, m->seq,
                 m->p0, m->p1);
        return -1;
    }
    return 0;
}

int proto_send_stats(conn *c, const msg_stats *m, char *err, size_t errlen)
{
    wr w = {.n = 0};
    w_u32(&w, m->serial);
    w_u32(&w, m->rank);
    /* Field by field, in the order the protocol fixes: a field added to ring_counters changes
     * the wire only when it is added here too (with a new protocol version). */
    const ring_counters *k = &m->c;
    w_u64(&w, k->compute_ns);
    w_u64(&w, k->wait_ns);
    w_u64(&w, k->major_faults);
    w_u64(&w, k->disk_bytes);
    w_u64(&w, k->pages);
    w_u64(&w, k->pages_resident);
    w_u64(&w, k->bytes_sent);
    w_u64(&w, k->bytes_recv);
    w_u64(&w, k->hops);
    w_u64(&w, k->routed_bytes);
    return conn_send(c, RM_STATS, w.b, w.n, err, errlen);
}

int proto_decode_stats(const frame *f, msg_stats *m, char *err, size_t errlen)
{
    if (expect(f, RM_STATS, err, errlen))
        return -1;
    rd r = reader(f);
    m->serial = r_u32(&r);
    m->rank = r_u32(&r);
    memset(&m->c, 0, sizeof m->c);
    ring_counters *k = &m->c;
    k->compute_ns = r_u64(&r);
    k->wait_ns = r_u64(&r);
    k->major_faults = r_u64(&r);
    k->disk_bytes = r_u64(&r);
    k->pages = r_u64(&r);
    k->pages_resident = r_u64(&r);
    k->bytes_sent = r_u64(&r);
    k->bytes_recv = r_u64(&r);
    k->hops = r_u64(&r);
    k->routed_bytes = r_u64(&r);
    return r_done(&r, f, err, errlen);
}

/* Messages whose body is one u32 (PROFILE: threads; DONE: steps). */
static int send_u32_msg(conn *c, int type, uint32_t v, char *err, size_t errlen)
{
    wr w = {.n = 0};
    w_u32(&w, v);
    return conn_send(c, type, w.b, w.n, err, errlen);
}

static int decode_u32_msg(const frame *f, int type, uint32_t *v, char *err, size_t errlen)
{
    if (expect(f, type, err, errlen))
        return -1;
    rd r = reader(f);
    *v = r_u32(&r);
    return r_done(&r, f, err, errlen);
}

int proto_send_profile_request(conn *c, uint32_t threads, char *err, size_t errlen)
{
    return send_u32_msg(c, RM_PROFILE, threads, err, errlen);
}

int proto_decode_profile_request(const frame *f, uint32_t *threads, char *err, size_t errlen)
{
    return decode_u32_msg(f, RM_PROFILE, threads, err, errlen);
}

static void w_f32(wr *w, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    w_u32(w, u);
}
static float r_f32(rd *r)
{
    uint32_t u = r_u32(r);
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

int proto_send_decode(conn *c, const msg_decode *m, char *err, size_t errlen)
{
    wr w = {.n = 0};
    w_u32(&w, m->serial);
    w_u32(&w, m->max_steps);
    w_u32(&w, (uint32_t)m->seq);
    w_u32(&w, (uint32_t)m->pos);
    w_u32(&w, (uint32_t)m->token);
    const sampler_params *p = &m->sp;
    w_f32(&w, p->temp);
    w_u32(&w, (uint32_t)p->top_k);
    w_f32(&w, p->top_p);
    w_f32(&w, p->min_p);
    w_f32(&w, p->repeat_penalty);
    w_u32(&w, (uint32_t)p->repeat_last_n);
    w_f32(&w, p->presence_penalty);
    w_f32(&w, p->frequency_penalty);
    for (int i = 0; i < 4; i++)
        w_u64(&w, m->rng[i]);
    uint32_t n = m->n_window < PROTO_DECODE_WINDOW ? m->n_window : PROTO_DECODE_WINDOW;
    w_u32(&w, n);
    w_bytes(&w, m->window, sizeof(int32_t) * n);
    return conn_send(c, RM_DECODE, w.b, w.n, err, errlen);
}

int proto_decode_decode(const frame *f, msg_decode *m, char *err, size_t errlen)
{
    if (expect(f, RM_DECODE, err, errlen))
        return -1;
    rd r = reader(f);
    m->serial = r_u32(&r);
    m->max_steps = r_u32(&r);
    m->seq = (int32_t)r_u32(&r);
    m->pos = (int32_t)r_u32(&r);
    m->token = (int32_t)r_u32(&r);
    sampler_params *p = &m->sp;
    *p = (sampler_params){.temp = r_f32(&r)};
    p->top_k = (int)r_u32(&r);
    p->top_p = r_f32(&r);
    p->min_p = r_f32(&r);
    p->repeat_penalty = r_f32(&r);
    p->repeat_last_n = (int)r_u32(&r);
    p->presence_penalty = r_f32(&r);
    p->frequency_penalty = r_f32(&r);
    for (int i = 0; i < 4; i++)
        m->rng[i] = r_u64(&r);
    m->n_window = r_u32(&r);
    if (m->n_window <= PROTO_DECODE_WINDOW)
        r_bytes(&r, m->window, sizeof(int32_t) * m->n_window);
    else
        r.bad = true;
    if (r_done(&r, f, err, errlen))
        return -1;
    bool finite = isfinite(p->temp) && isfinite(p->top_p) && isfinite(p->min_p) &&
                  isfinite(p->repeat_penalty) && isfinite(p->presence_penalty) &&
                  isfinite(p->frequency_penalty);
    bool window_ok = p->repeat_last_n >= 0 && p->repeat_last_n <= PROTO_DECODE_WINDOW &&
                     m->n_window <= (uint32_t)p->repeat_last_n;
    for (uint32_t i = 0; window_ok && i < m->n_window; i++)
        window_ok = m->window[i] >= 0;
    if (m->seq < 0 || m->seq >= PROTO_MAX_SEQ || m->pos < 0 || m->token < 0 ||
        m->max_steps < 1 || !finite || !window_ok) {
        snprintf(err, errlen, "DECODE of sequence %d from position %d (token %d, %u steps, "
                 "window %u of %d)%s", m->seq, m->pos, m->token, m->max_steps, m->n_window,
                 p->repeat_last_n, finite ? "" : " with a sampler number that is not finite");
        return -1;
    }
    return 0;
}

int proto_send_token(conn *c, const msg_token *m, char *err, size_t errlen)
{
    wr w = {.n = 0};
    w_u32(&w, m->serial);
    w_u32(&w, (uint32_t)m->token);
    for (int i = 0; i < 4; i++)
        w_u64(&w, m->rng[i]);
    return conn_send(c, RM_TOKEN, w.b, w.n, err, errlen);
}

int proto_decode_token(const frame *f, msg_token *m, char *err, size_t errlen)
{
    if (expect(f, RM_TOKEN, err, errlen))
        return -1;
    rd r = reader(f);
    m->serial = r_u32(&r);
    m->token = (int32_t)r_u32(&r);
    for (int i = 0; i < 4; i++)
        m->rng[i] = r_u64(&r);
    return r_done(&r, f, err, errlen);
}

int proto_send_done(conn *c, uint32_t steps, char *err, size_t errlen)
{
    return send_u32_msg(c, RM_DONE, steps, err, errlen);
}

int proto_decode_done(const frame *f, uint32_t *steps, char *err, size_t errlen)
{
    return decode_u32_msg(f, RM_DONE, steps, err, errlen);
}

void proto_send_error(conn *c, uint64_t instance, const char *fmt, ...)
{
    char text[256], ignored[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    wr w = {.n = 0};
    w_u64(&w, instance);
    w_str(&w, text);
    conn_send(c, RM_ERROR, w.b, w.n, ignored, sizeof ignored);
}

int proto_decode_error(const frame *f, msg_error *m, char *err, size_t errlen)
{
    if (expect(f, RM_ERROR, err, errlen))
        return -1;
    rd r = reader(f);
    m->instance = r_u64(&r);
    r_str(&r, m->text, sizeof m->text);
    if (r_done(&r, f, err, errlen))
        return -1;
    one_line(m->text);
    return 0;
}

static void w_want(wr *w, const msg_want *m)
{
    w_u64(w, m->bytes);
    w_u32(w, m->n);
    for (uint32_t i = 0; i < m->n && i < PROTO_WANT_MAX; i++) {
        w_u32(w, m->first[i]);
        w_u32(w, m->count[i]);
    }
}

int proto_send_want(conn *c, const msg_want *m, char *err, size_t errlen)
{
    wr w = {.n = 0};
    w_want(&w, m);
    return conn_send(c, RM_WANT, w.b, w.n, err, errlen);
}

/* Ranges of chunks, each non-empty and inside the file, together not more than it has. */
static void r_want(rd *r, msg_want *m)
{
    m->bytes = r_u64(r);
    m->n = r_u32(r);
    if (m->n > PROTO_WANT_MAX) {
        r->bad = true;
        m->n = 0;
    }
    for (uint32_t i = 0; i < m->n; i++) {
        m->first[i] = r_u32(r);
        m->count[i] = r_u32(r);
    }
}

static int check_want(const msg_want *m, uint32_t n_chunks, const char *what, char *err,
                      size_t errlen)
{
    uint64_t asked = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        if (m->count[i] == 0 || m->first[i] >= n_chunks || m->count[i] > n_chunks - m->first[i]) {
            snprintf(err, errlen, "%s of chunks %u+%u (the file has %u)", what, m->first[i],
                     m->count[i], n_chunks);
            return -1;
        }
        asked += m->count[i];
    }
    if (asked > n_chunks) {
        snprintf(err, errlen, "%s of %llu chunks (the file has %u)", what,
                 (unsigned long long)asked, n_chunks);
        return -1;
    }
    return 0;
}

int proto_decode_want(const frame *f, uint32_t n_chunks, msg_want *m, char *err, size_t errlen)
{
    if (expect(f, RM_WANT, err, errlen))
        return -1;
    rd r = reader(f);
    r_want(&r, m);
    if (r_done(&r, f, err, errlen))
        return -1;
    return check_want(m, n_chunks, "WANT", err, errlen);
}

int proto_send_have(conn *c, const uint8_t *flags, uint32_t n_chunks, char *err, size_t errlen)
{
    size_t len = ((size_t)n_chunks + 7) / 8;
    uint8_t *b = calloc(len ? len : 1, 1);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < n_chunks; i++)
        if (flags[i])
            b[i / 8] |= (uint8_t)(1u << (i % 8));
    int rc = conn_send(c, RM_HAVE, b, len, err, errlen);
    free(b);
    return rc;
}

int proto_decode_have(const frame *f, uint32_t n_chunks, uint8_t *flags, char *err,
                      size_t errlen)
{
    if (expect(f, RM_HAVE, err, errlen))
        return -1;
    if (f->len != ((size_t)n_chunks + 7) / 8) {
        snprintf(err, errlen, "HAVE of %u bytes for %u chunks", f->len, n_chunks);
        return -1;
    }
    for (uint32_t i = 0; i < n_chunks; i++)
        flags[i] = (uint8_t)(f->body[i / 8] >> (i % 8) & 1);
    return 0;
}

int proto_send_from(conn *c, const msg_from *m, char *err, size_t errlen)
{
    wr w = {.n = 0};
    if (m->want.n > PROTO_FROM_MAX || strlen(m->host) >= NET_HOST_MAX) {
        snprintf(err, errlen, "FROM of %u ranges (at most %d)", m->want.n, PROTO_FROM_MAX);
        return -1;
    }
    w_str(&w, m->host);
    w_u32(&w, m->port);
    w_want(&w, &m->want);
    return conn_send(c, RM_FROM, w.b, w.n, err, errlen);
}

int proto_decode_from(const frame *f, uint32_t n_chunks, msg_from *m, char *err, size_t errlen)
{
    if (expect(f, RM_FROM, err, errlen))
        return -1;
    rd r = reader(f);
    r_str(&r, m->host, sizeof m->host);
    m->port = r_u32(&r);
    r_want(&r, &m->want);
    if (r_done(&r, f, err, errlen))
        return -1;
    if (m->want.n > PROTO_FROM_MAX || m->port > 65535 || (m->want.n && (!m->port || !m->host[0]))) {
        snprintf(err, errlen, "FROM with ranges and no worker to fetch them from");
        return -1;
    }
    return check_want(&m->want, n_chunks, "FROM", err, errlen);
}

int proto_send_chunk(conn *c, uint32_t index, const void *data, size_t len, char *err,
                     size_t errlen)
{
    uint8_t idx[4];
    put32(idx, index);
    struct iovec iov[2] = {{idx, sizeof idx}, {(void *)data, len}};
    return conn_sendv(c, RM_CHUNK, iov, 2, err, errlen);
}

int proto_decode_chunk(const frame *f, uint32_t *index, const uint8_t **data, size_t *len,
                       char *err, size_t errlen)
{
    if (expect(f, RM_CHUNK, err, errlen))
        return -1;
    if (f->len < 5) {
        snprintf(err, errlen, "malformed CHUNK (%u bytes)", f->len);
        return -1;
    }
    *index = get32(f->body);
    *data = f->body + 4;
    *len = f->len - 4;
    return 0;
}
