/* gguf.c — GGUF reader: validates the whole header, then hands out pointers into one read-only
 * mapping of the file.
 *
 * Every count read from the file is checked against the bytes that remain before anything is
 * allocated for it, so the memory used is at most a small multiple of the file size whatever the
 * header claims. All multi-byte fields are little-endian; they are read with memcpy because
 * nothing in the format guarantees their alignment. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
/* Alignment values beyond this are not a layout anyone uses; refusing them keeps offset
 * arithmetic far from overflow. */
#define GGUF_MAX_ALIGNMENT (1u << 30)
/* Nested arrays recurse; bound the depth so a crafted file cannot exhaust the stack. */
#define GGUF_MAX_ARRAY_DEPTH 8

/* gguf_file plus what only the reader needs to know: whether the bytes are our mapping. */
typedef struct gguf_file_priv {
    gguf_file pub;
    bool mapped;
} gguf_file_priv;

static const struct {
    const char *name;
    uint32_t size; /* bytes of one value; 0 for variable-size types */
} vtypes[GGUF_VTYPE_COUNT] = {
    [GGUF_U8] = {"u8", 1},     [GGUF_I8] = {"i8", 1},         [GGUF_U16] = {"u16", 2},
    [GGUF_I16] = {"i16", 2},   [GGUF_U32] = {"u32", 4},       [GGUF_I32] = {"i32", 4},
    [GGUF_F32] = {"f32", 4},   [GGUF_BOOL] = {"bool", 1},     [GGUF_STRING] = {"string", 0},
    [GGUF_ARRAY] = {"array", 0}, [GGUF_U64] = {"u64", 8},     [GGUF_I64] = {"i64", 8},
    [GGUF_F64] = {"f64", 8},
};

const char *gguf_vtype_name(enum gguf_vtype t)
{
    return (unsigned)t < GGUF_VTYPE_COUNT ? vtypes[t].name : "invalid";
}

/* ---- cursor over the untrusted bytes ---- */

typedef struct reader {
    const uint8_t *p;
    uint64_t size, pos;
    const char *path;
    char item[128]; /* what is being read, for error messages ("kv 3 'general.name'") */
    char *err;
    size_t errlen;
} reader;

/* Names come from the file: keep only printable ASCII so an error stays one line. */
static void printable(char *dst, size_t cap, const char *src, uint64_t len)
{
    size_t n = 0;
    for (uint64_t i = 0; i < len && n + 4 < cap; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (len > n && n + 4 >= cap && cap >= 4) {
        memcpy(dst + n, "...", 3);
        n += 3;
    }
    dst[n] = 0;
}

static int fail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(reader *r, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->err && r->errlen)
        snprintf(r->err, r->errlen, "%s: %s%s%s", r->path, r->item, r->item[0] ? ": " : "", msg);
    return -1;
}

static void set_item(reader *r, const char *kind, uint64_t index, const gguf_str *name)
{
    if (!name) {
        snprintf(r->item, sizeof r->item, "%s %llu", kind, (unsigned long long)index);
        return;
    }
    char shown[72];
    printable(shown, sizeof shown, name->ptr, name->len);
    snprintf(r->item, sizeof r->item, "%s %llu '%s'", kind, (unsigned long long)index, shown);
}

static uint64_t remaining(const reader *r)
{
    return r->size - r->pos;
}

static int need(reader *r, uint64_t n, const char *what)
{
    if (n > remaining(r))
        return fail(r, "%s needs %llu bytes at offset %llu, past the end of the file (size %llu)",
                    what, (unsigned long long)n, (unsigned long long)r->pos,
                    (unsigned long long)r->size);
    return 0;
}

static int read_bytes(reader *r, void *dst, uint64_t n, const char *what)
{
    if (need(r, n, what))
        return -1;
    memcpy(dst, r->p + r->pos, n);
    r->pos += n;
    return 0;
}

static int read_u32(reader *r, uint32_t *v, const char *what)
{
    return read_bytes(r, v, sizeof *v, what);
}

static int read_u64(reader *r, uint64_t *v, const char *what)
{
    return read_bytes(r, v, sizeof *v, what);
}

