/* GBNF grammars (text/grammar.h): what the matcher accepts against independent recognizers
 * (POSIX regular expressions for regular grammars, a counter for nested brackets, hand-decoded
 * UTF-8), byte by byte and whole; malformed grammars' errors with their line and column; and,
 * on the fixtures' 128k Llama 3 vocabulary, the token mask against the byte matcher (every
 * token it allows is accepted, every one it refuses is refused) and random walks under the mask
 * that never leave the grammar and end complete. */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "text/grammar.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static grammar *parse(const char *src)
{
    char err[256];
    grammar *g = grammar_parse(src, strlen(src), err, sizeof err);
    REQUIRE(g, "grammar refused: %s\n%s", err, src);
    return g;
}

/* Whether g matches s whole: fed in one piece, and byte by byte (the same answer). */
static bool matches(const grammar *g, const char *s, size_t n)
{
    grammar_state *a = grammar_state_new(g), *b = grammar_state_new(g);
    REQUIRE(a && b, "out of memory");
    bool whole = grammar_state_accept(a, s, n) && grammar_state_complete(a);
    bool bytes = true;
    for (size_t i = 0; i < n && bytes; i++)
        bytes = grammar_state_accept(b, s + i, 1);
    bytes = bytes && grammar_state_complete(b);
    CHECK(whole == bytes, "whole %d, byte by byte %d on '%.*s'", whole, bytes, (int)n, s);
    grammar_state_free(a);
    grammar_state_free(b);
    return whole;
}

/* Random strings over alphabet against a regular expression of the same language. */
static void against_regex(const char *gbnf, const char *re, const char *alphabet, int max_len)
{
    grammar *g = parse(gbnf);
    regex_t rx;
    REQUIRE(!regcomp(&rx, re, REG_EXTENDED | REG_NOSUB), "bad regex %s", re);
    int pos = 0, neg = 0;
    size_t na = strlen(alphabet);
    for (int i = 0; i < 20000; i++) {
        char s[64];
        int n = (int)rnd((uint32_t)max_len + 1);
        for (int k = 0; k < n; k++)
            s[k] = alphabet[rnd((uint32_t)na)];
        s[n] = '\0';
        bool want = !regexec(&rx, s, 0, NULL, 0);
        bool got = matches(g, s, (size_t)n);
        CHECK(got == want, "'%s': grammar %d, regex %d (%s)", s, got, want, re);
        want ? pos++ : neg++;
    }
    CHECK(pos > 100 && neg > 100, "too few cases of one kind: %d matching, %d not", pos, neg);
    regfree(&rx);
    grammar_free(g);
}

/* Nested brackets: a counter is the recognizer. */
static void brackets(void)
{
    grammar *g = parse("root ::= ( \"(\" root \")\" | \"[\" root \"]\" )*  # nested, two kinds\n");
    for (int i = 0; i < 20000; i++) {
        char s[16], st[16];
        int n = (int)rnd(13), depth = 0;
        bool ok = true;
        for (int k = 0; k < n; k++) {
            s[k] = "()[]"[rnd(4)];
            if (s[k] == '(' || s[k] == '[')
                st[depth++] = s[k];
            else if (!depth || st[--depth] != (s[k] == ')' ? '(' : '['))
                ok = false;
        }
        ok = ok && depth == 0;
        CHECK(matches(g, s, (size_t)n) == ok, "'%.*s': want %d", n, s, ok);
    }
    grammar_free(g);
}

