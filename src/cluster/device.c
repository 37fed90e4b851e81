/* device.c — one ring device's work (device.h): which rounds visit it, its window's compute,
 * the pager's release and prefetch around it, and the counters of where the time went. Head and
 * workers share it, so both sides of the ring count the same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* Paging by expert. A layer of experts is its shared part (attention, router, norms: read by
 * every token) and n_expert slices of its three expert tensors, of which a token reads only
 * its routed ones: a streamed layer of experts keeps its hot experts after computing (and
 * drops the rest), and its read-ahead is the shared part, the hot experts (in memory already,
 * so the pager skips them) and, when that guess has been right at least half the time, the
 * cold experts the layer's previous batch routed. A wrong guess reads an expert's bytes for
 * nothing, so guessing only while half of the guessed bytes are used keeps disk reads within
 * 1.5 times those of the experts actually routed. */
#define HEAT_DECAY 0.9f       /* per batch: an expert's heat is its recent routings */
#define REPEAT_DECAY 0.95

static bool by_expert(const device *d, int il)
{
    return d->heat && d->m->expert_slice[il][0] > 0 &&
           !(d->layers.in_vram && d->layers.in_vram(d->layers.ctx, il));
}

static uint64_t expert_bytes(const ring_model *m, int il)
{
    uint64_t b = 0;
    for (int j = 0; j < RING_EXPERT_TENSORS; j++)
        b += m->expert_slice[il][j];
    return b;
}

static bool has_bit(const uint64_t *w, int x)
{
    return (w[x / 64] >> (x % 64)) & 1;
}

static bool keep_hot(const device *d, int il, int x)
{
    return d->hot[(size_t)il * (size_t)d->m->n_expert + (size_t)x];
}

static bool guessing(const device *d)
{
    return d->repeat_all > 0 && d->repeat_hit >= 0.5 * d->repeat_all;
}

/* An expert the read-ahead leaves out: neither hot nor (while guessing pays) routed last. */
static bool not_wanted(const device *d, int il, int x)
{
    const uint64_t *seen = d->seen + (size_t)il * (size_t)d->expert_words;
    return !keep_hot(d, il, x) && !(guessing(d) && has_bit(seen, x));
}

/* Ranges written in file order, adjacent ones merged, at most `cap` bytes in all. */
typedef struct range_out {
    byte_range *r;
    int n;
    uint64_t cap;
} range_out;

static void put_range(range_out *o, uint64_t b, uint64_t e)
{
    if (e <= b || o->cap == 0)
        return;
    if (e - b > o->cap)
        e = b + o->cap;
    o->cap -= e - b;
    if (o->n > 0 && o->r[o->n - 1].end == b)
        o->r[o->n - 1].end = e;
    else
        o->r[o->n++] = (byte_range){b, e};
}

/* The bytes of s (a part of layer il) less the experts x for which skip(d, il, x) holds, in
 * at most 3 n_expert + 1 ranges and `cap` bytes; returns the bytes written to o. */
static uint64_t ranges_without(const device *d, int il, byte_range s,
                               bool (*skip)(const device *, int, int), range_out *o)
{
    const ring_model *m = d->m;
    int order[RING_EXPERT_TENSORS];
    for (int j = 0; j < RING_EXPERT_TENSORS; j++) {
        int i = j;
        for (; i > 0 && m->expert_begin[il][order[i - 1]] > m->expert_begin[il][j]; i--)
            order[i] = order[i - 1];
        order[i] = j;
    }
    uint64_t cap0 = o->cap, cur = s.begin;
    for (int i = 0; i < RING_EXPERT_TENSORS; i++) {
        uint64_t b0 = m->expert_begin[il][order[i]], slice = m->expert_slice[il][order[i]];
        for (int x = 0; x < m->n_expert; x++) {
            if (!skip(d, il, x))
                continue;
            uint64_t xb = b0 + (uint64_t)x * slice, xe = xb + slice;
            put_range(o, cur, xb < s.end ? xb : s.end);
            cur = xe > cur ? xe : cur;
        }
    }
    put_range(o, cur, s.end);
    return cap0 - o->cap;
}

