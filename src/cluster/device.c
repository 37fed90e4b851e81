/* device.c — one ring device's work (device.h): which rounds visit it, its window's compute,
 * the pager's release and prefetch around it, and the counters of where the time went. Head and
 * workers share it, so both sides of the ring count the same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cluster/device.h"

bool device_visits(const ring_plan *p, int rank, int round)
{
    if (round >= p->k)
        return false;
    int first, last;
    plan_range(p, rank, round, &first, &last);
    return first < p->n_layer;
}

/* Layers [first, last) read from the file (not those a GPU holds) as file ranges; returns how
 * many. */
static int layer_ranges(const device *d, int first, int last, byte_range *out)
{
    int n = 0;
    for (int il = first; il < last; il++)
        if (!d->layers.in_vram || !d->layers.in_vram(d->layers.ctx, il))
            out[n++] = (byte_range){d->m->layer_begin[il], d->m->layer_end[il]};
    return n;
}

/* Where the streamed layers of [first, last) begin: last when all are resident. */
static int stream_start(const device *d, int first, int last)
{
    return d->cut < first ? first : d->cut < last ? d->cut : last;
}

static bool window_empty(const device *d, int round)
{
    int first, last;
    plan_range(&d->plan, d->rank, round, &first, &last);
    return first == last;
}

/* The next round, after `round`, in which this device computes something: later in this batch,
 * else its first window of the next batch. -1 when it computes nothing at all. */
static int next_window(const device *d, int round)
{
    for (int r = round + 1; r < d->plan.k; r++)
        if (!window_empty(d, r))
            return r;
    for (int r = 0; r <= round && r < d->plan.k; r++)
        if (!window_empty(d, r))
            return r;
    return -1;
}

/* The part of layer il this device streams (drops once computed, reads again next token): none
 * before the cut, the tail past the resident prefix in the cut's own layer, all of it after
 * (an empty range when none, or when a GPU holds the layer). */
static byte_range streamed_part(const device *d, int il)
{
    uint64_t b = d->m->layer_begin[il], e = d->m->layer_end[il];
    if (il < d->cut || (d->layers.in_vram && d->layers.in_vram(d->layers.ctx, il)))
        return (byte_range){e, e};
    if (il == d->cut && d->cut_offset > b)
        b = d->cut_offset;
    return (byte_range){b, e};
}

/* What to read ahead of computing window `round`: its resident layers and the cut layer's
 * resident prefix (already in memory after the first token, so the pager skips them), then
 * the first streamed bytes that fit the room. At most last - first + 1 ranges. */
static int fetch_ranges(const device *d, int round, byte_range *out)
{
    int first, last;
    plan_range(&d->plan, d->rank, round, &first, &last);
    int split = stream_start(d, first, last);
    int n = layer_ranges(d, first, split, out);
    uint64_t room = d->room_bytes;
    for (int il = split; il < last && room > 0; il++) {
        byte_range s = streamed_part(d, il);
        if (s.begin == s.end)
            continue;
        if (s.begin > d->m->layer_begin[il])
            out[n++] = (byte_range){d->m->layer_begin[il], s.begin};
        uint64_t len = s.end - s.begin < room ? s.end - s.begin : room;
        out[n++] = (byte_range){s.begin, s.begin + len};
        room -= len;
    }
    return n;
}

/* The largest of the layers device `rank` owns (0: none). */
static uint64_t largest_owned(const ring_model *m, const ring_plan *p, int rank)
{
    uint64_t largest = 0;
    for (int r = 0; r < p->k; r++) {
        int first, last;
        plan_range(p, rank, r, &first, &last);
        for (int il = first; il < last; il++) {
            uint64_t b = m->layer_end[il] - m->layer_begin[il];
            largest = b > largest ? b : largest;
        }
    }
    return largest;
}

