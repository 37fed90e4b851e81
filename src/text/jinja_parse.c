/* jinja_parse.c — Jinja source to a syntax tree: the lexer (text, {{ }}, {% %}, {# #} with
 * jinja2's whitespace rules as Hugging Face configures them: trim_blocks, lstrip_blocks, the
 * `-` and `+` markers) and a recursive-descent parser of the statements and expressions chat
 * templates use. Operator precedence follows the Jinja documentation: `x if c else y` < or <
 * and < not < comparisons < + - < ~ < * / // % < ** < unary - + < filters and tests <
 * attribute, subscript and call. */
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

/* ---- lexer ---- */

enum { T_EOF, T_TEXT, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

typedef struct jtok {
    uint8_t t;
    char op;              /* T_OP */
    int line;
    const char *p;        /* T_TEXT, T_NAME, T_STR: the bytes (a string's unescaped value) */
    size_t n;
    int64_t i;
    double f;
} jtok;

typedef struct lexer {
    jctx *c;
    const char *s;
    size_t n, pos;
    int line;
    jtok *t;
    size_t nt, cap;
} lexer;

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static bool is_alpha(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

static bool is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static jtok *emit(lexer *L, int type, int line)
{
    if (L->nt == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 256;
        jtok *t = jalloc(L->c, cap * sizeof *t);
        if (L->nt)
            memcpy(t, L->t, L->nt * sizeof *t);
        L->t = t;
        L->cap = cap;
    }
    jtok *t = &L->t[L->nt++];
    t->t = (uint8_t)type;
    t->line = line;
    return t;
}

/* Moves pos to to, counting the newlines passed. */
static void advance(lexer *L, size_t to)
{
    for (; L->pos < to; L->pos++)
        L->line += L->s[L->pos] == '\n';
}

static void skip_space(lexer *L)
{
    size_t p = L->pos;
    while (p < L->n && is_space(L->s[p]))
        p++;
    advance(L, p);
}

static bool at(const lexer *L, const char *lit)
{
    size_t k = strlen(lit);
    return L->n - L->pos >= k && !memcmp(L->s + L->pos, lit, k);
}

static int hexval(char ch)
{
    return is_digit(ch) ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string literal at pos (its quote there): Python's escapes (\n \t \\ \' \" \xhh \uXXXX
 * \UXXXXXXXX, octal, a backslash before a newline joins lines); an unknown escape keeps its
 * backslash, as in Python. */
static void lex_string(lexer *L)
{
    int line = L->line;
    char q = L->s[L->pos];
    size_t p = L->pos + 1;
    while (p < L->n && L->s[p] != q)
        p += L->s[p] == '\\' && p + 1 < L->n ? 2 : 1;
    if (p >= L->n)
        jfail(L->c, line, "unterminated string");
    const char *s = L->s + L->pos + 1;
    size_t n = p - (L->pos + 1);
    char *o = jalloc(L->c, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i];
            continue;
        }
        char e = s[++i];
        const char *simple = strchr("\\'\"abfnrtv", e);
        if (simple && e) {
            static const char map[] = "\\'\"\a\b\f\n\r\t\v";
            o[k++] = map[simple - "\\'\"abfnrtv"];
        } else if (e == '\n') {
            /* line continuation: nothing */
        } else if (e >= '0' && e <= '7') {
            int v = 0, d = 0;
            for (; d < 3 && i < n && s[i] >= '0' && s[i] <= '7'; d++, i++)
                v = v * 8 + (s[i] - '0');
            i--;
            k += put_utf8(o + k, (uint32_t)v);
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int d = 0; d < digits; d++) {
                int h = i + 1 + (size_t)d < n ? hexval(s[i + 1 + d]) : -1;
                if (h < 0)
                    jfail(L->c, line, "truncated \\%c escape in a string", e);
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF)
                jfail(L->c, line, "escape \\%c out of Unicode's range", e);
            i += (size_t)digits;
            k += put_utf8(o + k, v);
        } else {
            o[k++] = '\\';
            o[k++] = e;
        }
    }
    jtok *t = emit(L, T_STR, line);
    t->p = o;
    t->n = k;
    advance(L, p + 1);
}

