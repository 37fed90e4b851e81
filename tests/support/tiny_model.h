/* tiny_model.h — small random-weight transformers written as GGUF files, with an independent
 * straightforward forward pass (double precision, no KV cache, no batching) to check the
 * engine against. Covers what the fixtures do not: qwen3, every RoPE scaling form, head sizes
 * other than n_embd / n_head. */
#ifndef PRIMA_TEST_TINY_MODEL_H
#define PRIMA_TEST_TINY_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tiny_rope { TINY_ROPE_PLAIN, TINY_ROPE_FREQS_TENSOR, TINY_ROPE_LLAMA3_KEYS, TINY_ROPE_LINEAR };

typedef struct tiny_cfg {
    const char *arch;   /* "llama", "qwen2" (q/k/v biases, NeoX) or "qwen3" (QK norm, NeoX) */
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab;
    int n_rot;          /* 0: head_dim */
    bool tied;          /* no output.weight */
    enum tiny_rope rope;
    uint64_t seed;
} tiny_cfg;

typedef struct tiny_model tiny_model;

tiny_model *tiny_model_create(const tiny_cfg *c);
void tiny_model_free(tiny_model *t);
/* Damage to apply when writing, for the loader's error paths (NULL fields: none). */
typedef struct tiny_fault {
    const char *arch;             /* general.architecture instead of the real one */
    const char *omit_key;         /* ARCH.<omit_key> is left out */
    const char *omit_tensor;
    const char *transpose_tensor; /* written with ne0 and ne1 swapped */
    const char *retype_tensor;    /* written as retype (zero bytes) */
    int retype;                   /* enum dtype */
} tiny_fault;

/* All weights F32. fault may be NULL. Returns 0, or -1 with a message. */
int tiny_model_write(const tiny_model *t, const char *path, const tiny_fault *fault, char *err,
                     size_t errlen);
/* Logits of every position (n x n_vocab) for tokens at positions 0..n-1. */
void tiny_model_forward(const tiny_model *t, const int32_t *tokens, int n, float *logits);

#endif
