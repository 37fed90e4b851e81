/* The tokenizer on small hand-built vocabularies: cases where the merge order, ties, merge-only
 * intermediates, special-token precedence or the vocabulary's keys decide the result, and
 * damaged vocabularies, which must give a one-line error naming the file and the key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/gguf_bytes.h"
#include "test.h"
#include "text/tokenizer.h"

#define SP "\xE2\x96\x81"   /* U+2581, SentencePiece's space */

typedef struct vocab_file {
    bytes kv;
    uint64_t n_kv;
    bytes whole;
    gguf_file *f;
} vocab_file;

static void kv_str(vocab_file *v, const char *key, const char *val)
{
    bytes_key(&v->kv, key, GGUF_STRING);
    bytes_str(&v->kv, val);
    v->n_kv++;
}

static void kv_u32(vocab_file *v, const char *key, uint32_t val)
{
    bytes_key(&v->kv, key, GGUF_U32);
    bytes_u32(&v->kv, val);
    v->n_kv++;
}

static void kv_bool(vocab_file *v, const char *key, bool val)
{
    bytes_key(&v->kv, key, GGUF_BOOL);
    bytes_put(&v->kv, val ? "\x01" : "\x00", 1);
    v->n_kv++;
}

static void kv_strs(vocab_file *v, const char *key, const char *const *s, int n)
{
    bytes_key(&v->kv, key, GGUF_ARRAY);
    bytes_u32(&v->kv, GGUF_STRING);
    bytes_u64(&v->kv, (uint64_t)n);
    for (int i = 0; i < n; i++)
        bytes_str(&v->kv, s[i]);
    v->n_kv++;
}

/* A numeric array: F32 when f is given, else I32 from i. */
static void kv_nums(vocab_file *v, const char *key, const float *f, const int32_t *i, int n)
{
    bytes_key(&v->kv, key, GGUF_ARRAY);
    bytes_u32(&v->kv, f ? GGUF_F32 : GGUF_I32);
    bytes_u64(&v->kv, (uint64_t)n);
    bytes_put(&v->kv, f ? (const void *)f : (const void *)i, sizeof(float) * (size_t)n);
    v->n_kv++;
}

static gguf_file *vocab_open(vocab_file *v)
{
    bytes_put(&v->whole, "GGUF", 4);
    bytes_u32(&v->whole, 3);
    bytes_u64(&v->whole, 0);
    bytes_u64(&v->whole, v->n_kv);
    bytes_put(&v->whole, v->kv.p, v->kv.n);
    char err[256];
    v->f = gguf_open_memory(v->whole.p, v->whole.n, "vocab.gguf", err, sizeof err);
    REQUIRE(v->f, "%s", err);
    return v->f;
}

static void vocab_close(vocab_file *v)
{
    gguf_close(v->f);
    free(v->kv.p);
    free(v->whole.p);
}

static tokenizer *load(vocab_file *v)
{
    char err[256];
    tokenizer *t = tokenizer_load(vocab_open(v), err, sizeof err);
    REQUIRE(t, "%s", err);
    return t;
}

static void check_ids(const tokenizer *t, const char *text, bool add_special, const int32_t *want, int n_want)
{
    int32_t *ids;
    int n = tokenizer_encode(t, text, strlen(text), add_special, false, &ids);
    bool same = n == n_want;
    for (int i = 0; same && i < n; i++)
        same = ids[i] == want[i];
    CHECK(same, "'%s' gives %d tokens:%s%d%s%d...", text, n, n > 0 ? " " : "", n > 0 ? ids[0] : 0,
          n > 1 ? " " : "", n > 1 ? ids[1] : 0);
    free(ids);
}

#define IDS(...) (int32_t[]){__VA_ARGS__}, (int)(sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

/* SPM: <unk> <s> </s>, byte tokens for C3 and A9 only, then scored pieces. */
enum { S_UNK, S_BOS, S_EOS, S_XC3, S_XA9, S_SP, S_A, S_B, S_C, S_AB, S_SPA, S_BC, S_AA, S_SPAB, S_N };

