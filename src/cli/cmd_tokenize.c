/* prima tokenize — the token ids (and pieces) of a text under a GGUF file's vocabulary. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"

/* A prompt file larger than this is refused rather than read into memory. */
#define MAX_TEXT_FILE ((long)256 << 20)

static const char usage_head[] =
    "usage: prima tokenize -m FILE (-p TEXT | -f FILE) [--no-bos] [--parse-special] [--pieces]\n"
    "\n"
    "Tokenize a text with the vocabulary stored in a GGUF file (a model, or a vocabulary-only\n"
    "file) and print the token ids on one line, separated by spaces.\n"
    "\n";
static const char usage_tail[] =
    "\n"
    "Exit status: 0 on success, 1 if a file cannot be read or has no usable vocabulary,\n"
    "2 on a usage error.\n";

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n >= 0 && n <= MAX_TEXT_FILE && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left), 0 if there is none. */
static size_t utf8_valid_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
               : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (i == 1 && s[0] == 0xE0)
            lo = 0xA0;
        else if (i == 1 && s[0] == 0xED)
            hi = 0x9F;
        else if (i == 1 && s[0] == 0xF0)
            lo = 0x90;
        else if (i == 1 && s[0] == 0xF4)
            hi = 0x8F;
        if (s[i] < lo || s[i] > hi)
            return 0;
    }
    return len;
}

static void print_piece(const char *p, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        size_t len = utf8_valid_len((const unsigned char *)p + i, n - i);
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (len == 0 || c < 0x20 || c == 0x7F)
            printf("\\x%02x", c);
        else
            fwrite(p + i, 1, len, stdout);
        i += len ? len : 1;
    }
    putchar('"');
}

typedef struct tok_args {
    const char *model, *prompt, *file;
    bool no_bos, parse_special, pieces;
} tok_args;

#define F(field) offsetof(tok_args, field)
static const cli_opt tok_rows[] = {
    {"-m --model", "FILE", CLI_STR, F(model), .help = "the GGUF file"},
    {"-p --prompt", "TEXT", CLI_STR, F(prompt), .help = "the text to tokenize"},
    {"-f --file", "FILE", CLI_STR, F(file),
     .help = "read the text from FILE, byte for byte (a final newline\nis kept)"},
    {"--no-bos", NULL, CLI_FLAG, F(no_bos),
     .help = "do not add the BOS token (by default it is added when the\n"
             "vocabulary says so: tokenizer.ggml.add_bos_token; EOS\nlikewise)"},
    {"--parse-special", NULL, CLI_FLAG, F(parse_special),
     .help = "control-token text written in the input (e.g.\n"
             "<|im_start|>) becomes that token; by default it is\n"
             "tokenized as plain text (user-defined tokens are always\nmatched)"},
    {"--pieces", NULL, CLI_FLAG, F(pieces),
     .help = "print one token per line instead: the id, a tab, and the\n"
             "token's text in double quotes (control tokens shown as\n"
             "their text; newline, tab, quote, backslash and bytes that\n"
             "are not valid UTF-8 escaped)"},
    {0},
};
#undef F
static const cli_group tok_group = {NULL, tok_rows, NULL};

/* One line per token: the id, a tab, the quoted piece. */
static void print_token(const tokenizer *t, int32_t id)
{
    char local[256];
    char *buf = local;
    size_t n = tokenizer_piece(t, id, true, local, sizeof local);
    if (n > sizeof local && (buf = malloc(n)))
        tokenizer_piece(t, id, true, buf, n);
    printf("%d\t", id);
    print_piece(buf ? buf : local, buf ? n : sizeof local);
    putchar('\n');
    if (buf != local)
        free(buf);
}

static int run(int argc, char **argv)
{
    tok_args ta = {0};
    const cli_set set = {.g = &tok_group, .dst = &ta};
    int rc = cli_opts_parse("tokenize", &set, 1, argc, argv, usage_head, usage_tail, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    const char *model = ta.model, *prompt = ta.prompt, *file = ta.file;
    bool no_bos = ta.no_bos, parse_special = ta.parse_special, pieces = ta.pieces;
    if (!model)
        return cli_usage_error("tokenize", "%s", "no model (-m FILE)");
    if (!prompt == !file)
        return cli_usage_error("tokenize", "%s", "give the text with exactly one of -p TEXT and -f FILE");

    size_t len = prompt ? strlen(prompt) : 0;
    char *text = NULL;
    if (file && !(text = read_text(file, &len)))
        return cli_fail("tokenize: cannot read %s (missing, unreadable or over 256 MiB)", file);
    char err[512];
    gguf_file *f = gguf_open(model, err, sizeof err);
    tokenizer *t = f ? tokenizer_load(f, err, sizeof err) : NULL;
    int32_t *ids = NULL;
    int n = t ? tokenizer_encode(t, prompt ? prompt : text, len, true, parse_special, &ids) : -1;
    rc = 0;
    if (!t) {
        rc = cli_fail("%s", err);
    } else if (n < 0) {
        rc = cli_fail("tokenize: the text (%zu bytes) could not be tokenized: %s", len,
                      tokenizer_strerror(n));
    } else {
        int first = no_bos && tokenizer_add_bos(t) && n > 0 && ids[0] == tokenizer_bos(t) ? 1 : 0;
        for (int i = first; i < n; i++) {
            if (pieces)
                print_token(t, ids[i]);
            else
                printf(i > first ? " %d" : "%d", ids[i]);
        }
        if (!pieces)
            putchar('\n');
    }
    free(ids);
    free(text);
    tokenizer_free(t);
    gguf_close(f);
    return rc;
}

const struct cli_command cli_cmd_tokenize = {"tokenize", "print the token ids of a text under a model's vocabulary", run};
