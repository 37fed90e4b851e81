/* The model layer against an independent forward pass (tests/support/tiny_model.c) for every
 * architecture and RoPE form, the ring contract (layer ranges on separate engines give the
 * same bits as one engine), context shift, and the loader's error messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/session.h"
#include "support/fidelity.h"
#include "support/tiny_model.h"
#include "test.h"

static char path[256];

static const int32_t prompt[] = {5, 17, 42, 3, 96, 0, 61, 8, 8, 23, 77, 14, 50, 2};
#define N_PROMPT ((int)(sizeof prompt / sizeof prompt[0]))

static tiny_cfg base_cfg(const char *arch)
{
    return (tiny_cfg){.arch = arch, .n_layer = 3, .n_embd = 64, .n_ff = 80, .n_head = 8,
                      .n_head_kv = 2, .head_dim = 8, .n_vocab = 97, .seed = 7};
}

static model *write_and_load(const tiny_model *t, const tiny_fault *fault, char *err, size_t errlen)
{
    REQUIRE(tiny_model_write(t, path, fault, err, errlen) == 0, "writing %s: %s", path, err);
    return model_load(path, err, errlen);
}

/* Logits of prompt[0..n) from a session with the given batch size, all rows. */
static float *session_logits(const model *m, int n, int n_batch, int n_threads)
{
    char err[256];
    kern_ctx *kc = kern_ctx_create(n_threads);
    session *s = session_create(m, kc, 64, n_batch, err, sizeof err);
    REQUIRE(s, "%s", err);
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)m->hp.n_vocab);
    REQUIRE(session_eval(s, prompt, n, out, err, sizeof err) == 0, "%s", err);
    session_free(s);
    kern_ctx_free(kc);
    return out;
}

static void compare_rows(const char *what, const float *ref, const float *got, int n, int n_vocab)
{
    const fid_tol tol = fid_tolerance(FID_FLOAT);
    for (int i = 0; i < n; i++) {
        fid_row r = fid_compare_row(ref + (size_t)i * (size_t)n_vocab,
                                    got + (size_t)i * (size_t)n_vocab, n_vocab, &tol);
        CHECK(r.ok, "%s row %d: 1-cos %.2e, dev %.4f sd, argmax %d vs %d", what, i, 1.0 - r.cos,
              r.dev, r.argmax, r.ref_argmax);
    }
}

/* Prefill in one batch, in batches of 3, and one token at a time all match the reference. */
static void check_arch(const char *what, const tiny_cfg *cfg)
{
    char err[256];
    tiny_model *t = tiny_model_create(cfg);
    model *m = write_and_load(t, NULL, err, sizeof err);
    REQUIRE(m, "%s: %s", what, err);
    float *ref = malloc(sizeof(float) * N_PROMPT * (size_t)cfg->n_vocab);
    tiny_model_forward(t, prompt, N_PROMPT, ref);
    const int batches[] = {N_PROMPT, 3, 1};
    for (int b = 0; b < 3; b++) {
        float *got = session_logits(m, N_PROMPT, batches[b], 2);
        char label[96];
        snprintf(label, sizeof label, "%s, batch %d", what, batches[b]);
        compare_rows(label, ref, got, N_PROMPT, cfg->n_vocab);
        free(got);
    }
    free(ref);
    model_free(m);
    tiny_model_free(t);
}

static void test_architectures(void)
{
    tiny_cfg c = base_cfg("llama");
    c.tied = true;
    check_arch("llama GQA tied", &c);

    c = base_cfg("llama");
    c.rope = TINY_ROPE_FREQS_TENSOR;
    check_arch("llama rope_freqs", &c);

    c = base_cfg("llama");
    c.head_dim = 16;
    c.n_head = 4;
    c.rope = TINY_ROPE_LLAMA3_KEYS;
    check_arch("llama llama3 scaling keys", &c);

    c = base_cfg("llama");
    c.head_dim = 16;
    c.n_head = 4;
    c.n_head_kv = 4;
    c.n_rot = 8;
    c.rope = TINY_ROPE_LINEAR;
    check_arch("llama linear scaling, partial rotation, MHA", &c);

    c = base_cfg("qwen2");
    c.tied = true;
    check_arch("qwen2 biases", &c);

    c = base_cfg("qwen3");
    c.n_embd = 48;
    c.head_dim = 16;
    c.n_head = 4;
    c.n_head_kv = 2;
    check_arch("qwen3 qk-norm, head size 16 x 4 heads != n_embd 48", &c);
}

