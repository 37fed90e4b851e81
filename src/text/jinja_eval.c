/* jinja_eval.c — running a parsed template: scopes (a `for` body and a macro have their own, as
 * in jinja2, so `set` inside a loop does not leak out of it; namespace() is the way out),
 * statements, operators with Python's semantics, attribute and item access as jinja2 resolves
 * them, macro calls, and the entry points of jinja.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

struct jinja_template {
    jctx c;
    jnode *root;
};

static void step(jrender *r, int line)
{
    if (--r->c->steps < 0)
        jfail(r->c, line, "the template runs too long (more than %ld steps)", JINJA_MAX_STEPS);
}

/* ---- scopes ---- */

static jscope *scope_push(jrender *r, jscope *parent)
{
    jscope *s = jalloc(r->c, sizeof *s);
    s->parent = parent;
    r->scope = s;
    return s;
}

static void scope_set(jrender *r, const char *name, jv v)
{
    jdict_set(r->c, &r->scope->vars, jv_cstr(name), v);
}

static jv lookup(jrender *r, const char *name)
{
    for (jscope *s = r->scope; s; s = s->parent) {
        jv *v = jdict_gets(&s->vars, name);
        if (v)
            return *v;
    }
    int fn = jglobal_find(name);
    if (fn >= 0) {
        jv v = {.t = JV_FUNC};
        v.u.fn = fn;
        return v;
    }
    return jv_undef(name);
}

/* ---- access ---- */

_Noreturn void jundefined_fail(jrender *r, int line, jv v)
{
    if (v.u.undef && !strncmp(v.u.undef, "SecurityError: ", 15))
        jfail(r->c, line, "%s", v.u.undef);
    if (v.u.undef && v.u.undef[0] == '\'')
        jfail(r->c, line, "UndefinedError: %s", v.u.undef);
    jfail(r->c, line, "UndefinedError: '%s' is undefined", v.u.undef ? v.u.undef : "value");
}

/* An Undefined that says what was missing when it is used. */
static jv missing(jrender *r, jv obj, jv key)
{
    jv k = jv_to_str(r->c, key);
    bool attr = key.t == JV_STR;
    return jv_undef(jformat(r->c, "'%s object' has no %s%s%.*s%s", jv_typename(obj), attr ? "attribute" : "element",
                            attr ? " '" : " ", (int)k.u.s.n, k.u.s.p, attr ? "'" : ""));
}

/* Code point offsets of a string (n + 1 of them). */
static size_t *cp_offsets(jctx *c, jv s, size_t *n)
{
    size_t cnt = (size_t)jv_length(s);
    size_t *off = jalloc(c, (cnt + 1) * sizeof *off);
    size_t i = 0, k = 0;
    for (; i < s.u.s.n && k < cnt; k++) {
        off[k] = i;
        i += utf8_len((unsigned char)s.u.s.p[i]);
    }
    off[cnt] = s.u.s.n;
    *n = cnt;
    return off;
}

jv jgetitem(jrender *r, int line, jv obj, jv key)
{
    if (obj.t == JV_UNDEF)
        jundefined_fail(r, line, obj);
    if (obj.t == JV_DICT) {
        jv *v = jdict_get(obj.u.d, key);
        if (v)
            return *v;
    } else if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
        int64_t i = key.t == JV_INT ? key.u.i : key.u.b;
        int64_t n = jv_length(obj);
        if (i < 0)
            i += n;
        if (i >= 0 && i < n) {
            if (obj.t == JV_LIST)
                return obj.u.l->v[i];
            size_t cnt, *off = cp_offsets(r->c, obj, &cnt);
            return jv_sub(obj, off[i], off[i + 1] - off[i]);
        }
    }
    if (key.t == JV_STR && obj.t != JV_DICT)
        return jgetattr(r, line, obj, key.u.s.p);
    return missing(r, obj, key);
}

