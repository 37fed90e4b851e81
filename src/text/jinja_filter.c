/* jinja_filter.c — the library a template calls: jinja2's built-in filters and tests that chat
 * templates use, the globals Hugging Face adds (raise_exception, strftime_now) and jinja2's own
 * (namespace, range, dict), and the methods of Python's str, dict and list that templates call.
 * Methods that would change a list or dict are refused, as jinja2's immutable sandbox (the one
 * transformers renders in) refuses them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

/* Positional and keyword arguments as given. */
typedef struct fargs {
    jv *args;
    int n;
    const char **kw_names;
    jv *kw_vals;
    int n_kw;
} fargs;

/* Argument pos (0-based, after the value filtered) or the keyword name, else def. */
static jv arg(const fargs *a, int pos, const char *name, jv def)
{
    if (pos >= 0 && pos < a->n)
        return a->args[pos];
    for (int i = 0; name && i < a->n_kw; i++)
        if (!strcmp(a->kw_names[i], name))
            return a->kw_vals[i];
    return def;
}

static jv want_str(jrender *r, const jnode *at, jv v, const char *what)
{
    if (v.t != JV_STR)
        jfail(r->c, at->line, "%s: expected a string, got %s", what, jv_typename(v));
    return v;
}

static int64_t want_int(jrender *r, const jnode *at, jv v, const char *what)
{
    if (v.t == JV_INT)
        return v.u.i;
    if (v.t == JV_BOOL)
        return v.u.b;
    jfail(r->c, at->line, "%s: expected an integer, got %s", what, jv_typename(v));
}

/* ---- strings ---- */

/* The code point at p (n bytes left) and its length in *len; a stray byte is itself. */
static uint32_t decode(const char *p, size_t n, size_t *len)
{
    unsigned char b = (unsigned char)p[0];
    size_t k = utf8_len(b);
    if (k == 1 || k > n) {
        *len = 1;
        return b;
    }
    uint32_t cp = b & (0xFF >> (k + 1));
    for (size_t i = 1; i < k; i++)
        cp = cp << 6 | ((unsigned char)p[i] & 0x3F);
    *len = k;
    return cp;
}

/* Python's str.isspace() for one code point. */
static bool py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Whether the code point at s[i] is in the set (a string of code points) or, set NULL,
 * whitespace; *len its length. */
static bool strip_member(jv s, size_t i, const jv *set, size_t *len)
{
    uint32_t cp = decode(s.u.s.p + i, s.u.s.n - i, len);
    if (!set)
        return py_space(cp);
    for (size_t k = 0, l; k < set->u.s.n; k += l)
        if (decode(set->u.s.p + k, set->u.s.n - k, &l) == cp)
            return true;
    return false;
}

/* str.strip / lstrip / rstrip (which: 'b', 'l', 'r') of chars, or of whitespace. */
static jv strip(jv s, jv chars, char which)
{
    const jv *set = chars.t == JV_STR ? &chars : NULL;
    size_t a = 0, b = s.u.s.n, len;
    if (which != 'r')
        while (a < b && strip_member(s, a, set, &len))
            a += len;
    if (which != 'l')
        while (b > a) {
            size_t p = b - 1;
            while (p > a && ((unsigned char)s.u.s.p[p] & 0xC0) == 0x80)
                p--;
            if (!strip_member(s, p, set, &len) || p + len != b)
                break;
            b = p;
        }
    return jv_sub(s, a, b - a);
}

static bool find_at(jv s, size_t i, jv sub)
{
    return s.u.s.n - i >= sub.u.s.n && !memcmp(s.u.s.p + i, sub.u.s.p, sub.u.s.n);
}

/* str.split(sep, maxsplit): sep None splits at runs of whitespace and drops empty parts. */
static jv split(jrender *r, const jnode *at, jv s, jv sep, int64_t maxsplit)
{
    jv out = jv_newlist(r->c);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0, len;
    if (sep.t == JV_STR) {
        if (!sep.u.s.n)
            jfail(r->c, at->line, "empty separator");
        size_t start = 0;
        while (i + sep.u.s.n <= n && maxsplit != 0) {
            if (find_at(s, i, sep)) {
                jlist_push(r->c, out.u.l, jv_sub(s, start, i - start));
                i += sep.u.s.n;
                start = i;
                maxsplit--;
            } else {
                i++;
            }
        }
        jlist_push(r->c, out.u.l, jv_sub(s, start, n - start));
        return out;
    }
    for (;;) {
        while (i < n && py_space(decode(p + i, n - i, &len)))
            i += len;
        if (i >= n)
            break;
        size_t start = i;
        if (maxsplit == 0) {
            jv rest = strip(jv_sub(s, start, n - start), jv_none(), 'r');
            jlist_push(r->c, out.u.l, rest);
            break;
        }
        while (i < n && !py_space(decode(p + i, n - i, &len)))
            i += len;
        jlist_push(r->c, out.u.l, jv_sub(s, start, i - start));
        maxsplit--;
    }
    return out;
}

/* str.rsplit(sep, maxsplit): from the right; without maxsplit, split's parts. */
static jv rsplit(jrender *r, const jnode *at, jv s, jv sep, int64_t maxsplit)
{
    if (maxsplit < 0)
        return split(r, at, s, sep, -1);
    if (sep.t != JV_STR)
        jfail(r->c, at->line, "rsplit: maxsplit needs a separator here");
    if (!sep.u.s.n)
        jfail(r->c, at->line, "empty separator");
    jlist *rev = jalloc(r->c, sizeof *rev);
    size_t end = s.u.s.n, i = s.u.s.n;
    while (maxsplit != 0 && i >= sep.u.s.n) {
        if (find_at(s, i - sep.u.s.n, sep)) {
            jlist_push(r->c, rev, jv_sub(s, i, end - i));
            i -= sep.u.s.n;
            end = i;
            maxsplit--;
        } else {
            i--;
        }
    }
    jlist_push(r->c, rev, jv_sub(s, 0, end));
    jv out = jv_newlist(r->c);
    for (size_t k = rev->n; k-- > 0;)
        jlist_push(r->c, out.u.l, rev->v[k]);
    return out;
}

