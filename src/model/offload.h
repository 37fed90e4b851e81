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

/* The GPU's description of model m's layers (n_layer entries) and shape. */
void offload_describe(const model *m, int n_ctx, int max_batch, gpu_model_desc *md,
                      gpu_layer_desc *descs);

/* Move the layers with want[il] of engine e (made for m with n_ctx positions and max_batch
 * tokens) to g, within vram_cap bytes (0: what the GPU has free). 0 (r says how many went),
 * or -1 with err when the GPU fails. */
int engine_offload(engine *e, const model *m, gpu_dev *g, const bool *want, uint64_t vram_cap,
                   int n_ctx, int max_batch, offload_result *r, char *err, size_t errlen);

#endif