/* The ring contract: layers [0, 1) on one engine, [1, 3) on another (each owning only its
 * layers), gives exactly the bits of one engine running [0, 3), in prefill and decode. */
static void test_layer_ranges(void)
{
    char err[256];
    tiny_cfg cfg = base_cfg("qwen2");
    tiny_model *t = tiny_model_create(&cfg);
    model *m = write_and_load(t, NULL, err, sizeof err);
    REQUIRE(m, "%s", err);
    kern_ctx *kc = kern_ctx_create(2);
    const bool own_a[3] = {true, false, false}, own_b[3] = {false, true, true};
    engine *full = engine_create(m, kc, 32, 8, NULL, err, sizeof err);
    engine *a = engine_create(m, kc, 32, 8, own_a, err, sizeof err);
    engine *b = engine_create(m, kc, 32, 8, own_b, err, sizeof err);
    REQUIRE(full && a && b, "%s", err);
    uint64_t kv_full, kv_a, kv_b, scratch;
    engine_memory(full, &kv_full, &scratch);
    engine_memory(a, &kv_a, &scratch);
    engine_memory(b, &kv_b, &scratch);
    /* 32 positions x 2 kv heads x 8 dims x 2 bytes, for K and V, per owned layer */
    CHECK(kv_full == 3 * 2048 && kv_a == 2048 && kv_b == 2 * 2048,
          "KV cache bytes %llu / %llu / %llu: only owned layers get one",
          (unsigned long long)kv_full, (unsigned long long)kv_a, (unsigned long long)kv_b);
    const int e = m->hp.n_embd, nv = m->hp.n_vocab;
    float h1[8 * 64], h2[8 * 64], l1[97], l2[97];
    int32_t pos[8] = {0, 1, 2, 3, 4, 5, 6, 7};

    /* prefill 6 tokens, then decode 2 */
    for (int step = 0; step < 3; step++) {
        int n = step == 0 ? 6 : 1;
        const int32_t *p = step == 0 ? pos : &pos[5 + step];
        const int32_t *tok = &prompt[step == 0 ? 0 : 5 + step];
        engine_embed(full, tok, n, h1);
        engine_embed(a, tok, n, h2);
        CHECK(engine_layers(full, h1, n, p, NULL, 0, 3) == 0, "full engine");
        CHECK(engine_layers(a, h2, n, p, NULL, 0, 1) == 0, "engine a, layer 0");
        CHECK(engine_layers(b, h2, n, p, NULL, 1, 3) == 0, "engine b, layers 1..2");
        CHECK(!memcmp(h1, h2, sizeof(float) * (size_t)n * (size_t)e),
              "step %d: split hidden state differs from one engine", step);
        engine_output(full, h1, n - 1, 1, l1);
        engine_output(b, h2, n - 1, 1, l2);
        CHECK(!memcmp(l1, l2, sizeof(float) * (size_t)nv), "step %d: logits differ", step);
    }
    /* what an engine must refuse */
    CHECK(engine_layers(a, h2, 1, &pos[7], NULL, 1, 2) == -1, "a layer it does not own");
    CHECK(engine_layers(full, h1, 9, pos, NULL, 0, 3) == -1, "more tokens than max_batch");
    int32_t gap[2] = {3, 5};
    CHECK(engine_layers(full, h1, 2, gap, NULL, 0, 3) == -1, "positions with a gap");
    int32_t ahead = 20;
    CHECK(engine_layers(full, h1, 1, &ahead, NULL, 0, 3) == -1, "a position past the cached ones");
    int32_t out = 32;
    CHECK(engine_layers(full, h1, 1, &out, NULL, 0, 3) == -1, "a position outside the context");
    engine_free(full);
    engine_free(a);
    engine_free(b);
    kern_ctx_free(kc);
    model_free(m);
    tiny_model_free(t);
}

/* After a context shift the cache must be what evaluating the remaining tokens from scratch
 * gives: keys re-rotated to their new positions. Exactly so only for one layer: deeper layers'
 * keys also carry the dropped tokens through attention, by design of context shifting. */