static jv replace(jrender *r, const jnode *at, jv s, jv old, jv new, int64_t count)
{
    jbuf *b = jtmp_open(r->c, at->line);
    size_t i = 0;
    for (; i <= s.u.s.n && count != 0;) {
        if (!old.u.s.n) {   /* Python puts new between every character */
            jbuf_add_str(r->c, b, new);
            count--;
            if (i == s.u.s.n)
                break;
            size_t k = utf8_len((unsigned char)s.u.s.p[i]);
            jbuf_add_str(r->c, b, jv_sub(s, i, k));
            i += k;
            continue;
        }
        if (i + old.u.s.n > s.u.s.n)
            break;
        if (find_at(s, i, old)) {
            jbuf_add_str(r->c, b, new);
            i += old.u.s.n;
            count--;
        } else {
            jbuf_add_str(r->c, b, jv_sub(s, i, 1));
            i++;
        }
    }
    if (i < s.u.s.n)
        jbuf_add_str(r->c, b, jv_sub(s, i, s.u.s.n - i));
    return jtmp_close(r->c);
}

/* Case mapping of the scripts whose two forms have the same UTF-8 length: ASCII, Latin-1,
 * Latin Extended-A, Greek, Cyrillic (others, and ß's "SS", stay as they are). */
static uint32_t cp_upper(uint32_t c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) ||
        (c >= 0x430 && c <= 0x44F))
        return c - 32;
    if (c >= 0x450 && c <= 0x45F)
        return c - 80;
    if (c == 0x3C2)
        return 0x3A3;
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    bool even_upper = (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
    if ((odd_upper && c % 2 == 0) || (even_upper && c % 2 == 1))
        return c - 1;
    return c;
}

static uint32_t cp_lower(uint32_t c)
{
    if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) ||
        (c >= 0x410 && c <= 0x42F))
        return c + 32;
    if (c >= 0x400 && c <= 0x40F)
        return c + 80;
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    bool even_upper = (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
    if ((odd_upper && c % 2 == 1) || (even_upper && c % 2 == 0))
        return c + 1;
    return c;
}

static bool cp_cased(uint32_t c)
{
    return cp_upper(c) != c || cp_lower(c) != c || c == 0x3A3;
}

/* str.isdigit / isalpha / isalnum / isspace ('d', 'a', 'n', 's'): not empty, and every
 * character so (ASCII digits; letters: ASCII and the cased scripts above). */
static bool char_class(jv s, char cls)
{
    for (size_t i = 0, len; i < s.u.s.n; i += len) {
        uint32_t c = decode(s.u.s.p + i, s.u.s.n - i, &len);
        bool digit = c >= '0' && c <= '9', alpha = (c < 0x80 ? (c | 32) >= 'a' && (c | 32) <= 'z' : cp_cased(c));
        if (!(cls == 'd' ? digit : cls == 'a' ? alpha : cls == 'n' ? digit || alpha : py_space(c)))
            return false;
    }
    return s.u.s.n > 0;
}

/* jinja2's wordcount: the runs of word characters (letters, digits, _). */
static int64_t word_count(jv s)
{
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0, len; i < s.u.s.n; i += len) {
        uint32_t c = decode(s.u.s.p + i, s.u.s.n - i, &len);
        bool w = c == '_' || (c >= '0' && c <= '9') || (c < 0x80 ? (c | 32) >= 'a' && (c | 32) <= 'z' : c >= 0xC0);
        n += w && !in_word;
        in_word = w;
    }
    return n;
}

/* Case changes: 'u' upper, 'l' lower, 'c' capitalize (Python's: the first character upper, the
 * rest lower), 't' Python's str.title() (upper after a character that has no case, lower
 * after one that has), 'T' jinja2's title filter (upper at the start and after - ( { [ < or
 * whitespace, lower elsewhere). */
static jv change_case(jrender *r, jv s, char how)
{
    char *p = jstrdup(r->c, s.u.s.p, s.u.s.n);
    bool prev_cased = false, word_start = true;
    for (size_t i = 0, len; i < s.u.s.n; i += len) {
        uint32_t c = decode(p + i, s.u.s.n - i, &len);
        bool up = how == 'u' || (how == 'c' && i == 0) || (how == 't' && !prev_cased) || (how == 'T' && word_start);
        uint32_t m = up ? cp_upper(c) : cp_lower(c);
        if (m < 0x80 && len == 1)
            p[i] = (char)m;
        else if (m != c && m < 0x800 && len == 2) {
            p[i] = (char)(0xC0 | m >> 6);
            p[i + 1] = (char)(0x80 | (m & 0x3F));
        }
        prev_cased = cp_cased(c);
        word_start = py_space(c) || (c < 0x80 && c && strchr("-({[<", (int)c));
    }
    jv out = jv_str(p, s.u.s.n);
    out.u.s.m = s.u.s.m;   /* every character keeps its length */
    return out;
}

/* str.isupper() / str.islower(): some cased character, and every one in that case. */
static bool case_is(jv s, bool upper)
{
    bool any = false;
    for (size_t i = 0, len; i < s.u.s.n; i += len) {
        uint32_t c = decode(s.u.s.p + i, s.u.s.n - i, &len);
        if (!cp_cased(c))
            continue;
        any = true;
        if ((upper ? cp_upper(c) : cp_lower(c)) != c)
            return false;
    }
    return any;
}