/* The SPM vocabulary's model, tokens, scores and types; callers add their own keys. */
static void spm_vocab(vocab_file *v)
{
    static const char *const toks[S_N] = {"<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", SP, "a", "b", "c",
                                          "ab", SP "a", "bc", "aa", SP "ab"};
    static const float scores[S_N] = {0, 0, 0, 0, 0, -1, -2, -2, -2, -3, -1.5f, -0.5f, -1, -10};
    static const int32_t types[S_N] = {2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    kv_str(v, "tokenizer.ggml.model", "llama");
    kv_strs(v, "tokenizer.ggml.tokens", toks, S_N);
    kv_nums(v, "tokenizer.ggml.scores", scores, NULL, S_N);
    kv_nums(v, "tokenizer.ggml.token_type", NULL, types, S_N);
}

static void check_spm(void)
{
    vocab_file v = {0};
    spm_vocab(&v);
    kv_u32(&v, "tokenizer.ggml.eot_token_id", S_AA);
    tokenizer *t = load(&v);

    /* the best-scored pair first: "bc" (-0.5) before "▁a" (-1.5); a longest-match scan would
     * take "▁ab" + "c" */
    check_ids(t, "abc", false, IDS(S_SPA, S_BC));
    /* equal scores: the leftmost "aa" wins, then "▁" and "a" stay apart */
    check_ids(t, "aaa", false, IDS(S_SP, S_AA, S_A));
    /* no token for "é": its bytes */
    check_ids(t, "\xC3\xA9", false, IDS(S_SP, S_XC3, S_XA9));
    /* a byte without a byte token becomes <unk> */
    check_ids(t, "\xC3\xA8", false, IDS(S_SP, S_XC3, S_UNK));
    /* defaults without add_* keys: BOS yes, EOS no */
    check_ids(t, "a", true, IDS(S_BOS, S_SPA));
    CHECK(tokenizer_bos(t) == S_BOS && tokenizer_eos(t) == S_EOS, "SPM default BOS/EOS ids");
    CHECK(tokenizer_is_eog(t, S_EOS) && tokenizer_is_eog(t, S_AA) && !tokenizer_is_eog(t, S_A),
          "EOS and tokenizer.ggml.eot_token_id end generation");

    char buf[16];
    CHECK(tokenizer_piece(t, S_SPAB, false, buf, sizeof buf) == 3 && !memcmp(buf, " ab", 3), "piece of ▁ab");
    CHECK(tokenizer_piece(t, S_XC3, false, buf, sizeof buf) == 1 && buf[0] == '\xC3', "piece of <0xC3>");
    CHECK(tokenizer_piece(t, S_BOS, false, buf, sizeof buf) == 0, "control piece without special");
    CHECK(tokenizer_piece(t, S_BOS, true, buf, sizeof buf) == 3 && !memcmp(buf, "<s>", 3), "control piece");
    CHECK(tokenizer_piece(t, S_SPAB, false, buf, 2) == 3 && !memcmp(buf, " a", 2), "truncated piece");
    CHECK(tokenizer_piece(t, S_N, true, buf, sizeof buf) == 0 && tokenizer_piece(t, -1, true, buf, 4) == 0,
          "ids outside the vocabulary");
    tokenizer_free(t);
    vocab_close(&v);

    /* add_space_prefix = false, add_bos_token = false, add_eos_token = true */
    vocab_file w = {0};
    spm_vocab(&w);
    kv_bool(&w, "tokenizer.ggml.add_space_prefix", false);
    kv_bool(&w, "tokenizer.ggml.add_bos_token", false);
    kv_bool(&w, "tokenizer.ggml.add_eos_token", true);
    kv_u32(&w, "tokenizer.ggml.bos_token_id", 999);   /* not a token: the default stays */
    t = load(&w);
    check_ids(t, "abc", true, IDS(S_A, S_BC, S_EOS));
    CHECK(tokenizer_bos(t) == S_BOS, "out-of-range bos id replaced by the default");
    detok_stream s;
    detok_init(&s);
    char out[16];
    CHECK(detok_push(&s, t, S_SPA, out, sizeof out) == 2 && !memcmp(out, " a", 2),
          "no space prefix: the first piece keeps its space");
    tokenizer_free(t);
    vocab_close(&w);
}

/* Byte-level BPE. In GPT-2's byte table, printable ASCII stands for itself. */
enum { B_A, B_B, B_C, B_AB, B_BC, B_ABC, B_X, B_Y, B_Z, B_XYZ, B_P, B_Q, B_PQ, B_D, B_UD_AB, B_UD_BDDD,
       B_END, B_N };

static tokenizer *load_bpe(vocab_file *v, const char *pre)
{
    static const char *const toks[B_N] = {"a", "b", "c", "ab", "bc", "abc", "x", "y", "z", "xyz", "p", "q",
                                          "pq", "d", "<ab>", "b>ddd", "<|end|>"};
    static const int32_t types[B_N] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 3};
    /* "x y" builds "xy", which is no token but is one side of the next merge */
    static const char *const merges[] = {"b c", "a b", "ab c", "x y", "xy z"};
    kv_str(v, "tokenizer.ggml.model", "gpt2");
    if (pre)
        kv_str(v, "tokenizer.ggml.pre", pre);
    kv_strs(v, "tokenizer.ggml.tokens", toks, B_N);
    kv_nums(v, "tokenizer.ggml.token_type", NULL, types, B_N);
    kv_strs(v, "tokenizer.ggml.merges", merges, 5);
    kv_u32(v, "tokenizer.ggml.eos_token_id", B_END);
    return load(v);
}

