/* worker_store.c — a worker's transfers into its store (worker_impl.h, store.h): the model's
 * manifest and header, a plan's chunks from the head and from other workers, checked chunk by
 * chunk; and chunks served to other workers. */
#include <stdlib.h>
#include <string.h>

#include "cluster/chunk_serve.h"
#include "cluster/worker_impl.h"
#include "util/sysmem.h"

/* ---- fetching into the store ---- */

enum { ASK_HEAD = 1, ASK_PEER = 2 };

static void load_model(wsession *s);

/* Ask for what is still missing of s->mark, or, when nothing is, say so (an empty WANT) and go
 * on: after the header, load the model and welcome the head again. */
static void want_more(wsession *s)
{
    worker *w = s->w;
    msg_want m;
    uint32_t ranges[2 * PROTO_WANT_MAX];
    /* what another worker is sending is not asked of the head (unless it fails to come) */
    uint8_t *want = malloc(s->n_chunks);
    if (!want) {
        worker_fail_session(s, "out of memory");
        return;
    }
    for (uint32_t c = 0; c < s->n_chunks; c++)
        want[c] = s->mark[c] && s->asked[c] != ASK_PEER;
    int n = store_missing(w->o.store, want, ranges, PROTO_WANT_MAX, &m.bytes);
    free(want);
    m.n = (uint32_t)n;
    s->awaiting = 0;
    for (int i = 0; i < n; i++) {
        m.first[i] = ranges[2 * i];
        m.count[i] = ranges[2 * i + 1];
        memset(s->asked + m.first[i], ASK_HEAD, m.count[i]);
        s->awaiting += m.count[i];
    }
    if (n == 0 && s->peer_left)
        return;   /* the empty WANT (done) waits for the other worker's chunks */
    char err[512];
    if (proto_send_want(&s->ctrl, &m, err, sizeof err)) {
        worker_end_session(s, "%s", err);
        return;
    }
    if (n)
        return;
    s->fetching = false;
    double secs = (double)(net_now_ns() - s->fetch_t0) * 1e-9;
    if (s->fetched)
        worker_log(w, "store: received %.1f MiB in %.2f s (%.1f MB/s), %.1f MiB of it from another "
             "worker", (double)s->fetched / (1 << 20), secs,
             secs > 0 ? (double)s->fetched / secs * 1e-6 : 0.0, (double)s->from_peer / (1 << 20));
    else
        worker_log(w, "store: holds every chunk asked for: nothing to fetch");
    s->fetched = s->from_peer = 0;
    if (s->need_manifest)
        load_model(s);
}

/* Start fetching the chunks marked in s->mark (set by the caller): at once from the head (the
 * header), or, after a FETCH (have), once the head has said in FROM which other worker holds
 * some of them. */