static int read_str(reader *r, gguf_str *s, const char *what)
{
    uint64_t len;
    if (read_u64(r, &len, what))
        return -1;
    if (len > remaining(r))
        return fail(r, "%s length %llu at offset %llu runs past the end of the file (size %llu)",
                    what, (unsigned long long)len, (unsigned long long)(r->pos - 8),
                    (unsigned long long)r->size);
    s->ptr = (const char *)r->p + r->pos;
    s->len = len;
    r->pos += len;
    return 0;
}

static int read_vtype(reader *r, enum gguf_vtype *t, const char *what)
{
    uint32_t v;
    if (read_u32(r, &v, what))
        return -1;
    if (v >= GGUF_VTYPE_COUNT)
        return fail(r, "unknown %s %u", what, v);
    *t = (enum gguf_vtype)v;
    return 0;
}

/* ---- values ---- */

static void free_array(gguf_array *a)
{
    if (a->arrs)
        for (uint64_t i = 0; i < a->n; i++)
            free_array(&a->arrs[i]);
    free(a->arrs);
    free(a->strs);
    a->arrs = NULL;
    a->strs = NULL;
}

/* A bound on how many elements of type t can fit in the remaining bytes: the fixed size, or the
 * smallest encoding of a string (its length) or array (element type + count). */
static uint64_t min_encoded_size(enum gguf_vtype t)
{
    if (t == GGUF_STRING)
        return 8;
    if (t == GGUF_ARRAY)
        return 12;
    return vtypes[t].size;
}

