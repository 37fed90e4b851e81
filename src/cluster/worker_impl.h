/* worker_impl.h — inside the worker (worker.h), shared by its two files: worker.c (admitting
 * heads and peers, sessions, batches) and worker_store.c (a store's transfers: MANIFEST, FETCH,
 * FROM, CHUNK, and chunks served to other workers). Not for use outside them. */
#ifndef PRIMA_WORKER_IMPL_H
#define PRIMA_WORKER_IMPL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cluster/wire.h"
#include "cluster/worker.h"
#include "util/logline.h"

/* At most this many newcomers are in their handshake at once, and at most ADMIT_PER_SOURCE of
 * them from one address before their greeting has passed the cheap check of the key (link.h).
 * Over either bound the oldest such connection is turned away for the newest, so a stranger who
 * keeps connecting holds only the last few places and a real peer, whose greeting arrives at
 * once, gets through (and one turned away tries again: conn_dial). GREET_SLOTS leaves room for
 * the threads of those turned away to finish. */
#define ADMIT_MAX 16
#define ADMIT_PER_SOURCE 4
#define GREET_SLOTS (2 * ADMIT_MAX)
/* Lines about connections refused or dropped in their handshake: at most this many per
 * window, the others counted and told in one line. */
#define REFUSAL_LINES 5
#define REFUSAL_WINDOW_MS 10000

/* A connection in its handshake. fd is -1 while the slot is free; the slot is freed before the
 * connection's fd is closed or handed on, so that the accepting thread, which may shut it down
 * under the lock, never touches another connection's fd. */
typedef struct greeter {
    int fd;
    char host[NET_HOST_MAX + 8];
    int64_t since;
    atomic_bool vouched;       /* its greeting passed the cheap check */
    bool evicted;              /* turned away for a newer connection */
} greeter;

/* A connection that has passed the handshake and sent a well-formed HELLO, waiting for the
 * main loop. */
typedef struct newcomer {
    struct worker *w;
    greeter *g;
    conn c;
    msg_hello h;
    char peer[NET_HOST_MAX + 8];
    struct newcomer *next;
} newcomer;

/* Newcomers are greeted (handshake, HELLO) each on a thread of its own, under one overall
 * deadline, so that a peer that dawdles, trickles or says nothing holds up neither the session
 * in progress nor the next newcomer; the main loop only ever sees admitted ones. */
struct worker {
    worker_opts o;
    const ring_backend *b;
    int lfd, port;
    int stop_pipe[2];
    int admit_pipe[2];         /* a byte for every newcomer queued */
    uint64_t instance;
    pthread_mutex_t lock;      /* guards what follows */
    pthread_cond_t idle;       /* signalled when greeters drops to 0 */
    int greeters;
    greeter slot[GREET_SLOTS];
    log_limit refusals;
    newcomer *queue, *queue_tail;
};

/* One head's session. */
typedef struct wsession {
    worker *w;
    conn ctrl;                 /* the head; also the data link in for rank 1 and out for the last */
    conn pred, succ;           /* data links from the previous and to the next worker */
    bool has_pred, has_succ, planned;
    msg_plan mp;
    ring_plan plan;
    int rank;
    ring_layers layers;
    bool layers_open;
    device dev;
    bool dev_init;
    hop_buffers buf;
    heartbeat hb;
    conn *hb_conns[1];
    uint64_t sent_mark, recv_mark;
    char reason[512];          /* why the session ended */
    /* Fetching into the store (worker_opts.store): after a MANIFEST (the header's chunks) or a
     * FETCH (a plan's), WANTs until every chunk marked is present. */
    bool need_manifest;        /* WELCOME asked the head for its manifest */
    bool fetching;
    uint8_t identity[PROTO_ID_BYTES];   /* of the head's model */
    bool want_from;            /* HAVE sent: FROM comes next */
    uint8_t *mark, *asked, *failed;     /* per chunk: wanted; asked for (ASK_*); times it failed */
    uint32_t n_chunks, awaiting;        /* chunks of the last WANT yet to arrive */
    conn fetch;                /* to the worker FROM named, while its chunks come */
    bool has_fetch;
    uint32_t peer_left;        /* chunks asked of it yet to arrive */
    uint64_t fetched, from_peer;        /* bytes received, of them from another worker */
    int64_t fetch_t0;
} wsession;

void worker_log(const worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The first 6 bytes of a model identity in hex (out: 13 bytes). */
void worker_id_hex(const uint8_t *id, char *out);
/* Refuse a newcomer with one line (sent and logged), and free it. */
void worker_refuse(worker *w, newcomer *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* End the session for this reason (the first one given stands). */
void worker_end_session(wsession *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Tell the head why this device gives up, then give up. */
void worker_fail_session(wsession *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A PLAN or FETCH body into mp and p, checked against the model; -1 after failing the session. */
int worker_plan_from_msg(wsession *s, const frame *f, msg_plan *mp, ring_plan *p);

/* worker_store.c: the frames of a store's transfer from the head, */
void worker_store_manifest(wsession *s, const frame *f);
void worker_store_fetch(wsession *s, const frame *f);
void worker_store_from(wsession *s, const frame *f);
void worker_store_chunk(wsession *s, const frame *f, bool from_peer);
/* the link to the worker FROM named failed or fell silent: ask the head instead, */
void worker_store_peer_gone(wsession *s, const char *why);
/* the plan's chunks are all here (0), or the session failed (-1), */
int worker_store_plan_held(wsession *s, const ring_plan *p);
/* another worker fetching chunks (a FETCHER newcomer), served on a thread of its own, */
void worker_store_serve_chunks(wsession *s, newcomer *n);
/* WELCOME, with the store's flags (and, before the model is here, the request for it), */
int worker_store_welcome(wsession *s, char *err, size_t errlen);
/* and before a head's session: its model loaded from the store when it holds the header. */
void worker_store_open(worker *w, const uint8_t *id);

#endif
