/* json_schema.c — a JSON schema compiled to GBNF (json_schema.h).
 *
 * Each schema becomes an expression; objects, arrays and alternatives are written inline,
 * references ($ref) and the primitives (string, number, ...) become rules of their own, made
 * once. Optional properties keep the schema's order: F_i ("properties from i on, none written
 * yet") is a rule per optional property, so every comma sits between two properties. Numbers
 * have bounded digits, so that a model that keeps writing digits still ends. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/json_schema.h"
#include "util/strbuf.h"

#define MAX_DEPTH 64
#define MAX_REFS 256

typedef struct gen {
    strbuf out;              /* the rules written so far */
    char prefix[64];
    const cJSON *root;
    int n_rules;
    unsigned prims;          /* the primitive rules written (bits of enum prim) */
    struct { char *ref; int rule; } refs[MAX_REFS];
    int n_refs;
    char *err;
    size_t errlen;
    bool failed;
} gen;

enum prim { P_WS, P_CHAR, P_STRING, P_NUMBER, P_INTEGER, P_BOOLEAN, P_NULL, P_VALUE, P_OBJECT,
            P_ARRAY, P_DATE, P_TIME, P_DATETIME, P_UUID, P_NATURAL, P_POSITIVE, P_COUNT };

static const struct { const char *name, *body; unsigned needs; } prims[P_COUNT] = {
    [P_WS] = {"ws", "\" \"?", 0},
    [P_CHAR] = {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})", 0},
    [P_STRING] = {"string", "\"\\\"\" @char* \"\\\"\"", 1u << P_CHAR},
    [P_NUMBER] = {"number", "\"-\"? ([0-9] | [1-9] [0-9]{1,15}) (\".\" [0-9]{1,16})? "
                            "([eE] [-+]? [0-9]{1,3})?", 0},
    [P_INTEGER] = {"integer", "\"-\"? ([0-9] | [1-9] [0-9]{1,15})", 0},
    [P_NATURAL] = {"natural", "[0-9] | [1-9] [0-9]{1,15}", 0},
    [P_POSITIVE] = {"positive", "[1-9] [0-9]{0,15}", 0},
    [P_BOOLEAN] = {"boolean", "\"true\" | \"false\"", 0},
    [P_NULL] = {"null", "\"null\"", 0},
    [P_VALUE] = {"value", "@object | @array | @string | @number | @boolean | @null",
                 1u << P_OBJECT | 1u << P_ARRAY | 1u << P_STRING | 1u << P_NUMBER |
                 1u << P_BOOLEAN | 1u << P_NULL},
    [P_OBJECT] = {"object", "\"{\" @ws (@string \":\" @ws @value (\",\" @ws @string \":\" @ws "
                            "@value)*)? \"}\"", 1u << P_WS | 1u << P_STRING | 1u << P_VALUE},
    [P_ARRAY] = {"array", "\"[\" @ws (@value (\",\" @ws @value)*)? \"]\"",
                 1u << P_WS | 1u << P_VALUE},
    [P_DATE] = {"date", "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] "
                        "| \"3\" [01])", 0},
    [P_TIME] = {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] "
                        "(\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])", 0},
    [P_DATETIME] = {"date-time", "@date \"T\" @time", 1u << P_DATE | 1u << P_TIME},
    [P_UUID] = {"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
                        "[0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}", 0},
};

static bool fail(gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(gen *g, const char *fmt, ...)
{
    if (!g->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->err, g->errlen, fmt, ap);
        va_end(ap);
        g->failed = true;
    }
    return false;
}

static bool add(gen *g, strbuf *b, const char *s)
{
    if (strbuf_add(b, s, strlen(s)))
        return fail(g, "out of memory");
    return true;
}