static void lex_number(lexer *L)
{
    /* the extent first: digits (with _), a fraction, an exponent */
    size_t p = L->pos;
    bool is_float = false;
    while (p < L->n && (is_digit(L->s[p]) || L->s[p] == '_'))
        p++;
    if (p + 1 < L->n && L->s[p] == '.' && is_digit(L->s[p + 1]) && !(L->pos > 0 && L->s[L->pos - 1] == '.')) {
        is_float = true;
        for (p++; p < L->n && (is_digit(L->s[p]) || L->s[p] == '_'); p++) {
        }
    }
    if (p < L->n && (L->s[p] == 'e' || L->s[p] == 'E')) {
        size_t q = p + 1;
        if (q < L->n && (L->s[q] == '+' || L->s[q] == '-'))
            q++;
        if (q < L->n && is_digit(L->s[q])) {
            is_float = true;
            for (p = q; p < L->n && is_digit(L->s[p]); p++) {
            }
        }
    }
    char buf[64];
    size_t k = 0;
    for (size_t i = L->pos; i < p; i++) {
        if (L->s[i] == '_')
            continue;
        if (k == sizeof buf - 1)
            jfail(L->c, L->line, "number literal too long");
        buf[k++] = L->s[i];
    }
    buf[k] = '\0';
    jtok *t = emit(L, is_float ? T_FLOAT : T_INT, L->line);
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        if (k > 18)
            jfail(L->c, L->line, "integer literal too large");
        t->i = strtoll(buf, NULL, 10);
    }
    advance(L, p);
}

/* The tokens of one {{ }} or {% %} tag, up to and including its end; pos is after the opener. */
static void lex_tag(lexer *L, bool block, int open_line)
{
    static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
    static const char codes2[] = {OP_FLOORDIV, OP_POW, OP_EQ, OP_NE, OP_LE, OP_GE};
    int depth = 0;   /* open brackets: an end marker inside them is not the end (a dict's "}}") */
    for (;;) {
        skip_space(L);
        if (L->pos >= L->n)
            jfail(L->c, open_line, "unclosed '%s'", block ? "{%" : "{{");
        const char *end = block ? "%}" : "}}";
        char sign = L->s[L->pos];
        if (!depth && (sign == '-' || (block && sign == '+')) && L->pos + 3 <= L->n &&
            !memcmp(L->s + L->pos + 1, end, 2)) {
            emit(L, block ? T_BEND : T_VEND, L->line);
            advance(L, L->pos + 3);
            if (sign == '-')
                skip_space(L);
            return;
        }
        if (!depth && at(L, end)) {
            emit(L, block ? T_BEND : T_VEND, L->line);
            advance(L, L->pos + 2);
            if (block && L->pos < L->n && L->s[L->pos] == '\n')   /* trim_blocks */
                advance(L, L->pos + 1);
            return;
        }
        char ch = L->s[L->pos];
        if (is_alpha(ch)) {
            size_t p = L->pos;
            while (p < L->n && (is_alpha(L->s[p]) || is_digit(L->s[p])))
                p++;
            jtok *t = emit(L, T_NAME, L->line);
            t->p = L->s + L->pos;
            t->n = p - L->pos;
            advance(L, p);
            continue;
        }
        if (is_digit(ch)) {
            lex_number(L);
            continue;
        }
        if (ch == '\'' || ch == '"') {
            lex_string(L);
            continue;
        }
        char op = 0;
        size_t len = 1;
        for (size_t k = 0; k < sizeof codes2; k++)
            if (at(L, ops2[k])) {
                op = codes2[k];
                len = 2;
            }
        if (!op && strchr("+-*/%~<>=()[]{},.:|", ch))
            op = ch;
        if (!op)
            jfail(L->c, L->line, "unexpected character '%c'", ch);
        if (op == '(' || op == '[' || op == '{')
            depth++;
        if ((op == ')' || op == ']' || op == '}') && depth > 0)
            depth--;
        jtok *t = emit(L, T_OP, L->line);
        t->op = op;
        advance(L, L->pos + len);
    }
}

