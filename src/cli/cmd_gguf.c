/* prima gguf — inspect GGUF files: metadata, tensor table and totals, as text or JSON. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "gguf/gguf.h"

/* Arrays longer than this are shown as their first ARRAY_HEAD elements and a count. */
#define ARRAY_SHOWN 8
#define ARRAY_HEAD 6
/* String values longer than this (chat templates) are cut in the text listing. */
#define STRING_SHOWN 72

static const char usage_head[] =
    "usage: prima gguf info FILE [--json]\n"
    "\n"
    "Validate a GGUF file (versions 2 and 3) and describe it. An invalid file gives a one-line\n"
    "error naming the file, the item and the problem, and exit status 1.\n"
    "\n"
    "  info FILE   print the header (version, alignment, data offset), every metadata key with\n"
    "              its type and value, the tensor table (name, type, shape, bytes, offset from\n"
    "              the start of the data section) and the totals: parameters, and tensors,\n"
    "              parameters and bytes per tensor type.\n"
    "              Arrays longer than 8 elements show their first 6 and a count; strings longer\n"
    "              than 72 bytes are cut (with their full length shown).\n"
    "\n";
static const char usage_tail[] =
    "\n"
    "Exit status: 0 on success, 1 if the file cannot be read or is invalid, 2 on a usage error.\n";