static void fetch_marked(wsession *s, bool have)
{
    uint64_t bytes = 0;
    uint32_t r[2];
    store_missing(s->w->o.store, s->mark, r, 1, &bytes);
    char err[512];
    if (store_reserve(s->w->o.store, bytes, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    memset(s->asked, 0, s->n_chunks);
    s->fetching = true;
    s->fetched = 0;
    s->fetch_t0 = net_now_ns();
    if (!have) {
        want_more(s);
        return;
    }
    uint8_t *held = malloc(s->n_chunks);
    for (uint32_t c = 0; held && c < s->n_chunks; c++)
        held[c] = store_has(s->w->o.store, c);
    if (!held)
        worker_fail_session(s, "out of memory");
    else if (proto_send_have(&s->ctrl, held, s->n_chunks, err, sizeof err))
        worker_end_session(s, "%s", err);
    else
        s->want_from = true;
    free(held);
}

/* The chunks asked of another worker stop coming: the head is asked for them instead. */
void worker_store_peer_gone(wsession *s, const char *why)
{
    worker_log(s->w, "store: %s: %s; asking the head for its %u chunk(s) left", s->fetch.name, why,
         s->peer_left);
    for (uint32_t c = 0; c < s->n_chunks; c++)
        if (s->asked[c] == ASK_PEER)
            s->asked[c] = 0;
    s->peer_left = 0;
    conn_close(&s->fetch);
    s->has_fetch = false;
    if (s->awaiting == 0)
        want_more(s);
}

/* FROM: the ranges another worker holds, asked of it on a link of their own; the rest of the
 * head. */
void worker_store_from(wsession *s, const frame *f)
{
    worker *w = s->w;
    char err[512];
    msg_from m;
    if (!s->want_from) {
        worker_fail_session(s, "unexpected FROM");
        return;
    }
    if (proto_decode_from(f, s->n_chunks, &m, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    s->want_from = false;
    if (m.want.n) {
        char name[128];
        snprintf(name, sizeof name, "the worker at %.100s:%u", m.host, m.port);
        msg_hello h = {.role = ROLE_FETCHER};
        memcpy(h.identity, w->b->model->identity, sizeof h.identity);
        if (conn_dial(&s->fetch, m.host, (int)m.port, name, w->o.key,
                      net_now_ns() + (int64_t)PROTO_DEAD_MS * 1000000, err, sizeof err) == 0) {
            s->has_fetch = true;
            for (uint32_t i = 0; i < m.want.n; i++)
                for (uint32_t c = m.want.first[i]; c < m.want.first[i] + m.want.count[i]; c++)
                    if (s->mark[c] && !store_has(w->o.store, c)) {
                        s->asked[c] = ASK_PEER;
                        s->peer_left++;
                    }
            if (proto_send_hello(&s->fetch, &h, err, sizeof err) ||
                proto_send_want(&s->fetch, &m.want, err, sizeof err)) {
                worker_store_peer_gone(s, err);
                return;   /* peer_gone asked the head */
            }
            s->fetch.max_data = 0;
        } else {
            worker_log(w, "store: %s", err);
        }
    }
    want_more(s);
}

/* Per-chunk records for the manifest mf. */
static int fetch_init(wsession *s, const manifest *mf)
{
    free(s->mark);
    s->n_chunks = mf->n_chunks;
    s->mark = calloc(3 * (size_t)mf->n_chunks, 1);
    s->asked = s->mark + mf->n_chunks;
    s->failed = s->asked + mf->n_chunks;
    if (!s->mark) {
        worker_fail_session(s, "out of memory");
        return -1;
    }
    return 0;
}

void worker_store_manifest(wsession *s, const frame *f)
{
    char err[512];
    if (!s->need_manifest || s->fetching || s->mark) {
        worker_fail_session(s, "unexpected MANIFEST");
        return;
    }
    if (store_take_manifest(s->w->o.store, s->identity, f->body, f->len, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    const manifest *mf = store_opened(s->w->o.store);
    if (fetch_init(s, mf))
        return;
    manifest_mark(mf, 0, mf->header_bytes, s->mark);
    fetch_marked(s, false);
}

void worker_store_fetch(wsession *s, const frame *f)
{
    msg_plan mp;
    ring_plan p;
    if (s->planned || s->need_manifest || s->fetching || s->want_from) {
        worker_fail_session(s, "unexpected FETCH");
        return;
    }
    if (worker_plan_from_msg(s, f, &mp, &p))
        return;
    const ring_model *m = s->w->b->model;
    if (!s->mark && fetch_init(s, m->manifest))
        return;
    store_plan_chunks(m, &p, (int)mp.rank, s->mark);
    fetch_marked(s, true);
}

void worker_store_chunk(wsession *s, const frame *f, bool from_peer)
{
    uint32_t i;
    const uint8_t *data;
    size_t len;
    char err[512];
    if (proto_decode_chunk(f, &i, &data, &len, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    int want = from_peer ? ASK_PEER : ASK_HEAD;
    if (!s->fetching || i >= s->n_chunks || s->asked[i] != want) {
        if (from_peer)
            worker_store_peer_gone(s, "it sent a chunk not asked for");
        else
            worker_fail_session(s, "CHUNK %u was not asked for", i);
        return;
    }
    s->asked[i] = 0;
    if (from_peer)
        s->peer_left--;
    else
        s->awaiting--;
    int rc = store_put(s->w->o.store, i, data, len, err, sizeof err);
    if (rc < 0) {
        worker_fail_session(s, "%s", err);
        return;
    }
    if (rc > 0) {
        /* Asked again by the next WANT; a holder that keeps sending wrong bytes holds another
         * file than its manifest describes. */
        worker_log(s->w, "store: chunk %u failed its hash: fetching it again", i);
        if (++s->failed[i] >= 3) {
            worker_fail_session(s, "chunk %u failed its hash 3 times: the head's file is not the one "
                         "its manifest describes", i);
            return;
        }
    } else {
        s->fetched += len;
        s->from_peer += from_peer ? len : 0;
    }
    if (from_peer && s->peer_left == 0) {   /* data (inside its buffer) is no longer used */
        conn_close(&s->fetch);
        s->has_fetch = false;
    }
    if (s->awaiting == 0 && s->peer_left == 0)
        want_more(s);
}


/* Before a plan is applied: every chunk it needs is here and verified (never compute with
 * another). 0, or -1 after failing the session. */
int worker_store_plan_held(wsession *s, const ring_plan *p)
{
    const ring_model *m = s->w->b->model;
    if (!s->mark && fetch_init(s, m->manifest))
        return -1;
    store_plan_chunks(m, p, (int)s->mp.rank, s->mark);
    uint64_t lack = 0;
    uint32_t r[2];
    if (store_missing(s->w->o.store, s->mark, r, 1, &lack)) {
        worker_fail_session(s, "the plan needs %.1f MiB this device's store does not hold (no "
                            "FETCH before the PLAN)", (double)lack / (1 << 20));
        return -1;
    }
    return 0;
}

static void chunk_served(void *ctx)
{
    worker *w = ctx;
    pthread_mutex_lock(&w->lock);
    if (--w->greeters == 0)
        pthread_cond_broadcast(&w->idle);
    pthread_mutex_unlock(&w->lock);
}

/* Another worker of this session fetching chunks this one holds (the head said so in FROM). */
void worker_store_serve_chunks(wsession *s, newcomer *n)
{
    worker *w = s->w;
    if (!w->o.store || !w->b || memcmp(n->h.identity, w->b->model->identity, PROTO_ID_BYTES)) {
        worker_refuse(w, n, "refused: this worker keeps no chunks of that model");
        return;
    }
    char err[512];
    pthread_mutex_lock(&w->lock);
    w->greeters++;   /* a thread that refers to w: worker_run waits for it */
    pthread_mutex_unlock(&w->lock);
    worker_log(w, "store: sending chunks to the worker at %s", n->peer);
    if (chunk_serve_start(&n->c, store_model_path(w->o.store), w->b->model->manifest,
                          chunk_served, w, err, sizeof err)) {
        worker_log(w, "store: %s", err);
        chunk_served(w);
    }
    free(n);
}

/* WELCOME: this device's model and memory; with a store, the flag that says so, and, before
 * the model is here, the request for its manifest. */
int worker_store_welcome(wsession *s, char *err, size_t errlen)
{
    worker *w = s->w;
    msg_welcome wm = {.instance = w->instance, .threads = (uint32_t)w->o.threads,
                      .mem_budget = sysmem_budget(), .store = w->o.store ? WELCOME_STORE : 0};
    if (s->need_manifest) {
        wm.store |= WELCOME_NEED_MANIFEST;
        memcpy(wm.identity, s->identity, sizeof wm.identity);
    } else {
        const ring_model *m = w->b->model;
        wm.n_layer = (uint32_t)m->n_layer;
        wm.n_embd = (uint32_t)m->n_embd;
        memcpy(wm.identity, m->identity, sizeof wm.identity);
    }
    return proto_send_welcome(&s->ctrl, &wm, err, errlen);
}

/* The header has arrived: make the store's file computable, and welcome the head again. */
static void load_model(wsession *s)
{
    worker *w = s->w;
    char err[512];
    const ring_backend *b = NULL;
    if (w->o.load(w->o.load_ctx, store_model_path(w->o.store), store_opened(w->o.store),
                  &b, err, sizeof err)) {
        worker_fail_session(s, "%s", err);
        return;
    }
    w->b = b;
    s->need_manifest = false;
    if (memcmp(b->model->identity, s->identity, sizeof s->identity)) {
        worker_fail_session(s, "the model loaded from the store is not the head's");
        return;
    }
    if (worker_store_welcome(s, err, sizeof err))
        worker_end_session(s, "%s", err);
}

/* With a store: the head's model loaded if the store holds its header, else none (the session
 * then asks the head for it). */
void worker_store_open(worker *w, const uint8_t *id)
{
    if (w->b && !memcmp(w->b->model->identity, id, PROTO_ID_BYTES))
        return;
    if (w->b)
        w->o.unload(w->o.load_ctx);
    w->b = NULL;
    uint32_t damaged = 0;
    const manifest *mf = store_find(w->o.store, id, &damaged);
    if (!mf)
        return;
    char hex[16];
    worker_id_hex(id, hex);
    if (damaged)
        worker_log(w, "store: model %s: %u chunk(s) failed their hash: forgotten, to be fetched again",
             hex, damaged);
    uint8_t *mark = calloc(mf->n_chunks, 1);
    uint32_t r[2];
    if (!mark)
        return;
    manifest_mark(mf, 0, mf->header_bytes, mark);
    bool header = store_missing(w->o.store, mark, r, 1, NULL) == 0;
    free(mark);
    char err[512];
    const ring_backend *b;
    if (!header)
        return;
    if (w->o.load(w->o.load_ctx, store_model_path(w->o.store), mf, &b, err, sizeof err))
        worker_log(w, "store: model %s: %s", hex, err);
    else
        w->b = b;
}

/* An admitted newcomer while no session is in progress: a head to serve, or a refusal. */
