/* toolcall.c — tool-call formats (toolcall.h): the table that recognises them, the grammars
 * that make a model write a call, and the parser of replies.
 *
 * The parser reads the whole reply so far each time (replies are short next to what it costs
 * to generate them) and reports what is certain: content and reasoning up to a possible start
 * of a marker, calls once complete. What it reports never changes later, so a stream's deltas
 * are the differences between two readings. Whitespace at the start and the end of content and
 * reasoning is left out (models put newlines around their thinking and their calls). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "text/json_schema.h"
#include "text/toolcall.h"
#include "util/strbuf.h"

/* ---- the formats ------------------------------------------------------------------------- */

#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"

/* How each format is told: what its template writes for a call, else words in the model's
 * architecture or name (lower case). The first row that matches wins. */
static const struct {
    enum tool_format f;
    const char *name;
    const char *tpl[2];
    const char *model[3];
} formats[] = {
    {TOOL_GPTOSS, "gpt-oss", {"<|channel|>", NULL}, {"gpt-oss", "gptoss", NULL}},
    {TOOL_DEEPSEEK, "deepseek", {"tool▁calls▁begin", NULL}, {"deepseek", NULL}},
    {TOOL_MISTRAL, "mistral", {"[TOOL_CALLS]", NULL}, {"mistral", "mixtral", NULL}},
    {TOOL_HERMES, "hermes", {"<tool_call>", NULL}, {"qwen", "hermes", NULL}},
    {TOOL_LLAMA3, "llama3", {"<|python_tag|>", "\"parameters\""}, {"llama-3", "llama 3", "llama3"}},
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

static bool contains_lower(const char *s, const char *word)
{
    if (!s)
        return false;
    size_t n = strlen(word);
    for (; *s; s++)
        if (!strncasecmp(s, word, n))
            return true;
    return false;
}

enum tool_format tool_format_detect(const char *template_src, size_t len, const char *arch,
                                    const char *name)
{
    for (size_t i = 0; template_src && i < N_FORMATS; i++)
        for (int k = 0; k < 2 && formats[i].tpl[k]; k++)
            if (memmem(template_src, len, formats[i].tpl[k], strlen(formats[i].tpl[k])))
                return formats[i].f;
    for (size_t i = 0; i < N_FORMATS; i++)
        for (int k = 0; k < 3 && formats[i].model[k]; k++)
            if (contains_lower(name, formats[i].model[k]) || contains_lower(arch, formats[i].model[k]))
                return formats[i].f;
    return TOOL_HERMES;
}

const char *tool_format_name(enum tool_format f)
{
    for (size_t i = 0; i < N_FORMATS; i++)
        if (formats[i].f == f)
            return formats[i].name;
    return "?";
}

/* ---- grammars ------------------------------------------------------------------------------ */

/* GBNF literal of a function name (names are a-z, A-Z, 0-9, _, - and ., as the server checks;
 * anything else is escaped all the same). */
static int name_literal(strbuf *b, const char *name)
{
    int bad = strbuf_add(b, "\"", 1);
    for (const char *s = name; *s && !bad; s++) {
        char esc[8];
        int n = *s == '"' || *s == '\\' ? snprintf(esc, sizeof esc, "\\%c", *s)
                : (unsigned char)*s < 0x20 ? snprintf(esc, sizeof esc, "\\x%02X", (unsigned char)*s)
                : snprintf(esc, sizeof esc, "%c", *s);
        bad = strbuf_add(b, esc, (size_t)n);
    }
    return bad || strbuf_add(b, "\"", 1);
}

static int add(strbuf *b, const char *s)
{
    return strbuf_add(b, s, strlen(s));
}

/* One call to fn in format f: the function's literal and its arguments' rule. */
static int call_expr(enum tool_format f, strbuf *b, const char *fn, const char *args)
{
    int bad = 0;
    switch (f) {
    case TOOL_HERMES:
        bad = add(b, "\"<tool_call>\\n{\\\"name\\\": \\\"\" ") || name_literal(b, fn) ||
              add(b, " \"\\\", \\\"arguments\\\": \" ") || add(b, args) || add(b, " \"}\\n</tool_call>\"");
        break;
    case TOOL_LLAMA3:
        bad = add(b, "\"{\\\"name\\\": \\\"\" ") || name_literal(b, fn) ||
              add(b, " \"\\\", \\\"parameters\\\": \" ") || add(b, args) || add(b, " \"}\"");
        break;
    case TOOL_MISTRAL:
        bad = add(b, "\"{\\\"name\\\": \\\"\" ") || name_literal(b, fn) ||
              add(b, " \"\\\", \\\"arguments\\\": \" ") || add(b, args) || add(b, " \"}\"");
        break;
    case TOOL_GPTOSS:
        bad = add(b, "\"<|channel|>commentary to=functions.\" ") || name_literal(b, fn) ||
              add(b, " \" <|constrain|>json<|message|>\" ") || add(b, args) || add(b, " \"<|call|>\"");
        break;
    case TOOL_DEEPSEEK:
        bad = add(b, "\"" DS_CALL_BEGIN "function" DS_SEP "\" ") || name_literal(b, fn) ||
              add(b, " \"\\n```json\\n\" ") || add(b, args) || add(b, " \"\\n```" DS_CALL_END "\"");
        break;
    }
    return bad;
}

char *tool_call_grammar(enum tool_format f, const cJSON *tools, const char *only, bool parallel,
                        char *err, size_t errlen)
{
    strbuf rules = {0}, alts = {0};
    int n = 0, bad = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
        if (!name || (only && strcmp(name, only)))
            continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        char prefix[32], top[64];
        snprintf(prefix, sizeof prefix, "f%d-", n);
        char *g;
        if (params && !cJSON_IsNull(params)) {
            char why[400];
            g = json_schema_grammar(params, prefix, why, sizeof why);
            if (!g) {
                snprintf(err, errlen, "tool '%.64s' parameters: %s", name, why);
                free(rules.p);
                free(alts.p);
                return NULL;
            }
        } else {
            /* no parameters: an empty object */
            g = malloc(64);
            if (g)
                snprintf(g, 64, "%stop ::= \"{}\"\n", prefix);
        }
        bad |= !g || add(&rules, g) || (n && add(&alts, " | ")) ||
               call_expr(f, &alts, name, json_schema_rule(prefix, top, sizeof top));
        free(g);
        n++;
    }
    if (!n) {
        snprintf(err, errlen, only ? "no tool named '%.64s'" : "no tools to call", only);
        free(rules.p);
        free(alts.p);
        return NULL;
    }
    /* the calls: one, or (parallel, where the format has a way to write several) more */
    strbuf g = {0};
    bool many = parallel && (f == TOOL_HERMES || f == TOOL_MISTRAL || f == TOOL_DEEPSEEK);
    const char *root = f == TOOL_MISTRAL ? (many ? "root ::= \"[TOOL_CALLS][\" call (\", \" call)* \"]\"\n"
                                                 : "root ::= \"[TOOL_CALLS][\" call \"]\"\n")
                       : f == TOOL_DEEPSEEK ? (many ? "root ::= \"" DS_CALLS_BEGIN "\" call (\"\\n\" call)* \"" DS_CALLS_END "\"\n"
                                                    : "root ::= \"" DS_CALLS_BEGIN "\" call \"" DS_CALLS_END "\"\n")
                       : many ? "root ::= call (\"\\n\" call)*\n" : "root ::= call\n";
    bad |= add(&g, root) || add(&g, "call ::= ") || add(&g, alts.p) || add(&g, "\n") ||
           add(&g, rules.p);
    free(rules.p);
    free(alts.p);
    if (bad) {
        free(g.p);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return g.p;
}

/* ---- parsing --------------------------------------------------------------------------------- */

struct tool_parser {
    enum tool_format f;
    bool think;
    strbuf text;
    tool_reply now;              /* the last reading */
    size_t content_sent, reasoning_sent;
    int calls_sent;
};

void tool_reply_free(tool_reply *r)
{
    free(r->content);
    free(r->reasoning);
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    memset(r, 0, sizeof *r);
}

typedef struct reading {
    const char *s;
    size_t n;
    bool final;
    strbuf content, reasoning;
    tool_call *calls;
    int n_calls;
    bool oom;
} reading;

/* JSON's whitespace (strchr would count the terminating NUL as one: replies may hold NULs) */
static bool space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static long find(const reading *r, size_t from, const char *m)
{
    const char *p = from <= r->n ? memmem(r->s + from, r->n - from, m, strlen(m)) : NULL;
    return p ? p - r->s : -1;
}

static bool starts(const reading *r, size_t at, const char *m)
{
    size_t k = strlen(m);
    return at <= r->n && r->n - at >= k && !memcmp(r->s + at, m, k);
}

/* Whether s[at..n) is a (proper) beginning of m: m may be still coming. */
static bool begins(const reading *r, size_t at, const char *m)
{
    return at < r->n && r->n - at < strlen(m) && !memcmp(r->s + at, m, r->n - at);
}

/* The longest end of s[from..n) that begins one of the markers (it may be one, still coming). */
static size_t partial(const reading *r, size_t from, const char *const *markers)
{
    size_t best = 0;
    for (int i = 0; markers[i]; i++) {
        size_t k = strlen(markers[i]);
        for (size_t len = k - 1; len > best; len--)
            if (r->n - from >= len && !memcmp(r->s + r->n - len, markers[i], len)) {
                best = len;
                break;
            }
    }
    return best;
}

static void out_text(reading *r, strbuf *b, size_t from, size_t to)
{
    if (to > from)
        r->oom |= strbuf_add(b, r->s + from, to - from) != 0;
}

/* The end of the JSON value that starts at from (after spaces): its end, -1 if it may still
 * come, -2 if it cannot be a JSON object or array. Strings and nesting are followed; the value
 * itself is checked by parsing. */
static long json_end(const reading *r, size_t from)
{
    size_t i = from;
    while (i < r->n && space(r->s[i]))
        i++;
    if (i == r->n)
        return -1;
    if (r->s[i] != '{' && r->s[i] != '[')
        return -2;
    int depth = 0;
    bool str = false;
    for (; i < r->n; i++) {
        char c = r->s[i];
        if (str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                str = false;
        } else if (c == '"') {
            str = true;
        } else if (c == '{' || c == '[') {
            if (++depth > 512)
                return -2;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return (long)i + 1;
        }
    }
    return -1;
}

/* The longest function name (OpenAI's limit) */
#define CALL_NAME_MAX 64

/* Whether s[0..len) can name a function: 1 to CALL_NAME_MAX bytes, no spaces, control bytes or brackets
 * (a reply that puts anything else there is content, not a call). */
static bool call_name(const char *s, size_t len)
{
    if (len == 0 || len > CALL_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f || strchr("[]{}\"", s[i]))
            return false;
    return true;
}

static void add_call(reading *r, const char *name, size_t name_len, const cJSON *args)
{
    char *a = args ? cJSON_PrintUnformatted(args) : strdup("{}");
    char *n = strndup(name, name_len);
    tool_call *c = realloc(r->calls, sizeof *c * (size_t)(r->n_calls + 1));
    if (!a || !n || !c) {
        free(a);
        free(n);
        if (c)
            r->calls = c;
        r->oom = true;
        return;
    }
    r->calls = c;
    c[r->n_calls++] = (tool_call){n, a};
}

/* A call written as JSON {"name": ..., "arguments" | "parameters": {...}}: added, or false. */
static bool json_call(reading *r, const cJSON *o)
{
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "name"));
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args)
        args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (!cJSON_IsObject(o) || !name || !call_name(name, strlen(name)))
        return false;
    cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
    if (args && !cJSON_IsObject(args) && !cJSON_IsObject(parsed)) {
        cJSON_Delete(parsed);
        return false;
    }
    add_call(r, name, strlen(name), parsed ? parsed : args);
    cJSON_Delete(parsed);
    return true;
}

