#include <stdlib.h>
#include <string.h>

#include "support/gguf_bytes.h"
#include "test.h"

void bytes_put(bytes *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        REQUIRE(b->p, "out of memory");
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

void bytes_u32(bytes *b, uint32_t v)
{
    bytes_put(b, &v, 4);
}

void bytes_u64(bytes *b, uint64_t v)
{
    bytes_put(b, &v, 8);
}

void bytes_str(bytes *b, const char *s)
{
    bytes_u64(b, strlen(s));
    bytes_put(b, s, strlen(s));
}

void bytes_key(bytes *b, const char *key, enum gguf_vtype t)
{
    bytes_str(b, key);
    bytes_u32(b, t);
}

void bytes_pad(bytes *b, size_t align)
{
    while (b->n % align)
        bytes_put(b, "", 1);
}

size_t bytes_find(const bytes *b, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= b->n; i++)
        if (!memcmp(b->p + i, s, n))
            return i;
    REQUIRE(0, "'%s' not in the built file", s);
    return 0;
}

bytes gguf_handmade(int nested_depth)
{
    bytes b = {0};
    bytes_put(&b, "GGUF", 4);
    bytes_u32(&b, 2);
    bytes_u64(&b, 2);  /* tensors */
    bytes_u64(&b, 18); /* kvs */
    uint8_t u8 = 200;
    int8_t i8 = -5;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int32_t i32 = -2000000000;
    int64_t i64 = -(1ll << 62);
    float f32 = 1.5f;
    double f64 = 1e300;
    bytes_key(&b, "t.u8", GGUF_U8);
    bytes_put(&b, &u8, 1);
    bytes_key(&b, "t.i8", GGUF_I8);
    bytes_put(&b, &i8, 1);
    bytes_key(&b, "t.u16", GGUF_U16);
    bytes_put(&b, &u16, 2);
    bytes_key(&b, "t.i16", GGUF_I16);
    bytes_put(&b, &i16, 2);
    bytes_key(&b, "t.u32", GGUF_U32);
    bytes_u32(&b, 4000000000u);
    bytes_key(&b, "t.i32", GGUF_I32);
    bytes_put(&b, &i32, 4);
    bytes_key(&b, "t.f32", GGUF_F32);
    bytes_put(&b, &f32, 4);
    bytes_key(&b, "t.bool", GGUF_BOOL);
    bytes_put(&b, "\x01", 1);
    bytes_key(&b, "t.str", GGUF_STRING);
    bytes_str(&b, "h\xc3\xa9llo");
    bytes_key(&b, "t.u64", GGUF_U64);
    bytes_u64(&b, (1ull << 63) + 5);
    bytes_key(&b, "t.i64", GGUF_I64);
    bytes_put(&b, &i64, 8);
    bytes_key(&b, "t.f64", GGUF_F64);
    bytes_put(&b, &f64, 8);
    bytes_key(&b, "t.arr_u16", GGUF_ARRAY);
    bytes_u32(&b, GGUF_U16);
    bytes_u64(&b, 3);
    for (uint16_t v = 1; v <= 3; v++)
        bytes_put(&b, &v, 2);
    bytes_key(&b, "t.arr_str", GGUF_ARRAY);
    bytes_u32(&b, GGUF_STRING);
    bytes_u64(&b, 2);
    bytes_str(&b, "a");
    bytes_str(&b, "bc");
    bytes_key(&b, "t.arr_empty", GGUF_ARRAY);
    bytes_u32(&b, GGUF_F32);
    bytes_u64(&b, 0);
    /* outer array of 2: [nested arrays down to an i32 array [1, 2]], then a string array ["x"] */
    bytes_key(&b, "t.nested", GGUF_ARRAY);
    for (int d = 0; d < nested_depth; d++) {
        bytes_u32(&b, GGUF_ARRAY);
        bytes_u64(&b, d == 0 ? 2 : 1);
    }
    bytes_u32(&b, GGUF_I32);
    bytes_u64(&b, 2);
    bytes_u32(&b, 1);
    bytes_u32(&b, 2);
    bytes_u32(&b, GGUF_STRING);
    bytes_u64(&b, 1);
    bytes_str(&b, "x");
    bytes_key(&b, "t.bools", GGUF_ARRAY);
    bytes_u32(&b, GGUF_BOOL);
    bytes_u64(&b, 2);
    bytes_put(&b, "\x00\x01", 2);
    bytes_key(&b, "general.alignment", GGUF_U32);
    bytes_u32(&b, 64);

    bytes_str(&b, "tensor_a");
    bytes_u32(&b, 2);
    bytes_u64(&b, 4);
    bytes_u64(&b, 2);
    bytes_u32(&b, DT_F32);
    bytes_u64(&b, 0);
    bytes_str(&b, "tensor_b");
    bytes_u32(&b, 1);
    bytes_u64(&b, 64);
    bytes_u32(&b, DT_Q8_0);
    bytes_u64(&b, 64);
    bytes_pad(&b, 64);
    for (int i = 0; i < 8; i++) {
        float v = (float)i;
        bytes_put(&b, &v, 4);
    }
    bytes_pad(&b, 64);
    for (int i = 0; i < 68; i++) {
        uint8_t v = (uint8_t)i;
        bytes_put(&b, &v, 1);
    }
    return b;
}
