/* Every GGUF fixture read through the reader, checked against the facts the fixtures README
 * states (architecture, shapes, vocabulary, bos/eos, weight types), and tensor bytes checked
 * against an independent read of the file with stdio. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "test.h"

struct model_fact {
    const char *file;
    const char *arch;
    int n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab;
    int bos, eos;
    int tied;
    enum dtype matrix_type;   /* of blk.0.attn_q.weight */
    enum dtype embd_type;     /* of token_embd.weight */
    enum dtype output_type;   /* of output.weight when not tied */
    enum dtype late_v_type;   /* of blk.(n_layer-1).attn_v.weight */
    long long size;
};

static const struct model_fact models[] = {
    {"stories260K.gguf", "llama", 5, 64, 172, 8, 4, 512, 1, 2, 0, DT_F32, DT_F32, DT_F32, DT_F32, 1185376},
    {"tinystories-656k-q8_0.gguf", "llama", 2, 128, 384, 8, 4, 2048, 1, 2, 1, DT_Q8_0, DT_Q8_0, 0, DT_Q8_0, 749728},
    {"tinystories-656k-f16.gguf", "llama", 2, 128, 384, 8, 4, 2048, 1, 2, 1, DT_F16, DT_F16, 0, DT_F16, 1364064},
    {"synth-spm512-l4-e256-f32.gguf", "llama", 4, 256, 768, 8, 4, 512, 1, 2, 0, DT_F32, DT_F32, DT_F32, DT_F32, 13654368},
    {"synth-spm512-l4-e256-f16.gguf", "llama", 4, 256, 768, 8, 4, 512, 1, 2, 0, DT_F16, DT_F16, DT_F16, DT_F16, 6838688},
    {"synth-spm512-l4-e256-bf16.gguf", "llama", 4, 256, 768, 8, 4, 512, 1, 2, 0, DT_BF16, DT_BF16, DT_BF16, DT_BF16, 6838688},
    {"synth-spm512-l4-e256-q8_0.gguf", "llama", 4, 256, 768, 8, 4, 512, 1, 2, 0, DT_Q8_0, DT_Q8_0, DT_Q8_0, DT_Q8_0, 3643808},
    {"synth-spm512-l4-e256-q4_0.gguf", "llama", 4, 256, 768, 8, 4, 512, 1, 2, 0, DT_Q4_0, DT_Q4_0, DT_Q6_K, DT_Q4_0, 1973664},
    {"synth-spm512-l4-e256-q4_k_m.gguf", "llama", 4, 256, 768, 8, 4, 512, 1, 2, 0, DT_Q4_K, DT_Q4_K, DT_Q6_K, DT_Q6_K, 2091936},
    {"synth-spm512-l4-e256-q5_k_m.gguf", "llama", 4, 256, 768, 8, 4, 512, 1, 2, 0, DT_Q5_K, DT_Q5_K, DT_Q6_K, DT_Q6_K, 2444192},
    {"synth-spm512-l4-e256-q6_k.gguf", "llama", 4, 256, 768, 8, 4, 512, 1, 2, 0, DT_Q6_K, DT_Q6_K, DT_Q6_K, DT_Q6_K, 2818464},
    {"synth-spm512-l4-e256-q4_k_s.gguf", "llama", 4, 256, 768, 8, 4, 512, 1, 2, 0, DT_Q4_K, DT_Q4_K, DT_Q6_K, DT_Q5_K, 1990048},
    {"synth-llama3-l2-e64-q8_0.gguf", "llama", 2, 64, 192, 4, 2, 128256, 128000, 128001, 1, DT_Q8_0, DT_Q8_0, 0, DT_Q8_0, 16646848},
    {"synth-qwen2-l2-e64-q8_0.gguf", "qwen2", 2, 64, 192, 4, 2, 151936, 151643, 151645, 1, DT_Q8_0, DT_Q8_0, 0, DT_Q8_0, 16372480},
};

struct vocab_fact {
    const char *file;
    const char *model, *pre;
    int n_vocab, bos, eos;
    long long size;
};

