/* libFuzzer target for the tokenizer: the first input byte picks a fixture vocabulary and the
 * flags, the rest is the text. Any text must tokenize; the streaming detokenizer must release
 * only well-formed UTF-8; and byte-level BPE must give back exactly any well-formed UTF-8 text
 * it was given as plain text. Vocabularies come from $PRIMA_FIXTURES (default
 * ../shared/fixtures). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "text/tokenizer.h"

static const char *const names[] = {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3", "deepseek-llm",
                                    "deepseek-coder"};
#define N_VOCAB (sizeof names / sizeof *names)
static gguf_file *files[N_VOCAB];   /* open for the whole run */
static tokenizer *vocabs[N_VOCAB];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("PRIMA_FIXTURES");
    if (!dir)
        dir = "../shared/fixtures";
    for (size_t i = 0; i < N_VOCAB; i++) {
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/tokenizer/%s.gguf", dir, names[i]);
        files[i] = gguf_open(path, err, sizeof err);
        vocabs[i] = files[i] ? tokenizer_load(files[i], err, sizeof err) : NULL;
        if (!vocabs[i]) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", err);
            exit(1);
        }
    }
    return 0;
}

/* Length of the well-formed sequence at s, 0 if none (Unicode's table). */
static size_t wf_len(const uint8_t *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
               : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    if (!len || len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (i == 1)
            lo = s[0] == 0xE0 ? 0xA0 : s[0] == 0xF0 ? 0x90 : 0x80, hi = s[0] == 0xED ? 0x9F : s[0] == 0xF4 ? 0x8F : 0xBF;
        if (s[i] < lo || s[i] > hi)
            return 0;
    }
    return len;
}

static int well_formed(const uint8_t *s, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = wf_len(s + i, n - i)))
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const tokenizer *t = vocabs[data[0] % N_VOCAB];
    bool parse_special = data[0] & 0x10, add_special = data[0] & 0x20;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids;
    int n = tokenizer_encode(t, text, len, add_special, parse_special, &ids);
    if (n < 0)
        __builtin_trap();
    size_t cap = 3 * (len + 64) + 64, k = 0;
    char *out = malloc(cap);
    detok_stream s;
    detok_init(&s);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tokenizer_n_vocab(t))
            __builtin_trap();
        k += detok_push(&s, t, ids[i], out + k, cap - k);
    }
    k += detok_flush(&s, out + k, cap - k);
    if (!well_formed((const uint8_t *)out, k))
        __builtin_trap();
    bool bpe = data[0] % N_VOCAB != 0 && data[0] % N_VOCAB != 4;
    if (bpe && !parse_special && !add_special && well_formed(data + 1, len) &&
        (k != len || memcmp(out, text, len)))
        __builtin_trap();
    free(out);
    free(ids);
    return 0;
}
