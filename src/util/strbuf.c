/* strbuf.c — see strbuf.h. */
#include "util/strbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define STRBUF_FIRST 256

int strbuf_reserve(char **p, size_t *cap, size_t len, size_t n, size_t first)
{
    /* A quarter of the address space leaves the doubling below room to never wrap. */
    if (n > SIZE_MAX / 4 - len)
        return -1;
    if (len + n + 1 <= *cap)
        return 0;
    size_t c = *cap ? *cap : first;
    while (c < len + n + 1)
        c *= 2;
    char *q = realloc(*p, c);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

int strbuf_add(strbuf *b, const char *s, size_t n)
{
    if (strbuf_reserve(&b->p, &b->cap, b->len, n, STRBUF_FIRST))
        return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}