static int read_array(reader *r, gguf_array *a, int depth)
{
    memset(a, 0, sizeof *a);
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return fail(r, "arrays nested deeper than %d levels", GGUF_MAX_ARRAY_DEPTH);
    if (read_vtype(r, &a->type, "array element type") || read_u64(r, &a->n, "array count"))
        return -1;
    uint64_t n = a->n;
    if (n > remaining(r) / min_encoded_size(a->type)) {
        a->n = 0;
        return fail(r, "array of %llu %s elements at offset %llu cannot fit in the %llu bytes "
                    "left in the file", (unsigned long long)n, vtypes[a->type].name,
                    (unsigned long long)(r->pos - 12), (unsigned long long)remaining(r));
    }
    if (a->type == GGUF_STRING) {
        a->strs = calloc(n ? n : 1, sizeof *a->strs);
        if (!a->strs)
            return fail(r, "out of memory for %llu strings", (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            if (read_str(r, &a->strs[i], "array string"))
                return -1;
        return 0;
    }
    if (a->type == GGUF_ARRAY) {
        a->arrs = calloc(n ? n : 1, sizeof *a->arrs);
        if (!a->arrs)
            return fail(r, "out of memory for %llu arrays", (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            if (read_array(r, &a->arrs[i], depth + 1))
                return -1;
        return 0;
    }
    a->data = r->p + r->pos;
    if (a->type == GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (r->p[r->pos + i] > 1)
                return fail(r, "bool array element %llu is %u (must be 0 or 1)",
                            (unsigned long long)i, r->p[r->pos + i]);
    r->pos += n * vtypes[a->type].size;
    return 0;
}

static int read_value(reader *r, gguf_kv *kv)
{
    uint8_t b[8];
    switch (kv->type) {
    case GGUF_STRING:
        return read_str(r, &kv->v.str, "string value");
    case GGUF_ARRAY:
        return read_array(r, &kv->v.arr, 1);
    default:
        break;
    }
    uint32_t size = vtypes[kv->type].size;
    if (read_bytes(r, b, size, "value"))
        return -1;
    uint8_t u8;
    int8_t i8;
    uint16_t u16;
    int16_t i16;
    uint32_t u32;
    int32_t i32;
    float f32;
    switch (kv->type) {
    case GGUF_U8: memcpy(&u8, b, 1); kv->v.u64 = u8; break;
    case GGUF_I8: memcpy(&i8, b, 1); kv->v.i64 = i8; break;
    case GGUF_U16: memcpy(&u16, b, 2); kv->v.u64 = u16; break;
    case GGUF_I16: memcpy(&i16, b, 2); kv->v.i64 = i16; break;
    case GGUF_U32: memcpy(&u32, b, 4); kv->v.u64 = u32; break;
    case GGUF_I32: memcpy(&i32, b, 4); kv->v.i64 = i32; break;
    case GGUF_F32: memcpy(&f32, b, 4); kv->v.f64 = f32; break;
    case GGUF_U64: memcpy(&kv->v.u64, b, 8); break;
    case GGUF_I64: memcpy(&kv->v.i64, b, 8); break;
    case GGUF_F64: memcpy(&kv->v.f64, b, 8); break;
    case GGUF_BOOL:
        if (b[0] > 1)
            return fail(r, "bool value is %u (must be 0 or 1)", b[0]);
        kv->v.u64 = b[0];
        break;
    default:
        break;
    }
    return 0;
}

/* ---- duplicate detection: sort pointers to names, compare neighbours ---- */

static int cmp_str(const gguf_str *a, const gguf_str *b)
{
    uint64_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->ptr, b->ptr, n);
    if (c)
        return c;
    return (a->len > b->len) - (a->len < b->len);
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return cmp_str(*(const gguf_str *const *)a, *(const gguf_str *const *)b);
}

/* names[i] points at the name of item i; finds a name that occurs twice. */
/* Fails naming the first of `names` (reordered) that appears twice; `what` says what they are. */
static int refuse_duplicates(reader *r, const gguf_str **names, uint64_t n, const char *what)
{
    if (n < 2)
        return 0;
    qsort(names, n, sizeof *names, cmp_str_ptr);
    for (uint64_t i = 1; i < n; i++)
        if (!cmp_str(names[i - 1], names[i])) {
            char shown[72];
            printable(shown, sizeof shown, names[i]->ptr, names[i]->len);
            return fail(r, "%s '%s' appears more than once", what, shown);
        }
    return 0;
}

/* ---- header sections ---- */

/* The table of n entries of a header section, after checking that n entries of at least
 * min_bytes each fit in what is left of the file: a count in the header never drives an
 * allocation larger than the file. */
static void *alloc_entries(reader *r, uint64_t n, uint64_t min_bytes, size_t size, const char *what)
{
    if (n > remaining(r) / min_bytes) {
        fail(r, "%llu %s cannot fit in the %llu bytes left in the file", (unsigned long long)n,
             what, (unsigned long long)remaining(r));
        return NULL;
    }
    void *p = calloc(n ? n : 1, size);
    if (!p)
        fail(r, "out of memory for %llu %s", (unsigned long long)n, what);
    return p;
}

/* The GGUF specification makes keys ASCII; printable ASCII is what every real key is, and
 * what lets a key be named in a message. at: the offset of the key's length field. */
static int check_key(reader *r, const gguf_str *key, uint64_t at)
{
    for (uint64_t i = 0; i < key->len; i++) {
        unsigned char c = (unsigned char)key->ptr[i];
        if (c < 0x20 || c > 0x7e)
            return fail(r, "the key at offset %llu has byte 0x%02x at offset %llu: GGUF keys are "
                        "printable ASCII", (unsigned long long)at, c,
                        (unsigned long long)(at + 8 + i));
    }
    return 0;
}

static int read_kvs(reader *r, gguf_file *f)
{
    /* every kv is at least a key length, a value type and one byte of value */
    f->kv = alloc_entries(r, f->n_kv, 13, sizeof *f->kv, "metadata entries");
    if (!f->kv)
        return -1;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        set_item(r, "kv", i, NULL);
        uint64_t at = r->pos;
        if (read_str(r, &kv->key, "key") || check_key(r, &kv->key, at))
            return -1;
        set_item(r, "kv", i, &kv->key);
        if (read_vtype(r, &kv->type, "value type") || read_value(r, kv))
            return -1;
    }
    r->item[0] = 0;
    const gguf_str **keys = malloc((f->n_kv ? f->n_kv : 1) * sizeof *keys);
    if (!keys)
        return fail(r, "out of memory");
    for (uint64_t i = 0; i < f->n_kv; i++)
        keys[i] = &f->kv[i].key;
    int rc = refuse_duplicates(r, keys, f->n_kv, "metadata key");
    free(keys);
    return rc;
}

static int read_alignment(reader *r, gguf_file *f)
{
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find(f, "general.alignment");
    if (!kv)
        return 0;
    snprintf(r->item, sizeof r->item, "kv 'general.alignment'");
    if (kv->type != GGUF_U32 && kv->type != GGUF_U64 && kv->type != GGUF_U16 && kv->type != GGUF_U8)
        return fail(r, "type %s (must be an unsigned integer)", gguf_vtype_name(kv->type));
    uint64_t a = kv->v.u64;
    if (a == 0 || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT)
        return fail(r, "%llu is not a power of two between 1 and %u", (unsigned long long)a,
                    GGUF_MAX_ALIGNMENT);
    f->alignment = a;
    r->item[0] = 0;
    return 0;
}

/* Element count and byte size of t, refusing products that overflow. */
static int tensor_size(reader *r, gguf_tensor *t)
{
    const dtype_info *d = dtype_get(t->type);
    uint64_t n = 1;
    for (uint32_t i = 0; i < GGUF_MAX_DIMS; i++) {
        if (t->ne[i] > (uint64_t)INT64_MAX)
            return fail(r, "dimension %u is %llu (more than 2^63-1)", i,
                        (unsigned long long)t->ne[i]);
        if (__builtin_mul_overflow(n, t->ne[i], &n) || n > (uint64_t)INT64_MAX)
            return fail(r, "the product of the dimensions overflows 63 bits");
    }
    if (t->ne[0] % d->block_size)
        return fail(r, "row length %llu is not a multiple of the %s block size %u",
                    (unsigned long long)t->ne[0], d->name, d->block_size);
    uint64_t bytes = t->ne[0] / d->block_size * d->block_bytes;
    for (uint32_t i = 1; i < GGUF_MAX_DIMS; i++)
        if (__builtin_mul_overflow(bytes, t->ne[i], &bytes))
            return fail(r, "the byte size overflows 64 bits");
    t->nbytes = bytes;
    return 0;
}

static int read_tensor_infos(reader *r, gguf_file *f)
{
    /* every tensor info is at least a name length, n_dims, one dim, a type and an offset */
    f->tensors = alloc_entries(r, f->n_tensors, 32, sizeof *f->tensors, "tensors");
    if (!f->tensors)
        return -1;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        set_item(r, "tensor", i, NULL);
        if (read_str(r, &t->name, "name"))
            return -1;
        set_item(r, "tensor", i, &t->name);
        if (read_u32(r, &t->n_dims, "n_dims"))
            return -1;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
            return fail(r, "%u dimensions (must be 1..%d)", t->n_dims, GGUF_MAX_DIMS);
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (read_u64(r, &t->ne[d], "dimension"))
                return -1;
        uint32_t type;
        if (read_u32(r, &type, "type"))
            return -1;
        if (!dtype_get(type))
            return fail(r, "unknown tensor type %u", type);
        t->type = (enum dtype)type;
        if (read_u64(r, &t->offset, "offset") || tensor_size(r, t))
            return -1;
        if (t->offset % f->alignment)
            return fail(r, "offset %llu is not a multiple of the alignment %llu",
                        (unsigned long long)t->offset, (unsigned long long)f->alignment);
    }
    r->item[0] = 0;
    return 0;
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Data ranges: inside the file, pairwise disjoint, names unique. */
static int check_tensor_data(reader *r, gguf_file *f)
{
    uint64_t data_size = f->data_offset <= f->size ? f->size - f->data_offset : 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (f->data_offset > f->size || t->offset > data_size || t->nbytes > data_size - t->offset) {
            set_item(r, "tensor", i, &t->name);
            return fail(r, "data [%llu, +%llu) runs past the end of the file (data section "
                        "starts at %llu, file size %llu)", (unsigned long long)t->offset,
                        (unsigned long long)t->nbytes, (unsigned long long)f->data_offset,
                        (unsigned long long)f->size);
        }
        t->data = f->map + f->data_offset + t->offset;
    }
    if (f->n_tensors < 2)
        return 0;
    const gguf_tensor **order = malloc(f->n_tensors * sizeof *order);
    if (!order)
        return fail(r, "out of memory");
    for (uint64_t i = 0; i < f->n_tensors; i++)
        order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof *order, cmp_tensor_offset);
    const gguf_tensor *prev = NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = order[i];
        if (t->nbytes == 0)
            continue;
        if (prev && prev->offset + prev->nbytes > t->offset) {
            char a[72], b[72];
            printable(a, sizeof a, prev->name.ptr, prev->name.len);
            printable(b, sizeof b, t->name.ptr, t->name.len);
            free(order);
            return fail(r, "tensor '%s' data [%llu, +%llu) overlaps tensor '%s' at %llu", a,
                        (unsigned long long)prev->offset, (unsigned long long)prev->nbytes, b,
                        (unsigned long long)t->offset);
        }
        prev = t;
    }
    free(order);
    const gguf_str **names = malloc(f->n_tensors * sizeof *names);
    if (!names)
        return fail(r, "out of memory");
    for (uint64_t i = 0; i < f->n_tensors; i++)
        names[i] = &f->tensors[i].name;
    int rc = refuse_duplicates(r, names, f->n_tensors, "tensor name");
    free(names);
    return rc;
}