static uint64_t tensor_params(const gguf_tensor *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

/* ---- text ---- */

/* The length of the UTF-8 sequence at p (n bytes left) when it is well formed (shortest form,
 * no surrogate, at most U+10FFFF) and encodes a character a terminal prints rather than obeys
 * (not a C1 control such as U+009B, CSI); else 0. */
static int printable_utf8(const unsigned char *p, uint64_t n)
{
    int len = p[0] >= 0xc2 && p[0] < 0xe0 ? 2 : p[0] >= 0xe0 && p[0] < 0xf0 ? 3
              : p[0] >= 0xf0 && p[0] < 0xf5 ? 4 : 0;
    if (!len || (uint64_t)len > n)
        return 0;
    uint32_t cp = p[0] & (0x7fu >> len);
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    static const uint32_t shortest[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < shortest[len] || cp < 0xa0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* src[0, len) made safe for a terminal: printable ASCII and printable UTF-8 characters as they
 * are; every other byte (C0 and C1 controls, DEL, malformed UTF-8) as \xNN, so that a file
 * cannot send escape sequences; with quoted, also \" \\ and \n. Writes while the text fits in
 * cap bytes (NUL included) and returns how many bytes of src it wrote. */
static uint64_t escape_text(char *dst, size_t cap, const char *src, uint64_t len, bool quoted)
{
    size_t n = 0;
    uint64_t i = 0;
    while (i < len) {
        const unsigned char *c = (const unsigned char *)src + i;
        char piece[8];
        size_t plen = 1;
        int used = c[0] >= 0x80 ? printable_utf8(c, len - i) : 1;
        if (used > 1) {
            memcpy(piece, c, (size_t)used);
            plen = (size_t)used;
        } else if (quoted && (c[0] == '"' || c[0] == '\\' || c[0] == '\n')) {
            piece[0] = '\\';
            piece[1] = c[0] == '\n' ? 'n' : (char)c[0];
            plen = 2;
            used = 1;
        } else if (c[0] < 0x20 || c[0] >= 0x7f) {
            plen = (size_t)snprintf(piece, sizeof piece, "\\x%02x", c[0]);
            used = 1;
        } else {
            piece[0] = (char)c[0];
        }
        if (n + plen >= cap)
            break;
        memcpy(dst + n, piece, plen);
        n += plen;
        i += (uint64_t)used;
    }
    dst[n] = 0;
    return i;
}

/* A string from the file, quoted and escaped; cut after max bytes. */
static void print_quoted(const char *p, uint64_t len, uint64_t max)
{
    char buf[STRING_SHOWN * 4 + 1];
    uint64_t n = escape_text(buf, sizeof buf, p, len < max ? len : max, true);
    printf("\"%s\"", buf);
    if (n < len)
        printf("... (%" PRIu64 " bytes)", len);
}

/* A key, tensor name or path for the listing, escaped; names longer than the buffer are cut
 * with "...". */
static const char *clean_name(const char *p, uint64_t len, char *buf, size_t cap)
{
    if (escape_text(buf, cap - 3, p, len, false) < len)
        strcat(buf, "...");
    return buf;
}

static void print_array(const gguf_array *a)
{
    printf("[%s x %" PRIu64 "]", gguf_vtype_name(a->type), a->n);
    uint64_t shown = a->n > ARRAY_SHOWN ? ARRAY_HEAD : a->n;
    for (uint64_t i = 0; i < shown; i++) {
        fputs(i ? ", " : " ", stdout);
        switch (a->type) {
        case GGUF_STRING:
            print_quoted(a->strs[i].ptr, a->strs[i].len, STRING_SHOWN);
            break;
        case GGUF_ARRAY:
            printf("[%s x %" PRIu64 "]", gguf_vtype_name(a->arrs[i].type), a->arrs[i].n);
            break;
        case GGUF_F32:
        case GGUF_F64:
            printf("%g", gguf_arr_float(a, i));
            break;
        case GGUF_BOOL:
            fputs(gguf_arr_int(a, i) ? "true" : "false", stdout);
            break;
        case GGUF_U64:
            printf("%.0f", gguf_arr_float(a, i)); /* exact for values up to 2^53 */
            break;
        default:
            printf("%" PRId64, gguf_arr_int(a, i));
            break;
        }
    }
    if (shown < a->n)
        printf(", ... (%" PRIu64 " more)", a->n - shown);
}

static void print_value(const gguf_kv *kv)
{
    switch (kv->type) {
    case GGUF_STRING:
        print_quoted(kv->v.str.ptr, kv->v.str.len, STRING_SHOWN);
        break;
    case GGUF_ARRAY:
        print_array(&kv->v.arr);
        break;
    case GGUF_F32:
    case GGUF_F64:
        printf("%g", kv->v.f64);
        break;
    case GGUF_BOOL:
        fputs(kv->v.u64 ? "true" : "false", stdout);
        break;
    case GGUF_I8:
    case GGUF_I16:
    case GGUF_I32:
    case GGUF_I64:
        printf("%" PRId64, kv->v.i64);
        break;
    default:
        printf("%" PRIu64, kv->v.u64);
        break;
    }
}

struct type_total {
    uint64_t tensors, params, bytes;
};

static void type_totals(const gguf_file *f, struct type_total *by_type, uint64_t *params,
                        uint64_t *bytes)
{
    memset(by_type, 0, DT_COUNT * sizeof *by_type);
    *params = *bytes = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        by_type[t->type].tensors++;
        by_type[t->type].params += tensor_params(t);
        by_type[t->type].bytes += t->nbytes;
        *params += tensor_params(t);
        *bytes += t->nbytes;
    }
}

static void print_text(const gguf_file *f)
{
    char path[1024];
    printf("file: %s\nversion: %u  alignment: %" PRIu64 "  size: %" PRIu64
           " bytes  data offset: %" PRIu64 "\n", clean_name(f->path, strlen(f->path), path, sizeof path),
           f->version, f->alignment, f->size, f->data_offset);

    int key_width = 0;
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key.len > (uint64_t)key_width)
            key_width = f->kv[i].key.len > 48 ? 48 : (int)f->kv[i].key.len;
    printf("\nmetadata: %" PRIu64 " keys\n", f->n_kv);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        char name[256];
        printf("  %-*s  %-6s  ", key_width, clean_name(kv->key.ptr, kv->key.len, name, sizeof name),
               gguf_vtype_name(kv->type));
        print_value(kv);
        putchar('\n');
    }

    int name_width = 4;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name.len > (uint64_t)name_width)
            name_width = f->tensors[i].name.len > 64 ? 64 : (int)f->tensors[i].name.len;
    printf("\ntensors: %" PRIu64 "\n", f->n_tensors);
    if (f->n_tensors)
        printf("  %-*s  %-7s  %-22s  %14s  %14s\n", name_width, "name", "type", "shape", "bytes",
               "offset");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char shape[96];
        int n = 0;
        for (uint32_t d = 0; d < t->n_dims; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRIu64, d ? " x " : "",
                          t->ne[d]);
        char name[256];
        printf("  %-*s  %-7s  %-22s  %14" PRIu64 "  %14" PRIu64 "\n", name_width,
               clean_name(t->name.ptr, t->name.len, name, sizeof name), dtype_get(t->type)->name, shape, t->nbytes,
               t->offset);
    }

    struct type_total by_type[DT_COUNT];
    uint64_t params, bytes;
    type_totals(f, by_type, &params, &bytes);
    printf("\ntotals: %" PRIu64 " parameters (%.2f M), %" PRIu64 " bytes of tensor data (%.2f MiB)\n",
           params, params / 1e6, bytes, bytes / 1048576.0);
    for (int t = 0; t < DT_COUNT; t++)
        if (by_type[t].tensors)
            printf("  %-7s  %5" PRIu64 " tensors  %14" PRIu64 " parameters  %14" PRIu64 " bytes\n",
                   dtype_get((uint32_t)t)->name, by_type[t].tensors, by_type[t].params,
                   by_type[t].bytes);
}