/* What to drop of layer il once computed: its streamed part, less its hot experts, and less
 * its shared part too when the budget keeps the shared parts (stream_by_expert). */
static int drop_ranges(const device *d, int il, byte_range *out)
{
    byte_range s = streamed_part(d, il);
    if (s.begin == s.end)
        return 0;
    if (!by_expert(d, il)) {
        out[0] = s;
        return 1;
    }
    range_out o = {out, 0, UINT64_MAX};
    if (!d->keep_shared) {
        ranges_without(d, il, s, keep_hot, &o);
        return o.n;
    }
    const ring_model *m = d->m;
    for (int j = 0; j < RING_EXPERT_TENSORS; j++)
        for (int x = 0; x < m->n_expert; x++)
            if (!keep_hot(d, il, x)) {
                uint64_t b = m->expert_begin[il][j] + (uint64_t)x * m->expert_slice[il][j];
                put_range(&o, b, b + m->expert_slice[il][j]);
            }
    return o.n;
}

/* The hot experts: of the streamed layers' experts routed lately, the hottest (ties: the lower
 * layer, then the lower expert) as long as their bytes fit hot_room. */
typedef struct heat_entry {
    float heat;
    int il, x;
} heat_entry;

static int hotter(const void *a, const void *b)
{
    const heat_entry *p = a, *q = b;
    if (p->heat != q->heat)
        return p->heat > q->heat ? -1 : 1;
    return p->il != q->il ? p->il - q->il : p->x - q->x;
}

static void choose_hot(device *d)
{
    const ring_model *m = d->m;
    const size_t n_x = (size_t)m->n_expert;
    memset(d->hot, 0, sizeof *d->hot * (size_t)m->n_layer * n_x);
    if (d->hot_room == 0 || d->cut >= m->n_layer)
        return;
    heat_entry *e = malloc(sizeof *e * (size_t)m->n_layer * n_x);
    if (!e)
        return;   /* no expert kept: correct, only slower */
    size_t n = 0;
    for (int il = d->cut; il < m->n_layer; il++)
        for (int x = 0; by_expert(d, il) && x < m->n_expert; x++)
            if (d->heat[(size_t)il * n_x + (size_t)x] > 0)
                e[n++] = (heat_entry){d->heat[(size_t)il * n_x + (size_t)x], il, x};
    qsort(e, n, sizeof *e, hotter);
    uint64_t room = d->hot_room;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = expert_bytes(m, e[i].il);
        if (b <= room) {
            room -= b;
            d->hot[(size_t)e[i].il * n_x + (size_t)e[i].x] = true;
        }
    }
    free(e);
}

/* After computing layers [first, last): the routed experts' bytes, their heat, and how well
 * the previous batch's cold experts guessed this one's. */
static void note_routed(device *d, int first, int last)
{
    const ring_model *m = d->m;
    for (int il = first; il < last && d->heat; il++) {
        const uint64_t *r = d->layers.routed(d->layers.ctx, il);
        if (!r || !by_expert(d, il))
            continue;
        uint64_t *seen = d->seen + (size_t)il * (size_t)d->expert_words;
        float *heat = d->heat + (size_t)il * (size_t)m->n_expert;
        uint64_t xb = expert_bytes(m, il), guessed = 0, right = 0;
        for (int x = 0; x < m->n_expert; x++) {
            bool now = has_bit(r, x);
            d->cur.routed_bytes += now ? xb : 0;
            heat[x] = heat[x] * HEAT_DECAY + (now ? 1.0f : 0.0f);
            if (has_bit(seen, x) && !keep_hot(d, il, x)) {
                guessed += xb;
                right += now ? xb : 0;
            }
        }
        d->repeat_all = d->repeat_all * REPEAT_DECAY + (double)guessed;
        d->repeat_hit = d->repeat_hit * REPEAT_DECAY + (double)right;
        memcpy(seen, r, sizeof *seen * (size_t)d->expert_words);
    }
}

