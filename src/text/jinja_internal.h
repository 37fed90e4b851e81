/* jinja_internal.h — what the Jinja interpreter's parts share (jinja_parse.c: lexer and parser;
 * jinja_eval.c: statements and operators; jinja_value.c: values and their text forms;
 * jinja_filter.c: filters, tests, methods and globals).
 *
 * Memory: everything a parse or a render makes comes from an arena freed at once at the end,
 * so values are plain structs shared freely (strings, lists and dicts are never changed after
 * they are made, except namespace attributes) and an error can leave from any depth with
 * longjmp without leaking. */
#ifndef PRIMA_JINJA_INTERNAL_H
#define PRIMA_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdint.h>
#include <time.h>

#include "text/jinja.h"
#include "util/strbuf.h"

/* ---- arena and errors ---- */

typedef struct jv jv;

/* Text being built, and which of its bytes came from the render variables' user text (mask,
 * kept only once such a byte is added: marked). */
typedef struct jbuf {
    strbuf s, m;
    bool marked;
} jbuf;

typedef struct jchunk jchunk;
typedef struct jctx {
    jchunk *chunks;
    size_t used, limit;         /* bytes handed out, and the most allowed */
    jmp_buf jb;                 /* where jfail returns to */
    jinja_error *err;
    long steps;                 /* evaluation steps left */
    int depth;                  /* current recursion depth (parser or evaluator) */
    /* Text being built (a macro's output, a str() of a list): malloc'd, so an error frees
     * what is open. */
    jbuf tmp[256];
    int n_tmp;
} jctx;

#define JINJA_MAX_DEPTH 200     /* nested expressions, statements, values and macro calls */

void *jalloc(jctx *c, size_t n);               /* zeroed; fails the render when over limit */
char *jstrdup(jctx *c, const char *s, size_t n);
char *jformat(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jarena_free(jctx *c);
/* Stops the parse or render with "line N: message" in c->err. */
_Noreturn void jfail(jctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Stops the render as raise_exception(msg) does: the message as the template gave it. */
_Noreturn void jraise(jctx *c, int line, const char *msg, size_t n);
void jdepth_enter(jctx *c, int line);
/* A new empty text buffer, and its text moved into the arena (closing the newest buffer). */
jbuf *jtmp_open(jctx *c, int line);
jv jtmp_close(jctx *c);
#define jdepth_leave(c) ((c)->depth--)

/* ---- values ---- */

typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_MACRO, JV_FUNC, JV_METHOD,
} jtype;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jnode jnode;
typedef struct jmethod jmethod;

struct jv {
    uint8_t t;
    union {
        bool b;
        int64_t i;
        double f;
        /* m: per byte, 1 where it came from the variables' user text; NULL: none did */
        struct { const char *p; size_t n; const uint8_t *m; } s;
        jlist *l;
        jdict *d;
        const jnode *mac;
        int fn;                  /* JV_FUNC: index into the globals table */
        jmethod *m;
        const char *undef;       /* JV_UNDEF: the name that had no value (or NULL) */
    } u;
};

/* gen: what jinja2 gives as a generator (select, map, unique, ...): true however many items it
 * has, and without a length. */
struct jlist { jv *v; size_t n, cap; bool tuple, gen; };
/* Keys in insertion order (Python's dicts, and what tojson and items() follow). ns: a
 * namespace(), whose attributes `set` may assign. */
struct jdict { jv *k, *v; size_t n, cap; bool ns; };
struct jmethod { jv self; const char *name; };

static inline jv jv_undef(const char *name) { jv v = {.t = JV_UNDEF}; v.u.undef = name; return v; }
static inline jv jv_none(void) { return (jv){.t = JV_NONE}; }
static inline jv jv_bool(bool b) { jv v = {.t = JV_BOOL}; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.t = JV_INT}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.t = JV_FLOAT}; v.u.f = f; return v; }
static inline jv jv_str(const char *p, size_t n) { jv v = {.t = JV_STR}; v.u.s.p = p; v.u.s.n = n; return v; }
/* n bytes of string s from off, their marks with them. */
static inline jv jv_sub(jv s, size_t off, size_t n)
{
    jv v = jv_str(s.u.s.p + off, n);
    v.u.s.m = s.u.s.m ? s.u.s.m + off : NULL;
    return v;
}
jv jv_cstr(const char *s);
jv jv_newlist(jctx *c);
jv jv_newdict(jctx *c);
void jlist_push(jctx *c, jlist *l, jv v);
/* Sets key k (replacing its value where present, keeping its place). */
void jdict_set(jctx *c, jdict *d, jv k, jv v);
/* The value of key k, or NULL. */
jv *jdict_get(const jdict *d, jv k);
jv *jdict_gets(const jdict *d, const char *key);

