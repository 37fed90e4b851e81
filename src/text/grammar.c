/* grammar.c — GBNF source to rules (grammar.h): the parser, with groups and repetitions
 * turned into rules of their own, and the checks that make the matcher's work finite
 * (every rule defined, none left-recursive). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar_internal.h"

typedef struct seq {
    gelem *e;
    int n, cap;
} seq;

typedef struct prule {
    const char *name;       /* into the source; NULL for the rules made for groups */
    size_t name_len;
    bool defined;
    int def_line, def_col, ref_line, ref_col;
    seq *alts;
    int n_alts, cap_alts;
} prule;

typedef struct parser {
    const char *s;
    size_t len, at;
    int line;
    size_t line_start;
    prule *rules;
    int n_rules, cap_rules;
    gclass *cl;
    int n_cl, cap_cl;
    grange *rg;
    int n_rg, cap_rg;
    long n_el;
    char *err;
    size_t errlen;
    bool failed;
} parser;

static bool fail_at(parser *p, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool fail_at(parser *p, int line, int col, const char *fmt, ...)
{
    if (p->failed)
        return false;
    p->failed = true;
    int k = snprintf(p->err, p->errlen, "line %d, column %d: ", line, col);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < p->errlen)
        vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}

static int col(const parser *p)
{
    return (int)(p->at - p->line_start) + 1;
}

#define FAIL(p, ...) fail_at(p, (p)->line, col(p), __VA_ARGS__)

/* Grows *buf (of *cap elements of size sz) to hold n; false when out of memory. */
static bool grow(void **buf, int *cap, int n, size_t sz)
{
    if (n <= *cap)
        return true;
    int c = *cap ? *cap * 2 : 8;
    while (c < n)
        c *= 2;
    void *b = realloc(*buf, (size_t)c * sz);
    if (!b)
        return false;
    *buf = b;
    *cap = c;
    return true;
}

static bool seq_add(parser *p, seq *q, int type, int v)
{
    if (++p->n_el > GRAMMAR_MAX_ELEMS)
        return FAIL(p, "the grammar is too large (over %d elements once repetitions are unrolled)",
                    GRAMMAR_MAX_ELEMS);
    if (!grow((void **)&q->e, &q->cap, q->n + 1, sizeof *q->e))
        return FAIL(p, "out of memory");
    q->e[q->n++] = (gelem){type, v};
    return true;
}

static bool seq_append(parser *p, seq *dst, const seq *src)
{
    for (int i = 0; i < src->n; i++)
        if (!seq_add(p, dst, src->e[i].type, src->e[i].v))
            return false;
    return true;
}

/* A new rule (a group's or a repetition's): its index, or -1. */
static int new_rule(parser *p)
{
    if (!grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules)) {
        FAIL(p, "out of memory");
        return -1;
    }
    p->rules[p->n_rules] = (prule){.defined = true};
    return p->n_rules++;
}

/* A new (empty) alternative of rule r, or NULL. */
static seq *new_alt(parser *p, int r)
{
    prule *ru = &p->rules[r];
    if (!grow((void **)&ru->alts, &ru->cap_alts, ru->n_alts + 1, sizeof *ru->alts)) {
        FAIL(p, "out of memory");
        return NULL;
    }
    ru->alts[ru->n_alts] = (seq){0};
    return &ru->alts[ru->n_alts++];
}

/* The rule named by s[0..n), created (undefined) on first sight. */
static int named_rule(parser *p, const char *s, size_t n)
{
    for (int i = 0; i < p->n_rules; i++)
        if (p->rules[i].name && p->rules[i].name_len == n && !memcmp(p->rules[i].name, s, n))
            return i;
    int r = new_rule(p);
    if (r >= 0)
        p->rules[r] = (prule){.name = s, .name_len = n, .ref_line = p->line, .ref_col = col(p)};
    return r;
}

