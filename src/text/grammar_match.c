/* grammar_match.c — following a grammar byte by byte, and the token mask (grammar.h).
 *
 * A way the grammar can go is a stack: its top is the next element to match (always a
 * character class, once expanded), the nodes below are where to continue when the rule above
 * ends. Stacks are linked nodes (position, parent) interned in a hash table, so equal stacks are
 * one node id and a set of them is a small array of ids; a rule referenced last in an
 * alternative does not push a node (a tail call), so a long repetition does not deepen the
 * stack. The id -1 is the empty stack: the input so far is a whole match.
 *
 * Nodes made while computing a mask are dropped after it (the arena is cut back to the state's
 * own); the state itself is compacted after each accepted piece, keeping what its stacks use. */
#include <stdlib.h>
#include <string.h>

#include "text/grammar_internal.h"

/* Stacks beyond this many in one set: an ambiguous grammar that the matcher refuses to follow
 * further (its input is rejected) rather than slow down without bound. */
#define MAX_STACKS 4096

typedef struct snode {
    int32_t pos, parent;
} snode;

typedef struct hslot {
    int32_t pos, parent, id;
    uint32_t gen;
} hslot;

typedef struct idset {
    int32_t *v;
    int n, cap;
    bool complete;   /* holds the empty stack */
    bool overflow;
} idset;

struct grammar_state {
    const grammar *g;
    snode *nd;
    int n_nd, cap_nd;
    uint32_t *mark;          /* per node: the step that last expanded it */
    uint32_t step;
    hslot *tab;
    uint32_t tab_mask, gen;
    int tab_used;
    idset cur;               /* the stacks before the pending bytes of a character */
    uint32_t cp;             /* a character begun: its bits so far, need bytes to come */
    int need, len;           /* (len: the character's length in bytes) */
    uint32_t lo, hi;         /* the code points the begun character may still be */
    idset *lv;               /* the mask's sets, one per trie depth */
    int n_lv;
    struct memo *memo;       /* the mask's advances, remembered (MEMO_SIZE) */
    uint32_t memo_gen;
    int32_t *pool;           /* their results' stacks */
    int n_pool, cap_pool;
};

/* The mask meets the same set of stacks and character again and again (inside a string, every
 * character leaves the stacks as they were), so each advance of a small set is remembered for
 * the rest of the mask: a trie node then costs a lookup, not an expansion. */
#define MEMO_SIZE 4096
#define MEMO_IN 4
typedef struct memo {
    uint32_t gen;
    uint32_t cp;
    int32_t in[MEMO_IN];
    int n_in;
    int32_t out, n_out;      /* into the pool */
    bool complete, overflow;
} memo;

/* ---- nodes ------------------------------------------------------------------------------ */

