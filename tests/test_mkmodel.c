/* Synthetic models (model/synth.h) read back through the GGUF reader: hyper-parameter keys,
 * tensor names, shapes and the types of each weight-type scheme (against a table written from
 * the documented rules), weight statistics (dequantized: no NaN/Inf, the documented means and
 * spreads), determinism (same seed = same bytes, for any thread count), the built-in and copied
 * vocabularies, and parameter errors. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "kernels/types.h"
#include "model/session.h"
#include "model/synth.h"
#include "test.h"
#include "text/tokenizer.h"

static char path_a[64], path_b[64];

static void small(synth_params *p, enum model_arch arch, enum synth_ftype ft)
{
    synth_defaults(p);
    p->arch = arch;
    p->ftype = ft;
    p->n_layer = 2;
    p->n_embd = 256;
    p->n_ff = 256;
    p->n_head = 4;
    p->n_head_kv = 2;
    p->n_vocab = 260;
}

static gguf_file *write_and_open(const synth_params *p, const char *path)
{
    char err[512];
    synth_stats st;
    REQUIRE(synth_write(p, path, &st, err, sizeof err) == 0, "synth_write: %s", err);
    gguf_file *f = gguf_open(path, err, sizeof err);
    REQUIRE(f, "reading back: %s", err);
    CHECK(st.n_bytes == f->size && st.n_tensors == f->n_tensors, "stats");
    return f;
}

static int64_t arch_int(const gguf_file *f, const char *arch, const char *suffix)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_int(f, key, -1);
}

/* Mean and standard deviation of a dequantized tensor; false if any value is NaN or Inf. */
static bool tensor_stats(const gguf_tensor *t, double *mean, double *sd)
{
    const kern_type *kt = kern_type_get(t->type);
    REQUIRE(kt, "no kernels for %s", dtype_get(t->type)->name);
    uint64_t rows = t->ne[1], n = t->ne[0];
    float *row = malloc(n * sizeof *row);
    REQUIRE(row, "out of memory");
    double s = 0, s2 = 0;
    bool finite = true;
    for (uint64_t r = 0; r < rows; r++) {
        kt->to_float((const uint8_t *)t->data + r * dtype_row_bytes(t->type, n), row, (int64_t)n);
        for (uint64_t i = 0; i < n; i++) {
            finite &= isfinite(row[i]);
            s += row[i];
            s2 += (double)row[i] * row[i];
        }
    }
    free(row);
    double count = (double)(rows * n);
    *mean = s / count;
    *sd = sqrt(s2 / count - *mean * *mean);
    return finite;
}

static void check_stats(const gguf_file *f, const char *name, double mean, double sd, double rel_tol)
{
    const gguf_tensor *t = gguf_tensor_find(f, name);
    CHECK(t, "%s missing", name);
    if (!t)
        return;
    double m, s;
    CHECK(tensor_stats(t, &m, &s), "%s: NaN or Inf", name);
    CHECK(fabs(m - mean) < 4 * sd / sqrt((double)(t->ne[0] * t->ne[1])) + 0.02 * sd,
          "%s (%s): mean %g, expected %g", name, dtype_get(t->type)->name, m, mean);
    CHECK(fabs(s - sd) < rel_tol * sd, "%s (%s): sd %g, expected %g", name,
          dtype_get(t->type)->name, s, sd);
}