static bool is_word(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/* Spaces, newlines and comments. */
static void skip_space(parser *p)
{
    while (p->at < p->len) {
        char c = p->s[p->at];
        if (c == '#') {
            while (p->at < p->len && p->s[p->at] != '\n')
                p->at++;
        } else if (c == '\n') {
            p->at++;
            p->line++;
            p->line_start = p->at;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            p->at++;
        } else {
            break;
        }
    }
}

static size_t word_len(const parser *p, size_t at)
{
    size_t n = 0;
    while (at + n < p->len && is_word((unsigned char)p->s[at + n]))
        n++;
    return n;
}

/* Whether a rule definition (`name ::=`) starts at the parser's position. */
static bool at_definition(parser *p)
{
    size_t n = word_len(p, p->at);
    if (!n)
        return false;
    size_t at = p->at + n;
    while (at < p->len && (p->s[at] == ' ' || p->s[at] == '\t'))
        at++;
    return p->len - at >= 3 && !memcmp(p->s + at, "::=", 3);
}

/* One UTF-8 character of the source: its code point, or -1 (invalid). */
static long utf8_char(parser *p)
{
    const unsigned char *s = (const unsigned char *)p->s + p->at;
    size_t left = p->len - p->at;
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || (size_t)n > left)
        return -1;
    uint32_t cp = n == 1 ? c : c & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    p->at += (size_t)n;
    return (long)cp;
}

static long hex_digits(parser *p, int n)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++, p->at++) {
        char c = p->at < p->len ? p->s[p->at] : 0;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            FAIL(p, "expected %d hexadecimal digits in an escape", n);
            return -1;
        }
        v = v << 4 | (uint32_t)d;
    }
    if (v > 0x10FFFF) {
        FAIL(p, "the escape's code point U+%X is beyond U+10FFFF", v);
        return -1;
    }
    return (long)v;
}

/* A character of a literal or class, escapes decoded: its code point, or -1. */
static long one_char(parser *p)
{
    if (p->at >= p->len) {
        FAIL(p, "unexpected end of the grammar");
        return -1;
    }
    if (p->s[p->at] == '\n') {
        FAIL(p, "a literal or character class must end on its line");
        return -1;
    }
    if (p->s[p->at] != '\\') {
        long c = utf8_char(p);
        if (c < 0)
            FAIL(p, "invalid UTF-8");
        return c;
    }
    p->at++;
    char e = p->at < p->len ? p->s[p->at++] : 0;
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    case 'x': return hex_digits(p, 2);
    case 'u': return hex_digits(p, 4);
    case 'U': return hex_digits(p, 8);
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^': case '.':
        return e;
    default:
        p->at -= 2;
        FAIL(p, "unknown escape '\\%c'", e >= 0x20 && e < 0x7F ? e : '?');
        return -1;
    }
}

