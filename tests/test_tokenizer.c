/* Tokenizer fidelity: the reference's test vectors for every vocabulary in the fixtures, the
 * prompts of the reference runs, decoding, streaming detokenization and special tokens. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "gguf/gguf.h"
#include "test.h"
#include "text/tokenizer.h"

static const char *fixtures;

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    REQUIRE(buf && fread(buf, 1, (size_t)n, f) == (size_t)n, "cannot read %s", path);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

typedef struct vocab {
    gguf_file *f;
    tokenizer *t;
} vocab;

static vocab open_vocab(const char *rel)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s", fixtures, rel);
    vocab v;
    v.f = gguf_open(path, err, sizeof err);
    REQUIRE(v.f, "%s", err);
    v.t = tokenizer_load(v.f, err, sizeof err);
    REQUIRE(v.t, "%s", err);
    return v;
}

static void close_vocab(vocab v)
{
    tokenizer_free(v.t);
    gguf_close(v.f);
}

static bool same_ids(const int32_t *a, int na, const int32_t *b, int nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, sizeof *a * (size_t)na));
}

static void print_ids(const char *label, const int32_t *ids, int n)
{
    fprintf(stderr, "  %s:", label);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* The text of a token sequence through the streaming detokenizer, one token at a time. */
static size_t decode(const tokenizer *t, const int32_t *ids, int n, char *out, size_t cap)
{
    detok_stream s;
    detok_init(&s);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        REQUIRE(cap - k >= 64, "decode buffer too small");
        k += detok_push(&s, t, ids[i], out + k, cap - k);
    }
    return k + detok_flush(&s, out + k, cap - k);
}

/* Every string of NAME.gguf.inp against its line of NAME.gguf.out (no BOS, no special parsing). */
static void check_vectors(const char *name)
{
    char rel[256], path[4096];
    snprintf(rel, sizeof rel, "tokenizer/%s.gguf", name);
    vocab v = open_vocab(rel);
    snprintf(path, sizeof path, "%s/tokenizer/%s.gguf.inp", fixtures, name);
    char *inp = read_file(path, NULL);
    snprintf(path, sizeof path, "%s/tokenizer/%s.gguf.out", fixtures, name);
    char *outp = read_file(path, NULL);

    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *s = inp, *line = outp;
    int n_cases = 0, n_pass = 0, n_round = 0;
    char text[4096];
    for (char *end; (end = strstr(s, sep)); s = end + strlen(sep)) {
        *end = '\0';
        char *eol = strchr(line, '\n');
        REQUIRE(eol, "%s.gguf.out has fewer lines than cases", name);
        *eol = '\0';
        int32_t want[1024];
        int n_want = 0;
        for (char *p = line, *q; n_want < 1024; p = q) {
            long id = strtol(p, &q, 10);
            if (q == p)
                break;
            want[n_want++] = (int32_t)id;
        }
        line = eol + 1;

        size_t n_text = decode(v.t, want, n_want, text, sizeof text);
        if (n_text == strlen(s) && !memcmp(text, s, n_text))
            n_round++;
        else
            CHECK(0, "%s case %d: '%s' decodes as '%.*s'", name, n_cases, s, (int)n_text, text);

        int32_t *got;
        int n_got = tokenizer_encode(v.t, s, strlen(s), false, false, &got);
        n_cases++;
        if (n_got >= 0 && same_ids(got, n_got, want, n_want)) {
            n_pass++;
        } else {
            CHECK(0, "%s case %d: '%s' tokenizes differently", name, n_cases - 1, s);
            print_ids("expected", want, n_want);
            print_ids("got     ", got, n_got);
        }
        free(got);
    }
    CHECK(n_cases == 46, "%s: %d cases (expected 46)", name, n_cases);
    fprintf(stderr, "%-15s %d/%d vectors equal, %d/%d decode to their text\n", name, n_pass, n_cases,
            n_round, n_cases);
    free(inp);
    free(outp);
    close_vocab(v);
}