/* Where the next tag ({{, {% or {#) starts at or after from, or n. */
static size_t next_tag(const char *s, size_t n, size_t from)
{
    for (size_t p = from; p + 1 < n; p++)
        if (s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#'))
            return p;
    return n;
}

/* Past blanks and word at p (and blanks after it), or 0 if word is not there. */
static size_t skip_word(const lexer *L, size_t p, const char *word)
{
    while (p < L->n && is_space(L->s[p]))
        p++;
    size_t k = strlen(word);
    if (L->n - p < k || memcmp(L->s + p, word, k) || (p + k < L->n && (is_alpha(L->s[p + k]) || is_digit(L->s[p + k]))))
        return 0;
    for (p += k; p < L->n && is_space(L->s[p]);)
        p++;
    return p;
}

/* At p: "%}", "-%}" or (allow_plus) "+%}"; its length and sign, or 0. */
static size_t block_end_at(const lexer *L, size_t p, bool allow_plus, char *sign)
{
    *sign = 0;
    if (p < L->n && (L->s[p] == '-' || (allow_plus && L->s[p] == '+')))
        *sign = L->s[p++];
    return L->n - p >= 2 && L->s[p] == '%' && L->s[p + 1] == '}' ? 2 + (*sign != 0) : 0;
}

/* pos is after a "{%" (and its sign): if the tag is {% raw %}, emit the text up to
 * {% endraw %} as it is, with the whitespace control of both tags, and true. */
static bool lex_raw(lexer *L, int open_line)
{
    char sign, end_sign;
    size_t p = skip_word(L, L->pos, "raw"), k;
    if (!p || !(k = block_end_at(L, p, false, &sign)))
        return false;
    size_t start = p + k, q = start, tag = 0, close = 0;
    for (; (q = next_tag(L->s, L->n, q)) < L->n; q += 2) {
        size_t w = q + 2 + (q + 2 < L->n && (L->s[q + 2] == '-' || L->s[q + 2] == '+'));
        size_t e = L->s[q + 1] == '%' ? skip_word(L, w, "endraw") : 0;
        if (e && (close = block_end_at(L, e, true, &end_sign))) {
            tag = q;
            close += e;
            break;
        }
    }
    if (!tag)
        jfail(L->c, open_line, "'raw' (line %d) is not closed by {%% endraw %%}", open_line);
    size_t a = start, b = tag;
    if (sign == '-')
        while (a < b && is_space(L->s[a]))
            a++;
    if (L->s[tag + 2] == '-') {
        while (b > a && is_space(L->s[b - 1]))
            b--;
    } else if (L->s[tag + 2] != '+') {   /* lstrip_blocks: blanks alone before it on its line */
        size_t l = b;
        while (l > a && (L->s[l - 1] == ' ' || L->s[l - 1] == '\t'))
            l--;
        if (l > a && L->s[l - 1] == '\n')
            b = l;
    }
    advance(L, a);
    if (b > a) {
        jtok *t = emit(L, T_TEXT, L->line);
        t->p = L->s + a;
        t->n = b - a;
    }
    advance(L, close);
    if (end_sign == '-')
        skip_space(L);
    else if (!end_sign && L->pos < L->n && L->s[L->pos] == '\n')   /* trim_blocks */
        advance(L, L->pos + 1);
    return true;
}

static void lex_all(lexer *L)
{
    bool line_starting = true;
    while (L->pos < L->n) {
        size_t start = L->pos, tag = next_tag(L->s, L->n, start), tend = tag;
        char kind = tag < L->n ? L->s[tag + 1] : 0;
        char sign = tag + 2 < L->n && (L->s[tag + 2] == '-' || (kind != '{' && L->s[tag + 2] == '+'))
                  ? L->s[tag + 2] : 0;
        if (sign == '-') {
            while (tend > start && is_space(L->s[tend - 1]))
                tend--;
        } else if (kind && kind != '{' && sign != '+') {
            /* lstrip_blocks: only blanks between the line's start and a block or comment */
            size_t l = tend;
            while (l > start && L->s[l - 1] != '\n')
                l--;
            bool blanks = l < tend;
            for (size_t p = l; p < tend; p++)
                blanks &= is_space(L->s[p]);
            if (blanks && (l > start || line_starting))
                tend = l;
        }
        if (tend > start) {
            jtok *t = emit(L, T_TEXT, L->line);
            t->p = L->s + start;
            t->n = tend - start;
        }
        advance(L, tag);
        if (!kind)
            break;
        int open_line = L->line;
        advance(L, tag + 2 + (sign != 0));
        if (kind == '#') {
            const char *e = memmem(L->s + L->pos, L->n - L->pos, "#}", 2);
            if (!e)
                jfail(L->c, open_line, "unclosed comment");
            size_t ep = (size_t)(e - L->s);
            bool minus = ep > L->pos && L->s[ep - 1] == '-';
            advance(L, ep + 2);
            if (minus)
                skip_space(L);
            else if (L->pos < L->n && L->s[L->pos] == '\n')
                advance(L, L->pos + 1);
        } else if (kind == '%' && lex_raw(L, open_line)) {
            /* {% raw %}...{% endraw %}: its text as it is */
        } else {
            emit(L, kind == '%' ? T_BBEGIN : T_VBEGIN, open_line);
            lex_tag(L, kind == '%', open_line);
        }
        line_starting = L->pos > 0 && L->s[L->pos - 1] == '\n';
    }
    emit(L, T_EOF, L->line);
}

/* ---- parser ---- */

typedef struct parser {
    jctx *c;
    jtok *t;
    size_t pos;
    int loops;       /* enclosing for loops (break/continue need one) */
} parser;

static jtok *peek(parser *P) { return &P->t[P->pos]; }
static jtok *next(parser *P) { jtok *t = &P->t[P->pos]; if (t->t != T_EOF) P->pos++; return t; }

static bool is_op(parser *P, char op)
{
    return peek(P)->t == T_OP && peek(P)->op == op;
}

static bool tok_is_name(const jtok *t, const char *name)
{
    return t->t == T_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}

static bool is_name(parser *P, const char *name)
{
    return tok_is_name(peek(P), name);
}

static const char *describe(const jtok *t)
{
    switch (t->t) {
    case T_EOF: return "the end of the template";
    case T_TEXT: return "text";
    case T_VBEGIN: return "'{{'";
    case T_VEND: return "'}}'";
    case T_BBEGIN: return "'{%'";
    case T_BEND: return "'%}'";
    case T_NAME: return "a name";
    case T_STR: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default: return "an operator";
    }
}

static _Noreturn void unexpected(parser *P, const char *wanted)
{
    jtok *t = peek(P);
    if (t->t == T_OP)
        jfail(P->c, t->line, "expected %s, found '%c'", wanted, t->op);
    if (t->t == T_NAME)
        jfail(P->c, t->line, "expected %s, found '%.*s'", wanted, (int)t->n, t->p);
    jfail(P->c, t->line, "expected %s, found %s", wanted, describe(t));
}

static void expect_op(parser *P, char op)
{
    if (!is_op(P, op)) {
        char w[8] = {'\'', op, '\'', 0};
        unexpected(P, w);
    }
    next(P);
}

static void expect_type(parser *P, int type, const char *what)
{
    if (peek(P)->t != type)
        unexpected(P, what);
    next(P);
}

static const char *expect_ident(parser *P)
{
    if (peek(P)->t != T_NAME)
        unexpected(P, "a name");
    jtok *t = next(P);
    return jstrdup(P->c, t->p, t->n);
}

static jnode *node(parser *P, int kind, int line)
{
    jnode *n = jalloc(P->c, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = line;
    return n;
}

/* A growable array of node pointers (or names) in the arena. */
typedef struct nvec { void **v; int n, cap; } nvec;

static void nvec_push(jctx *c, nvec *a, void *x)
{
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 4;
        void **v = jalloc(c, (size_t)cap * sizeof *v);
        if (a->n)
            memcpy(v, a->v, (size_t)a->n * sizeof *v);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}

static jnode *parse_expr(parser *P);
static jnode *parse_unary(parser *P, bool with_filter);

/* Arguments of a call, filter or test: (a, b, key=value, ...); the '(' is next. */
static void parse_args(parser *P, jnode *n)
{
    nvec args = {0}, kwn = {0}, kwv = {0};
    expect_op(P, '(');
    while (!is_op(P, ')')) {
        if (args.n + kwn.n)
            expect_op(P, ',');
        if (is_op(P, ')'))
            break;   /* a trailing comma */
        jtok *t = peek(P);
        if (t->t == T_NAME && P->t[P->pos + 1].t == T_OP && P->t[P->pos + 1].op == '=') {
            nvec_push(P->c, &kwn, (void *)expect_ident(P));
            next(P);
            nvec_push(P->c, &kwv, parse_expr(P));
        } else {
            if (kwn.n)
                jfail(P->c, t->line, "a positional argument after keyword arguments");
            nvec_push(P->c, &args, parse_expr(P));
        }
    }
    next(P);
    n->kids = (jnode **)args.v;
    n->n_kids = args.n;
    n->kw_names = (const char **)kwn.v;
    n->kw_vals = (jnode **)kwv.v;
    n->n_kw = kwn.n;
}

/* A node of kind over e (its a). */
static jnode *wrap(parser *P, int kind, jnode *e, int line)
{
    jnode *n = node(P, kind, line);
    n->a = e;
    return n;
}

static jnode *literal(parser *P, int line, jv v)
{
    jnode *n = node(P, N_LIT, line);
    n->lit = v;
    return n;
}

/* ( ... ): a parenthesised expression, or a tuple when it has a comma or nothing. */
static jnode *parse_paren(parser *P, int line)
{
    nvec items = {0};
    bool comma = false;
    while (!is_op(P, ')')) {
        if (items.n) {
            expect_op(P, ',');
            comma = true;
            if (is_op(P, ')'))
                break;
        }
        nvec_push(P->c, &items, parse_expr(P));
    }
    next(P);
    if (items.n == 1 && !comma)
        return items.v[0];
    jnode *n = node(P, N_TUPLE, line);
    n->kids = (jnode **)items.v;
    n->n_kids = items.n;
    return n;
}

static jnode *parse_primary(parser *P)
{
    if (peek(P)->t == T_EOF)
        unexpected(P, "an expression");
    jtok *t = next(P);
    int line = t->line;
    switch (t->t) {
    case T_NAME: {
        static const char *const names[] = {"true", "True", "false", "False", "none", "None"};
        for (int k = 0; k < 6; k++)
            if (tok_is_name(t, names[k]))
                return literal(P, line, k < 2 ? jv_bool(true) : k < 4 ? jv_bool(false) : jv_none());
        jnode *n = node(P, N_NAME, line);
        n->name = jstrdup(P->c, t->p, t->n);
        return n;
    }
    case T_STR: {
        /* adjacent literals join, as in Python */
        jbuf *b = jtmp_open(P->c, line);
        jbuf_add(P->c, b, t->p, t->n);
        while (peek(P)->t == T_STR) {
            jtok *u = next(P);
            jbuf_add(P->c, b, u->p, u->n);
        }
        return literal(P, line, jtmp_close(P->c));
    }
    case T_INT: return literal(P, line, jv_int(t->i));
    case T_FLOAT: return literal(P, line, jv_float(t->f));
    case T_OP:
        if (t->op == '(')
            return parse_paren(P, line);
        if (t->op == '[' || t->op == '{') {
            bool dict = t->op == '{';
            char close = dict ? '}' : ']';
            jnode *n = node(P, dict ? N_DICT : N_LIST, line);
            nvec items = {0};
            while (!is_op(P, close)) {
                if (items.n) {
                    expect_op(P, ',');
                    if (is_op(P, close))
                        break;
                }
                nvec_push(P->c, &items, parse_expr(P));
                if (dict) {
                    expect_op(P, ':');
                    nvec_push(P->c, &items, parse_expr(P));
                }
            }
            next(P);
            n->kids = (jnode **)items.v;
            n->n_kids = items.n;
            return n;
        }
        break;
    default: break;
    }
    P->pos--;
    unexpected(P, "an expression");
}

/* [ ... ] after a value: an index or a slice [start:stop:step]. */
static jnode *parse_subscript(parser *P, jnode *obj, int line)
{
    jnode *parts[3] = {0};
    int k = 0;
    bool slice = false;
    for (;;) {
        if (is_op(P, ':')) {
            next(P);
            slice = true;
            if (++k > 2)
                unexpected(P, "']'");
            continue;
        }
        if (is_op(P, ']'))
            break;
        if (parts[k])
            unexpected(P, "':' or ']'");
        parts[k] = parse_expr(P);
    }
    next(P);
    if (!slice && !parts[0])
        jfail(P->c, line, "empty subscript");
    jnode *n = wrap(P, slice ? N_SLICE : N_ITEM, obj, line);
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static jnode *parse_postfix(parser *P, jnode *e)
{
    for (;;) {
        int line = peek(P)->line;
        if (is_op(P, '.')) {
            next(P);
            if (peek(P)->t == T_INT) {   /* x.0 is x[0] */
                e = wrap(P, N_ITEM, e, line);
                e->b = literal(P, line, jv_int(next(P)->i));
                continue;
            }
            e = wrap(P, N_ATTR, e, line);
            e->name = expect_ident(P);
        } else if (is_op(P, '[')) {
            next(P);
            e = parse_subscript(P, e, line);
        } else if (is_op(P, '(')) {
            e = wrap(P, N_CALL, e, line);
            parse_args(P, e);
        } else {
            return e;
        }
    }
}

/* |filter(args), is [not] test [arg], and calls after them. */
static jnode *parse_filters(parser *P, jnode *e)
{
    for (;;) {
        int line = peek(P)->line;
        if (is_op(P, '|')) {
            next(P);
            e = wrap(P, N_FILTER, e, line);
            e->name = expect_ident(P);
            if (is_op(P, '('))
                parse_args(P, e);
        } else if (is_name(P, "is")) {
            next(P);
            jnode *n = node(P, N_TEST, line);
            n->a = e;
            if (is_name(P, "not")) {
                next(P);
                n->neg = true;
            }
            n->name = expect_ident(P);
            jtok *t = peek(P);
            if (is_name(P, "is"))   /* where an argument could be: `x is defined is string` */
                jfail(P->c, t->line, "tests cannot be chained with 'is' (x is a is b)");
            if (is_op(P, '(')) {
                parse_args(P, n);
            } else if ((t->t == T_NAME || t->t == T_STR || t->t == T_INT || t->t == T_FLOAT ||
                        is_op(P, '[') || is_op(P, '{')) &&
                       !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
                /* one argument without parentheses: `x is divisibleby 3` */
                n->kids = jalloc(P->c, sizeof *n->kids);
                n->kids[0] = parse_postfix(P, parse_primary(P));
                n->n_kids = 1;
            }
            e = n;
        } else if (is_op(P, '(')) {
            e = wrap(P, N_CALL, e, line);
            parse_args(P, e);
        } else {
            return e;
        }
    }
}

static jnode *parse_unary(parser *P, bool with_filter)
{
    int line = peek(P)->line;
    jdepth_enter(P->c, line);
    jnode *e;
    if (is_op(P, '-') || is_op(P, '+')) {
        e = node(P, N_UNARY, line);
        e->op = next(P)->op;
        e->a = parse_unary(P, false);
    } else {
        e = parse_primary(P);
    }
    e = parse_postfix(P, e);
    if (with_filter)
        e = parse_filters(P, e);
    jdepth_leave(P->c);
    return e;
}

static jnode *binary(parser *P, int kind, char op, jnode *a, jnode *b, int line)
{
    jnode *n = node(P, kind, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

/* The left-associative binary levels, loosest first (`not` and the comparisons sit between
 * `and` and `+`): an operator of a level is a keyword or one of its operator characters. */
static const struct level {
    uint8_t kind;
    const char *word;
    char ops[5];
} levels[] = {
    {N_OR, "or", ""}, {N_AND, "and", ""}, {N_BIN, NULL, "+-"}, {N_BIN, NULL, "~"},
    {N_BIN, NULL, {'*', '/', OP_FLOORDIV, '%', 0}}, {N_BIN, NULL, {OP_POW, 0}},
};
enum { LEVEL_OR, LEVEL_AND, LEVEL_ADD, LEVEL_POW = 5 };

static jnode *parse_level(parser *P, int k);
static jnode *parse_not(parser *P);

static jnode *operand(parser *P, int k)
{
    return k == LEVEL_AND ? parse_not(P) : k == LEVEL_POW ? parse_unary(P, true) : parse_level(P, k + 1);
}

static jnode *parse_level(parser *P, int k)
{
    jnode *e = operand(P, k);
    for (;;) {
        jtok *t = peek(P);
        bool hit = levels[k].word ? tok_is_name(t, levels[k].word) : t->t == T_OP && t->op && strchr(levels[k].ops, t->op);
        if (!hit)
            return e;
        next(P);
        e = binary(P, levels[k].kind, t->t == T_OP ? t->op : 0, e, operand(P, k), t->line);
    }
}

/* a < b < c is (a < b) and (b < c), b evaluated twice (expressions have no side effects). */
static jnode *parse_compare(parser *P)
{
    static const char cmp_ops[] = {'<', '>', OP_EQ, OP_NE, OP_LE, OP_GE, 0};
    jnode *e = parse_level(P, LEVEL_ADD), *chain = NULL, *left = e;
    for (;;) {
        jtok *t = peek(P);
        char op = 0;
        if (t->t == T_OP && strchr(cmp_ops, t->op))
            op = t->op;
        else if (tok_is_name(t, "in"))
            op = OP_IN;
        else if (tok_is_name(t, "not") && tok_is_name(&P->t[P->pos + 1], "in"))
            op = OP_NOTIN;
        if (!op)
            break;
        next(P);
        if (op == OP_NOTIN)
            next(P);
        jnode *right = parse_level(P, LEVEL_ADD);
        jnode *cmp = binary(P, N_CMP, op, left, right, t->line);
        chain = chain ? binary(P, N_AND, 0, chain, cmp, t->line) : cmp;
        left = right;
    }
    return chain ? chain : e;
}

static jnode *parse_not(parser *P)
{
    if (is_name(P, "not")) {
        int line = next(P)->line;
        jdepth_enter(P->c, line);
        jnode *n = node(P, N_UNARY, line);
        n->op = '!';
        n->a = parse_not(P);
        jdepth_leave(P->c);
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_expr(parser *P)
{
    jdepth_enter(P->c, peek(P)->line);
    jnode *e = parse_level(P, LEVEL_OR);
    while (is_name(P, "if")) {
        int line = next(P)->line;
        jnode *n = node(P, N_COND, line);
        n->a = e;
        n->b = parse_level(P, LEVEL_OR);
        if (is_name(P, "else")) {
            next(P);
            n->c = parse_expr(P);
        }
        e = n;
    }
    jdepth_leave(P->c);
    return e;
}

/* An expression, or a tuple of them without parentheses (`set a = 1, 2`). */
static jnode *parse_tuple(parser *P)
{
    int line = peek(P)->line;
    jnode *e = parse_expr(P);
    if (!is_op(P, ','))
        return e;
    nvec items = {0};
    nvec_push(P->c, &items, e);
    while (is_op(P, ',')) {
        next(P);
        nvec_push(P->c, &items, parse_expr(P));
    }
    jnode *n = node(P, N_TUPLE, line);
    n->kids = (jnode **)items.v;
    n->n_kids = items.n;
    return n;
}

/* ---- statements ---- */

static jnode *parse_body(parser *P, const char *const *ends, const char *in, int in_line);

/* The names of `for a, b in` or `set a, b =`. */
static void parse_targets(parser *P, jnode *n)
{
    nvec names = {0};
    do {
        if (names.n)
            next(P);
        nvec_push(P->c, &names, (void *)expect_ident(P));
    } while (is_op(P, ','));
    n->targets = (const char **)names.v;
    n->n_targets = names.n;
}

/* The end tag's name has been seen: consume it and the '%}'. */
static void end_tag(parser *P)
{
    next(P);
    expect_type(P, T_BEND, "'%}'");
}

/* The '%}' of a block's opening tag, its statements, and its {% END %}. */
static jnode *body_until(parser *P, const char *end, const char *in, int line)
{
    const char *const ends[] = {end, NULL};
    expect_type(P, T_BEND, "'%}'");
    jnode *body = parse_body(P, ends, in, line);
    end_tag(P);
    return body;
}

/* After a body: {% else %}, its statements and the {% END %}; or the {% END %} alone (NULL). */
static jnode *else_or_end(parser *P, const char *end, const char *in, int line)
{
    if (!is_name(P, "else")) {
        end_tag(P);
        return NULL;
    }
    next(P);
    return body_until(P, end, in, line);
}

static jnode *parse_if(parser *P, int line)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *n = node(P, N_IF, line);
    n->a = parse_level(P, LEVEL_OR);   /* jinja2 takes no `x if c else y` here */
    expect_type(P, T_BEND, "'%}'");
    n->b = parse_body(P, ends, "if", line);
    if (is_name(P, "elif")) {
        int l = next(P)->line;
        n->c = parse_if(P, l);
        return n;
    }
    n->c = else_or_end(P, "endif", "if", line);
    return n;
}

static jnode *parse_for(parser *P, int line)
{
    static const char *const ends[] = {"else", "endfor", NULL};
    jnode *n = node(P, N_FOR, line);
    parse_targets(P, n);
    if (!is_name(P, "in"))
        unexpected(P, "'in'");
    next(P);
    n->a = parse_level(P, LEVEL_OR);
    if (is_name(P, "if")) {
        next(P);
        n->d = parse_expr(P);
    }
    if (is_name(P, "recursive"))
        jfail(P->c, line, "recursive loops are not supported");
    expect_type(P, T_BEND, "'%}'");
    P->loops++;
    n->b = parse_body(P, ends, "for", line);
    P->loops--;
    n->c = else_or_end(P, "endfor", "for", line);
    return n;
}

static jnode *parse_set(parser *P, int line)
{
    jnode *n = node(P, N_SET, line);
    if (peek(P)->t == T_NAME && P->t[P->pos + 1].t == T_OP && P->t[P->pos + 1].op == '.') {
        n->name = expect_ident(P);
        next(P);
        n->attr = expect_ident(P);
    } else {
        parse_targets(P, n);
    }
    if (is_op(P, '=')) {
        next(P);
        n->a = parse_tuple(P);
        expect_type(P, T_BEND, "'%}'");
        return n;
    }
    if (n->n_targets > 1 || n->attr)
        unexpected(P, "'='");
    /* {% set x %}...{% endset %}: the body's text */
    n->b = body_until(P, "endset", "set", line);
    return n;
}

static jnode *parse_macro(parser *P, int line)
{
    static const char *const endmacro[] = {"endmacro", NULL};
    jnode *n = node(P, N_MACRO, line);
    n->name = expect_ident(P);
    nvec params = {0}, defaults = {0};
    expect_op(P, '(');
    while (!is_op(P, ')')) {
        if (params.n)
            expect_op(P, ',');
        nvec_push(P->c, &params, (void *)expect_ident(P));
        jnode *d = NULL;
        if (is_op(P, '=')) {
            next(P);
            d = parse_expr(P);
        }
        nvec_push(P->c, &defaults, d);
    }
    next(P);
    expect_type(P, T_BEND, "'%}'");
    n->targets = (const char **)params.v;
    n->n_targets = params.n;
    n->kids = (jnode **)defaults.v;
    n->n_kids = defaults.n;
    int loops = P->loops;
    P->loops = 0;
    n->b = parse_body(P, endmacro, "macro", line);
    P->loops = loops;
    next(P);
    if (peek(P)->t == T_NAME)   /* {% endmacro name %} */
        next(P);
    expect_type(P, T_BEND, "'%}'");
    return n;
}

/* One {% statement %}; the '{%' has been consumed and its name is next. */
static jnode *parse_statement(parser *P)
{
    jtok *t = peek(P);
    int line = t->line;
    if (t->t != T_NAME)
        unexpected(P, "a statement");
    next(P);
    if (tok_is_name(t, "if"))
        return parse_if(P, line);
    if (tok_is_name(t, "for"))
        return parse_for(P, line);
    if (tok_is_name(t, "set"))
        return parse_set(P, line);
    if (tok_is_name(t, "macro"))
        return parse_macro(P, line);
    if (tok_is_name(t, "break") || tok_is_name(t, "continue")) {
        if (!P->loops)
            jfail(P->c, line, "'%.*s' outside a loop", (int)t->n, t->p);
        expect_type(P, T_BEND, "'%}'");
        return node(P, tok_is_name(t, "break") ? N_BREAK : N_CONTINUE, line);
    }
    if (tok_is_name(t, "filter")) {
        jnode *n = node(P, N_FILTERBLOCK, line);
        n->name = expect_ident(P);
        if (is_op(P, '('))
            parse_args(P, n);
        n->b = body_until(P, "endfilter", "filter", line);
        return n;
    }
    if (tok_is_name(t, "generation")) {
        /* transformers' assistant-mask tag: with the mask off its body renders as it is */
        return body_until(P, "endgeneration", "generation", line);
    }
    jfail(P->c, line, "unknown or unsupported statement '%.*s'", (int)t->n, t->p);
}

/* Statements up to a {% END %} whose name is in ends (left next, after its '{%'), or to the
 * end of the template when ends is NULL. in: the statement being parsed and its line, for
 * errors. */
static jnode *parse_body(parser *P, const char *const *ends, const char *in, int in_line)
{
    int line = peek(P)->line;
    jdepth_enter(P->c, line);
    jnode *body = node(P, N_BODY, line);
    nvec kids = {0};
    for (;;) {
        jtok *t = peek(P);
        if (t->t == T_EOF) {
            if (ends)
                jfail(P->c, t->line, "unexpected end of template: '%s' (line %d) is not closed", in, in_line);
            break;
        }
        next(P);
        if (t->t == T_TEXT) {
            jnode *n = node(P, N_TEXT, t->line);
            n->lit = jv_str(t->p, t->n);
            nvec_push(P->c, &kids, n);
        } else if (t->t == T_VBEGIN) {
            jnode *n = node(P, N_OUT, t->line);
            n->a = parse_tuple(P);
            expect_type(P, T_VEND, "'}}'");
            nvec_push(P->c, &kids, n);
        } else if (t->t == T_BBEGIN) {
            bool end = false;
            for (int k = 0; ends && ends[k]; k++)
                end |= is_name(P, ends[k]);
            if (end)
                break;
            jtok *u = peek(P);
            if (u->t == T_NAME && u->n > 3 && (!memcmp(u->p, "end", 3) || tok_is_name(u, "elif") || tok_is_name(u, "else")))
                jfail(P->c, u->line, "unexpected '%.*s'%s%s", (int)u->n, u->p, in ? " in " : "", in ? in : "");
            nvec_push(P->c, &kids, parse_statement(P));
        } else {
            P->pos--;
            unexpected(P, "text or a tag");
        }
    }
    body->kids = (jnode **)kids.v;
    body->n_kids = kids.n;
    jdepth_leave(P->c);
    return body;
}

jnode *jparse(jctx *c, const char *src, size_t len)
{
    /* Newlines as jinja2 sees them: \r\n and \r become \n, and one final newline is dropped
     * (keep_trailing_newline is off). */
    char *s = jalloc(c, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n')
        n--;
    lexer L = {.c = c, .s = s, .n = n, .line = 1};
    lex_all(&L);
    parser P = {.c = c, .t = L.t};
    return parse_body(&P, NULL, NULL, 0);
}