static uint32_t hash2(int32_t a, int32_t b)
{
    uint64_t h = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static bool tab_insert(grammar_state *st, int32_t pos, int32_t parent, int32_t id)
{
    if ((uint32_t)(st->tab_used + 1) * 2 > st->tab_mask + 1) {
        uint32_t size = (st->tab_mask + 1) * 2;
        hslot *t = calloc(size, sizeof *t);
        if (!t)
            return false;
        for (uint32_t i = 0; i <= st->tab_mask; i++) {
            hslot *o = &st->tab[i];
            if (o->gen != st->gen)
                continue;
            uint32_t h = hash2(o->pos, o->parent) & (size - 1);
            while (t[h].gen == st->gen)
                h = (h + 1) & (size - 1);
            t[h] = *o;
        }
        free(st->tab);
        st->tab = t;
        st->tab_mask = size - 1;
    }
    uint32_t h = hash2(pos, parent) & st->tab_mask;
    while (st->tab[h].gen == st->gen)
        h = (h + 1) & st->tab_mask;
    st->tab[h] = (hslot){pos, parent, id, st->gen};
    st->tab_used++;
    return true;
}

/* The node (pos, parent), made if new; -2 when out of memory. */
static int32_t intern(grammar_state *st, int32_t pos, int32_t parent)
{
    uint32_t h = hash2(pos, parent) & st->tab_mask;
    for (; st->tab[h].gen == st->gen; h = (h + 1) & st->tab_mask)
        if (st->tab[h].pos == pos && st->tab[h].parent == parent)
            return st->tab[h].id;
    if (st->n_nd == st->cap_nd) {
        int cap = st->cap_nd ? st->cap_nd * 2 : 256;
        snode *nd = realloc(st->nd, sizeof *nd * (size_t)cap);
        uint32_t *mark = nd ? realloc(st->mark, sizeof *mark * (size_t)cap) : NULL;
        if (nd)
            st->nd = nd;
        if (!mark)
            return -2;
        st->mark = mark;
        st->cap_nd = cap;
    }
    int32_t id = st->n_nd;
    if (!tab_insert(st, pos, parent, id))
        return -2;
    st->nd[id] = (snode){pos, parent};
    st->mark[id] = 0;
    st->n_nd++;
    return id;
}

/* Forget every node from n on (the table keeps the first n). */
static bool cut_back(grammar_state *st, int n)
{
    st->gen++;
    st->tab_used = 0;
    st->n_nd = 0;
    for (int i = 0; i < n; i++) {
        st->n_nd = i;
        if (intern(st, st->nd[i].pos, st->nd[i].parent) != i)
            return false;
    }
    st->n_nd = n;
    return true;
}

/* ---- sets of stacks ------------------------------------------------------------------------ */

static bool set_add(idset *s, int32_t id)
{
    if (id < 0) {
        s->complete = true;
        return true;
    }
    if (s->n == MAX_STACKS) {
        s->overflow = true;
        return true;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        int32_t *v = realloc(s->v, sizeof *v * (size_t)cap);
        if (!v)
            return false;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = id;
    return true;
}

static void set_clear(idset *s)
{
    s->n = 0;
    s->complete = s->overflow = false;
}

static bool set_copy(idset *dst, const idset *src)
{
    set_clear(dst);
    for (int i = 0; i < src->n; i++)
        if (!set_add(dst, src->v[i]))
            return false;
    dst->complete = src->complete;
    return true;
}

static bool set_alive(const idset *s)
{
    return (s->n || s->complete) && !s->overflow;
}

/* Add to out the stacks with a character on top that continue at node id (pos, parent):
 * rule references are entered, ends of rules return to the parent. Each node is expanded once
 * per step, so an ambiguous grammar costs its distinct stacks, not its paths. false: out of
 * memory. */
static bool expand(grammar_state *st, int32_t id, idset *out)
{
    const grammar *g = st->g;
    for (;;) {
        if (id < 0)
            return set_add(out, -1);
        if (st->mark[id] == st->step)
            return true;
        st->mark[id] = st->step;
        snode n = st->nd[id];
        const gelem *e = &g->el[n.pos];
        if (e->type == GE_CHAR)
            return set_add(out, id);
        if (e->type == GE_END) {
            id = n.parent;
            continue;
        }
        /* a reference: its alternatives, continuing after it (no node when nothing follows) */
        int32_t cont = g->el[n.pos + 1].type == GE_END ? n.parent : intern(st, n.pos + 1, n.parent);
        if (cont == -2)
            return false;
        for (int a = 0; a < g->alt_n[e->v]; a++) {
            int32_t alt = intern(st, g->alts[g->alt_first[e->v] + a], cont);
            if (alt == -2 || !expand(st, alt, out))
                return false;
        }
        return true;
    }
}

/* The stacks of in that take code point cp, moved past it, into out. */
static bool advance(grammar_state *st, const idset *in, uint32_t cp, idset *out)
{
    const grammar *g = st->g;
    set_clear(out);
    st->step++;
    for (int i = 0; i < in->n; i++) {
        snode n = st->nd[in->v[i]];
        if (!grammar_class_has(g, &g->cl[g->el[n.pos].v], cp))
            continue;
        int32_t next = g->el[n.pos + 1].type == GE_END ? n.parent : intern(st, n.pos + 1, n.parent);
        if (next == -2 || !expand(st, next, out))
            return false;
    }
    return true;
}

/* Whether a stack of s may take a character in [lo, hi]. */
static bool may_take(const grammar_state *st, const idset *s, uint32_t lo, uint32_t hi)
{
    const grammar *g = st->g;
    for (int i = 0; i < s->n; i++)
        if (grammar_class_meets(g, &g->cl[g->el[st->nd[s->v[i]].pos].v], lo, hi))
            return true;
    return false;
}

/* ---- UTF-8 -------------------------------------------------------------------------------- */

typedef struct u8 {
    uint32_t cp, lo, hi;
    int need, len;
} u8;

/* Byte b after the partial character u: 1 a character is complete (u->cp), 0 one is begun or
 * goes on (u->lo..u->hi: what it may still be), -1 the byte cannot be here in UTF-8 (RFC 3629:
 * no overlong forms, surrogates or code points past U+10FFFF). */
static int utf8_step(u8 *u, unsigned char b)
{
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (!u->need) {
        if (b < 0x80) {
            u->cp = u->lo = u->hi = b;
            return 1;
        }
        u->len = b >= 0xC2 && b <= 0xDF ? 2 : (b & 0xF0) == 0xE0 ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
        if (!u->len)
            return -1;
        u->need = u->len - 1;
        u->cp = b & (0x7Fu >> u->len);
    } else {
        if ((b & 0xC0) != 0x80)
            return -1;
        u->cp = u->cp << 6 | (b & 0x3F);
        u->need--;
    }
    uint32_t lo = u->cp << (6 * u->need), hi = lo | ((1u << (6 * u->need)) - 1);
    if (lo < least[u->len])
        lo = least[u->len];
    if (hi > 0x10FFFF)
        hi = 0x10FFFF;
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF))
        return -1;
    u->lo = lo;
    u->hi = hi;
    return u->need ? 0 : 1;
}