static int hex_value(char c)
{
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* A reference piece: the token's text (control tokens included) with ill-formed UTF-8 shown as
 * U+FFFD, leading spaces kept. */
static size_t reference_piece(const tokenizer *t, int32_t id, char *out, size_t cap)
{
    if (tokenizer_piece(t, id, false, out, cap) == 0)
        return tokenizer_piece(t, id, true, out, cap);   /* a control token: its text */
    detok_stream s;
    detok_init(&s);
    s.first = false;
    size_t k = detok_push(&s, t, id, out, cap);
    return k + detok_flush(&s, out + k, cap - k);
}

/* One reference run (reference/MODEL.CASE.json): the prompt's ids, the detokenized greedy text
 * and the per-token pieces. Returns the number of checks made. */
static int check_reference(const char *json_name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/reference/%s", fixtures, json_name);
    char *js = read_file(path, NULL);
    cJSON *root = cJSON_Parse(js);
    REQUIRE(root, "%s is not JSON", json_name);
    char rel[512];
    snprintf(rel, sizeof rel, "models/%s", cJSON_GetObjectItem(root, "model_file")->valuestring);
    vocab v = open_vocab(rel);
    int checks = 0;

    const cJSON *want = cJSON_GetObjectItem(root, "prompt_tokens");
    const cJSON *text = cJSON_GetObjectItem(root, "prompt_text");
    if (cJSON_IsString(text)) {
        bool add_special = cJSON_IsTrue(cJSON_GetObjectItem(root, "add_special"));
        int32_t *ids;
        int n = tokenizer_encode(v.t, text->valuestring, strlen(text->valuestring), add_special, false, &ids);
        bool same = n == cJSON_GetArraySize(want);
        for (int i = 0; same && i < n; i++)
            same = ids[i] == cJSON_GetArrayItem(want, i)->valueint;
        CHECK(same, "%s: prompt '%s' tokenizes differently", json_name, text->valuestring);
        free(ids);
        checks++;
    }

    const cJSON *greedy = cJSON_GetObjectItem(root, "greedy_tokens");
    const cJSON *pieces = cJSON_GetObjectItem(root, "greedy_pieces");
    int n = cJSON_GetArraySize(greedy);
    int32_t ids[256];
    REQUIRE(n <= 256 && n == cJSON_GetArraySize(pieces), "%s: greedy tokens / pieces", json_name);
    char buf[8192];
    for (int i = 0; i < n; i++) {
        ids[i] = cJSON_GetArrayItem(greedy, i)->valueint;
        const char *p = cJSON_GetArrayItem(pieces, i)->valuestring;
        size_t k = reference_piece(v.t, ids[i], buf, sizeof buf);
        CHECK(k == strlen(p) && !memcmp(buf, p, k), "%s: piece %d of token %d is '%.*s', expected '%s'",
              json_name, i, ids[i], (int)k, buf, p);
        checks++;
    }
    /* greedy_text_hex: the raw bytes of the pieces (SPM: the first one's space prefix dropped) */
    const char *hex = cJSON_GetObjectItem(root, "greedy_text_hex")->valuestring;
    size_t k = 0;
    for (int i = 0; i < n; i++)
        k += tokenizer_piece(v.t, ids[i], false, buf + k, sizeof buf - k);
    char model[16] = "";
    gguf_get_str(v.f, "tokenizer.ggml.model", model, sizeof model);
    bool spm_prefix = k > 0 && buf[0] == ' ' && !strcmp(model, "llama");
    const char *raw = buf + (spm_prefix ? 1 : 0);
    k -= spm_prefix ? 1 : 0;
    bool same = k * 2 == strlen(hex);
    for (size_t i = 0; same && i < k; i++)
        same = (uint8_t)raw[i] == hex_value(hex[2 * i]) * 16 + hex_value(hex[2 * i + 1]);
    CHECK(same, "%s: greedy bytes are not %s", json_name, hex);
    /* greedy_text: the same through the streaming detokenizer, ill-formed parts as U+FFFD */
    const char *gt = cJSON_GetObjectItem(root, "greedy_text")->valuestring;
    k = decode(v.t, ids, n, buf, sizeof buf);
    CHECK(k == strlen(gt) && !memcmp(buf, gt, k), "%s: greedy text is '%.*s', expected '%s'", json_name,
          (int)k, buf, gt);
    checks += 2;

    close_vocab(v);
    cJSON_Delete(root);
    free(js);
    return checks;
}

static void check_references(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/reference", fixtures);
    DIR *d = opendir(path);
    REQUIRE(d, "cannot list %s", path);
    int n_files = 0, checks = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n > 5 && !strcmp(e->d_name + n - 5, ".json")) {
            checks += check_reference(e->d_name);
            n_files++;
        }
    }
    closedir(d);
    CHECK(n_files >= 17, "only %d reference runs found", n_files);
    fprintf(stderr, "reference runs: %d files, %d prompts/pieces/texts compared\n", n_files, checks);
}

