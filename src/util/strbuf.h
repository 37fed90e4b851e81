/* strbuf.h — a growable, NUL-terminated byte buffer: the one append-and-double loop that the
 * chat renderer, the tokenizer's text arena, generation and the server's answers share. It sits
 * below every other module (it needs nothing but libc), so any layer may use it. */
#ifndef PRIMA_UTIL_STRBUF_H
#define PRIMA_UTIL_STRBUF_H

#include <stddef.h>

/* Zero-initialise; p is NULL until the first append, then always NUL-terminated at len.
 * The owner frees p. */
typedef struct strbuf {
    char *p;
    size_t len, cap;
} strbuf;

/* Makes *p (capacity *cap, holding len bytes) big enough for n more bytes and a NUL after them,
 * doubling from `first` bytes (when empty) as needed. 0, or -1 when the size would overflow or
 * memory runs out; then *p and *cap are unchanged. For buffers kept in other structs' fields. */
int strbuf_reserve(char **p, size_t *cap, size_t len, size_t n, size_t first);

/* Appends n bytes of s and keeps a NUL after them. 0, or -1 (overflow or out of memory; the
 * buffer is then unchanged). */
int strbuf_add(strbuf *b, const char *s, size_t n);

#endif