/* Python's str.splitlines() line breaks: its length at p, or 0. */
static size_t line_break(const char *p, size_t n)
{
    if (p[0] == '\r')
        return n > 1 && p[1] == '\n' ? 2 : 1;
    if (p[0] == '\n' || p[0] == '\v' || p[0] == '\f' || (p[0] >= 0x1C && p[0] <= 0x1E))
        return 1;
    size_t len;
    uint32_t cp = decode(p, n, &len);
    return cp == 0x85 || cp == 0x2028 || cp == 0x2029 ? len : 0;
}

static jv spaces(jrender *r, const jnode *at, int64_t n)
{
    if (n < 0 || n > 4096)
        jfail(r->c, at->line, "indent: width %lld out of range", (long long)n);
    char *p = jalloc(r->c, (size_t)n + 1);
    memset(p, ' ', (size_t)n);
    return jv_str(p, (size_t)n);
}

/* jinja2's indent(width, first, blank): it appends a newline, splits the lines as Python's
 * splitlines() does, and joins them with "\n" plus the indentation (not before empty lines
 * unless blank; before the first line only with first). */
static jv indent(jrender *r, const jnode *at, jv s, jv width, bool first, bool blank)
{
    jv ind = width.t == JV_STR ? width : spaces(r, at, want_int(r, at, width, "indent"));
    jbuf *b = jtmp_open(r->c, at->line);
    if (first)
        jbuf_add_str(r->c, b, ind);
    bool ends_cr = s.u.s.n && s.u.s.p[s.u.s.n - 1] == '\r';   /* "\r" + the added "\n" is one break */
    size_t i = 0, start = 0;
    for (int line = 0;; line++) {
        size_t br = 0;
        while (i < s.u.s.n && !(br = line_break(s.u.s.p + i, s.u.s.n - i))) {
            size_t k = utf8_len((unsigned char)s.u.s.p[i]);
            i += k < s.u.s.n - i ? k : s.u.s.n - i;
        }
        if (line > 0) {
            jbuf_add(r->c, b, "\n", 1);
            if (blank || i > start)
                jbuf_add_str(r->c, b, ind);
        }
        jbuf_add_str(r->c, b, jv_sub(s, start, i - start));
        if (i >= s.u.s.n)
            break;
        i += br;
        start = i;
        if (i >= s.u.s.n && ends_cr)
            break;
    }
    return jtmp_close(r->c);
}

/* ---- filters ---- */

/* tojson(indent=None, separators=None, sort_keys=False, ensure_ascii=False): Hugging Face's,
 * which keeps non-ASCII text as it is unless asked. */
static jv tojson(jrender *r, const jnode *at, jv v, const fargs *a)
{
    jv ind = arg(a, 0, "indent", jv_none());
    jjson_opts o = {.indent = ind.t == JV_NONE ? -1 : (int)want_int(r, at, ind, "tojson indent")};
    if (o.indent > 64)
        jfail(r->c, at->line, "tojson: indent %d out of range", o.indent);
    o.indent = o.indent < -1 ? 0 : o.indent;
    o.item_sep = o.indent >= 0 ? "," : ", ";
    o.key_sep = ": ";
    jv seps = arg(a, -1, "separators", jv_none());
    if (seps.t == JV_LIST) {
        if (seps.u.l->n != 2 || seps.u.l->v[0].t != JV_STR || seps.u.l->v[1].t != JV_STR)
            jfail(r->c, at->line, "tojson: separators must be two strings");
        o.item_sep = jstrdup(r->c, seps.u.l->v[0].u.s.p, seps.u.l->v[0].u.s.n);
        o.key_sep = jstrdup(r->c, seps.u.l->v[1].u.s.p, seps.u.l->v[1].u.s.n);
    }
    o.sort_keys = jv_truthy(arg(a, -1, "sort_keys", jv_bool(false)));
    o.ascii = jv_truthy(arg(a, -1, "ensure_ascii", jv_bool(false)));
    jbuf *b = jtmp_open(r->c, at->line);
    jv_json_to(r->c, at->line, b, v, &o, 0);
    return jtmp_close(r->c);
}

static jv join(jrender *r, const jnode *at, jv v, const fargs *a)
{
    jv sep = jv_to_str(r->c, arg(a, 0, "d", jv_cstr("")));
    jv attr = arg(a, 1, "attribute", jv_none());
    jlist *l = jv_iter(r->c, at->line, v);
    jbuf *b = jtmp_open(r->c, at->line);
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            jbuf_add(r->c, b, sep.u.s.p, sep.u.s.n);
        jv item = attr.t == JV_NONE ? l->v[i] : jgetitem(r, at->line, l->v[i], attr);
        jv_str_to(r->c, b, item);
    }
    return jtmp_close(r->c);
}

/* An item's attribute for selectattr/map/sort: "a.b" follows the dots, as jinja2 does. */
static jv attr_of(jrender *r, const jnode *at, jv item, jv attr)
{
    if (attr.t != JV_STR)
        return jgetitem(r, at->line, item, attr);
    const char *p = attr.u.s.p, *end = p + attr.u.s.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        const char *stop = dot ? dot : end;
        jv key = jv_str(p, (size_t)(stop - p));
        bool digits = stop > p;
        for (const char *q = p; q < stop; q++)
            digits &= *q >= '0' && *q <= '9';
        if (digits && stop - p < 18)
            key = jv_int(strtoll(jstrdup(r->c, p, (size_t)(stop - p)), NULL, 10));
        if (item.t == JV_UNDEF)
            return item;
        item = jgetitem(r, at->line, item, key);
        if (!dot)
            break;
        p = dot + 1;
    }
    return item;
}

/* select / reject / selectattr / rejectattr: keep the items (or their attribute) that pass the
 * test named by the next argument (truth when none). */
