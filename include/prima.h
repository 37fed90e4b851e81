/* prima.h — the prima library: run a GGUF language model (llama, qwen2, qwen3) on this machine.
 *
 *     prima_model *m = prima_model_open("model.gguf", NULL, err, sizeof err);
 *     prima_session *s = prima_session_create(m, NULL, err, sizeof err);
 *     int32_t toks[256];
 *     int n = prima_tokenize(m, "Once upon a time", toks, 256, true, false, err, sizeof err);
 *     prima_eval(s, toks, n, err, sizeof err);
 *     for (int i = 0; i < 32; i++) {
 *         int32_t t = prima_sample(s);
 *         if (prima_token_is_eog(m, t)) break;
 *         char piece[64];
 *         size_t len = prima_token_piece(m, t, piece, sizeof piece);  // may exceed the buffer
 *         fwrite(piece, 1, len < sizeof piece ? len : sizeof piece, stdout);
 *         prima_eval(s, &t, 1, err, sizeof err);
 *     }
 *     prima_session_free(s);
 *     prima_model_free(m);
 *
 * Errors: functions that can fail return NULL or -1 and write a one-line message into the
 * caller's buffer (err, errlen). Nothing aborts: a damaged file, text the tokenizer refuses,
 * NaN logits and running out of memory are all errors (the kernels' own checks of shapes and
 * types that loading has already validated only catch bugs). A model may be shared by several
 * sessions; a session must be used by one thread at a time. Link with -lprima (pkg-config
 * prima); the library exports the PRIMA_API functions below and nothing else. */
#ifndef PRIMA_H
#define PRIMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the library exports: it is built with hidden visibility, so only these functions are
 * visible to a program that links it. */
#if defined(__GNUC__)
#define PRIMA_API __attribute__((visibility("default")))
#else
#define PRIMA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct prima_model prima_model;
typedef struct prima_session prima_session;

typedef struct prima_model_params {
    bool mlock;          /* lock the weights in RAM */
} prima_model_params;

typedef struct prima_session_params {
    int n_ctx;           /* context size in tokens; 0: min(4096, the model's training context) */
    int n_batch;         /* tokens per evaluation batch (default 512) */
    int n_threads;       /* compute threads; 0: the online CPUs */
    /* sampling: penalties over the last repeat_last_n tokens, then top-k, top-p, min-p and
     * temperature; temp <= 0 is greedy (ties to the lowest id) */
    float temp;          /* default 0.8 */
    int top_k;           /* default 40; 0 = off */
    float top_p;         /* default 0.95; 1 = off */
    float min_p;         /* default 0.05; 0 = off */
    float repeat_penalty;    /* default 1.0 = off */
    int repeat_last_n;       /* default 64 */
    float presence_penalty;  /* default 0 */
    float frequency_penalty; /* default 0 */
    uint64_t seed;       /* the same seed and inputs give the same tokens */
} prima_session_params;

PRIMA_API prima_model_params prima_model_default_params(void);
PRIMA_API prima_session_params prima_session_default_params(void);

/* params may be NULL (defaults). */
PRIMA_API prima_model *prima_model_open(const char *path, const prima_model_params *params,
                                        char *err, size_t errlen);
PRIMA_API void prima_model_free(prima_model *m);

PRIMA_API int prima_model_n_vocab(const prima_model *m);
PRIMA_API int prima_model_n_ctx_train(const prima_model *m);
PRIMA_API int prima_model_n_layer(const prima_model *m);

/* Tokenize text (NUL-terminated) into at most cap ids. add_special: BOS/EOS as the vocabulary
 * says; parse_special: control tokens written in the text become those tokens. Returns the
 * number of tokens (which may exceed cap: then only cap were written), or -1 with the reason in
 * err (a text too long, out of memory). */
PRIMA_API int prima_tokenize(const prima_model *m, const char *text, int32_t *tokens, int cap,
                             bool add_special, bool parse_special, char *err, size_t errlen);
/* The bytes of token id (control tokens give none, as does an id outside the vocabulary).
 * Copies at most cap of them into buf (no NUL) and returns the piece's full length, as snprintf
 * does: a result above cap means the piece was cut, and only cap bytes of buf are valid (call
 * again with a larger buffer; buf may be NULL when cap is 0). A piece may end inside a UTF-8
 * sequence that the next token completes. */
PRIMA_API size_t prima_token_piece(const prima_model *m, int32_t id, char *buf, size_t cap);
/* End of generation: EOS, EOT and end-of-turn tokens. */
PRIMA_API bool prima_token_is_eog(const prima_model *m, int32_t id);
PRIMA_API int32_t prima_token_bos(const prima_model *m);  /* -1 if none */

/* params may be NULL (defaults). */
PRIMA_API prima_session *prima_session_create(prima_model *m, const prima_session_params *params,
                                              char *err, size_t errlen);
PRIMA_API void prima_session_free(prima_session *s);

/* Evaluate n tokens after those already in the session (batched by n_batch). Returns 0, or -1
 * if a token is out of the vocabulary or they do not fit the context (nothing evaluated). */
PRIMA_API int prima_eval(prima_session *s, const int32_t *tokens, int n, char *err, size_t errlen);
/* The n_vocab logits after the last evaluated token (valid until the next call). */
PRIMA_API const float *prima_logits(const prima_session *s);
/* Choose the next token from prima_logits() with the session's sampling parameters. The
 * penalty window sees every evaluated token; prima_sample does not evaluate the token. */
PRIMA_API int32_t prima_sample(prima_session *s);
/* Tokens in the context, and forgetting all from position n_past on (0: start over). After a
 * rewind, evaluate at least one token before the next prima_logits / prima_sample. */
PRIMA_API int prima_session_n_past(const prima_session *s);
PRIMA_API void prima_session_rewind(prima_session *s, int n_past);

/* Why prima_generate stopped. */
typedef enum prima_end {
    PRIMA_END_EOG,           /* the model ended its reply (an end-of-generation token) */
    PRIMA_END_STOP,          /* a stop string was generated (it is not in the text) */
    PRIMA_END_LIMIT,         /* n_predict tokens */
    PRIMA_END_CONTEXT_FULL,  /* no room left in the context */
    PRIMA_END_CANCELLED,     /* the text callback asked to stop */
    PRIMA_END_ERROR,         /* err says why */
} prima_end;

/* The reply's text as it is generated: complete UTF-8 sequences, in order, never a part of a
 * stop string. Non-zero stops the reply before its next token (PRIMA_END_CANCELLED). */
typedef int (*prima_text_fn)(void *user, const char *text, size_t len);

/* Generate a reply from the current logits (after prima_eval of a prompt), as `prima run`
 * does: sample with the session's parameters, evaluate each token, stop at an
 * end-of-generation token, one of the n_stop stop strings, n_predict tokens (-1: no limit) or
 * a full context. on_text (may be NULL) sees the text as it comes; *reply (if reply is not
 * NULL) receives all of it, malloc'd (free it). The session then holds the reply's tokens but
 * the last one chosen (the end-of-generation token, or the one at which a stop string or the
 * limit ended it), as after `prima run`; prima_session_n_past says where it stands. */
PRIMA_API prima_end prima_generate(prima_session *s, int n_predict, const char *const *stop,
                                   int n_stop, prima_text_fn on_text, void *user, char **reply,
                                   char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