/* ---- the state ---------------------------------------------------------------------------- */

grammar_state *grammar_state_new(const grammar *g)
{
    grammar_state *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->g = g;
    st->tab_mask = 255;
    st->gen = 1;
    st->tab = calloc(st->tab_mask + 1, sizeof *st->tab);
    /* the start: root's alternatives, with nothing below */
    if (st->tab) {
        st->step++;
        bool ok = true;
        for (int a = 0; ok && a < g->alt_n[g->root]; a++) {
            int32_t id = intern(st, g->alts[g->alt_first[g->root] + a], -1);
            ok = id >= 0 && expand(st, id, &st->cur);
        }
        if (ok)
            return st;
    }
    grammar_state_free(st);
    return NULL;
}

void grammar_state_free(grammar_state *st)
{
    if (!st)
        return;
    free(st->nd);
    free(st->mark);
    free(st->tab);
    free(st->cur.v);
    for (int i = 0; i < st->n_lv; i++)
        free(st->lv[i].v);
    free(st->lv);
    free(st->memo);
    free(st->pool);
    free(st);
}

/* Keep only the nodes the stacks of cur use, renumbered; false when out of memory. */
static bool compact(grammar_state *st)
{
    int n = st->n_nd;
    snode *old = malloc(sizeof *old * (size_t)(n ? n : 1));
    int32_t *map = malloc(sizeof *map * (size_t)(n ? n : 1));
    int32_t *path = malloc(sizeof *path * (size_t)(n ? n : 1));
    bool ok = old && map && path;
    if (ok) {
        memcpy(old, st->nd, sizeof *old * (size_t)n);
        for (int i = 0; i < n; i++)
            map[i] = -3;
        st->gen++;
        st->tab_used = 0;
        st->n_nd = 0;
    }
    for (int i = 0; ok && i < st->cur.n; i++) {
        /* the chain from the top down to a node already kept (or the bottom), then up again */
        int depth = 0;
        for (int32_t id = st->cur.v[i]; id >= 0 && map[id] == -3; id = old[id].parent)
            path[depth++] = id;
        while (ok && depth--) {
            int32_t id = path[depth], parent = old[id].parent;
            map[id] = intern(st, old[id].pos, parent < 0 ? parent : map[parent]);
            ok = map[id] >= 0;
        }
        if (ok)
            st->cur.v[i] = map[st->cur.v[i]];
    }
    free(old);
    free(map);
    free(path);
    return ok;
}