static int parse(reader *r, gguf_file *f)
{
    char magic[4];
    snprintf(r->item, sizeof r->item, "header");
    if (read_bytes(r, magic, 4, "magic"))
        return -1;
    if (memcmp(magic, GGUF_MAGIC, 4))
        return fail(r, "bad magic (not a GGUF file)");
    if (read_u32(r, &f->version, "version"))
        return -1;
    if (f->version == 0x03000000 || f->version == 0x02000000)
        return fail(r, "big-endian GGUF files are not supported");
    if (f->version != 2 && f->version != 3)
        return fail(r, "unsupported version %u (supported: 2, 3)", f->version);
    if (read_u64(r, &f->n_tensors, "tensor count") || read_u64(r, &f->n_kv, "metadata count"))
        return -1;
    r->item[0] = 0;
    if (read_kvs(r, f) || read_alignment(r, f) || read_tensor_infos(r, f))
        return -1;
    /* pos <= size and alignment <= 2^30, so this cannot overflow */
    f->data_offset = (r->pos + f->alignment - 1) / f->alignment * f->alignment;
    return check_tensor_data(r, f);
}

void gguf_close(gguf_file *f)
{
    if (!f)
        return;
    gguf_file_priv *pf = (gguf_file_priv *)f;
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++)
            if (f->kv[i].type == GGUF_ARRAY)
                free_array(&f->kv[i].v.arr);
    free(f->kv);
    free(f->tensors);
    if (pf->mapped && f->map)
        munmap((void *)f->map, f->size);
    free(f->path);
    free(pf);
}