static bool addf(gen *g, strbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool addf(gen *g, strbuf *b, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return add(g, b, buf);
}

/* A primitive rule's name, writing it (and what it uses) on first use. @x in a body is the
 * primitive x under this grammar's prefix. */
static bool prim(gen *g, strbuf *b, enum prim p)
{
    if (!(g->prims & 1u << p)) {
        g->prims |= 1u << p;
        for (int q = 0; q < P_COUNT; q++)
            if (prims[p].needs & 1u << q && !prim(g, NULL, (enum prim)q))
                return false;
        if (!addf(g, &g->out, "%s%s ::= ", g->prefix, prims[p].name))
            return false;
        for (const char *s = prims[p].body; *s; s++) {
            if (*s == '@') {
                size_t n = strcspn(s + 1, " *?)|");
                char name[32];
                snprintf(name, sizeof name, "%.*s", (int)n, s + 1);
                if (!addf(g, &g->out, "%s%s", g->prefix, name))
                    return false;
                s += n;
            } else if (strbuf_add(&g->out, s, 1)) {
                return fail(g, "out of memory");
            }
        }
        if (!add(g, &g->out, "\n"))
            return false;
    }
    return !b || addf(g, b, "%s%s", g->prefix, prims[p].name);
}

/* JSON text as a GBNF literal. */
static bool literal(gen *g, strbuf *b, const cJSON *v)
{
    char *j = cJSON_PrintUnformatted(v);
    if (!j) {
        return fail(g, "out of memory");
    }
    bool ok = add(g, b, "\"");
    for (const char *s = j; ok && *s; s++) {
        char c[3] = {'\\', *s, 0};
        ok = add(g, b, *s == '"' || *s == '\\' ? c : c + 1);
    }
    free(j);
    return ok && add(g, b, "\"");
}

static bool schema_expr(gen *g, const cJSON *s, const char *path, int depth, strbuf *b);

/* A new rule's name into name (the body follows from the caller). */
static void rule_name(gen *g, char *name, size_t cap)
{
    snprintf(name, cap, "%sr%d", g->prefix, g->n_rules++);
}

/* Writes "name ::= body" for the expression of s; name into out. */
static bool schema_rule(gen *g, const cJSON *s, const char *path, int depth, char *name,
                        size_t cap)
{
    rule_name(g, name, cap);
    strbuf body = {0};
    bool ok = schema_expr(g, s, path, depth, &body) &&
              addf(g, &g->out, "%s ::= ", name) && add(g, &g->out, body.p ? body.p : "\"\"") &&
              add(g, &g->out, "\n");
    free(body.p);
    return ok;
}

static const char *const known[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items",
    "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs",
    "definitions", "format", "minLength", "maxLength", "minimum", "nullable", "title",
    "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "strict", NULL};

static bool check_keywords(gen *g, const cJSON *s, const char *path)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(k->string, known[i]);
        if (!ok)
            return fail(g, "unsupported keyword '%.64s' at %s", k->string, path);
    }
    return true;
}

static bool ref_expr(gen *g, const char *ref, const char *path, int depth, strbuf *b)
{
    for (int i = 0; i < g->n_refs; i++)
        if (!strcmp(g->refs[i].ref, ref))
            return addf(g, b, "%sr%d", g->prefix, g->refs[i].rule);
    const cJSON *target = NULL;
    if (!strcmp(ref, "#")) {
        target = g->root;
    } else if (!strncmp(ref, "#/$defs/", 8) || !strncmp(ref, "#/definitions/", 14)) {
        const char *name = strchr(ref + 2, '/') + 1;
        char key[16];
        snprintf(key, sizeof key, "%.*s", (int)(name - ref - 3), ref + 2);
        target = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(g->root, key),
                                                  name);
    }
    if (!target)
        return fail(g, "'$ref' %.100s at %s: only #, #/$defs/NAME and #/definitions/NAME of "
                    "this schema are supported, and it must exist", ref, path);
    if (g->n_refs == MAX_REFS)
        return fail(g, "more than %d '$ref' targets", MAX_REFS);
    /* the rule is named before its body is written, so that the target may refer to itself */
    int rule = g->n_rules++;
    g->refs[g->n_refs].ref = strdup(ref);
    if (!g->refs[g->n_refs].ref) {
        return fail(g, "out of memory");
    }
    g->refs[g->n_refs++].rule = rule;
    strbuf body = {0};
    bool ok = schema_expr(g, target, ref, depth + 1, &body) &&
              addf(g, &g->out, "%sr%d ::= ", g->prefix, rule) && add(g, &g->out, body.p) &&
              add(g, &g->out, "\n");
    free(body.p);
    return ok && addf(g, b, "%sr%d", g->prefix, rule);
}