jv jgetattr(jrender *r, int line, jv obj, const char *name)
{
    if (obj.t == JV_UNDEF)
        jundefined_fail(r, line, obj);
    int kind = jmethod_kind(obj, name);
    if (kind < 0)   /* jinja2's sandbox: an Undefined that fails when used */
        return jv_undef(jformat(r->c, "SecurityError: access to attribute '%s' of '%s' object is unsafe.", name,
                                jv_typename(obj)));
    if (kind > 0) {
        jv v = {.t = JV_METHOD};
        v.u.m = jalloc(r->c, sizeof *v.u.m);
        v.u.m->self = obj;
        v.u.m->name = name;
        return v;
    }
    if (obj.t == JV_DICT) {
        jv *v = jdict_gets(obj.u.d, name);
        if (v)
            return *v;
    }
    return missing(r, obj, jv_cstr(name));
}

/* Python's slice of a list or string (code points): obj[start:stop:step]. */
static jv slice(jrender *r, const jnode *n, jv obj)
{
    jv parts[3];
    const jnode *pn[3] = {n->b, n->c, n->d};
    for (int k = 0; k < 3; k++) {
        parts[k] = pn[k] ? jeval(r, pn[k]) : jv_none();
        if (parts[k].t != JV_NONE && parts[k].t != JV_INT)
            jfail(r->c, n->line, "slice indices must be integers or None");
    }
    if (obj.t != JV_LIST && obj.t != JV_STR)   /* jinja2: what cannot be sliced is Undefined */
        return jv_undef(jformat(r->c, "'%s' object is not subscriptable", jv_typename(obj)));
    int64_t len = jv_length(obj), st = parts[2].t == JV_INT ? parts[2].u.i : 1;
    if (st == 0)
        jfail(r->c, n->line, "slice step cannot be zero");
    int64_t lo = st > 0 ? 0 : -1, hi = st > 0 ? len : len - 1;
    int64_t a = st > 0 ? 0 : len - 1, b = st > 0 ? len : -1;
    if (parts[0].t == JV_INT) {
        a = parts[0].u.i < 0 ? parts[0].u.i + len : parts[0].u.i;
        a = a < lo ? lo : a > hi ? hi : a;
    }
    if (parts[1].t == JV_INT) {
        b = parts[1].u.i < 0 ? parts[1].u.i + len : parts[1].u.i;
        b = b < lo ? lo : b > hi ? hi : b;
    }
    if (obj.t == JV_LIST) {
        jv out = jv_newlist(r->c);
        out.u.l->tuple = obj.u.l->tuple;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
            jlist_push(r->c, out.u.l, obj.u.l->v[i]);
        return out;
    }
    size_t cnt, *off = cp_offsets(r->c, obj, &cnt);
    jbuf *t = jtmp_open(r->c, n->line);
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
        jbuf_add_str(r->c, t, jv_sub(obj, off[i], off[i + 1] - off[i]));
    return jtmp_close(r->c);
}

/* ---- operators ---- */

/* str(a) + str(b), the marks of user text with them. */
static jv concat(jrender *r, jv a, jv b)
{
    jbuf *t = jtmp_open(r->c, 0);
    jv_str_to(r->c, t, a);
    jv_str_to(r->c, t, b);
    return jtmp_close(r->c);
}

static bool is_int(jv v)
{
    return v.t == JV_INT || v.t == JV_BOOL;
}

static int64_t ival(jv v)
{
    return v.t == JV_INT ? v.u.i : v.u.b;
}

static bool is_number(jv v)
{
    return is_int(v) || v.t == JV_FLOAT;
}

static double fval(jv v)
{
    return v.t == JV_FLOAT ? v.u.f : (double)ival(v);
}

static _Noreturn void bad_operands(jrender *r, int line, const char *op, jv a, jv b)
{
    if (a.t == JV_UNDEF)
        jundefined_fail(r, line, a);
    if (b.t == JV_UNDEF)
        jundefined_fail(r, line, b);
    jfail(r->c, line, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_typename(a), jv_typename(b));
}

/* s repeated n times (str * int, list * int). */
static jv repeat(jrender *r, jv s, int64_t n)
{
    if (n < 0)
        n = 0;
    if (s.t == JV_LIST) {
        jv out = jv_newlist(r->c);
        for (int64_t i = 0; i < n; i++)
            for (size_t k = 0; k < s.u.l->n; k++)
                jlist_push(r->c, out.u.l, s.u.l->v[k]);
        return out;
    }
    if (s.u.s.n && (uint64_t)n > JINJA_MAX_OUTPUT / s.u.s.n)
        jfail(r->c, 0, "a string repeated past %zu MiB", JINJA_MAX_OUTPUT >> 20);
    jbuf *t = jtmp_open(r->c, 0);
    for (int64_t i = 0; i < n && s.u.s.n; i++)
        jbuf_add_str(r->c, t, s);
    return jtmp_close(r->c);
}

