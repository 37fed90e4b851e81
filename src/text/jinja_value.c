/* jinja_value.c — the interpreter's arena and errors, and its values: Python's semantics for the
 * types chat templates handle (str, int, float, bool, None, list, dict, jinja2's Undefined):
 * truth, equality, ordering, str() and repr(), and json.dumps for `tojson`. */
#include <inttypes.h>
#include <math.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

/* ---- arena and errors ---- */

struct jchunk {
    jchunk *next;
    size_t cap, used;
    alignas(max_align_t) unsigned char data[];
};

#define CHUNK_MIN ((size_t)64 << 10)

void *jalloc(jctx *c, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > c->limit - c->used)
        jfail(c, 0, "the template needs more than %zu MiB of memory", c->limit >> 20);
    jchunk *k = c->chunks;
    if (!k || k->cap - k->used < n) {
        size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
        k = malloc(sizeof *k + cap);
        if (!k)
            jfail(c, 0, "out of memory");
        k->cap = cap;
        k->used = 0;
        k->next = c->chunks;
        c->chunks = k;
    }
    void *p = k->data + k->used;
    k->used += n;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *jstrdup(jctx *c, const char *s, size_t n)
{
    char *p = jalloc(c, n + 1);
    if (n)
        memcpy(p, s, n);
    return p;
}

jbuf *jtmp_open(jctx *c, int line)
{
    if (c->n_tmp == (int)(sizeof c->tmp / sizeof *c->tmp))
        jfail(c, line, "nested more than %d deep", c->n_tmp);
    c->tmp[c->n_tmp] = (jbuf){0};
    return &c->tmp[c->n_tmp++];
}

jv jtmp_close(jctx *c)
{
    jbuf *b = &c->tmp[c->n_tmp - 1];
    size_t n = b->s.len;
    jv v = jv_str(jstrdup(c, b->s.p ? b->s.p : "", n), n);
    if (b->marked && memchr(b->m.p, 1, n))
        v.u.s.m = (const uint8_t *)jstrdup(c, b->m.p, n);
    free(b->s.p);
    free(b->m.p);
    c->n_tmp--;
    return v;
}

char *jformat(jctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = jalloc(c, n > 0 ? (size_t)n + 1 : 1);
    va_start(ap, fmt);
    vsnprintf(p, n > 0 ? (size_t)n + 1 : 1, fmt, ap);
    va_end(ap);
    return p;
}

void jarena_free(jctx *c)
{
    while (c->n_tmp > 0) {
        jbuf *b = &c->tmp[--c->n_tmp];
        free(b->s.p);
        free(b->m.p);
    }
    for (jchunk *k = c->chunks, *nx; k; k = nx) {
        nx = k->next;
        free(k);
    }
    c->chunks = NULL;
    c->used = 0;
}

/* An error is one line: the line breaks and other control characters a message picks up from
 * the template (a raise_exception text, a key named in it) become spaces. */
static void one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = ' ';
}

void jfail(jctx *c, int line, const char *fmt, ...)
{
    jinja_error *e = c->err;
    char msg[sizeof e->msg - 24];   /* room for the "line N: " before it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    e->raised = false;
    e->line = line;
    if (line > 0)
        snprintf(e->msg, sizeof e->msg, "line %d: %s", line, msg);
    else
        snprintf(e->msg, sizeof e->msg, "%s", msg);
    one_line(e->msg);
    longjmp(c->jb, 1);
}

void jraise(jctx *c, int line, const char *msg, size_t n)
{
    jinja_error *e = c->err;
    e->raised = true;
    e->line = line;
    snprintf(e->msg, sizeof e->msg, "%.*s", n < sizeof e->msg ? (int)n : (int)sizeof e->msg - 1, msg);
    one_line(e->msg);
    longjmp(c->jb, 1);
}

void jdepth_enter(jctx *c, int line)
{
    if (++c->depth > JINJA_MAX_DEPTH)
        jfail(c, line, "nested more than %d deep", JINJA_MAX_DEPTH);
}

/* ---- values ---- */

jv jv_cstr(const char *s)
{
    return jv_str(s, strlen(s));
}

jv jv_newlist(jctx *c)
{
    jv v = {.t = JV_LIST};
    v.u.l = jalloc(c, sizeof *v.u.l);
    return v;
}

jv jv_newdict(jctx *c)
{
    jv v = {.t = JV_DICT};
    v.u.d = jalloc(c, sizeof *v.u.d);
    return v;
}

static void *grow(jctx *c, void *old, size_t n, size_t cap, size_t size)
{
    void *p = jalloc(c, cap * size);
    if (n)
        memcpy(p, old, n * size);
    return p;
}

void jlist_push(jctx *c, jlist *l, jv v)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        l->v = grow(c, l->v, l->n, l->cap, sizeof *l->v);
    }
    l->v[l->n++] = v;
}

