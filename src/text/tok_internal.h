/* tok_internal.h — what the tokenizer's source files (tokenizer.c, tok_spm.c, tok_bpe.c) share.
 * Not part of the module contract: other modules use text/tokenizer.h only. */
#ifndef PRIMA_TOK_INTERNAL_H
#define PRIMA_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

/* tokenizer.ggml.token_type values (GGUF convention). */
enum tok_type {
    TOK_UNDEFINED = 0, TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3,
    TOK_USER_DEFINED = 4, TOK_UNUSED = 5, TOK_BYTE = 6
};

enum tok_model { TOK_MODEL_SPM, TOK_MODEL_BPE };

#define TOK_MAX_EOG 16

typedef struct tok_slot {
    uint32_t hash;
    uint32_t len;               /* of the text, checked before the text itself */
    int32_t id;                 /* -1: empty */
} tok_slot;

typedef struct merge_slot {
    int32_t left, right;        /* ids of the two sides; left -1: empty */
    int32_t rank;
} merge_slot;

/* A node of the trie of special-token texts, matched against raw text before tokenizing. */
typedef struct trie_node {
    int32_t child;              /* first child, -1 if none */
    int32_t sibling;            /* next sibling, -1 if none */
    int32_t token;              /* token ending here, -1 if none */
    uint8_t byte;
} trie_node;

typedef struct bpe_pretok bpe_pretok;

struct tokenizer {
    enum tok_model model;
    int32_t n_vocab;
    /* Texts of every id: the vocabulary (0..n_vocab-1), then, for BPE, texts that appear in
     * merges without being tokens (ids n_vocab..n_ids-1), so merges can be keyed by id pairs. */
    int32_t n_ids, cap_ids;
    char *arena;
    size_t arena_len, arena_cap;
    uint32_t *text_off, *text_len;
    float *score;               /* per vocabulary id */
    uint8_t *type;              /* per vocabulary id (enum tok_type) */
    tok_slot *slots;            /* text -> id; the last of duplicate texts wins */
    uint32_t slot_mask, n_slots_used;

    trie_node *trie;
    int32_t n_trie;

    int32_t bos, eos, unk;
    int32_t eog[TOK_MAX_EOG];
    int n_eog;
    bool add_bos, add_eos, add_space_prefix;

    /* SPM: the <0xNN> token of each byte (byte fallback), -1 if none. */
    int32_t byte_token[256];

    /* BPE */
    bool ignore_merges;         /* a word that is a whole token is not merged (Llama 3) */
    int32_t byte_char_id[256];  /* id of the byte-level character of each byte, -1 if none */
    merge_slot *merges;
    uint32_t merge_mask;
    bpe_pretok *pretok;
};

/* Interned texts (tokenizer.c). tok_lookup returns any id (vocabulary or merge-only), or -1. */
int32_t tok_lookup(const tokenizer *t, const char *s, size_t n);
/* Adds s as a new id (or, when dup_wins, repoints an existing text to the new id).
 * Returns the id, or -1 when out of memory. */
int32_t tok_intern(tokenizer *t, const char *s, size_t n, bool dup_wins);
static inline const char *tok_text(const tokenizer *t, int32_t id) { return t->arena + t->text_off[id]; }

/* A growable list of token ids (tokenizer.c). */
typedef struct tok_vec {
    int32_t *v;
    size_t n, cap;
    bool oom;
} tok_vec;
void tok_vec_push(tok_vec *out, int32_t id);

/* A binary min-heap of candidate merges: the smallest key first, then the leftmost. */
typedef struct tok_bigram {
    double key;                 /* SPM: -score; BPE: merge rank */
    int32_t left, right;        /* symbol indices */
    uint32_t size;              /* bytes of the merged text (detects stale entries) */
} tok_bigram;
typedef struct tok_heap {
    tok_bigram *v;
    size_t n, cap;
} tok_heap;
bool tok_heap_push(tok_heap *h, tok_bigram b);
tok_bigram tok_heap_pop(tok_heap *h);

/* A symbol of the merge algorithms: a byte range of the input, linked to its neighbours. */
typedef struct tok_symbol {
    int32_t prev, next;
    uint32_t start, n;          /* n == 0: merged into its left neighbour */
    int32_t id;                 /* BPE: id of the symbol's text, -1 if none */
} tok_symbol;

/* Length of the UTF-8 sequence a lead byte announces (1 for stray continuation bytes). */
static inline size_t utf8_seq_len(uint8_t lead)
{
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[lead >> 4];
}

/* SentencePiece (tok_spm.c): tokenize one fragment of raw text. */
void spm_encode(const tokenizer *t, const char *text, size_t len, bool space_prefix, tok_vec *out);

/* Byte-level BPE (tok_bpe.c). */
int bpe_load(tokenizer *t, const gguf_file *f, char *err, size_t errlen);
void bpe_free(tokenizer *t);
/* Tokenize one fragment of raw text. Returns 0, or TOK_ERR_NOMEM / TOK_ERR_PATTERN. */
int bpe_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out);
/* The bytes a byte-level token text stands for; returns the full length, copies at most cap. */
size_t bpe_decode_text(const char *s, size_t n, char *buf, size_t cap);

#endif
