/* worker.c — `prima worker` (worker.h): admitting heads and peers, applying a plan, and serving
 * batches, KV edits, profiles and probes until the head says bye or disappears; then waiting
 * for the next head, so one worker process serves any number of sessions. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/stats.h"
#include "cluster/worker_impl.h"
#include "util/logline.h"
#include "util/sysmem.h"


static void wvlog(const worker *w, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void wvlog(const worker *w, const char *fmt, va_list ap)
{
    if (!w->o.log)
        return;
    char prefix[40];
    snprintf(prefix, sizeof prefix, "prima worker :%d: ", w->port);
    log_vline(w->o.log, prefix, fmt, ap);
}

void worker_log(const worker *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wvlog(w, fmt, ap);
    va_end(ap);
}

void worker_id_hex(const uint8_t *id, char *out)
{
    for (int i = 0; i < 6; i++)
        sprintf(out + 2 * i, "%02x", id[i]);
}

worker *worker_create(const worker_opts *o, const ring_backend *b, char *err, size_t errlen)
{
    worker *w = calloc(1, sizeof *w);
    if (w)
        w->lfd = -1;
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->o = *o;
    w->b = b;
    if (!w->o.admit_ms)
        w->o.admit_ms = PROTO_ADMIT_MS;
    if (pipe2(w->stop_pipe, O_CLOEXEC | O_NONBLOCK)) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        free(w);
        return NULL;
    }
    if (pipe2(w->admit_pipe, O_CLOEXEC | O_NONBLOCK)) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        close(w->stop_pipe[0]);
        close(w->stop_pipe[1]);
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->idle, NULL);
    for (int i = 0; i < GREET_SLOTS; i++)
        w->slot[i].fd = -1;
    w->refusals = (log_limit){.window_ns = (int64_t)REFUSAL_WINDOW_MS * 1000000,
                              .per_window = REFUSAL_LINES, .start = INT64_MIN / 2};
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
            worker_free(w);
            return NULL;
        }
    }
    if (ring_random(&w->instance, sizeof w->instance)) {
        snprintf(err, errlen, "no randomness source (libsodium failed to initialise)");
        worker_free(w);
        return NULL;
    }
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
    if (w->lfd >= 0)
        close(w->lfd);
    close(w->stop_pipe[0]);
    close(w->stop_pipe[1]);
    close(w->admit_pipe[0]);
    close(w->admit_pipe[1]);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->idle);
    free(w);
}

static bool stop_requested(const worker *w)
{
    char c;
    return read(w->stop_pipe[0], &c, 1) == 1;
}

/* ---- newcomers ---- */

static void log_held(worker *w, long held)
{
    if (held)
        worker_log(w, "%ld more connections refused or dropped in their handshake, not logged one by "
             "one", held);
}

/* A line about a connection refused or dropped in its handshake, within the log budget (a
 * stranger can cause any number of them); the lines held back are told before the next. */