/* Types expected in a 2-layer model: layer 1 is a "more bits" layer (last eighth), layer 0 not. */
static const struct type_case {
    enum synth_ftype ft;
    enum dtype embd, output, q0, v0, v1, down1;
} type_cases[] = {
    {SYNTH_F32, DT_F32, DT_F32, DT_F32, DT_F32, DT_F32, DT_F32},
    {SYNTH_F16, DT_F16, DT_F16, DT_F16, DT_F16, DT_F16, DT_F16},
    {SYNTH_BF16, DT_BF16, DT_BF16, DT_BF16, DT_BF16, DT_BF16, DT_BF16},
    {SYNTH_Q8_0, DT_Q8_0, DT_Q8_0, DT_Q8_0, DT_Q8_0, DT_Q8_0, DT_Q8_0},
    {SYNTH_Q4_0, DT_Q4_0, DT_Q6_K, DT_Q4_0, DT_Q4_0, DT_Q4_0, DT_Q4_0},
    {SYNTH_Q4_K, DT_Q4_K, DT_Q6_K, DT_Q4_K, DT_Q4_K, DT_Q4_K, DT_Q4_K},
    {SYNTH_Q5_K, DT_Q5_K, DT_Q6_K, DT_Q5_K, DT_Q5_K, DT_Q5_K, DT_Q5_K},
    {SYNTH_Q6_K, DT_Q6_K, DT_Q6_K, DT_Q6_K, DT_Q6_K, DT_Q6_K, DT_Q6_K},
    {SYNTH_Q4_K_M, DT_Q4_K, DT_Q6_K, DT_Q4_K, DT_Q4_K, DT_Q6_K, DT_Q6_K},
    {SYNTH_Q5_K_M, DT_Q5_K, DT_Q6_K, DT_Q5_K, DT_Q5_K, DT_Q6_K, DT_Q6_K},
};

static void expect_type(const gguf_file *f, const char *name, enum dtype want, const char *scheme)
{
    const gguf_tensor *t = gguf_tensor_find(f, name);
    CHECK(t && t->type == want, "%s: %s is %s, expected %s", scheme, name,
          t ? dtype_get(t->type)->name : "missing", dtype_get(want)->name);
}

