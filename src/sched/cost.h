/* cost.h — the model of time per output token (TPOT) and memory that Halda optimises.
 *
 * A decoded token visits the ring k times. Device m computes y_m layers per token (its window
 * w_m in every full round, fewer in a partial last round), g_m of them on its GPU. Predicted
 * TPOT is the sum over devices of
 *
 *   compute   (y_m - g_m) * cpu_layer_m + g_m * gpu_layer_m, where a CPU layer costs
 *             max(weights / kernel rate, bytes / memory bandwidth) + its work besides the
 *             matrices (layer_vector values at the profile's vector rate) + its KV-cache reads
 *             + one pool wake-up (the profile's dispatch) per parallel job of its matrix
 *             products: the rates are those of the matrix-vector kernels streaming a matrix
 *             from RAM, as decoding does, and the bandwidth is a floor under them (the
 *             breakdown shows the kernels' and the vector work's time as "compute" and what
 *             the floor, the KV reads and the wake-ups add as "memory"). The profile's CPU
 *             figures are the median of repeated runs: what decoding usually takes;
 *   disk      bytes re-read from disk per token / disk throughput (see below);
 *   network   k * hop_m for every device in the ring (when it has more than the head): the
 *             token passes each one k times, and a hop costs rtt/2 + activation bytes /
 *             throughput of the sender's link (so bypassing a device keeps its predecessor's
 *             link cost for the new hop);
 *
 * plus the head's fixed work: embedding row, output norm and output matrix, sampling.
 *
 * CPU quotas. A device under a CFS quota smaller than its threads (share s = quota / threads)
 * is profiled at s times its unthrottled rates: what it sustains. But the quota limits CPU time
 * per period P (s * P of wall time with every thread busy), not speed: a device whose work per
 * token at full speed, c = s * (its compute + memory terms, + the head's work where it does
 * it), fits both in one period (c <= s * P) and in its share of the token (c <= s * TPOT, its
 * average use within the quota) is never throttled and computes at full speed (the phone of
 * paper-4dev, half a CPU: 7 layers of the 70B-like in 25-27 ms, 43.5 at the sustained rate).
 * The token's time there is counted without the disk stalls (c <= s * (TPOT - disk)): a
 * little stricter than the quota, it keeps Halda's programs exact (halda.c: quota_rows). A
 * device that streams (overloaded, below) never bursts: paging its streamed layers in is CPU
 * time charged to the same quota (the paper-4dev phone, half a CPU, computing 8 layers of the
 * 70B-like with 2.6 of them streamed: 87.8 ms against 42.5 predicted bursting).
 * Such a device "bursts": its terms are c. The prediction is the fastest assignment of bursting
 * devices (among the first COST_MAX_BURSTING quota devices) that is consistent: every bursting
 * device meets both conditions at the TPOT it gives.
 *
 * A plan that says decode_alone (the head holds no layer and one other device in the ring all
 * of them) has that device decode on its own (cluster/ring.h, ring_decode): it does the head's
 * work for every token, with its own rates, and no activations cross the network while decoding
 * (network 0); its memory holds the head's weights and buffers as well (the head keeps its own
 * for the prompt).
 *
 * Memory of device m (bytes), against its budget = available RAM * (1 - reserve), where
 * "available" was measured by the running prima process itself, so the process's own code, heap
 * and mapped metadata are already outside it (the emulator's counters: 4-7 MiB of anonymous
 * memory per device during a whole run):
 *   anon_m = what the process holds for inference: a decode step's compute buffers, the
 *            batch's hidden states and the ring's frames (+ head: logits, sampling) + the KV
 *            cache of its CPU layers (sched/shape.c)
 *   page_m = weights of its layers that live in RAM, each at its own size (+ head: embedding,
 *            output norm and output matrix, which the pager keeps resident on the head as well)
 * GPU layers live in VRAM with their KV cache on a discrete GPU; on a unified-memory GPU they
 * stay in RAM (the set M2 of the paper) and only count against VRAM as well.
 *
 * Disk: a device whose anon + page exceeds its budget is overloaded (sets M1-M3 of the paper;
 * otherwise M4). It fills its budget: its first layers in ring order stay resident for good, as
 * many bytes of them as fit beside anon, the head's weights and a room of
 * PLAN_STREAM_ROOM_LAYERS layers (the one being computed, the next one being read), and the
 * rest streams through the room (two of its largest layers), read again every token: disk
 * bytes = streamed layers. The
 * resident part ends inside a layer, so its count is fractional and the stall below grows
 * smoothly with the overflow: a budget short by a tenth of a layer costs a tenth of a layer's
 * read, not a whole one. The room's worth is read while the token is on the other devices (the
 * pager reads the first streamed bytes of a window at the hand-off before it); each streamed
 * byte beyond the room is read while it is needed, so the ring stalls for
 *   disk_m = (streamed bytes - room bytes) / disk throughput
 * (all streamed layers when the ring does not prefetch).
 * A model of experts is paged by expert (cluster/device.c): an overloaded device keeps the
 * shared part (attention, router, norms) of all its layers, and its hottest experts as far as
 * the budget beyond those and the room holds; a token reads from disk the experts it is routed
 * to that are not kept. Keeping the fraction phi of its layers' expert bytes (the hottest
 * experts), it misses the share miss(phi) of the routings (sched_miss_pieces): 1 - phi with
 * the routing spread evenly over the experts, less for a real model's skew as a calibration
 * measured it (sched/experts.h: the routing curve of the whole model, which takes the device's
 * layers as typical of it), so a token reads
 *   disk bytes = k / n_expert * (expert bytes of its layers) * miss(phi)
 * (with even routing k / n_expert * (bytes of its layers - bytes kept): linear in the streamed
 * bytes, as for dense layers, at k / n_expert of the rate; convex and piecewise linear with a
 * calibration, a row of Halda's program per piece) as long as the shared parts fit; beyond
 * that the shared parts stream too, whole, and no expert is kept:
 *   disk bytes = its layers * the bytes a token reads of one (layer_read) - bytes kept,
 * the larger of the two in both cases (so Halda's program has a row for each). None of it is
 * counted as read ahead: a token's experts are known only once its router has run (the shared
 * parts that stream are, by the pager, which this leaves out: a bound on the stall).
 * The throughput is the profile's
 * streaming figure: faults through a mapping with the kernel's readahead, as compute reads the
 * streamed layers beyond the room (sched/measure.c).
 * The room must fit beside anon (and the head's weights): that is the hard limit of a streaming
 * device. macOS faults pages in one by one (random reads), Linux and Android read ahead
 * (sequential). A device with no measured disk may not be overloaded. */
