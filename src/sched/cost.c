/* cost.c — per-device cost coefficients from profiles, and direct evaluation of a plan. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"
#include "sched/cost.h"
#include "util/sysmem.h"   /* SYSMEM_RESERVE: the default reserve */

#define MIB (1024.0 * 1024.0)

/* The sampler reads the logits a few times (penalties, temperature, softmax, top-k/p): counted
 * as four passes over n_vocab floats at memory bandwidth. */
#define SAMPLING_PASSES 4

double layer_vector_values(int n_embd, int n_ff, int q_dim, int kv_dim)
{
    return 4.0 * n_embd + (q_dim + kv_dim) + 2.0 * kv_dim + q_dim + n_ff;
}

/* Plans within 3 % of the fastest are equal: the profiles are not more exact (six identical
 * emulated devices measured their one 500 MB/s disk at 591-634 MB/s). */
#define SCHED_TIE 0.03

sched_opts sched_opts_default(void)
{
    return (sched_opts){
        .reserve = SYSMEM_RESERVE,
        .net_rtt = 0.005,
        .net_bw = 100e6 / 8,
        .time_limit = 30,
        .prefetch = true,
        .tie = SCHED_TIE,
    };
}

/* Seconds for one layer (or the output matrix) on a processor: the kernels stream the weights
 * while computing, so the slower of compute and memory traffic sets the time. Fails when a
 * weight type has no measured rate. */
static int layer_time(const type_rate *rates, const double *params, double bytes, double bw,
                      const char *dev, const char *proc, double *compute, double *total,
                      char *err, size_t errlen)
{
    double c = 0;
    for (int t = 0; t < DT_COUNT; t++) {
        if (params[t] <= 0)
            continue;
        if (rates[t].matvec <= 0) {
            snprintf(err, errlen, "device %s: no %s throughput measured for %s weights (measure "
                     "its profile with this model)", dev, proc, dtype_get((uint32_t)t)->name);
            return -1;
        }
        c += params[t] / rates[t].matvec;
    }
    double m = bytes / bw;
    *compute = c;
    *total = c > m ? c : m;
    return 0;
}

int cost_device(const sched_model *sm, const dev_profile *p, const sched_opts *o, bool is_head,
                dev_cost *dc, char *err, size_t errlen)
{
    memset(dc, 0, sizeof *dc);
    const char *name = p->name[0] ? p->name : "(unnamed)";
    if (p->mem_bw <= 0) {
        snprintf(err, errlen, "device %s: no memory bandwidth measured", name);
        return -1;
    }
    if (layer_time(p->cpu, sm->layer_params, sm->layer_bytes, p->mem_bw, name, "CPU",
                   &dc->cpu_compute, &dc->cpu_layer, err, errlen))
        return -1;
    /* the work besides the matrices: about 5 % of a layer of the 8B-like on the 2-core VM
     * (60-80 us of 1.2-2.4 ms), which the kernel rates alone leave out */
    if (p->vector > 0) {
        dc->cpu_compute += sm->layer_vector / p->vector;
        dc->cpu_layer += sm->layer_vector / p->vector;
    }
    dc->cpu_layer += sm->kv_read / p->mem_bw + sm->layer_calls * p->dispatch;

    dc->has_gpu = p->gpu_present;
    dc->unified = p->gpu_present && p->gpu_unified;
    if (p->gpu_present) {
        if (p->gpu_bw <= 0) {
            snprintf(err, errlen, "device %s: GPU present but no GPU bandwidth measured", name);
            return -1;
        }
        double gc;
        if (layer_time(p->gpu, sm->layer_params, sm->layer_bytes, p->gpu_bw, name, "GPU", &gc,
                       &dc->gpu_layer, err, errlen))
            return -1;
        /* every step of a GPU layer pays the dispatch's fixed cost: on a software driver it
         * is most of the layer's time */
        dc->gpu_layer += sm->kv_read / p->gpu_bw + GPU_LAYER_STEPS * p->gpu_dispatch;
        dc->vram = (double)p->vram_free * (1 - o->reserve);
    }

    double rtt = p->net_rtt > 0 ? p->net_rtt : o->net_rtt;
    double bw = p->net_bw > 0 ? p->net_bw : o->net_bw;
    dc->hop = rtt / 2 + sm->hop_bytes / bw;
    dc->os = p->os;
    snprintf(dc->name, sizeof dc->name, "%s", name);
    dc->disk_bps = p->os == OS_MACOS ? p->disk_rand : p->disk_seq;
    dc->ram = (double)profile_available(p) * (1 - o->reserve);
    dc->fixed_anon = sm->proc_bytes + (is_head ? sm->head_bytes : 0);

    double out_params[DT_COUNT] = {0}, c, t;
    out_params[sm->out_type] = sm->out_params;
    if (layer_time(p->cpu, out_params, sm->out_bytes, p->mem_bw, name, "CPU", &c, &t, err, errlen))
        return -1;
    dc->head_time = t + sm->out_calls * p->dispatch +
                    (sm->embd_row_bytes + SAMPLING_PASSES * 4.0 * sm->n_vocab) / p->mem_bw;
    if (is_head)
        dc->fixed_page = sm->head_page;
    dc->burst = profile_quota_share(p);   /* the profile's rates are the sustained ones */
    if (dc->burst < 1)
        dc->burst_period = p->cpu_quota_period > 0 ? p->cpu_quota_period : CFS_DEFAULT_PERIOD;
    return 0;
}