static jv select_items(jrender *r, const jnode *at, jv v, const fargs *a, bool by_attr, bool keep)
{
    int first = by_attr ? 1 : 0;
    jv attr = by_attr ? arg(a, 0, NULL, jv_undef(NULL)) : jv_undef(NULL);
    if (by_attr && attr.t == JV_UNDEF)
        jfail(r->c, at->line, "%s: missing the attribute", at->name);
    jv test = arg(a, first, NULL, jv_undef(NULL));
    if (test.t != JV_UNDEF)
        want_str(r, at, test, at->name);
    jlist *l = jv_iter(r->c, at->line, v);
    jv out = jv_newlist(r->c);
    out.u.l->gen = true;
    int n_rest = a->n - first - 1 > 0 ? a->n - first - 1 : 0;
    for (size_t i = 0; i < l->n; i++) {
        jv x = by_attr ? attr_of(r, at, l->v[i], attr) : l->v[i];
        bool pass;
        if (test.t == JV_UNDEF) {
            pass = jv_truthy(x);
        } else {
            const char *name = jstrdup(r->c, test.u.s.p, test.u.s.n);
            pass = jtest(r, at, name, x, a->args + first + 1, n_rest);
        }
        if (pass == keep)
            jlist_push(r->c, out.u.l, l->v[i]);
    }
    return out;
}

static jv map_items(jrender *r, const jnode *at, jv v, const fargs *a)
{
    jlist *l = jv_iter(r->c, at->line, v);
    jv out = jv_newlist(r->c);
    out.u.l->gen = true;
    jv attr = arg(a, -1, "attribute", jv_undef(NULL));
    jv def = arg(a, -1, "default", jv_undef(NULL));
    jv filter = arg(a, 0, NULL, jv_undef(NULL));
    if (attr.t == JV_UNDEF)
        want_str(r, at, filter, "map");
    for (size_t i = 0; i < l->n; i++) {
        jv x;
        if (attr.t != JV_UNDEF) {
            x = attr_of(r, at, l->v[i], attr);
            if (x.t == JV_UNDEF && def.t != JV_UNDEF)
                x = def;
        } else {
            const char *name = jstrdup(r->c, filter.u.s.p, filter.u.s.n);
            x = jfilter(r, at, name, l->v[i], a->args + 1, a->n - 1, NULL, NULL, 0);
        }
        jlist_push(r->c, out.u.l, x);
    }
    return out;
}

/* A copy of the items in order (sort, dictsort, unique, reverse work on it). */
static jlist *copy_items(jrender *r, const jnode *at, jv v)
{
    jlist *src = jv_iter(r->c, at->line, v), *l = jalloc(r->c, sizeof *l);
    for (size_t i = 0; i < src->n; i++)
        jlist_push(r->c, l, src->v[i]);
    return l;
}

/* Case-insensitive (ASCII) when asked, as jinja2's sort and dictsort are by default. */
static int sort_cmp(jrender *r, const jnode *at, jv x, jv y, bool cased)
{
    if (!cased && x.t == JV_STR && y.t == JV_STR) {
        x = change_case(r, x, 'l');
        y = change_case(r, y, 'l');
    }
    return jv_compare(r->c, at->line, x, y);
}

/* A stable insertion sort of l by key (the items, or their attribute / dict position). */
static void sort_list(jrender *r, const jnode *at, jlist *l, jv attr, bool cased, bool reverse)
{
    for (size_t i = 1; i < l->n; i++)
        for (size_t j = i; j > 0; j--) {
            jv x = l->v[j - 1], y = l->v[j];
            if (attr.t != JV_UNDEF) {
                x = attr_of(r, at, x, attr);
                y = attr_of(r, at, y, attr);
            }
            int c = sort_cmp(r, at, x, y, cased);
            if (reverse ? c >= 0 : c <= 0)
                break;
            jv t = l->v[j];
            l->v[j] = l->v[j - 1];
            l->v[j - 1] = t;
            if (--r->c->steps < 0)
                jfail(r->c, at->line, "the template runs too long");
        }
}

static jv items_of(jrender *r, const jnode *at, jv v)
{
    jv out = jv_newlist(r->c);
    if (v.t == JV_UNDEF)
        return out;
    if (v.t != JV_DICT || v.u.d->ns)
        jfail(r->c, at->line, "can only get item pairs from a mapping, not %s", jv_typename(v));
    for (size_t i = 0; i < v.u.d->n; i++) {
        jv pair = jv_newlist(r->c);
        pair.u.l->tuple = true;
        jlist_push(r->c, pair.u.l, v.u.d->k[i]);
        jlist_push(r->c, pair.u.l, v.u.d->v[i]);
        jlist_push(r->c, out.u.l, pair);
    }
    return out;
}

static jv to_number(jrender *r, const jnode *at, jv v, jv def, bool want_float)
{
    if (v.t == JV_INT || v.t == JV_BOOL)
        return want_float ? jv_float((double)(v.t == JV_INT ? v.u.i : v.u.b)) : jv_int(v.t == JV_INT ? v.u.i : v.u.b);
    if (v.t == JV_FLOAT)
        return want_float ? v : jv_int((int64_t)v.u.f);
    if (v.t == JV_STR) {
        char *s = jstrdup(r->c, v.u.s.p, v.u.s.n), *end;
        double d = strtod(s, &end);
        while (*end == ' ' || *end == '\t' || *end == '\n')
            end++;
        if (end != s && !*end)
            return want_float ? jv_float(d) : jv_int((int64_t)d);
    }
    return def;
}

/* round(precision, method): 'common' is Python's round() (halves to even, on the exact binary
 * value, which printf's rounding also follows), 'floor' and 'ceil' as math's; an int stays one. */
