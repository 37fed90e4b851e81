/* model.h — a transformer described by a GGUF file, and the evaluation of any range of its layers.
 *
 * The evaluation is split so that the ring runtime can place it across devices:
 *   embed (head only) -> layers [first, last) (any device, any number of ranges) -> output (head).
 * An `engine` holds the per-device state: KV cache for the layers it owns only, scratch buffers
 * allocated once for the largest batch, and the compute context. Weights are never copied: they
 * are pointers into the GGUF mapping. */
#ifndef PRIMA_MODEL_H
#define PRIMA_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "kernels/kern.h"
#include "model/arch.h"

struct model_hparams {
    enum model_arch arch;
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train;
    float rms_eps;
    float attn_scale;   /* of the scores q·k: 1/sqrt(head_dim) unless the architecture says */
    float embd_scale;   /* token embeddings are multiplied by it (1: not scaled) */
    int n_swa;          /* the sliding layers' window (0: none slides) */
    int n_expert, n_expert_used;   /* experts of a layer and per token (0: a dense model) */
    /* [0] every layer's rotation, [1] the sliding layers' when they have their own;
     * freq_factors points into the mapping when present */
    rope_params rope[LOP_ROPES];
};

/* A layer: its weights by slot (NULL where absent) and its program over them. */
typedef struct model_layer {
    const gguf_tensor *t[LT_COUNT];
    /* A matrix's kept form (model_keep_weights), NULL where the file's bytes are read */
    const void *kept[LT_COUNT];
    layer_prog prog;
} model_layer;

typedef struct model {
    gguf_file *file;
    model_hparams hp;
    const arch_desc *arch;
    const gguf_tensor *tok_embd, *output_norm, *output;  /* output == tok_embd when tied */
    model_layer *layers;                                /* n_layer */
    const void *output_kept;                            /* model_keep_weights, or NULL */
    /* How every engine of this model stores its KV cache: K and V element types (F16 unless
     * model_set_kv_types says otherwise). Devices of a ring use the same. */
    enum dtype kv_type[2];
} model;

model *model_load(const char *path, char *err, size_t errlen);
void model_free(model *m);
/* Keep the matrices of the layers in `layers` (NULL: all) and, when output, the output matrix
 * in the CPU path's kept form (kern_keep: interleaved rows, made once, about the size of the
 * file's bytes), for the types the path has one of: every engine then reads those instead of
 * the file, and a batch of a few tokens (speculative drafts, server slots) costs little more
 * than one (--repack). Layers kept already stay.
 * With cache_dir, the kept forms of all the model's matrices live in a file there, made by the
 * first call for this model file and kernel layout and mapped by the later ones: page cache,
 * which the OS reclaims and reads again as it does the model's. Without, they are memory of
 * the process, which the OS cannot reclaim. Returns the bytes kept now (0: none of the types
 * has a kept form here), or -1 with err (out of memory, the file cannot be written: nothing is
 * kept then). */
int64_t model_keep_weights(model *m, kern_ctx *kc, const bool *layers, bool output,
                           const char *cache_dir, char *err, size_t errlen);
/* Bytes of the kept forms model_keep_weights made. */
uint64_t model_kept_bytes(const model *m);
/* Lock the whole mapping in RAM (--mlock): weights are never paged out. */
int model_mlock(const model *m, char *err, size_t errlen);
/* The activation buffers the layers' programs use, and the output's (1u << LB_*). */
uint32_t model_buffers(const model *m);
/* Set the KV cache's K and V types before any engine is created: F16, Q8_0 or Q4_0 (the
 * quantized ones for head sizes that are multiples of 32). 0, or -1 with the reason in err. */
int model_set_kv_types(model *m, enum dtype k, enum dtype v, char *err, size_t errlen);
/* Bytes of one position's K and V rows in one layer, in the model's cache types. */
double model_kv_row_bytes(const model *m);
/* Positions of layer il's KV cache a sequence needs for contexts of n_ctx and batches of
 * max_batch: a sliding layer keeps only its window and the batch in flight (a ring). */
int model_kv_rows(const model *m, int il, int n_ctx, int max_batch);
/* The positions a sequence whose caches hold filled positions keeps when it is cut back to p0:
 * p0, or 0 when a sliding layer's ring no longer holds the window position p0 attends to. */
int model_kv_resume(const model *m, int n_ctx, int max_batch, int filled, int p0);
/* Byte range [*begin, *end) of the file holding layer il's tensors (for prefetch and planning). */
void model_layer_span(const model *m, int il, uint64_t *begin, uint64_t *end);
/* A layer of experts' expert tensors (gate, up, down): expert x's bytes in tensor j are
 * [begin[j] + x * slice[j], + slice[j]) of the file. Returns how many there are (3), 0 for a
 * dense layer. */
#define MODEL_EXPERT_TENSORS 3
int model_layer_experts(const model *m, int il, uint64_t begin[MODEL_EXPERT_TENSORS],
                        uint64_t slice[MODEL_EXPERT_TENSORS]);
/* Bytes of the weights of layer il, and of the head-only tensors (embedding, norm, output) the
 * head keeps in memory: of a token embedding separate from the output matrix, the pages of
 * the rows of MODEL_EMBD_ROWS distinct tokens (it is read a row per token, without readahead:
 * model_load), which text of a few thousand tokens rarely exceeds; rows beyond those are page
 * cache the kernel reclaims first, being used least. */