/* The JSON value at s[from..end) as calls (an object, or with many an array of them): whether
 * every one was one (none is added otherwise). */
static bool json_calls(reading *r, size_t from, size_t end, bool many)
{
    cJSON *v = cJSON_ParseWithLength(r->s + from, end - from);
    int before = r->n_calls;
    bool ok = v != NULL;
    if (ok && many && cJSON_IsArray(v)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v)
            ok = ok && json_call(r, e);
        ok = ok && r->n_calls > before;
    } else if (ok) {
        ok = json_call(r, v);
    }
    cJSON_Delete(v);
    for (; !ok && r->n_calls > before; r->n_calls--) {
        free(r->calls[r->n_calls - 1].name);
        free(r->calls[r->n_calls - 1].arguments);
    }
    return ok;
}

/* The calls starting at marker m (at at): 1 read (*next past them), 0 not complete yet, -1
 * not calls (what follows is content). */
static int read_calls(reading *r, enum tool_format f, const char *m, size_t at, size_t *next)
{
    size_t p = at + strlen(m);
    long e;
    if (!strcmp(m, "<tool_call>")) {
        long close = find(r, p, "</tool_call>");
        e = json_end(r, p);
        if (e == -1 || (close < 0 && e >= 0 && !r->final))
            return r->final ? -1 : 0;
        if (e < 0 || !json_calls(r, p, (size_t)e, false))
            return -1;
        *next = close >= 0 ? (size_t)close + 12 : (size_t)e;
        return 1;
    }
    if (!strcmp(m, "[TOOL_CALLS]")) {
        size_t q = p;
        while (q < r->n && space(r->s[q]))
            q++;
        if (q < r->n && r->s[q] == '[') {
            e = json_end(r, q);
            if (e == -1)
                return r->final ? -1 : 0;
            if (e < 0 || !json_calls(r, q, (size_t)e, true))
                return -1;
            *next = (size_t)e;
            return 1;
        }
        /* [TOOL_CALLS]NAME[ARGS]{...} */
        long a = find(r, p, "[ARGS]");
        if (a < 0) /* still coming, unless no name that fits could be followed by it */
            return r->final || r->n - q >= CALL_NAME_MAX + 6 ? -1 : 0;
        e = json_end(r, (size_t)a + 6);
        if (e == -1)
            return r->final ? -1 : 0;
        cJSON *args = e > 0 ? cJSON_ParseWithLength(r->s + a + 6, (size_t)e - (size_t)a - 6) : NULL;
        bool ok = cJSON_IsObject(args) && call_name(r->s + q, (size_t)a - q);
        if (ok)
            add_call(r, r->s + q, (size_t)a - q, args);
        cJSON_Delete(args);
        *next = (size_t)e;
        return ok ? 1 : -1;
    }
    if (f == TOOL_LLAMA3) {
        e = json_end(r, p);
        if (e == -1)
            return r->final ? -1 : 0;
        if (e < 0 || !json_calls(r, p, (size_t)e, false))
            return -1;
        *next = (size_t)e;
        /* several, separated by ';' */
        size_t q = *next;
        while (q < r->n && (r->s[q] == ';' || space(r->s[q])))
            q++;
        if (q == r->n) { /* separators only, so far */
            *next = q;
            return r->final ? 1 : 0;
        }
        if (r->s[q] == '{')
            return read_calls(r, f, "", q, next) == 0 ? 0 : 1;
        return 1;
    }
    /* DeepSeek: calls, each TYPE<sep>NAME\n```json\n{...}\n``` or NAME<sep>{...} */
    int before = r->n_calls;
    size_t q = p;
    for (;;) {
        while (q < r->n && space(r->s[q]))
            q++;
        if (starts(r, q, DS_CALLS_END)) {
            *next = q + strlen(DS_CALLS_END);
            return 1;
        }
        if (!starts(r, q, DS_CALL_BEGIN)) {
            /* the block goes on, or a next call is being written */
            bool more = q >= r->n || begins(r, q, DS_CALL_BEGIN) || begins(r, q, DS_CALLS_END);
            if (more && !r->final)
                return 0;
            *next = q;
            return r->n_calls > before ? 1 : -1;
        }
        q += strlen(DS_CALL_BEGIN);
        long sep = find(r, q, DS_SEP), end = find(r, q, DS_CALL_END);
        if (sep < 0 || end < 0)
            return r->final ? -1 : 0;
        size_t name = q, name_len = (size_t)sep - q, args = (size_t)sep + strlen(DS_SEP);
        if (name_len == 8 && !memcmp(r->s + name, "function", 8)) {
            long nl = find(r, args, "\n");
            if (nl < 0 || nl > end)
                return -1;
            name = args;
            name_len = (size_t)nl - args;
            args = (size_t)nl;
        }
        long b = find(r, args, "{");
        e = b >= 0 && b < end ? json_end(r, (size_t)b) : -2;
        cJSON *a = e > 0 && e <= end ? cJSON_ParseWithLength(r->s + b, (size_t)(e - b)) : NULL;
        if (!cJSON_IsObject(a) || !call_name(r->s + name, name_len)) {
            cJSON_Delete(a);
            return -1;
        }
        add_call(r, r->s + name, name_len, a);
        cJSON_Delete(a);
        q = (size_t)end + strlen(DS_CALL_END);
    }
}

