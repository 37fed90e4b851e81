#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/logline.h"
#include "cluster/sysmem.h"
#include "cluster/wire.h"
#include "cluster/stats.h"
#include "cluster/worker.h"

struct worker {
    worker_opts o;
    const ring_backend *b;
    int lfd, port;
    int stop_pipe[2];
    uint64_t instance;
};

/* One head's session. */
typedef struct wsession {
    worker *w;
    conn ctrl;                 /* the head; also the data link in for rank 1 and out for the last */
    conn pred, succ;           /* data links from the previous and to the next worker */
    bool has_pred, has_succ, planned;
    uint8_t nonce[32];         /* this worker's challenge for the head's proof */
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
} wsession;

static void wlog(const worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wlog(const worker *w, const char *fmt, ...)
{
    if (!w->o.log)
        return;
    char prefix[40];
    snprintf(prefix, sizeof prefix, "prima worker :%d: ", w->port);
    va_list ap;
    va_start(ap, fmt);
    log_vline(w->o.log, prefix, fmt, ap);
    va_end(ap);
}

static void id_hex(const uint8_t *id, char *out)
{
    for (int i = 0; i < 6; i++)
        sprintf(out + 2 * i, "%02x", id[i]);
}

worker *worker_create(const worker_opts *o, const ring_backend *b, char *err, size_t errlen)
{
    worker *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->o = *o;
    w->b = b;
    if (pipe2(w->stop_pipe, O_CLOEXEC | O_NONBLOCK)) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        free(w);
        return NULL;
    }
    if (o->listen_fd >= 0) {
        w->lfd = o->listen_fd;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        getsockname(w->lfd, (struct sockaddr *)&ss, &sl);
        w->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        fcntl(w->lfd, F_SETFL, fcntl(w->lfd, F_GETFL) | O_NONBLOCK);
    } else {
        w->lfd = net_listen(o->host, o->port, &w->port, err, errlen);
        if (w->lfd < 0) {
            close(w->stop_pipe[0]);
            close(w->stop_pipe[1]);
            free(w);
            return NULL;
        }
    }
    ring_random(&w->instance, sizeof w->instance);
    return w;
}

int worker_port(const worker *w)
{
    return w->port;
}

void worker_stop(worker *w)
{
    char c = 1;
    ssize_t rc = write(w->stop_pipe[1], &c, 1);
    (void)rc;
}

void worker_free(worker *w)
{
    if (!w)
        return;
    close(w->lfd);
    close(w->stop_pipe[0]);
    close(w->stop_pipe[1]);
    free(w);
}

static bool stop_requested(const worker *w)
{
    char c;
    return read(w->stop_pipe[0], &c, 1) == 1;
}

/* Read the HELLO of a new connection; -1 (and the link is closed, reason logged and, when
 * the peer can still hear it, sent back) on failure. */
static int read_hello(worker *w, conn *c, msg_hello *h)
{
    char err[512];
    frame f;
    int rc = conn_recv(c, &f, PROTO_STALL_MS, err, sizeof err);
    if (rc == 1)
        snprintf(err, sizeof err, "%s sent no HELLO", c->name);
    if (rc == 0 && decode_hello(&f, h, err, sizeof err) == 0)
        return 0;
    send_error(c, w->instance, "refused: %s", err);
    wlog(w, "dropped %s: %s", c->name, err);
    conn_close_gently(c);
    return -1;
}

/* ---- a session ---- */

static void end_session(wsession *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void end_session(wsession *s, const char *fmt, ...)
{
    if (s->reason[0])
        return;   /* the first reason is the real one */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->reason, sizeof s->reason, fmt, ap);
    va_end(ap);
}