/* Pushes ids one at a time and compares what each push releases. */
static void check_stream(const tokenizer *t, const int32_t *ids, const char *const *want, int n,
                         const char *want_flush)
{
    detok_stream s;
    detok_init(&s);
    char out[256];
    for (int i = 0; i < n; i++) {
        size_t k = detok_push(&s, t, ids[i], out, sizeof out);
        CHECK(k == strlen(want[i]) && !memcmp(out, want[i], k), "push %d (token %d) released '%.*s'", i,
              ids[i], (int)k, out);
    }
    size_t k = detok_flush(&s, out, sizeof out);
    CHECK(k == strlen(want_flush) && !memcmp(out, want_flush, k), "flush released '%.*s'", (int)k, out);
}

#define FFFD "\xEF\xBF\xBD"

static void check_streaming(void)
{
    vocab v = open_vocab("tokenizer/llama-bpe.gguf");
    /* 🦙 = F0 9F A6 99 arrives as " \xF0\x9F", "\xA6", "\x99" */
    check_stream(v.t, (int32_t[]){11410, 99, 247}, (const char *const[]){" ", "", "\xF0\x9F\xA6\x99"}, 3, "");
    check_stream(v.t, (int32_t[]){11410}, (const char *const[]){" "}, 1, FFFD);            /* cut short */
    check_stream(v.t, (int32_t[]){11410, 13347}, (const char *const[]){" ", FFFD "Hi"}, 2, "");
    check_stream(v.t, (int32_t[]){247, 247}, (const char *const[]){FFFD, FFFD}, 2, "");   /* stray bytes */
    /* Control tokens give no text; BPE keeps the leading space of the first piece. */
    check_stream(v.t, (int32_t[]){128000, 22691}, (const char *const[]){"", " Hello"}, 2, "");
    close_vocab(v);

    v = open_vocab("models/stories260K.gguf");
    /* SPM drops the space prefix of the very first piece only; é = C3 A9 as byte tokens */
    check_stream(v.t, (int32_t[]){403, 407, 3 + 0xC3, 3 + 0xA9},
                 (const char *const[]){"Once", " upon", "", "\xC3\xA9"}, 4, "");
    check_stream(v.t, (int32_t[]){3 + 0xE2, 3 + 0x28}, (const char *const[]){"", FFFD "("}, 2, "");
    close_vocab(v);
}

static void check_ids(const tokenizer *t, const char *text, bool add_special, bool parse_special,
                      const int32_t *want, int n_want)
{
    int32_t *ids;
    int n = tokenizer_encode(t, text, strlen(text), add_special, parse_special, &ids);
    CHECK(n >= 0 && same_ids(ids, n, want, n_want), "'%s' (add_special %d, parse_special %d)", text,
          add_special, parse_special);
    if (n >= 0 && !same_ids(ids, n, want, n_want)) {
        print_ids("expected", want, n_want);
        print_ids("got     ", ids, n);
    }
    free(ids);
}

/* ids of plain text, for building expectations */
static int plain(const tokenizer *t, const char *text, int32_t *out)
{
    int32_t *ids;
    int n = tokenizer_encode(t, text, strlen(text), false, false, &ids);
    REQUIRE(n >= 0 && n < 64, "encoding '%s'", text);
    memcpy(out, ids, sizeof *ids * (size_t)n);
    free(ids);
    return n;
}

