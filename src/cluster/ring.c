/* ring.c — the head's side of a ring (ring.h): connecting and planning, sending batches round
 * the devices with several in flight, collecting results, KV edits, counters, and dropping a
 * device that fails so that failover can re-plan without it. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/ring.h"
#include "cluster/stats.h"
#include "cluster/manifest.h"
#include "cluster/store.h"
#include "cluster/transfer.h"
#include "cluster/wire.h"
#include "util/logline.h"
#include "util/sysmem.h"

/* ring_eval cuts a batch of at least PIPE_MIN_ROWS rows per device into micro-batches, so that
 * the devices compute different rows of it at once; a smaller batch goes whole (a few rows cost
 * a device about what one costs: its weights are read once either way). A ring of M devices
 * pipelining B micro-batches takes (B + M - 1) / B stages of the whole batch's time where one
 * batch takes M: so as many micro-batches as keep PIPE_ROWS rows each (where a device's
 * products are about as fast per row as for the whole batch), at least one per device. When
 * a device of the plan streams layers (drops them once computed, to read them again), it reads
 * them once per micro-batch: then one per device, which paid most on paper-4dev (a 424-token
 * prompt of the 70B-like: 26-29 s whole, 20-21 s in 4, 23-24 s in 13). */
#define PIPE_MIN_ROWS 4
#define PIPE_ROWS 32

/* A batch between ring_submit and ring_collect. */
typedef struct flight {
    float *hidden;                 /* the caller's rows, then the result */
    int32_t *pos, *seq;            /* copies, max_batch each */
    int n, round;
    uint32_t serial;
    bool done;
} flight;

/* When a batch entered the ring and came back (0: not yet), for the workers' counters. */
#define SPAN_SLOTS 64
typedef struct batch_span {
    uint32_t serial;
    int64_t start_ns, end_ns;
} batch_span;

typedef struct remote {
    conn c;
    char addr[NET_HOST_MAX + 8];
    char host[NET_HOST_MAX];
    int port;
    msg_welcome welcome;
    bool bye;
    char note[PROTO_NOTE_MAX];     /* its READY's note on its GPU layers */
} remote;

struct ring {
    ring_opts o;
    const ring_model *m;
    ring_plan plan;
    int n_workers;
    remote *w;                     /* n_workers; device d is w[d - 1] */
    conn **hb_conns;
    heartbeat hb;
    bool hb_running;
    device dev;
    bool dev_init, started, broken, finished;
    bool streams;                  /* some device of the plan streams layers (PIPE_MIN_ROWS) */
    hop_buffers buf;
    flight fl[PRIMA_MAX_DEVICES];  /* in flight: n_fl from fl_first on, circularly */
    int fl_first, n_fl;
    int32_t *zeros;                /* max_batch sequence ids 0 */
    uint32_t serial, count_from;
    ring_counters *totals;         /* per device, of batches from count_from on */
    batch_span span[SPAN_SLOTS];   /* the latest batches' time in the ring, by serial */
    uint64_t sent_mark, recv_mark;
    char err[512];
    /* failover (ring_set_failover) */
    ring_failover fo;
    bool fo_set;
    bool fault_remote;             /* the failure came from a worker or a link, not this device */
    int fault_worker;              /* index into w[] of the worker whose link failed; -1: none */
    bool busy_refusal;             /* the last greeting was refused as busy */
    bool need_recover;             /* a KV edit could not reach the ring */
    int kv_len;                    /* positions [0, kv_len) are in every device's KV cache */
    bool kv_shifted;               /* a context shift moved them (a rebuild is then not exact) */
    float *in_copy, *replay;       /* max_batch x n_embd each */
    int32_t *replay_pos;           /* max_batch */
    char gone[PRIMA_MAX_DEVICES][NET_HOST_MAX + 8];   /* addresses of the workers lost */
    int n_gone;
};

static int vfail(ring *r, const char *fmt, va_list ap)
{
    if (!r->broken) {
        vsnprintf(r->err, sizeof r->err, fmt, ap);
        r->broken = true;
    }
    return -1;
}

static int fail(ring *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ring *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(r, fmt, ap);
    va_end(ap);
    return -1;
}

/* A failure of worker i's link (i < 0: of the ring, with every link still up): failover may
 * recover from it. */