static gguf_file *open_bytes(const uint8_t *map, uint64_t size, bool mapped, const char *path,
                             char *err, size_t errlen)
{
    gguf_file_priv *pf = calloc(1, sizeof *pf);
    char *path_copy = strdup(path);
    if (!pf || !path_copy) {
        free(pf);
        free(path_copy);
        if (mapped)
            munmap((void *)map, size);
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    gguf_file *f = &pf->pub;
    pf->mapped = mapped;
    f->path = path_copy;
    f->map = map;
    f->size = size;
    reader r = {.p = map, .size = size, .path = path, .err = err, .errlen = errlen};
    if (parse(&r, f)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open_memory(const void *buf, uint64_t size, const char *path, char *err,
                            size_t errlen)
{
    return open_bytes(buf, size, false, path, err, errlen);
}

gguf_file *gguf_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size == 0) {
        snprintf(err, errlen, "%s: header: empty file", path);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: cannot map %lld bytes: %s", path, (long long)st.st_size,
                 strerror(map_errno));
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    /* Decode streams every weight once per token. Advice given before the first touch makes a
     * cold read of the file land in 2 MB mappings (gguf/pages.h); where the kernel cannot, it is
     * ignored. */
    madvise(map, (size_t)st.st_size, MADV_HUGEPAGE);
#endif
    return open_bytes(map, (uint64_t)st.st_size, true, path, err, errlen);
}

/* ---- lookup and typed getters ---- */

bool gguf_str_eq(gguf_str s, const char *cstr)
{
    size_t n = strlen(cstr);
    return s.len == n && !memcmp(s.ptr, cstr, n);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key)
{
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key))
            return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_tensor_find(const gguf_file *f, const char *name)
{
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

static bool is_unsigned(enum gguf_vtype t)
{
    return t == GGUF_U8 || t == GGUF_U16 || t == GGUF_U32 || t == GGUF_U64;
}

static bool is_signed(enum gguf_vtype t)
{
    return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64;
}

int64_t gguf_get_int(const gguf_file *f, const char *key, int64_t def)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv)
        return def;
    if (is_signed(kv->type))
        return kv->v.i64;
    if (is_unsigned(kv->type) && kv->v.u64 <= (uint64_t)INT64_MAX)
        return (int64_t)kv->v.u64;
    return def;
}

