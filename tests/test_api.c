/* The public API (include/prima.h) alone: stories260K greedy through open / tokenize / eval /
 * sample equals the reference's 32 tokens; rewinding and regenerating gives them again, also as
 * text through prima_generate (with a stop string and a callback that stops it); a
 * seeded sampling session is reproducible; errors come back as messages. */
#include <stdlib.h>
#include <string.h>

#include "prima.h"
#include "support/fidelity.h"
#include "test.h"

static int generate(prima_session *s, int n, int32_t *out)
{
    char err[256];
    for (int i = 0; i < n; i++) {
        out[i] = prima_sample(s);
        if (i + 1 < n && prima_eval(s, &out[i], 1, err, sizeof err) != 0) {
            fprintf(stderr, "eval: %s\n", err);
            return -1;
        }
    }
    return 0;
}

/* prima_generate's text, and a callback that stops after stop_after calls (0: never). */
struct seen {
    char text[512];
    int calls, stop_after;
};

static int collect(void *user, const char *text, size_t len)
{
    struct seen *s = user;
    strncat(s->text, text, len < sizeof s->text - strlen(s->text) - 1 ? len
                                                                        : sizeof s->text - strlen(s->text) - 1);
    return ++s->calls == s->stop_after;
}

int main(void)
{
    const char *fixtures = test_fixtures();
    char err[256], path[4096], refdir[4096];
    snprintf(refdir, sizeof refdir, "%s/reference", fixtures);
    fid_case c;
    REQUIRE(fid_case_load(refdir, "stories260K.once.json", &c, err, sizeof err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/models/%s", fixtures, c.model_file);

    prima_model *m = prima_model_open(path, NULL, err, sizeof err);
    REQUIRE(m, "%s", err);
    CHECK(prima_model_n_vocab(m) == 512 && prima_model_n_layer(m) == 5, "hyper-parameters");
    CHECK(prima_token_bos(m) == 1, "BOS");

    int32_t toks[64];
    int n = prima_tokenize(m, c.prompt_text, toks, 64, true, false, err, sizeof err);
    CHECK(n == c.n_prompt && !memcmp(toks, c.prompt, sizeof(int32_t) * (size_t)n), "prompt ids");
    CHECK(prima_tokenize(m, c.prompt_text, toks, 2, true, false, err, sizeof err) == n,
          "count beyond cap");
    /* a failure says why (it used to return -1 alone): a text over the tokenizer's 256 MiB */
    size_t huge = ((size_t)256 << 20) + 1;
    char *big = malloc(huge + 1);
    REQUIRE(big, "out of memory for the long text");
    memset(big, 'a', huge);
    big[huge] = '\0';
    err[0] = '\0';
    CHECK(prima_tokenize(m, big, toks, 64, true, false, err, sizeof err) == -1 &&
              !strcmp(err, "cannot tokenize 268435457 bytes of text: the text is longer than the "
                           "tokenizer accepts (256 MiB)"),
          "a text over the limit: '%s'", err);
    free(big);

    prima_session_params sp = prima_session_default_params();
    sp.temp = 0.0f;
    sp.n_ctx = 128;
    sp.n_threads = 2;
    prima_session *s = prima_session_create(m, &sp, err, sizeof err);
    REQUIRE(s, "%s", err);
    REQUIRE(prima_eval(s, c.prompt, c.n_prompt, err, sizeof err) == 0, "%s", err);
    int32_t got[32];
    REQUIRE(generate(s, 32, got) == 0, "generation");
    CHECK(!memcmp(got, c.greedy, sizeof got), "greedy tokens differ from the reference");
    CHECK(prima_session_n_past(s) == c.n_prompt + 31, "n_past %d", prima_session_n_past(s));

    char piece[64];
    size_t len = prima_token_piece(m, got[1], piece, sizeof piece);
    CHECK(len == 6 && !memcmp(piece, " there", 6), "piece of token %d", got[1]);
    /* a buffer smaller than the piece: the full length comes back, and nothing past cap is
     * written (the old header promised a count of at most cap, so callers read past it) */
    memset(piece, '#', sizeof piece);
    CHECK(prima_token_piece(m, got[1], piece, 3) == 6 && !memcmp(piece, " th#", 4),
          "a piece cut at 3 bytes: '%.4s'", piece);
    CHECK(prima_token_piece(m, got[1], NULL, 0) == 6, "the length alone");
    CHECK(!prima_token_is_eog(m, got[0]) && prima_token_is_eog(m, 2), "end of generation");

    /* rewind to the prompt's end: the last prompt token evaluated again, same continuation */
    prima_session_rewind(s, c.n_prompt - 1);
    REQUIRE(prima_eval(s, &c.prompt[c.n_prompt - 1], 1, err, sizeof err) == 0, "%s", err);
    int32_t again[32];
    REQUIRE(generate(s, 32, again) == 0, "generation after rewind");
    CHECK(!memcmp(again, c.greedy, sizeof again), "greedy tokens differ after a rewind");

    /* the application layer's loop: the same 32 tokens as text, a stop string, a callback that
     * stops the reply */
    char want[512] = "";
    for (int i = 0; i < 32; i++) {
        char pc[64];
        size_t pl = prima_token_piece(m, c.greedy[i], pc, sizeof pc);
        strncat(want, pc, pl);
    }
    struct seen seen = {0};
    char *reply = NULL;
    prima_session_rewind(s, c.n_prompt - 1);
    REQUIRE(prima_eval(s, &c.prompt[c.n_prompt - 1], 1, err, sizeof err) == 0, "%s", err);
    CHECK(prima_generate(s, 32, NULL, 0, collect, &seen, &reply, err, sizeof err) ==
              PRIMA_END_LIMIT, "32 tokens: %s", err);
    CHECK(reply && !strcmp(reply, want) && !strcmp(seen.text, want), "reply '%s', want '%s'",
          reply ? reply : "", want);
    CHECK(prima_session_n_past(s) == c.n_prompt + 31, "n_past after 32 %d",
          prima_session_n_past(s));
    free(reply);
    const char *stop[] = {" there"};
    prima_session_rewind(s, c.n_prompt - 1);
    REQUIRE(prima_eval(s, &c.prompt[c.n_prompt - 1], 1, err, sizeof err) == 0, "%s", err);
    CHECK(prima_generate(s, 32, stop, 1, NULL, NULL, &reply, err, sizeof err) == PRIMA_END_STOP &&
              !strncmp(reply, want, strlen(reply)) && !strstr(reply, " there"),
          "stop string: '%s'", reply);
    free(reply);
    seen = (struct seen){.stop_after = 1};
    prima_session_rewind(s, c.n_prompt - 1);
    REQUIRE(prima_eval(s, &c.prompt[c.n_prompt - 1], 1, err, sizeof err) == 0, "%s", err);
    CHECK(prima_generate(s, 32, NULL, 0, collect, &seen, NULL, err, sizeof err) ==
              PRIMA_END_CANCELLED && seen.calls == 1, "cancelled after %d calls", seen.calls);

    /* errors */
    int32_t bad = 512;
    CHECK(prima_eval(s, &bad, 1, err, sizeof err) == -1 && strstr(err, "512"), "bad id: %s", err);
    int32_t many[128] = {0};
    prima_session_rewind(s, 0);
    CHECK(prima_eval(s, many, 128, err, sizeof err) == 0, "a full context");
    CHECK(prima_eval(s, many, 1, err, sizeof err) == -1 && strstr(err, "fit"), "overflow: %s", err);
    prima_session_free(s);
    CHECK(!prima_model_open("/nonexistent.gguf", NULL, err, sizeof err) &&
              strstr(err, "/nonexistent.gguf"),
          "missing file: %s", err);

    /* sampling with a seed: two sessions, the same tokens */
    sp = prima_session_default_params();
    sp.seed = 1234;
    sp.temp = 1.0f;
    sp.n_ctx = 64;
    int32_t a[16], b[16];
    for (int run = 0; run < 2; run++) {
        s = prima_session_create(m, &sp, err, sizeof err);
        REQUIRE(s, "%s", err);
        REQUIRE(prima_eval(s, c.prompt, c.n_prompt, err, sizeof err) == 0, "%s", err);
        REQUIRE(generate(s, 16, run ? b : a) == 0, "sampled generation");
        prima_session_free(s);
    }
    CHECK(!memcmp(a, b, sizeof a), "the same seed must give the same tokens");

    prima_model_free(m);
    fid_case_free(&c);
    return test_done();
}