static jv round_number(jrender *r, const jnode *at, jv v, const fargs *a)
{
    if (v.t == JV_INT || v.t == JV_BOOL)
        return jv_int(v.t == JV_INT ? v.u.i : v.u.b);
    if (v.t != JV_FLOAT)
        jfail(r->c, at->line, "type %s doesn't define __round__ method", jv_typename(v));
    int64_t prec = want_int(r, at, arg(a, 0, "precision", jv_int(0)), "round");
    jv method = want_str(r, at, arg(a, 1, "method", jv_cstr("common")), "round");
    if (prec < 0 || prec > 17)
        jfail(r->c, at->line, "round: precision %lld out of range", (long long)prec);
    double scale = pow(10.0, (double)prec);
    if (method.u.s.n == 5 && !memcmp(method.u.s.p, "floor", 5))
        return jv_float(floor(v.u.f * scale) / scale);
    if (method.u.s.n == 4 && !memcmp(method.u.s.p, "ceil", 4))
        return jv_float(ceil(v.u.f * scale) / scale);
    if (method.u.s.n != 6 || memcmp(method.u.s.p, "common", 6))
        jfail(r->c, at->line, "round: method must be 'common', 'ceil' or 'floor'");
    char buf[400];
    snprintf(buf, sizeof buf, "%.*f", (int)prec, v.u.f);
    return jv_float(strtod(buf, NULL));
}

static jv first_or_last(jrender *r, const jnode *at, jv v, bool last)
{
    jlist *l = jv_iter(r->c, at->line, v);
    if (!l->n)
        return jv_undef("No first item, sequence was empty.");
    return l->v[last ? l->n - 1 : 0];
}

static jv html_escape(jrender *r, const jnode *at, jv v)
{
    jv s = jv_to_str(r->c, v);
    jbuf *b = jtmp_open(r->c, at->line);
    for (size_t i = 0; i < s.u.s.n; i++) {
        char ch = s.u.s.p[i];
        const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;"
                      : ch == '\'' ? "&#39;" : NULL;
        jbuf_add_flag(r->c, b, e ? e : &ch, e ? strlen(e) : 1, s.u.s.m && s.u.s.m[i]);
    }
    return jtmp_close(r->c);
}

static jv min_max(jrender *r, const jnode *at, jv v, const fargs *a, bool max)
{
    jlist *l = jv_iter(r->c, at->line, v);
    if (!l->n)
        return jv_undef("No aggregated item, sequence was empty.");
    bool cased = jv_truthy(arg(a, 0, "case_sensitive", jv_bool(false)));
    jv attr = arg(a, 1, "attribute", jv_undef(NULL));
    jv best = l->v[0];
    for (size_t i = 1; i < l->n; i++) {
        jv x = attr.t != JV_UNDEF ? attr_of(r, at, l->v[i], attr) : l->v[i];
        jv y = attr.t != JV_UNDEF ? attr_of(r, at, best, attr) : best;
        int c = sort_cmp(r, at, x, y, cased);
        if (max ? c > 0 : c < 0)
            best = l->v[i];
    }
    return best;
}

