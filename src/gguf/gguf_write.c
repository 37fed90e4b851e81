/* gguf_write.c — streaming GGUF (version 3) writer.
 *
 * Metadata and tensor infos are serialized into memory as they are declared (their size is that
 * of the metadata, independent of the tensors); gguf_writer_begin_data() writes them out, and
 * tensor data then goes straight to the file with alignment padding inserted between tensors.
 * The first error is kept and reported by gguf_writer_finish(), so a caller can declare
 * everything and check once; later calls after an error do nothing. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define WRITE_BUFFER (4u << 20)

typedef struct wtensor {
    char *name;
    enum dtype type;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t offset, nbytes;
} wtensor;

struct gguf_writer {
    char *path;
    FILE *fp;
    bool regular_file;       /* removed again on failure (never a device or a pipe) */
    uint64_t alignment;
    char error[512]; /* first error; empty while all is well */

    uint8_t *meta;   /* serialized key/values */
    uint64_t meta_len, meta_cap;
    char **keys;
    uint64_t n_kv, keys_cap;

    wtensor *tensors;
    uint64_t n_tensors, tensors_cap;
    uint64_t data_size;      /* bytes of the data section so far, padding included */

    bool writing_data;
    uint64_t data_offset;    /* start of the data section in the file */
    uint64_t cur;            /* tensor receiving data */
    uint64_t cur_written;    /* its bytes so far */
    uint64_t file_pos;       /* bytes written to the file */
};

static void set_error(gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(gguf_writer *w, const char *fmt, ...)
{
    if (w->error[0])
        return;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(w->error, sizeof w->error, "%s: %s", w->path, msg);
}

static bool usable_for_metadata(gguf_writer *w, const char *what)
{
    if (w->error[0])
        return false;
    if (w->writing_data) {
        set_error(w, "%s declared after the tensor data started", what);
        return false;
    }
    return true;
}

/* p with room for `need` elements (doubling), or NULL with the error set and p untouched. */
static void *grow(gguf_writer *w, void *p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    uint64_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(p, n * elem);
    if (!q) {
        set_error(w, "out of memory");
        return NULL;
    }
    *cap = n;
    return q;
}

static void meta_put(gguf_writer *w, const void *src, size_t n)
{
    uint8_t *meta = grow(w, w->meta, &w->meta_cap, w->meta_len + n, 1);
    if (!meta)
        return;
    w->meta = meta;
    memcpy(w->meta + w->meta_len, src, n);
    w->meta_len += n;
}

static void meta_u32(gguf_writer *w, uint32_t v) { meta_put(w, &v, 4); }
static void meta_u64(gguf_writer *w, uint64_t v) { meta_put(w, &v, 8); }

static void meta_str(gguf_writer *w, const char *s, uint64_t len)
{
    meta_u64(w, len);
    meta_put(w, s, (size_t)len);
}

/* Starts a key/value: checks the key is new and writes it with the value type. */
static bool begin_kv(gguf_writer *w, const char *key, size_t key_len, enum gguf_vtype type)
{
    if (!usable_for_metadata(w, "metadata"))
        return false;
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strlen(w->keys[i]) == key_len && !memcmp(w->keys[i], key, key_len)) {
            set_error(w, "metadata key '%s' set twice", w->keys[i]);
            return false;
        }
    if (key_len == strlen("general.alignment") && !memcmp(key, "general.alignment", key_len)) {
        set_error(w, "general.alignment is written by the writer (pass it to gguf_writer_create)");
        return false;
    }
    char **keys = grow(w, w->keys, &w->keys_cap, w->n_kv + 1, sizeof *w->keys);
    if (!keys)
        return false;
    w->keys = keys;
    char *copy = strndup(key, key_len);
    if (!copy) {
        set_error(w, "out of memory");
        return false;
    }
    w->keys[w->n_kv++] = copy;
    meta_str(w, key, key_len);
    meta_u32(w, type);
    return true;
}

static uint32_t value_size(enum gguf_vtype t)
{
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

gguf_writer *gguf_writer_create(const char *path, uint64_t alignment, char *err, size_t errlen)
{
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment > (1u << 30)) {
        snprintf(err, errlen, "%s: alignment %llu is not a power of two up to 2^30", path,
                 (unsigned long long)alignment);
        return NULL;
    }
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    w->fp = fopen(path, "wb");
    if (!w->fp) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        free(w->path);
        free(w);
        return NULL;
    }
    setvbuf(w->fp, NULL, _IOFBF, WRITE_BUFFER);
    struct stat st;
    w->regular_file = !fstat(fileno(w->fp), &st) && S_ISREG(st.st_mode);
    w->alignment = alignment;
    if (alignment != GGUF_DEFAULT_ALIGNMENT) {
        /* written directly: begin_kv refuses this key from callers */
        if ((w->keys = grow(w, NULL, &w->keys_cap, 1, sizeof *w->keys)) &&
            (w->keys[0] = strdup("general.alignment"))) {
            w->n_kv = 1;
            meta_str(w, "general.alignment", strlen("general.alignment"));
            meta_u32(w, GGUF_U32);
            meta_u32(w, (uint32_t)alignment);
        } else {
            set_error(w, "out of memory");
        }
    }
    return w;
}