jv *jdict_get(const jdict *d, jv k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k))
            return &d->v[i];
    return NULL;
}

jv *jdict_gets(const jdict *d, const char *key)
{
    return jdict_get(d, jv_cstr(key));
}

void jdict_set(jctx *c, jdict *d, jv k, jv v)
{
    jv *old = jdict_get(d, k);
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 4;
        d->k = grow(c, d->k, d->n, d->cap, sizeof *d->k);
        d->v = grow(c, d->v, d->n, d->cap, sizeof *d->v);
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

/* A copy of s, all of it marked as user text when plain. */
static jv json_string(jctx *c, const char *s, bool plain)
{
    size_t n = strlen(s);
    jv v = jv_str(jstrdup(c, s, n), n);
    if (plain && n) {
        uint8_t *m = jalloc(c, n);
        memset(m, 1, n);
        v.u.s.m = m;
    }
    return v;
}

jv jv_from_json(jctx *c, const cJSON *j, bool plain)
{
    if (cJSON_IsBool(j))
        return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        /* cJSON keeps numbers as doubles: an integral one is Python's int, as json.loads
         * makes it from the usual integer text */
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) <= 9007199254740992.0)
            return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j))
        return json_string(c, j->valuestring, plain);
    if (cJSON_IsArray(j)) {
        jv l = jv_newlist(c);
        for (const cJSON *e = j->child; e; e = e->next)
            jlist_push(c, l.u.l, jv_from_json(c, e, plain));
        return l;
    }
    if (cJSON_IsObject(j)) {
        jv d = jv_newdict(c);
        for (const cJSON *e = j->child; e; e = e->next)
            jdict_set(c, d.u.d, json_string(c, e->string ? e->string : "", plain), jv_from_json(c, e, plain));
        return d;
    }
    return jv_none();
}

size_t utf8_len(unsigned char b)
{
    return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF8 ? 4 : 1;
}

bool jv_truthy(jv v)
{
    switch (v.t) {
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s.n > 0;
    case JV_LIST: return v.u.l->n > 0 || v.u.l->gen;
    case JV_DICT: return v.u.d->n > 0 || v.u.d->ns;
    case JV_MACRO: case JV_FUNC: case JV_METHOD: return true;
    default: return false;
    }
}

static bool is_num(jv v)
{
    return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

static double num(jv v)
{
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b;
}

/* depth: how deep in nested lists and dicts; deeper than any template makes, they compare
 * unequal rather than recurse on. */
static bool equal(jv a, jv b, int depth)
{
    if (depth > JINJA_MAX_DEPTH)
        return false;
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return num(a) == num(b);
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal(a.u.l->v[i], b.u.l->v[i], depth + 1))
                return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jdict_get(b.u.d, a.u.d->k[i]);
            if (!o || !equal(a.u.d->v[i], *o, depth + 1))
                return false;
        }
        return true;
    case JV_MACRO: return a.u.mac == b.u.mac;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

bool jv_equal(jv a, jv b)
{
    return equal(a, b, 0);
}

const char *jv_typename(jv v)
{
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->gen ? "generator" : v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return v.u.d->ns ? "Namespace" : "dict";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    default: return "method";
    }
}

