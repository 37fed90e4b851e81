/* transfer.c — sending stores the chunks they ask for (transfer.h). */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/net.h"
#include "cluster/transfer.h"

/* What one worker asked for, and how far the holder is through it. */
typedef struct xfer {
    msg_want q;
    uint32_t range, next;          /* the next chunk: q.first[range] + next */
    uint64_t sent, total;
    int64_t t0, shown;
    bool asked;
} xfer;

static void show(const transfer_hooks *h, int i, xfer *x, bool last)
{
    int64_t now = net_now_ns();
    /* done == total is said once, at the end */
    if (!h->progress || (!last && (now - x->shown < 250000000 || x->sent >= x->total)))
        return;
    x->shown = now;
    h->progress(h->ctx, i, x->sent, last ? x->sent : x->total,
                x->asked ? (double)(now - x->t0) * 1e-9 : 0.0);
}

static int failure(int *failed, int i, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int failure(int *failed, int i, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    *failed = i;
    return -1;
}

/* One frame from link i. */
static int take(conn *c, int i, xfer *t, bool *active, const manifest *mf,
                const transfer_hooks *h, int *failed, char *err, size_t errlen)
{
    frame f;
    char e[512];
    int got = conn_recv(c, &f, 0, e, sizeof e);
    if (got < 0)
        return failure(failed, i, err, errlen, "%s", e);
    if (got == 1)
        return 0;
    if (f.type != RM_WANT) {
        int o = h->other(h->ctx, i, &f);
        if (o < 0) {
            err[0] = 0;
            *failed = -1;
            return -1;
        }
        if (o > 0)
            return 0;
    }
    if (f.type != RM_WANT || t->range < t->q.n)
        return failure(failed, i, err, errlen, "%s sent an unexpected %s", c->name,
                       proto_msg_name(f.type));
    if (proto_decode_want(&f, mf->n_chunks, &t->q, e, sizeof e))
        return failure(failed, i, err, errlen, "%s: %s", c->name, e);
    t->range = t->next = 0;
    if (!t->asked) {
        t->asked = true;
        t->t0 = net_now_ns();
    }
    t->total = t->sent + t->q.bytes;
    if (t->q.n == 0) {
        active[i] = false;
        show(h, i, t, true);
    }
    return 0;
}

int transfer_serve(conn *const *links, bool *active, int n, const manifest *mf,
                   const uint8_t *map, const transfer_hooks *h, int *failed, char *err,
                   size_t errlen)
{
    *failed = -1;
    xfer *x = calloc((size_t)n, sizeof *x);
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    int rc = 0;
    if (!x || !p)
        rc = failure(failed, -1, err, errlen, "out of memory");
    for (;;) {
        bool any = false, pending = false;
        for (int i = 0; i < n && rc == 0; i++) {
            any |= active[i];
            pending |= active[i] && x[i].range < x[i].q.n;
        }
        if (!any || rc)
            break;
        /* a chunk to each link with chunks to send */
        for (int i = 0; i < n && rc == 0; i++) {
            xfer *t = &x[i];
            if (!active[i] || t->range >= t->q.n)
                continue;
            uint32_t c = t->q.first[t->range] + t->next, len = manifest_chunk_len(mf, c);
            char e[512];
            if (proto_send_chunk(links[i], c, map + (uint64_t)c * mf->chunk_bytes, len, e,
                                 sizeof e))
                rc = failure(failed, i, err, errlen, "%s", e);
            t->sent += len;
            if (++t->next == t->q.count[t->range]) {
                t->range++;
                t->next = 0;
            }
            show(h, i, t, false);
        }
        for (int i = 0; i < n; i++)
            p[i] = (struct pollfd){.fd = active[i] ? links[i]->fd : -1, .events = POLLIN};
        if (rc == 0 && poll(p, (nfds_t)n, pending ? 0 : PROTO_PING_MS) < 0 && errno != EINTR)
            rc = failure(failed, -1, err, errlen, "poll: %s", strerror(errno));
        for (int i = 0; i < n && rc == 0; i++)
            if (p[i].revents)
                rc = take(links[i], i, &x[i], active, mf, h, failed, err, errlen);
        int64_t now = net_now_ns();
        for (int i = 0; i < n && rc == 0; i++)
            if (active[i] && now - links[i]->last_seen_ns > (int64_t)PROTO_DEAD_MS * 1000000)
                rc = failure(failed, i, err, errlen, "%s stopped responding (nothing for %d s)",
                             links[i]->name, PROTO_DEAD_MS / 1000);
    }
    free(x);
    free(p);
    return rc;
}

void transfer_peers(int n, const manifest *mf, const uint8_t *need, const uint8_t *have,
                    int *from, msg_want *want)
{
    size_t nc = mf->n_chunks;
    for (int i = 0; i < n; i++) {
        const uint8_t *ni = need + (size_t)i * nc;
        uint32_t best = 0;
        from[i] = -1;
        memset(want + i, 0, sizeof *want);
        for (int j = 0; j < n; j++) {
            uint32_t k = 0;
            for (size_t c = 0; j != i && c < nc; c++)
                k += ni[c] && have[(size_t)j * nc + c];
            if (k > best) {
                best = k;
                from[i] = j;
            }
        }
        if (from[i] < 0)
            continue;
        const uint8_t *hj = have + (size_t)from[i] * nc;
        msg_want *m = want + i;
        for (uint32_t c = 0; c < nc; c++) {
            if (!ni[c] || !hj[c])
                continue;
            if (m->n && m->first[m->n - 1] + m->count[m->n - 1] == c)
                m->count[m->n - 1]++;
            else if (m->n < PROTO_FROM_MAX)
                m->first[m->n++] = c, m->count[m->n - 1] = 1;
            else
                continue;
            m->bytes += manifest_chunk_len(mf, c);
        }
    }
}