void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v)
{
    if (begin_kv(w, key, strlen(key), GGUF_U32))
        meta_u32(w, v);
}

void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v)
{
    if (begin_kv(w, key, strlen(key), GGUF_I32))
        meta_put(w, &v, 4);
}

void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v)
{
    if (begin_kv(w, key, strlen(key), GGUF_U64))
        meta_u64(w, v);
}

void gguf_writer_set_f32(gguf_writer *w, const char *key, float v)
{
    if (begin_kv(w, key, strlen(key), GGUF_F32))
        meta_put(w, &v, 4);
}

void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v;
    if (begin_kv(w, key, strlen(key), GGUF_BOOL))
        meta_put(w, &b, 1);
}

void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v)
{
    if (begin_kv(w, key, strlen(key), GGUF_STRING))
        meta_str(w, v, strlen(v));
}

void gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_vtype elem, const void *data,
                         uint64_t n)
{
    uint32_t size = value_size(elem);
    if (!size) {
        set_error(w, "metadata key '%s': gguf_writer_set_arr takes fixed-size elements, not %s",
                  key, gguf_vtype_name(elem));
        return;
    }
    if (!begin_kv(w, key, strlen(key), GGUF_ARRAY))
        return;
    meta_u32(w, elem);
    meta_u64(w, n);
    meta_put(w, data, (size_t)(n * size));
}

void gguf_writer_set_str_arr(gguf_writer *w, const char *key, const char *const *strs, uint64_t n)
{
    if (!begin_kv(w, key, strlen(key), GGUF_ARRAY))
        return;
    meta_u32(w, GGUF_STRING);
    meta_u64(w, n);
    for (uint64_t i = 0; i < n; i++)
        meta_str(w, strs[i], strlen(strs[i]));
}

static void put_array(gguf_writer *w, const gguf_array *a)
{
    meta_u32(w, a->type);
    meta_u64(w, a->n);
    if (a->type == GGUF_STRING)
        for (uint64_t i = 0; i < a->n; i++)
            meta_str(w, a->strs[i].ptr, a->strs[i].len);
    else if (a->type == GGUF_ARRAY)
        for (uint64_t i = 0; i < a->n; i++)
            put_array(w, &a->arrs[i]);
    else
        meta_put(w, a->data, (size_t)(a->n * value_size(a->type)));
}

void gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv)
{
    if (!begin_kv(w, kv->key.ptr, (size_t)kv->key.len, kv->type))
        return;
    /* Scalars are held widened in the reader's union: narrow them back to their own size. */
    uint8_t b[8];
    switch (kv->type) {
    case GGUF_STRING:
        meta_str(w, kv->v.str.ptr, kv->v.str.len);
        return;
    case GGUF_ARRAY:
        put_array(w, &kv->v.arr);
        return;
    case GGUF_F32: {
        float f = (float)kv->v.f64;
        meta_put(w, &f, 4);
        return;
    }
    case GGUF_F64:
        meta_put(w, &kv->v.f64, 8);
        return;
    default:
        /* little-endian: the low bytes of the 64-bit value are the narrower value */
        memcpy(b, &kv->v.u64, 8);
        meta_put(w, b, value_size(kv->type));
        return;
    }
}

void gguf_writer_add_tensor(gguf_writer *w, const char *name, enum dtype type, uint32_t n_dims,
                            const uint64_t *ne)
{
    if (!usable_for_metadata(w, "tensor"))
        return;
    const dtype_info *d = dtype_get(type);
    if (!d) {
        set_error(w, "tensor '%s': unknown type %d", name, (int)type);
        return;
    }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        set_error(w, "tensor '%s': %u dimensions (must be 1..%d)", name, n_dims, GGUF_MAX_DIMS);
        return;
    }
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name)) {
            set_error(w, "tensor '%s' added twice", name);
            return;
        }
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    memcpy(t.ne, ne, n_dims * sizeof *ne);
    if (t.ne[0] % d->block_size) {
        set_error(w, "tensor '%s': row length %llu is not a multiple of the %s block size %u",
                  name, (unsigned long long)t.ne[0], d->name, d->block_size);
        return;
    }
    uint64_t bytes = t.ne[0] / d->block_size * d->block_bytes;
    for (uint32_t i = 1; i < GGUF_MAX_DIMS; i++)
        if (__builtin_mul_overflow(bytes, t.ne[i], &bytes)) {
            set_error(w, "tensor '%s': size overflows 64 bits", name);
            return;
        }
    t.nbytes = bytes;
    t.offset = (w->data_size + w->alignment - 1) / w->alignment * w->alignment;
    w->data_size = t.offset + t.nbytes;
    wtensor *tensors = grow(w, w->tensors, &w->tensors_cap, w->n_tensors + 1, sizeof *w->tensors);
    if (!tensors)
        return;
    w->tensors = tensors;
    if (!(t.name = strdup(name))) {
        set_error(w, "out of memory");
        return;
    }
    w->tensors[w->n_tensors++] = t;
}