/* Tell the head why this device gives up, then give up. */
static void fail_session(wsession *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_session(wsession *s, const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (!s->reason[0])
        send_error(&s->ctrl, s->w->instance, "%s", text);
    end_session(s, "%s", text);
}

static int connect_successor(wsession *s, char *err, size_t errlen)
{
    int fd = net_connect(s->mp.succ_host, (int)s->mp.succ_port, PROTO_STALL_MS, err, errlen);
    if (fd < 0)
        return -1;
    char name[128];
    snprintf(name, sizeof name, "device %d (%.100s:%u)", s->rank + 1, s->mp.succ_host, s->mp.succ_port);
    conn_init(&s->succ, fd, name);
    s->has_succ = true;
    msg_hello h = {.role = ROLE_PEER, .rank = (uint32_t)s->rank};
    memcpy(h.identity, s->w->b->model->identity, sizeof h.identity);
    memcpy(h.session, s->mp.session, sizeof h.session);
    uint32_t r = (uint32_t)s->rank;
    ring_proof(s->w->o.secret, "peer", h.session, sizeof h.session, &r, sizeof r, h.proof);
    if (send_hello(&s->succ, &h, err, errlen))
        return -1;
    frame f;
    int rc = conn_recv(&s->succ, &f, PROTO_DEAD_MS, err, errlen);
    if (rc == 1) {
        snprintf(err, errlen, "%s did not answer", name);
        return -1;
    }
    if (rc)
        return -1;
    if (f.type == RM_ERROR) {
        msg_error e;
        if (decode_error(&f, &e, err, errlen) == 0)
            snprintf(err, errlen, "%s refused this device: %s", name, e.text);
        return -1;
    }
    if (f.type != RM_READY) {
        snprintf(err, errlen, "%s answered %s to HELLO", name, msg_name(f.type));
        return -1;
    }
    return 0;
}

static void apply_plan(wsession *s, const frame *f)
{
    worker *w = s->w;
    const ring_model *m = w->b->model;
    char err[512];
    if (decode_plan(f, &s->mp, err, sizeof err)) {
        fail_session(s, "%s", err);
        return;
    }
    if (!ring_proof_ok(w->o.secret, "head", s->nonce, sizeof s->nonce, s->mp.session,
                       sizeof s->mp.session, s->mp.proof)) {
        fail_session(s, "the head did not prove the shared secret");
        return;
    }
    ring_plan *p = &s->plan;
    memset(p, 0, sizeof *p);
    p->n_dev = (int)s->mp.n_dev;
    p->n_layer = (int)s->mp.n_layer;
    p->k = (int)s->mp.k;
    for (int d = 0; d < p->n_dev; d++)
        p->window[d] = s->mp.window[d] > INT_MAX ? INT_MAX : (int)s->mp.window[d];
    if (p->n_layer != m->n_layer) {
        fail_session(s, "plan for %d layers, the model has %d", p->n_layer, m->n_layer);
        return;
    }
    if (plan_validate(p, err, sizeof err)) {
        fail_session(s, "%s", err);
        return;
    }
    s->rank = (int)s->mp.rank;
    bool last = s->rank == p->n_dev - 1;
    if (last != (s->mp.succ_host[0] == 0)) {
        fail_session(s, "plan: device %d of %d %s a successor address", s->rank, p->n_dev,
                     last ? "must not have" : "needs");
        return;
    }
    bool *owns = calloc((size_t)m->n_layer, sizeof *owns);
    if (!owns) {
        fail_session(s, "out of memory");
        return;
    }
    plan_owned_layers(p, s->rank, owns);
    int threads = s->mp.threads ? (int)s->mp.threads : w->o.threads;
    int rc = w->b->open(w->b->ctx, owns, (int)s->mp.n_ctx, (int)s->mp.max_batch, threads,
                        &s->layers, err, sizeof err);
    free(owns);
    if (rc) {
        fail_session(s, "%s", err);
        return;
    }
    s->layers_open = true;
    device_opts dopt = {.prefetch = s->mp.prefetch, .release = s->mp.release,
                        .method = w->o.method, .mem_budget = sysmem_budget()};
    if (device_init(&s->dev, m, p, s->rank, &s->layers, &dopt, err, sizeof err)) {
        fail_session(s, "%s", err);
        return;
    }
    s->dev_init = true;
    if (hop_buffers_init(&s->buf, m->n_embd, (int)s->mp.max_batch, err, sizeof err)) {
        fail_session(s, "%s", err);
        return;
    }
    uint32_t bound = proto_data_bound(m->n_embd, (int)s->mp.max_batch, s->mp.wire);
    s->ctrl.max_data = bound;
    if (!last && connect_successor(s, err, sizeof err)) {
        fail_session(s, "%s", err);
        return;
    }
    s->planned = true;
    if (conn_send(&s->ctrl, RM_READY, NULL, 0, err, sizeof err)) {
        end_session(s, "%s", err);
        return;
    }
    char layers[256];
    plan_format_layers(p, s->rank, layers, sizeof layers);
    const char *prefetch = s->mp.prefetch ? prefetch_method_name(w->o.method) : "off";
    wlog(w, "plan: device %d of %d, %d round(s), layers %s, streaming %d window(s), prefetch %s",
         s->rank, p->n_dev, p->k, layers, s->dev.n_streamed, prefetch);
    if (w->o.stats) {
        cJSON *o = cJSON_CreateObject();
        if (o) {
            cJSON_AddNumberToObject(o, "device", s->rank);
            cJSON_AddNumberToObject(o, "devices", p->n_dev);
            cJSON_AddNumberToObject(o, "rounds", p->k);
            cJSON_AddStringToObject(o, "layers", layers);
            cJSON_AddNumberToObject(o, "streaming", s->dev.n_streamed);
            cJSON_AddStringToObject(o, "prefetch", prefetch);
        }
        stats_emit(w->o.stats, "worker_plan", o);
    }
}

static void send_counters(wsession *s, uint32_t serial)
{
    uint64_t sent = s->ctrl.bytes_sent + s->succ.bytes_sent;
    uint64_t recv = s->ctrl.bytes_recv + s->pred.bytes_recv;
    msg_stats st = {.serial = serial, .rank = (uint32_t)s->rank};
    device_take_counters(&s->dev, &st.c);
    st.c.bytes_sent = sent - s->sent_mark;
    st.c.bytes_recv = recv - s->recv_mark;
    s->sent_mark = sent;
    s->recv_mark = recv;
    if (s->w->o.verbose) {
        char line[400];
        counters_format(&st.c, line, sizeof line);
        wlog(s->w, "batch %u: %s", serial, line);
    }
    char err[512];
    if (send_stats(&s->ctrl, &st, err, sizeof err))
        end_session(s, "%s", err);
}

static void handle_batch(wsession *s, const frame *f)
{
    char err[512];
    const int n_embd = s->w->b->model->n_embd;
    msg_batch b;
    if (decode_batch(f, n_embd, &b, err, sizeof err) ||
        hop_unpack(&s->buf, &b, s->plan.k, (int)s->mp.n_ctx, (int)s->mp.max_batch, s->buf.hidden,
                   s->buf.pos, err, sizeof err)) {
        fail_session(s, "%s", err);
        return;
    }
    if (f->type != RM_BATCH || !device_visits(&s->plan, s->rank, (int)b.round)) {
        fail_session(s, "%s for round %u, which does not pass this device", msg_name(f->type), b.round);
        return;
    }
    device_arrived(&s->dev);
    if (device_compute(&s->dev, (int)b.round, s->buf.hidden, (int)b.n, s->buf.pos)) {
        fail_session(s, "layers failed on batch %u (positions %d..%d)", b.serial, s->buf.pos[0],
                     s->buf.pos[b.n - 1]);
        return;
    }
    int first, last;
    plan_range(&s->plan, s->rank, (int)b.round, &first, &last);
    msg_batch out = b;
    out.wire = s->mp.wire;
    int type = RM_BATCH;
    conn *to = s->has_succ ? &s->succ : &s->ctrl;
    if (last == s->plan.n_layer) {
        type = RM_RESULT;
        to = &s->ctrl;
    } else if (!s->has_succ) {
        out.round++;   /* back to the head, which starts the next round */
    }
    if (hop_send(&s->buf, to, type, &out, s->buf.hidden, s->buf.pos, err, sizeof err)) {
        /* A lost successor is this session's end, and the head should hear why from here. */
        fail_session(s, "%s", err);
        return;
    }
    device_handed_on(&s->dev, (int)b.round);
    if (!device_visits(&s->plan, s->rank, (int)b.round + 1))
        send_counters(s, b.serial);
}

static void handle_kvop(wsession *s, const frame *f)
{
    char err[512];
    msg_kvop k;
    if (decode_kvop(f, &k, err, sizeof err)) {
        fail_session(s, "%s", err);
        return;
    }
    int rc = k.op == KVOP_TRUNCATE ? s->layers.kv_truncate(s->layers.ctx, k.p0)
                                   : s->layers.kv_shift(s->layers.ctx, k.p0, k.p1, k.delta);
    if (rc) {
        fail_session(s, "KV cache edit (%s %d..%d by %d) is outside the context",
                     k.op == KVOP_TRUNCATE ? "truncate" : "shift", k.p0, k.p1, k.delta);
        return;
    }
    if (s->has_succ && send_kvop(&s->succ, &k, err, sizeof err))
        fail_session(s, "%s", err);
}

/* A frame on the data link in (the head's link for rank 1, the predecessor's otherwise). */
static void handle_data(wsession *s, const frame *f)
{
    switch (f->type) {
    case RM_BATCH:
        handle_batch(s, f);
        break;
    case RM_KVOP:
        handle_kvop(s, f);
        break;
    default:
        fail_session(s, "unexpected %s on the data link", msg_name(f->type));
    }
}

/* The head's scheduler asks for this device's profile (before the plan). */
static void handle_profile(wsession *s, const frame *f)
{
    worker *w = s->w;
    char err[512];
    uint32_t threads;
    if (decode_profile_request(f, &threads, err, sizeof err)) {
        fail_session(s, "%s", err);
        return;
    }
    if (!w->o.profile) {
        fail_session(s, "this worker cannot profile itself (give the head -lw)");
        return;
    }
    char *json = malloc(PROTO_SMALL_MAX);
    if (!json) {
        fail_session(s, "out of memory");
        return;
    }
    int t = threads ? (int)threads : w->o.threads;
    wlog(w, "profiling this device for %s (%d threads)", s->ctrl.name, t);
    if (w->o.profile(w->o.profile_ctx, t, json, PROTO_SMALL_MAX, err, sizeof err))
        fail_session(s, "%s", err);
    else if (conn_send(&s->ctrl, RM_PROFILE, json, strlen(json), err, sizeof err))
        end_session(s, "%s", err);
    free(json);
}

static void handle_ctrl(wsession *s, const frame *f)
{
    char err[512];
    switch (f->type) {
    case RM_PING:
        return;
    case RM_PROFILE:
        if (s->planned)
            fail_session(s, "PROFILE after the plan");
        else
            handle_profile(s, f);
        return;
    case RM_PROBE:   /* echoed as it came: the head times the round trip */
        if (conn_send(&s->ctrl, RM_PROBE, f->body, f->len, err, sizeof err))
            end_session(s, "%s", err);
        return;
    case RM_PLAN:
        if (s->planned)
            fail_session(s, "a second PLAN in one session");
        else
            apply_plan(s, f);
        return;
    case RM_BYE:
        if (conn_send(&s->ctrl, RM_BYE, NULL, 0, err, sizeof err) == 0)
            end_session(s, "the head finished");
        else
            end_session(s, "%s", err);
        return;
    case RM_ERROR: {
        msg_error e;
        if (decode_error(f, &e, err, sizeof err) == 0)
            end_session(s, "the head gave up: %s", e.text);
        else
            end_session(s, "%s", err);
        return;
    }
    case RM_BATCH:
    case RM_KVOP:
        if (s->planned && s->rank == 1) {
            handle_data(s, f);
            return;
        }
        break;
    default:
        break;
    }
    fail_session(s, "unexpected %s from the head%s", msg_name(f->type),
                 s->planned ? "" : " before the plan");
}

/* Someone connected while this worker serves a head: the predecessor joining, or a refusal. */
static void handle_newcomer(wsession *s, int fd, const char *peer)
{
    worker *w = s->w;
    conn c;
    conn_init(&c, fd, peer);
    msg_hello h;
    if (read_hello(w, &c, &h))
        return;
    if (h.role == ROLE_HEAD) {
        send_error(&c, w->instance, "busy: serving %s", s->ctrl.name);
        wlog(w, "refused head %s: busy serving %s", peer, s->ctrl.name);
        conn_close_gently(&c);
        return;
    }
    uint32_t r = h.rank;
    const char *why = NULL;
    if (!s->planned || memcmp(h.session, s->mp.session, sizeof h.session))
        why = "not part of this worker's session";
    else if ((int)h.rank != s->rank - 1)
        why = "not this device's predecessor";
    else if (s->has_pred)
        why = "this device already has its predecessor";
    else if (!ring_proof_ok(w->o.secret, "peer", h.session, sizeof h.session, &r, sizeof r, h.proof))
        why = "failed the shared-secret proof";
    char err[512];
    if (why) {
        send_error(&c, w->instance, "refused: %s", why);
        wlog(w, "refused peer %s: %s", peer, why);
        conn_close_gently(&c);
        return;
    }
    if (conn_send(&c, RM_READY, NULL, 0, err, sizeof err)) {
        wlog(w, "dropped peer %s: %s", peer, err);
        conn_close(&c);
        return;
    }
    snprintf(c.name, sizeof c.name, "device %d (%.100s)", s->rank - 1, peer);
    c.max_data = s->ctrl.max_data;
    conn_move(&s->pred, &c);
    s->has_pred = true;
}

static void close_session(wsession *s)
{
    heartbeat_stop(&s->hb);
    if (s->dev_init)
        device_free(&s->dev);
    if (s->layers_open)
        s->w->b->close(s->w->b->ctx, &s->layers);
    hop_buffers_free(&s->buf);
    if (s->has_pred)
        conn_close(&s->pred);
    if (s->has_succ)
        conn_close(&s->succ);
    conn_close_gently(&s->ctrl);
}

static void serve(worker *w, conn *head, const char *head_addr, const msg_hello *h)
{
    wsession *s = calloc(1, sizeof *s);
    if (!s) {
        send_error(head, w->instance, "out of memory");
        conn_close(head);
        return;
    }
    s->w = w;
    conn_move(&s->ctrl, head);
    snprintf(s->ctrl.name, sizeof s->ctrl.name, "the head at %.100s", head_addr);
    s->pred.fd = s->succ.fd = -1;
    ring_random(s->nonce, sizeof s->nonce);
    char err[512];
    const ring_model *m = w->b->model;
    msg_welcome wm = {.instance = w->instance, .n_layer = (uint32_t)m->n_layer,
                      .n_embd = (uint32_t)m->n_embd, .threads = (uint32_t)w->o.threads,
                      .mem_budget = sysmem_budget()};
    memcpy(wm.identity, m->identity, sizeof wm.identity);
    memcpy(wm.nonce, s->nonce, sizeof wm.nonce);
    ring_proof(w->o.secret, "worker", h->nonce, sizeof h->nonce, s->nonce, sizeof s->nonce, wm.proof);
    if (send_welcome(&s->ctrl, &wm, err, sizeof err)) {
        wlog(w, "dropped head: %s", err);
        conn_close(&s->ctrl);
        free(s);
        return;
    }
    s->hb_conns[0] = &s->ctrl;
    if (heartbeat_start(&s->hb, s->hb_conns, 1)) {
        wlog(w, "dropped head %s: cannot start the heartbeat thread", s->ctrl.name);
        conn_close(&s->ctrl);
        free(s);
        return;
    }
    wlog(w, "serving %s", s->ctrl.name);
    while (!s->reason[0]) {
        struct pollfd p[4] = {
            {.fd = w->stop_pipe[0], .events = POLLIN},
            {.fd = w->lfd, .events = POLLIN},
            {.fd = s->ctrl.fd, .events = POLLIN},
            {.fd = s->has_pred ? s->pred.fd : -1, .events = POLLIN},
        };
        int rc = poll(p, 4, PROTO_PING_MS);
        if (rc < 0 && errno != EINTR) {
            end_session(s, "poll: %s", strerror(errno));
            break;
        }
        if (p[0].revents && stop_requested(w)) {
            worker_stop(w);   /* leave the request for worker_run to see */
            fail_session(s, "the worker is shutting down");
            break;
        }
        frame f;
        if (p[2].revents) {
            rc = conn_recv(&s->ctrl, &f, 0, err, sizeof err);
            if (rc < 0)
                end_session(s, "%s", err);
            else if (rc == 0)
                handle_ctrl(s, &f);
        } else if (!s->reason[0] &&
                   net_now_ns() - s->ctrl.last_seen_ns > (int64_t)PROTO_DEAD_MS * 1000000) {
            /* Judged only when poll found nothing to read from the head: right after computing
             * a batch that took longer than PROTO_DEAD_MS, the head's pings are still unread in
             * the socket, and the head is alive. */
            end_session(s, "%s stopped responding (nothing for %d s)", s->ctrl.name,
                        PROTO_DEAD_MS / 1000);
        }
        if (!s->reason[0] && p[3].revents) {
            rc = conn_recv(&s->pred, &f, 0, err, sizeof err);
            if (rc < 0)
                fail_session(s, "lost the link from the previous device: %s", err);
            else if (rc == 0)
                handle_data(s, &f);
        }
        /* A newcomer waits while the head's link has frames unread: pings queued ahead of the
         * head's goodbye or hang-up would otherwise leave this session looking alive, and the
         * next head would be refused as busy by a worker whose head has already gone. */
        if (!s->reason[0] && p[1].revents && !p[2].revents) {
            char peer[NET_HOST_MAX + 8];
            int fd = net_accept(w->lfd, peer, sizeof peer);
            if (fd >= 0)
                handle_newcomer(s, fd, peer);
        }
    }
    wlog(w, "session ended: %s; waiting for a head", s->reason);
    close_session(s);
    free(s);
}

int worker_run(worker *w)
{
    const ring_model *m = w->b->model;
    for (;;) {
        struct pollfd p[2] = {{.fd = w->stop_pipe[0], .events = POLLIN},
                              {.fd = w->lfd, .events = POLLIN}};
        int rc = poll(p, 2, -1);
        if (rc < 0 && errno != EINTR)
            return -1;
        if (p[0].revents && stop_requested(w))
            break;
        if (!p[1].revents)
            continue;
        char peer[NET_HOST_MAX + 8];
        int fd = net_accept(w->lfd, peer, sizeof peer);
        if (fd < 0)
            continue;
        conn c;
        conn_init(&c, fd, peer);
        msg_hello h;
        if (read_hello(w, &c, &h))
            continue;
        if (h.role != ROLE_HEAD) {
            send_error(&c, w->instance, "refused: no session in progress");
            wlog(w, "refused peer %s: no session in progress", peer);
            conn_close_gently(&c);
            continue;
        }
        if (memcmp(h.identity, m->identity, sizeof h.identity)) {
            char mine[16], theirs[16];
            id_hex(m->identity, mine);
            id_hex(h.identity, theirs);
            send_error(&c, w->instance, "model mismatch: this worker holds model %s (%s), the head "
                       "holds model %s", mine, m->path, theirs);
            wlog(w, "refused head %s: model mismatch (ours %s, theirs %s)", peer, mine, theirs);
            conn_close_gently(&c);
            continue;
        }
        serve(w, &c, peer, &h);
    }
    wlog(w, "stopped");
    return 0;
}