static int cmp_range(const void *a, const void *b)
{
    const grange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* A class of the ranges collected at rg[first..n_rg): sorted and merged; its index or -1. */
static int add_class(parser *p, int first, bool neg)
{
    int n = p->n_rg - first, k = 0;
    grange *r = n ? p->rg + first : NULL;   /* (`.` has no ranges, perhaps before any) */
    if (n)
        qsort(r, (size_t)n, sizeof *r, cmp_range);
    for (int i = 0; i < n; i++) {
        if (k && r[i].lo <= r[k - 1].hi + 1) {
            if (r[i].hi > r[k - 1].hi)
                r[k - 1].hi = r[i].hi;
        } else {
            r[k++] = r[i];
        }
    }
    p->n_rg = first + k;
    if (!grow((void **)&p->cl, &p->cap_cl, p->n_cl + 1, sizeof *p->cl)) {
        FAIL(p, "out of memory");
        return -1;
    }
    gclass *c = &p->cl[p->n_cl];
    *c = (gclass){.first = first, .n = k, .neg = neg};
    for (uint32_t ch = 0; ch < 128; ch++) {
        bool in = false;
        for (int i = 0; i < k; i++)
            in |= ch >= r[i].lo && ch <= r[i].hi;
        if (in != neg)
            c->ascii[ch >> 5] |= 1u << (ch & 31);
    }
    return p->n_cl++;
}

static bool add_range(parser *p, uint32_t lo, uint32_t hi)
{
    if (!grow((void **)&p->rg, &p->cap_rg, p->n_rg + 1, sizeof *p->rg))
        return FAIL(p, "out of memory");
    p->rg[p->n_rg++] = (grange){lo, hi};
    return true;
}

/* "literal": a character element per code point. */
static bool parse_literal(parser *p, seq *out)
{
    p->at++;
    while (p->at < p->len && p->s[p->at] != '"') {
        long c = one_char(p);
        int first = p->n_rg;
        if (c < 0 || !add_range(p, (uint32_t)c, (uint32_t)c))
            return false;
        int k = add_class(p, first, false);
        if (k < 0 || !seq_add(p, out, GE_CHAR, k))
            return false;
    }
    if (p->at >= p->len)
        return FAIL(p, "a literal is not closed (expected '\"')");
    p->at++;
    return true;
}

/* [abc], [a-z], [^...]. */
static bool parse_class(parser *p, seq *out)
{
    int line = p->line, c0 = col(p);
    p->at++;
    bool neg = p->at < p->len && p->s[p->at] == '^';
    p->at += neg;
    int first = p->n_rg;
    while (p->at < p->len && p->s[p->at] != ']') {
        long lo = one_char(p), hi = lo;
        if (lo < 0)
            return false;
        if (p->len - p->at >= 2 && p->s[p->at] == '-' && p->s[p->at + 1] != ']') {
            p->at++;
            if ((hi = one_char(p)) < 0)
                return false;
            if (hi < lo)
                return FAIL(p, "a character range ends (U+%04lX) before it starts (U+%04lX)", hi, lo);
        }
        if (!add_range(p, (uint32_t)lo, (uint32_t)hi))
            return false;
    }
    if (p->at >= p->len)
        return fail_at(p, line, c0, "a character class is not closed (expected ']')");
    p->at++;
    if (p->n_rg == first && !neg)
        return fail_at(p, line, c0, "an empty character class matches nothing");
    int k = add_class(p, first, neg);
    return k >= 0 && seq_add(p, out, GE_CHAR, k);
}

static bool parse_alternatives(parser *p, int rule, int depth);

/* rule ::= body | <empty> and rule ::= body rule | <empty> (x? and x*). */
static int optional_rule(parser *p, const seq *body, bool repeat)
{
    int r = new_rule(p);
    seq *a = r >= 0 ? new_alt(p, r) : NULL;
    if (!a || !seq_append(p, a, body) || (repeat && !seq_add(p, a, GE_REF, r)) || !new_alt(p, r))
        return -1;
    return r;
}

/* x{m,n} (n < 0: no upper bound) appended to out. */
static bool repeat(parser *p, seq *out, const seq *x, long m, long n)
{
    for (long i = 0; i < m; i++)
        if (!seq_append(p, out, x))
            return false;
    if (n < 0) {
        int r = optional_rule(p, x, true);
        return r >= 0 && seq_add(p, out, GE_REF, r);
    }
    /* at most n - m more: o_k ::= x o_(k-1) | <empty> */
    int prev = -1;
    for (long k = m; k < n; k++) {
        seq body = {0};
        bool ok = seq_append(p, &body, x) && (prev < 0 || seq_add(p, &body, GE_REF, prev));
        int r = ok ? optional_rule(p, &body, false) : -1;
        free(body.e);
        if (r < 0)
            return false;
        prev = r;
    }
    return prev < 0 || seq_add(p, out, GE_REF, prev);
}

static long number(parser *p)
{
    long v = 0;
    size_t start = p->at;
    while (p->at < p->len && p->s[p->at] >= '0' && p->s[p->at] <= '9' && v <= GRAMMAR_MAX_REPEAT)
        v = v * 10 + (p->s[p->at++] - '0');
    if (p->at == start) {
        FAIL(p, "expected a number in a repetition {m,n}");
        return -1;
    }
    if (v > GRAMMAR_MAX_REPEAT) {
        FAIL(p, "a repetition count above %d", GRAMMAR_MAX_REPEAT);
        return -1;
    }
    return v;
}

/* {m}, {m,}, {m,n} after an item: its bounds (n -1: none). */
static bool parse_braces(parser *p, long *m, long *n)
{
    p->at++;
    skip_space(p);
    if ((*m = number(p)) < 0)
        return false;
    skip_space(p);
    *n = *m;
    if (p->at < p->len && p->s[p->at] == ',') {
        p->at++;
        skip_space(p);
        *n = -1;
        if (p->at < p->len && p->s[p->at] != '}' && (*n = number(p)) < 0)
            return false;
        skip_space(p);
    }
    if (p->at >= p->len || p->s[p->at] != '}')
        return FAIL(p, "expected '}' to close a repetition");
    p->at++;
    if (*n >= 0 && *n < *m)
        return FAIL(p, "a repetition {%ld,%ld} has its maximum below its minimum", *m, *n);
    return true;
}

/* One item with its repetition operators, appended to out. */
static bool parse_item(parser *p, seq *out, int depth)
{
    seq x = {0};
    bool ok = true;
    char c = p->s[p->at];
    if (c == '"') {
        ok = parse_literal(p, &x);
    } else if (c == '[') {
        ok = parse_class(p, &x);
    } else if (c == '.') {
        p->at++;
        int k = add_class(p, p->n_rg, true);
        ok = k >= 0 && seq_add(p, &x, GE_CHAR, k);
    } else if (c == '(') {
        if (depth > 100) {
            free(x.e);
            return FAIL(p, "groups nested too deep");
        }
        p->at++;
        int r = new_rule(p);
        ok = r >= 0 && parse_alternatives(p, r, depth + 1);
        if (ok && (p->at >= p->len || p->s[p->at] != ')'))
            ok = FAIL(p, "expected ')'");
        p->at++;
        ok = ok && seq_add(p, &x, GE_REF, r);
    } else if (is_word((unsigned char)c)) {
        size_t n = word_len(p, p->at);
        int r = named_rule(p, p->s + p->at, n);
        p->at += n;
        ok = r >= 0 && seq_add(p, &x, GE_REF, r);
    } else {
        ok = FAIL(p, "unexpected '%c'", c >= 0x20 && c < 0x7F ? c : '?');
    }
    /* the operators, each applying to what precedes it */
    while (ok && p->at < p->len && strchr("?*+{", p->s[p->at])) {
        char op = p->s[p->at];
        long m = 0, n = -1;
        if (op == '{') {
            ok = parse_braces(p, &m, &n);
        } else {
            p->at++;
            m = op == '+';
            n = op == '?' ? 1 : -1;
        }
        seq y = {0};
        ok = ok && repeat(p, &y, &x, m, n);
        free(x.e);
        x = y;
    }
    ok = ok && seq_append(p, out, &x);
    free(x.e);
    return ok;
}

/* Sequences separated by '|' into rule's alternatives, up to ')' or the next definition. */
static bool parse_alternatives(parser *p, int rule, int depth)
{
    for (;;) {
        seq *a = new_alt(p, rule);
        if (!a)
            return false;
        for (;;) {
            skip_space(p);
            if (p->at >= p->len || p->s[p->at] == '|' || p->s[p->at] == ')' ||
                (depth == 0 && at_definition(p)))
                break;
            /* items append to the rule's last alternative, which may move as rules grow */
            seq q = p->rules[rule].alts[p->rules[rule].n_alts - 1];
            bool ok = parse_item(p, &q, depth);
            p->rules[rule].alts[p->rules[rule].n_alts - 1] = q;
            if (!ok)
                return false;
        }
        if (p->at >= p->len || p->s[p->at] != '|')
            return true;
        p->at++;
    }
}

/* Whether some rule reaches itself before consuming a character (the matcher would loop). */
static bool check_left_recursion(parser *p)
{
    int n = p->n_rules;
    bool *nullable = calloc((size_t)n, sizeof *nullable);
    int *state = calloc((size_t)n, sizeof *state), *stack = malloc(sizeof *stack * (size_t)n * 2);
    if (!nullable || !state || !stack) {
        free(nullable);
        free(state);
        free(stack);
        return FAIL(p, "out of memory");
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < n; r++) {
            for (int a = 0; !nullable[r] && a < p->rules[r].n_alts; a++) {
                const seq *q = &p->rules[r].alts[a];
                int i = 0;
                while (i < q->n && q->e[i].type == GE_REF && nullable[q->e[i].v])
                    i++;
                if (i == q->n)
                    nullable[r] = changed = true;
            }
        }
    }
    /* depth-first over "r may start with r'": state 1 on the path, 2 done */
    bool ok = true;
    for (int start = 0; ok && start < n; start++) {
        if (state[start])
            continue;
        int sp = 0;
        stack[sp++] = start;
        stack[sp++] = 0;   /* the next edge to visit, counting across alternatives */
        state[start] = 1;
        while (ok && sp) {
            int r = stack[sp - 2], e = stack[sp - 1]++;
            int k = 0, next = -1;
            for (int a = 0; next < 0 && a < p->rules[r].n_alts; a++) {
                const seq *q = &p->rules[r].alts[a];
                for (int i = 0; i < q->n && q->e[i].type == GE_REF; i++) {
                    if (k++ == e) {
                        next = q->e[i].v;
                        break;
                    }
                    if (!nullable[q->e[i].v])
                        break;
                }
            }
            if (next < 0) {
                state[r] = 2;
                sp -= 2;
            } else if (state[next] == 1) {
                int at = next;
                for (int i = 0; !p->rules[at].name && i < sp; i += 2)
                    at = stack[i];   /* a group's rule: name a rule it is in */
                if (!p->rules[at].name) {
                    ok = FAIL(p, "a group is left-recursive");
                    break;
                }
                ok = fail_at(p, p->rules[at].def_line, p->rules[at].def_col,
                             "rule '%.*s' is left-recursive (it can reach itself before "
                             "matching a character)", (int)p->rules[at].name_len, p->rules[at].name);
            } else if (!state[next]) {
                state[next] = 1;
                stack[sp++] = next;
                stack[sp++] = 0;
            }
        }
    }
    free(nullable);
    free(state);
    free(stack);
    return ok;
}

