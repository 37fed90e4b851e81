/* gpu.h — GPU offload: a device, its memory, the matrix shaders and whole transformer layers
 * kept in VRAM. One contract for every backend (Vulkan today; a CUDA or Metal backend would
 * implement the same table in gpu_impl.h), in the kernels' own terms: no model or CLI types.
 * A layer comes as its program (kernels/layer_ops.h) over its weights: a backend implements the
 * ops, not the layers of an architecture.
 *
 * What runs on a GPU is whole layers: their weights are uploaded once and stay in VRAM with
 * their F16 KV cache; a call runs a range of consecutive GPU layers on a batch with one submit,
 * so the hidden state crosses host <-> device once each way per range. Matrix products take F32
 * activations against the weights as stored (no activation quantization), so results agree with
 * the CPU's within the fixtures' tolerance, not bit for bit.
 *
 * The library never prints: failures come back as one line in err/why for the caller to show. */
#ifndef PRIMA_GPU_H
#define PRIMA_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/dtype.h"
#include "kernels/kern.h"
#include "kernels/layer_ops.h"

typedef struct gpu_dev gpu_dev;

typedef struct gpu_info {
    char backend[16];        /* "vulkan" */
    char name[128];          /* the driver's device name (truncated) */
    int index;               /* among the backend's devices */
    bool discrete;           /* a GPU with its own memory */
    bool unified;            /* integrated / CPU driver: its "VRAM" is the RAM the CPU uses */
    bool software;           /* a CPU implementation (lavapipe): correct, not fast */
    uint64_t vram_total;     /* device-local memory */
    uint64_t vram_free;      /* what the driver says is left (or total - prima's allocations) */
} gpu_info;

/* Open device `index` of the first backend that has one (index < 0: the first discrete GPU,
 * else the first device). NULL with one line in why (no backend built, no driver, no device,
 * index out of range). */
gpu_dev *gpu_open(int index, char *why, size_t whylen);
void gpu_close(gpu_dev *g);
const gpu_info *gpu_get_info(const gpu_dev *g);
/* Whether the matrix shaders handle this weight type (F32, F16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K). */
bool gpu_supports(enum dtype t);

/* ---- buffers and single matrix products (tests, benchmarks, profiling) ---- */

typedef struct gpu_buf gpu_buf;
/* Device-local memory of at least `bytes`; NULL with err when it cannot be had. */
gpu_buf *gpu_buf_create(gpu_dev *g, size_t bytes, char *err, size_t errlen);
void gpu_buf_free(gpu_dev *g, gpu_buf *b);
int gpu_buf_write(gpu_dev *g, gpu_buf *b, size_t off, const void *src, size_t n);
int gpu_buf_read(gpu_dev *g, const gpu_buf *b, size_t off, void *dst, size_t n);

/* y (n_tok x n_out F32) = W (n_out rows of n_in, type wt, as in a GGUF tensor) * x (n_tok x n_in
 * F32), `reps` times in one submit (benchmarks; 1 otherwise). Waits. Returns the seconds the
 * submit took, or -1 with err. */
double gpu_matmul(gpu_dev *g, const gpu_buf *w, enum dtype wt, int n_in, int n_out,
                  const gpu_buf *x, int n_tok, gpu_buf *y, int reps, char *err, size_t errlen);
/* Seconds for one empty submit and wait (the fixed cost every window pays). */
double gpu_submit_latency(gpu_dev *g);
/* Copy n bytes from src to dst on the device, reps times in one submit; seconds, or -1. */
double gpu_copy(gpu_dev *g, gpu_buf *dst, const gpu_buf *src, size_t n, int reps);

/* ---- measurements (prima profile, prima bench kernels --gpu) ---- */

typedef struct gpu_probe {
    double copy_bw;          /* device memory: bytes read + written per second by a copy */
    double upload, download; /* host -> device and device -> host, bytes/s */
    double submit;           /* seconds per empty submit */
} gpu_probe;

/* Memory and submit figures, over buffers of `bytes` (medians of a few runs). 0, or -1. */
int gpu_probe_memory(gpu_dev *g, size_t bytes, gpu_probe *p, char *err, size_t errlen);
/* Seconds one product of an n_out x n_in matrix of type t with n_tok tokens takes: the median of
 * min(reps, 5) submits (1 when a product takes over 0.5 s), each of enough back-to-back products
 * to hide the submit. -1 with err. */
double gpu_probe_matmul(gpu_dev *g, enum dtype t, int n_in, int n_out, int n_tok, int reps,
                        char *err, size_t errlen);

/* ---- whole layers ---- */

typedef struct gpu_tensor {
    const char *name;        /* for messages */
    const void *data;        /* NULL: absent */
    enum dtype type;
    int64_t ne0, ne1;        /* ne0 elements per row, ne1 rows (1 for vectors) */
} gpu_tensor;

typedef struct gpu_layer_desc {
    gpu_tensor t[LOP_MAX_TENSORS];   /* by weight slot; data NULL where absent */
    layer_prog prog;
    int kv_rows;                     /* positions its KV cache holds: n_ctx, or a ring */
} gpu_layer_desc;

typedef struct gpu_model_desc {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim;
    float rms_eps, attn_scale;
    rope_params rope[LOP_ROPES];
    int n_ctx, max_batch;
} gpu_model_desc;

/* The dependent steps (dispatches separated by barriers) of a dense layer on the GPU: norm,
 * QKV, RoPE, KV store, attention, output and residual, norm, gate and up, activation, down and
 * residual: what a cost model charges a dispatch's fixed cost for. */
#define GPU_LAYER_STEPS 10

/* Whether the backend runs every op of the layer and every matrix has a supported type; if
 * not, why names the first that fails. */
bool gpu_layer_supported(const gpu_layer_desc *l, char *why, size_t whylen);
/* VRAM one layer takes: its weights and its KV cache of kv_rows positions. */
uint64_t gpu_layer_bytes(const gpu_model_desc *md, const gpu_layer_desc *l);
/* VRAM of the buffers shared by all layers (activations for max_batch tokens). */
uint64_t gpu_scratch_bytes(const gpu_model_desc *md);

typedef struct gpu_layers gpu_layers;
/* Upload the layers il with on_gpu[il] (descs: n_layer entries) and allocate their KV caches.
 * NULL with err (out of VRAM: which layer). */
gpu_layers *gpu_layers_create(gpu_dev *g, const gpu_model_desc *md, const gpu_layer_desc *descs,
                              const bool *on_gpu, char *err, size_t errlen);
void gpu_layers_free(gpu_layers *gl);
/* Run layers [first, last) (all on the GPU) in place on hidden (n x n_embd) for n tokens at
 * consecutive positions pos, in one submit. The caller has validated n, pos and the range. */
int gpu_layers_run(gpu_layers *gl, float *hidden, int n, const int32_t *pos, int first,
                   int last, char *err, size_t errlen);
/* Copy the first `rows` rows of layer il's K and V cache (rows x n_head_kv*head_dim F16 each;
 * row p % kv_rows holds position p) out of VRAM or back into it: context shifts are done on
 * the host, by the same code as for CPU layers, and tests compare caches. */
int gpu_layers_kv_read(gpu_layers *gl, int il, int rows, uint16_t *k, uint16_t *v);
int gpu_layers_kv_write(gpu_layers *gl, int il, int rows, const uint16_t *k, const uint16_t *v);

#endif