int device_streamed_layers(const ring_model *m, const ring_plan *p, int rank,
                           enum release_policy policy, uint64_t mem_budget, int *cut,
                           uint64_t *keep)
{
    uint64_t owned = rank == 0 ? m->head_bytes : 0;
    int windows = 0, n_owned = 0, first_owned = p->n_layer;
    for (int r = 0; r < p->k; r++) {
        int first, last;
        plan_range(p, rank, r, &first, &last);
        windows += first < last;
        for (int il = first; il < last; il++) {
            owned += m->layer_end[il] - m->layer_begin[il];
            n_owned++;
            first_owned = il < first_owned ? il : first_owned;
        }
    }
    *cut = p->n_layer;
    *keep = 0;
    if (n_owned == 0 || policy == RELEASE_NEVER ||
        (policy == RELEASE_AUTO && owned <= mem_budget)) {
        return 0;
    }
    if (policy == RELEASE_ALWAYS) {
        /* with a single window what a device drops is what it needs next */
        if (windows <= 1)
            return 0;
        *cut = first_owned;
        return n_owned;
    }
    /* auto on a device that cannot hold everything: its first layers in ring order (the
     * lowest) stay resident for good while they fit beside the head's weights and the room for
     * the streamed layers in flight, and so does the start of the first one that does not fit,
     * as much of it as the rest of the budget holds (a budget is filled to the byte: on a small
     * device the part of a layer left over is a large share of it); from there on everything
     * is streamed, so streaming never evicts a resident byte. */
    uint64_t fixed = (rank == 0 ? m->head_bytes : 0) +
                     PLAN_STREAM_ROOM_LAYERS * largest_owned(m, p, rank);
    uint64_t room = mem_budget > fixed ? mem_budget - fixed : 0;
    int n = 0;
    for (int r = 0; r < p->k; r++) {
        int first, last;
        plan_range(p, rank, r, &first, &last);
        for (int il = first; il < last; il++) {
            uint64_t b = m->layer_end[il] - m->layer_begin[il];
            if (*cut == p->n_layer && b <= room) {
                room -= b;
                continue;
            }
            if (*cut == p->n_layer) {
                *cut = il;
                *keep = room;
            }
            n++;
        }
    }
    return n;
}

uint64_t device_weight_budget(const ring_model *m, const ring_plan *p, int rank, double resident)
{
    uint64_t kept = rank == 0 ? m->head_bytes : 0, all = kept;
    int n = 0;
    for (int r = 0; r < p->k; r++) {
        int first, last;
        plan_range(p, rank, r, &first, &last);
        for (int il = first; il < last; il++, n++) {
            uint64_t b = m->layer_end[il] - m->layer_begin[il];
            if (n + 1 <= resident)
                kept += b;
            else if (n < resident)   /* the resident share of the cut layer */
                kept += (uint64_t)((resident - n) * (double)b);
            all += b;
        }
    }
    if (resident >= n)
        return all;
    uint64_t budget = kept + PLAN_STREAM_ROOM_LAYERS * largest_owned(m, p, rank);
    return budget < all ? budget : all;
}

int device_init(device *d, const ring_model *m, const ring_plan *p, int rank,
                const ring_layers *layers, const device_opts *o, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->m = m;
    d->plan = *p;
    d->rank = rank;
    d->layers = *layers;
    d->scratch = calloc((size_t)m->n_layer + 1, sizeof *d->scratch);
    d->scratch2 = calloc((size_t)m->n_layer + 1, sizeof *d->scratch2);
    if (!d->scratch || !d->scratch2) {
        device_free(d);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    d->prefetch = o->prefetch;
    uint64_t keep;
    d->n_streamed = device_streamed_layers(m, p, rank, o->release, o->mem_budget, &d->cut, &keep);
    if (d->cut < m->n_layer) {
        d->cut_offset = m->layer_begin[d->cut] + keep;   /* the pager drops whole pages only */
        d->room_bytes = PLAN_STREAM_ROOM_LAYERS * largest_owned(m, p, rank);
    }
    int windows = 0;
    for (int r = 0; r < p->k; r++)
        windows += !window_empty(d, r);
    if ((d->prefetch || d->n_streamed) && windows > 0) {
        d->pg = pager_create(m->path, m->map, m->map_size, o->method, err, errlen);
        if (!d->pg) {
            device_free(d);
            return -1;
        }
        if (d->prefetch) {
            int n = fetch_ranges(d, next_window(d, -1), d->scratch);
            pager_request(d->pg, NULL, 0, d->scratch, n);
        }
    }
    d->idle_since = net_now_ns();
    d->disk_mark = pager_disk_read_bytes();
    return 0;
}

void device_free(device *d)
{
    pager_free(d->pg);
    free(d->scratch);
    free(d->scratch2);
    memset(d, 0, sizeof *d);
}

void device_arrived(device *d)
{
    d->cur.wait_ns += (uint64_t)(net_now_ns() - d->idle_since);
}

static uint64_t process_major_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_majflt;
}

/* The share of a window resident at compute start (mincore over it) takes about 0.2 ms per GB
 * of window here: 0.3 ms a token for the 14B-like's 1.6 GB, 0.8 % of its token decoded alone.
 * A device that streams checks every window; one whose layers stay resident checks one window
 * in RESIDENCY_EVERY, which still shows the system reclaiming them. */
#define RESIDENCY_EVERY 8