static void check_model(enum model_arch arch, const struct type_case *tc)
{
    static const char *const arch_name[] = {"llama", "qwen2", "qwen3"};
    const char *an = arch_name[arch], *scheme = synth_ftype_name(tc->ft);
    synth_params p;
    small(&p, arch, tc->ft);
    gguf_file *f = write_and_open(&p, path_a);
    char buf[64];
    CHECK(gguf_get_str(f, "general.architecture", buf, sizeof buf) && !strcmp(buf, an), "arch");
    CHECK(arch_int(f, an, "block_count") == 2 && arch_int(f, an, "embedding_length") == 256 &&
          arch_int(f, an, "feed_forward_length") == 256 && arch_int(f, an, "attention.head_count") == 4 &&
          arch_int(f, an, "attention.head_count_kv") == 2 && arch_int(f, an, "attention.key_length") == 64 &&
          arch_int(f, an, "rope.dimension_count") == 64 && arch_int(f, an, "context_length") == 4096 &&
          arch_int(f, an, "vocab_size") == 260, "%s %s: hyper-parameters", an, scheme);
    char key[96];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", an);
    CHECK(fabs(gguf_get_float(f, key, 0) - 1e-5) < 1e-10, "rms eps");
    snprintf(key, sizeof key, "%s.rope.freq_base", an);
    CHECK(gguf_get_float(f, key, 0) == 500000.0, "rope base");
    const gguf_array *tok = gguf_get_arr(f, "tokenizer.ggml.tokens");
    CHECK(tok && tok->n == 260, "vocabulary");

    int per_layer = 9 + (arch == ARCH_QWEN2 ? 3 : arch == ARCH_QWEN3 ? 2 : 0);
    CHECK(f->n_tensors == (uint64_t)(3 + 2 * per_layer), "%s: %llu tensors", an,
          (unsigned long long)f->n_tensors);
    const struct { const char *name; uint64_t ne0, ne1; } shapes[] = {
        {"token_embd.weight", 256, 260}, {"output.weight", 256, 260}, {"output_norm.weight", 256, 1},
        {"blk.1.attn_q.weight", 256, 256}, {"blk.1.attn_k.weight", 256, 128},
        {"blk.0.attn_v.weight", 256, 128}, {"blk.0.attn_output.weight", 256, 256},
        {"blk.1.ffn_gate.weight", 256, 256}, {"blk.0.ffn_up.weight", 256, 256},
        {"blk.1.ffn_down.weight", 256, 256}, {"blk.0.attn_norm.weight", 256, 1},
        {"blk.1.ffn_norm.weight", 256, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const gguf_tensor *t = gguf_tensor_find(f, shapes[i].name);
        CHECK(t && t->ne[0] == shapes[i].ne0 && t->ne[1] == shapes[i].ne1 &&
              t->n_dims == (shapes[i].ne1 > 1 ? 2u : 1u), "%s: %s shape", an, shapes[i].name);
    }
    expect_type(f, "token_embd.weight", tc->embd, scheme);
    expect_type(f, "output.weight", tc->output, scheme);
    expect_type(f, "blk.0.attn_q.weight", tc->q0, scheme);
    expect_type(f, "blk.0.attn_v.weight", tc->v0, scheme);
    expect_type(f, "blk.1.attn_v.weight", tc->v1, scheme);
    expect_type(f, "blk.1.ffn_down.weight", tc->down1, scheme);
    expect_type(f, "blk.1.ffn_norm.weight", DT_F32, scheme);

    /* 4-bit quantization noise widens the spread by a few percent */
    double tol = tc->ft == SYNTH_Q4_0 || tc->ft == SYNTH_Q4_K || tc->ft == SYNTH_Q4_K_M ? 0.12 : 0.06;
    check_stats(f, "token_embd.weight", 0, 1, tol);
    check_stats(f, "blk.0.attn_q.weight", 0, 1 / 16.0, tol);
    check_stats(f, "blk.1.ffn_down.weight", 0, 1 / 16.0, tol);
    check_stats(f, "output.weight", 0, 1 / 16.0, tol);
    check_stats(f, "blk.0.ffn_norm.weight", 1, 0.05, 0.15);
    if (arch == ARCH_QWEN2) {
        check_stats(f, "blk.1.attn_q.bias", 0, 0.1, 0.15);
        CHECK(gguf_tensor_find(f, "blk.0.attn_k.bias") && gguf_tensor_find(f, "blk.0.attn_k.bias")->ne[0] == 128,
              "qwen2 k bias");
    }
    if (arch == ARCH_QWEN3) {
        const gguf_tensor *qn = gguf_tensor_find(f, "blk.1.attn_q_norm.weight");
        CHECK(qn && qn->ne[0] == 64 && qn->type == DT_F32 && gguf_tensor_find(f, "blk.0.attn_k_norm.weight"),
              "qwen3 q/k norms");
        CHECK(!gguf_tensor_find(f, "blk.0.attn_q.bias"), "qwen3 has no biases");
    }
    gguf_close(f);
}

static bool same_bytes(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    REQUIRE(fa && fb, "cannot reopen the written files");
    bool same = true;
    int ca, cb;
    do {
        ca = getc(fa);
        cb = getc(fb);
        same = ca == cb;
    } while (same && ca != EOF);
    fclose(fa);
    fclose(fb);
    return same;
}

static void check_determinism(void)
{
    char err[512];
    synth_params p;
    small(&p, ARCH_QWEN2, SYNTH_Q8_0);
    p.n_threads = 1;
    REQUIRE(synth_write(&p, path_a, NULL, err, sizeof err) == 0, "%s", err);
    p.n_threads = 3;
    REQUIRE(synth_write(&p, path_b, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(same_bytes(path_a, path_b), "1 and 3 threads give different files");
    p.seed = 2;
    REQUIRE(synth_write(&p, path_b, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(!same_bytes(path_a, path_b), "seeds 1 and 2 give the same file");

    /* the same seed gives the same underlying weights at every type */
    small(&p, ARCH_LLAMA, SYNTH_F32);
    gguf_file *f32 = write_and_open(&p, path_a);
    p.ftype = SYNTH_F16;
    gguf_file *f16 = write_and_open(&p, path_b);
    const gguf_tensor *a = gguf_tensor_find(f32, "blk.1.attn_k.weight");
    const gguf_tensor *b = gguf_tensor_find(f16, "blk.1.attn_k.weight");
    REQUIRE(a && b, "attn_k");
    float x[256];
    kern_type_get(DT_F16)->to_float(b->data, x, 256);
    double worst = 0;
    for (int i = 0; i < 256; i++)
        worst = fmax(worst, fabs(x[i] - ((const float *)a->data)[i]));
    CHECK(worst < 1e-3 / 16, "F16 weights differ from the F32 ones by %g", worst);
    gguf_close(f32);
    gguf_close(f16);
}

/* Tensors larger than the pool are assembled from pool blocks: still the right spread, rows
 * that differ, and the same bytes for any thread count. */
static void check_large_tensors(void)
{
    synth_params p;
    small(&p, ARCH_LLAMA, SYNTH_Q4_K);
    p.n_layer = 1;
    p.n_vocab = 8448; /* 8448 blocks of 256 per embedding matrix */
    p.n_threads = 1;
    gguf_file *f = write_and_open(&p, path_a);
    check_stats(f, "token_embd.weight", 0, 1, 0.12);
    check_stats(f, "output.weight", 0, 1 / 16.0, 0.06);
    const gguf_tensor *t = gguf_tensor_find(f, "token_embd.weight");
    size_t row = (size_t)dtype_row_bytes(t->type, 256);
    int equal_rows = 0;
    for (int r = 1; r < 64; r++)
        equal_rows += !memcmp(t->data, (const uint8_t *)t->data + r * row, row);
    CHECK(equal_rows == 0, "%d of 63 rows equal row 0", equal_rows);
    gguf_close(f);
    char err[512];
    p.n_threads = 2;
    REQUIRE(synth_write(&p, path_b, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(same_bytes(path_a, path_b), "pooled tensors depend on the thread count");
}

/* K-quant rows must be multiples of 256: a 288-wide model falls back to Q8_0 for those. */
static void check_fallback(void)
{
    synth_params p;
    small(&p, ARCH_LLAMA, SYNTH_Q4_K_M);
    p.n_embd = 288;
    gguf_file *f = write_and_open(&p, path_a);
    expect_type(f, "blk.0.attn_q.weight", DT_Q8_0, "288-wide q4_k_m");
    expect_type(f, "output.weight", DT_Q8_0, "288-wide q4_k_m");
    expect_type(f, "blk.0.ffn_down.weight", DT_Q4_K, "288-wide q4_k_m");
    expect_type(f, "blk.1.ffn_down.weight", DT_Q6_K, "288-wide q4_k_m");
    gguf_close(f);
}

static void check_vocabularies(const char *fixtures)
{
    char err[512];
    synth_params p;
    small(&p, ARCH_LLAMA, SYNTH_F16);
    p.tied = true;
    gguf_file *f = write_and_open(&p, path_a);
    CHECK(!gguf_tensor_find(f, "output.weight"), "tied model has output.weight");
    expect_type(f, "token_embd.weight", DT_F16, "tied f16");
    const gguf_array *tok = gguf_get_arr(f, "tokenizer.ggml.tokens");
    const gguf_array *types = gguf_get_arr(f, "tokenizer.ggml.token_type");
    REQUIRE(tok && types && tok->n == 260 && types->n == 260, "built-in vocabulary");
    /* GPT-2's byte alphabet: 'A' is itself, byte 0 is U+0100, space is U+0120 */
    CHECK(gguf_str_eq(tok->strs['A'], "A") && gguf_str_eq(tok->strs[0], "\xc4\x80") &&
          gguf_str_eq(tok->strs[' '], "\xc4\xa0"), "byte tokens");
    CHECK(gguf_str_eq(tok->strs[256], "<|begin_of_text|>") && gguf_arr_int(types, 256) == 3 &&
          gguf_arr_int(types, 259) == 5 && gguf_arr_int(types, 7) == 1, "special tokens");
    tokenizer *tz = tokenizer_load(f, err, sizeof err);
    REQUIRE(tz, "tokenizer: %s", err);
    int32_t *ids = NULL;
    int n = tokenizer_encode(tz, "Hi \xc3\xa9", 5, true, false, &ids);
    CHECK(n == 6 && ids[0] == 256 && ids[1] == 'H' && ids[2] == 'i' && ids[3] == ' ' &&
          ids[4] == 0xc3 && ids[5] == 0xa9, "built-in vocabulary encodes bytes (%d tokens)", n);
    free(ids);
    tokenizer_free(tz);
    gguf_close(f);

    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s/tokenizer/llama-spm.gguf", fixtures);
    p.vocab_from = vocab;
    p.n_vocab = 999; /* ignored: the copied vocabulary decides */
    f = write_and_open(&p, path_a);
    gguf_file *src = gguf_open(vocab, err, sizeof err);
    REQUIRE(src, "%s", err);
    int copied = 0;
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const gguf_kv *k = &src->kv[i];
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)k->key.len, k->key.ptr);
        const gguf_kv *c = gguf_find(f, key);
        if (strncmp(key, "tokenizer.", 10))
            continue;
        copied++;
        CHECK(c && c->type == k->type, "%s not copied", key);
        if (c && k->type == GGUF_ARRAY)
            CHECK(c->v.arr.n == k->v.arr.n && c->v.arr.type == k->v.arr.type, "%s", key);
        else if (c && k->type != GGUF_STRING)
            CHECK(c->v.u64 == k->v.u64, "%s value", key);
    }
    CHECK(copied >= 8, "only %d tokenizer keys", copied);
    /* the vocabulary file's own hyper-parameters (a 32-layer model) are not copied */
    CHECK(gguf_get_int(f, "llama.block_count", 0) == 2 && gguf_get_int(f, "llama.embedding_length", 0) == 256,
          "hyper-parameters copied from the vocabulary file");
    const gguf_tensor *e = gguf_tensor_find(f, "token_embd.weight");
    CHECK(e && e->ne[1] == 32000 && gguf_get_int(f, "llama.vocab_size", 0) == 32000, "vocab size");
    gguf_close(src);
    gguf_close(f);
}

static void check_errors(void)
{
    char err[512];
    synth_params p;
    const struct { const char *what; int field; int value; const char *expect; } cases[] = {
        {"heads", 0, 5, "n_head 5 is not a multiple of n_head_kv"},
        {"embd", 1, 250, "not a multiple of n_head"},
        {"layers", 2, 0, "n_layer 0 is out of range"},
        {"vocab", 3, 100, "n_vocab 100 is out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        small(&p, ARCH_LLAMA, SYNTH_F32);
        int *field[] = {&p.n_head, &p.n_embd, &p.n_layer, &p.n_vocab};
        *field[cases[i].field] = cases[i].value;
        err[0] = 0;
        CHECK(synth_write(&p, path_a, NULL, err, sizeof err) == -1 && strstr(err, cases[i].expect),
              "%s: '%s'", cases[i].what, err);
    }
    small(&p, ARCH_LLAMA, SYNTH_F32);
    p.vocab_from = "/nonexistent/vocab.gguf";
    CHECK(synth_write(&p, path_a, NULL, err, sizeof err) == -1 && strstr(err, "/nonexistent/vocab.gguf"),
          "missing vocabulary: '%s'", err);
    small(&p, ARCH_LLAMA, SYNTH_F32);
    CHECK(synth_write(&p, "/nonexistent/dir/m.gguf", NULL, err, sizeof err) == -1 &&
          strstr(err, "/nonexistent/dir/m.gguf"), "unwritable output: '%s'", err);

    small(&p, ARCH_LLAMA, SYNTH_F32);
    CHECK(synth_preset(&p, "llama3-8b") == 0 && p.n_layer == 32 && p.n_embd == 4096 &&
          p.n_ff == 14336 && p.n_head == 32 && p.n_head_kv == 8 && p.n_vocab == 128256, "llama3-8b");
    CHECK(synth_preset(&p, "qwen2.5-72b") == 0 && p.arch == ARCH_QWEN2 && p.n_layer == 80 &&
          p.n_embd == 8192 && p.n_ff == 29568 && p.n_head == 64 && p.n_vocab == 152064, "qwen2.5-72b");
    CHECK(synth_preset(&p, "gpt5") == -1, "unknown preset");
}

/* The point of the weight scales: a forward pass gives finite logits with a real spread that
 * change with the input, for every architecture. */
static void check_activations(enum model_arch arch, enum synth_ftype ft)
{
    char err[512];
    synth_params p;
    small(&p, arch, ft);
    REQUIRE(synth_write(&p, path_a, NULL, err, sizeof err) == 0, "%s", err);
    model *m = model_load(path_a, err, sizeof err);
    REQUIRE(m, "model_load: %s", err);
    kern_ctx *kc = kern_ctx_create(1);
    session *s = session_create(m, kc, 16, 8, err, sizeof err);
    REQUIRE(kc && s, "session: %s", err);
    enum { N = 8, V = 260 };
    const int32_t tokens[N] = {256, 'T', 'h', 'e', ' ', 'c', 'a', 't'};
    float *logits = malloc(sizeof(float) * N * V);
    REQUIRE(logits, "out of memory");
    REQUIRE(session_eval(s, tokens, N, logits, err, sizeof err) == 0, "eval: %s", err);
    bool finite = true;
    double min_sd = 1e30, max_sd = 0, row_change = 0;
    for (int t = 0; t < N; t++) {
        double sum = 0, sum2 = 0;
        for (int v = 0; v < V; v++) {
            float x = logits[t * V + v];
            finite &= isfinite(x);
            sum += x;
            sum2 += (double)x * x;
            if (t)
                row_change = fmax(row_change, fabs(x - logits[(t - 1) * V + v]));
        }
        double sd = sqrt(sum2 / V - (sum / V) * (sum / V));
        min_sd = fmin(min_sd, sd);
        max_sd = fmax(max_sd, sd);
    }
    CHECK(finite, "arch %d %s: NaN or Inf in the logits", arch, synth_ftype_name(ft));
    CHECK(min_sd > 0.3 && max_sd < 30, "arch %d %s: logit row sd in [%g, %g]", arch,
          synth_ftype_name(ft), min_sd, max_sd);
    CHECK(row_change > 0.3, "arch %d %s: logits hardly change with the input", arch,
          synth_ftype_name(ft));
    free(logits);
    session_free(s);
    kern_ctx_free(kc);
    model_free(m);
}

int main(void)
{
    snprintf(path_a, sizeof path_a, "/tmp/prima-mkmodel-%d-a.gguf", (int)getpid());
    snprintf(path_b, sizeof path_b, "/tmp/prima-mkmodel-%d-b.gguf", (int)getpid());
    for (size_t i = 0; i < sizeof type_cases / sizeof type_cases[0]; i++)
        check_model(ARCH_LLAMA, &type_cases[i]);
    for (enum model_arch a = ARCH_QWEN2; a <= ARCH_QWEN3; a++) {
        check_model(a, &type_cases[SYNTH_F16]);
        check_model(a, &type_cases[SYNTH_Q8_0]);
        check_model(a, &type_cases[SYNTH_Q5_K_M]);
    }
    check_activations(ARCH_LLAMA, SYNTH_F32);
    check_activations(ARCH_QWEN2, SYNTH_Q4_K_M);
    check_activations(ARCH_QWEN3, SYNTH_Q8_0);
    check_determinism();
    check_large_tensors();
    check_fallback();
    check_errors();
    check_vocabularies(test_fixtures()); /* last: skips when the fixtures are absent */
    unlink(path_a);
    unlink(path_b);
    return test_done();
}