static int out(gguf_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->fp) != n) {
        set_error(w, "write failed at byte %llu: %s", (unsigned long long)w->file_pos,
                  strerror(errno));
        return -1;
    }
    w->file_pos += n;
    return 0;
}

static int pad_to(gguf_writer *w, uint64_t pos)
{
    static const uint8_t zeros[256];
    while (w->file_pos < pos) {
        uint64_t n = pos - w->file_pos < sizeof zeros ? pos - w->file_pos : sizeof zeros;
        if (out(w, zeros, (size_t)n))
            return -1;
    }
    return 0;
}

static uint64_t header_end_aligned(const gguf_writer *w)
{
    uint64_t header = 24 + w->meta_len;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        header += 8 + strlen(w->tensors[i].name) + 4 + 8 * w->tensors[i].n_dims + 4 + 8;
    return (header + w->alignment - 1) / w->alignment * w->alignment;
}

/* Skips finished (and empty) tensors and pads up to the next one's data. */
static int advance(gguf_writer *w)
{
    while (w->cur < w->n_tensors && w->cur_written == w->tensors[w->cur].nbytes) {
        w->cur++;
        w->cur_written = 0;
    }
    if (w->cur < w->n_tensors && w->cur_written == 0)
        return pad_to(w, w->data_offset + w->tensors[w->cur].offset);
    return 0;
}

int gguf_writer_begin_data(gguf_writer *w)
{
    if (!usable_for_metadata(w, "begin_data"))
        return -1;
    uint32_t version = 3;
    uint64_t counts[2] = {w->n_tensors, w->n_kv};
    if (out(w, "GGUF", 4) || out(w, &version, 4) || out(w, counts, sizeof counts) ||
        out(w, w->meta, (size_t)w->meta_len))
        return -1;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        uint64_t len = strlen(t->name);
        uint32_t type = t->type;
        if (out(w, &len, 8) || out(w, t->name, (size_t)len) || out(w, &t->n_dims, 4) ||
            out(w, t->ne, 8 * t->n_dims) || out(w, &type, 4) || out(w, &t->offset, 8))
            return -1;
    }
    w->writing_data = true;
    w->data_offset = header_end_aligned(w);
    w->cur = 0;
    w->cur_written = 0;
    if (pad_to(w, w->data_offset))
        return -1;
    return advance(w);
}

int gguf_writer_write(gguf_writer *w, const void *data, size_t n)
{
    if (w->error[0])
        return -1;
    if (!w->writing_data) {
        set_error(w, "tensor data written before gguf_writer_begin_data");
        return -1;
    }
    if (w->cur >= w->n_tensors) {
        set_error(w, "%zu bytes written after the last tensor", n);
        return -1;
    }
    const wtensor *t = &w->tensors[w->cur];
    if (n > t->nbytes - w->cur_written) {
        set_error(w, "tensor '%s': %zu bytes written with only %llu left of its %llu", t->name, n,
                  (unsigned long long)(t->nbytes - w->cur_written), (unsigned long long)t->nbytes);
        return -1;
    }
    if (out(w, data, n))
        return -1;
    w->cur_written += n;
    return advance(w);
}

int gguf_writer_finish(gguf_writer *w, char *err, size_t errlen)
{
    if (!w->error[0] && !w->writing_data)
        set_error(w, "finished before gguf_writer_begin_data");
    if (!w->error[0] && w->cur < w->n_tensors)
        set_error(w, "tensor '%s' got %llu of its %llu bytes", w->tensors[w->cur].name,
                  (unsigned long long)w->cur_written, (unsigned long long)w->tensors[w->cur].nbytes);
    if (fclose(w->fp) && !w->error[0])
        set_error(w, "closing failed: %s", strerror(errno));
    int rc = 0;
    if (w->error[0]) {
        snprintf(err, errlen, "%s", w->error);
        if (w->regular_file)
            unlink(w->path); /* a half-written model must not be mistaken for a model */
        rc = -1;
    }
    for (uint64_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->keys);
    free(w->tensors);
    free(w->meta);
    free(w->path);
    free(w);
    return rc;
}