jv jfilter(jrender *r, const jnode *at, const char *name, jv v, jv *args, int n_args,
           const char **kw_names, jv *kw_vals, int n_kw)
{
    fargs a = {args, n_args, kw_names, kw_vals, n_kw};
    if (!strcmp(name, "tojson"))
        return tojson(r, at, v, &a);
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        int64_t n = jv_length(v);
        if (n < 0)
            jfail(r->c, at->line, "object of type '%s' has no len()", jv_typename(v));
        return jv_int(n);
    }
    if (!strcmp(name, "string"))
        return jv_to_str(r->c, v);
    if (!strcmp(name, "safe"))   /* jinja2's Markup: a string */
        return jv_to_str(r->c, v);
    if (!strcmp(name, "trim"))
        return strip(jv_to_str(r->c, v), arg(&a, 0, "chars", jv_none()), 'b');
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") || !strcmp(name, "title"))
        return change_case(r, jv_to_str(r->c, v), name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 'c' ? 'c' : 'T');
    if (!strcmp(name, "replace")) {
        jv old = jv_to_str(r->c, arg(&a, 0, "old", jv_cstr(""))), new = jv_to_str(r->c, arg(&a, 1, "new", jv_cstr("")));
        jv count = arg(&a, 2, "count", jv_none());
        return replace(r, at, jv_to_str(r->c, v), old, new, count.t == JV_NONE ? -1 : want_int(r, at, count, "replace"));
    }
    if (!strcmp(name, "items")) {
        jv out = items_of(r, at, v);
        out.u.l->gen = true;
        return out;
    }
    if (!strcmp(name, "list")) {
        jv out = {.t = JV_LIST};
        out.u.l = copy_items(r, at, v);
        return out;
    }
    if (!strcmp(name, "join"))
        return join(r, at, v, &a);
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_items(r, at, v, &a, true, name[0] == 's');
    if (!strcmp(name, "select") || !strcmp(name, "reject"))
        return select_items(r, at, v, &a, false, name[0] == 's');
    if (!strcmp(name, "map"))
        return map_items(r, at, v, &a);
    if (!strcmp(name, "indent"))
        return indent(r, at, want_str(r, at, v, "indent"), arg(&a, 0, "width", jv_int(4)),
                      jv_truthy(arg(&a, 1, "first", jv_bool(false))), jv_truthy(arg(&a, 2, "blank", jv_bool(false))));
    if (!strcmp(name, "first") || !strcmp(name, "last"))
        return first_or_last(r, at, v, name[0] == 'l');
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        bool boolean = jv_truthy(arg(&a, 1, "boolean", jv_bool(false)));
        return v.t == JV_UNDEF || (boolean && !jv_truthy(v)) ? arg(&a, 0, "default_value", jv_cstr("")) : v;
    }
    if (!strcmp(name, "int"))
        return to_number(r, at, v, arg(&a, 0, "default", jv_int(0)), false);
    if (!strcmp(name, "float"))
        return to_number(r, at, v, arg(&a, 0, "default", jv_float(0)), true);
    if (!strcmp(name, "abs")) {
        if (v.t == JV_BOOL)
            return jv_int(v.u.b);
        if (v.t == JV_INT && v.u.i != INT64_MIN)
            return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        if (v.t == JV_FLOAT)
            return jv_float(v.u.f < 0 ? -v.u.f : v.u.f);
        jfail(r->c, at->line, "bad operand type for abs(): '%s'", jv_typename(v));
    }
    if (!strcmp(name, "format")) {   /* fmt|format(a, b) is fmt % (a, b) */
        jv t = jv_newlist(r->c);
        t.u.l->tuple = true;
        for (int i = 0; i < n_args; i++)
            jlist_push(r->c, t.u.l, args[i]);
        return jformat_percent(r, at->line, jv_to_str(r->c, v), t);
    }
    if (!strcmp(name, "round"))
        return round_number(r, at, v, &a);
    if (!strcmp(name, "unique")) {
        jlist *l = jv_iter(r->c, at->line, v);
        jv out = jv_newlist(r->c);
        out.u.l->gen = true;
        for (size_t i = 0; i < l->n; i++) {
            bool seen = false;
            for (size_t k = 0; k < out.u.l->n && !seen; k++)
                seen = jv_equal(out.u.l->v[k], l->v[i]);
            if (!seen)
                jlist_push(r->c, out.u.l, l->v[i]);
        }
        return out;
    }
    if (!strcmp(name, "sort") || !strcmp(name, "dictsort")) {
        bool dict = name[0] == 'd';
        if (dict && v.t == JV_UNDEF)
            jundefined_fail(r, at->line, v);
        jv out = {.t = JV_LIST};
        out.u.l = dict ? items_of(r, at, v).u.l : copy_items(r, at, v);
        bool reverse = jv_truthy(arg(&a, dict ? 2 : 0, "reverse", jv_bool(false)));
        bool cased = jv_truthy(arg(&a, dict ? 0 : 1, "case_sensitive", jv_bool(false)));
        jv by = arg(&a, 2, "attribute", jv_undef(NULL));
        if (dict) {   /* sort the (key, value) pairs by one of them */
            jv what = arg(&a, 1, "by", jv_cstr("key"));
            by = jv_int(what.t == JV_STR && what.u.s.n == 5 && !memcmp(what.u.s.p, "value", 5));
        }
        sort_list(r, at, out.u.l, by, cased, reverse);
        return out;
    }
    if (!strcmp(name, "reverse")) {
        if (v.t == JV_STR) {
            jlist *chars = jv_iter(r->c, at->line, v);
            jbuf *b = jtmp_open(r->c, at->line);
            for (size_t i = chars->n; i-- > 0;)
                jbuf_add_str(r->c, b, chars->v[i]);
            return jtmp_close(r->c);
        }
        jlist *src = jv_iter(r->c, at->line, v);
        jv out = jv_newlist(r->c);
        out.u.l->gen = true;   /* an iterator */
        for (size_t i = src->n; i-- > 0;)
            jlist_push(r->c, out.u.l, src->v[i]);
        return out;
    }
    if (!strcmp(name, "min") || !strcmp(name, "max"))
        return min_max(r, at, v, &a, name[1] == 'a');
    if (!strcmp(name, "sum")) {
        jlist *l = jv_iter(r->c, at->line, v);
        jv total = arg(&a, 1, "start", jv_int(0)), attr = arg(&a, 0, "attribute", jv_undef(NULL));
        for (size_t i = 0; i < l->n; i++)
            total = jarith(r, at->line, '+', total, attr.t != JV_UNDEF ? attr_of(r, at, l->v[i], attr) : l->v[i]);
        return total;
    }
    if (!strcmp(name, "escape") || !strcmp(name, "e"))
        return html_escape(r, at, v);
    if (!strcmp(name, "wordcount"))
        return jv_int(word_count(jv_to_str(r->c, v)));
    jfail(r->c, at->line, "no filter named '%s'", name);
}

/* ---- tests ---- */