int cost_quota_devices(const dev_cost *dc, int n, int *idx)
{
    int nq = 0;
    for (int m = 0; m < n && nq < COST_MAX_BURSTING; m++)
        if (dc[m].burst > 0 && dc[m].burst < 1 && dc[m].burst_period > 0)
            idx[nq++] = m;
    return nq;
}

const char *cost_device_set(const dev_cost *dc, const dev_result *d)
{
    if (!d->overloaded)
        return "M4";
    if (dc->os == OS_MACOS)
        return dc->unified ? "M2" : "M1";
    return "M3";
}

static void __attribute__((format(printf, 2, 3))) infeasible(cost_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    r->feasible = false;
}

/* Bytes of layer il in memory. */
static double size_of(const sched_model *sm, int il)
{
    return sm->layer_size[il] > 0 ? sm->layer_size[il] : sm->layer_bytes;
}

/* Device m's layers in RAM, walked in ring order as its pager keeps them (cluster/device.c):
 * their bytes, the largest of all it owns (its room holds PLAN_STREAM_ROOM_LAYERS of those),
 * and how many of them, fractional, fit in `keep` bytes; and the bytes of its GPU layers (the
 * last gpu_layers of each window), which with skip_gpu are in VRAM, not RAM. */
typedef struct ram_layers {
    double bytes, largest, fit, gpu;
} ram_layers;

static ram_layers walk_ram_layers(const sched_model *sm, const ring_plan *p, int m, bool skip_gpu,
                                  double keep)
{
    ram_layers w = {0, 0, 0, 0};
    for (int round = 0; round < p->k; round++) {
        int first, last;
        plan_range(p, m, round, &first, &last);
        int on_gpu = last - first < p->gpu_layers[m] ? last - first : p->gpu_layers[m];
        int ram_end = skip_gpu ? last - on_gpu : last;
        for (int il = first; il < last; il++) {
            double b = size_of(sm, il);
            w.largest = b > w.largest ? b : w.largest;
            if (il >= last - on_gpu)
                w.gpu += b;
            if (il >= ram_end)
                continue;
            w.bytes += b;
            double part = keep >= b ? 1 : keep > 0 ? keep / b : 0;
            w.fit += part;
            keep -= b;
        }
    }
    return w;
}

/* cost.h, CPU quotas: of the sets of quota devices that burst, the one giving the smallest
 * TPOT in which every member meets both conditions; its members' terms become full-speed ones.
 * r holds the sustained terms and TPOT. */
static void choose_bursts(const dev_cost *dc, int n, int head, cost_result *r)
{
    int q[COST_MAX_BURSTING];
    int nq = cost_quota_devices(dc, n, q);
    double work[COST_MAX_BURSTING];   /* CPU time per token at the sustained rate */
    for (int i = 0; i < nq; i++) {
        const dev_result *d = &r->dev[q[i]];
        work[i] = d->in_ring ? d->t_compute + d->t_memory + (q[i] == head ? r->t_head : 0) : 0;
    }
    unsigned best = 0;
    double best_tpot = r->tpot;
    for (unsigned set = 1; set < 1u << nq; set++) {
        double tpot = r->tpot;
        for (int i = 0; i < nq; i++)
            if (set >> i & 1)
                tpot -= (1 - dc[q[i]].burst) * work[i];
        bool ok = tpot < best_tpot;
        for (int i = 0; i < nq && ok; i++) {
            const dev_cost *c = &dc[q[i]];
            double full = c->burst * work[i];
            ok = !(set >> i & 1) ||
                 (work[i] > 0 && !r->dev[q[i]].overloaded && full <= c->burst * c->burst_period &&
                  full <= c->burst * (tpot - r->t_disk));
        }
        if (ok) {
            best = set;
            best_tpot = tpot;
        }
    }
    for (int i = 0; i < nq; i++) {
        if (!(best >> i & 1))
            continue;
        dev_result *d = &r->dev[q[i]];
        double s = dc[q[i]].burst;
        r->t_compute -= (1 - s) * d->t_compute;
        r->t_memory -= (1 - s) * d->t_memory;
        d->t_compute *= s;
        d->t_memory *= s;
        if (q[i] == head)
            r->t_head *= s;
        d->burst = true;
    }
    r->tpot = r->t_compute + r->t_memory + r->t_gpu + r->t_disk + r->t_net + r->t_head;
}

