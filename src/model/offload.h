/* offload.h — which of an engine's layers go to a GPU, and putting them there.
 *
 * By the llama.cpp convention (and the ring plan's), the GPU layers of a range are its last
 * ones. A layer goes to the GPU whole (weights and KV cache in VRAM) or not at all: one whose
 * matrices have a type without shaders stays on the CPU, and when the asked-for layers do not
 * fit the VRAM budget the first of them stay on the CPU; both are said in the result's note. */
#ifndef PRIMA_OFFLOAD_H
#define PRIMA_OFFLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"
#include "model/model.h"

typedef struct offload_result {
    int n_gpu;          /* layers on the GPU */
    uint64_t vram;      /* bytes they take, with the shared activation buffers */
    char note[256];     /* what was asked for but stays on the CPU, and why; "" if nothing */
} offload_result;

/* Mark the last n layers of [first, last) in want (n clamped to the range's size). */
void offload_last(int first, int last, int n, bool *want);

/* Move the layers with want[il] of engine e (made for m with n_ctx positions and max_batch
 * tokens) to g, within vram_cap bytes (0: what the GPU has free). 0 (r says how many went),
 * or -1 with err when the GPU fails. */
int engine_offload(engine *e, const model *m, gpu_dev *g, const bool *want, uint64_t vram_cap,
                   int n_ctx, int max_batch, offload_result *r, char *err, size_t errlen);

/* Where a device's GPU layers go, in the library's terms (the CLI's --gpu, --no-gpu, --gpu-mem). */
typedef struct offload_opts {
    bool use;            /* false (as zeroed): never open a GPU; asked-for layers run on the CPU */
    int index;           /* gpu_open's index (-1: the first discrete GPU, else the first) */
    uint64_t vram_cap;   /* bytes; 0: what the GPU has free */
} offload_opts;

/* Put the layers with want[il] (n_want of them) of engine e, which has no GPU attached, on
 * the GPU: *g when open, else the one o names, opened here. Afterwards *g is open only when it
 * holds some of e's layers (close it after freeing e), else closed and NULL. A GPU that is off
 * or cannot be opened is not an error: the layers stay on the CPU. note gets one line for people either way: "GPU 0: NAME (discrete): 3 of <of> layers
 * <more>, 12.0 MiB of VRAM; what stays on the CPU and why", or "GPU: why; running on the CPU"
 * ("" when n_want is 0). 0, or -1 with err (the GPU failed while uploading). */
int offload_engine(const offload_opts *o, gpu_dev **g, engine *e, const model *m, const bool *want,
                   int n_want, int of, const char *more, int n_ctx, int max_batch, char *note,
                   size_t notelen, char *err, size_t errlen);

#endif