bool grammar_state_accept(grammar_state *st, const char *bytes, size_t n)
{
    idset a = {0}, b = {0};
    u8 u = {.cp = st->cp, .need = st->need, .len = st->len, .lo = st->lo, .hi = st->hi};
    bool ok = set_copy(&a, &st->cur);
    for (size_t i = 0; ok && i < n; i++) {
        int r = utf8_step(&u, (unsigned char)bytes[i]);
        if (r < 0) {
            ok = false;
        } else if (r == 0) {
            ok = may_take(st, &a, u.lo, u.hi);
        } else {
            ok = advance(st, &a, u.cp, &b) && set_alive(&b);
            idset t = a;
            a = b;
            b = t;
        }
    }
    if (ok) {
        free(st->cur.v);
        st->cur = a;
        a.v = NULL;
        st->cp = u.cp;
        st->need = u.need;
        st->len = u.len;
        st->lo = u.lo;
        st->hi = u.hi;
    }
    free(a.v);
    free(b.v);
    /* a refusal leaves the stacks as they were; either way the nodes made are dropped */
    if (!compact(st))
        return false;
    return ok;
}

bool grammar_state_complete(const grammar_state *st)
{
    return st->cur.complete && !st->need;
}

bool grammar_state_open(const grammar_state *st)
{
    return st->cur.n > 0 || st->need;
}

/* ---- the vocabulary's trie and the mask ----------------------------------------------------- */

typedef struct tnode {
    int32_t child, sibling, tok;   /* first child, next sibling, first token ending here */
    uint8_t byte;
} tnode;

struct grammar_vocab {
    tnode *nd;
    int n_nd, cap_nd;
    int n_vocab, depth;            /* the longest piece */
    int32_t *tok_next;             /* the next token with the same bytes */
    char *bytes;                   /* the pieces, token id's at off[id] .. off[id + 1] */
    uint32_t *off;
    bool *eog;
};

static int32_t trie_child(grammar_vocab *v, int32_t at, uint8_t b)
{
    int32_t c = v->nd[at].child;
    while (c >= 0 && v->nd[c].byte != b)
        c = v->nd[c].sibling;
    if (c >= 0)
        return c;
    if (v->n_nd == v->cap_nd) {
        int cap = v->cap_nd * 2;
        tnode *nd = realloc(v->nd, sizeof *nd * (size_t)cap);
        if (!nd)
            return -1;
        v->nd = nd;
        v->cap_nd = cap;
    }
    c = v->n_nd++;
    v->nd[c] = (tnode){-1, v->nd[at].child, -1, b};
    v->nd[at].child = c;
    return c;
}

/* Renumber the trie's nodes in depth-first order, so that the mask's walk reads them mostly
 * in sequence (built in insertion order, each node was a cache miss). 0, or -1. */