/* (a | b | ...) of the schemas in arr. */
static bool alternatives(gen *g, const cJSON *arr, const char *path, const char *kw, int depth,
                         strbuf *b)
{
    if (!cJSON_IsArray(arr) || !cJSON_GetArraySize(arr))
        return fail(g, "'%s' at %s must be a non-empty array of schemas", kw, path);
    bool ok = add(g, b, "(");
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        char sub[256];
        snprintf(sub, sizeof sub, "%.200s/%s/%d", path, kw, i);
        ok = ok && (!i++ || add(g, b, " | ")) && schema_expr(g, e, sub, depth + 1, b);
    }
    return ok && add(g, b, ")");
}

static int count_field(gen *g, const cJSON *s, const char *kw, const char *path, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kw);
    if (!v)
        return dflt;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1000 ||
        v->valuedouble != (int)v->valuedouble) {
        fail(g, "'%s' at %s must be an integer in [0, 1000]", kw, path);
        return -2;
    }
    return (int)v->valuedouble;
}

/* "a" (sep "a"){lo,hi}: n items in [min, max] (max -1: no bound), item the expression. */
static bool repeated(gen *g, strbuf *b, const char *item, const char *sep, int min, int max)
{
    if (max == 0)
        return add(g, b, "\"\"");
    char rest[64];
    if (max < 0)
        snprintf(rest, sizeof rest, "{%d,}", min > 1 ? min - 1 : 0);
    else
        snprintf(rest, sizeof rest, "{%d,%d}", min > 1 ? min - 1 : 0, max - 1);
    return addf(g, b, "(%s (%s %s)%s)%s", item, sep, item, rest, min ? "" : "?");
}

static bool array_expr(gen *g, const cJSON *s, const char *path, int depth, strbuf *b)
{
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    char sub[256];
    if (prefix) {
        if (!cJSON_IsArray(prefix))
            return fail(g, "'prefixItems' at %s must be an array of schemas", path);
        bool ok = add(g, b, "\"[\" ");
        prim(g, NULL, P_WS);
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, prefix) {
            snprintf(sub, sizeof sub, "%.200s/prefixItems/%d", path, i);
            ok = ok && (!i++ || addf(g, b, " \",\" %sws ", g->prefix)) &&
                 schema_expr(g, e, sub, depth + 1, b);
        }
        return ok && add(g, b, " \"]\"");
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    int min = count_field(g, s, "minItems", path, 0), max = count_field(g, s, "maxItems", path, -1);
    if (min < -1 || max < -1)
        return false;
    if (max >= 0 && max < min)
        return fail(g, "'maxItems' at %s is below 'minItems'", path);
    char item[128];
    if (items) {
        snprintf(sub, sizeof sub, "%.200s/items", path);
        if (!schema_rule(g, items, sub, depth + 1, item, sizeof item))
            return false;
    } else {
        strbuf v = {0};
        bool ok = prim(g, &v, P_VALUE);
        snprintf(item, sizeof item, "%s", ok ? v.p : "");
        free(v.p);
        if (!ok)
            return false;
    }
    char sep[96];
    snprintf(sep, sizeof sep, "\",\" %sws", g->prefix);
    return prim(g, NULL, P_WS) && add(g, b, "\"[\" ") && repeated(g, b, item, sep, min, max) &&
           add(g, b, " \"]\"");
}

/* An object's properties: written in the schema's order, required ones always, the others
 * possibly left out; required names the properties do not list come last, of any value. */