static void log_refusal(worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_refusal(worker *w, const char *fmt, ...)
{
    pthread_mutex_lock(&w->lock);
    bool write = log_limit_take(&w->refusals, net_now_ns());
    long held = write ? log_limit_told(&w->refusals) : 0;
    pthread_mutex_unlock(&w->lock);
    if (!write)
        return;
    log_held(w, held);
    va_list ap;
    va_start(ap, fmt);
    wvlog(w, fmt, ap);
    va_end(ap);
}

/* Tell the lines about refusals held back, once their window is over (or now). */
static void tell_held_refusals(worker *w, bool now)
{
    pthread_mutex_lock(&w->lock);
    long held = 0;
    if (now || net_now_ns() - w->refusals.start >= w->refusals.window_ns)
        held = log_limit_told(&w->refusals);
    pthread_mutex_unlock(&w->lock);
    log_held(w, held);
}

/* Free a newcomer's slot (before its fd is closed or handed on); whether it had been evicted. */
static bool leave_slot(worker *w, greeter *g)
{
    pthread_mutex_lock(&w->lock);
    bool evicted = g->evicted;
    g->fd = -1;
    pthread_mutex_unlock(&w->lock);
    return evicted;
}

static void *greet_main(void *arg)
{
    newcomer *n = arg;
    worker *w = n->w;
    char err[512];
    int64_t deadline = net_now_ns() + (int64_t)w->o.admit_ms * 1000000;
    n->c.deadline_ns = deadline;
    int hs = link_handshake(n->c.fd, false, w->o.key, PROTO_VERSION, deadline, n->c.name,
                            &n->g->vouched, &n->c.sec, err, sizeof err);
    bool ok = false;
    if (hs == 0) {
        frame f;
        int left = (int)((deadline - net_now_ns()) / 1000000);
        int rc = conn_recv(&n->c, &f, left > 0 ? left : 0, err, sizeof err);
        if (rc == 1)
            snprintf(err, sizeof err, "%s sent no HELLO within %d ms", n->c.name, w->o.admit_ms);
        ok = rc == 0 && proto_decode_hello(&f, &n->h, err, sizeof err) == 0;
    }
    bool evicted = false;
    if (ok) {
        leave_slot(w, n->g);
        n->c.deadline_ns = 0;
        pthread_mutex_lock(&w->lock);
        if (w->queue_tail)
            w->queue_tail->next = n;
        else
            w->queue = n;
        w->queue_tail = n;
        pthread_mutex_unlock(&w->lock);
        char c = 1;
        ssize_t wr = write(w->admit_pipe[1], &c, 1);
        (void)wr;
    } else {
        /* An ERROR frame only where the peer can read one: over the agreed link, or to a peer
         * that does not speak the handshake (another program or version), in plaintext. */
        if (hs == 0 || hs == LINK_FOREIGN)
            proto_send_error(&n->c, w->instance, "refused: %s", err);
        evicted = leave_slot(w, n->g);
        if (evicted) {
            link_send_busy(n->c.fd, PROTO_VERSION);
            log_refusal(w, "turned away %s: too many connections in their handshake (it was the "
                        "oldest whose greeting had not passed the key check)", n->peer);
            conn_close(&n->c);
        } else {
            log_refusal(w, "dropped %s: %s", n->c.name, err);
            conn_close_gently(&n->c);
        }
        free(n);
    }
    pthread_mutex_lock(&w->lock);
    if (--w->greeters == 0)
        pthread_cond_broadcast(&w->idle);
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static bool has_input(int fd)
{
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/* A slot for a newcomer from host, turning away an older connection when a bound is reached
 * (see ADMIT_MAX), or NULL when there is none to turn away. Called under the lock. */
static greeter *admit_slot(worker *w, const char *host)
{
    greeter *free_slot = NULL, *oldest = NULL, *oldest_here = NULL;
    int live = 0, unvouched_here = 0;
    for (int i = 0; i < GREET_SLOTS; i++) {
        greeter *g = &w->slot[i];
        if (g->fd < 0) {
            free_slot = free_slot ? free_slot : g;
            continue;
        }
        if (g->evicted)
            continue;
        live++;
        if (atomic_load(&g->vouched))
            continue;
        bool here = !strcmp(g->host, host);
        unvouched_here += here;
        /* a greeting already waiting to be read is a thread late to read it, not a dawdler */
        if (has_input(g->fd))
            continue;
        if (!oldest || g->since < oldest->since)
            oldest = g;
        if (here && (!oldest_here || g->since < oldest_here->since))
            oldest_here = g;
    }
    greeter *victim = NULL;
    if (unvouched_here >= ADMIT_PER_SOURCE) {
        if (!(victim = oldest_here))
            return NULL;
    } else if (live >= ADMIT_MAX) {
        if (!(victim = oldest))
            return NULL;
    }
    if (victim) {
        victim->evicted = true;
        shutdown(victim->fd, SHUT_RD);   /* wakes its thread, which says why and closes */
    }
    return free_slot;
}

/* A connection is waiting on the listening socket: greet it on a thread of its own. */
static void accept_newcomer(worker *w)
{
    char peer[NET_HOST_MAX + 8], host[NET_HOST_MAX + 8];
    int fd = net_accept(w->lfd, peer, sizeof peer);
    if (fd < 0)
        return;
    snprintf(host, sizeof host, "%s", peer);
    char *colon = strrchr(host, ':');   /* "host:port", the host an IPv6 address or not */
    if (colon)
        *colon = 0;
    pthread_mutex_lock(&w->lock);
    greeter *g = admit_slot(w, host);
    if (g) {
        g->fd = fd;
        snprintf(g->host, sizeof g->host, "%s", host);
        g->since = net_now_ns();
        atomic_store(&g->vouched, false);
        g->evicted = false;
        w->greeters++;
    }
    pthread_mutex_unlock(&w->lock);
    newcomer *n = g ? calloc(1, sizeof *n) : NULL;
    pthread_attr_t attr;
    pthread_t t;
    bool started = false;
    if (n) {
        n->w = w;
        n->g = g;
        snprintf(n->peer, sizeof n->peer, "%s", peer);
        conn_init(&n->c, fd, peer);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&t, &attr, greet_main, n) == 0;
        pthread_attr_destroy(&attr);
    }
    if (started)
        return;
    if (g) {
        leave_slot(w, g);
        pthread_mutex_lock(&w->lock);
        if (--w->greeters == 0)
            pthread_cond_broadcast(&w->idle);
        pthread_mutex_unlock(&w->lock);
    } else {
        link_send_busy(fd, PROTO_VERSION);
    }
    log_refusal(w, "refused %s: %s", peer, g ? "out of memory or threads"
                : "too many connections in their handshake, none of them to turn away");
    if (n) {
        conn_close(&n->c);
        free(n);
    } else {
        close(fd);
    }
}

/* The next admitted newcomer, or NULL. */
static newcomer *next_newcomer(worker *w)
{
    char c;
    while (read(w->admit_pipe[0], &c, 1) == 1)
        ;
    pthread_mutex_lock(&w->lock);
    newcomer *n = w->queue;
    if (n) {
        w->queue = n->next;
        if (!w->queue)
            w->queue_tail = NULL;
        /* more may be queued than bytes left in the pipe: poke it again */
        if (w->queue) {
            char one = 1;
            ssize_t wr = write(w->admit_pipe[1], &one, 1);
            (void)wr;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return n;
}

void worker_refuse(worker *w, newcomer *n, const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    proto_send_error(&n->c, w->instance, "%s", text);
    worker_log(w, "refused %s: %s", n->peer, text);
    conn_close_gently(&n->c);
    free(n);
}

/* ---- a session ---- */

void worker_end_session(wsession *s, const char *fmt, ...)
{
    if (s->reason[0])
        return;   /* the first reason is the real one */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->reason, sizeof s->reason, fmt, ap);
    va_end(ap);
}

/* Tell the head why this device gives up, then give up. */
void worker_fail_session(wsession *s, const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (!s->reason[0])
        proto_send_error(&s->ctrl, s->w->instance, "%s", text);
    worker_end_session(s, "%s", text);
}

static int connect_successor(wsession *s, char *err, size_t errlen)
{
    char name[128];
    snprintf(name, sizeof name, "device %d (%.100s:%u)", s->rank + 1, s->mp.succ_host, s->mp.succ_port);
    if (conn_dial(&s->succ, s->mp.succ_host, (int)s->mp.succ_port, name, s->w->o.key,
                  net_now_ns() + (int64_t)PROTO_DEAD_MS * 1000000, err, errlen))
        return -1;
    s->has_succ = true;
    msg_hello h = {.role = ROLE_PEER, .rank = (uint32_t)s->rank};
    memcpy(h.identity, s->w->b->model->identity, sizeof h.identity);
    memcpy(h.session, s->mp.session, sizeof h.session);
    if (proto_send_hello(&s->succ, &h, err, errlen))
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
        if (proto_decode_error(&f, &e, err, errlen) == 0)
            snprintf(err, errlen, "%s refused this device: %s", name, e.text);
        return -1;
    }
    if (f.type != RM_READY) {
        snprintf(err, errlen, "%s answered %s to HELLO", name, proto_msg_name(f.type));
        return -1;
    }
    return 0;
}

/* A PLAN or FETCH body into mp and p, checked against the model; -1 after failing the session. */
int worker_plan_from_msg(wsession *s, const frame *f, msg_plan *mp, ring_plan *p)
{
    const ring_model *m = s->w->b->model;
    char err[512];
    if (proto_decode_plan(f, mp, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return -1;
    }
    memset(p, 0, sizeof *p);
    p->n_dev = (int)mp->n_dev;
    p->n_layer = (int)mp->n_layer;
    p->k = (int)mp->k;
    for (int d = 0; d < p->n_dev; d++) {
        p->window[d] = mp->window[d] > INT_MAX ? INT_MAX : (int)mp->window[d];
        p->gpu_layers[d] = mp->gpu_layers[d] > INT_MAX ? INT_MAX : (int)mp->gpu_layers[d];
    }
    if (p->n_layer != m->n_layer) {
        worker_fail_session(s, "plan for %d layers, the model has %d", p->n_layer, m->n_layer);
        return -1;
    }
    if (plan_validate(p, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return -1;
    }
    return 0;
}

static void apply_plan(wsession *s, const frame *f)
{
    worker *w = s->w;
    const ring_model *m = w->b->model;
    char err[512];
    ring_plan *p = &s->plan;
    if (worker_plan_from_msg(s, f, &s->mp, p))
        return;
    if (w->o.store && worker_store_plan_held(s, p))
        return;
    s->rank = (int)s->mp.rank;
    bool last = s->rank == p->n_dev - 1;
    if (last != (s->mp.succ_host[0] == 0)) {
        worker_fail_session(s, "plan: device %d of %d %s a successor address", s->rank, p->n_dev,
                     last ? "must not have" : "needs");
        return;
    }
    bool *owns = calloc(2 * (size_t)m->n_layer, sizeof *owns), *on_gpu = owns + m->n_layer;
    if (!owns) {
        worker_fail_session(s, "out of memory");
        return;
    }
    plan_owned_layers(p, s->rank, owns);
    int n_gpu = plan_gpu_mask(p, s->rank, on_gpu);
    int threads = s->mp.threads ? (int)s->mp.threads : w->o.threads;
    char note[PROTO_NOTE_MAX] = "";
    int rc = w->b->open(w->b->ctx, owns, n_gpu ? on_gpu : NULL, (int)s->mp.n_ctx,
                        (int)s->mp.n_seq, (int)s->mp.max_batch, threads, s->mp.kv_type,
                        &s->layers, note, sizeof note, err, sizeof err);
    free(owns);
    if (rc) {
        worker_fail_session(s, "%s", err);
        return;
    }
    s->layers_open = true;
    device_opts dopt = {.prefetch = s->mp.prefetch, .release = s->mp.release,
                        .method = w->o.method,
                        .mem_budget = s->mp.weight_budget ? s->mp.weight_budget
                                                            : sysmem_weight_budget()};
    if (device_init(&s->dev, m, p, s->rank, &s->layers, &dopt, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    s->dev_init = true;
    if (hop_buffers_init(&s->buf, m->n_embd, (int)s->mp.max_batch, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    uint32_t bound = proto_data_bound(m->n_embd, (int)s->mp.max_batch, s->mp.wire);
    s->ctrl.max_data = bound;
    if (!last && connect_successor(s, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    if (conn_inbox_start(&s->ctrl, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    s->planned = true;
    /* The note goes to the head only with GPU layers: a head that gave none may predate notes. */
    if (proto_send_ready(&s->ctrl, n_gpu ? note : "", err, sizeof err)) {
        worker_end_session(s, "%s", err);
        return;
    }
    char layers[256];
    plan_format_layers(p, s->rank, layers, sizeof layers);
    const char *prefetch = s->mp.prefetch ? prefetch_method_name(w->o.method) : "off";
    const device *dv = &s->dev;
    double kept = dv->cut < p->n_layer ? (double)(dv->cut_offset - m->layer_begin[dv->cut]) : 0;
    worker_log(w, "plan: device %d of %d, %d round(s), layers %s (%d for the GPU), streaming %d "
         "layer(s) (from layer %d, whose first %.1f MiB stay), prefetch %s", s->rank, p->n_dev,
         p->k, layers, n_gpu, dv->n_streamed, dv->cut, kept / (1 << 20), prefetch);
    if (note[0])
        worker_log(w, "%s", note);
    if (w->o.stats) {
        cJSON *o = cJSON_CreateObject();
        if (o) {
            cJSON_AddNumberToObject(o, "device", s->rank);
            cJSON_AddNumberToObject(o, "devices", p->n_dev);
            cJSON_AddNumberToObject(o, "rounds", p->k);
            cJSON_AddStringToObject(o, "layers", layers);
            cJSON_AddNumberToObject(o, "gpu_layers", n_gpu);
            cJSON_AddNumberToObject(o, "streaming", s->dev.n_streamed);
            cJSON_AddNumberToObject(o, "cut_layer_kept_bytes", kept);
            cJSON_AddNumberToObject(o, "weight_budget", (double)dopt.mem_budget);
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
        ring_counters_format(&st.c, line, sizeof line);
        worker_log(s->w, "batch %u: %s", serial, line);
    }
    char err[512];
    if (proto_send_stats(&s->ctrl, &st, err, sizeof err))
        worker_end_session(s, "%s", err);
}

static void handle_batch(wsession *s, const frame *f)
{
    char err[512];
    const int n_embd = s->w->b->model->n_embd;
    msg_batch b;
    hop_limits lim = {.k = s->plan.k, .n_ctx = (int)s->mp.n_ctx, .n_seq = (int)s->mp.n_seq,
                      .max_batch = (int)s->mp.max_batch};
    if (proto_decode_batch(f, n_embd, &b, err, sizeof err) ||
        hop_unpack(&s->buf, &b, &lim, s->buf.hidden, s->buf.pos, s->buf.seq, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    if (f->type != RM_BATCH || !device_visits(&s->plan, s->rank, (int)b.round)) {
        worker_fail_session(s, "%s for round %u, which does not pass this device", proto_msg_name(f->type),
                     b.round);
        return;
    }
    device_arrived(&s->dev);
    if (device_compute(&s->dev, (int)b.round, s->buf.hidden, (int)b.n, s->buf.pos,
                       s->buf.seq)) {
        worker_fail_session(s, "layers failed on batch %u (positions %d..%d of sequence %d)", b.serial,
                     s->buf.pos[0], s->buf.pos[b.n - 1], s->buf.seq[0]);
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
    if (hop_send(&s->buf, to, type, &out, s->buf.hidden, s->buf.pos, s->buf.seq, err,
                 sizeof err)) {
        /* A lost successor is this session's end, and the head should hear why from here. */
        worker_fail_session(s, "%s", err);
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
    if (proto_decode_kvop(f, &k, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    if (k.seq >= (int32_t)s->mp.n_seq) {
        worker_fail_session(s, "KV cache edit of sequence %d: the plan has sequences 0..%u", k.seq,
                     s->mp.n_seq - 1);
        return;
    }
    int rc = k.op == KVOP_TRUNCATE
                 ? s->layers.kv_truncate(s->layers.ctx, k.seq, k.p0)
                 : s->layers.kv_shift(s->layers.ctx, k.seq, k.p0, k.p1, k.delta);
    if (rc) {
        worker_fail_session(s, "KV cache edit (%s %d..%d by %d of sequence %d) is outside the context",
                     k.op == KVOP_TRUNCATE ? "truncate" : "shift", k.p0, k.p1, k.delta, k.seq);
        return;
    }
    if (s->has_succ && proto_send_kvop(&s->succ, &k, err, sizeof err))
        worker_fail_session(s, "%s", err);
}

static void handle_ctrl(wsession *s, const frame *f);

/* Frames from the head between two steps of a DECODE: true when it asks to halt (or the
 * session ended). */
static bool decode_interrupted(wsession *s)
{
    char err[512];
    frame f;
    for (;;) {
        int rc = conn_recv(&s->ctrl, &f, 0, err, sizeof err);
        if (rc == 1)
            return false;
        if (rc < 0) {
            worker_end_session(s, "%s", err);
            return true;
        }
        if (f.type == RM_HALT)
            return true;
        if (f.type == RM_BYE || f.type == RM_ERROR) {
            handle_ctrl(s, &f);
            return true;
        }
        if (f.type != RM_PING) {
            worker_fail_session(s, "unexpected %s from the head while decoding", proto_msg_name(f.type));
            return true;
        }
    }
}

/* The head hands this device, which holds every layer, the decoding of a sequence: choose,
 * send and evaluate token after token here, with no round trip to the head per token. */
static void handle_decode(wsession *s, const frame *f)
{
    const ring_model *m = s->w->b->model;
    char err[512];
    msg_decode *d = malloc(sizeof *d);
    float *logits = malloc(sizeof *logits * (size_t)m->n_vocab);
    sampler *smp = NULL;
    if (!d || !logits) {
        worker_fail_session(s, "out of memory");
        goto out;
    }
    if (proto_decode_decode(f, d, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        goto out;
    }
    if (s->plan.n_dev != 2 || s->plan.window[0] != 0 || !s->layers.embed || !s->layers.output) {
        worker_fail_session(s, "DECODE for a device that does not hold every layer");
        goto out;
    }
    bool ids_ok = d->token < m->n_vocab;
    for (uint32_t i = 0; i < d->n_window; i++)
        ids_ok = ids_ok && d->window[i] < m->n_vocab;
    if (!ids_ok || d->seq >= (int32_t)s->mp.n_seq ||
        (int64_t)d->pos + d->max_steps > (int64_t)s->mp.n_ctx) {
        worker_fail_session(s, "DECODE of %u steps from position %d of sequence %d (or a token id) is "
                     "outside the plan's %u positions, %u sequences, %d tokens", d->max_steps,
                     d->pos, d->seq, s->mp.n_ctx, s->mp.n_seq, m->n_vocab);
        goto out;
    }
    smp = sampler_create(&d->sp, m->n_vocab);
    if (!smp) {
        worker_fail_session(s, "out of memory");
        goto out;
    }
    sampler_set_rng(smp, d->rng);
    for (uint32_t i = 0; i < d->n_window; i++)
        sampler_accept(smp, d->window[i]);
    int32_t tok = d->token, pos = d->pos;
    uint32_t steps = 0;
    while (steps < d->max_steps) {
        uint32_t serial = d->serial + steps;
        s->layers.embed(s->layers.ctx, &tok, 1, s->buf.hidden);
        device_arrived(&s->dev);
        int failed = 0;
        for (int round = 0; round < s->plan.k && !failed; round++) {
            failed = device_compute(&s->dev, round, s->buf.hidden, 1, &pos, &d->seq);
            if (round + 1 < s->plan.k)
                device_handed_on(&s->dev, round);   /* the pager's turn between windows */
        }
        if (failed) {
            worker_fail_session(s, "layers failed decoding position %d of sequence %d", pos, d->seq);
            goto out;
        }
        if (s->layers.output(s->layers.ctx, s->buf.hidden, pos, logits, m->n_vocab, err,
                             sizeof err)) {
            worker_fail_session(s, "%s", err);
            goto out;
        }
        msg_token t = {.serial = serial, .token = sampler_sample(smp, logits)};
        sampler_accept(smp, t.token);
        sampler_get_rng(smp, t.rng);
        device_handed_on(&s->dev, s->plan.k - 1);
        steps++;
        if (proto_send_token(&s->ctrl, &t, err, sizeof err)) {
            worker_end_session(s, "%s", err);
            goto out;
        }
        send_counters(s, serial);
        tok = t.token;
        pos++;
        if (s->reason[0] || decode_interrupted(s))
            break;
    }
    if (!s->reason[0] && proto_send_done(&s->ctrl, steps, err, sizeof err))
        worker_end_session(s, "%s", err);
out:
    sampler_free(smp);
    free(logits);
    free(d);
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
        worker_fail_session(s, "unexpected %s on the data link", proto_msg_name(f->type));
    }
}

/* The head's scheduler asks for this device's profile (before the plan). */
static void handle_profile(wsession *s, const frame *f)
{
    worker *w = s->w;
    char err[512];
    uint32_t threads;
    if (proto_decode_profile_request(f, &threads, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    if (!w->o.profile) {
        worker_fail_session(s, "this worker cannot profile itself (give the head layer windows)");
        return;
    }
    char *json = malloc(PROTO_SMALL_MAX);
    if (!json) {
        worker_fail_session(s, "out of memory");
        return;
    }
    int t = threads ? (int)threads : w->o.threads;
    worker_log(w, "profiling this device for %s (%d threads)", s->ctrl.name, t);
    if (w->o.profile(w->o.profile_ctx, t, json, PROTO_SMALL_MAX, err, sizeof err))
        worker_fail_session(s, "%s", err);
    else if (conn_send(&s->ctrl, RM_PROFILE, json, strlen(json), err, sizeof err))
        worker_end_session(s, "%s", err);
    free(json);
}

static void handle_ctrl(wsession *s, const frame *f)
{
    char err[512];
    const worker *w = s->w;
    switch (f->type) {
    case RM_PING:
        return;
    case RM_PROFILE:
        if (s->planned || s->need_manifest)
            worker_fail_session(s, "PROFILE %s", s->planned ? "after the plan" : "before the model");
        else
            handle_profile(s, f);
        return;
    case RM_PROBE:   /* echoed as it came: the head times the round trip */
        if (conn_send(&s->ctrl, RM_PROBE, f->body, f->len, err, sizeof err))
            worker_end_session(s, "%s", err);
        return;
    case RM_PLAN:
        if (s->planned)
            worker_fail_session(s, "a second PLAN in one session");
        else if (s->need_manifest || s->fetching || s->want_from)
            worker_fail_session(s, "PLAN before the model's chunks arrived");
        else
            apply_plan(s, f);
        return;
    case RM_MANIFEST:
    case RM_FETCH:
    case RM_FROM:
    case RM_CHUNK:
        if (!w->o.store)
            break;
        if (f->type == RM_MANIFEST)
            worker_store_manifest(s, f);
        else if (f->type == RM_FETCH)
            worker_store_fetch(s, f);
        else if (f->type == RM_FROM)
            worker_store_from(s, f);
        else
            worker_store_chunk(s, f, false);
        return;
    case RM_BYE:
        if (conn_send(&s->ctrl, RM_BYE, NULL, 0, err, sizeof err) == 0)
            worker_end_session(s, "the head finished");
        else
            worker_end_session(s, "%s", err);
        return;
    case RM_ERROR: {
        msg_error e;
        if (proto_decode_error(f, &e, err, sizeof err) == 0)
            worker_end_session(s, "the head gave up: %s", e.text);
        else
            worker_end_session(s, "%s", err);
        return;
    }
    case RM_BATCH:
    case RM_KVOP:
        if (s->planned && s->rank == 1) {
            handle_data(s, f);
            return;
        }
        break;
    case RM_DECODE:
        if (s->planned) {
            handle_decode(s, f);
            return;
        }
        break;
    case RM_HALT:   /* crossed this device's DONE: the decoding had ended already */
        if (s->planned)
            return;
        break;
    default:
        break;
    }
    worker_fail_session(s, "unexpected %s from the head%s", proto_msg_name(f->type),
                 s->planned ? "" : " before the plan");
}

/* A newcomer admitted while this worker serves a head: the predecessor joining, or a refusal.
 * (With a cluster key the link handshake has already proved that it holds the key.) */
static void handle_newcomer(wsession *s, newcomer *n)
{
    worker *w = s->w;
    if (n->h.role == ROLE_HEAD) {
        worker_refuse(w, n, "busy: serving %s", s->ctrl.name);
        return;
    }
    if (n->h.role == ROLE_FETCHER) {
        worker_store_serve_chunks(s, n);
        return;
    }
    const char *why = NULL;
    if (!s->planned || memcmp(n->h.session, s->mp.session, sizeof n->h.session))
        why = "not part of this worker's session";
    else if ((int)n->h.rank != s->rank - 1)
        why = "not this device's predecessor";
    else if (s->has_pred)
        why = "this device already has its predecessor";
    if (why) {
        worker_refuse(w, n, "refused: %s", why);
        return;
    }
    char err[512];
    if (conn_send(&n->c, RM_READY, NULL, 0, err, sizeof err)) {
        worker_log(w, "dropped peer %s: %s", n->peer, err);
        conn_close(&n->c);
        free(n);
        return;
    }
    snprintf(n->c.name, sizeof n->c.name, "device %d (%.100s)", s->rank - 1, n->peer);
    n->c.max_data = s->ctrl.max_data;
    conn_move(&s->pred, &n->c);
    free(n);
    s->has_pred = true;
    if (conn_inbox_start(&s->pred, err, sizeof err))
        worker_fail_session(s, "%s", err);
}

/* The link from the previous device failed (why). At the end of a session that device closes
 * it as soon as it has the head's goodbye, which reaches this device on another link, possibly
 * a moment later: what the head sends within PRED_GRACE_MS is taken first, so that a session
 * the head ended is not reported as a lost link. */
#define PRED_GRACE_MS 500
static void pred_lost(wsession *s, const char *why)
{
    char err[512];
    int64_t until = net_now_ns() + (int64_t)PRED_GRACE_MS * 1000000;
    for (int64_t now = net_now_ns(); !s->reason[0] && now < until; now = net_now_ns()) {
        frame f;
        int rc = conn_recv(&s->ctrl, &f, (int)((until - now) / 1000000) + 1, err, sizeof err);
        if (rc < 0)
            worker_end_session(s, "%s", err);
        else if (rc == 0)
            handle_ctrl(s, &f);
    }
    if (!s->reason[0])
        worker_fail_session(s, "lost the link from the previous device: %s", why);
}

static void close_session(wsession *s)
{
    heartbeat_stop(&s->hb);
    if (s->dev_init)
        device_free(&s->dev);
    if (s->layers_open)
        s->w->b->close(s->w->b->ctx, &s->layers);
    hop_buffers_free(&s->buf);
    free(s->mark);
    if (s->has_fetch)
        conn_close(&s->fetch);
    if (s->has_pred)
        conn_close(&s->pred);
    if (s->has_succ)
        conn_close(&s->succ);
    conn_close_gently(&s->ctrl);
}

static void serve(worker *w, newcomer *head)
{
    wsession *s = calloc(1, sizeof *s);
    if (!s) {
        worker_refuse(w, head, "out of memory");
        return;
    }
    s->w = w;
    memcpy(s->identity, head->h.identity, sizeof s->identity);
    s->need_manifest = !w->b;
    conn_move(&s->ctrl, &head->c);
    snprintf(s->ctrl.name, sizeof s->ctrl.name, "the head at %.100s", head->peer);
    free(head);
    s->pred.fd = s->succ.fd = s->fetch.fd = -1;
    char err[512];
    if (worker_store_welcome(s, err, sizeof err)) {
        worker_log(w, "dropped head: %s", err);
        conn_close(&s->ctrl);
        free(s);
        return;
    }
    s->hb_conns[0] = &s->ctrl;
    if (heartbeat_start(&s->hb, s->hb_conns, 1)) {
        worker_log(w, "dropped head %s: cannot start the heartbeat thread", s->ctrl.name);
        conn_close(&s->ctrl);
        free(s);
        return;
    }
    worker_log(w, "serving %s", s->ctrl.name);
    while (!s->reason[0]) {
        struct pollfd p[6] = {
            {.fd = w->stop_pipe[0], .events = POLLIN},
            {.fd = w->lfd, .events = POLLIN},
            {.fd = conn_wait_fd(&s->ctrl), .events = POLLIN},
            {.fd = s->has_pred ? conn_wait_fd(&s->pred) : -1, .events = POLLIN},
            {.fd = w->admit_pipe[0], .events = POLLIN},
            {.fd = s->has_fetch ? s->fetch.fd : -1, .events = POLLIN},
        };
        int rc = poll(p, 6, PROTO_PING_MS);
        if (rc < 0 && errno != EINTR) {
            worker_end_session(s, "poll: %s", strerror(errno));
            break;
        }
        tell_held_refusals(w, false);
        if (p[0].revents && stop_requested(w)) {
            worker_stop(w);   /* leave the request for worker_run to see */
            worker_fail_session(s, "the worker is shutting down");
            break;
        }
        if (p[1].revents)
            accept_newcomer(w);
        frame f;
        if (p[2].revents) {
            rc = conn_recv(&s->ctrl, &f, 0, err, sizeof err);
            if (rc < 0)
                worker_end_session(s, "%s", err);
            else if (rc == 0)
                handle_ctrl(s, &f);
        } else if (!s->reason[0] &&
                   net_now_ns() - s->ctrl.last_seen_ns > (int64_t)PROTO_DEAD_MS * 1000000) {
            /* Judged only when poll found nothing to read from the head: right after computing
             * a batch that took longer than PROTO_DEAD_MS, the head's pings are still unread in
             * the socket, and the head is alive. */
            worker_end_session(s, "%s stopped responding (nothing for %d s)", s->ctrl.name,
                        PROTO_DEAD_MS / 1000);
        }
        if (!s->reason[0] && p[3].revents) {
            rc = conn_recv(&s->pred, &f, 0, err, sizeof err);
            if (rc < 0)
                pred_lost(s, err);
            else if (rc == 0)
                handle_data(s, &f);
        }
        if (!s->reason[0] && s->has_fetch) {
            if (p[5].revents) {
                rc = conn_recv(&s->fetch, &f, 0, err, sizeof err);
                if (rc < 0)
                    worker_store_peer_gone(s, err);
                else if (rc == 0 && f.type == RM_CHUNK)
                    worker_store_chunk(s, &f, true);
                else if (rc == 0)
                    worker_store_peer_gone(s, "it sent something other than chunks");
            } else if (net_now_ns() - s->fetch.last_seen_ns > (int64_t)PROTO_DEAD_MS * 1000000) {
                worker_store_peer_gone(s, "nothing for 5 s");
            }
        }
        /* An admitted newcomer waits while the head's link has frames unread: pings queued
         * ahead of the head's goodbye or hang-up would otherwise leave this session looking
         * alive, and the next head would be refused as busy by a worker whose head has gone. */
        if (!s->reason[0] && p[4].revents && !p[2].revents) {
            newcomer *n = next_newcomer(w);
            if (n)
                handle_newcomer(s, n);
        }
    }
    worker_log(w, "session ended: %s; waiting for a head", s->reason);
    close_session(s);
    free(s);
}

/* An admitted newcomer while no session is in progress: a head to serve, or a refusal. */
static void admit_idle(worker *w, newcomer *n)
{
    if (n->h.role != ROLE_HEAD) {
        worker_refuse(w, n, "refused: no session in progress");
        return;
    }
    if (w->o.store) {
        worker_store_open(w, n->h.identity);
        serve(w, n);
        return;
    }
    const ring_model *m = w->b->model;
    if (memcmp(n->h.identity, m->identity, sizeof n->h.identity)) {
        char mine[16], theirs[16];
        worker_id_hex(m->identity, mine);
        worker_id_hex(n->h.identity, theirs);
        worker_refuse(w, n, "model mismatch: this worker holds model %s (%s), the head holds "
                        "model %s", mine, m->path, theirs);
        return;
    }
    serve(w, n);
}

int worker_run(worker *w)
{
    for (;;) {
        struct pollfd p[3] = {{.fd = w->stop_pipe[0], .events = POLLIN},
                              {.fd = w->lfd, .events = POLLIN},
                              {.fd = w->admit_pipe[0], .events = POLLIN}};
        int rc = poll(p, 3, REFUSAL_WINDOW_MS);
        if (rc < 0 && errno != EINTR)
            break;
        tell_held_refusals(w, false);
        if (p[0].revents && stop_requested(w))
            break;
        if (p[1].revents)
            accept_newcomer(w);
        if (p[2].revents) {
            newcomer *n = next_newcomer(w);
            if (n)
                admit_idle(w, n);
        }
    }
    /* Greeters end by their deadline; then nothing refers to w any more. */
    pthread_mutex_lock(&w->lock);
    while (w->greeters > 0)
        pthread_cond_wait(&w->idle, &w->lock);
    newcomer *n = w->queue;
    w->queue = w->queue_tail = NULL;
    pthread_mutex_unlock(&w->lock);
    while (n) {
        newcomer *next = n->next;
        conn_close(&n->c);
        free(n);
        n = next;
    }
    tell_held_refusals(w, true);
    if (w->o.store && w->b)
        w->o.unload(w->o.load_ctx);
    w->b = NULL;
    worker_log(w, "stopped");
    return 0;
}
