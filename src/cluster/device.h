/* device.h — what every device of a ring does, head and workers alike: compute its window of the
 * current round, hand the activations on, then release and prefetch windows in the background,
 * counting where the time went.
 *
 * The layers themselves are behind ring_layers, so the runtime does not depend on how they are
 * computed (the model's engine in prima; simple stand-ins in the protocol tests). */
#ifndef PRIMA_DEVICE_H
#define PRIMA_DEVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/pager.h"
#include "cluster/plan.h"
#include "cluster/proto.h"

/* Evaluation of layer ranges on one device, with a KV cache per sequence for the layers it
 * owns. */
typedef struct ring_layers {
    void *ctx;
    /* Run layers [first, last) in place on n rows of hidden: row t at position pos[t] of
     * sequence seq[t] (engine_layers' rules). 0 or -1. */
    int (*eval)(void *ctx, float *hidden, int n, const int32_t *pos, const int32_t *seq,
                int first, int last);
    /* KV-cache edits of one sequence on the owned layers (forget from p0; move [p0, p1) by
     * delta). 0 or -1. */
    int (*kv_truncate)(void *ctx, int seq, int p0);
    int (*kv_shift)(void *ctx, int seq, int p0, int p1, int delta);
    /* Whether layer il's weights live in a GPU's memory, so that its pages in the file are
     * neither prefetched nor released nor counted; NULL: no layer's do. */
    bool (*in_vram)(void *ctx, int il);
    /* For a device that decodes on its own (DECODE), and so computes the head's part as well:
     * the embedding of n tokens into hidden (n x n_embd), and the final norm and output
     * projection of one row, at position pos, into n_vocab logits: 0, or -1 with err (the
     * layers failed, or the logits are not finite, which nothing may sample). NULL: this
     * device cannot. */
    void (*embed)(void *ctx, const int32_t *tokens, int n, float *hidden);
    int (*output)(void *ctx, const float *hidden, int pos, float *logits, int n_vocab, char *err,
                  size_t errlen);
    /* For a model of experts: the experts layer il routed a row to in its latest eval here, as
     * a bitmask of ring_model.n_expert bits (bit x of word x / 64); NULL for a dense layer.
     * The pager pages such layers by expert from it. NULL: unknown (whole layers). */
    const uint64_t *(*routed)(void *ctx, int il);
    /* Whether the layers of experts ask for their routed experts' pages as soon as they have
     * routed (the device turns it on when it pages by expert); NULL: they cannot. */
    void (*hint_experts)(void *ctx, bool on);
} ring_layers;

#define RING_EXPERT_TENSORS 3   /* gate, up, down */

/* The model as the ring sees it: who it is, its shape, and where each layer lies in the file. */
typedef struct ring_model {
    uint8_t identity[PROTO_ID_BYTES];
    int n_layer, n_embd, n_vocab;
    const char *path;
    const uint8_t *map;            /* the whole file, mapped read-only */
    uint64_t map_size;
    uint64_t *layer_begin, *layer_end;   /* n_layer file byte ranges */
    uint64_t head_bytes;           /* embedding, final norm and output: the head's extra weights */
    /* Experts (n_expert 0: a dense model): expert x of layer il is RING_EXPERT_TENSORS byte
     * ranges, [expert_begin[il][j] + x * expert_slice[il][j], + expert_slice[il][j]), all
     * inside the layer's range; a dense layer's slices are 0. */
    int n_expert;
    uint64_t (*expert_begin)[RING_EXPERT_TENSORS], (*expert_slice)[RING_EXPERT_TENSORS];
    /* The file's chunk hashes (manifest.h): identity is their root. A device that holds the
     * file sends its chunks to the workers that keep a store (store.h) from them. */
    const struct manifest *manifest;
    /* The tensors outside the layers: those every device computing layers reads (rope
     * factors), and the head's own (embedding, final norm, output), as file ranges. */
    byte_range *shared, *head_only;
    int n_shared, n_head_only;
    bool manifest_owned;           /* computed by ring_model_init: freed with the model */
} ring_model;

typedef struct device_opts {
    bool prefetch;
    enum release_policy release;
    enum prefetch_method method;
    uint64_t mem_budget;           /* for RELEASE_AUTO */
} device_opts;