static const struct vocab_fact vocabs[] = {
    {"llama-spm.gguf", "llama", "default", 32000, 1, 2, 723869},
    {"llama-bpe.gguf", "gpt2", "llama-bpe", 128256, 128000, 128001, 7818136},
    {"qwen2.gguf", "gpt2", "qwen2", 151936, 151643, 151645, 5932205},
    {"gpt-2.gguf", "gpt2", "gpt-2", 50257, 50256, 50256, 1766807},
    {"phi-3.gguf", "llama", "default", 32064, 1, 32000, 726019},
    {"deepseek-llm.gguf", "gpt2", "deepseek-llm", 102400, 100000, 100001, 3970167},
    {"deepseek-coder.gguf", "gpt2", "deepseek-coder", 32256, 32013, 32014, 1156067},
};

static int64_t key_int(const gguf_file *f, const char *arch, const char *suffix)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_int(f, key, -1);
}

static void check_shape(const gguf_file *f, const char *name, uint64_t ne0, uint64_t ne1)
{
    const gguf_tensor *t = gguf_tensor_find(f, name);
    CHECK(t, "%s: tensor %s missing", f->path, name);
    if (!t)
        return;
    CHECK(t->ne[0] == ne0 && t->ne[1] == ne1, "%s: %s is %llux%llu, expected %llux%llu", f->path,
          name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
          (unsigned long long)ne0, (unsigned long long)ne1);
}

static void check_type(const gguf_file *f, const char *name, enum dtype type)
{
    const gguf_tensor *t = gguf_tensor_find(f, name);
    CHECK(t && t->type == type, "%s: %s has type %s, expected %s", f->path, name,
          t ? dtype_get(t->type)->name : "(missing)", dtype_get(type)->name);
}

/* The bytes the reader points at are the bytes at data_offset + offset in the file. */
static void check_bytes_match_file(const gguf_file *f, const gguf_tensor *t)
{
    FILE *fp = fopen(f->path, "rb");
    REQUIRE(fp, "cannot reopen %s", f->path);
    uint8_t buf[64];
    size_t n = t->nbytes < sizeof buf ? (size_t)t->nbytes : sizeof buf;
    CHECK(fseek(fp, (long)(f->data_offset + t->offset), SEEK_SET) == 0 && fread(buf, 1, n, fp) == n,
          "%s: short read", f->path);
    CHECK(memcmp(buf, t->data, n) == 0, "%s: tensor bytes differ from the file", f->path);
    fclose(fp);
}