jv jformat_percent(jrender *r, int line, jv fmt, jv args)
{
    jlist *l = args.t == JV_LIST && args.u.l->tuple ? args.u.l : NULL;
    size_t next = 0;
    jbuf *b = jtmp_open(r->c, line);
    for (size_t i = 0; i < fmt.u.s.n; i++) {
        char ch = fmt.u.s.p[i];
        if (ch != '%') {
            jbuf_add(r->c, b, &ch, 1);
            continue;
        }
        char conv = i + 1 < fmt.u.s.n ? fmt.u.s.p[++i] : 0;
        if (conv == '%') {
            jbuf_add(r->c, b, "%", 1);
            continue;
        }
        if (conv != 's' && conv != 'd' && conv != 'r' && conv != 'i')
            jfail(r->c, line, "unsupported format character '%c'", conv ? conv : '?');
        jv v = l ? (next < l->n ? l->v[next] : jv_undef(NULL)) : next == 0 ? args : jv_undef(NULL);
        if (l ? next >= l->n : next > 0)
            jfail(r->c, line, "not enough arguments for format string");
        next++;
        if (conv == 'd' || conv == 'i') {
            if (!is_number(v))
                jfail(r->c, line, "%%d format: a real number is required, not %s", jv_typename(v));
            v = jv_int(v.t == JV_FLOAT ? (int64_t)v.u.f : ival(v));
        }
        if (conv == 'r')
            jv_repr_to(r->c, b, v);
        else
            jv_str_to(r->c, b, v);
    }
    if (args.t != JV_DICT && (l ? next < l->n : next == 0))   /* a mapping may go unused */
        jfail(r->c, line, "not all arguments converted during string formatting");
    return jtmp_close(r->c);
}

jv jarith(jrender *r, int line, char op, jv a, jv b)
{
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    const char *opname = names[op == '+' ? 0 : op == '-' ? 1 : op == '*' ? 2 : op == '/' ? 3 : op == OP_FLOORDIV ? 4 : op == '%' ? 5 : 6];
    if (op == '+' && a.t == JV_STR && b.t == JV_STR)
        return concat(r, a, b);
    if (op == '+' && a.t == JV_LIST && b.t == JV_LIST) {
        jv out = jv_newlist(r->c);
        for (size_t i = 0; i < a.u.l->n; i++)
            jlist_push(r->c, out.u.l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++)
            jlist_push(r->c, out.u.l, b.u.l->v[i]);
        out.u.l->tuple = a.u.l->tuple && b.u.l->tuple;
        return out;
    }
    if (op == '*' && (a.t == JV_STR || a.t == JV_LIST) && is_int(b))
        return repeat(r, a, ival(b));
    if (op == '*' && (b.t == JV_STR || b.t == JV_LIST) && is_int(a))
        return repeat(r, b, ival(a));
    if (op == '%' && a.t == JV_STR)
        return jformat_percent(r, line, a, b);
    if (!is_number(a) || !is_number(b))
        bad_operands(r, line, opname, a, b);
    if ((op == '/' || op == OP_FLOORDIV || op == '%') && fval(b) == 0)
        jfail(r->c, line, "division by zero");
    if (is_int(a) && is_int(b) && op != '/') {
        int64_t x = ival(a), y = ival(b), z = 0;
        bool ovf = false;
        switch (op) {
        case '+': ovf = __builtin_add_overflow(x, y, &z); break;
        case '-': ovf = __builtin_sub_overflow(x, y, &z); break;
        case '*': ovf = __builtin_mul_overflow(x, y, &z); break;
        case OP_FLOORDIV:
        case '%':
            if (x == INT64_MIN && y == -1) {
                ovf = true;
                break;
            }
            z = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0)))
                z--;   /* Python floors */
            if (op == '%')
                z = x - z * y;
            break;
        default:   /* ** */
            if (y < 0)
                return jv_float(pow((double)x, (double)y));
            z = 1;
            for (int64_t k = 0; k < y && !ovf; k++)
                ovf = __builtin_mul_overflow(z, x, &z);
            break;
        }
        if (ovf)
            jfail(r->c, line, "integer overflow in %s", opname);
        return jv_int(z);
    }
    double x = fval(a), y = fval(b);
    switch (op) {
    case '+': return jv_float(x + y);
    case '-': return jv_float(x - y);
    case '*': return jv_float(x * y);
    case '/': return jv_float(x / y);
    case OP_FLOORDIV: return jv_float(floor(x / y));
    case '%': {
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0)))
            m += y;
        return jv_float(m);
    }
    default: return jv_float(pow(x, y));
    }
}