static int lose(ring *r, int i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int lose(ring *r, int i, const char *fmt, ...)
{
    if (!r->broken) {
        r->fault_remote = true;
        r->fault_worker = i;
    }
    va_list ap;
    va_start(ap, fmt);
    vfail(r, fmt, ap);
    va_end(ap);
    return -1;
}

static int count_workers(const char *list)
{
    if (!list || !*list)
        return 0;
    int n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    return n;
}

/* ---- sending workers with a store their chunks ---- */

static int handle_common(ring *r, int i, const frame *f);

static int transfer_other(void *ctx, int i, const frame *f)
{
    int h = handle_common(ctx, i, f);
    return h < 0 ? -1 : h;
}

static void transfer_progress(void *ctx, int i, uint64_t done, uint64_t total, double seconds)
{
    ring *r = ctx;
    r->o.on_transfer(r->o.transfer_ctx, i + 1, done, total, seconds);
}

/* Serve the WANTs of the workers marked active (their MANIFEST or FETCH sent) until each holds
 * what it needs (transfer.h). */
static int transfer(ring *r, bool *active)
{
    conn *links[PRIMA_MAX_DEVICES];
    for (int i = 0; i < r->n_workers; i++)
        links[i] = &r->w[i].c;
    transfer_hooks h = {r, transfer_other, r->o.on_transfer ? transfer_progress : NULL};
    char err[512];
    int failed;
    if (transfer_serve(links, active, r->n_workers, r->m->manifest, r->m->map, &h, &failed, err,
                       sizeof err) == 0)
        return 0;
    if (!err[0])
        return -1;   /* handle_common has said why */
    return failed >= 0 ? lose(r, failed, "%s", err) : fail(r, "%s", err);
}

/* A worker that keeps a store and lacks the model: its manifest, then the chunks of its header
 * (it asks), then its WELCOME again, now with the model's shape. */
static int send_header(ring *r, int i, frame *f)
{
    remote *w = &r->w[i];
    char err[512];
    if (!r->m->manifest)
        return fail(r, "%s has no copy of the model, and this device has no manifest to send it",
                    w->c.name);
    if (conn_send(&w->c, RM_MANIFEST, r->m->manifest->bytes, r->m->manifest->len, err,
                  sizeof err))
        return fail(r, "%s", err);
    bool active[PRIMA_MAX_DEVICES] = {false};
    active[i] = true;
    if (transfer(r, active))
        return -1;
    for (;;) {   /* its heartbeat has started: pings may come first */
        int rc = conn_recv(&w->c, f, PROTO_DEAD_MS, err, sizeof err);
        if (rc == 1)
            return fail(r, "%s did not answer within %d s", w->c.name, PROTO_DEAD_MS / 1000);
        if (rc)
            return fail(r, "%s", err);
        if (f->type != RM_PING)
            return 0;
    }
}

/* Connect to worker i and exchange HELLO / WELCOME. */
static int greet(ring *r, int i)
{
    remote *w = &r->w[i];
    char err[512], name[128];
    snprintf(name, sizeof name, "device %d (%.100s)", i + 1, w->addr);
    /* Nothing about the model leaves this device before the handshake: HELLO comes after. */
    if (conn_dial(&w->c, w->host, w->port, name, r->o.key,
                  net_now_ns() + (int64_t)PROTO_DEAD_MS * 1000000, err, sizeof err))
        return fail(r, "%s", err);
    msg_hello h = {.role = ROLE_HEAD};
    memcpy(h.identity, r->m->identity, sizeof h.identity);
    if (proto_send_hello(&w->c, &h, err, sizeof err))
        return fail(r, "%s", err);
    frame f;
    int rc = conn_recv(&w->c, &f, PROTO_DEAD_MS, err, sizeof err);
    if (rc == 1)
        return fail(r, "%s did not answer within %d s", name, PROTO_DEAD_MS / 1000);
    if (rc)
        return fail(r, "%s", err);
    if (f.type == RM_ERROR) {
        msg_error e;
        if (proto_decode_error(&f, &e, err, sizeof err))
            return fail(r, "%s: %s", name, err);
        for (int j = 0; j < i; j++)
            if (r->w[j].welcome.instance == e.instance)
                return fail(r, "%s is the same worker as device %d (%s): list each worker once",
                            name, j + 1, r->w[j].addr);
        r->busy_refusal = !strncmp(e.text, "busy", 4);
        return fail(r, "%s refused: %s", name, e.text);
    }
    msg_welcome *wm = &w->welcome;
    if (proto_decode_welcome(&f, wm, err, sizeof err))
        return fail(r, "%s: %s", name, err);
    if (wm->store & WELCOME_NEED_MANIFEST) {
        snprintf(w->c.name, sizeof w->c.name, "%s", name);
        if (send_header(r, i, &f))
            return -1;
        if (f.type == RM_ERROR) {
            msg_error e;
            if (proto_decode_error(&f, &e, err, sizeof err))
                return fail(r, "%s: %s", name, err);
            return fail(r, "%s refused: %s", name, e.text);
        }
        if (proto_decode_welcome(&f, wm, err, sizeof err))
            return fail(r, "%s: %s", name, err);
        if (wm->store & WELCOME_NEED_MANIFEST)
            return fail(r, "%s asked for the manifest twice", name);
    }
    if (memcmp(wm->identity, r->m->identity, sizeof wm->identity) ||
        wm->n_layer != (uint32_t)r->m->n_layer || wm->n_embd != (uint32_t)r->m->n_embd)
        return fail(r, "%s holds a different model (%u layers, width %u)", name, wm->n_layer,
                    wm->n_embd);
    return 0;
}

/* Say goodbye to the workers the planner left out and close the ring over the others: they
 * move down in w[] and in the plan, keeping their order. */
static void drop_workers(ring *r, const bool *drop)
{
    char err[512];
    heartbeat_set(&r->hb, r->hb_conns, 0);   /* the pinger lets go of the links */
    int kept = 0;
    for (int i = 0; i < r->n_workers; i++) {
        remote *w = &r->w[i];
        if (drop[i + 1]) {
            conn_send(&w->c, RM_BYE, NULL, 0, err, sizeof err);
            conn_close_gently(&w->c);
            continue;
        }
        if (kept != i) {
            remote *to = &r->w[kept];
            memcpy(to->addr, w->addr, sizeof to->addr);
            memcpy(to->host, w->host, sizeof to->host);
            to->port = w->port;
            to->welcome = w->welcome;
            to->bye = w->bye;
            conn_move(&to->c, &w->c);
            snprintf(to->c.name, sizeof to->c.name, "device %d (%.100s)", kept + 1, to->addr);
            r->plan.window[kept + 1] = r->plan.window[i + 1];
            r->plan.gpu_layers[kept + 1] = r->plan.gpu_layers[i + 1];
            r->plan.weight_budget[kept + 1] = r->plan.weight_budget[i + 1];
        }
        r->hb_conns[kept] = &r->w[kept].c;
        kept++;
    }
    for (int d = kept + 1; d < r->plan.n_dev; d++) {
        r->plan.window[d] = r->plan.gpu_layers[d] = 0;
        r->plan.weight_budget[d] = 0;
    }
    r->n_workers = kept;
    r->plan.n_dev = kept + 1;
    heartbeat_set(&r->hb, r->hb_conns, kept);
}

static int make_plan(ring *r)
{
    const ring_opts *o = &r->o;
    int n_dev = r->n_workers + 1;
    char err[512];
    if (o->n_lw) {
        if (o->n_lw != n_dev)
            return fail(r, "layer windows: %d for %d device(s) (one per device, head first)",
                        o->n_lw, n_dev);
        if (o->n_gpu_layers && o->n_gpu_layers != n_dev)
            return fail(r, "GPU layers given for %d device(s), the ring has %d (head first)",
                        o->n_gpu_layers, n_dev);
        if (plan_from_windows(&r->plan, n_dev, r->m->n_layer, o->lw,
                              o->n_gpu_layers ? o->gpu_layers : NULL, o->k, err, sizeof err))
            return fail(r, "layer windows %s", err);   /* "4,4: why" */
        return 0;
    }
    if (o->planner) {
        ring_plan_request q = {.n_dev = n_dev, .n_layer = r->m->n_layer, .k = o->k,
                               .n_ctx = o->n_ctx, .n_seq = o->n_seq, .max_batch = o->max_batch,
                               .worker_threads = o->worker_threads, .wire = o->wire,
                               .prefetch = o->prefetch};
        bool drop[PRIMA_MAX_DEVICES] = {false};
        if (o->planner->plan(o->planner->ctx, r, &q, &r->plan, drop, err, sizeof err))
            return r->broken ? -1 : fail(r, "%s", err);
        if (r->plan.n_dev != n_dev || r->plan.n_layer != r->m->n_layer)
            return fail(r, "the planner's plan is for %d devices and %d layers, not %d and %d",
                        r->plan.n_dev, r->plan.n_layer, n_dev, r->m->n_layer);
        if (plan_validate(&r->plan, err, sizeof err))
            return fail(r, "the planner's plan: %s", err);
        for (int d = 1; d < n_dev; d++)
            if (drop[d] && r->plan.window[d])
                return fail(r, "the planner leaves out device %d, which has layers", d);
        drop_workers(r, drop);
        return 0;
    }
    uint64_t mem[PRIMA_MAX_DEVICES];
    mem[0] = sysmem_budget();
    for (int i = 0; i < r->n_workers; i++)
        mem[i + 1] = r->w[i].welcome.mem_budget;
    if (plan_by_memory(&r->plan, n_dev, r->m->n_layer, o->k, mem, err, sizeof err) ||
        plan_validate(&r->plan, err, sizeof err))
        return fail(r, "%s", err);
    r->plan.decode_alone = r->plan.window[0] == 0;
    return 0;
}

const ring_model *ring_get_model(const ring *r)
{
    return r->m;
}

ring *ring_connect(const ring_opts *o, const ring_model *m, char *err, size_t errlen)
{
    ring *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->o = *o;
    r->m = m;
    if (r->o.n_seq < 1)
        r->o.n_seq = 1;
    if (r->o.n_seq > PROTO_MAX_SEQ) {
        snprintf(err, errlen, "%d sequences on a ring (at most %d)", r->o.n_seq, PROTO_MAX_SEQ);
        free(r);
        return NULL;
    }
    r->n_workers = count_workers(o->workers);
    if (r->n_workers + 1 > PRIMA_MAX_DEVICES) {
        snprintf(err, errlen, "worker list: %d workers; a ring has at most %d devices",
                 r->n_workers, PRIMA_MAX_DEVICES);
        free(r);
        return NULL;
    }
    /* Room for a full ring: failover may bring in workers that were not there at the start. */
    r->w = calloc(PRIMA_MAX_DEVICES, sizeof *r->w);
    r->hb_conns = calloc(PRIMA_MAX_DEVICES, sizeof *r->hb_conns);
    r->totals = calloc(PRIMA_MAX_DEVICES, sizeof *r->totals);
    if (!r->w || !r->hb_conns || !r->totals) {
        ring_close(r);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (int i = 0; i < PRIMA_MAX_DEVICES; i++)
        r->w[i].c.fd = -1;
    r->fault_worker = -1;
    /* Parse every address before connecting to any, so a typo fails fast. */
    const char *p = o->workers;
    for (int i = 0; i < r->n_workers; i++) {
        size_t len = strcspn(p, ",");
        remote *w = &r->w[i];
        if (len >= sizeof w->addr)
            len = sizeof w->addr - 1;
        memcpy(w->addr, p, len);
        w->addr[len] = 0;
        p += len + (p[len] == ',');
        char e[256];
        if (net_parse_addr(w->addr, w->host, sizeof w->host, &w->port, e, sizeof e)) {
            snprintf(err, errlen, "worker list: %s", e);
            ring_close(r);
            return NULL;
        }
    }
    if (heartbeat_start(&r->hb, r->hb_conns, 0) == 0)
        r->hb_running = true;
    for (int i = 0; i < r->n_workers; i++) {
        if (greet(r, i)) {
            snprintf(err, errlen, "%s", r->err);
            ring_close(r);
            return NULL;
        }
        /* Ping each worker from the moment it has welcomed us, so the ones greeted first do not
         * give up while later ones are slow to answer. */
        r->hb_conns[i] = &r->w[i].c;
        heartbeat_set(&r->hb, r->hb_conns, i + 1);
    }
    if (make_plan(r)) {
        snprintf(err, errlen, "%s", r->err);
        ring_close(r);
        return NULL;
    }
    return r;
}

const ring_plan *ring_get_plan(const ring *r)
{
    return &r->plan;
}

const char *ring_error(const ring *r)
{
    return r->err;
}

void ring_device(const ring *r, int d, char *addr, size_t cap, uint64_t *mem_budget)
{
    snprintf(addr, cap, "%s", d > 0 ? r->w[d - 1].addr : "");
    *mem_budget = d > 0 ? r->w[d - 1].welcome.mem_budget : sysmem_budget();
}

void ring_totals(const ring *r, int d, ring_counters *out)
{
    *out = r->totals[d];
}

int ring_batches(const ring *r)
{
    return (int)r->serial;
}

void ring_count_from(ring *r, int serial)
{
    r->count_from = (uint32_t)serial;
    memset(r->totals, 0, sizeof *r->totals * (size_t)r->plan.n_dev);
}

static void print_counters(ring *r, int d, uint32_t serial, const ring_counters *c)
{
    if (!r->o.verbose)
        return;
    char line[400];
    ring_counters_format(c, line, sizeof line);
    log_line(r->o.verbose, "ring: ", "batch %u device %d: %s", serial, d, line);
}

static void span_start(ring *r, uint32_t serial)
{
    r->span[serial % SPAN_SLOTS] = (batch_span){.serial = serial, .start_ns = net_now_ns()};
}

static void span_end(ring *r, uint32_t serial)
{
    batch_span *b = &r->span[serial % SPAN_SLOTS];
    if (b->serial == serial && b->start_ns)
        b->end_ns = net_now_ns();
}

/* A worker counts as waiting all the time from handing a batch on to the next one's arrival,
 * and cannot tell the ring's pipeline from the head's idle time between requests (a 3-token
 * request after 100 s idle would report 100 s of wait). Within a batch a device waits at most
 * the batch's time in the ring less its own compute: the rest was before the batch began. */
static void bound_wait(const ring *r, uint32_t serial, ring_counters *c)
{
    const batch_span *b = &r->span[serial % SPAN_SLOTS];
    if (b->serial != serial || !b->start_ns)
        return;
    uint64_t span = (uint64_t)((b->end_ns ? b->end_ns : net_now_ns()) - b->start_ns);
    uint64_t most = span > c->compute_ns ? span - c->compute_ns : 0;
    if (c->wait_ns > most)
        c->wait_ns = most;
}

/* Device d's counters for batch `serial`: into the totals, the verbose log and the stats file. */
static void record_counters(ring *r, int d, uint32_t serial, const ring_counters *counted)
{
    ring_counters bounded = *counted, *c = &bounded;
    if (d > 0)
        bound_wait(r, serial, c);
    if (serial >= r->count_from)
        ring_counters_add(&r->totals[d], c);
    print_counters(r, d, serial, c);
    if (r->o.stats) {
        cJSON *o = cJSON_CreateObject();
        if (o) {
            cJSON_AddNumberToObject(o, "serial", serial);
            cJSON_AddNumberToObject(o, "device", d);
            stats_add_counters(o, c);
        }
        stats_emit(r->o.stats, "batch", o);
    }
}

/* Frames that may arrive at any time on a worker link. Returns 1 if handled, -1 on failure,
 * 0 if the caller must look at it. */
static int handle_common(ring *r, int i, const frame *f)
{
    char err[512];
    remote *w = &r->w[i];
    switch (f->type) {
    case RM_PING:
        return 1;
    case RM_STATS: {
        msg_stats st;
        if (proto_decode_stats(f, &st, err, sizeof err))
            return lose(r, i, "%s: %s", w->c.name, err);
        if (st.rank != (uint32_t)i + 1)
            return lose(r, i, "%s sent counters of device %u", w->c.name, st.rank);
        record_counters(r, i + 1, st.serial, &st.c);
        return 1;
    }
    case RM_ERROR: {
        msg_error e;
        if (proto_decode_error(f, &e, err, sizeof err))
            return lose(r, i, "%s: %s", w->c.name, err);
        return lose(r, -1, "%s: %s", w->c.name, e.text);   /* it is alive; it tells of another */
    }
    default:
        return 0;
    }
}

/* Read every worker link until `want` arrives from worker `from` (any worker when from < 0),
 * handling pings, counters and errors on the way, and failing on a dead or silent worker.
 * On success *got is the frame and *who the worker it came from. */
static int await(ring *r, int want, int want2, int from, frame *got, int *who)
{
    struct pollfd p[PRIMA_MAX_DEVICES];
    char err[512];
    for (;;) {
        for (int i = 0; i < r->n_workers; i++)
            p[i] = (struct pollfd){.fd = conn_wait_fd(&r->w[i].c), .events = POLLIN};
        int rc = poll(p, (nfds_t)r->n_workers, PROTO_PING_MS);
        if (rc < 0 && errno != EINTR)
            return fail(r, "poll: %s", strerror(errno));
        for (int i = 0; i < r->n_workers; i++) {
            if (!p[i].revents)
                continue;
            frame f;
            rc = conn_recv(&r->w[i].c, &f, 0, err, sizeof err);
            if (rc < 0)
                return lose(r, i, "%s", err);
            if (rc == 1)
                continue;
            int h = handle_common(r, i, &f);
            if (h < 0)
                return -1;
            if (h > 0)
                continue;
            if ((f.type == want || f.type == want2) && (from < 0 || from == i)) {
                *got = f;
                *who = i;
                return 0;
            }
            return lose(r, i, "%s sent an unexpected %s", r->w[i].c.name, proto_msg_name(f.type));
        }
        int64_t now = net_now_ns();
        for (int i = 0; i < r->n_workers; i++)
            if (now - r->w[i].c.last_seen_ns > (int64_t)PROTO_DEAD_MS * 1000000)
                return lose(r, i, "%s stopped responding (nothing for %d s)", r->w[i].c.name,
                            PROTO_DEAD_MS / 1000);
    }
}

int ring_worker_profile(ring *r, int d, int threads, char *json, size_t cap)
{
    char err[512];
    if (d < 1 || d > r->n_workers || cap < 1)
        return fail(r, "no device %d to profile", d);
    remote *w = &r->w[d - 1];
    if (proto_send_profile_request(&w->c, (uint32_t)(threads > 0 ? threads : 0), err, sizeof err))
        return fail(r, "%s", err);
    frame f;
    int who;
    if (await(r, RM_PROFILE, RM_PROFILE, d - 1, &f, &who))
        return -1;
    if (f.len >= cap)
        return fail(r, "%s sent a profile of %u bytes (at most %zu)", w->c.name, f.len, cap - 1);
    memcpy(json, f.body, f.len);
    json[f.len] = '\0';
    return 0;
}

int ring_probe(ring *r, int d, size_t bytes, int reps, double *seconds)
{
    char err[512];
    if (d < 1 || d > r->n_workers || bytes > PROTO_PROBE_MAX || reps < 1 || reps > 64)
        return fail(r, "probe of device %d with %zu bytes x %d: out of range", d, bytes, reps);
    remote *w = &r->w[d - 1];
    uint8_t *payload = calloc(bytes ? bytes : 1, 1);
    double times[64];
    if (!payload)
        return fail(r, "out of memory");
    int rc = 0;
    for (int i = 0; i < reps && rc == 0; i++) {
        frame f;
        int who;
        int64_t t0 = net_now_ns();
        if (conn_send(&w->c, RM_PROBE, payload, bytes, err, sizeof err))
            rc = fail(r, "%s", err);
        else if (await(r, RM_PROBE, RM_PROBE, d - 1, &f, &who))
            rc = -1;
        else if (f.len != bytes)
            rc = fail(r, "%s echoed %u of %zu probe bytes", w->c.name, f.len, bytes);
        times[i] = (double)(net_now_ns() - t0) * 1e-9;
    }
    free(payload);
    if (rc)
        return -1;
    /* median by insertion sort: reps is small */
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
            double t = times[j];
            times[j] = times[j - 1];
            times[j - 1] = t;
        }
    *seconds = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
    return 0;
}

/* Whether a device of the current plan streams layers, judged as each device judges it
 * (device_streamed_layers), a worker's budget from what it reported when it greeted the head
 * where the plan gives none. */
static bool plan_streams(const ring *r)
{
    for (int d = 1; d < r->plan.n_dev; d++) {
        uint64_t budget = r->plan.weight_budget[d];
        if (!budget)
            budget = (uint64_t)((double)r->w[d - 1].welcome.mem_budget * (1 - SYSMEM_RESERVE));
        int cut;
        uint64_t keep;
        if (device_streamed_layers(r->m, &r->plan, d, r->o.release, budget, &cut, &keep) > 0)
            return true;
    }
    return r->dev.n_streamed > 0;
}

/* The head's own device for the current plan, computing with `head`. */
static int start_head(ring *r, const ring_layers *head, char *err, size_t errlen)
{
    const ring_opts *o = &r->o;
    uint64_t budget = r->plan.weight_budget[0];
    device_opts dopt = {.prefetch = o->prefetch, .release = o->release, .method = o->method,
                        .mem_budget = budget ? budget : sysmem_weight_budget()};
    if (device_init(&r->dev, r->m, &r->plan, 0, head, &dopt, err, errlen))
        return -1;
    r->dev_init = true;
    r->streams = plan_streams(r);
    return 0;
}

/* Worker i's part of the current plan, in session `session`. */
static void plan_msg(const ring *r, int i, const uint8_t *session, msg_plan *mp)
{
    const ring_opts *o = &r->o;
    *mp = (msg_plan){.rank = (uint32_t)i + 1, .n_dev = (uint32_t)r->plan.n_dev,
                     .k = (uint32_t)r->plan.k, .n_layer = (uint32_t)r->plan.n_layer,
                     .n_ctx = (uint32_t)o->n_ctx, .max_batch = (uint32_t)o->max_batch,
                     .threads = (uint32_t)o->worker_threads, .wire = (uint8_t)o->wire,
                     .prefetch = o->prefetch, .release = (uint8_t)o->release,
                     .n_seq = (uint32_t)o->n_seq,
                     .weight_budget = r->plan.weight_budget[i + 1]};
    for (int t = 0; t < 2; t++)
        mp->kv_type[t] = (uint8_t)o->kv_type[t];
    memcpy(mp->session, session, sizeof mp->session);
    for (int d = 0; d < r->plan.n_dev; d++) {
        mp->window[d] = (uint32_t)r->plan.window[d];
        mp->gpu_layers[d] = (uint32_t)r->plan.gpu_layers[d];
    }
    if (i + 1 < r->n_workers) {
        snprintf(mp->succ_host, sizeof mp->succ_host, "%s", r->w[i + 1].host);
        mp->succ_port = (uint32_t)r->w[i + 1].port;
    }
}

/* Every worker that keeps a store gets the chunks of its part of the plan it lacks, all at
 * once, before any plan is applied: the first token waits for these only. Each says what it
 * holds (HAVE), and is told which other worker holds the most of what it lacks (FROM), to
 * fetch those from it; the head sends the rest. */
static int fetch_shares(ring *r, const uint8_t *session)
{
    bool active[PRIMA_MAX_DEVICES] = {false};
    bool any = false;
    char err[512];
    for (int i = 0; i < r->n_workers; i++) {
        if (!(r->w[i].welcome.store & WELCOME_STORE))
            continue;
        if (!r->m->manifest)
            return fail(r, "%s keeps a store, and this device has no manifest to fill it from",
                        r->w[i].c.name);
        msg_plan mp;
        plan_msg(r, i, session, &mp);
        if (proto_send_fetch(&r->w[i].c, &mp, err, sizeof err))
            return lose(r, i, "%s", err);
        active[i] = any = true;
    }
    if (!any)
        return 0;
    size_t nc = r->m->manifest->n_chunks, n = (size_t)r->n_workers;
    uint8_t *need = calloc(2 * n * nc, 1), *have = need ? need + n * nc : NULL;
    int from[PRIMA_MAX_DEVICES];
    msg_want *want = calloc(n, sizeof *want);
    int rc = need && want ? 0 : fail(r, "out of memory");
    bool got[PRIMA_MAX_DEVICES] = {false};
    for (int k = 0; k < r->n_workers && rc == 0; k++) {
        frame f;
        int i;
        if (!active[k])
            continue;
        if (await(r, RM_HAVE, RM_HAVE, -1, &f, &i))   /* in whatever order they come */
            rc = -1;
        else if (!active[i] || got[i])
            rc = lose(r, i, "%s sent an unexpected HAVE", r->w[i].c.name);
        else if (proto_decode_have(&f, (uint32_t)nc, have + i * nc, err, sizeof err))
            rc = lose(r, i, "%s: %s", r->w[i].c.name, err);
        if (rc)
            break;
        got[i] = true;
        store_plan_chunks(r->m, &r->plan, i + 1, need + i * nc);
        for (size_t c = 0; c < nc; c++)
            need[i * nc + c] &= !have[i * nc + c];
    }
    if (rc == 0)
        transfer_peers(r->n_workers, r->m->manifest, need, have, from, want);
    for (int i = 0; i < r->n_workers && rc == 0; i++) {
        if (!active[i])
            continue;
        msg_from fm = {.port = 0};
        if (from[i] >= 0 && active[from[i]]) {
            snprintf(fm.host, sizeof fm.host, "%s", r->w[from[i]].host);
            fm.port = (uint32_t)r->w[from[i]].port;
            fm.want = want[i];
        }
        if (proto_send_from(&r->w[i].c, &fm, err, sizeof err))
            rc = lose(r, i, "%s", err);
    }
    free(need);
    free(want);
    return rc ? -1 : transfer(r, active);
}

/* Send every worker its part of the current plan and wait until all are ready. 0, or -1 with
 * r->err set. */
static int send_plans(ring *r)
{
    const ring_opts *o = &r->o;
    char err[512];
    uint8_t session[16];
    if (ring_random(session, sizeof session))
        return fail(r, "no randomness source (libsodium failed to initialise)");
    if (fetch_shares(r, session))
        return -1;
    uint32_t bound = proto_data_bound(r->m->n_embd, o->max_batch, o->wire);
    /* Last worker first: each worker connects to its successor while applying its plan, so the
     * successor must already have applied its own. */
    for (int i = r->n_workers - 1; i >= 0; i--) {
        remote *w = &r->w[i];
        w->c.max_data = bound;
        msg_plan mp;
        plan_msg(r, i, session, &mp);
        frame f;
        int who;
        if (proto_send_plan(&w->c, &mp, err, sizeof err))
            return lose(r, i, "%s", err);
        if (await(r, RM_READY, RM_READY, i, &f, &who))
            return -1;
        if (proto_decode_ready(&f, w->note, sizeof w->note, err, sizeof err))
            return lose(r, i, "%s: %s", w->c.name, err);
    }
    /* From here on batches flow: every link reads what comes as it comes (conn_inbox_start). */
    for (int i = 0; i < r->n_workers; i++)
        if (conn_inbox_start(&r->w[i].c, err, sizeof err))
            return fail(r, "%s", err);
    return 0;
}

const char *ring_device_note(const ring *r, int d)
{
    return d >= 1 && d <= r->n_workers ? r->w[d - 1].note : "";
}

const char *ring_worker_addr(const ring *r, int d)
{
    return d >= 1 && d <= r->n_workers ? r->w[d - 1].addr : "";
}

int ring_start(ring *r, const ring_layers *head, char *err, size_t errlen)
{
    if (start_head(r, head, err, errlen) ||
        hop_buffers_init(&r->buf, r->m->n_embd, r->o.max_batch, err, errlen))
        return -1;
    size_t B = (size_t)r->o.max_batch;
    r->zeros = calloc(B, sizeof *r->zeros);
    for (int i = 0; i < PRIMA_MAX_DEVICES; i++) {
        r->fl[i].pos = malloc(sizeof(int32_t) * B);
        r->fl[i].seq = malloc(sizeof(int32_t) * B);
        if (!r->fl[i].pos || !r->fl[i].seq || !r->zeros) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    if (send_plans(r)) {
        snprintf(err, errlen, "%s", r->err);
        return -1;
    }
    r->started = true;
    return 0;
}

/* The head's counters since the last batch finished, as batch `serial`'s. With several
 * batches in flight they hold the head's work on all of them since then. */
static void finish_counters(ring *r, uint32_t serial)
{
    span_end(r, serial);
    ring_counters c;
    device_take_counters(&r->dev, &c);
    uint64_t sent = 0, recv = 0;
    for (int i = 0; i < r->n_workers; i++) {
        sent += r->w[i].c.bytes_sent;
        recv += r->w[i].c.bytes_recv;
    }
    c.bytes_sent = sent - r->sent_mark;
    c.bytes_recv = recv - r->recv_mark;
    r->sent_mark = sent;
    r->recv_mark = recv;
    record_counters(r, 0, serial, &c);
}

/* The head's part of batch f from its current round on: its windows, until the batch leaves
 * for the next device (or is through the model: done). */
static int fly(ring *r, flight *f)
{
    char err[512];
    for (int round = f->round;; round++) {
        if (device_compute(&r->dev, round, f->hidden, f->n, f->pos, f->seq))
            return fail(r, "layers failed on this device (positions %d..%d of sequence %d)",
                        f->pos[0], f->pos[f->n - 1], f->seq[0]);
        int first, last;
        plan_range(&r->plan, 0, round, &first, &last);
        if (last == r->plan.n_layer) {
            device_handed_on(&r->dev, round);
            f->done = true;
            finish_counters(r, f->serial);
            return 0;
        }
        if (r->n_workers == 0) {
            device_handed_on(&r->dev, round);
            continue;
        }
        msg_batch b = {.serial = f->serial, .round = (uint32_t)round, .n = (uint32_t)f->n,
                       .wire = (uint8_t)r->o.wire};
        if (hop_send(&r->buf, &r->w[0].c, RM_BATCH, &b, f->hidden, f->pos, f->seq, err,
                     sizeof err))
            return lose(r, 0, "%s", err);
        device_handed_on(&r->dev, round);
        f->round = round;
        return 0;
    }
}

/* Wait for the next batch to come back to the head and take it on: its next round here, or its
 * result. */
static int progress(ring *r)
{
    char err[512];
    frame f;
    int who;
    if (await(r, RM_BATCH, RM_RESULT, -1, &f, &who))
        return -1;
    device_arrived(&r->dev);
    msg_batch back;
    if (proto_decode_batch(&f, r->m->n_embd, &back, err, sizeof err))
        return lose(r, who, "%s: %s", r->w[who].c.name, err);
    flight *fl = NULL;
    for (int i = 0; i < r->n_fl && !fl; i++) {
        flight *c = &r->fl[(r->fl_first + i) % PRIMA_MAX_DEVICES];
        if (!c->done && c->serial == back.serial)
            fl = c;
    }
    bool is_result = f.type == RM_RESULT;
    if (!fl || back.n != (uint32_t)fl->n ||
        (!is_result && (who != r->n_workers - 1 || back.round != (uint32_t)fl->round + 1)))
        return lose(r, who, "%s returned a batch not in flight (%s %u of round %u)",
                    r->w[who].c.name, proto_msg_name(f.type), back.serial, back.round);
    hop_limits lim = {.k = r->plan.k, .n_ctx = r->o.n_ctx, .n_seq = r->o.n_seq,
                      .max_batch = r->o.max_batch};
    if (hop_unpack(&r->buf, &back, &lim, fl->hidden, r->buf.pos, r->buf.seq, err, sizeof err))
        return lose(r, who, "%s: %s", r->w[who].c.name, err);
    if (memcmp(r->buf.pos, fl->pos, sizeof *fl->pos * (size_t)fl->n) ||
        memcmp(r->buf.seq, fl->seq, sizeof *fl->seq * (size_t)fl->n))
        return lose(r, who, "%s returned batch %u with other positions or sequences",
                    r->w[who].c.name, back.serial);
    if (!is_result) {
        fl->round = (int)back.round;
        return fly(r, fl);
    }
    fl->done = true;
    finish_counters(r, fl->serial);
    return 0;
}

/* A refusal of the caller's request: the ring stays usable (a broken ring keeps the reason it
 * broke). */
static int refuse(ring *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(ring *r, const char *fmt, ...)
{
    if (r->broken)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* The ring failed: what was in flight is lost with it (a failover's rebuild starts afresh). */
static int lose_flights(ring *r)
{
    r->n_fl = 0;
    return -1;
}

int ring_max_in_flight(const ring *r)
{
    /* failover replays one batch at a time (ring_eval) */
    return r->fo_set ? 1 : r->plan.n_dev;
}

int ring_in_flight(const ring *r)
{
    return r->n_fl;
}

/* A batch on its way (ring_submit's checks done): room for it is the caller's business. */
static int submit(ring *r, float *hidden, int n, const int32_t *pos, const int32_t *seq)
{
    flight *f = &r->fl[(r->fl_first + r->n_fl) % PRIMA_MAX_DEVICES];
    f->hidden = hidden;
    f->n = n;
    f->round = 0;
    f->serial = r->serial++;
    span_start(r, f->serial);
    f->done = false;
    memcpy(f->pos, pos, sizeof *pos * (size_t)n);
    memcpy(f->seq, seq ? seq : r->zeros, sizeof *f->seq * (size_t)n);
    r->n_fl++;
    return fly(r, f) ? lose_flights(r) : 0;
}

/* A batch's rows name sequences of the ring, which has started: 0, or -1 after a refusal. */
static int check_rows(ring *r, int n, const int32_t *seq)
{
    if (!r->started)
        return refuse(r, "the ring has not started");
    for (int t = 0; seq && t < n; t++)
        if (seq[t] < 0 || seq[t] >= r->o.n_seq)
            return refuse(r, "row %d of the batch is of sequence %d (the ring holds 0..%d)", t,
                          seq[t], r->o.n_seq - 1);
    return 0;
}

int ring_submit(ring *r, float *hidden, int n, const int32_t *pos, const int32_t *seq)
{
    if (r->broken)
        return -1;
    if (n < 1 || n > r->o.max_batch)
        return refuse(r, "batch of %d tokens (at most %d)", n, r->o.max_batch);
    if (r->n_fl >= ring_max_in_flight(r))
        return refuse(r, "%d batches in flight already (at most %d)", r->n_fl,
                      ring_max_in_flight(r));
    return check_rows(r, n, seq) ? -1 : submit(r, hidden, n, pos, seq);
}

int ring_collect(ring *r, float **hidden)
{
    if (r->broken)
        return lose_flights(r);
    if (r->n_fl == 0)
        return refuse(r, "no batch in flight");
    flight *f = &r->fl[r->fl_first];
    while (!r->broken && !f->done)
        if (progress(r))
            break;
    r->fl_first = (r->fl_first + 1) % PRIMA_MAX_DEVICES;
    r->n_fl--;
    if (r->broken)
        return lose_flights(r);
    *hidden = f->hidden;
    return 0;
}

/* One batch (its rows checked) through the whole ring, nothing else in flight (ring_eval and
 * the rebuild after a failover): a big one as micro-batches of even sizes, all in flight at
 * once, so that a prompt's rows go through the devices as through a pipeline. */
static int eval_once(ring *r, float *hidden, int n, const int32_t *pos, const int32_t *seq)
{
    int n_dev = r->plan.n_dev, n_mb = 1;
    if (r->n_workers && n >= PIPE_MIN_ROWS * n_dev) {
        n_mb = n / PIPE_ROWS > n_dev && !r->streams ? n / PIPE_ROWS : n_dev;
        n_mb = n_mb < PRIMA_MAX_DEVICES ? n_mb : PRIMA_MAX_DEVICES;
    }
    for (int b = 0, from = 0; b < n_mb; b++) {
        int size = (n - from) / (n_mb - b);
        if (submit(r, hidden + (size_t)from * (size_t)r->m->n_embd, size, pos + from,
                   seq ? seq + from : NULL))
            return -1;
        from += size;
    }
    for (float *back; r->n_fl;)
        if (ring_collect(r, &back))
            return -1;
    return 0;
}

/* Failover is on and the ring failed because of a worker or a link: the next batch rebuilds it. */
static bool recoverable(const ring *r)
{
    return r->fo_set && !r->finished && r->broken && r->fault_remote;
}

static int kv_edit(ring *r, const msg_kvop *k)
{
    if (r->broken && !recoverable(r))
        return -1;
    if (k->seq < 0 || k->seq >= r->o.n_seq)
        return refuse(r, "KV cache edit of sequence %d (the ring holds 0..%d)", k->seq,
                      r->o.n_seq - 1);
    /* A batch still on its way would meet the edit on some devices and not on others. */
    for (int i = 0; i < r->n_fl; i++) {
        const flight *f = &r->fl[(r->fl_first + i) % PRIMA_MAX_DEVICES];
        for (int t = 0; !f->done && t < f->n; t++)
            if (f->seq[t] == k->seq)
                return refuse(r, "KV cache edit of sequence %d while batch %u with its rows is "
                              "in flight", k->seq, f->serial);
    }
    const ring_layers *l = &r->dev.layers;
    int rc = k->op == KVOP_TRUNCATE ? l->kv_truncate(l->ctx, k->seq, k->p0)
                                    : l->kv_shift(l->ctx, k->seq, k->p0, k->p1, k->delta);
    if (rc) {
        r->fault_remote = false;
        return fail(r, "KV cache edit outside the context (positions %d..%d of sequence %d)",
                    k->p0, k->p1, k->seq);
    }
    if (k->op == KVOP_TRUNCATE && k->p0 < r->kv_len)
        r->kv_len = k->p0;
    if (k->op == KVOP_SHIFT) {
        if (k->p1 >= r->kv_len)
            r->kv_len += k->delta;
        r->kv_shifted = true;
    }
    if (r->broken)
        return 0;   /* the rebuild before the next batch brings every device to kv_len */
    /* Down the ring like a batch: each worker applies it, then passes it on, so it lands between
     * the same two batches on every device without a round trip. */
    char err[512];
    if (r->n_workers && proto_send_kvop(&r->w[0].c, k, err, sizeof err)) {
        if (!r->fo_set)
            return fail(r, "%s", err);
        lose(r, 0, "%s", err);
    }
    return 0;
}

int ring_kv_truncate(ring *r, int seq, int p0)
{
    msg_kvop k = {.op = KVOP_TRUNCATE, .seq = seq, .p0 = p0, .p1 = p0};
    return kv_edit(r, &k);
}

int ring_kv_shift(ring *r, int seq, int p0, int p1, int delta)
{
    msg_kvop k = {.op = KVOP_SHIFT, .seq = seq, .p0 = p0, .p1 = p1, .delta = delta};
    return kv_edit(r, &k);
}

bool ring_can_decode(const ring *r, const sampler *smp)
{
    return r->started && !r->broken && !r->finished && r->plan.decode_alone &&
           r->n_workers == 1 && r->plan.window[0] == 0 && r->n_fl == 0 &&
           sampler_get_params(smp)->repeat_last_n <= PROTO_DECODE_WINDOW;
}

int ring_decode(ring *r, int seq, int pos, int32_t token, int max_steps, sampler *smp,
                int (*on_token)(void *user, int32_t token), void *user, int *n_tokens)
{
    *n_tokens = 0;
    if (!ring_can_decode(r, smp))
        return refuse(r, "this ring cannot decode on one device");
    const sampler_params *sp = sampler_get_params(smp);
    if (seq < 0 || seq >= r->o.n_seq || pos < 0 || max_steps < 1 ||
        (int64_t)pos + max_steps > r->o.n_ctx)
        return refuse(r, "decoding %d steps from position %d of sequence %d does not fit the "
                      "ring", max_steps, pos, seq);
    char err[512];
    msg_decode *q = malloc(sizeof *q);
    if (!q)
        return refuse(r, "out of memory");
    *q = (msg_decode){.serial = r->serial, .max_steps = (uint32_t)max_steps, .seq = seq,
                      .pos = pos, .token = token, .sp = *sp};
    sampler_get_rng(smp, q->rng);
    q->n_window = (uint32_t)sampler_window(smp, q->window);
    span_start(r, r->serial);   /* each step's batch begins as the one before it ends */
    remote *w = &r->w[0];
    int rc = proto_send_decode(&w->c, q, err, sizeof err);
    free(q);
    bool halted = false, done = false;
    uint32_t got = 0, steps;
    if (rc)
        lose(r, 0, "%s", err);
    while (!rc) {
        frame f;
        int who;
        if (await(r, RM_TOKEN, RM_DONE, 0, &f, &who))
            break;
        err[0] = 0;
        if (f.type == RM_DONE) {
            done = proto_decode_done(&f, &steps, err, sizeof err) == 0 && steps == got;
            if (!done)
                lose(r, 0, "%s: %s", w->c.name, err[0] ? err : "DONE does not count its TOKENs");
            break;
        }
        msg_token t;
        if (proto_decode_token(&f, &t, err, sizeof err) || t.serial != r->serial + got ||
            t.token < 0 || t.token >= r->m->n_vocab || got >= (uint32_t)max_steps) {
            lose(r, 0, "%s sent a TOKEN not asked for%s%s", w->c.name, err[0] ? ": " : "", err);
            break;
        }
        got++;
        finish_counters(r, t.serial);
        span_start(r, t.serial + 1);
        if (halted)
            continue;
        sampler_accept(smp, t.token);
        sampler_set_rng(smp, t.rng);
        (*n_tokens)++;
        r->kv_len = pos + *n_tokens;
        if (on_token(user, t.token)) {
            halted = true;
            if (conn_send(&w->c, RM_HALT, NULL, 0, err, sizeof err)) {
                lose(r, 0, "%s", err);
                break;
            }
        }
    }
    r->serial += got;
    /* the steps made beyond the last token kept are undone */
    if (done && (got == (uint32_t)*n_tokens || ring_kv_truncate(r, seq, pos + *n_tokens) == 0))
        return 0;
    return recoverable(r) ? 1 : -1;
}

/* Say bye and wait (briefly) for every worker's last counters and its bye. */
static void farewell(ring *r)
{
    char err[512];
    int pending = 0;
    for (int i = 0; i < r->n_workers; i++)
        if (r->w[i].c.fd >= 0 && conn_send(&r->w[i].c, RM_BYE, NULL, 0, err, sizeof err) == 0)
            pending++;
        else
            r->w[i].bye = true;
    int64_t until = net_now_ns() + (int64_t)PROTO_STALL_MS * 1000000;
    while (pending && net_now_ns() < until) {
        struct pollfd p[PRIMA_MAX_DEVICES];
        for (int i = 0; i < r->n_workers; i++)
            p[i] = (struct pollfd){.fd = r->w[i].bye ? -1 : conn_wait_fd(&r->w[i].c),
                                   .events = POLLIN};
        if (poll(p, (nfds_t)r->n_workers, PROTO_PING_MS) <= 0)
            continue;
        for (int i = 0; i < r->n_workers; i++) {
            if (!p[i].revents)
                continue;
            frame f;
            int rc = conn_recv(&r->w[i].c, &f, 0, err, sizeof err);
            if (rc == 1)
                continue;
            if (rc < 0 || f.type == RM_BYE || handle_common(r, i, &f) <= 0) {
                r->w[i].bye = true;
                pending--;
            }
        }
    }
}

void ring_finish(ring *r)
{
    if (r->finished)
        return;
    r->finished = true;
    if (r->hb_running) {
        heartbeat_stop(&r->hb);
        r->hb_running = false;
    }
    if (!r->broken && r->started)
        farewell(r);
    fail(r, "the ring has finished");
}

void ring_close(ring *r)
{
    if (!r)
        return;
    ring_finish(r);
    if (r->o.verbose && r->started) {
        for (int d = 0; d < r->plan.n_dev; d++) {
            char line[400];
            ring_counters_format(&r->totals[d], line, sizeof line);
            log_line(r->o.verbose, "ring: ", "total device %d (%u batches): %s", d,
                     r->serial - r->count_from, line);
        }
    }
    for (int i = 0; i < r->n_workers; i++)
        if (r->w[i].c.fd >= 0)
            conn_close(&r->w[i].c);
    if (r->dev_init)
        device_free(&r->dev);
    hop_buffers_free(&r->buf);
    for (int i = 0; i < PRIMA_MAX_DEVICES; i++) {
        free(r->fl[i].pos);
        free(r->fl[i].seq);
    }
    free(r->zeros);
    free(r->in_copy);
    free(r->replay);
    free(r->replay_pos);
    free(r->w);
    free(r->hb_conns);
    free(r->totals);
    free(r);
}

/* ---- failover ---- */

int ring_set_failover(ring *r, const ring_failover *f, char *err, size_t errlen)
{
    if (r->o.n_seq > 1) {
        snprintf(err, errlen, "failover keeps one sequence: it is not available with %d "
                 "sequences on the ring", r->o.n_seq);
        return -1;
    }
    size_t rows = (size_t)r->o.max_batch * (size_t)r->m->n_embd;
    r->in_copy = malloc(rows * sizeof *r->in_copy);
    r->replay = malloc(rows * sizeof *r->replay);
    r->replay_pos = malloc((size_t)r->o.max_batch * sizeof *r->replay_pos);
    if (!r->in_copy || !r->replay || !r->replay_pos) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    r->fo = *f;
    r->fo_set = true;
    return 0;
}

static void note_gone(ring *r, const char *addr)
{
    for (int g = 0; g < r->n_gone; g++)
        if (!strcmp(r->gone[g], addr))
            return;
    if (r->n_gone < PRIMA_MAX_DEVICES)
        snprintf(r->gone[r->n_gone++], sizeof r->gone[0], "%s", addr);
}

static void forget_gone(ring *r, const char *addr)
{
    for (int g = 0; g < r->n_gone; g++)
        if (!strcmp(r->gone[g], addr)) {
            memmove(r->gone[g], r->gone[g + 1], sizeof r->gone[0] * (size_t)(r->n_gone - g - 1));
            r->n_gone--;
            return;
        }
}

/* Greet worker i again; a worker still ending the session the head just dropped refuses as
 * busy for a moment, so that is retried (for about a second). */
static int greet_again(ring *r, int i)
{
    for (int t = 0;; t++) {
        r->broken = false;
        r->busy_refusal = false;
        if (greet(r, i) == 0)
            return 0;
        if (r->w[i].c.fd >= 0)
            conn_close(&r->w[i].c);
        if (!r->busy_refusal || t == 20)
            return -1;
        poll(NULL, 0, 50);
    }
}

static void append(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *out, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(out);
    if (len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + len, cap - len, fmt, ap);
    va_end(ap);
}

/* What a greeting's message says after naming the device ("device 2 (a:p): " or "device 2: "). */
static const char *reason_of(const char *msg)
{
    const char *p = msg;
    if (strncmp(p, "device ", 7))
        return msg;
    p += 7;
    while (*p >= '0' && *p <= '9')
        p++;
    if (p[0] == ' ' && p[1] == '(') {
        const char *close = strchr(p, ')');
        p = close ? close + 1 : p;
    }
    if (*p == ':')
        p++;
    return *p == ' ' ? p + 1 : p;
}

/* Greet the workers of addr[0..n) (the ring's order; old[i] their device numbers before, 0 for
 * newcomers), plan over those that answer, start them and bring every device's KV cache to
 * kv_len by running the inputs of those positions through the new ring. The line on the log
 * starts with `rejoin` or (a failover) "lost" and `lost_in` (the device whose failure was seen,
 * or ""), the greetings that failed, and `note`. 0 with the ring ready (or broken again by a
 * worker: the caller tries once more), -1 when it cannot go on. */
static int rebuild(ring *r, char addr[][NET_HOST_MAX + 8], const int *old, int n,
                   const char *rejoin, const char *lost_in, const char *note)
{
    int64_t t0 = net_now_ns();
    char lost[768], what[1200], err[512];
    snprintf(lost, sizeof lost, "%s", lost_in);
    heartbeat_set(&r->hb, r->hb_conns, 0);
    for (int i = 0; i < PRIMA_MAX_DEVICES; i++)
        if (r->w[i].c.fd >= 0)
            conn_close(&r->w[i].c);
    r->n_workers = 0;
    for (int i = 0; i < n; i++) {
        remote *w = &r->w[r->n_workers];
        memset(&w->welcome, 0, sizeof w->welcome);
        w->bye = false;
        snprintf(w->addr, sizeof w->addr, "%s", addr[i]);
        bool bad = net_parse_addr(w->addr, w->host, sizeof w->host, &w->port, err, sizeof err);
        if (bad || greet_again(r, r->n_workers)) {
            const char *why = bad ? err : reason_of(r->err);
            if (old[i])
                append(lost, sizeof lost, "%sdevice %d (%s): %s", lost[0] ? "; " : "", old[i],
                       addr[i], why);
            else
                append(lost, sizeof lost, "%s%s: %s", lost[0] ? "; " : "", addr[i], why);
            note_gone(r, addr[i]);
            continue;
        }
        forget_gone(r, addr[i]);
        r->hb_conns[r->n_workers] = &w->c;
        heartbeat_set(&r->hb, r->hb_conns, ++r->n_workers);
    }
    if (rejoin)
        snprintf(what, sizeof what, "%s%s%s", rejoin, lost[0] ? "; lost " : "", lost);
    else
        snprintf(what, sizeof what, "lost %s%s", lost[0] ? lost : "no device", note);
    r->broken = r->fault_remote = false;
    r->o.n_lw = r->o.n_gpu_layers = 0;   /* given by hand for the devices that were there */
    r->o.planner = r->fo.planner;
    if (make_plan(r)) {
        snprintf(err, sizeof err, "%s", r->err);
        r->broken = false;
        return fail(r, "%s; no plan fits the %d device(s) left: %s", what, r->n_workers + 1,
                    err);
    }
    bool *owns = calloc((size_t)r->m->n_layer, sizeof *owns);
    if (!owns)
        return fail(r, "out of memory");
    plan_owned_layers(&r->plan, 0, owns);
    if (r->dev_init)
        device_free(&r->dev);
    r->dev_init = false;
    ring_layers head;
    int rc = r->fo.reown(r->fo.ctx, owns, &head, err, sizeof err);
    free(owns);
    if (rc || start_head(r, &head, err, sizeof err))
        return fail(r, "failover: %s", err);
    r->sent_mark = r->recv_mark = 0;
    if (send_plans(r))
        return 0;
    for (int p = 0; p < r->kv_len;) {
        int nb = r->kv_len - p < r->o.max_batch ? r->kv_len - p : r->o.max_batch;
        for (int t = 0; t < nb; t++)
            r->replay_pos[t] = p + t;
        if (r->fo.inputs(r->fo.ctx, p, nb, r->replay)) {
            r->fault_remote = false;
            return fail(r, "failover: the inputs of positions %d..%d are not available", p,
                        p + nb - 1);
        }
        if (eval_once(r, r->replay, nb, r->replay_pos, NULL))
            return r->fault_remote ? 0 : -1;
        p += nb;
    }
    if (r->fo.log) {
        char windows[320] = "";
        int n_gpu = 0;
        for (int d = 0; d < r->plan.n_dev; d++) {
            append(windows, sizeof windows, "%s%d", d ? "," : "", r->plan.window[d]);
            n_gpu += r->plan.gpu_layers[d];
        }
        for (int d = 0; n_gpu && d < r->plan.n_dev; d++)
            append(windows, sizeof windows, "%s%d", d ? "," : " with GPU layers ",
                   r->plan.gpu_layers[d]);
        fprintf(r->fo.log, "prima: %s; new plan: %d device(s), windows %s, %d round(s); "
                           "%d position(s) rebuilt%s; recovered in %.3f s\n",
                what, r->plan.n_dev, windows, r->plan.k,
                r->kv_len, r->kv_shifted ? " (after a context shift: not exact)" : "",
                (double)(net_now_ns() - t0) * 1e-9);
        fflush(r->fo.log);
    }
    return 0;
}

/* The ring failed on a worker: drop the worker whose link failed (when the failure names one),
 * keep the others in order, and rebuild. */
static int recover(ring *r)
{
    char addr[PRIMA_MAX_DEVICES][NET_HOST_MAX + 8], lost[600] = "", note[640] = "";
    int old[PRIMA_MAX_DEVICES], n = 0;
    /* Where the failure names the worker, it is the one lost; otherwise (a worker reporting a
     * broken link of its own) the greetings find out which. */
    if (r->fault_worker >= 0)
        snprintf(lost, sizeof lost, "%s", r->err);
    else
        snprintf(note, sizeof note, " (first seen as: %s)", r->err);
    for (int i = 0; i < r->n_workers; i++) {
        if (i == r->fault_worker) {
            note_gone(r, r->w[i].addr);
            continue;
        }
        old[n] = i + 1;
        snprintf(addr[n++], sizeof addr[0], "%s", r->w[i].addr);
    }
    r->fault_worker = -1;
    return rebuild(r, addr, old, n, NULL, lost, note);
}

int ring_eval(ring *r, float *hidden, int n, const int32_t *pos, const int32_t *seq)
{
    if (r->broken && !recoverable(r))
        return -1;
    if (r->n_fl)
        return refuse(r, "ring_eval with %d batch(es) in flight: collect them first", r->n_fl);
    if (n < 1 || n > r->o.max_batch) {
        r->fault_remote = false;
        return fail(r, "batch of %d tokens (at most %d)", n, r->o.max_batch);
    }
    if (check_rows(r, n, seq))
        return -1;
    size_t bytes = sizeof *hidden * (size_t)n * (size_t)r->m->n_embd;
    if (r->fo_set)
        memcpy(r->in_copy, hidden, bytes);
    /* Each try that fails on a worker loses it (or finds every worker alive and fails on this
     * device), so the tries are bounded by the ring's size. */
    for (int tries = 0;; tries++) {
        if (!r->broken && eval_once(r, hidden, n, pos, seq) == 0) {
            r->kv_len = pos[n - 1] + 1;
            return 0;
        }
        if (!recoverable(r))
            return -1;
        if (tries > PRIMA_MAX_DEVICES) {
            r->fault_remote = false;
            return -1;
        }
        if (recover(r))
            return -1;
        memcpy(hidden, r->in_copy, bytes);
    }
}

int ring_rejoin(ring *r, const char *workers)
{
    if (!r->fo_set || !r->started || r->finished || (r->broken && !recoverable(r)))
        return r->fo_set ? -1 : 0;
    char addr[PRIMA_MAX_DEVICES][NET_HOST_MAX + 8], joined[512] = "";
    int old[PRIMA_MAX_DEVICES] = {0}, n = 0, extra = 0;
    for (; n < r->n_workers; n++) {
        old[n] = n + 1;
        snprintf(addr[n], sizeof addr[0], "%s", r->w[n].addr);
    }
    /* The candidates: the workers lost so far, then those listed; only those that accept a
     * connection at once are worth a new plan. */
    char cand[2 * PRIMA_MAX_DEVICES][NET_HOST_MAX + 8];
    int nc = 0;
    for (int g = 0; g < r->n_gone; g++)
        snprintf(cand[nc++], sizeof cand[0], "%s", r->gone[g]);
    for (const char *p = workers; p && *p && nc < 2 * PRIMA_MAX_DEVICES;) {
        size_t len = strcspn(p, ",");
        snprintf(cand[nc++], sizeof cand[0], "%.*s", (int)(len < sizeof cand[0] ? len : sizeof cand[0] - 1), p);
        p += len + (p[len] == ',');
    }
    for (int c = 0; c < nc && n < PRIMA_MAX_DEVICES - 1; c++) {
        bool have = false;
        for (int i = 0; i < n; i++)
            have |= !strcmp(addr[i], cand[c]);
        char host[NET_HOST_MAX], err[256];
        int port, fd;
        if (have || net_parse_addr(cand[c], host, sizeof host, &port, err, sizeof err) ||
            (fd = net_connect(host, port, PROTO_PING_MS / 2, err, sizeof err)) < 0)
            continue;
        close(fd);
        snprintf(addr[n++], sizeof addr[0], "%.*s", (int)sizeof addr[0] - 1, cand[c]);
        append(joined, sizeof joined, "%s%s", extra++ ? ", " : "", cand[c]);
    }
    if (!extra)
        return 0;
    char what[600];
    snprintf(what, sizeof what, "rejoin of %s", joined);
    /* A worker failing during the rebuild leaves the ring to the next batch's failover. */
    return rebuild(r, addr, old, n, what, "", "") ? -1 : r->n_workers;
}