int jv_compare(jctx *c, int line, jv a, jv b)
{
    if (is_num(a) && is_num(b)) {
        if (a.t == JV_INT && b.t == JV_INT)
            return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double x = num(a), y = num(b);
        return (x > y) - (x < y);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int r = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        return r ? (r > 0) - (r < 0) : (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        int r = 0;
        jdepth_enter(c, line);
        for (size_t i = 0; !r && i < a.u.l->n && i < b.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i]))
                r = jv_compare(c, line, a.u.l->v[i], b.u.l->v[i]);
        jdepth_leave(c);
        return r ? r : (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    jfail(c, line, "'<' not supported between instances of '%s' and '%s'", jv_typename(a), jv_typename(b));
}

static _Noreturn void buf_fail(jctx *c, jbuf *b, const char *fmt)
{
    free(b->s.p);
    free(b->m.p);
    *b = (jbuf){0};
    jfail(c, 0, fmt, JINJA_MAX_OUTPUT >> 20);
}

/* n mask bytes of value v. */
static void mask_add(jctx *c, jbuf *b, int v, size_t n)
{
    char chunk[256];
    memset(chunk, v, sizeof chunk);
    for (size_t k; n; n -= k) {
        k = n < sizeof chunk ? n : sizeof chunk;
        if (strbuf_add(&b->m, chunk, k))
            buf_fail(c, b, "out of memory");
    }
}

/* Keeps the mask from now on: zeros for the template text so far. */
static void start_mask(jctx *c, jbuf *b)
{
    if (!b->marked) {
        b->marked = true;
        mask_add(c, b, 0, b->s.len);
    }
}

void jbuf_add_flag(jctx *c, jbuf *b, const char *s, size_t n, bool plain)
{
    if (b->s.len + n > JINJA_MAX_OUTPUT)
        buf_fail(c, b, "the rendering is longer than %zu MiB");
    if (plain && n)
        start_mask(c, b);
    if (strbuf_add(&b->s, s, n))
        buf_fail(c, b, "out of memory");
    if (b->marked)
        mask_add(c, b, plain, n);
}

void jbuf_add(jctx *c, jbuf *b, const char *s, size_t n)
{
    jbuf_add_flag(c, b, s, n, false);
}

void jbuf_add_str(jctx *c, jbuf *b, jv s)
{
    if (!s.u.s.m) {
        jbuf_add(c, b, s.u.s.p, s.u.s.n);
        return;
    }
    start_mask(c, b);
    size_t at = b->s.len;
    jbuf_add_flag(c, b, s.u.s.p, s.u.s.n, false);
    memcpy(b->m.p + at, s.u.s.m, s.u.s.n);
}

/* Marks what was added since from as user text (an escaped form of it: repr, JSON). */
static void mark_from(jctx *c, jbuf *b, size_t from)
{
    if (b->s.len == from)
        return;
    start_mask(c, b);
    memset(b->m.p + from, 1, b->s.len - from);
}

static void add_s(jctx *c, jbuf *b, const char *s)
{
    jbuf_add(c, b, s, strlen(s));
}

/* Python's repr of a float: the shortest digits that read back the same, positional from 1e-4
 * to 1e16, else with an exponent. */
static void float_repr(double f, char *out, size_t cap)
{
    if (isnan(f)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e is [-]d[.ddd]e[+-]xx */
    const char *s = e;
    bool neg = *s == '-';
    s += neg;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    int exp = atoi(s + 1);
    char *o = out;
    size_t k = 0;
#define PUT(ch) do { if (k + 1 < cap) o[k++] = (ch); } while (0)
    if (neg)
        PUT('-');
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            PUT('0');
            PUT('.');
            for (int i = -1; i > exp; i--)
                PUT('0');
            for (int i = 0; i < nd; i++)
                PUT(digits[i]);
        } else {
            for (int i = 0; i <= exp; i++)
                PUT(i < nd ? digits[i] : '0');
            PUT('.');
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++)
                    PUT(digits[i]);
            else
                PUT('0');
        }
    } else {
        PUT(digits[0]);
        if (nd > 1) {
            PUT('.');
            for (int i = 1; i < nd; i++)
                PUT(digits[i]);
        }
        char x[16];
        snprintf(x, sizeof x, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
        for (char *p = x; *p; p++)
            PUT(*p);
    }
    o[k] = '\0';
#undef PUT
}