bool jcontains(jrender *r, int line, jv item, jv seq)
{
    if (seq.t == JV_STR) {
        if (item.t != JV_STR)
            jfail(r->c, line, "'in <string>' requires string as left operand, not %s", jv_typename(item));
        return !item.u.s.n || memmem(seq.u.s.p, seq.u.s.n, item.u.s.p, item.u.s.n);
    }
    if (seq.t == JV_DICT)
        return jdict_get(seq.u.d, item) != NULL;
    jlist *l = jv_iter(r->c, line, seq);
    for (size_t i = 0; i < l->n; i++)
        if (jv_equal(l->v[i], item))
            return true;
    return false;
}

static jv compare(jrender *r, const jnode *n)
{
    jv a = jeval(r, n->a), b = jeval(r, n->b);
    switch (n->op) {
    case OP_EQ: return jv_bool(jv_equal(a, b));
    case OP_NE: return jv_bool(!jv_equal(a, b));
    case OP_IN: return jv_bool(jcontains(r, n->line, a, b));
    case OP_NOTIN: return jv_bool(!jcontains(r, n->line, a, b));
    default: break;
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF)
        bad_operands(r, n->line, "<", a, b);
    int c = jv_compare(r->c, n->line, a, b);
    return jv_bool(n->op == '<' ? c < 0 : n->op == '>' ? c > 0 : n->op == OP_LE ? c <= 0 : c >= 0);
}

/* ---- calls ---- */

typedef struct callargs {
    jv *args, *kw_vals;
    const char **kw_names;
    int n_args, n_kw;
} callargs;

static callargs eval_args(jrender *r, const jnode *n)
{
    callargs a = {.n_args = n->n_kids, .n_kw = n->n_kw, .kw_names = n->kw_names};
    a.args = jalloc(r->c, (size_t)(n->n_kids + 1) * sizeof *a.args);
    a.kw_vals = jalloc(r->c, (size_t)(n->n_kw + 1) * sizeof *a.kw_vals);
    for (int i = 0; i < n->n_kids; i++)
        a.args[i] = jeval(r, n->kids[i]);
    for (int i = 0; i < n->n_kw; i++)
        a.kw_vals[i] = jeval(r, n->kw_vals[i]);
    return a;
}

static void exec_body(jrender *r, const jnode *body);

static jv call_macro(jrender *r, const jnode *at, const jnode *m, jv *args, int n_args,
                     const char **kw_names, jv *kw_vals, int n_kw)
{
    if (n_args > m->n_targets)
        jfail(r->c, at->line, "macro '%s' takes not more than %d argument(s)", m->name, m->n_targets);
    jdepth_enter(r->c, at->line);
    jscope *saved = r->scope;
    scope_push(r, r->globals);
    for (int i = 0; i < n_kw; i++) {
        int k = 0;
        while (k < m->n_targets && strcmp(m->targets[k], kw_names[i]))
            k++;
        if (k == m->n_targets)
            jfail(r->c, at->line, "macro '%s' has no argument '%s'", m->name, kw_names[i]);
        if (k < n_args)
            jfail(r->c, at->line, "macro '%s' got argument '%s' twice", m->name, kw_names[i]);
        scope_set(r, m->targets[k], kw_vals[i]);
    }
    for (int k = 0; k < m->n_targets; k++) {
        if (k < n_args)
            scope_set(r, m->targets[k], args[k]);
        else if (!jdict_gets(&r->scope->vars, m->targets[k]))
            scope_set(r, m->targets[k], m->kids[k] ? jeval(r, m->kids[k]) : jv_undef(m->targets[k]));
    }
    jbuf *saved_out = r->out;
    r->out = jtmp_open(r->c, at->line);
    exec_body(r, m->b);
    jv out = jtmp_close(r->c);
    r->out = saved_out;
    r->scope = saved;
    jdepth_leave(r->c);
    return out;
}