/* Read-around on the expert tensors of the owned layers of experts: off (MADV_RANDOM) while
 * they are paged by expert, where a fault's readahead (read_ahead_kb, 8 MiB on the
 * development VM) would read the neighbouring experts a token did not route to; the layers
 * then ask for exactly their routed experts' pages as soon as they have routed
 * (ring_layers.hint_experts). Back to MADV_NORMAL when the device is freed. */
static void expert_advice(const device *d, int advice)
{
    const ring_model *m = d->m;
    for (int r = 0; r < d->plan.k; r++) {
        int first, last;
        plan_range(&d->plan, d->rank, r, &first, &last);
        for (int il = first; il < last; il++)
            for (int j = 0; j < RING_EXPERT_TENSORS && by_expert(d, il); j++) {
                uint64_t b = m->expert_begin[il][j] / 4096 * 4096;
                uint64_t e = m->expert_begin[il][j] + (uint64_t)m->n_expert * m->expert_slice[il][j];
                madvise((void *)(m->map + b), e - b, advice);
            }
    }
}

/* What to read ahead of computing window `round`: its resident layers and the cut layer's
 * resident prefix (already in memory after the first token, so the pager skips them), then
 * the first streamed bytes that fit the room (of a layer of experts: those it is expected to
 * read). At most d->n_scratch ranges. */
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
        if (by_expert(d, il)) {
            range_out o = {out + n, 0, room};
            room -= ranges_without(d, il, s, not_wanted, &o);
            n += o.n;
            continue;
        }
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

/* `auto` on a device of experts that cannot hold its layers: every owned layer streams, and
 * what the budget holds beyond the head's weights, the layers' shared parts and the room for
 * the layers in flight keeps the hottest experts instead of whole layers (most of whose
 * experts a token does not read). */
static void stream_by_expert(device *d, uint64_t mem_budget)
{
    const ring_model *m = d->m;
    uint64_t fixed = (d->rank == 0 ? m->head_bytes : 0) + d->room_bytes;
    int n = 0, first = m->n_layer;
    for (int r = 0; r < d->plan.k; r++) {
        int f, l;
        plan_range(&d->plan, d->rank, r, &f, &l);
        for (int il = f; il < l; il++, n++) {
            first = il < first ? il : first;
            fixed += m->layer_end[il] - m->layer_begin[il] -
                     (uint64_t)m->n_expert * expert_bytes(m, il);
        }
    }
    d->cut = first;
    d->cut_offset = m->layer_begin[first];
    d->n_streamed = n;
    d->keep_shared = true;
    d->hot_room = mem_budget > fixed ? mem_budget - fixed : 0;
}

