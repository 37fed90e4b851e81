/* gguf_bytes.h — building GGUF files byte by byte in tests, independently of the library's
 * writer, so that reader and writer are each checked against something they did not produce. */
#ifndef PRIMA_TEST_GGUF_BYTES_H
#define PRIMA_TEST_GGUF_BYTES_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

void bytes_put(bytes *b, const void *src, size_t n);
void bytes_u32(bytes *b, uint32_t v);
void bytes_u64(bytes *b, uint64_t v);
void bytes_str(bytes *b, const char *s);                       /* u64 length + bytes */
void bytes_key(bytes *b, const char *key, enum gguf_vtype t);  /* key + value type */
void bytes_pad(bytes *b, size_t align);
/* Offset of the first occurrence of s (aborts the test if absent). */
size_t bytes_find(const bytes *b, const char *s);

/* Nesting depth of the t.nested array of the standard hand-made file. */
enum { HANDMADE_NESTED_DEPTH = 3 };

/* A version-2 file with one key of every value type (t.u8 = 200, t.i8 = -5, t.u16 = 60000,
 * t.i16 = -30000, t.u32 = 4e9, t.i32 = -2e9, t.f32 = 1.5, t.bool = true, t.str = "héllo",
 * t.u64 = 2^63 + 5, t.i64 = -2^62, t.f64 = 1e300, t.arr_u16 = [1, 2, 3], t.arr_str = ["a", "bc"],
 * t.arr_empty = f32[], t.nested = [[...[i32 1, 2]...], ["x"]] with the i32 array nested_depth
 * arrays deep, t.bools = [false, true]), general.alignment = 64, and two tensors: tensor_a F32
 * 4 x 2 holding 0..7, tensor_b Q8_0 64 holding bytes 0..67. 18 keys. */
bytes gguf_handmade(int nested_depth);

#endif