jv jcall(jrender *r, const jnode *at, jv fn, jv *args, int n_args, const char **kw_names,
         jv *kw_vals, int n_kw)
{
    switch (fn.t) {
    case JV_MACRO: return call_macro(r, at, fn.u.mac, args, n_args, kw_names, kw_vals, n_kw);
    case JV_FUNC: return jglobal_call(r, at, fn.u.fn, args, n_args, kw_names, kw_vals, n_kw);
    case JV_METHOD: return jmethod_call(r, at, fn.u.m, args, n_args, kw_names, kw_vals, n_kw);
    case JV_UNDEF: jundefined_fail(r, at->line, fn);
    default: jfail(r->c, at->line, "'%s' object is not callable", jv_typename(fn));
    }
}

/* ---- expressions ---- */

static jv eval_inner(jrender *r, const jnode *n)
{
    switch (n->kind) {
    case N_LIT: return n->lit;
    case N_NAME: return lookup(r, n->name);
    case N_ATTR: return jgetattr(r, n->line, jeval(r, n->a), n->name);
    case N_ITEM: {
        jv obj = jeval(r, n->a);
        return jgetitem(r, n->line, obj, jeval(r, n->b));
    }
    case N_SLICE: {
        jv obj = jeval(r, n->a);
        if (obj.t == JV_UNDEF)
            jundefined_fail(r, n->line, obj);
        return slice(r, n, obj);
    }
    case N_CALL: {
        jv fn = jeval(r, n->a);
        callargs a = eval_args(r, n);
        return jcall(r, n, fn, a.args, a.n_args, a.kw_names, a.kw_vals, a.n_kw);
    }
    case N_FILTER: {
        jv v = jeval(r, n->a);
        callargs a = eval_args(r, n);
        return jfilter(r, n, n->name, v, a.args, a.n_args, a.kw_names, a.kw_vals, a.n_kw);
    }
    case N_TEST: {
        jv v = jeval(r, n->a);
        callargs a = eval_args(r, n);
        return jv_bool(jtest(r, n, n->name, v, a.args, a.n_args) != n->neg);
    }
    case N_UNARY: {
        jv v = jeval(r, n->a);
        if (n->op == '!')
            return jv_bool(!jv_truthy(v));
        if (!is_number(v))
            bad_operands(r, n->line, n->op == '-' ? "unary -" : "unary +", v, jv_int(0));
        if (n->op == '+')
            return v.t == JV_BOOL ? jv_int(v.u.b) : v;
        if (v.t == JV_FLOAT)
            return jv_float(-v.u.f);
        if (ival(v) == INT64_MIN)
            jfail(r->c, n->line, "integer overflow in unary -");
        return jv_int(-ival(v));
    }
    case N_BIN: {
        jv a = jeval(r, n->a), b = jeval(r, n->b);
        if (n->op == '~')
            return concat(r, a, b);
        return jarith(r, n->line, n->op, a, b);
    }
    case N_AND: {
        jv a = jeval(r, n->a);
        return jv_truthy(a) ? jeval(r, n->b) : a;
    }
    case N_OR: {
        jv a = jeval(r, n->a);
        return jv_truthy(a) ? a : jeval(r, n->b);
    }
    case N_CMP: return compare(r, n);
    case N_COND:
        if (jv_truthy(jeval(r, n->b)))
            return jeval(r, n->a);
        return n->c ? jeval(r, n->c) : jv_undef(NULL);
    case N_LIST:
    case N_TUPLE: {
        jv l = jv_newlist(r->c);
        l.u.l->tuple = n->kind == N_TUPLE;
        for (int i = 0; i < n->n_kids; i++)
            jlist_push(r->c, l.u.l, jeval(r, n->kids[i]));
        return l;
    }
    case N_DICT: {
        jv d = jv_newdict(r->c);
        for (int i = 0; i + 1 < n->n_kids; i += 2) {
            jv k = jeval(r, n->kids[i]);
            jdict_set(r->c, d.u.d, k, jeval(r, n->kids[i + 1]));
        }
        return d;
    }
    default:
        jfail(r->c, n->line, "not an expression");
    }
}