bool jtest(jrender *r, const jnode *at, const char *name, jv v, jv *args, int n_args)
{
    jv x = n_args > 0 ? args[0] : jv_undef(NULL);
    static const struct { const char *name; char op; } cmps[] = {
        {"eq", OP_EQ}, {"equalto", OP_EQ}, {"==", OP_EQ}, {"ne", OP_NE}, {"!=", OP_NE},
        {"lt", '<'}, {"lessthan", '<'}, {"<", '<'}, {"le", OP_LE}, {"<=", OP_LE},
        {"gt", '>'}, {"greaterthan", '>'}, {">", '>'}, {"ge", OP_GE}, {">=", OP_GE},
    };
    for (size_t i = 0; i < sizeof cmps / sizeof *cmps; i++) {
        if (strcmp(name, cmps[i].name))
            continue;
        if (n_args < 1)
            jfail(r->c, at->line, "test '%s' needs an argument", name);
        char op = cmps[i].op;
        if (op == OP_EQ || op == OP_NE)
            return jv_equal(v, x) == (op == OP_EQ);
        int c = jv_compare(r->c, at->line, v, x);
        return op == '<' ? c < 0 : op == '>' ? c > 0 : op == OP_LE ? c <= 0 : c >= 0;
    }
    if (n_args > 0 && strcmp(name, "sameas") && strcmp(name, "in") && strcmp(name, "divisibleby"))
        jfail(r->c, at->line, "test '%s' takes no argument", name);
    if (!strcmp(name, "defined"))
        return v.t != JV_UNDEF;
    if (!strcmp(name, "undefined"))
        return v.t == JV_UNDEF;
    if (!strcmp(name, "none"))
        return v.t == JV_NONE;
    if (!strcmp(name, "boolean"))
        return v.t == JV_BOOL;
    if (!strcmp(name, "true") || !strcmp(name, "false"))
        return v.t == JV_BOOL && v.u.b == (name[0] == 't');
    if (!strcmp(name, "integer"))
        return v.t == JV_INT;
    if (!strcmp(name, "float"))
        return v.t == JV_FLOAT;
    if (!strcmp(name, "number"))
        return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    if (!strcmp(name, "string"))
        return v.t == JV_STR;
    if (!strcmp(name, "mapping"))
        return v.t == JV_DICT && !v.u.d->ns;
    if (!strcmp(name, "iterable") || !strcmp(name, "sequence"))
        return v.t == JV_STR || v.t == JV_LIST || (v.t == JV_DICT && !v.u.d->ns) || v.t == JV_UNDEF;
    if (!strcmp(name, "callable"))   /* jinja2's Undefined can be called (to fail) */
        return v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_METHOD || v.t == JV_UNDEF;
    if (!strcmp(name, "sameas"))
        return v.t == x.t && (v.t == JV_NONE || v.t == JV_UNDEF || (v.t == JV_BOOL && v.u.b == x.u.b) ||
                              ((v.t == JV_LIST || v.t == JV_DICT) && v.u.l == x.u.l) ||
                              (v.t == JV_INT && v.u.i == x.u.i));
    if (!strcmp(name, "in"))
        return jcontains(r, at->line, v, x);
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {   /* value % 2, as Python computes it */
        jv rem = jarith(r, at->line, '%', v, jv_int(2));
        return jv_equal(rem, jv_int(1)) == (name[0] == 'o');
    }
    if (!strcmp(name, "divisibleby")) {
        int64_t d = want_int(r, at, x, name);
        if (!d)
            jfail(r->c, at->line, "division by zero");
        return want_int(r, at, v, name) % d == 0;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper"))
        return case_is(jv_to_str(r->c, v), name[0] == 'u');
    jfail(r->c, at->line, "no test named '%s'", name);
}

/* ---- globals ---- */

static const char *const globals[] = {"raise_exception", "strftime_now", "namespace", "range", "dict", NULL};

int jglobal_find(const char *name)
{
    for (int i = 0; globals[i]; i++)
        if (!strcmp(globals[i], name))
            return i;
    return -1;
}

static jv range(jrender *r, const jnode *at, const fargs *a)
{
    if (a->n < 1 || a->n > 3)
        jfail(r->c, at->line, "range expected 1 to 3 arguments, got %d", a->n);
    int64_t start = 0, stop, st = 1;
    if (a->n == 1) {
        stop = want_int(r, at, a->args[0], "range");
    } else {
        start = want_int(r, at, a->args[0], "range");
        stop = want_int(r, at, a->args[1], "range");
        if (a->n == 3)
            st = want_int(r, at, a->args[2], "range");
    }
    if (!st)
        jfail(r->c, at->line, "range() arg 3 must not be zero");
    /* the list is made whole: one longer than the steps left could not be walked anyway */
    double count = st > 0 ? ((double)stop - (double)start) / (double)st : ((double)start - (double)stop) / (double)-st;
    if (count > (double)r->c->steps)
        jfail(r->c, at->line, "the template runs too long (more than %ld steps)", JINJA_MAX_STEPS);
    jv out = jv_newlist(r->c);
    for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) {
        jlist_push(r->c, out.u.l, jv_int(i));
        if ((st > 0 && i > INT64_MAX - st) || (st < 0 && i < INT64_MIN - st))
            break;
    }
    r->c->steps -= (long)out.u.l->n;
    return out;
}

jv jglobal_call(jrender *r, const jnode *at, int fn, jv *args, int n_args, const char **kw_names,
                jv *kw_vals, int n_kw)
{
    fargs a = {args, n_args, kw_names, kw_vals, n_kw};
    switch (fn) {
    case 0: {   /* raise_exception(message) */
        jv msg = jv_to_str(r->c, arg(&a, 0, "message", jv_cstr("")));
        jraise(r->c, at->line, msg.u.s.p, msg.u.s.n);
    }
    case 1: {   /* strftime_now(format) */
        jv f = want_str(r, at, arg(&a, 0, "format", jv_undef(NULL)), "strftime_now");
        struct tm tm;
        time_t now = r->now;
        localtime_r(&now, &tm);
        char buf[256];
        size_t n = strftime(buf, sizeof buf, jstrdup(r->c, f.u.s.p, f.u.s.n), &tm);
        return jv_str(jstrdup(r->c, buf, n), n);
    }
    case 2: case 4: {   /* namespace(...), dict(...): keyword arguments, or a dict to copy */
        jv d = jv_newdict(r->c);
        d.u.d->ns = fn == 2;
        for (int i = 0; i < n_args; i++) {
            if (args[i].t != JV_DICT)
                jfail(r->c, at->line, "%s() takes a mapping or keyword arguments", globals[fn]);
            for (size_t k = 0; k < args[i].u.d->n; k++)
                jdict_set(r->c, d.u.d, args[i].u.d->k[k], args[i].u.d->v[k]);
        }
        for (int i = 0; i < n_kw; i++)
            jdict_set(r->c, d.u.d, jv_cstr(kw_names[i]), kw_vals[i]);
        return d;
    }
    default:
        return range(r, at, &a);
    }
}

/* ---- methods ---- */

static const char *const str_methods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith",
    "endswith", "replace", "upper", "lower", "title", "capitalize", "find", "count", "join", "splitlines",
    "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", NULL};
static const char *const dict_methods[] = {"get", "items", "keys", "values", NULL};
static const char *const list_methods[] = {"index", "count", NULL};
/* What the immutable sandbox refuses: methods that change the list or dict. */
static const char *const dict_unsafe[] = {"update", "pop", "popitem", "setdefault", "clear", NULL};
static const char *const list_unsafe[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort",
                                          "reverse", NULL};