/* Everything but gpt-oss: content, <think> reasoning, and the format's calls. */
static void read_plain(reading *r, enum tool_format f, bool think)
{
    static const char *const starts_of[][3] = {
        [TOOL_HERMES] = {"<tool_call>", NULL},
        [TOOL_LLAMA3] = {"<|python_tag|>", NULL},
        [TOOL_MISTRAL] = {"[TOOL_CALLS]", NULL},
        [TOOL_DEEPSEEK] = {DS_CALLS_BEGIN, DS_CALL_BEGIN, NULL},
        [TOOL_GPTOSS] = {NULL},
    };
    const char *markers[5] = {"<think>"};
    int nm = 1;
    for (int i = 0; starts_of[f][i]; i++)
        markers[nm++] = starts_of[f][i];
    markers[nm] = NULL;
    static const char *const think_end[] = {"</think>", NULL};
    size_t pos = 0;
    bool reasoning = think;
    while (!r->oom) {
        if (reasoning) {
            long e = find(r, pos, "</think>");
            if (e < 0) {
                out_text(r, &r->reasoning, pos, r->final ? r->n : r->n - partial(r, pos, think_end));
                return;
            }
            out_text(r, &r->reasoning, pos, (size_t)e);
            pos = (size_t)e + 8;
            reasoning = false;
            continue;
        }
        long at = -1;
        const char *m = NULL;
        for (int i = 0; markers[i]; i++) {
            long k = find(r, pos, markers[i]);
            if (k >= 0 && (at < 0 || k < at)) {
                at = k;
                m = markers[i];
            }
        }
        /* Llama 3 writes a call as bare JSON: a reply whose content starts with '{' */
        if (f == TOOL_LLAMA3 && !r->content.len && (at < 0 || (size_t)at > pos)) {
            size_t q = pos;
            while (q < r->n && space(r->s[q]))
                q++;
            if (q < r->n && r->s[q] == '{' && (at < 0 || (long)q < at)) {
                at = (long)q;
                m = "";
            }
        }
        if (at < 0) {
            out_text(r, &r->content, pos, r->final ? r->n : r->n - partial(r, pos, markers));
            return;
        }
        out_text(r, &r->content, pos, (size_t)at);
        if (!strcmp(m, "<think>")) {
            pos = (size_t)at + 7;
            reasoning = true;
            continue;
        }
        size_t next = 0;
        int before = r->n_calls;
        int got = read_calls(r, f, m, (size_t)at, &next);
        /* a block's calls count once all of it is read */
        for (; got <= 0 && r->n_calls > before; r->n_calls--) {
            free(r->calls[r->n_calls - 1].name);
            free(r->calls[r->n_calls - 1].arguments);
        }
        if (got == 0)
            return;
        if (got < 0) {
            /* not a call after all: the marker is content, and what follows is read again */
            next = (size_t)at + (*m ? strlen(m) : 1);
            out_text(r, &r->content, (size_t)at, next);
        }
        pos = next;
    }
}