static void unicode(void)
{
    grammar *g = parse("root ::= [α-ω]+ \"é\"? . \"\\u00e9\\x41\"\n");
    static const struct { const char *s; bool ok; } cases[] = {
        {"αβγé€éA", true}, {"ωxéA", true}, {"α😀éA", true}, {"αé", false}, {"Aé€éA", false},
        {"αβ\xC3éA", false}, {"α\xC0\x80éA", false}, {"α\xED\xA0\x80éA", false}, {"ααéA", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(matches(g, cases[i].s, strlen(cases[i].s)) == cases[i].ok, "'%s': want %d",
              cases[i].s, cases[i].ok);
    /* a character split across pieces: each prefix is accepted only if it can still match */
    grammar_state *st = grammar_state_new(g);
    CHECK(grammar_state_accept(st, "\xCE", 1), "the first byte of α refused");
    CHECK(!grammar_state_accept(st, "\x80", 1), "U+0380 is not in α-ω");
    CHECK(grammar_state_accept(st, "\xB1", 1), "the second byte of α refused");
    CHECK(!grammar_state_complete(st) && grammar_state_open(st), "complete after α");
    grammar_state_free(st);
    grammar_free(g);
}

static void malformed(void)
{
    static const struct { const char *src, *want; } cases[] = {
        {"root ::= \"a\" foo\n", "line 1, column 14: undefined rule 'foo'"},
        {"root ::= \"a\n\"", "line 1, column 12: a literal or character class must end"},
        {"# c\nroot ::= [a-z\n", "line 2, column 14: a literal or character class must end on its line"},
        {"root ::= ( \"a\" \n", "line 2, column 1: expected ')'"},
        {"root ::= \"a\"{3,2}", "line 1, column 18: a repetition {3,2} has its maximum"},
        {"root ::= \"a\"{2000}", "line 1, column 18: a repetition count above 1000"},
        {"root ::= x\nx ::= x \"a\"\n", "line 2, column 1: rule 'x' is left-recursive"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' is defined twice"},
        {"item ::= \"a\"\n", "the grammar has no 'root' rule"},
        {"root ::= \"\\q\"", "line 1, column 11: unknown escape '\\q'"},
        {"root ::= [z-a]", "line 1, column 14: a character range ends"},
        {"root ::= \"a\" )", "line 1, column 14: unexpected ')'"},
        {"root = \"a\"", "line 1, column 1: expected a rule definition"},
        {"root ::= []", "line 1, column 10: an empty character class"},
        {"root ::= \"\\x4\"", "expected 2 hexadecimal digits"},
        {"root ::= \"\xC3\"", "line 1, column 11: invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        grammar *g = grammar_parse(cases[i].src, strlen(cases[i].src), err, sizeof err);
        CHECK(!g && strstr(err, cases[i].want), "'%s': got '%s', want '%s'", cases[i].src,
              g ? "(accepted)" : err, cases[i].want);
        grammar_free(g);
    }
}

/* ---- the mask, on a real vocabulary ------------------------------------------------------- */

typedef struct vocab {
    gguf_file *f;
    tokenizer *t;
    grammar_vocab *gv;
    int n;
} vocab;

static size_t piece(const vocab *v, int32_t id, char *buf, size_t cap)
{
    size_t n = tokenizer_piece(v->t, id, false, buf, cap);
    return n < cap ? n : cap;
}

/* Whether the bytes text + token id's piece are accepted (the byte matcher's verdict). */
static bool takes(const grammar *g, const vocab *v, const char *text, size_t n, int32_t id)
{
    grammar_state *st = grammar_state_new(g);
    bool ok = grammar_state_accept(st, text, n);
    if (tokenizer_is_eog(v->t, id)) {
        ok = ok && grammar_state_complete(st);
    } else {
        char buf[512];
        size_t k = piece(v, id, buf, sizeof buf);
        ok = ok && k > 0 && grammar_state_accept(st, buf, k);
    }
    grammar_state_free(st);
    return ok;
}

/* Random walks: tokens drawn among those the mask allows until an end of generation; the
 * text must be a whole match, and at some steps the mask is checked token by token. */
static void walks(const vocab *v, const char *gbnf, int n_walks, const char *must_contain)
{
    grammar *g = parse(gbnf);
    uint8_t *allowed = malloc((size_t)v->n);
    int32_t *ids = malloc(sizeof *ids * (size_t)v->n);
    for (int w = 0; w < n_walks; w++) {
        grammar_state *st = grammar_state_new(g);
        char text[4096];
        size_t len = 0;
        bool ended = false;
        for (int step = 0; step < 300 && !ended; step++) {
            int count = grammar_state_mask(st, v->gv, allowed);
            int k = 0;
            for (int id = 0; id < v->n; id++)
                if (allowed[id])
                    ids[k++] = id;
            REQUIRE(count == k && k > 0, "the mask allows %d tokens (%d counted) after '%.*s'",
                    k, count, (int)len, text);
            if (step % 7 == 0) /* the mask against the byte matcher */
                for (int i = 0; i < 40; i++) {
                    int32_t id = (int32_t)rnd((uint32_t)v->n);
                    CHECK(takes(g, v, text, len, id) == (allowed[id] != 0),
                          "token %d ('%.*s'): mask %d after '%.*s'", id, 0, "", allowed[id],
                          (int)len, text);
                }
            /* prefer ending once possible, so that walks finish */
            int32_t pick = ids[rnd((uint32_t)k)];
            if (grammar_state_complete(st) && rnd(4) == 0)
                for (int i = 0; i < k; i++)
                    if (tokenizer_is_eog(v->t, ids[i]))
                        pick = ids[i];
            REQUIRE(grammar_state_accept_token(st, v->gv, pick), "an allowed token refused");
            if (tokenizer_is_eog(v->t, pick)) {
                ended = true;
            } else {
                len += piece(v, pick, text + len, sizeof text - len);
                REQUIRE(len < sizeof text - 600, "the walk ran long");
                ended = grammar_state_complete(st) && !grammar_state_open(st);
            }
        }
        CHECK(ended, "the walk did not end: '%.*s'", (int)len, text);
        CHECK(matches(g, text, len), "the walk's text does not match: '%.*s'", (int)len, text);
        CHECK(!must_contain || strstr(text, must_contain), "'%.*s' lacks %s", (int)len, text,
              must_contain);
        grammar_state_free(st);
    }
    free(allowed);
    free(ids);
    grammar_free(g);
}

static void masks(void)
{
    const char *dir = test_fixtures();
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/tokenizer/llama-bpe.gguf", dir);
    vocab v;
    v.f = gguf_open(path, err, sizeof err);
    REQUIRE(v.f, "%s", err);
    v.t = tokenizer_load(v.f, err, sizeof err);
    REQUIRE(v.t, "%s", err);
    v.gv = grammar_vocab_new(v.t);
    REQUIRE(v.gv, "out of memory");
    v.n = tokenizer_n_vocab(v.t);
    CHECK(grammar_vocab_size(v.gv) == v.n, "vocabulary size");
    walks(&v, "root ::= \"{\\\"on\\\": \" (\"true\" | \"false\") \", \\\"n\\\": \" [1-9] [0-9]{0,3} "
              "\", \\\"s\\\": \\\"\" [a-z é]{0,12} \"\\\"}\"", 6, "\"on\": ");
    walks(&v, "root ::= [α-ω]{1,4} (\" \" | \"\\n\")? [0-9]+", 6, NULL);
    grammar_vocab_free(v.gv);
    tokenizer_free(v.t);
    gguf_close(v.f);
}

int main(void)
{
    against_regex("root ::= \"a\" [b-d]* (\"xy\" | \"z\"){1,2} [^a-c]?",
                  "^a[b-d]*(xy|z){1,2}[^a-c]?$", "abcdxyze", 9);
    against_regex("root ::= num (\",\" num)*\nnum ::= \"-\"? [0-9]{1,3}\n  (\".\" [0-9]+)?",
                  "^-?[0-9]{1,3}(\\.[0-9]+)?(,-?[0-9]{1,3}(\\.[0-9]+)?)*$", "-0123456789.,a", 10);
    against_regex("root ::= (\"ab\" | \"a\")* \"b\"? [^ab]{2,}", "^(ab|a)*b?[^ab]{2,}$", "abcd", 8);
    /* `.` alone: a class with no ranges in a grammar that has none */
    against_regex("root ::= .{1,3} \"a\"?", "^.{1,3}a?$", "ab\n", 5);
    brackets();
    unicode();
    malformed();
    masks();
    return test_done();
}
