/* The reader on files it has not seen: a hand-built version-2 file holding every value type
 * (nested arrays, custom alignment), and a corpus of damaged files — truncated at many points,
 * flipped header bytes, absurd counts and lengths, bad types, misaligned, overlapping and
 * out-of-file offsets, duplicate names. Every damaged file must give NULL and a one-line error
 * naming the file; none may crash (the sanitizer build runs this too). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "support/gguf_bytes.h"
#include "test.h"

static void check_handmade(void)
{
    char err[512] = "";
    bytes b = gguf_handmade(HANDMADE_NESTED_DEPTH);
    gguf_file *f = gguf_open_memory(b.p, b.n, "handmade.gguf", err, sizeof err);
    REQUIRE(f, "handmade file rejected: %s", err);
    CHECK(f->version == 2 && f->n_kv == 18 && f->n_tensors == 2, "header");
    CHECK(f->alignment == 64 && f->data_offset % 64 == 0, "alignment %llu",
          (unsigned long long)f->alignment);
    CHECK(gguf_get_int(f, "t.u8", 0) == 200 && gguf_get_int(f, "t.i8", 0) == -5, "8-bit");
    CHECK(gguf_get_int(f, "t.u16", 0) == 60000 && gguf_get_int(f, "t.i16", 0) == -30000, "16-bit");
    CHECK(gguf_get_int(f, "t.u32", 0) == 4000000000LL, "u32");
    CHECK(gguf_get_int(f, "t.i32", 0) == -2000000000LL, "i32");
    CHECK(gguf_get_int(f, "t.u64", -1) == -1, "u64 above INT64_MAX must give the default");
    CHECK(gguf_find(f, "t.u64")->v.u64 == (1ull << 63) + 5, "u64 raw");
    CHECK(gguf_get_int(f, "t.i64", 0) == -(1ll << 62), "i64");
    CHECK(gguf_get_float(f, "t.f32", 0) == 1.5 && gguf_get_float(f, "t.f64", 0) == 1e300, "floats");
    CHECK(gguf_get_float(f, "t.i32", 0) == -2e9, "int read as float");
    CHECK(gguf_get_bool(f, "t.bool", false) && gguf_get_bool(f, "t.u8", false) == false, "bool");
    CHECK(gguf_get_int(f, "t.f32", 9) == 9, "float read as int gives the default");
    char s[8];
    CHECK(gguf_get_str(f, "t.str", s, sizeof s) && !strcmp(s, "h\xc3\xa9llo"), "string");
    CHECK(gguf_get_str(f, "t.str", s, 3) && !strcmp(s, "h\xc3"), "truncated string");
    CHECK(!gguf_find(f, "t.missing") && gguf_get_int(f, "t.missing", 42) == 42, "absent key");

    const gguf_array *a = gguf_get_arr(f, "t.arr_u16");
    CHECK(a && a->type == GGUF_U16 && a->n == 3 && gguf_arr_int(a, 2) == 3 &&
          gguf_arr_float(a, 0) == 1.0 && gguf_arr_int(a, 3) == 0, "u16 array");
    a = gguf_get_arr(f, "t.arr_str");
    CHECK(a && a->n == 2 && gguf_str_eq(a->strs[0], "a") && gguf_str_eq(a->strs[1], "bc"), "string array");
    a = gguf_get_arr(f, "t.arr_empty");
    CHECK(a && a->n == 0 && a->type == GGUF_F32, "empty array");
    a = gguf_get_arr(f, "t.bools");
    CHECK(a && gguf_arr_int(a, 0) == 0 && gguf_arr_int(a, 1) == 1, "bool array");
    a = gguf_get_arr(f, "t.nested");
    REQUIRE(a && a->type == GGUF_ARRAY && a->n == 2, "nested array");
    const gguf_array *inner = &a->arrs[0];
    for (int d = 1; d < HANDMADE_NESTED_DEPTH; d++) {
        REQUIRE(inner->type == GGUF_ARRAY && inner->n == 1, "nesting level %d", d);
        inner = &inner->arrs[0];
    }
    CHECK(inner->type == GGUF_I32 && inner->n == 2 && gguf_arr_int(inner, 1) == 2, "innermost");
    CHECK(a->arrs[1].type == GGUF_STRING && gguf_str_eq(a->arrs[1].strs[0], "x"), "sibling");

    const gguf_tensor *ta = gguf_tensor_find(f, "tensor_a"), *tb = gguf_tensor_find(f, "tensor_b");
    REQUIRE(ta && tb, "tensors");
    CHECK(ta->n_dims == 2 && ta->ne[0] == 4 && ta->ne[1] == 2 && ta->ne[2] == 1 && ta->nbytes == 32,
          "tensor_a shape");
    float v7;
    memcpy(&v7, (const uint8_t *)ta->data + 28, 4);
    CHECK(v7 == 7.0f, "tensor_a data");
    CHECK(tb->type == DT_Q8_0 && tb->nbytes == 68 && ((const uint8_t *)tb->data)[67] == 67,
          "tensor_b");
    gguf_close(f);
    free(b.p);
}

/* ---- damaged files ---- */

