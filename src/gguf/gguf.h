/* gguf.h — reading and writing GGUF files (versions 2 and 3).
 *
 * Contract: gguf_open() validates the whole header (metadata, tensor table, offsets, sizes)
 * before returning, so every pointer it hands out is inside the file. Tensor data is never
 * copied: the file is mapped read-only once and each tensor is a pointer + byte range into that
 * mapping. Nothing a header field says can drive an allocation beyond a small fixed multiple of
 * the file size (every count is checked against the bytes left before anything is allocated).
 *
 * Errors are one line, naming the file, the item and the problem, written into the caller's
 * buffer (err, errlen); the functions return NULL / -1 and never abort. */
#ifndef PRIMA_GGUF_H
#define PRIMA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/dtype.h"

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
    GGUF_I64 = 11, GGUF_F64 = 12, GGUF_VTYPE_COUNT
};

/* A string inside the mapping: not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

/* An array value. Elements of fixed-size types are a packed little-endian run at `data`
 * (read them with gguf_arr_* helpers). String arrays and nested arrays are decoded at open
 * time into `strs` / `arrs`. */
typedef struct gguf_array {
    enum gguf_vtype type;     /* element type */
    uint64_t n;
    const void *data;         /* fixed-size element types */
    gguf_str *strs;           /* GGUF_STRING elements */
    struct gguf_array *arrs;  /* GGUF_ARRAY elements */
} gguf_array;

typedef struct gguf_kv {
    gguf_str key;
    enum gguf_vtype type;
    union {
        uint64_t u64;  /* all unsigned integer types and bool */
        int64_t i64;   /* all signed integer types */
        double f64;    /* F32 and F64 */
        gguf_str str;
        gguf_array arr;
    } v;
} gguf_kv;

#define GGUF_MAX_DIMS 4

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the innermost (row length); unused dims are 1 */
    enum dtype type;
    uint64_t offset;            /* relative to the start of the data section */
    uint64_t nbytes;
    const void *data;           /* inside the mapping */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    uint32_t version;
    uint64_t alignment;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    const uint8_t *map;         /* whole file, PROT_READ */
    uint64_t size;
    uint64_t data_offset;       /* start of the tensor data section in the file */
} gguf_file;

gguf_file *gguf_open(const char *path, char *err, size_t errlen);
/* Same validation on a buffer the caller owns (used by the fuzzer); `path` names it in errors. */
gguf_file *gguf_open_memory(const void *buf, uint64_t size, const char *path, char *err, size_t errlen);
void gguf_close(gguf_file *f);

/* Lookup. Return NULL / -1 when absent. */
const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_tensor_find(const gguf_file *f, const char *name);
bool gguf_str_eq(gguf_str s, const char *cstr);

/* Typed getters with a default: any integer type converts when the value fits; a value of the
 * wrong kind returns the default. */
int64_t gguf_get_int(const gguf_file *f, const char *key, int64_t def);
double gguf_get_float(const gguf_file *f, const char *key, double def);
bool gguf_get_bool(const gguf_file *f, const char *key, bool def);
/* Copy a string value into buf (NUL-terminated, truncated to bufsz); returns false if absent. */
bool gguf_get_str(const gguf_file *f, const char *key, char *buf, size_t bufsz);
const gguf_array *gguf_get_arr(const gguf_file *f, const char *key);
/* Element i of a numeric array, converted. */
int64_t gguf_arr_int(const gguf_array *a, uint64_t i);
double gguf_arr_float(const gguf_array *a, uint64_t i);

const char *gguf_vtype_name(enum gguf_vtype t);

/* ---- writer ----
 * Streaming: the caller declares all metadata and tensor infos first, then writes each tensor's
 * data in declaration order (in as many pieces as it likes). Memory use is independent of the
 * tensor sizes. The first error (in a setter, begin_data or write) is kept: later calls do
 * nothing and gguf_writer_finish reports it (and removes the partial file). */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_create(const char *path, uint64_t alignment, char *err, size_t errlen);
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Copy a key/value (any type, arrays included) from another file, e.g. a tokenizer. */
void gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv);
void gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_vtype elem, const void *data, uint64_t n);
void gguf_writer_set_str_arr(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
void gguf_writer_add_tensor(gguf_writer *w, const char *name, enum dtype type, uint32_t n_dims, const uint64_t *ne);
/* Writes the header; after this only tensor data may be written. */
int gguf_writer_begin_data(gguf_writer *w);
/* Append bytes of the current tensor; padding between tensors is inserted automatically. */
int gguf_writer_write(gguf_writer *w, const void *data, size_t n);
/* Checks every tensor got exactly its bytes, flushes, closes; frees w. Returns 0 or -1. */
int gguf_writer_finish(gguf_writer *w, char *err, size_t errlen);

#endif