static bool object_expr(gen *g, const cJSON *s, const char *path, int depth, strbuf *b)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props))
        return fail(g, "'properties' at %s must be an object", path);
    if (req && !cJSON_IsArray(req))
        return fail(g, "'required' at %s must be an array of names", path);
    if (extra && !cJSON_IsBool(extra) && !cJSON_IsObject(extra))
        return fail(g, "'additionalProperties' at %s must be a boolean or a schema", path);
    int n = cJSON_GetArraySize(props) + cJSON_GetArraySize(req);
    char (*kv)[128] = calloc((size_t)n + 1, sizeof *kv);
    bool *must = calloc((size_t)n + 1, sizeof *must);
    if (!kv || !must) {
        free(kv);
        free(must);
        return fail(g, "out of memory");
    }
    int k = 0;
    bool ok = prim(g, NULL, P_WS);
    const cJSON *p, *r;
    /* each property as a rule: "\"name\"" ":" ws value */
    for (p = props ? props->child : NULL; ok && p; p = p->next) {
        char sub[256];
        snprintf(sub, sizeof sub, "%.150s/properties/%.80s", path, p->string);
        char value[128];
        cJSON *key = cJSON_CreateString(p->string);
        strbuf body = {0};
        ok = key && schema_rule(g, p, sub, depth + 1, value, sizeof value) &&
             literal(g, &body, key) && addf(g, &body, " \":\" %sws %s", g->prefix, value);
        cJSON_Delete(key);
        rule_name(g, kv[k], sizeof kv[k]);
        ok = ok && addf(g, &g->out, "%s ::= %s\n", kv[k], body.p);
        free(body.p);
        cJSON_ArrayForEach(r, req)
            must[k] |= cJSON_IsString(r) && !strcmp(r->valuestring, p->string);
        k++;
    }
    cJSON_ArrayForEach(r, req) {
        if (!ok)
            break;
        if (!cJSON_IsString(r)) {
            ok = fail(g, "'required' at %s must be an array of names", path);
            break;
        }
        if (cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            continue;
        cJSON *key = cJSON_CreateString(r->valuestring);
        strbuf body = {0};
        ok = key && literal(g, &body, key) && addf(g, &body, " \":\" %sws ", g->prefix) &&
             prim(g, &body, P_VALUE);
        cJSON_Delete(key);
        rule_name(g, kv[k], sizeof kv[k]);
        ok = ok && addf(g, &g->out, "%s ::= %s\n", kv[k], body.p);
        free(body.p);
        must[k++] = true;
    }
    if (ok && !k && !cJSON_IsFalse(extra)) {
        /* no properties named: any, of additionalProperties' schema (or any value) */
        char value[128], item[300], sep[96];
        strbuf v = {0};
        if (cJSON_IsObject(extra)) {
            char sub[256];
            snprintf(sub, sizeof sub, "%.200s/additionalProperties", path);
            ok = schema_rule(g, extra, sub, depth + 1, value, sizeof value);
        } else {
            ok = prim(g, &v, P_VALUE);
            snprintf(value, sizeof value, "%s", ok ? v.p : "");
        }
        free(v.p);
        snprintf(item, sizeof item, "%sstring \":\" %sws %s", g->prefix, g->prefix, value);
        snprintf(sep, sizeof sep, "\",\" %sws", g->prefix);
        ok = ok && prim(g, NULL, P_STRING) && add(g, b, "\"{\" ") &&
             repeated(g, b, item, sep, 0, -1) && add(g, b, " \"}\"");
        free(kv);
        free(must);
        return ok;
    }
    /* F_i: from property i on, none written yet (a rule per optional i); R_i inline */
    char (*f)[128] = calloc((size_t)k + 1, sizeof *f);
    ok = ok && f;
    for (int i = k - 1; ok && i >= 0; i--) {
        strbuf body = {0};
        ok = add(g, &body, kv[i]);
        for (int j = i + 1; ok && j < k; j++)
            ok = addf(g, &body, must[j] ? " \",\" %sws %s" : " (\",\" %sws %s)?", g->prefix, kv[j]);
        if (ok && !must[i])
            ok = add(g, &body, i + 1 < k ? " | " : " | \"\"") && (i + 1 == k || add(g, &body, f[i + 1]));
        rule_name(g, f[i], sizeof f[i]);
        ok = ok && addf(g, &g->out, "%s ::= %s\n", f[i], body.p);
        free(body.p);
    }
    ok = ok && add(g, b, "\"{\" ") && (!k || add(g, b, f[0])) && add(g, b, " \"}\"");
    free(f);
    free(kv);
    free(must);
    return ok;
}