static int relayout(grammar_vocab *v)
{
    tnode *nd = malloc(sizeof *nd * (size_t)v->n_nd);
    int32_t *stack = malloc(sizeof *stack * (size_t)v->n_nd), *map = malloc(sizeof *map * (size_t)v->n_nd);
    if (!nd || !stack || !map) {
        free(nd);
        free(stack);
        free(map);
        return -1;
    }
    int sp = 0, k = 0;
    stack[sp++] = 0;
    while (sp) {
        int32_t at = stack[--sp];
        map[at] = k++;
        /* children pushed last to first, so the first is visited next */
        int first = sp;
        for (int32_t c = v->nd[at].child; c >= 0; c = v->nd[c].sibling)
            stack[sp++] = c;
        for (int i = first, j = sp - 1; i < j; i++, j--) {
            int32_t x = stack[i];
            stack[i] = stack[j];
            stack[j] = x;
        }
    }
    for (int i = 0; i < v->n_nd; i++) {
        tnode o = v->nd[i];
        nd[map[i]] = (tnode){o.child < 0 ? -1 : map[o.child], o.sibling < 0 ? -1 : map[o.sibling],
                             o.tok, o.byte};
    }
    free(v->nd);
    v->nd = nd;
    free(stack);
    free(map);
    return 0;
}

grammar_vocab *grammar_vocab_new(const tokenizer *t)
{
    grammar_vocab *v = calloc(1, sizeof *v);
    int n = tokenizer_n_vocab(t);
    if (!v)
        return NULL;
    v->n_vocab = n;
    v->cap_nd = 1024;
    v->nd = malloc(sizeof *v->nd * (size_t)v->cap_nd);
    v->tok_next = malloc(sizeof *v->tok_next * (size_t)(n ? n : 1));
    v->off = malloc(sizeof *v->off * (size_t)(n + 1));
    v->eog = calloc((size_t)(n ? n : 1), sizeof *v->eog);
    size_t total = 0;
    for (int id = 0; id < n; id++)
        total += tokenizer_piece(t, id, false, NULL, 0);
    v->bytes = malloc(total ? total : 1);
    if (!v->nd || !v->tok_next || !v->off || !v->eog || !v->bytes) {
        grammar_vocab_free(v);
        return NULL;
    }
    v->nd[0] = (tnode){-1, -1, -1, 0};
    v->n_nd = 1;
    size_t at = 0;
    for (int id = 0; id < n; id++) {
        v->off[id] = (uint32_t)at;
        size_t len = tokenizer_piece(t, id, false, v->bytes + at, total - at);
        v->eog[id] = tokenizer_is_eog(t, id);
        v->tok_next[id] = -1;
        int32_t node = 0;
        for (size_t i = 0; i < len && node >= 0; i++)
            node = trie_child(v, node, (uint8_t)v->bytes[at + i]);
        if (node < 0) {
            grammar_vocab_free(v);
            return NULL;
        }
        if (len) {
            v->tok_next[id] = v->nd[node].tok;
            v->nd[node].tok = id;
            v->depth = (int)len > v->depth ? (int)len : v->depth;
        }
        at += len;
    }
    v->off[n] = (uint32_t)at;
    if (relayout(v)) {
        grammar_vocab_free(v);
        return NULL;
    }
    return v;
}

void grammar_vocab_free(grammar_vocab *v)
{
    if (!v)
        return;
    free(v->nd);
    free(v->tok_next);
    free(v->bytes);
    free(v->off);
    free(v->eog);
    free(v);
}

int grammar_vocab_size(const grammar_vocab *v)
{
    return v->n_vocab;
}

