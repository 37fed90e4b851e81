/* grammar.h — constrained output: a GBNF grammar (the notation llama.cpp's users write), a
 * matcher that follows it byte by byte, and the mask of the vocabulary's tokens that may come
 * next.
 *
 * The notation: `name ::= alternatives` rules (the start rule is `root`), alternatives
 * separated by `|`, sequences, groups `( ... )`, literals "..." with escapes (\n \r \t \\ \"
 * \xHH \uHHHH \UHHHHHHHH), character classes [a-z0-9_] with ranges and negation [^...], `.`
 * (any character), the repetitions `?` `*` `+` `{m}` `{m,}` `{m,n}`, and `#` comments to the
 * end of the line. A rule may continue on the next lines. Characters are Unicode code points:
 * the matcher decodes UTF-8 as bytes arrive, so a token may end inside a character.
 *
 * The matcher keeps every way the grammar can still go (a set of stacks of rule positions,
 * shared and deduplicated). The mask walks a trie of the vocabulary's byte pieces against that
 * set: tokens that share a prefix share its work, and a branch no stack survives is cut. */
#ifndef PRIMA_GRAMMAR_H
#define PRIMA_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

typedef struct grammar grammar;
typedef struct grammar_state grammar_state;
typedef struct grammar_vocab grammar_vocab;

/* Parse len bytes of GBNF whose start rule is `root`. NULL with err ("line L, column C: ...")
 * when it is malformed: a syntax error, an undefined rule, a rule defined twice, left
 * recursion, or beyond the limits (GRAMMAR_MAX_* below). */
#define GRAMMAR_MAX_SOURCE ((size_t)1 << 20)   /* bytes of GBNF */
#define GRAMMAR_MAX_REPEAT 1000                /* m and n of {m,n} */
#define GRAMMAR_MAX_ELEMS 1000000              /* elements after repetitions are unrolled */
grammar *grammar_parse(const char *src, size_t len, char *err, size_t errlen);
void grammar_free(grammar *g);

/* A matcher at the start of g (g must outlive it). NULL when out of memory. */
grammar_state *grammar_state_new(const grammar *g);
void grammar_state_free(grammar_state *st);
/* Take n bytes: true if the grammar allows them after what was taken before (the state then
 * follows them), false if not (the state is unchanged). */
bool grammar_state_accept(grammar_state *st, const char *bytes, size_t n);
/* The bytes taken so far form a whole match (ending here is allowed). */
bool grammar_state_complete(const grammar_state *st);
/* More bytes may follow (false and complete: the grammar is done). */
bool grammar_state_open(const grammar_state *st);

/* The vocabulary's byte pieces in a trie (control tokens, which have none, are left out:
 * the mask refuses them, except the end-of-generation tokens where the grammar is complete).
 * Shared by every state over this tokenizer. NULL when out of memory. */
grammar_vocab *grammar_vocab_new(const tokenizer *t);
void grammar_vocab_free(grammar_vocab *v);
int grammar_vocab_size(const grammar_vocab *v);
/* allowed[id] = whether token id may come next (n_vocab bytes). The count allowed, or -1 when
 * out of memory. */
int grammar_state_mask(grammar_state *st, const grammar_vocab *v, uint8_t *allowed);
/* Take token id's bytes (grammar_state_accept); an end-of-generation token is taken where the
 * grammar is complete. */
bool grammar_state_accept_token(grammar_state *st, const grammar_vocab *v, int32_t id);

#endif