static int method_index(const char *const *names, const char *name)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], name))
            return i;
    return -1;
}

int jmethod_kind(jv v, const char *name)
{
    bool dict = v.t == JV_DICT && !v.u.d->ns;
    const char *const *safe = v.t == JV_STR ? str_methods : v.t == JV_LIST ? list_methods : dict ? dict_methods : NULL;
    const char *const *unsafe = v.t == JV_LIST ? list_unsafe : dict ? dict_unsafe : NULL;
    if (safe && method_index(safe, name) >= 0)
        return 1;
    return unsafe && method_index(unsafe, name) >= 0 ? -1 : 0;
}

static jv str_method(jrender *r, const jnode *at, jv s, const char *name, const fargs *a)
{
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip"))
        return strip(s, arg(a, 0, "chars", jv_none()), name[0] == 's' ? 'b' : name[0]);
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        jv sep = arg(a, 0, "sep", jv_none());
        jv max = arg(a, 1, "maxsplit", jv_int(-1));
        if (sep.t != JV_NONE)
            want_str(r, at, sep, name);
        int64_t maxsplit = want_int(r, at, max, name);
        return name[0] == 'r' ? rsplit(r, at, s, sep, maxsplit) : split(r, at, s, sep, maxsplit);
    }
    if (!strncmp(name, "is", 2)) {
        if (!strcmp(name, "isupper") || !strcmp(name, "islower"))
            return jv_bool(case_is(s, name[2] == 'u'));
        char cls = !strcmp(name, "isdigit") ? 'd' : !strcmp(name, "isalpha") ? 'a' : !strcmp(name, "isalnum") ? 'n' : 's';
        return jv_bool(char_class(s, cls));
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        jv p = arg(a, 0, "prefix", jv_undef(NULL));
        jlist *alts = p.t == JV_LIST ? p.u.l : NULL;
        size_t n = alts ? alts->n : 1;
        for (size_t i = 0; i < n; i++) {
            jv x = want_str(r, at, alts ? alts->v[i] : p, name);
            if (x.u.s.n <= s.u.s.n && !memcmp(s.u.s.p + (name[0] == 's' ? 0 : s.u.s.n - x.u.s.n), x.u.s.p, x.u.s.n))
                return jv_bool(true);
        }
        return jv_bool(false);
    }
    if (!strcmp(name, "replace")) {
        jv old = want_str(r, at, arg(a, 0, "old", jv_undef(NULL)), name);
        jv new = want_str(r, at, arg(a, 1, "new", jv_undef(NULL)), name);
        return replace(r, at, s, old, new, want_int(r, at, arg(a, 2, "count", jv_int(-1)), name));
    }
    if (!strcmp(name, "find") || !strcmp(name, "count")) {
        jv sub = want_str(r, at, arg(a, 0, "sub", jv_undef(NULL)), name);
        int64_t count = 0, cp = 0;
        for (size_t i = 0; i + sub.u.s.n <= s.u.s.n;) {
            if (find_at(s, i, sub)) {
                if (name[0] == 'f')
                    return jv_int(cp);
                count++;
                i += sub.u.s.n ? sub.u.s.n : 1;
                cp++;
                continue;
            }
            i += utf8_len((unsigned char)s.u.s.p[i]);
            cp++;
        }
        return jv_int(name[0] == 'f' ? -1 : count + (sub.u.s.n ? 0 : 1));
    }
    if (!strcmp(name, "join")) {
        fargs j = {.args = &s, .n = 1};
        return join(r, at, arg(a, 0, "iterable", jv_undef(NULL)), &j);
    }
    if (!strcmp(name, "splitlines")) {
        jv out = jv_newlist(r->c);
        size_t start = 0, i = 0;
        while (i < s.u.s.n) {
            size_t br = line_break(s.u.s.p + i, s.u.s.n - i);
            if (!br) {
                size_t k = utf8_len((unsigned char)s.u.s.p[i]);
                i += k < s.u.s.n - i ? k : s.u.s.n - i;
                continue;
            }
            jlist_push(r->c, out.u.l, jv_sub(s, start, i - start));
            i += br;
            start = i;
        }
        if (start < s.u.s.n)
            jlist_push(r->c, out.u.l, jv_sub(s, start, s.u.s.n - start));
        return out;
    }
    return change_case(r, s, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 'c' ? 'c' : 't');
}

jv jmethod_call(jrender *r, const jnode *at, const jmethod *m, jv *args, int n_args,
                const char **kw_names, jv *kw_vals, int n_kw)
{
    fargs a = {args, n_args, kw_names, kw_vals, n_kw};
    jv self = m->self;
    if (self.t == JV_STR)
        return str_method(r, at, self, m->name, &a);
    if (self.t == JV_DICT) {
        if (!strcmp(m->name, "get")) {
            jv *v = jdict_get(self.u.d, arg(&a, 0, "key", jv_none()));
            return v ? *v : arg(&a, 1, "default", jv_none());
        }
        if (!strcmp(m->name, "items"))
            return items_of(r, at, self);
        jv out = jv_newlist(r->c);
        for (size_t i = 0; i < self.u.d->n; i++)
            jlist_push(r->c, out.u.l, m->name[0] == 'k' ? self.u.d->k[i] : self.u.d->v[i]);
        return out;
    }
    /* a list's index() or count() */
    jv x = arg(&a, 0, "value", jv_undef(NULL));
    int64_t count = 0;
    for (size_t i = 0; i < self.u.l->n; i++)
        if (jv_equal(self.u.l->v[i], x)) {
            if (m->name[0] == 'i')
                return jv_int((int64_t)i);
            count++;
        }
    if (m->name[0] == 'i')
        jfail(r->c, at->line, "ValueError: value is not in list");
    return jv_int(count);
}