static void test_context_shift(void)
{
    char err[256];
    tiny_cfg cfg = base_cfg("llama");
    cfg.rope = TINY_ROPE_FREQS_TENSOR;
    cfg.n_layer = 1;
    tiny_model *t = tiny_model_create(&cfg);
    model *m = write_and_load(t, NULL, err, sizeof err);
    REQUIRE(m, "%s", err);
    kern_ctx *kc = kern_ctx_create(1);
    session *s = session_create(m, kc, 12, 4, err, sizeof err);
    REQUIRE(s, "%s", err);
    REQUIRE(session_eval(s, prompt, 12, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(session_eval(s, prompt + 12, 1, NULL, err, sizeof err) == -1, "a full context must refuse");
    CHECK(strstr(err, "do not fit") != NULL, "message: %s", err);
    int dropped = session_shift(s, 1);
    CHECK(dropped == 5 && s->n_past == 7, "dropped %d, %d left", dropped, s->n_past);
    REQUIRE(session_eval(s, prompt + 12, 1, NULL, err, sizeof err) == 0, "%s", err);

    int32_t kept[8] = {prompt[0], prompt[6], prompt[7], prompt[8], prompt[9], prompt[10],
                       prompt[11], prompt[12]};
    CHECK(!memcmp(s->tokens, kept, sizeof kept), "history after the shift");
    float ref[8 * 97];
    tiny_model_forward(t, kept, 8, ref);
    compare_rows("after context shift", ref + 7 * 97, s->logits, 1, 97);
    session_free(s);
    kern_ctx_free(kc);
    model_free(m);
    tiny_model_free(t);
}

static void expect_load_error(const tiny_fault *f, const char *needle)
{
    char err[256] = "";
    tiny_cfg cfg = base_cfg("qwen2");
    tiny_model *t = tiny_model_create(&cfg);
    model *m = write_and_load(t, f, err, sizeof err);
    CHECK(!m, "loading must fail (%s)", needle);
    CHECK(strstr(err, needle) && strstr(err, path) && !strchr(err, '\n'),
          "error '%s' should name '%s' and the file, on one line", err, needle);
    model_free(m);
    tiny_model_free(t);
}

static void test_load_errors(void)
{
    expect_load_error(&(tiny_fault){.arch = "gpt-neox"}, "unknown model architecture 'gpt-neox'");
    expect_load_error(&(tiny_fault){.omit_key = "block_count"}, "qwen2.block_count");
    expect_load_error(&(tiny_fault){.omit_tensor = "blk.2.ffn_up.weight"}, "blk.2.ffn_up.weight");
    expect_load_error(&(tiny_fault){.omit_tensor = "blk.0.attn_k.bias"}, "blk.0.attn_k.bias");
    expect_load_error(&(tiny_fault){.omit_tensor = "token_embd.weight"}, "token_embd.weight");
    expect_load_error(&(tiny_fault){.transpose_tensor = "blk.1.ffn_up.weight"},
                      "tensor 'blk.1.ffn_up.weight' has shape [80, 64");
    expect_load_error(&(tiny_fault){.retype_tensor = "blk.0.ffn_gate.weight", .retype = DT_Q4_1},
                      "'blk.0.ffn_gate.weight' has type Q4_1");
    expect_load_error(&(tiny_fault){.retype_tensor = "output_norm.weight", .retype = DT_F16},
                      "'output_norm.weight' has type F16, expected F32");

    char err[256];
    CHECK(!model_load("/nonexistent/model.gguf", err, sizeof err), "a missing file");
    CHECK(strstr(err, "/nonexistent/model.gguf"), "error names the file: %s", err);
}

/* Session-level refusals: ids outside the vocabulary, and nothing evaluated then. */
static void test_session_errors(void)
{
    char err[256];
    tiny_cfg cfg = base_cfg("llama");
    tiny_model *t = tiny_model_create(&cfg);
    model *m = write_and_load(t, NULL, err, sizeof err);
    REQUIRE(m, "%s", err);
    kern_ctx *kc = kern_ctx_create(1);
    session *s = session_create(m, kc, 16, 4, err, sizeof err);
    REQUIRE(s, "%s", err);
    int32_t bad[2] = {3, 97};
    CHECK(session_eval(s, bad, 2, NULL, err, sizeof err) == -1 && s->n_past == 0,
          "token 97 of a 97-token vocabulary");
    CHECK(strstr(err, "97"), "message names the id: %s", err);
    CHECK(session_eval(s, prompt, 17, NULL, err, sizeof err) == -1 && s->n_past == 0,
          "17 tokens in a 16-token context");
    session_free(s);
    CHECK(!session_create(m, kc, 0, 4, err, sizeof err), "a zero context");
    kern_ctx_free(kc);
    model_free(m);
    tiny_model_free(t);
}

int main(void)
{
    kern_init();
    snprintf(path, sizeof path, "/tmp/prima-test-model-%d.gguf", (int)getpid());
    test_architectures();
    test_layer_ranges();
    test_context_shift();
    test_load_errors();
    test_session_errors();
    unlink(path);
    return test_done();
}