typedef struct device {
    const ring_model *m;
    ring_plan plan;
    int rank;
    ring_layers layers;
    pager *pg;                     /* NULL when neither prefetching nor releasing */
    bool prefetch;
    int cut;                       /* owned layers from this one on are streamed (n_layer: none) */
    uint64_t cut_offset;           /* ... from this file offset on: the cut layer's start stays */
    uint64_t room_bytes;           /* streamed bytes in memory at a time: PLAN_STREAM_ROOM_LAYERS
                                    * of its largest layers */
    int n_streamed;                /* how many layers are streamed */
    uint64_t n_computed;           /* windows computed so far (device.c: RESIDENCY_EVERY) */
    ring_counters cur;             /* this batch so far */
    int64_t idle_since;
    uint64_t disk_mark;
    byte_range *scratch;           /* n_scratch ranges each */
    byte_range *scratch2;
    int n_scratch;
    /* Paging by expert (a model of experts whose layers say what they routed): per owned
     * layer and expert its heat (routings, decayed per batch), whether it is hot (kept in
     * memory while its layer streams), and the experts of the layer's latest batch; a streamed
     * layer of experts keeps its hot experts (as many as hot_room holds, hottest first) and
     * reads ahead the rest of what the last batch routed when that guess has been paying off
     * (repeat_hit: the decayed share of a batch's routed experts the one before had routed). */
    float *heat;                   /* [n_layer][n_expert], NULL: whole layers */
    bool *hot;                     /* [n_layer][n_expert] */
    uint64_t *seen;                /* [n_layer][expert words] */
    int expert_words;
    uint64_t hot_room;
    bool keep_shared;              /* the streamed layers' shared parts stay (auto's budget) */
    double repeat_hit, repeat_all;
    bool advised;                  /* the expert tensors' read-around is off (device.c) */
} device;

/* Does the batch reach device `rank` in `round`? (It stops at the device computing the last
 * layer, which sends it to the head.) */
bool device_visits(const ring_plan *p, int rank, int round);

/* The layers of device `rank` that the release policy streams (drops after computing, so they
 * are read again next token): those from *cut on (n_layer: none), except the first *keep
 * bytes of layer *cut, which stay; returns how many layers stream, whole or in part.
 * never: none. always: all, when the device has more than one window. auto: none when its
 * layers (and, on the head, the head's own weights) fit in mem_budget; otherwise its first
 * layers in ring order stay resident while they fit beside the head's weights and room for
 * PLAN_STREAM_ROOM_LAYERS of its largest layers, then the start of the next one as far as
 * the budget reaches, and the rest is streamed one layer at a time: the pager reads the room's
 * worth while the token is on the other devices, compute's own faults (with the kernel's
 * readahead) the rest, and each is dropped once computed. */
int device_streamed_layers(const ring_model *m, const ring_plan *p, int rank,
                           enum release_policy policy, uint64_t mem_budget, int *cut,
                           uint64_t *keep);
/* The mem_budget with which `auto` keeps exactly `resident` layers of device `rank` resident
 * (its first floor(resident) layers in ring order and that fraction of the next one) and
 * streams the others (every layer resident when `resident` covers them, or when the others
 * fit in the room anyway): what a scheduler sends in ring_plan.weight_budget. */
uint64_t device_weight_budget(const ring_model *m, const ring_plan *p, int rank, double resident);
int device_init(device *d, const ring_model *m, const ring_plan *p, int rank,
                const ring_layers *layers, const device_opts *o, char *err, size_t errlen);
void device_free(device *d);
/* A batch arrived from the previous device: the time since the last hand-off was waiting. */
void device_arrived(device *d);
/* Compute this device's window of `round` (a forward-only hop when it is empty). */
int device_compute(device *d, int round, float *hidden, int n, const int32_t *pos,
                   const int32_t *seq);
/* The activations of `round` have been handed on: drop that window if the release policy says
 * so, and prefetch the window this device computes next. */
void device_handed_on(device *d, int round);
/* The counters of the batch just finished (disk bytes included); starts a new batch. */
void device_take_counters(device *d, ring_counters *out);
/* Accumulate src into dst. */
void ring_counters_add(ring_counters *dst, const ring_counters *src);
/* One line: "compute 1.2 ms, wait 3.4 ms, ..." */
void ring_counters_format(const ring_counters *c, char *out, size_t cap);

#endif