static void repr_str(jctx *c, jbuf *b, jv str)
{
    const char *s = str.u.s.p;
    size_t n = str.u.s.n, from = b->s.len;
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jbuf_add(c, b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == '\\' || ch == (unsigned char)q) {
            esc[0] = '\\';
            esc[1] = (char)ch;
            jbuf_add(c, b, esc, 2);
        } else if (ch == '\n') {
            add_s(c, b, "\\n");
        } else if (ch == '\r') {
            add_s(c, b, "\\r");
        } else if (ch == '\t') {
            add_s(c, b, "\\t");
        } else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", ch);
            add_s(c, b, esc);
        } else {
            jbuf_add(c, b, s + i, 1);
        }
    }
    jbuf_add(c, b, &q, 1);
    if (str.u.s.m)
        mark_from(c, b, from);
}

static void jv_seq_to(jctx *c, jbuf *b, jv v);

void jv_repr_to(jctx *c, jbuf *b, jv v)
{
    if (v.t == JV_STR)
        repr_str(c, b, v);
    else
        jv_str_to(c, b, v);
}

void jv_str_to(jctx *c, jbuf *b, jv v)
{
    char tmp[64];
    if (v.t == JV_LIST || v.t == JV_DICT) {
        jdepth_enter(c, 0);
        jv_seq_to(c, b, v);
        jdepth_leave(c);
        return;
    }
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: add_s(c, b, "None"); return;
    case JV_BOOL: add_s(c, b, v.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%" PRId64, v.u.i); add_s(c, b, tmp); return;
    case JV_FLOAT: float_repr(v.u.f, tmp, sizeof tmp); add_s(c, b, tmp); return;
    case JV_STR: jbuf_add_str(c, b, v); return;
    default: add_s(c, b, "<function>"); return;
    }
}

/* str() of a list, tuple, dict or namespace: its items' repr. */
static void jv_seq_to(jctx *c, jbuf *b, jv v)
{
    switch (v.t) {
    case JV_LIST: {
        const jlist *l = v.u.l;
        add_s(c, b, l->tuple ? "(" : "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                add_s(c, b, ", ");
            jv_repr_to(c, b, l->v[i]);
        }
        add_s(c, b, l->tuple ? (l->n == 1 ? ",)" : ")") : "]");
        return;
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (d->ns)
            add_s(c, b, "<Namespace ");
        add_s(c, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i)
                add_s(c, b, ", ");
            jv_repr_to(c, b, d->k[i]);
            add_s(c, b, ": ");
            jv_repr_to(c, b, d->v[i]);
        }
        add_s(c, b, d->ns ? "}>" : "}");
        return;
    }
    default: return;
    }
}

jv jv_to_str(jctx *c, jv v)
{
    if (v.t == JV_STR)
        return v;
    jv_str_to(c, jtmp_open(c, 0), v);
    return jtmp_close(c);
}

/* A JSON string; ascii: characters past ASCII as \\uXXXX (surrogate pairs past U+FFFF), as
 * json.dumps's ensure_ascii does. */
static void json_str(jctx *c, jbuf *b, jv str, bool ascii)
{
    const char *s = str.u.s.p;
    size_t n = str.u.s.n, from = b->s.len;
    add_s(c, b, "\"");
    size_t run = 0;   /* bytes copied as they are, in one append */
    for (size_t i = 0, len = 1; i < n; i += len) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r"
                        : ch == '\t' ? "\\t" : ch == '\b' ? "\\b" : ch == '\f' ? "\\f" : NULL;
        char u[16];
        len = 1;
        if (!esc && ch < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", ch);
            esc = u;
        } else if (ascii && ch >= 0x80) {
            len = utf8_len(ch) <= n - i ? utf8_len(ch) : 1;
            uint32_t cp = len == 1 ? ch : ch & (0xFF >> (len + 1));
            for (size_t k = 1; k < len; k++)
                cp = cp << 6 | ((unsigned char)s[i + k] & 0x3F);
            if (cp > 0xFFFF)
                snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF));
            else
                snprintf(u, sizeof u, "\\u%04x", cp);
            esc = u;
        }
        if (!esc) {
            run++;
            continue;
        }
        jbuf_add(c, b, s + i - run, run);
        run = 0;
        add_s(c, b, esc);
    }
    jbuf_add(c, b, s + n - run, run);
    add_s(c, b, "\"");
    if (str.u.s.m)
        mark_from(c, b, from);
}

static void json_newline(jctx *c, jbuf *b, int indent, int level)
{
    add_s(c, b, "\n");
    for (int i = 0; i < indent * level; i++)
        add_s(c, b, " ");
}