jv jeval(jrender *r, const jnode *n)
{
    step(r, n->line);
    jdepth_enter(r->c, n->line);
    jv v = eval_inner(r, n);
    jdepth_leave(r->c);
    return v;
}

/* ---- statements ---- */

static void assign(jrender *r, const jnode *n, jv v)
{
    if (n->n_targets == 1) {
        scope_set(r, n->targets[0], v);
        return;
    }
    if (v.t != JV_LIST && v.t != JV_STR && v.t != JV_DICT)
        jfail(r->c, n->line, "cannot unpack non-iterable %s object", jv_typename(v));
    jlist *l = jv_iter(r->c, n->line, v);
    if (l->n != (size_t)n->n_targets)
        jfail(r->c, n->line, "%s values to unpack (expected %d, got %zu)",
              l->n > (size_t)n->n_targets ? "too many" : "not enough", n->n_targets, l->n);
    for (int i = 0; i < n->n_targets; i++)
        scope_set(r, n->targets[i], l->v[i]);
}

static jv render_body(jrender *r, const jnode *body, int line)
{
    jbuf *saved = r->out;
    r->out = jtmp_open(r->c, line);
    exec_body(r, body);
    r->out = saved;
    return jtmp_close(r->c);
}

static void exec_for(jrender *r, const jnode *n)
{
    jlist *items = jv_iter(r->c, n->line, jeval(r, n->a));
    jscope *saved = r->scope;
    if (n->d) {   /* for x in xs if cond: the loop sees the items that pass */
        jlist *kept = jalloc(r->c, sizeof *kept);
        for (size_t i = 0; i < items->n; i++) {
            scope_push(r, saved);
            assign(r, n, items->v[i]);
            if (jv_truthy(jeval(r, n->d)))
                jlist_push(r->c, kept, items->v[i]);
            r->scope = saved;
        }
        items = kept;
    }
    size_t len = items->n;
    for (size_t i = 0; i < len; i++) {
        step(r, n->line);
        scope_push(r, saved);
        jv loop = jv_newdict(r->c);
        jdict *d = loop.u.d;
        jdict_set(r->c, d, jv_cstr("index0"), jv_int((int64_t)i));
        jdict_set(r->c, d, jv_cstr("index"), jv_int((int64_t)i + 1));
        jdict_set(r->c, d, jv_cstr("revindex0"), jv_int((int64_t)(len - i - 1)));
        jdict_set(r->c, d, jv_cstr("revindex"), jv_int((int64_t)(len - i)));
        jdict_set(r->c, d, jv_cstr("first"), jv_bool(i == 0));
        jdict_set(r->c, d, jv_cstr("last"), jv_bool(i + 1 == len));
        jdict_set(r->c, d, jv_cstr("length"), jv_int((int64_t)len));
        jdict_set(r->c, d, jv_cstr("depth"), jv_int(1));
        jdict_set(r->c, d, jv_cstr("depth0"), jv_int(0));
        jdict_set(r->c, d, jv_cstr("previtem"), i ? items->v[i - 1] : jv_undef("'loop' has no previous item"));
        jdict_set(r->c, d, jv_cstr("nextitem"), i + 1 < len ? items->v[i + 1] : jv_undef("'loop' has no next item"));
        scope_set(r, "loop", loop);
        assign(r, n, items->v[i]);
        exec_body(r, n->b);
        r->scope = saved;
        int brk = r->brk;
        r->brk = 0;
        if (brk == 1)
            break;
    }
    if (!len && n->c)
        exec_body(r, n->c);
}