static int n_damaged;

/* Must be rejected with a one-line error naming the file (and containing `expect` if given). */
static void expect_error(const uint8_t *p, size_t n, const char *what, const char *expect)
{
    char err[512];
    memset(err, 0, sizeof err);
    gguf_file *f = gguf_open_memory(p, n, "damaged.gguf", err, sizeof err);
    n_damaged++;
    CHECK(!f, "%s: accepted", what);
    gguf_close(f);
    CHECK(!strncmp(err, "damaged.gguf: ", 14) && !strchr(err, '\n'), "%s: error '%s'", what, err);
    if (expect)
        CHECK(strstr(err, expect), "%s: error '%s' lacks '%s'", what, err, expect);
}

/* May be accepted (a flipped byte inside a string is still a valid file), but a rejection must
 * still be a one-line error, and an accepted file must keep every tensor inside the buffer. */
static void expect_no_crash(const uint8_t *p, size_t n, const char *what)
{
    char err[512] = "";
    gguf_file *f = gguf_open_memory(p, n, "damaged.gguf", err, sizeof err);
    n_damaged++;
    if (f) {
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const uint8_t *d = f->tensors[i].data;
            CHECK(d >= p && d + f->tensors[i].nbytes <= p + n, "%s: tensor outside the file", what);
        }
        gguf_close(f);
    } else {
        CHECK(err[0] && !strchr(err, '\n'), "%s: error '%s'", what, err);
    }
}

/* A copy of b with n bytes at `at` replaced by v must be rejected. */
static void with_bytes(const bytes *b, size_t at, const void *v, size_t n, const char *what,
                       const char *expect)
{
    uint8_t *copy = malloc(b->n);
    REQUIRE(copy, "out of memory");
    memcpy(copy, b->p, b->n);
    memcpy(copy + at, v, n);
    expect_error(copy, b->n, what, expect);
    free(copy);
}

static void with_u32(const bytes *b, size_t at, uint32_t v, const char *what, const char *expect)
{
    with_bytes(b, at, &v, 4, what, expect);
}

static void with_u64(const bytes *b, size_t at, uint64_t v, const char *what, const char *expect)
{
    with_bytes(b, at, &v, 8, what, expect);
}