static void check_specials(void)
{
    vocab v = open_vocab("tokenizer/qwen2.gguf");
    const tokenizer *t = v.t;
    int32_t want[128];
    /* with parse_special the markers are single tokens around the plain text */
    want[0] = 151644;
    int n = 1 + plain(t, "user\nHi", want + 1);
    want[n++] = 151645;
    check_ids(t, "<|im_start|>user\nHi<|im_end|>", false, true, want, n);
    /* without, they are text */
    n = plain(t, "<|im_start|>", want);
    CHECK(n > 1, "<|im_start|> as text is %d token(s)", n);
    for (int i = 0; i < n; i++)
        CHECK(want[i] < 151643, "<|im_start|> as text gives special token %d", want[i]);
    /* user-defined tokens are matched either way; qwen2 adds no BOS or EOS */
    check_ids(t, "<think>", true, false, (int32_t[]){151667}, 1);
    check_ids(t, "<think>", true, true, (int32_t[]){151667}, 1);
    CHECK(!tokenizer_add_bos(t) && !tokenizer_add_eos(t), "qwen2 adds BOS/EOS");
    CHECK(tokenizer_bos(t) == 151643 && tokenizer_eos(t) == 151645, "qwen2 bos %d eos %d", tokenizer_bos(t),
          tokenizer_eos(t));
    CHECK(tokenizer_is_eog(t, 151645) && tokenizer_is_eog(t, 151643) && !tokenizer_is_eog(t, 151644) &&
          !tokenizer_is_eog(t, 13048), "qwen2 end-of-generation set");
    CHECK(tokenizer_find(t, "<|im_end|>") == 151645 && tokenizer_find(t, "no such token") == -1, "find");
    CHECK(tokenizer_n_vocab(t) == 151936, "qwen2 n_vocab %d", tokenizer_n_vocab(t));
    close_vocab(v);

    v = open_vocab("tokenizer/llama-spm.gguf");
    t = v.t;
    /* SPM: BOS by default; after a special token the text gets the space prefix again */
    want[0] = 1;
    n = 1 + plain(t, "Hello", want + 1);
    check_ids(t, "Hello", true, false, want, n);
    check_ids(t, "<s>Hello", false, true, want, n);
    n = plain(t, "<s>Hello", want);
    CHECK(n > 2 && want[0] != 1, "<s> as plain text");
    check_ids(t, "", true, false, (int32_t[]){1}, 1);
    check_ids(t, "", false, false, NULL, 0);
    CHECK(tokenizer_is_eog(t, 2) && !tokenizer_is_eog(t, 1), "llama-spm end-of-generation set");
    close_vocab(v);

    v = open_vocab("tokenizer/llama-bpe.gguf");
    t = v.t;
    CHECK(tokenizer_add_bos(t) && tokenizer_bos(t) == 128000, "llama-bpe adds BOS 128000");
    CHECK(tokenizer_is_eog(t, 128001) && tokenizer_is_eog(t, tokenizer_find(t, "<|eot_id|>")) &&
          !tokenizer_is_eog(t, 128000), "llama-bpe end-of-generation set");
    want[0] = 128000;
    want[1] = tokenizer_find(t, "<|start_header_id|>");
    n = 2 + plain(t, "user", want + 2);
    want[n++] = tokenizer_find(t, "<|end_header_id|>");
    check_ids(t, "<|start_header_id|>user<|end_header_id|>", true, true, want, n);
    close_vocab(v);
}

/* Text that is not UTF-8: BPE reads the first byte of each broken sequence as U+FFFD and goes
 * on with the next byte (as the reference does);
 * SPM writes the bytes as byte tokens. */
static void check_ill_formed(void)
{
    vocab v = open_vocab("tokenizer/gpt-2.gguf");
    int32_t want[64];
    int n = plain(v.t, "a\xEF\xBF\xBD\xEF\xBF\xBD" "b", want);
    check_ids(v.t, "a\xFF\xC3" "b", false, false, want, n);
    n = plain(v.t, "a\xEF\xBF\xBD\xEF\xBF\xBD", want);   /* each byte of a cut sequence */
    check_ids(v.t, "a\xE2\x96", false, false, want, n);
    close_vocab(v);

    v = open_vocab("tokenizer/llama-spm.gguf");
    int32_t sp = tokenizer_find(v.t, "\xE2\x96\x81");
    check_ids(v.t, "\xFF", false, false, (int32_t[]){sp, tokenizer_find(v.t, "<0xFF>")}, 2);
    close_vocab(v);
}

int main(void)
{
    fixtures = test_fixtures();
    static const char *const names[] = {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3",
                                        "deepseek-llm", "deepseek-coder"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        check_vectors(names[i]);
    check_references();
    check_streaming();
    check_specials();
    check_ill_formed();
    return test_done();
}