/* advance(), remembered for small sets within one mask (st->memo_gen). */
static bool advance_memo(grammar_state *st, const idset *in, uint32_t cp, idset *out)
{
    if (in->n > MEMO_IN || in->overflow || !in->n)
        return advance(st, in, cp, out);
    uint64_t h = cp * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < in->n; i++)
        h = (h ^ (uint32_t)in->v[i]) * 0x100000001B3ull;
    memo *m = &st->memo[(h >> 40) & (MEMO_SIZE - 1)];
    if (m->gen == st->memo_gen && m->cp == cp && m->n_in == in->n &&
        !memcmp(m->in, in->v, sizeof *in->v * (size_t)in->n)) {
        set_clear(out);
        for (int i = 0; i < m->n_out; i++)
            if (!set_add(out, st->pool[m->out + i]))
                return false;
        out->complete = m->complete;
        out->overflow = m->overflow;
        return true;
    }
    if (!advance(st, in, cp, out))
        return false;
    if (st->n_pool + out->n > st->cap_pool) {
        int cap = st->cap_pool ? st->cap_pool * 2 : 1024;
        while (cap < st->n_pool + out->n)
            cap *= 2;
        int32_t *p = realloc(st->pool, sizeof *p * (size_t)cap);
        if (!p)
            return true;   /* not remembered: no harm */
        st->pool = p;
        st->cap_pool = cap;
    }
    *m = (memo){st->memo_gen, cp, {0}, in->n, st->n_pool, out->n, out->complete, out->overflow};
    memcpy(m->in, in->v, sizeof *in->v * (size_t)in->n);
    if (out->n)
        memcpy(st->pool + st->n_pool, out->v, sizeof *out->v * (size_t)out->n);
    st->n_pool += out->n;
    return true;
}

typedef struct walk {
    grammar_state *st;
    const grammar_vocab *v;
    uint8_t *allowed;
    int count;
} walk;

/* The children of trie node at, reached with the stacks s and the partial character u. */
static bool walk_node(walk *w, int32_t at, int depth, const idset *s, u8 u)
{
    grammar_state *st = w->st;
    const tnode *nd = w->v->nd;
    idset *t = &st->lv[depth];
    for (int32_t c = nd[at].child; c >= 0; c = nd[c].sibling) {
        u8 x = u;
        int r = utf8_step(&x, nd[c].byte);
        const idset *next = s;
        if (r < 0)
            continue;
        if (r == 0) {
            if (!may_take(st, s, x.lo, x.hi))
                continue;
        } else {
            if (!advance_memo(st, s, x.cp, t))
                return false;
            if (!set_alive(t))
                continue;
            next = t;
        }
        for (int32_t id = nd[c].tok; id >= 0; id = w->v->tok_next[id]) {
            w->allowed[id] = 1;
            w->count++;
        }
        if (nd[c].child >= 0 && next->n > 0 && !walk_node(w, c, depth + 1, next, x))
            return false;
    }
    return true;
}

int grammar_state_mask(grammar_state *st, const grammar_vocab *v, uint8_t *allowed)
{
    memset(allowed, 0, (size_t)v->n_vocab);
    if (st->n_lv < v->depth + 1) {
        idset *lv = realloc(st->lv, sizeof *lv * (size_t)(v->depth + 1));
        if (!lv)
            return -1;
        memset(lv + st->n_lv, 0, sizeof *lv * (size_t)(v->depth + 1 - st->n_lv));
        st->lv = lv;
        st->n_lv = v->depth + 1;
    }
    if (!st->memo && !(st->memo = calloc(MEMO_SIZE, sizeof *st->memo)))
        return -1;
    st->memo_gen++;
    st->n_pool = 0;
    walk w = {st, v, allowed, 0};
    int base = st->n_nd;
    u8 u = {.cp = st->cp, .need = st->need, .len = st->len, .lo = st->lo, .hi = st->hi};
    bool ok = walk_node(&w, 0, 0, &st->cur, u);
    if (!cut_back(st, base) || !ok)
        return -1;
    if (grammar_state_complete(st))
        for (int id = 0; id < v->n_vocab; id++)
            if (v->eog[id]) {
                allowed[id] = 1;
                w.count++;
            }
    return w.count;
}

bool grammar_state_accept_token(grammar_state *st, const grammar_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_vocab)
        return false;
    if (v->eog[id])
        return grammar_state_complete(st);
    uint32_t n = v->off[id + 1] - v->off[id];
    return n > 0 && grammar_state_accept(st, v->bytes + v->off[id], n);
}