/* ---- JSON ---- */

/* JSON strings must be valid UTF-8 without NULs: invalid bytes become U+FFFD. */
static cJSON *json_string(const char *p, uint64_t len)
{
    char *buf = malloc(len * 3 + 1);
    if (!buf)
        return NULL;
    size_t o = 0;
    for (uint64_t i = 0; i < len;) {
        unsigned char c = (unsigned char)p[i];
        int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        bool ok = n > 0 && c != 0 && i + (uint64_t)n <= len && !(n == 2 && c < 0xc2) && !(c > 0xf4);
        for (int k = 1; ok && k < n; k++)
            ok = ((unsigned char)p[i + k] & 0xc0) == 0x80;
        if (ok && n == 3) { /* overlong forms and UTF-16 surrogates */
            unsigned char c1 = (unsigned char)p[i + 1];
            ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
        }
        if (ok && n == 4) {
            unsigned char c1 = (unsigned char)p[i + 1];
            ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
        }
        if (ok) {
            memcpy(buf + o, p + i, (size_t)n);
            o += (size_t)n;
            i += (uint64_t)n;
        } else {
            memcpy(buf + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    buf[o] = 0;
    cJSON *s = cJSON_CreateString(buf);
    free(buf);
    return s;
}

static cJSON *json_array(const gguf_array *a)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "element_type", gguf_vtype_name(a->type));
    cJSON_AddNumberToObject(o, "count", (double)a->n);
    cJSON *head = cJSON_AddArrayToObject(o, "head");
    uint64_t shown = a->n < ARRAY_SHOWN ? a->n : ARRAY_SHOWN;
    for (uint64_t i = 0; i < shown; i++) {
        cJSON *v;
        if (a->type == GGUF_STRING)
            v = json_string(a->strs[i].ptr, a->strs[i].len);
        else if (a->type == GGUF_ARRAY)
            v = json_array(&a->arrs[i]);
        else if (a->type == GGUF_BOOL)
            v = cJSON_CreateBool(gguf_arr_int(a, i) != 0);
        else
            v = cJSON_CreateNumber(gguf_arr_float(a, i));
        cJSON_AddItemToArray(head, v);
    }
    return o;
}

static cJSON *json_value(const gguf_kv *kv)
{
    switch (kv->type) {
    case GGUF_STRING: return json_string(kv->v.str.ptr, kv->v.str.len);
    case GGUF_ARRAY: return json_array(&kv->v.arr);
    case GGUF_BOOL: return cJSON_CreateBool(kv->v.u64 != 0);
    case GGUF_F32: case GGUF_F64: return cJSON_CreateNumber(kv->v.f64);
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64:
        return cJSON_CreateNumber((double)kv->v.i64);
    default: return cJSON_CreateNumber((double)kv->v.u64);
    }
}

static int print_json(const gguf_file *f)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "file", json_string(f->path, strlen(f->path)));
    cJSON_AddNumberToObject(root, "version", f->version);
    cJSON_AddNumberToObject(root, "alignment", (double)f->alignment);
    cJSON_AddNumberToObject(root, "size", (double)f->size);
    cJSON_AddNumberToObject(root, "data_offset", (double)f->data_offset);
    cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
    for (uint64_t i = 0; i < f->n_kv; i++) {
        cJSON *key = json_string(f->kv[i].key.ptr, f->kv[i].key.len);
        cJSON_AddItemToObject(meta, key ? key->valuestring : "", json_value(&f->kv[i]));
        cJSON_Delete(key);
    }
    cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "name", json_string(t->name.ptr, t->name.len));
        cJSON_AddStringToObject(o, "type", dtype_get(t->type)->name);
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (uint32_t d = 0; d < t->n_dims; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->ne[d]));
        cJSON_AddNumberToObject(o, "parameters", (double)tensor_params(t));
        cJSON_AddNumberToObject(o, "bytes", (double)t->nbytes);
        cJSON_AddNumberToObject(o, "offset", (double)t->offset);
        cJSON_AddItemToArray(tensors, o);
    }
    struct type_total by_type[DT_COUNT];
    uint64_t params, bytes;
    type_totals(f, by_type, &params, &bytes);
    cJSON *totals = cJSON_AddObjectToObject(root, "totals");
    cJSON_AddNumberToObject(totals, "parameters", (double)params);
    cJSON_AddNumberToObject(totals, "bytes", (double)bytes);
    cJSON *types = cJSON_AddObjectToObject(totals, "by_type");
    for (int t = 0; t < DT_COUNT; t++) {
        if (!by_type[t].tensors)
            continue;
        cJSON *o = cJSON_AddObjectToObject(types, dtype_get((uint32_t)t)->name);
        cJSON_AddNumberToObject(o, "tensors", (double)by_type[t].tensors);
        cJSON_AddNumberToObject(o, "parameters", (double)by_type[t].params);
        cJSON_AddNumberToObject(o, "bytes", (double)by_type[t].bytes);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text)
        return cli_fail("gguf info: out of memory formatting JSON");
    puts(text);
    free(text);
    return 0;
}