/* A dict key as json.dumps writes it: strings as they are, numbers, booleans and None as text. */
static void json_key(jctx *c, int line, jbuf *b, jv k, bool ascii)
{
    if (k.t == JV_STR) {
        json_str(c, b, k, ascii);
        return;
    }
    if (k.t != JV_BOOL && k.t != JV_NONE && k.t != JV_INT && k.t != JV_FLOAT)
        jfail(c, line, "keys must be str, int, float, bool or None, not %s", jv_typename(k));
    const char *text = k.t == JV_BOOL ? (k.u.b ? "true" : "false") : k.t == JV_NONE ? "null" : NULL;
    jv s = text ? jv_cstr(text) : jv_to_str(c, k);
    json_str(c, b, s, ascii);
}

void jv_json_to(jctx *c, int line, jbuf *b, jv v, const jjson_opts *o, int level)
{
    int indent = o->indent;
    jdepth_enter(c, line);
    switch (v.t) {
    case JV_NONE: add_s(c, b, "null"); break;
    case JV_BOOL: add_s(c, b, v.u.b ? "true" : "false"); break;
    case JV_INT: jv_str_to(c, b, v); break;
    case JV_FLOAT:
        add_s(c, b, isnan(v.u.f) ? "NaN" : isinf(v.u.f) ? (v.u.f < 0 ? "-Infinity" : "Infinity") : "");
        if (isfinite(v.u.f))
            jv_str_to(c, b, v);
        break;
    case JV_STR: json_str(c, b, v, o->ascii); break;
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (l->gen)
            jfail(c, line, "Object of type generator is not JSON serializable");
        add_s(c, b, "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                add_s(c, b, o->item_sep);
            if (indent >= 0)
                json_newline(c, b, indent, level + 1);
            jv_json_to(c, line, b, l->v[i], o, level + 1);
        }
        if (indent >= 0 && l->n)
            json_newline(c, b, indent, level);
        add_s(c, b, "]");
        break;
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        size_t *order = jalloc(c, (d->n + 1) * sizeof *order);
        for (size_t i = 0; i < d->n; i++)
            order[i] = i;
        if (o->sort_keys)   /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && jv_compare(c, line, d->k[order[j - 1]], d->k[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        add_s(c, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i)
                add_s(c, b, o->item_sep);
            if (indent >= 0)
                json_newline(c, b, indent, level + 1);
            json_key(c, line, b, d->k[order[i]], o->ascii);
            add_s(c, b, o->key_sep);
            jv_json_to(c, line, b, d->v[order[i]], o, level + 1);
        }
        if (indent >= 0 && d->n)
            json_newline(c, b, indent, level);
        add_s(c, b, "}");
        break;
    }
    default:
        jfail(c, line, "Object of type %s is not JSON serializable", jv_typename(v));
    }
    jdepth_leave(c);
}

int64_t jv_length(jv v)
{
    switch (v.t) {
    case JV_UNDEF: return 0;
    case JV_STR: {
        int64_t n = 0;
        for (size_t i = 0; i < v.u.s.n; i += utf8_len((unsigned char)v.u.s.p[i]))
            n++;
        return n;
    }
    case JV_LIST: return v.u.l->gen ? -1 : (int64_t)v.u.l->n;
    case JV_DICT: return (int64_t)v.u.d->n;
    default: return -1;
    }
}

jlist *jv_iter(jctx *c, int line, jv v)
{
    jlist *l = jalloc(c, sizeof *l);
    switch (v.t) {
    case JV_UNDEF: return l;
    case JV_LIST: return v.u.l;
    case JV_DICT:
        if (v.u.d->ns)
            break;
        for (size_t i = 0; i < v.u.d->n; i++)
            jlist_push(c, l, v.u.d->k[i]);
        return l;
    case JV_STR:
        for (size_t i = 0; i < v.u.s.n;) {
            size_t k = utf8_len((unsigned char)v.u.s.p[i]);
            if (k > v.u.s.n - i)
                k = v.u.s.n - i;
            jlist_push(c, l, jv_sub(v, i, k));
            i += k;
        }
        return l;
    default: break;
    }
    jfail(c, line, "'%s' object is not iterable", jv_typename(v));
}