static bool string_expr(gen *g, const cJSON *s, const char *path, strbuf *b)
{
    const char *format = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "format"));
    static const struct { const char *name; enum prim p; } formats[] = {
        {"date", P_DATE}, {"time", P_TIME}, {"date-time", P_DATETIME}, {"uuid", P_UUID}};
    for (size_t i = 0; format && i < sizeof formats / sizeof formats[0]; i++)
        if (!strcmp(format, formats[i].name))
            return add(g, b, "\"\\\"\" ") && prim(g, b, formats[i].p) && add(g, b, " \"\\\"\"");
    /* other formats (email, uri, ...) are annotations here: any string */
    int min = count_field(g, s, "minLength", path, 0), max = count_field(g, s, "maxLength", path, -1);
    if (min < -1 || max < -1)
        return false;
    if (!min && max < 0)
        return prim(g, b, P_STRING);
    if (max >= 0 && max < min)
        return fail(g, "'maxLength' at %s is below 'minLength'", path);
    if (max >= 0)
        return add(g, b, "\"\\\"\" ") && prim(g, b, P_CHAR) && addf(g, b, "{%d,%d} \"\\\"\"", min, max);
    return add(g, b, "\"\\\"\" ") && prim(g, b, P_CHAR) && addf(g, b, "{%d,} \"\\\"\"", min);
}

static bool integer_expr(gen *g, const cJSON *s, const char *path, strbuf *b)
{
    const cJSON *min = cJSON_GetObjectItemCaseSensitive(s, "minimum");
    if (!min)
        return prim(g, b, P_INTEGER);
    if (cJSON_IsNumber(min) && min->valuedouble == 0)
        return prim(g, b, P_NATURAL);
    if (cJSON_IsNumber(min) && min->valuedouble == 1)
        return prim(g, b, P_POSITIVE);
    return fail(g, "unsupported value of 'minimum' at %s (only 0 and 1, for integers)", path);
}

/* The expression for one type name. */
static bool type_expr(gen *g, const cJSON *s, const char *type, const char *path, int depth,
                      strbuf *b)
{
    if (cJSON_GetObjectItemCaseSensitive(s, "minimum") && !strcmp(type, "number"))
        return fail(g, "unsupported keyword 'minimum' at %s (only for integers)", path);
    if (!strcmp(type, "object"))
        return object_expr(g, s, path, depth, b);
    if (!strcmp(type, "array"))
        return array_expr(g, s, path, depth, b);
    if (!strcmp(type, "string"))
        return string_expr(g, s, path, b);
    if (!strcmp(type, "integer"))
        return integer_expr(g, s, path, b);
    static const struct { const char *name; enum prim p; } simple[] = {
        {"number", P_NUMBER}, {"boolean", P_BOOLEAN}, {"null", P_NULL}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!strcmp(type, simple[i].name))
            return prim(g, b, simple[i].p);
    return fail(g, "unknown type '%.40s' at %s", type, path);
}