static void check_model(const char *dir, const struct model_fact *m)
{
    char path[4096], err[512], buf[64];
    snprintf(path, sizeof path, "%s/models/%s", dir, m->file);
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f, "open failed: %s", err);
    if (!f)
        return;
    CHECK(f->version == 3, "%s: version %u", m->file, f->version);
    CHECK((long long)f->size == m->size, "%s: size %llu", m->file, (unsigned long long)f->size);
    CHECK(f->alignment == 32, "%s: alignment %llu", m->file, (unsigned long long)f->alignment);
    CHECK(gguf_get_str(f, "general.architecture", buf, sizeof buf) && !strcmp(buf, m->arch),
          "%s: architecture", m->file);
    CHECK(key_int(f, m->arch, "block_count") == m->n_layer, "%s: block_count", m->file);
    CHECK(key_int(f, m->arch, "embedding_length") == m->n_embd, "%s: embedding_length", m->file);
    CHECK(key_int(f, m->arch, "feed_forward_length") == m->n_ff, "%s: feed_forward_length", m->file);
    CHECK(key_int(f, m->arch, "attention.head_count") == m->n_head, "%s: head_count", m->file);
    CHECK(key_int(f, m->arch, "attention.head_count_kv") == m->n_head_kv, "%s: head_count_kv", m->file);
    CHECK(gguf_get_int(f, "tokenizer.ggml.bos_token_id", -1) == m->bos, "%s: bos", m->file);
    CHECK(gguf_get_int(f, "tokenizer.ggml.eos_token_id", -1) == m->eos, "%s: eos", m->file);
    const gguf_array *tokens = gguf_get_arr(f, "tokenizer.ggml.tokens");
    CHECK(tokens && tokens->type == GGUF_STRING && tokens->n == (uint64_t)m->n_vocab,
          "%s: vocabulary size", m->file);

    int per_layer = 9 + (strcmp(m->arch, "qwen2") ? 0 : 3);
    CHECK(f->n_tensors == (uint64_t)(2 + !m->tied + per_layer * m->n_layer), "%s: %llu tensors",
          m->file, (unsigned long long)f->n_tensors);
    int kv_dim = m->n_embd / m->n_head * m->n_head_kv;
    check_shape(f, "token_embd.weight", m->n_embd, m->n_vocab);
    check_shape(f, "output_norm.weight", m->n_embd, 1);
    check_shape(f, "blk.0.attn_q.weight", m->n_embd, m->n_embd);
    check_shape(f, "blk.0.attn_k.weight", m->n_embd, kv_dim);
    check_shape(f, "blk.1.ffn_down.weight", m->n_ff, m->n_embd);
    check_type(f, "blk.0.attn_q.weight", m->matrix_type);
    check_type(f, "blk.0.attn_norm.weight", DT_F32);
    check_type(f, "token_embd.weight", m->embd_type);
    char late_v[64];
    snprintf(late_v, sizeof late_v, "blk.%d.attn_v.weight", m->n_layer - 1);
    check_type(f, late_v, m->late_v_type);
    if (m->tied)
        CHECK(!gguf_tensor_find(f, "output.weight"), "%s: tied model has output.weight", m->file);
    else
        check_type(f, "output.weight", m->output_type);
    if (!strcmp(m->arch, "qwen2"))
        check_shape(f, "blk.1.attn_v.bias", kv_dim, 1);

    /* The data section ends within one alignment unit of the end of the file. */
    uint64_t end = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->offset + t->nbytes > end)
            end = t->offset + t->nbytes;
        CHECK((const uint8_t *)t->data == f->map + f->data_offset + t->offset, "%s: data pointer",
              m->file);
    }
    CHECK(f->data_offset + end <= f->size && f->size - (f->data_offset + end) < f->alignment,
          "%s: data ends at %llu of %llu", m->file, (unsigned long long)(f->data_offset + end),
          (unsigned long long)f->size);
    check_bytes_match_file(f, gguf_tensor_find(f, "output_norm.weight"));
    gguf_close(f);
}

static void check_vocab(const char *dir, const struct vocab_fact *v)
{
    char path[4096], err[512], buf[64];
    snprintf(path, sizeof path, "%s/tokenizer/%s", dir, v->file);
    gguf_file *f = gguf_open(path, err, sizeof err);
    CHECK(f, "open failed: %s", err);
    if (!f)
        return;
    CHECK((long long)f->size == v->size, "%s: size", v->file);
    CHECK(f->n_tensors == 0, "%s: vocabulary file has tensors", v->file);
    CHECK(gguf_get_str(f, "tokenizer.ggml.model", buf, sizeof buf) && !strcmp(buf, v->model),
          "%s: tokenizer model '%s'", v->file, buf);
    CHECK(gguf_get_str(f, "tokenizer.ggml.pre", buf, sizeof buf) && !strcmp(buf, v->pre),
          "%s: pre-tokenizer", v->file);
    CHECK(gguf_get_int(f, "tokenizer.ggml.bos_token_id", -1) == v->bos, "%s: bos", v->file);
    CHECK(gguf_get_int(f, "tokenizer.ggml.eos_token_id", -1) == v->eos, "%s: eos", v->file);
    const gguf_array *tokens = gguf_get_arr(f, "tokenizer.ggml.tokens");
    const gguf_array *types = gguf_get_arr(f, "tokenizer.ggml.token_type");
    CHECK(tokens && tokens->n == (uint64_t)v->n_vocab, "%s: vocabulary size", v->file);
    CHECK(types && types->n == (uint64_t)v->n_vocab, "%s: token types", v->file);
    if (!strcmp(v->model, "gpt2"))
        CHECK(gguf_get_arr(f, "tokenizer.ggml.merges"), "%s: BPE without merges", v->file);
    gguf_close(f);
}

