/* tokenizer.h — text <-> tokens from the vocabulary stored in a GGUF file.
 *
 * Two models: SentencePiece-style ("llama": scores, byte fallback, leading space) and byte-level
 * BPE ("gpt2": merges, with the pre-tokenizer named by tokenizer.ggml.pre). */
#ifndef PRIMA_TOKENIZER_H
#define PRIMA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct tokenizer tokenizer;

tokenizer *tokenizer_load(const gguf_file *f, char *err, size_t errlen);
void tokenizer_free(tokenizer *t);

int tokenizer_n_vocab(const tokenizer *t);
int32_t tokenizer_bos(const tokenizer *t);   /* -1 if none */
int32_t tokenizer_eos(const tokenizer *t);
bool tokenizer_add_bos(const tokenizer *t);
bool tokenizer_add_eos(const tokenizer *t);
/* End of generation: EOS, EOT, end-of-turn tokens. */
bool tokenizer_is_eog(const tokenizer *t, int32_t id);
/* Token id of a piece's exact text, or -1. */
int32_t tokenizer_find(const tokenizer *t, const char *text);

/* Why tokenizer_encode failed (its negative results); tokenizer_strerror says it in words. */
enum {
    TOK_ERR_TOO_LONG = -1,   /* more than TOKENIZER_MAX_INPUT bytes */
    TOK_ERR_NOMEM = -2,
    TOK_ERR_PATTERN = -3,    /* a pre-tokenizer regex failed on the text (a PCRE2 limit) */
};
#define TOKENIZER_MAX_INPUT ((size_t)1 << 28)
const char *tokenizer_strerror(int rc);

/* Tokenize len bytes of text. add_special: add BOS/EOS as the vocabulary says. parse_special:
 * control tokens written in the text (e.g. "<|im_start|>") become those tokens; otherwise they
 * are plain text (user-defined tokens are always matched). Returns the count and a malloc'd array
 * in *out, or a TOK_ERR_* code (< 0). */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t **out);
/* tokenizer_encode with parse_special for some of the text only: a control token matches
 * where none of its bytes is marked in plain (len bytes, non-zero: plain text), so text put
 * into a template (a chat message) cannot write the template's control tokens. */
int tokenizer_encode_marked(const tokenizer *t, const char *text, size_t len, bool add_special,
                            const uint8_t *plain, int32_t **out);

/* The bytes a token stands for (SPM: U+2581 -> space, <0xNN> -> byte; BPE: byte-level decoded).
 * special: render control tokens as their text (else they give no bytes). Returns the full
 * length of the piece and copies at most cap bytes of it (like snprintf, without a NUL). */
size_t tokenizer_piece(const tokenizer *t, int32_t id, bool special, char *buf, size_t cap);

/* Streaming detokenization: bytes are released only as complete UTF-8 sequences. */
typedef struct detok_stream {
    char pending[8];
    int n_pending;
    bool first;        /* SPM: drop the leading space of the very first piece */
    bool special;      /* control tokens give their text (set after detok_init; else none) */
} detok_stream;
void detok_init(detok_stream *s);
/* Appends the printable bytes of token id to out (at most cap); returns the count. A token of
 * piece length n releases at most 3 * (n + 3) bytes; what does not fit in cap is dropped. */
size_t detok_push(detok_stream *s, const tokenizer *t, int32_t id, char *out, size_t cap);
/* Flush what is left (an incomplete sequence becomes U+FFFD). */
size_t detok_flush(detok_stream *s, char *out, size_t cap);

/* Chat templates (text/chat.c). */
typedef struct chat_msg {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;
} chat_msg;
enum chat_template {
    CHAT_CHATML, CHAT_LLAMA3, CHAT_LLAMA2, CHAT_MISTRAL, CHAT_DEEPSEEK_R1, CHAT_GEMMA
};
/* Recognise the template in tokenizer.chat_template (ChatML with *warned = true if unknown). */
enum chat_template chat_template_detect(const gguf_file *f, bool *warned);
/* Render msgs; add_assistant appends the assistant-turn opener. Returns a malloc'd string. */
char *chat_render(enum chat_template tpl, const chat_msg *msgs, int n, bool add_assistant);
/* Render and tokenize msgs (BOS/EOS as the vocabulary says): the template's control-token text
 * becomes control tokens, the messages' contents are plain text whatever they contain (a user
 * typing "<|im_end|>" does not end the turn). The count and a malloc'd array in *out, or a
 * TOK_ERR_* code. */
int chat_tokenize(const tokenizer *t, enum chat_template tpl, const chat_msg *msgs, int n,
                  bool add_assistant, int32_t **out);

#endif