#ifndef PRIMA_COST_H
#define PRIMA_COST_H

#include <stdbool.h>

#include "cluster/plan.h"
#include "sched/profile.h"

/* Points of a model of experts' routing curve (sched_model.expert_cover): its pieces are
 * rows of Halda's program per streaming device, so few. */
#define SCHED_COVER_POINTS 16

/* Layers a model may have for the scheduler to plan it. */
#define SCHED_MAX_LAYERS 512

/* The model as the cost model sees it: layers are taken as equal (their mean) for their work,
 * and in memory at their own sizes (a Q4_K_M file's layers with Q6_K matrices are 14 % larger,
 * and they sit at the ends of the model, on the head and the last device). */
typedef struct sched_model {
    int n_layer, n_embd, n_vocab;
    double layer_params[DT_COUNT]; /* weights of each type in one layer (mean over layers) */
    double layer_bytes;            /* bytes of one layer's weights (mean) */
    /* Layers of experts (0: a dense model): the bytes a token reads of a layer (its shared
     * part and the k experts it is routed to; mean), and of a layer that streams the share a
     * token reads from disk: k / n_expert (paging by expert, cost.h: Disk) */
    double layer_read;
    double expert_share;
    /* The routing's skew (sched/experts.h): expert_cover[j] is the share of a layer's routings
     * that go to the hottest j / SCHED_COVER_POINTS of its experts, as a calibration measured
     * it; all 0 (not measured): spread evenly, expert_cover[j] = j / SCHED_COVER_POINTS */
    double expert_cover[SCHED_COVER_POINTS + 1];
    double layer_size[SCHED_MAX_LAYERS];   /* bytes of each layer; 0: the mean (layer_bytes) */
    double kv_bytes;               /* KV cache of one layer for the whole context */
    double kv_read;                /* KV bytes one decoded token reads per layer */
    double layer_calls;            /* parallel kernel jobs of a layer's matrix products
                                    * (kern_matmul_jobs; mean over layers) */
    double layer_vector;           /* values of a layer's work besides its matrices
                                    * (layer_vector_values) */
    double out_params;             /* output matrix weights (n_vocab * n_embd) */
    enum dtype out_type;
    int out_calls;                 /* parallel kernel jobs of the output matrix's product */
    double out_bytes;              /* output matrix + output norm: read by the head every token */
    double embd_row_bytes;         /* one row of the token embedding */
    double hop_bytes;              /* bytes sent per hop for one decoded token */
    double proc_bytes;             /* every process: compute buffers and ring frames */
    double head_bytes;             /* the head's own extra: logits and sampling buffers */
    double head_page;              /* weights the head keeps resident besides its layers:
                                    * embedding, output norm, output matrix */
} sched_model;

typedef struct sched_opts {
    double reserve;     /* fraction of available RAM left to the rest of the system */
    bool fixed_ring;    /* devices cannot be bypassed: a dropped device forwards (window 0) */
    bool allow_disk;    /* prefer the fastest plan even if one that fits in memory exists */
    int k;              /* rounds: 0 = let Halda choose */
    double net_rtt;     /* seconds, for hops whose profile has no measurement */
    double net_bw;      /* bytes/s, likewise */
    double time_limit;  /* seconds for one Halda search (halda.h: what a cut search returns) */
    bool prefetch;      /* the ring prefetches: a streaming device reads its room's worth while
                         * the token is on the others (without, the ring waits for all of it) */
    double tie;         /* plans predicted within this fraction of the fastest are equal, and
                         * Halda balances among them (halda.h); 0: the fastest alone */
} sched_opts;