int device_compute(device *d, int round, float *hidden, int n, const int32_t *pos,
                   const int32_t *seq)
{
    d->cur.hops++;
    int first, last;
    plan_range(&d->plan, d->rank, round, &first, &last);
    if (first == last)
        return 0;
    if (d->n_streamed > 0 || d->n_computed % RESIDENCY_EVERY == 0) {
        int nr = layer_ranges(d, first, last, d->scratch);
        uint64_t res, tot;
        pager_resident_pages(d->m->map, d->m->map_size, d->scratch, nr, &res, &tot);
        d->cur.pages += tot;
        d->cur.pages_resident += res;
    }
    d->n_computed++;
    uint64_t pf0 = d->pg ? pager_thread_faults(d->pg) : 0, f0 = process_major_faults();
    int64_t t0 = net_now_ns();
    int split = stream_start(d, first, last);
    int rc = split > first ? d->layers.eval(d->layers.ctx, hidden, n, pos, seq, first, split) : 0;
    /* Streamed layers one at a time, each dropped once computed (the last one at the
     * hand-off). The pager reads none of them ahead here: the kernel's readahead on compute's
     * own faults keeps the disk busy while the layer before is computed, and a pager thread
     * reading the same stream ahead only competed with it (the 70B-like on paper-4dev: 608-644
     * ms per token with it, 517-520 without, docs/ring.md). */
    for (int il = split; il < last && rc == 0; il++) {
        rc = d->layers.eval(d->layers.ctx, hidden, n, pos, seq, il, il + 1);
        byte_range s = streamed_part(d, il);
        if (il + 1 < last && s.begin < s.end)
            pager_request(d->pg, &s, 1, NULL, 0);
    }
    d->cur.compute_ns += (uint64_t)(net_now_ns() - t0);
    uint64_t faults = process_major_faults() - f0;
    uint64_t pf = d->pg ? pager_thread_faults(d->pg) - pf0 : 0;
    d->cur.major_faults += faults > pf ? faults - pf : 0;
    return rc;
}

void device_handed_on(device *d, int round)
{
    d->idle_since = net_now_ns();
    if (!d->pg)
        return;
    int next = next_window(d, round);
    if (next < 0)
        return;
    int first, last;
    plan_range(&d->plan, d->rank, round, &first, &last);
    int split = stream_start(d, first, last);
    /* With one window (k = 1, or a single non-empty round) the next window is the one just
     * computed: unless part of it streams, it is in memory, and neither dropping nor fetching it
     * makes sense. */
    if (next == round && split == last)
        return;
    d->scratch[0] = streamed_part(d, last - 1);
    int n_drop = split < last && d->scratch[0].begin < d->scratch[0].end;
    int n_fetch = d->prefetch ? fetch_ranges(d, next, d->scratch2) : 0;
    if (n_drop || n_fetch)
        pager_request(d->pg, d->scratch, n_drop, d->scratch2, n_fetch);
}

void device_take_counters(device *d, ring_counters *out)
{
    uint64_t disk = pager_disk_read_bytes();
    d->cur.disk_bytes = disk - d->disk_mark;
    d->disk_mark = disk;
    *out = d->cur;
    memset(&d->cur, 0, sizeof d->cur);
}

void ring_counters_add(ring_counters *dst, const ring_counters *src)
{
    uint64_t *a = &dst->compute_ns;
    const uint64_t *b = &src->compute_ns;
    for (size_t i = 0; i < sizeof *dst / sizeof(uint64_t); i++)
        a[i] += b[i];
}

static void human_bytes(uint64_t b, char *out, size_t cap)
{
    if (b >= (1u << 30))
        snprintf(out, cap, "%.2f GiB", b / (double)(1u << 30));
    else if (b >= (1u << 20))
        snprintf(out, cap, "%.2f MiB", b / (double)(1u << 20));
    else if (b >= 1024)
        snprintf(out, cap, "%.1f KiB", b / 1024.0);
    else
        snprintf(out, cap, "%llu B", (unsigned long long)b);
}

void ring_counters_format(const ring_counters *c, char *out, size_t cap)
{
    char disk[32], sent[32], recv[32], hit[16];
    human_bytes(c->disk_bytes, disk, sizeof disk);
    human_bytes(c->bytes_sent, sent, sizeof sent);
    human_bytes(c->bytes_recv, recv, sizeof recv);
    if (c->pages)
        snprintf(hit, sizeof hit, "%.1f%%", 100.0 * (double)c->pages_resident / (double)c->pages);
    else
        snprintf(hit, sizeof hit, "-");
    snprintf(out, cap,
             "compute %.2f ms, wait %.2f ms, major faults %llu, disk %s, resident at start %s, "
             "sent %s, received %s",
             c->compute_ns / 1e6, c->wait_ns / 1e6, (unsigned long long)c->major_faults, disk,
             hit, sent, recv);
}