static void exec_stmt(jrender *r, const jnode *n)
{
    step(r, n->line);
    switch (n->kind) {
    case N_TEXT: jbuf_add(r->c, r->out, n->lit.u.s.p, n->lit.u.s.n); return;
    case N_OUT: jv_str_to(r->c, r->out, jeval(r, n->a)); return;
    case N_BODY: exec_body(r, n); return;
    case N_IF:
        if (jv_truthy(jeval(r, n->a)))
            exec_body(r, n->b);
        else if (n->c)
            exec_stmt(r, n->c);
        return;
    case N_FOR: exec_for(r, n); return;
    case N_SET:
        if (n->attr) {
            jv ns = lookup(r, n->name);
            if (ns.t != JV_DICT || !ns.u.d->ns)
                jfail(r->c, n->line, "cannot assign attribute on non-namespace object");
            jdict_set(r->c, ns.u.d, jv_cstr(n->attr), jeval(r, n->a));
            return;
        }
        assign(r, n, n->a ? jeval(r, n->a) : render_body(r, n->b, n->line));
        return;
    case N_MACRO: {
        jv m = {.t = JV_MACRO};
        m.u.mac = n;
        scope_set(r, n->name, m);
        return;
    }
    case N_BREAK: r->brk = 1; return;
    case N_CONTINUE: r->brk = 2; return;
    case N_FILTERBLOCK: {
        jv text = render_body(r, n->b, n->line);
        callargs a = eval_args(r, n);
        jv_str_to(r->c, r->out, jfilter(r, n, n->name, text, a.args, a.n_args, a.kw_names, a.kw_vals, a.n_kw));
        return;
    }
    default: jfail(r->c, n->line, "not a statement");
    }
}

static void exec_body(jrender *r, const jnode *body)
{
    jdepth_enter(r->c, body->line);
    for (int i = 0; i < body->n_kids && !r->brk; i++)
        exec_stmt(r, body->kids[i]);
    jdepth_leave(r->c);
}

/* ---- entry points ---- */

/* setjmp sits in these small functions, whose locals are not changed after it, so that a
 * longjmp back cannot leave one of them stale. */
static bool parse_guarded(jinja_template *t, const char *src, size_t len)
{
    if (setjmp(t->c.jb))
        return false;
    t->root = jparse(&t->c, src, len);
    return true;
}

jinja_template *jinja_parse(const char *src, size_t len, jinja_error *err)
{
    *err = (jinja_error){0};
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    t->c.limit = JINJA_MAX_MEMORY;
    t->c.err = err;
    if (!parse_guarded(t, src, len)) {
        jinja_free(t);
        return NULL;
    }
    return t;
}

void jinja_free(jinja_template *t)
{
    if (!t)
        return;
    jarena_free(&t->c);
    free(t);
}

static bool is_plain(const char *name, const char *const *plain_vars)
{
    for (int i = 0; plain_vars && plain_vars[i]; i++)
        if (!strcmp(plain_vars[i], name))
            return true;
    return false;
}

static bool render_guarded(jrender *r, const jnode *root, const cJSON *vars, const char *const *plain_vars)
{
    if (setjmp(r->c->jb))
        return false;
    r->globals = scope_push(r, NULL);
    if (cJSON_IsObject(vars))
        for (const cJSON *e = vars->child; e; e = e->next)
            if (e->string)
                scope_set(r, jstrdup(r->c, e->string, strlen(e->string)),
                          jv_from_json(r->c, e, is_plain(e->string, plain_vars)));
    r->out = jtmp_open(r->c, 0);
    exec_body(r, root);
    return true;
}

char *jinja_render_marked(const jinja_template *t, const cJSON *vars, const char *const *plain_vars,
                          time_t now, size_t *len, uint8_t **plain, jinja_error *err)
{
    *err = (jinja_error){0};
    if (plain)
        *plain = NULL;
    jctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    c->limit = JINJA_MAX_MEMORY;
    c->err = err;
    c->steps = JINJA_MAX_STEPS;
    jrender r = {.c = c, .now = now};
    if (!render_guarded(&r, t->root, vars, plain_vars)) {
        jarena_free(c);
        free(c);
        return NULL;
    }
    /* the text (and its marks) leave the arena's bookkeeping as the caller's */
    jbuf out = c->tmp[--c->n_tmp];
    jarena_free(c);
    free(c);
    size_t n = out.s.len;
    char *text = out.s.p ? out.s.p : calloc(1, 1);
    uint8_t *m = plain ? (out.marked ? (uint8_t *)out.m.p : calloc(n + 1, 1)) : NULL;
    if (!plain || !out.marked)
        free(out.m.p);
    if (!text || (plain && !m)) {
        free(text);
        free(m);
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    *len = n;
    if (plain)
        *plain = m;
    return text;
}

char *jinja_render(const jinja_template *t, const cJSON *vars, time_t now, size_t *len,
                   jinja_error *err)
{
    return jinja_render_marked(t, vars, NULL, now, len, NULL, err);
}