/* The parsed rules as one array of elements. */
static grammar *flatten(parser *p, int root)
{
    grammar *g = calloc(1, sizeof *g);
    int n_alts = 0;
    for (int r = 0; r < p->n_rules; r++)
        n_alts += p->rules[r].n_alts;
    if (!g || !(g->el = malloc(sizeof *g->el * (size_t)(p->n_el + n_alts))) ||
        !(g->alt_first = malloc(sizeof *g->alt_first * (size_t)p->n_rules)) ||
        !(g->alt_n = malloc(sizeof *g->alt_n * (size_t)p->n_rules)) ||
        !(g->alts = malloc(sizeof *g->alts * (size_t)n_alts))) {
        grammar_free(g);
        FAIL(p, "out of memory");
        return NULL;
    }
    int k = 0;
    for (int r = 0; r < p->n_rules; r++) {
        g->alt_first[r] = k;
        g->alt_n[r] = p->rules[r].n_alts;
        for (int a = 0; a < p->rules[r].n_alts; a++) {
            const seq *q = &p->rules[r].alts[a];
            g->alts[k++] = g->n_el;
            if (q->n) /* an empty alternative has no elements, nor an array */
                memcpy(g->el + g->n_el, q->e, sizeof *q->e * (size_t)q->n);
            g->n_el += q->n;
            g->el[g->n_el++] = (gelem){GE_END, r};
        }
    }
    g->n_rule = p->n_rules;
    g->root = root;
    g->rg = p->rg;
    g->cl = p->cl;
    g->n_cl = p->n_cl;
    p->rg = NULL;
    p->cl = NULL;
    return g;
}