/* Details the README spells out for individual files. */
static void check_specifics(const char *dir)
{
    char path[4096], err[512], buf[256];
    snprintf(path, sizeof path, "%s/tokenizer/llama-bpe.gguf", dir);
    gguf_file *f = gguf_open(path, err, sizeof err);
    REQUIRE(f, "%s", err);
    const gguf_array *tokens = gguf_get_arr(f, "tokenizer.ggml.tokens");
    const gguf_array *types = gguf_get_arr(f, "tokenizer.ggml.token_type");
    REQUIRE(tokens && types && tokens->n > 128001, "llama-bpe arrays");
    CHECK(gguf_str_eq(tokens->strs[128000], "<|begin_of_text|>"), "llama-bpe bos text");
    CHECK(gguf_str_eq(tokens->strs[128001], "<|end_of_text|>"), "llama-bpe eos text");
    CHECK(gguf_arr_int(types, 128000) == 3 && gguf_arr_int(types, 1000) == 1, "llama-bpe token types");
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", false), "llama-bpe add_bos");
    gguf_close(f);

    snprintf(path, sizeof path, "%s/tokenizer/qwen2.gguf", dir);
    f = gguf_open(path, err, sizeof err);
    REQUIRE(f, "%s", err);
    types = gguf_get_arr(f, "tokenizer.ggml.token_type");
    REQUIRE(types && types->n == 151936, "qwen2 token types");
    CHECK(gguf_arr_int(types, 151657) == 4 && gguf_arr_int(types, 151669) == 5 &&
          gguf_arr_int(types, 151643) == 3, "qwen2 token types");
    CHECK(!gguf_get_bool(f, "tokenizer.ggml.add_bos_token", true), "qwen2 add_bos");
    CHECK(gguf_get_int(f, "tokenizer.ggml.padding_token_id", -1) == 151643, "qwen2 pad");
    gguf_close(f);

    snprintf(path, sizeof path, "%s/models/stories260K.gguf", dir);
    f = gguf_open(path, err, sizeof err);
    REQUIRE(f, "%s", err);
    tokens = gguf_get_arr(f, "tokenizer.ggml.tokens");
    REQUIRE(tokens && tokens->n == 512, "stories260K tokens");
    CHECK(gguf_str_eq(tokens->strs[3], "<0x00>") && gguf_str_eq(tokens->strs[258], "<0xFF>"),
          "stories260K byte tokens");
    CHECK(!gguf_find(f, "llama.rope.freq_base"), "stories260K has no rope base key");
    CHECK(gguf_get_float(f, "llama.rope.freq_base", 10000.0) == 10000.0, "getter default");
    CHECK(fabs(gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", 0) - 1e-5) < 1e-9,
          "stories260K rms eps");
    CHECK(gguf_get_int(f, "tokenizer.ggml.padding_token_id", 0) == 4294967295LL, "u32 max");
    CHECK(gguf_get_int(f, "general.architecture", -7) == -7, "string read as int gives default");
    CHECK(!gguf_get_str(f, "llama.block_count", buf, sizeof buf), "int read as string");
    gguf_close(f);

    /* Norm weights of the random models are N(1, 0.05^2): their mean is close to 1. */
    snprintf(path, sizeof path, "%s/models/synth-spm512-l4-e256-f32.gguf", dir);
    f = gguf_open(path, err, sizeof err);
    REQUIRE(f, "%s", err);
    const gguf_tensor *t = gguf_tensor_find(f, "blk.3.ffn_norm.weight");
    REQUIRE(t && t->type == DT_F32 && t->nbytes == 256 * 4, "ffn_norm");
    double sum = 0;
    for (int i = 0; i < 256; i++) {
        float v;
        memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
        sum += v;
    }
    CHECK(fabs(sum / 256 - 1.0) < 0.02, "norm mean %g", sum / 256);
    CHECK(fabs(gguf_get_float(f, "llama.rope.freq_base", 0) - 500000.0) < 1e-3, "rope base");
    CHECK(gguf_get_int(f, "llama.context_length", 0) == 4096, "context length");
    gguf_close(f);
}

int main(void)
{
    const char *dir = test_fixtures();
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        check_model(dir, &models[i]);
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++)
        check_vocab(dir, &vocabs[i]);
    check_specifics(dir);

    char err[256] = "";
    gguf_file *f = gguf_open("/nonexistent/x.gguf", err, sizeof err);
    CHECK(!f && strstr(err, "/nonexistent/x.gguf"), "missing file: '%s'", err);
    return test_done();
}