int device_init(device *d, const ring_model *m, const ring_plan *p, int rank,
                const ring_layers *layers, const device_opts *o, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->m = m;
    d->plan = *p;
    d->rank = rank;
    d->layers = *layers;
    const bool experts = m->n_expert > 0 && layers->routed;
    /* a layer of experts' ranges: one per gap between experts left out, and its prefix */
    d->n_scratch = m->n_layer * (experts ? 3 * m->n_expert + 2 : 1) + 1;
    d->scratch = calloc((size_t)d->n_scratch, sizeof *d->scratch);
    d->scratch2 = calloc((size_t)d->n_scratch, sizeof *d->scratch2);
    if (experts) {
        const size_t cells = (size_t)m->n_layer * (size_t)m->n_expert;
        d->expert_words = (m->n_expert + 63) / 64;
        d->heat = calloc(cells, sizeof *d->heat);
        d->hot = calloc(cells, sizeof *d->hot);
        d->seen = calloc((size_t)m->n_layer * (size_t)d->expert_words, sizeof *d->seen);
    }
    if (!d->scratch || !d->scratch2 || (experts && (!d->heat || !d->hot || !d->seen))) {
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
    if (experts && d->n_streamed > 0 && o->release == RELEASE_AUTO)
        stream_by_expert(d, o->mem_budget);
    int windows = 0;
    for (int r = 0; r < p->k; r++)
        windows += !window_empty(d, r);
    if ((d->prefetch || d->n_streamed) && windows > 0) {
        d->pg = pager_create(m->path, m->map, m->map_size, o->method, err, errlen);
        if (!d->pg) {
            device_free(d);
            return -1;
        }
        if (d->heat && d->n_streamed) {
            pager_set_exact(d->pg);   /* a layer of experts' read-ahead has gaps */
            expert_advice(d, MADV_RANDOM);
            d->advised = true;
        }
        if (d->prefetch) {
            int n = fetch_ranges(d, next_window(d, -1), d->scratch);
            pager_request(d->pg, NULL, 0, d->scratch, n);
        }
    }
    /* on, or off again (the head's engine outlives a plan that paged by expert) */
    if (d->layers.hint_experts)
        d->layers.hint_experts(d->layers.ctx, d->advised);
    d->idle_since = net_now_ns();
    d->disk_mark = pager_disk_read_bytes();
    return 0;
}

void device_free(device *d)
{
    if (d->advised)
        expert_advice(d, MADV_NORMAL);
    pager_free(d->pg);
    free(d->scratch);
    free(d->scratch2);
    free(d->heat);
    free(d->hot);
    free(d->seen);
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

/* The bytes computing layers [first, last) is expected to read: whole layers, but of a
 * streamed layer of experts only what its read-ahead asks for (fetch_ranges), since the experts
 * a token is not routed to stay on disk. At most d->n_scratch ranges. */
static int expected_ranges(const device *d, int first, int last, byte_range *out)
{
    int split = stream_start(d, first, last), n = layer_ranges(d, first, split, out);
    for (int il = split; il < last; il++) {
        if (!by_expert(d, il)) {
            n += layer_ranges(d, il, il + 1, out + n);
            continue;
        }
        range_out o = {out + n, 0, UINT64_MAX};
        ranges_without(d, il, (byte_range){d->m->layer_begin[il], d->m->layer_end[il]},
                       not_wanted, &o);
        n += o.n;
    }
    return n;
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
        int nr = expected_ranges(d, first, last, d->scratch);
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
    if (rc == 0)
        note_routed(d, first, split);
    /* Streamed layers one at a time, each dropped once computed (the last one at the
     * hand-off). The pager reads none of them ahead here: the kernel's readahead on compute's
     * own faults keeps the disk busy while the layer before is computed, and a pager thread
     * reading the same stream ahead only competed with it (the 70B-like on paper-4dev: 608-644
     * ms per token with it, 517-520 without, docs/ring.md). */
    for (int il = split; il < last && rc == 0; il++) {
        rc = d->layers.eval(d->layers.ctx, hidden, n, pos, seq, il, il + 1);
        if (rc == 0)
            note_routed(d, il, il + 1);
        int n_drop = il + 1 < last ? drop_ranges(d, il, d->scratch) : 0;
        if (n_drop)
            pager_request(d->pg, d->scratch, n_drop, NULL, 0);
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
    if (d->heat && d->hot_room)
        choose_hot(d);
    int n_drop = split < last ? drop_ranges(d, last - 1, d->scratch) : 0;
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
    char disk[32], sent[32], recv[32], hit[16], routed[64] = "";
    human_bytes(c->disk_bytes, disk, sizeof disk);
    if (c->routed_bytes) {
        char b[32];
        human_bytes(c->routed_bytes, b, sizeof b);
        snprintf(routed, sizeof routed, " (routed experts %s)", b);
    }
    human_bytes(c->bytes_sent, sent, sizeof sent);
    human_bytes(c->bytes_recv, recv, sizeof recv);
    if (c->pages)
        snprintf(hit, sizeof hit, "%.1f%%", 100.0 * (double)c->pages_resident / (double)c->pages);
    else
        snprintf(hit, sizeof hit, "-");
    snprintf(out, cap,
             "compute %.2f ms, wait %.2f ms, major faults %llu, disk %s%s, resident at start %s, "
             "sent %s, received %s",
             c->compute_ns / 1e6, c->wait_ns / 1e6, (unsigned long long)c->major_faults, disk,
             routed, hit, sent, recv);
}