/* gpt-oss: messages [<|start|>assistant][ to=functions.NAME]<|channel|>CHANNEL[ to=...]
 * [<|constrain|>json]<|message|>BODY, each ended by <|end|>, <|call|> or <|return|> (or the
 * end of the reply, where an end-of-generation token ended it). */
static void read_harmony(reading *r)
{
    static const char *const ends[] = {"<|end|>", "<|call|>", "<|return|>", NULL};
    static const char *const heads[] = {"<|channel|>", "<|start|>", "<|message|>", NULL};
    /* a reply that does not open with a header is not in channels: all of it is content */
    size_t pos = 0;
    while (pos < r->n && space(r->s[pos]))
        pos++;
    bool channels = false, maybe = pos == r->n;
    for (int i = 0; heads[i]; i++) {
        channels |= starts(r, pos, heads[i]);
        maybe |= begins(r, pos, heads[i]);
    }
    if (!channels) {
        if (!maybe || r->final)
            out_text(r, &r->content, 0, r->n);
        return;
    }
    while (!r->oom && pos < r->n) {
        if (starts(r, pos, "<|start|>"))
            pos += 9;
        long msg = find(r, pos, "<|message|>");
        if (msg < 0)
            return; /* a header still coming (at the end: a header alone says nothing) */
        size_t body = (size_t)msg + 11;
        long end = -1;
        size_t end_len = 0;
        for (int i = 0; ends[i]; i++) {
            long k = find(r, body, ends[i]);
            if (k >= 0 && (end < 0 || k < end)) {
                end = k;
                end_len = strlen(ends[i]);
            }
        }
        /* the header: the channel's name and a recipient */
        const char *h = r->s + pos;
        size_t hn = (size_t)msg - pos;
        const char *to = memmem(h, hn, "to=functions.", 13);
        const char *ch = memmem(h, hn, "<|channel|>", 11);
        bool analysis = ch && hn - (size_t)(ch - h) >= 19 && !memcmp(ch + 11, "analysis", 8);
        size_t stop = end >= 0 ? (size_t)end : r->final ? r->n : r->n - partial(r, body, ends);
        if (to) {
            if (end < 0 && !r->final)
                return;
            const char *nm = to + 13;
            size_t nl = strcspn(nm, " <\t\n");
            if (nl > hn - (size_t)(nm - h))
                nl = hn - (size_t)(nm - h);
            cJSON *a = cJSON_ParseWithLength(r->s + body, stop - body);
            if (cJSON_IsObject(a) && nl)
                add_call(r, nm, nl, a);
            else
                out_text(r, &r->content, body, stop);
            cJSON_Delete(a);
        } else {
            out_text(r, analysis ? &r->reasoning : &r->content, body, stop);
        }
        if (end < 0)
            return;
        pos = (size_t)end + end_len;
    }
}

