/* Tokenizer fidelity: the reference's test vectors for every vocabulary in the fixtures, the
 * prompts of the reference runs, decoding, streaming detokenization and special tokens. */
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
    int n_cases = 0, n_pass = 0;
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
    fprintf(stderr, "%-15s %d/%d vectors equal\n", name, n_pass, n_cases);
    free(inp);
    free(outp);
    close_vocab(v);
}

int main(void)
{
    fixtures = test_fixtures();
    static const char *const names[] = {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3",
                                        "deepseek-llm", "deepseek-coder"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        check_vectors(names[i]);
    return test_done();
}