/* plain: its strings are user text (marked as such). */
jv jv_from_json(jctx *c, const cJSON *j, bool plain);
bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
/* Python's ordering of a and b (<0, 0, >0); fails on values that do not order. */
int jv_compare(jctx *c, int line, jv a, jv b);
const char *jv_typename(jv v);
/* Python's str(v) appended to b (repr for the items of lists and dicts). */
void jv_str_to(jctx *c, jbuf *b, jv v);
jv jv_to_str(jctx *c, jv v);
/* Python's repr(v) appended to b. */
void jv_repr_to(jctx *c, jbuf *b, jv v);
/* json.dumps's arguments: indent (< 0: None), separators, sort_keys, ensure_ascii. */
typedef struct jjson_opts {
    int indent;
    const char *item_sep, *key_sep;
    bool sort_keys, ascii;
} jjson_opts;
/* json.dumps(v, ...) appended to b. */
void jv_json_to(jctx *c, int line, jbuf *b, jv v, const jjson_opts *o, int level);
/* Appends n bytes of template text (plain: of user text). */
void jbuf_add(jctx *c, jbuf *b, const char *s, size_t n);
void jbuf_add_flag(jctx *c, jbuf *b, const char *s, size_t n, bool plain);
/* Appends a string, its marks with it. */
void jbuf_add_str(jctx *c, jbuf *b, jv s);
/* Counts the elements of an iterable (strings count code points); -1 if v has no length. */
int64_t jv_length(jv v);
/* The elements v iterates over (dict: its keys; string: its characters) as a list; fails when
 * v is not iterable. Undefined iterates as nothing. */
jlist *jv_iter(jctx *c, int line, jv v);
/* Number of bytes of the UTF-8 sequence starting with byte b (1 for a stray byte). */
size_t utf8_len(unsigned char b);

/* ---- syntax tree ---- */

enum jnode_kind {
    /* expressions */
    N_LIT, N_NAME, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_UNARY, N_BIN, N_AND, N_OR,
    N_CMP, N_COND, N_LIST, N_TUPLE, N_DICT,
    /* statements */
    N_BODY, N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_MACRO, N_BREAK, N_CONTINUE, N_FILTERBLOCK,
};

/* Operators (N_UNARY, N_BIN, N_CMP): the character, or one of these for two-character ones. */
enum { OP_FLOORDIV = 'F', OP_POW = 'P', OP_LE = 'L', OP_GE = 'G', OP_EQ = 'E', OP_NE = 'N',
       OP_IN = 'I', OP_NOTIN = 'J' };

struct jnode {
    uint8_t kind;
    char op;
    bool neg;              /* N_TEST: `is not` */
    int line;
    const char *name;      /* N_NAME, N_ATTR, N_FILTER, N_TEST, N_MACRO, N_SET (namespace) */
    const char *attr;      /* N_SET: the namespace attribute assigned, or NULL */
    jv lit;                /* N_LIT; N_TEXT: the text */
    jnode *a, *b, *c, *d;
    jnode **kids;          /* arguments, items, statements; N_DICT: key, value, key, ... */
    int n_kids;
    const char **kw_names; /* keyword arguments */
    jnode **kw_vals;
    int n_kw;
    const char **targets;  /* N_FOR, N_SET: the names assigned; N_MACRO: its parameters */
    int n_targets;
};

jnode *jparse(jctx *c, const char *src, size_t len);

/* ---- evaluation ---- */

typedef struct jscope jscope;
struct jscope { jdict vars; jscope *parent; };

typedef struct jrender {
    jctx *c;
    jscope *globals;       /* the render variables and top-level assignments */
    jscope *scope;
    jbuf *out;
    time_t now;            /* what strftime_now formats */
    int brk;               /* 1: break, 2: continue pending */
} jrender;

jv jeval(jrender *r, const jnode *n);
/* Calls a macro, global function or method with evaluated arguments. */
jv jcall(jrender *r, const jnode *at, jv fn, jv *args, int n_args, const char **kw_names,
         jv *kw_vals, int n_kw);
jv jgetattr(jrender *r, int line, jv obj, const char *name);
/* a op b for + - * / // % ** (OP_ codes for the two-character ones), as Python computes it. */
jv jarith(jrender *r, int line, char op, jv a, jv b);
/* fmt % args (a tuple, or one value): Python's printf-style formatting for %s, %d, %i, %r and
 * %%. */
jv jformat_percent(jrender *r, int line, jv fmt, jv args);
/* item in seq: a substring, a dict's key, or an element. */
bool jcontains(jrender *r, int line, jv item, jv seq);
jv jgetitem(jrender *r, int line, jv obj, jv key);
/* Fails as using the Undefined v does: what it stands for, in jinja2's words. */
_Noreturn void jundefined_fail(jrender *r, int line, jv v);

/* Filters, tests, globals and methods (jinja_filter.c). */
jv jfilter(jrender *r, const jnode *at, const char *name, jv v, jv *args, int n_args,
           const char **kw_names, jv *kw_vals, int n_kw);
bool jtest(jrender *r, const jnode *at, const char *name, jv v, jv *args, int n_args);
/* The global function called name (its index, for JV_FUNC), or -1. */
int jglobal_find(const char *name);
jv jglobal_call(jrender *r, const jnode *at, int fn, jv *args, int n_args, const char **kw_names,
                jv *kw_vals, int n_kw);
jv jmethod_call(jrender *r, const jnode *at, const jmethod *m, jv *args, int n_args,
                const char **kw_names, jv *kw_vals, int n_kw);
/* Whether name is a method of values of v's type (1: v.name gives a bound method), one the
 * sandbox refuses (-1), or neither (0). */
int jmethod_kind(jv v, const char *name);

#endif