/* The reading's text with its leading (and, final or not, trailing) whitespace left out. */
static char *trimmed(strbuf *b, size_t *len)
{
    const char *p = b->p ? b->p : "";
    size_t n = b->len;
    while (n && space(*p)) {
        p++;
        n--;
    }
    while (n && space(p[n - 1]))
        n--;
    char *out = malloc(n + 1);
    if (out) {
        memcpy(out, p, n);
        out[n] = '\0';
    }
    *len = n;
    return out;
}

static int read_all(enum tool_format f, bool think, const char *s, size_t n, bool final,
                    tool_reply *out)
{
    reading r = {.s = s, .n = n, .final = final};
    if (f == TOOL_GPTOSS)
        read_harmony(&r);
    else
        read_plain(&r, f, think);
    memset(out, 0, sizeof *out);
    out->content = trimmed(&r.content, &out->content_len);
    out->reasoning = trimmed(&r.reasoning, &out->reasoning_len);
    out->calls = r.calls;
    out->n_calls = r.n_calls;
    free(r.content.p);
    free(r.reasoning.p);
    if (r.oom || !out->content || !out->reasoning) {
        tool_reply_free(out);
        return -1;
    }
    return 0;
}

int tool_parse(enum tool_format f, bool think, const char *text, size_t n, tool_reply *out)
{
    return read_all(f, think, text, n, true, out);
}

