/* The streaming writer: everything written reads back identical through the reader (every
 * setter, copy_kv of every value type including nested arrays and a real tokenizer, tensors of
 * several types written in odd-sized pieces, a non-default alignment), and misuse gives an error
 * from gguf_writer_finish that names the file and removes it. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "support/gguf_bytes.h"
#include "test.h"

static bool array_equal(const gguf_array *a, const gguf_array *b);

static bool str_equal(gguf_str a, gguf_str b)
{
    return a.len == b.len && !memcmp(a.ptr, b.ptr, a.len);
}

static uint32_t elem_size(enum gguf_vtype t)
{
    static const uint32_t size[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return size[t];
}

static bool array_equal(const gguf_array *a, const gguf_array *b)
{
    if (a->type != b->type || a->n != b->n)
        return false;
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->type == GGUF_STRING && !str_equal(a->strs[i], b->strs[i]))
            return false;
        if (a->type == GGUF_ARRAY && !array_equal(&a->arrs[i], &b->arrs[i]))
            return false;
    }
    if (a->type != GGUF_STRING && a->type != GGUF_ARRAY)
        return a->n == 0 || !memcmp(a->data, b->data, a->n * elem_size(a->type));
    return true;
}

static bool kv_equal(const gguf_kv *a, const gguf_kv *b)
{
    if (!str_equal(a->key, b->key) || a->type != b->type)
        return false;
    switch (a->type) {
    case GGUF_STRING: return str_equal(a->v.str, b->v.str);
    case GGUF_ARRAY: return array_equal(&a->v.arr, &b->v.arr);
    case GGUF_F32: case GGUF_F64: return a->v.f64 == b->v.f64;
    default: return a->v.u64 == b->v.u64;
    }
}

static char path[64];

static void make_path(void)
{
    snprintf(path, sizeof path, "/tmp/prima-write-%d.gguf", (int)getpid());
}

/* Deterministic bytes for tensor t, byte i. */
static uint8_t pattern(int t, uint64_t i)
{
    return (uint8_t)((i * 2654435761u + (uint64_t)t * 40503u) >> 7);
}