static const cli_opt gguf_rows[] = {
    {"--json", NULL, CLI_FLAG, 0,
     .help = "info as one JSON object on stdout: file, version, alignment,\n"
             "size, data_offset, metadata {key: value} (arrays as\n"
             "{element_type, count, head} with up to 8 elements in head;\n"
             "strings in full), tensors [{name, type, shape, parameters,\n"
             "bytes, offset}], totals {parameters, bytes, by_type {TYPE:\n"
             "{tensors, parameters, bytes}}}."},
    {0},
};
static const cli_group gguf_group = {NULL, gguf_rows, NULL};

static int gguf_main(int argc, char **argv)
{
    bool json = false;
    const cli_set set = {.g = &gguf_group, .dst = &json};
    int pos;
    int prc = cli_opts_parse("gguf", &set, 1, argc, argv, usage_head, usage_tail, &pos);
    if (prc)
        return prc < 0 ? 0 : prc;
    if (argc - pos > 2)
        return cli_usage_error("gguf", "unexpected argument '%s'", argv[pos + 2]);
    const char *action = pos < argc ? argv[pos] : NULL;
    const char *path = pos + 1 < argc ? argv[pos + 1] : NULL;
    if (!action)
        return cli_fail("gguf: missing action (see prima gguf --help)"), 2;
    if (strcmp(action, "info"))
        return cli_fail("gguf: unknown action '%s' (see prima gguf --help)", action), 2;
    if (!path)
        return cli_fail("gguf info: missing FILE (see prima gguf --help)"), 2;

    char err[512];
    gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f)
        return cli_fail("%s", err);
    int rc = 0;
    if (json)
        rc = print_json(f);
    else
        print_text(f);
    gguf_close(f);
    if (fflush(stdout) || ferror(stdout))
        return cli_fail("gguf info: error writing output");
    return rc;
}

const struct cli_command cli_cmd_gguf = {"gguf", "inspect and validate a GGUF file (info)", gguf_main};