tool_parser *tool_parser_new(enum tool_format f, bool think)
{
    tool_parser *p = calloc(1, sizeof *p);
    if (p) {
        p->f = f;
        p->think = think;
    }
    return p;
}

void tool_parser_free(tool_parser *p)
{
    if (!p)
        return;
    free(p->text.p);
    tool_reply_free(&p->now);
    free(p);
}

/* Read the text again and say what is new since the last delta. */
static int delta(tool_parser *p, bool final, tool_delta *d)
{
    tool_reply next;
    memset(d, 0, sizeof *d);
    if (read_all(p->f, p->think, p->text.p ? p->text.p : "", p->text.len, final, &next))
        return -1;
    tool_reply_free(&p->now);
    p->now = next;
    /* what was certain stays so: the new reading extends the old */
    if (next.content_len > p->content_sent) {
        d->content = next.content + p->content_sent;
        d->content_len = next.content_len - p->content_sent;
        p->content_sent = next.content_len;
    }
    if (next.reasoning_len > p->reasoning_sent) {
        d->reasoning = next.reasoning + p->reasoning_sent;
        d->reasoning_len = next.reasoning_len - p->reasoning_sent;
        p->reasoning_sent = next.reasoning_len;
    }
    d->calls = next.calls;
    d->first_call = p->calls_sent;
    d->n_calls = next.n_calls;
    if (next.n_calls > p->calls_sent)
        p->calls_sent = next.n_calls;
    return 0;
}

int tool_parser_feed(tool_parser *p, const char *text, size_t n, tool_delta *d)
{
    if (strbuf_add(&p->text, text, n)) {
        memset(d, 0, sizeof *d);
        return -1;
    }
    return delta(p, false, d);
}

int tool_parser_finish(tool_parser *p, tool_delta *d)
{
    return delta(p, true, d);
}