static void check_setters_and_tensors(void)
{
    char err[512];
    gguf_writer *w = gguf_writer_create(path, 128, err, sizeof err);
    REQUIRE(w, "%s", err);
    gguf_writer_set_u32(w, "w.u32", 4000000000u);
    gguf_writer_set_i32(w, "w.i32", -7);
    gguf_writer_set_u64(w, "w.u64", 1ull << 60);
    gguf_writer_set_f32(w, "w.f32", 0.1f);
    gguf_writer_set_bool(w, "w.bool", true);
    gguf_writer_set_str(w, "w.str", "caf\xc3\xa9");
    const int16_t shorts[4] = {-1, 2, -3, 4};
    gguf_writer_set_arr(w, "w.arr", GGUF_I16, shorts, 4);
    const char *const strs[3] = {"x", "", "zz"};
    gguf_writer_set_str_arr(w, "w.strs", strs, 3);

    /* types with different block sizes, one empty tensor, one 3-D */
    static const struct { const char *name; enum dtype type; uint32_t n_dims; uint64_t ne[3]; } ts[] = {
        {"t.f32", DT_F32, 2, {5, 3, 1}},      {"t.q8_0", DT_Q8_0, 2, {64, 3, 1}},
        {"t.empty", DT_F16, 2, {8, 0, 1}},    {"t.q4_k", DT_Q4_K, 3, {256, 2, 2}},
        {"t.bf16", DT_BF16, 1, {7, 1, 1}},
    };
    enum { NT = sizeof ts / sizeof ts[0] };
    for (int t = 0; t < NT; t++)
        gguf_writer_add_tensor(w, ts[t].name, ts[t].type, ts[t].n_dims, ts[t].ne);
    REQUIRE(gguf_writer_begin_data(w) == 0, "begin_data");
    for (int t = 0; t < NT; t++) {
        uint64_t n = dtype_row_bytes(ts[t].type, ts[t].ne[0]) * ts[t].ne[1] * ts[t].ne[2];
        uint8_t buf[97];
        for (uint64_t done = 0; done < n;) {
            size_t k = n - done < sizeof buf ? (size_t)(n - done) : sizeof buf;
            for (size_t i = 0; i < k; i++)
                buf[i] = pattern(t, done + i);
            REQUIRE(gguf_writer_write(w, buf, k) == 0, "write");
            done += k;
        }
    }
    REQUIRE(gguf_writer_finish(w, err, sizeof err) == 0, "finish: %s", err);

    gguf_file *f = gguf_open(path, err, sizeof err);
    REQUIRE(f, "written file rejected: %s", err);
    CHECK(f->version == 3 && f->alignment == 128 && f->data_offset % 128 == 0, "header");
    CHECK(gguf_get_int(f, "general.alignment", 0) == 128, "alignment key");
    CHECK(gguf_find(f, "w.u32")->type == GGUF_U32 && gguf_get_int(f, "w.u32", 0) == 4000000000LL, "u32");
    CHECK(gguf_find(f, "w.i32")->type == GGUF_I32 && gguf_get_int(f, "w.i32", 0) == -7, "i32");
    CHECK(gguf_get_int(f, "w.u64", 0) == 1ll << 60, "u64");
    CHECK(gguf_find(f, "w.f32")->type == GGUF_F32 && gguf_get_float(f, "w.f32", 0) == (double)0.1f, "f32");
    CHECK(gguf_get_bool(f, "w.bool", false), "bool");
    char s[16];
    CHECK(gguf_get_str(f, "w.str", s, sizeof s) && !strcmp(s, "caf\xc3\xa9"), "str");
    const gguf_array *a = gguf_get_arr(f, "w.arr");
    CHECK(a && a->type == GGUF_I16 && a->n == 4 && gguf_arr_int(a, 2) == -3, "i16 array");
    a = gguf_get_arr(f, "w.strs");
    CHECK(a && a->n == 3 && gguf_str_eq(a->strs[1], "") && gguf_str_eq(a->strs[2], "zz"), "str array");
    CHECK(f->n_tensors == NT, "tensor count");
    for (int t = 0; t < NT && t < (int)f->n_tensors; t++) {
        const gguf_tensor *g = &f->tensors[t];
        CHECK(gguf_str_eq(g->name, ts[t].name) && g->type == ts[t].type && g->n_dims == ts[t].n_dims,
              "tensor %d info", t);
        CHECK(g->ne[0] == ts[t].ne[0] && g->ne[1] == ts[t].ne[1] && g->ne[2] == ts[t].ne[2] &&
              g->ne[3] == 1, "tensor %d shape", t);
        CHECK(g->offset % 128 == 0, "tensor %d offset %llu", t, (unsigned long long)g->offset);
        uint64_t bad = 0;
        for (uint64_t i = 0; i < g->nbytes; i++)
            bad += ((const uint8_t *)g->data)[i] != pattern(t, i);
        CHECK(bad == 0, "tensor %d: %llu bytes differ", t, (unsigned long long)bad);
    }
    gguf_close(f);
}

/* copy_kv reproduces each value exactly, whatever its type or nesting. */
static void check_copy(const gguf_file *src, const char *what)
{
    char err[512];
    gguf_writer *w = gguf_writer_create(path, 32, err, sizeof err);
    REQUIRE(w, "%s", err);
    for (uint64_t i = 0; i < src->n_kv; i++)
        if (!gguf_str_eq(src->kv[i].key, "general.alignment"))
            gguf_writer_copy_kv(w, &src->kv[i]);
    REQUIRE(gguf_writer_begin_data(w) == 0 && gguf_writer_finish(w, err, sizeof err) == 0,
            "%s: %s", what, err);
    gguf_file *f = gguf_open(path, err, sizeof err);
    REQUIRE(f, "%s copy rejected: %s", what, err);
    uint64_t j = 0;
    for (uint64_t i = 0; i < src->n_kv; i++) {
        if (gguf_str_eq(src->kv[i].key, "general.alignment"))
            continue;
        CHECK(j < f->n_kv && kv_equal(&src->kv[i], &f->kv[j]), "%s: kv %llu differs", what,
              (unsigned long long)i);
        j++;
    }
    CHECK(j == f->n_kv, "%s: %llu keys copied, %llu read", what, (unsigned long long)j,
          (unsigned long long)f->n_kv);
    gguf_close(f);
}