#define MODEL_EMBD_ROWS 4096
uint64_t model_layer_bytes(const model *m, int il);
/* Of those, the bytes one token reads: a layer of experts' k of n_expert experts (the mean). */
double model_layer_token_bytes(const model *m, int il);
uint64_t model_head_bytes(const model *m);
/* The head's bytes and every layer's: what a device running the whole model alone keeps. */
uint64_t model_weight_bytes(const model *m);

typedef struct engine engine;

/* owns[il] says which layers get a KV cache here (NULL = all). n_ctx positions, batches of at
 * most max_batch tokens, one sequence. */
engine *engine_create(const model *m, kern_ctx *kc, int n_ctx, int max_batch, const bool *owns,
                      char *err, size_t errlen);
/* The same for n_seq >= 1 sequences (numbered 0..n_seq-1), each with a KV region of its own of
 * n_ctx positions: the KV cache takes n_seq times the bytes of one sequence's. */
engine *engine_create_seqs(const model *m, kern_ctx *kc, int n_ctx, int max_batch, int n_seq,
                           const bool *owns, char *err, size_t errlen);
void engine_free(engine *e);
int engine_n_seq(const engine *e);

/* hidden: n x n_embd */
void engine_embed(engine *e, const int32_t *tokens, int n, float *hidden);
/* Run layers [first, last) in place on hidden for n tokens: row t is position pos[t] of sequence
 * seq[t] (seq NULL: every row of sequence 0). Rows of different sequences may be mixed in any
 * order; the rows of one sequence have consecutive positions in batch order, the first at most
 * the number of positions already cached for it in those layers. Each row attends to its own
 * sequence's cache up to its own position (so causally inside the batch too), and its result
 * does not depend on the other rows: a sequence gets bit for bit what it gets alone. Returns 0,
 * or -1 if a layer is not owned, n exceeds max_batch, a sequence id or a position is out of
 * range (or the kernels ran out of memory, which engine_create's reservation rules out). */
int engine_layers(engine *e, float *hidden, int n, const int32_t *pos, const int32_t *seq,
                  int first, int last);
/* Final norm + output projection of the rows [row0, row0+n_rows) of hidden -> logits
 * (n_rows x n_vocab). 0, or -1 as engine_layers. */
int engine_output(engine *e, const float *hidden, int row0, int n_rows, float *logits);
/* The final norm alone of n_rows rows of hidden -> out (n_rows x n_embd): the last hidden
 * state, as embeddings pool it. */
void engine_output_norm(const engine *e, const float *hidden, int n_rows, float *out);
/* Damaged weights (or a kernel bug) show up in the logits first: nothing downstream can choose
 * a token from a NaN, so wherever logits are made, say so instead of sampling garbage. l: rows
 * of n_vocab logits, the first of them at position pos0. 0, or -1 with a message. */
int logits_check(const float *l, int rows, int n_vocab, int pos0, char *err, size_t errlen);
/* KV cache edits of sequence seq, applied to every owned layer (the other sequences are left
 * alone): forget positions >= p0 (0: clear the sequence); and move positions [p0, p1) by
 * delta < 0 towards the start (re-rotating K), for context shift. Return 0, or -1 for a
 * sequence or a range outside the engine's. */
int engine_kv_truncate(engine *e, int seq, int p0);
int engine_kv_shift(engine *e, int seq, int p0, int p1, int delta);
/* GPU offload (offload.c builds gl): the layers with on_gpu[il] that this engine owns run on
 * the GPU from now on, with their KV cache in VRAM (the CPU copies are released); consecutive
 * GPU layers of an engine_layers call go in one submit. The engine takes gl. 0, or -1 if a GPU
 * is attached already, the engine holds more than one sequence, or out of memory. */
typedef struct gpu_layers gpu_layers;
int engine_attach_gpu(engine *e, gpu_layers *gl, const bool *on_gpu);
/* Whether layer il runs on the attached GPU (its weights are not read from the file). */
bool engine_layer_on_gpu(const engine *e, int il);
/* From now on keep a KV cache for exactly the layers in owns (NULL = all), every one of them
 * empty: caches of layers no longer owned are freed, new ones allocated (a ring's head after
 * its plan changed). 0, or -1 when out of memory (some of the layers are then not owned) or
 * a GPU is attached (engine_attach_gpu). */
int engine_set_owned(engine *e, const bool *owns);
/* The experts layer il routed at least one row to in its latest evaluation here: a bitmask of
 * n_expert bits (bit x of word x / 64), all zero before the first. NULL for a dense layer. */
const uint64_t *engine_routed(const engine *e, int il);
/* From now on add, for every row each layer of experts routes, one to counts[il * n_expert + x]
 * for each of its chosen experts x (NULL: stop). The caller's array, n_layer * n_expert. */
void engine_count_routes(engine *e, uint32_t *counts);
/* Whether a layer of experts asks the kernel for exactly its routed experts' pages once it
 * has routed (MADV_WILLNEED), before computing them: for weights that are paged by expert,
 * whose cold experts are not in memory (and whose faults, without readahead, would read a page
 * at a time). Off by default: a hint on pages in memory still costs a page-cache walk. */
void engine_hint_experts(engine *e, bool on);
/* Bytes held by the KV cache and by the scratch buffers. */
void engine_memory(const engine *e, uint64_t *kv_bytes, uint64_t *scratch_bytes);

#endif