static bool schema_expr(gen *g, const cJSON *s, const char *path, int depth, strbuf *b)
{
    if (depth > MAX_DEPTH)
        return fail(g, "the schema nests deeper than %d at %s", MAX_DEPTH, path);
    if (cJSON_IsBool(s))
        return cJSON_IsTrue(s) ? prim(g, b, P_VALUE)
                               : fail(g, "the schema at %s is false: nothing is valid", path);
    if (!cJSON_IsObject(s))
        return fail(g, "the schema at %s must be an object or a boolean", path);
    if (!check_keywords(g, s, path))
        return false;
    const cJSON *v;
    bool nullable = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "nullable"));
    strbuf inner = {0};
    strbuf *o = nullable ? &inner : b;
    bool ok;
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        ok = cJSON_IsString(v) ? ref_expr(g, v->valuestring, path, depth, o)
                               : fail(g, "'$ref' at %s must be a string", path);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "const"))) {
        ok = literal(g, o, v);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        if (!cJSON_IsArray(v) || !cJSON_GetArraySize(v))
            return fail(g, "'enum' at %s must be a non-empty array", path);
        ok = add(g, o, "(");
        const cJSON *e;
        cJSON_ArrayForEach(e, v)
            ok = ok && (e == v->child || add(g, o, " | ")) && literal(g, o, e);
        ok = ok && add(g, o, ")");
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) {
        ok = alternatives(g, v, path, "anyOf", depth, o);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        ok = alternatives(g, v, path, "oneOf", depth, o);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "allOf"))) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 1)
            return fail(g, "'allOf' at %s: only one schema is supported", path);
        ok = schema_expr(g, v->child, path, depth + 1, o);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        if (cJSON_IsString(v)) {
            ok = type_expr(g, s, v->valuestring, path, depth, o);
        } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v)) {
            ok = add(g, o, "(");
            const cJSON *t;
            cJSON_ArrayForEach(t, v)
                ok = ok && (t == v->child || add(g, o, " | ")) &&
                     (cJSON_IsString(t) ? type_expr(g, s, t->valuestring, path, depth, o)
                                        : fail(g, "'type' at %s must name types", path));
            ok = ok && add(g, o, ")");
        } else {
            ok = fail(g, "'type' at %s must be a type name or an array of them", path);
        }
    } else if (cJSON_GetObjectItemCaseSensitive(s, "properties")) {
        ok = object_expr(g, s, path, depth, o);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "items")) {
        ok = array_expr(g, s, path, depth, o);
    } else {
        ok = prim(g, o, P_VALUE);
    }
    if (nullable) {
        ok = ok && add(g, b, "(") && add(g, b, inner.p) && add(g, b, " | ") && prim(g, b, P_NULL) &&
             add(g, b, ")");
        free(inner.p);
    }
    return ok;
}

const char *json_schema_rule(const char *prefix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%stop", prefix ? prefix : "");
    return buf;
}

char *json_schema_grammar(const cJSON *schema, const char *prefix, char *err, size_t errlen)
{
    gen *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *g = (gen){.root = schema, .err = err, .errlen = errlen};
    size_t n = prefix ? strspn(prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789-") : 0;
    snprintf(g->prefix, sizeof g->prefix, "%.*s", (int)(n < 40 ? n : 40), prefix ? prefix : "");
    strbuf top = {0};
    char name[80];
    json_schema_rule(g->prefix, name, sizeof name);
    bool ok = schema_expr(g, schema, "#", 0, &top) && addf(g, &g->out, "%s ::= ", name) &&
              add(g, &g->out, top.p) && add(g, &g->out, "\n") &&
              (*g->prefix || add(g, &g->out, "root ::= top\n"));
    free(top.p);
    for (int i = 0; i < g->n_refs; i++)
        free(g->refs[i].ref);
    char *out = ok ? g->out.p : NULL;
    if (!ok)
        free(g->out.p);
    free(g);
    return out;
}

const char *json_object_grammar(void)
{
    return "root ::= object\n"
           "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\"\n"
           "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
           "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\"\n"
           "string ::= \"\\\"\" ([^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
           "[0-9a-fA-F]{4}))* \"\\\"\"\n"
           "number ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15}) (\".\" [0-9]{1,16})? "
           "([eE] [-+]? [0-9]{1,3})?\n"
           "ws ::= \" \"?\n";
}