/* The values a decoded layer's work besides its matrix products goes through (engine.c): two
 * RMS norms and two residual adds of n_embd, rope over Q and K, K and V into the F16 cache, the
 * attention's output, SiLU(gate) * up over n_ff. The profile measures those ops on a reference
 * layer and divides by this count (profile.h: vector); the cost model multiplies it back for the
 * model's own shape. Per-call costs (rope's angles, the attention's job) scale with it only
 * roughly; the attention's reads of a long context are counted apart (kv_read). */
double layer_vector_values(int n_embd, int n_ff, int q_dim, int kv_dim);

/* Defaults: reserve 3%, bypassable ring, fit in memory first, k chosen, 5 ms / 100 Mbit/s,
 * 30 s of solving, prefetching. */
sched_opts sched_opts_default(void);

/* One device's per-layer costs and memory, derived from its profile. Times in seconds, sizes
 * in bytes. */
typedef struct dev_cost {
    char name[64];      /* for messages */
    double cpu_layer;   /* one layer on the CPU */
    double cpu_compute; /* of which compute (the rest is memory access) */
    double gpu_layer;   /* one layer on the GPU (0 with no GPU) */
    double hop;         /* one hop to the next device */
    double disk_bps;    /* re-read throughput; 0 = must not be overloaded */
    double ram;         /* budget after the reserve */
    double vram;        /* budget for GPU layers and their KV cache */
    bool has_gpu, unified;
    enum os_class os;
    double fixed_anon;  /* buffers (head: + its extras) */
    double fixed_page;  /* head: embedding and output weights */
    double head_time;   /* the head's work per token done here: embedding, output layer,
                         * sampling (any device: one holding every layer decodes on its own) */
    double burst;       /* under a CPU quota, the share s < 1: CPU times at full speed are s
                         * times the ones above; 1 without one */
    double burst_period;/* the quota's period P (seconds) */
} dev_cost;

/* Quota devices that may burst (cost.h: CPU quotas): the first ones in ring order. */
#define COST_MAX_BURSTING 8

/* The devices of dc[0..n) under a CPU quota (burst < 1), at most COST_MAX_BURSTING, in ring
 * order: their indices into idx. Returns how many. */
int cost_quota_devices(const dev_cost *dc, int n, int *idx);

/* Fails (one line naming the device and what is missing) when the profile lacks a rate for a
 * weight type of the model, or bandwidth, or is otherwise unusable. */
int cost_device(const sched_model *sm, const dev_profile *p, const sched_opts *o, bool is_head,
                dev_cost *dc, char *err, size_t errlen);

typedef struct dev_result {
    bool in_ring;          /* false: bypassed */
    int layers, gpu_layers;
    bool overloaded;       /* reads weights from disk every token */
    double anon, page, vram, budget;  /* bytes: expected use and the RAM budget */
    double resident_layers;/* CPU layers kept in RAM for good (all of them unless overloaded;
                            * a fraction is the start of a layer whose rest streams) */
    double disk_bytes;     /* read per token (the streamed layers) */
    double t_compute, t_memory, t_gpu, t_disk, t_net;
    double t_wait;         /* time per token this device waits for the others */
    bool burst;            /* computes at full speed within its CPU quota (cost.h) */
} dev_result;

typedef struct cost_result {
    bool feasible;
    char why[192];         /* when not feasible: which device and limit */
    double tpot;
    double t_compute, t_memory, t_gpu, t_disk, t_net, t_head;
    dev_result dev[PRIMA_MAX_DEVICES];
} cost_result;

/* Evaluate a plan directly (no linearisation): what Halda's integer programs must agree with.
 * dc[0] is the head. */
/* What a model's numbers mean when 0 (a dense model): the bytes a token reads of a layer, and
 * the share of its streamed bytes a token reads from disk. */
double sched_layer_read(const sched_model *sm);
double sched_stream_share(const sched_model *sm);
/* A layer of experts' shared part (attention, router, norms), bytes (mean). */
double sched_layer_shared(const sched_model *sm);
/* The share of its routings a layer of experts misses when it keeps the fraction phi of its
 * experts, the hottest (cost.h: Disk): 1 - expert_cover at phi, a convex curve decreasing
 * from 1 to 0 given as pieces miss(phi) = max over i of a[i] + c[i] phi (exact on [0, 1]; its
 * first piece, continued below 0, stays under the bytes of streaming the shared parts too).
 * Returns the count (1: even routing, 1 - phi), at most SCHED_COVER_POINTS. */
int sched_miss_pieces(const sched_model *sm, double *a, double *c);

void cost_eval(const dev_cost *dc, const sched_model *sm, const sched_opts *o, const ring_plan *p,
               cost_result *r);

/* "M1".."M4": the paper's device set for this device in this result. */
const char *cost_device_set(const dev_cost *dc, const dev_result *d);

#endif