static void check_bpe(void)
{
    vocab_file v = {0};
    tokenizer *t = load_bpe(&v, "gpt-2");
    /* rank order: "b c" (0) first, after which "a b" no longer applies */
    check_ids(t, "abc", false, IDS(B_A, B_BC));
    check_ids(t, "ab", false, IDS(B_AB));
    /* through a merge-only intermediate */
    check_ids(t, "xyz", false, IDS(B_XYZ));
    /* no merge joins p and q */
    check_ids(t, "pq", false, IDS(B_P, B_Q));
    /* user-defined tokens in the text: a longer one takes precedence over an earlier match
     * ("<" has no token) */
    check_ids(t, "<ab>ddd", false, IDS(B_A, B_UD_BDDD));
    check_ids(t, "d<ab>d", false, IDS(B_D, B_UD_AB, B_D));
    /* control text stays text unless parse_special */
    int32_t *ids;
    int n = tokenizer_encode(t, "<|end|>", 7, false, true, &ids);
    CHECK(n == 1 && ids[0] == B_END, "<|end|> with parse_special");
    free(ids);
    n = tokenizer_encode(t, "<|end|>", 7, false, false, &ids);
    for (int i = 0; i < n; i++)
        CHECK(ids[i] != B_END, "<|end|> without parse_special gives the control token");
    free(ids);
    /* gpt2 vocabularies add no BOS unless the file says so */
    CHECK(!tokenizer_add_bos(t) && tokenizer_bos(t) == -1, "BPE default: no BOS");
    CHECK(tokenizer_is_eog(t, B_END), "EOS ends generation");
    tokenizer_free(t);
    vocab_close(&v);

    /* Llama 3's pre-tokenizer takes a word that is a whole token as it is */
    vocab_file w = {0};
    t = load_bpe(&w, "llama-bpe");
    check_ids(t, "pq", false, IDS(B_PQ));
    tokenizer_free(t);
    vocab_close(&w);
}

/* Each damaged vocabulary: tokenizer_load fails with an error naming the file and `want`. */
static void check_damaged(void)
{
    static const char *const toks[] = {"a", "b", "ab"};
    static const float scores[] = {0, 0};
    static const int32_t bad_type[] = {1, 9, 1};
    static const char *const bad_merge[] = {"ab"};
    struct { const char *want; int what; } cases[] = {
        {"no tokenizer.ggml.model", 0}, {"tokenizer model 'bert' is not supported", 1},
        {"tokenizer.ggml.tokens is missing", 2}, {"tokenizer.ggml.tokens is missing", 3},
        {"tokenizer.ggml.scores is not 3 numbers", 4}, {"token 1 has type 9", 5},
        {"pre-tokenizer 'nonesuch'", 6}, {"tokenizer.ggml.merges is missing", 7},
        {"merge 0 is not two texts", 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        vocab_file v = {0};
        int what = cases[i].what;
        if (what != 0)
            kv_str(&v, "tokenizer.ggml.model", what == 1 ? "bert" : what >= 6 ? "gpt2" : "llama");
        if (what == 3)
            kv_nums(&v, "tokenizer.ggml.tokens", NULL, bad_type, 3);
        else if (what != 2)
            kv_strs(&v, "tokenizer.ggml.tokens", toks, 3);
        if (what == 4)
            kv_nums(&v, "tokenizer.ggml.scores", scores, NULL, 2);
        if (what == 5)
            kv_nums(&v, "tokenizer.ggml.token_type", NULL, bad_type, 3);
        if (what == 6)
            kv_str(&v, "tokenizer.ggml.pre", "nonesuch");
        if (what == 8)
            kv_strs(&v, "tokenizer.ggml.merges", bad_merge, 1);
        char err[256] = "";
        tokenizer *t = tokenizer_load(vocab_open(&v), err, sizeof err);
        CHECK(!t && strstr(err, "vocab.gguf") && strstr(err, cases[i].want) && !strchr(err, '\n'),
              "case %zu: error '%s', expected '%s'", i, err, cases[i].want);
        tokenizer_free(t);
        vocab_close(&v);
    }
}

int main(void)
{
    check_spm();
    check_bpe();
    check_damaged();
    return test_done();
}