static void damage_handmade(void)
{
    bytes b = gguf_handmade(HANDMADE_NESTED_DEPTH);
    with_bytes(&b, 0, "GGML", 4, "bad magic", "bad magic");
    with_u32(&b, 4, 1, "version 1", "unsupported version 1");
    with_u32(&b, 4, 4, "version 4", "unsupported version 4");
    with_u32(&b, 4, 0x03000000, "big-endian", "big-endian");
    with_u64(&b, 8, 1ull << 62, "tensor count", "cannot fit");
    with_u64(&b, 16, ~0ull, "kv count", "cannot fit");
    with_u64(&b, 16, 19, "one kv too many", NULL);
    with_u64(&b, 24, 1ull << 63, "key length", "past the end");
    size_t k = bytes_find(&b, "t.str");
    with_u64(&b, k + 5 + 4, ~0ull, "string value length", "past the end");
    with_u32(&b, k + 5, 13, "value type", "unknown value type 13");
    k = bytes_find(&b, "t.bool");
    with_u32(&b, k + 6 + 4, 2, "bool value 2", "bool");
    k = bytes_find(&b, "t.arr_u16");
    with_u64(&b, k + 9 + 8, 1ull << 61, "array count", "cannot fit");
    with_u32(&b, k + 9 + 4, 99, "array element type", "unknown array element type");
    k = bytes_find(&b, "t.arr_str");
    with_u64(&b, k + 9 + 8, ~0ull / 8, "string array count", "cannot fit");
    k = bytes_find(&b, "t.bools");
    with_bytes(&b, k + 7 + 4 + 4 + 8 + 1, "\x02", 1, "bool array element", "bool array element 1");
    k = bytes_find(&b, "general.alignment");
    with_u32(&b, k + 17 + 4, 48, "alignment 48", "power of two");
    with_u32(&b, k + 17 + 4, 0, "alignment 0", "power of two");
    with_u32(&b, k + 17, GGUF_I32, "signed alignment", "unsigned");
    with_bytes(&b, bytes_find(&b, "t.u8"), "t.i8", 4, "duplicate key", "'t.i8' appears more than once");

    size_t ta = bytes_find(&b, "tensor_a"), tb = bytes_find(&b, "tensor_b");
    size_t b_type = tb + 8 + 4 + 8, b_off = b_type + 4;
    with_u32(&b, ta + 8, 5, "5 dimensions", "dimensions");
    with_u32(&b, ta + 8, 0, "0 dimensions", "dimensions");
    with_u64(&b, ta + 8 + 4, 1ull << 62, "dimension product", "overflow");
    with_u64(&b, ta + 8 + 4, ~0ull, "dimension above 2^63", "dimension 0");
    with_u32(&b, b_type, 4, "removed tensor type", "unknown tensor type 4");
    with_u32(&b, b_type, 1000, "unknown tensor type", "unknown tensor type 1000");
    with_u32(&b, b_type, DT_Q4_K, "row not a multiple of the block", "block size");
    with_u64(&b, b_off, 65, "misaligned offset", "alignment");
    with_u64(&b, b_off, 0, "overlapping offsets", "overlaps");
    with_u64(&b, b_off, 128, "data past the end", "past the end");
    with_u64(&b, b_off, ~0ull - 63, "offset near 2^64", "past the end");
    with_u64(&b, tb - 8, 9, "tensor name past its bytes", NULL);
    with_bytes(&b, tb + 7, "a", 1, "duplicate tensor name", "'tensor_a' appears more than once");
    free(b.p);

    b = gguf_handmade(9);
    expect_error(b.p, b.n, "arrays nested 9 deep", "nested deeper");
    free(b.p);
    b = gguf_handmade(HANDMADE_NESTED_DEPTH);
    for (size_t cut = 0; cut < b.n; cut++)
        expect_error(b.p, cut, "truncated handmade file", NULL);
    free(b.p);
    expect_error((const uint8_t *)"", 0, "empty buffer", "past the end");
}

static bytes read_file(const char *path)
{
    bytes b = {0};
    FILE *fp = fopen(path, "rb");
    REQUIRE(fp, "cannot open %s", path);
    uint8_t buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, fp)) > 0)
        bytes_put(&b, buf, n);
    fclose(fp);
    return b;
}

static void damage_fixture(const char *dir)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/models/tinystories-656k-q8_0.gguf", dir);
    bytes b = read_file(path);
    gguf_file *f = gguf_open_memory(b.p, b.n, "copy", err, sizeof err);
    REQUIRE(f, "%s", err);
    uint64_t data_offset = f->data_offset, data_end = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].offset + f->tensors[i].nbytes > data_end)
            data_end = f->tensors[i].offset + f->tensors[i].nbytes;
    gguf_close(f);
    data_end += data_offset;

    /* Truncated: every byte of the first 512, then steps through the header and the data. */
    for (size_t cut = 0; cut < data_end; cut += cut < 512 ? 1 : cut < data_offset ? 61 : 4093)
        expect_error(b.p, cut, "truncated fixture", NULL);
    expect_error(b.p, data_end - 1, "fixture missing its last byte", "past the end");

    /* Flipped bytes all through the header: reject cleanly or stay inside the file. */
    for (size_t at = 0; at < data_offset; at += at < 256 ? 1 : 13) {
        for (int bit = 0; bit < 8; bit += 3) {
            b.p[at] ^= (uint8_t)(1u << bit);
            expect_no_crash(b.p, b.n, "flipped header bit");
            b.p[at] ^= (uint8_t)(1u << bit);
        }
        uint8_t saved = b.p[at];
        b.p[at] = 0xff;
        expect_no_crash(b.p, b.n, "header byte set to 0xff");
        b.p[at] = saved;
    }

    /* Through the file path too: a truncated copy in /tmp gives an error naming that file. */
    char tmp[] = "/tmp/prima-damaged-XXXXXX";
    int fd = mkstemp(tmp);
    REQUIRE(fd >= 0, "mkstemp");
    REQUIRE(write(fd, b.p, data_offset + 100) == (ssize_t)(data_offset + 100), "write");
    close(fd);
    f = gguf_open(tmp, err, sizeof err);
    CHECK(!f && strstr(err, tmp) && strstr(err, "past the end"), "truncated file: '%s'", err);
    unlink(tmp);
    free(b.p);
}

int main(void)
{
    check_handmade();
    damage_handmade();
    damage_fixture(test_fixtures());
    fprintf(stderr, "%d damaged files checked\n", n_damaged);
    return test_done();
}