void cost_eval(const dev_cost *dc, const sched_model *sm, const sched_opts *o, const ring_plan *p,
               cost_result *r)
{
    memset(r, 0, sizeof *r);
    r->feasible = true;
    if (p->n_layer != sm->n_layer || plan_validate(p, r->why, sizeof r->why)) {
        if (p->n_layer != sm->n_layer)
            snprintf(r->why, sizeof r->why, "plan: %d layers, model has %d", p->n_layer, sm->n_layer);
        r->feasible = false;
        return;
    }
    int n_ring = 0;
    for (int m = 0; m < p->n_dev; m++) {
        r->dev[m].in_ring = m == 0 || o->fixed_ring || p->window[m] > 0;
        n_ring += r->dev[m].in_ring;
    }
    /* the device that decodes on its own (cost.h), or -1 */
    int solo = -1;
    for (int m = 1; m < p->n_dev && p->decode_alone && p->window[0] == 0 && n_ring == 2; m++)
        if (r->dev[m].in_ring)
            solo = m;
    double kv = sm->kv_bytes;
    for (int m = 0; m < p->n_dev; m++) {
        const dev_cost *c = &dc[m];
        dev_result *d = &r->dev[m];
        double fixed_page = c->fixed_page + (m == solo ? sm->head_page : 0);
        int y = 0, g = 0;
        for (int round = 0; round < p->k; round++) {
            int first, last;
            plan_range(p, m, round, &first, &last);
            int len = last - first;
            y += len;
            g += len < p->gpu_layers[m] ? len : p->gpu_layers[m];
        }
        d->layers = y;
        d->gpu_layers = g;
        if (g > 0 && !c->has_gpu) {
            infeasible(r, "device %s: %d GPU layers but no GPU", c->name, g);
            return;
        }
        int off = c->has_gpu && !c->unified ? g : 0;            /* layers whose bytes leave RAM */
        ram_layers ram = walk_ram_layers(sm, p, m, off > 0, HUGE_VAL);
        d->budget = c->ram;
        d->anon = (d->in_ring ? c->fixed_anon : 0) + (m == solo ? sm->head_bytes : 0) +
                  kv * (y - off);
        d->page = ram.bytes + fixed_page;
        d->vram = ram.gpu + g * kv;
        d->resident_layers = y - off;
        if (d->vram > c->vram) {
            infeasible(r, "device %s: %d GPU layers need %.0f MiB of VRAM, budget %.0f MiB",
                       c->name, g, d->vram / MIB, c->vram / MIB);
            return;
        }
        d->overloaded = d->anon + d->page > c->ram;
        if (d->overloaded) {
            double room = PLAN_STREAM_ROOM_LAYERS * ram.largest;
            if (c->disk_bps <= 0) {
                infeasible(r, "device %s: needs %.0f MiB, budget %.0f MiB, and has no measured "
                           "disk to read the rest from", c->name, (d->anon + d->page) / MIB,
                           c->ram / MIB);
                return;
            }
            if (d->anon + fixed_page + room > c->ram) {
                infeasible(r, "device %s: buffers and KV cache (%.0f MiB) and room for %d streamed "
                           "layers (%.0f MiB) exceed its budget of %.0f MiB", c->name,
                           (d->anon + fixed_page) / MIB, PLAN_STREAM_ROOM_LAYERS, room / MIB,
                           c->ram / MIB);
                return;
            }
            /* to the byte, as the pager keeps them (cluster/device.h) */
            double keep = c->ram - d->anon - fixed_page - room;
            d->resident_layers = walk_ram_layers(sm, p, m, off > 0, keep).fit;
            d->disk_bytes = ram.bytes - keep;
            double ahead = o->prefetch ? room : 0;
            if (d->disk_bytes > ahead)
                d->t_disk = (d->disk_bytes - ahead) / c->disk_bps;
        }
        d->t_compute = (y - g) * c->cpu_compute;
        d->t_memory = (y - g) * (c->cpu_layer - c->cpu_compute);
        d->t_gpu = g * c->gpu_layer;
        d->t_net = d->in_ring && n_ring > 1 && solo < 0 ? p->k * c->hop : 0;
        r->t_compute += d->t_compute;
        r->t_memory += d->t_memory;
        r->t_gpu += d->t_gpu;
        r->t_disk += d->t_disk;
        r->t_net += d->t_net;
    }
    int head = solo > 0 ? solo : 0;
    r->t_head = dc[head].head_time;
    r->tpot = r->t_compute + r->t_memory + r->t_gpu + r->t_disk + r->t_net + r->t_head;
    choose_bursts(dc, p->n_dev, head, r);
    /* A token goes round the ring one device after another: each waits for all the others. */
    for (int m = 0; m < p->n_dev; m++) {
        const dev_result *d = &r->dev[m];
        double own = d->t_compute + d->t_memory + d->t_gpu + d->t_disk +
                     (m == head ? r->t_head : 0);
        r->dev[m].t_wait = d->in_ring ? r->tpot - own : 0;
    }
}