/* Misuse must fail at finish with a message containing `expect`, and leave no file behind. */
static void expect_finish_error(gguf_writer *w, const char *expect)
{
    char err[512] = "";
    CHECK(gguf_writer_finish(w, err, sizeof err) == -1, "finish accepted misuse '%s'", expect);
    CHECK(strstr(err, path) && strstr(err, expect), "error '%s' lacks '%s'", err, expect);
    CHECK(access(path, F_OK) != 0, "%s left behind after '%s'", path, expect);
}

static void check_misuse(void)
{
    char err[512];
    const uint64_t ne[2] = {32, 2};
    uint8_t buf[200] = {0};

    gguf_writer *w = gguf_writer_create(path, 32, err, sizeof err);
    gguf_writer_add_tensor(w, "a", DT_Q8_0, 2, ne);
    gguf_writer_begin_data(w);
    CHECK(gguf_writer_write(w, buf, 69) == -1, "write past the tensor");
    expect_finish_error(w, "tensor 'a': 69 bytes written with only 68 left");

    w = gguf_writer_create(path, 32, err, sizeof err);
    gguf_writer_add_tensor(w, "a", DT_Q8_0, 2, ne);
    gguf_writer_add_tensor(w, "b", DT_F32, 2, ne);
    gguf_writer_begin_data(w);
    gguf_writer_write(w, buf, 68);
    gguf_writer_write(w, buf, 100);
    expect_finish_error(w, "tensor 'b' got 100 of its 256 bytes");

    w = gguf_writer_create(path, 32, err, sizeof err);
    gguf_writer_set_u32(w, "k", 1);
    gguf_writer_set_str(w, "k", "again");
    expect_finish_error(w, "'k' set twice");

    w = gguf_writer_create(path, 32, err, sizeof err);
    gguf_writer_set_u32(w, "general.alignment", 64);
    expect_finish_error(w, "general.alignment");

    w = gguf_writer_create(path, 32, err, sizeof err);
    const uint64_t odd[1] = {48};
    gguf_writer_add_tensor(w, "q", DT_Q4_K, 1, odd);
    gguf_writer_begin_data(w);
    expect_finish_error(w, "not a multiple of the Q4_K block size");

    w = gguf_writer_create(path, 32, err, sizeof err);
    gguf_writer_add_tensor(w, "a", DT_F32, 2, ne);
    gguf_writer_add_tensor(w, "a", DT_F32, 2, ne);
    expect_finish_error(w, "'a' added twice");

    w = gguf_writer_create(path, 32, err, sizeof err);
    gguf_writer_begin_data(w);
    gguf_writer_set_u32(w, "late", 1);
    expect_finish_error(w, "after the tensor data started");

    CHECK(!gguf_writer_create(path, 48, err, sizeof err) && strstr(err, "power of two"), "alignment 48");
    CHECK(!gguf_writer_create("/nonexistent/dir/x.gguf", 32, err, sizeof err) &&
          strstr(err, "/nonexistent/dir/x.gguf"), "uncreatable path: '%s'", err);
}

int main(void)
{
    make_path();
    check_setters_and_tensors();

    char err[512];
    bytes hm = gguf_handmade(HANDMADE_NESTED_DEPTH);
    gguf_file *src = gguf_open_memory(hm.p, hm.n, "handmade", err, sizeof err);
    REQUIRE(src, "%s", err);
    check_copy(src, "handmade");
    gguf_close(src);
    free(hm.p);
    check_misuse();

    /* last: skips (exit 77) when the fixtures are absent */
    const char *dir = test_fixtures();
    char fixture[4096];
    snprintf(fixture, sizeof fixture, "%s/tokenizer/llama-bpe.gguf", dir);
    src = gguf_open(fixture, err, sizeof err);
    REQUIRE(src, "%s", err);
    check_copy(src, "llama-bpe");
    gguf_close(src);
    unlink(path);
    return test_done();
}