grammar *grammar_parse(const char *src, size_t len, char *err, size_t errlen)
{
    parser p = {.s = src, .len = len, .line = 1, .err = err, .errlen = errlen};
    grammar *g = NULL;
    if (len > GRAMMAR_MAX_SOURCE) {
        FAIL(&p, "the grammar is over %zu bytes", GRAMMAR_MAX_SOURCE);
        goto out;
    }
    if (memchr(src, 0, len)) {
        p.at = (size_t)((const char *)memchr(src, 0, len) - src);
        FAIL(&p, "a NUL byte");
        goto out;
    }
    for (;;) {
        skip_space(&p);
        if (p.at >= p.len)
            break;
        if (!at_definition(&p)) {
            FAIL(&p, "expected a rule definition (name ::= ...)");
            goto out;
        }
        size_t n = word_len(&p, p.at);
        int line = p.line, c0 = col(&p);
        int r = named_rule(&p, src + p.at, n);
        if (r < 0)
            goto out;
        if (p.rules[r].defined) {
            FAIL(&p, "rule '%.*s' is defined twice", (int)n, src + p.at);
            goto out;
        }
        p.rules[r].defined = true;
        p.rules[r].def_line = line;
        p.rules[r].def_col = c0;
        p.at += n;
        skip_space(&p);
        p.at += 3;
        if (!parse_alternatives(&p, r, 0))
            goto out;
        if (p.at < p.len && p.s[p.at] == ')') {
            FAIL(&p, "unexpected ')'");
            goto out;
        }
    }
    int root = -1;
    for (int r = 0; r < p.n_rules; r++) {
        if (!p.rules[r].defined) {
            fail_at(&p, p.rules[r].ref_line, p.rules[r].ref_col, "undefined rule '%.*s'",
                    (int)p.rules[r].name_len, p.rules[r].name);
            goto out;
        }
        if (p.rules[r].name && p.rules[r].name_len == 4 && !memcmp(p.rules[r].name, "root", 4))
            root = r;
    }
    if (root < 0) {
        fail_at(&p, p.line, col(&p), "the grammar has no 'root' rule");
        goto out;
    }
    if (check_left_recursion(&p))
        g = flatten(&p, root);
out:
    for (int r = 0; r < p.n_rules; r++) {
        for (int a = 0; a < p.rules[r].n_alts; a++)
            free(p.rules[r].alts[a].e);
        free(p.rules[r].alts);
    }
    free(p.rules);
    free(p.rg);
    free(p.cl);
    return g;
}

void grammar_free(grammar *g)
{
    if (!g)
        return;
    free(g->el);
    free(g->rg);
    free(g->cl);
    free(g->alt_first);
    free(g->alt_n);
    free(g->alts);
    free(g);
}

bool grammar_class_has(const grammar *g, const gclass *c, uint32_t cp)
{
    if (cp < 128)
        return c->ascii[cp >> 5] >> (cp & 31) & 1;
    const grange *r = c->n ? g->rg + c->first : NULL;
    bool in = false;
    for (int i = 0; i < c->n && !in; i++)
        in = cp >= r[i].lo && cp <= r[i].hi;
    return in != c->neg;
}

bool grammar_class_meets(const grammar *g, const gclass *c, uint32_t lo, uint32_t hi)
{
    const grange *r = c->n ? g->rg + c->first : NULL;
    for (int i = 0; i < c->n; i++) {
        bool overlaps = r[i].lo <= hi && r[i].hi >= lo;
        if (!c->neg && overlaps)
            return true;
        if (c->neg && r[i].lo <= lo && r[i].hi >= hi)
            return false;   /* the merged ranges: one covering [lo, hi] is the only way */
    }
    return c->neg;
}
