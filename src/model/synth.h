/* synth.h — synthetic (random-weight) models written as GGUF files, for benchmarks and tests.
 *
 * The file is what a converter would produce for a network of the given shape and any
 * architecture of the table (model/arch.h): llama.cpp's key and tensor names, a tokenizer copied from another GGUF (or a built-in
 * byte-level one), and weights whose scale keeps activations sane: token_embd ~ N(0, 1), every
 * other matrix ~ N(0, 1/n_in), norm weights ~ N(1, 0.05^2), biases ~ N(0, 0.1^2).
 * Output is a pure function of the parameters (seed included), whatever the thread count.
 * Memory use is constant in the model size: tensors are generated and written a block of rows
 * at a time. */
#ifndef PRIMA_SYNTH_H
#define PRIMA_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* Weight-type schemes: one type for every matrix, or a llama.cpp-style mix. */
enum synth_ftype {
    SYNTH_F32, SYNTH_F16, SYNTH_BF16, SYNTH_Q8_0, SYNTH_Q4_0, SYNTH_Q4_K, SYNTH_Q5_K, SYNTH_Q6_K,
    SYNTH_Q4_K_M, SYNTH_Q5_K_M, SYNTH_FTYPE_COUNT
};

typedef struct synth_params {
    enum model_arch arch;
    int n_layer, n_embd, n_ff, n_head, n_head_kv;
    int head_dim;            /* 0: n_embd / n_head */
    int n_ctx;
    int n_vocab;             /* built-in vocabulary size; ignored with vocab_from */
    float rope_base, rms_eps;
    int n_swa;               /* sliding window of the architecture's sliding layers; 0: none */
    int n_expert, n_expert_used;  /* experts per layer (0: dense) and per token; n_ff is then
                                   * an expert's width */
    bool tied;               /* no output.weight: the output layer reuses token_embd */
    enum synth_ftype ftype;
    uint64_t seed;
    const char *vocab_from;  /* GGUF file whose tokenizer.* keys are copied, or NULL */
    const char *name;        /* general.name */
    int n_threads;
} synth_params;

typedef struct synth_stats {
    uint64_t n_tensors, n_params, n_bytes; /* n_bytes: the whole file */
} synth_stats;

/* A small llama (2 layers, 256 wide) of F32 weights with the built-in vocabulary. */
void synth_defaults(synth_params *p);
/* Shape, vocabulary size and hyper-parameters of a published model (llama3-8b, llama3-70b,
 * qwen2.5-14b, qwen2.5-32b, qwen2.5-72b, qwen3-30b-a3b, qwen3-235b-a22b); -1 for an unknown
 * name. */
int synth_preset(synth_params *p, const char *name);
/* Space-separated names of the presets, for help texts. */
const char *synth_preset_names(void);

/* "f32" ... "q5_k_m"; -1 if unknown. */
int synth_ftype_from_name(const char *name);
const char *synth_ftype_name(enum synth_ftype t);

/* Check p (one-line error naming the parameter), then write the model to path. */
int synth_write(const synth_params *p, const char *path, synth_stats *stats, char *err,
                size_t errlen);

#endif
