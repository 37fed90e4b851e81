/* grammar_internal.h — a parsed grammar as grammar.c leaves it for the matcher
 * (grammar_match.c): rules flattened into one array of elements. */
#ifndef PRIMA_GRAMMAR_INTERNAL_H
#define PRIMA_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "text/grammar.h"

enum { GE_END, GE_CHAR, GE_REF };

/* An alternative is a run of elements ending with GE_END: GE_CHAR (v: a class), GE_REF
 * (v: a rule). */
typedef struct gelem {
    int32_t type;
    int32_t v;
} gelem;

typedef struct grange {
    uint32_t lo, hi;
} grange;

/* A set of code points: ranges (sorted, merged) or their complement; ascii: the first 128 as
 * bits, the fast path. */
typedef struct gclass {
    int32_t first, n;
    bool neg;
    uint32_t ascii[4];
} gclass;

struct grammar {
    gelem *el;
    int n_el;
    grange *rg;
    gclass *cl;
    int n_cl;
    int32_t *alt_first;    /* per rule: its alternatives are alts[alt_first[r] .. +alt_n[r]) */
    int32_t *alt_n;
    int32_t *alts;         /* start positions in el */
    int n_rule;
    int root;
};

/* Whether class c holds code point cp. */
bool grammar_class_has(const grammar *g, const gclass *c, uint32_t cp);
/* Whether class c holds any code point in [lo, hi]. */
bool grammar_class_meets(const grammar *g, const gclass *c, uint32_t lo, uint32_t hi);

#endif