double gguf_get_float(const gguf_file *f, const char *key, double def)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv)
        return def;
    if (kv->type == GGUF_F32 || kv->type == GGUF_F64)
        return kv->v.f64;
    if (is_signed(kv->type))
        return (double)kv->v.i64;
    if (is_unsigned(kv->type))
        return (double)kv->v.u64;
    return def;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool def)
{
    const gguf_kv *kv = gguf_find(f, key);
    return kv && kv->type == GGUF_BOOL ? kv->v.u64 != 0 : def;
}

bool gguf_get_str(const gguf_file *f, const char *key, char *buf, size_t bufsz)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_STRING || bufsz == 0)
        return false;
    size_t n = kv->v.str.len < bufsz - 1 ? (size_t)kv->v.str.len : bufsz - 1;
    memcpy(buf, kv->v.str.ptr, n);
    buf[n] = 0;
    return true;
}

const gguf_array *gguf_get_arr(const gguf_file *f, const char *key)
{
    const gguf_kv *kv = gguf_find(f, key);
    return kv && kv->type == GGUF_ARRAY ? &kv->v.arr : NULL;
}

/* Element i of a fixed-size array as the widest integer or float of its kind. */
static bool arr_elem(const gguf_array *a, uint64_t i, int64_t *iv, uint64_t *uv, double *fv)
{
    if (i >= a->n || !a->data)
        return false;
    const uint8_t *p = (const uint8_t *)a->data + i * vtypes[a->type].size;
    *iv = 0;
    *uv = 0;
    *fv = 0;
    switch (a->type) {
    case GGUF_U8: case GGUF_BOOL: { uint8_t v; memcpy(&v, p, 1); *uv = v; break; }
    case GGUF_I8: { int8_t v; memcpy(&v, p, 1); *iv = v; break; }
    case GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *uv = v; break; }
    case GGUF_I16: { int16_t v; memcpy(&v, p, 2); *iv = v; break; }
    case GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *uv = v; break; }
    case GGUF_I32: { int32_t v; memcpy(&v, p, 4); *iv = v; break; }
    case GGUF_U64: memcpy(uv, p, 8); break;
    case GGUF_I64: memcpy(iv, p, 8); break;
    case GGUF_F32: { float v; memcpy(&v, p, 4); *fv = v; break; }
    case GGUF_F64: memcpy(fv, p, 8); break;
    default: return false;
    }
    return true;
}

int64_t gguf_arr_int(const gguf_array *a, uint64_t i)
{
    int64_t iv;
    uint64_t uv;
    double fv;
    if (!arr_elem(a, i, &iv, &uv, &fv))
        return 0;
    if (is_signed(a->type))
        return iv;
    if (a->type == GGUF_F32 || a->type == GGUF_F64)
        return fv >= -9.2e18 && fv <= 9.2e18 ? (int64_t)fv : 0;
    return uv <= (uint64_t)INT64_MAX ? (int64_t)uv : 0;
}

double gguf_arr_float(const gguf_array *a, uint64_t i)
{
    int64_t iv;
    uint64_t uv;
    double fv;
    if (!arr_elem(a, i, &iv, &uv, &fv))
        return 0;
    if (is_signed(a->type))
        return (double)iv;
    if (a->type == GGUF_F32 || a->type == GGUF_F64)
        return fv;
    return (double)uv;
}
