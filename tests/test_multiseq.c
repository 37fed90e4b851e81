/* Several sequences in one engine: a batch whose rows belong to three sequences gives each of
 * them bit for bit the logits it gets alone (rows interleaved at the engine, parts of a step
 * through session_eval_batch and the micro-batch calls); truncating or shifting one sequence
 * leaves the others as they were; bad sequence ids and broken position runs are refused; the
 * KV cache grows with the number of sequences. On the fixture models, those of experts too (the
 * server's -np slots share such a batch). */
#include <stdlib.h>
#include <string.h>

#include "model/session.h"
#include "support/fidelity.h"
#include "support/greedy.h"
#include "test.h"

#define N_SEQ 3
#define N_CTX 96
#define STEPS 6

static const int32_t prompts[N_SEQ][12] = {
    {1, 5, 17, 42, 3, 96, 7, 61, 8, 8, 23, 77},
    {1, 9, 4},
    {1, 30, 31, 32, 33, 34, 35, 36},
};
static const int prompt_len[N_SEQ] = {12, 3, 8};

/* Sequence i alone: its prompt, then STEPS greedy tokens, each step's logits kept. */
static float *solo(const model *m, kern_ctx *kc, int i, int n_batch)
{
    char err[256];
    session *s = session_create(m, kc, N_CTX, n_batch, err, sizeof err);
    REQUIRE(s, "%s", err);
    float *out = greedy_logits(s, prompts[i], prompt_len[i], STEPS, err, sizeof err);
    REQUIRE(out, "sequence %d alone: %s", i, err);
    session_free(s);
    return out;
}

static bool same(const float *a, const float *b, size_t nv)
{
    return !memcmp(a, b, sizeof(float) * nv);
}

/* The three prompts and STEPS decode steps, all sequences in every batch. */
static void batched(const char *name, const model *m, kern_ctx *kc, float *const *ref,
                    int n_batch)
{
    char err[256];
    const size_t nv = (size_t)m->hp.n_vocab;
    session *ss[N_SEQ];
    ss[0] = session_create_split(m, kc, N_CTX, n_batch, N_SEQ, NULL, NULL, err, sizeof err);
    REQUIRE(ss[0], "%s", err);
    for (int i = 1; i < N_SEQ; i++)
        REQUIRE((ss[i] = session_create_peer(ss[0], i, err, sizeof err)), "%s", err);
    const int32_t *tok[N_SEQ];
    int n[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        tok[i] = prompts[i];
        n[i] = prompt_len[i];
    }
    REQUIRE(session_eval_batch(ss, tok, n, N_SEQ, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < N_SEQ; i++)
        CHECK(same(ss[i]->logits, ref[i], nv), "%s, batch %d: sequence %d's prompt logits",
              name, n_batch, i);
    int32_t next[N_SEQ];
    for (int g = 0; g < STEPS; g++) {
        greedy_step(ss, N_SEQ, next, tok, n);
        /* the step in reverse order of sequences: the order of rows does not matter */
        session *rev[N_SEQ] = {ss[2], ss[1], ss[0]};
        const int32_t *rtok[N_SEQ] = {tok[2], tok[1], tok[0]};
        REQUIRE(session_eval_batch(g % 2 ? rev : ss, g % 2 ? rtok : tok, n, N_SEQ, err,
                                   sizeof err) == 0, "%s", err);
        for (int i = 0; i < N_SEQ; i++)
            CHECK(same(ss[i]->logits, ref[i] + nv * (size_t)(g + 1), nv),
                  "%s, batch %d: sequence %d, step %d", name, n_batch, i, g);
    }

    /* Sequence 1 is truncated to its prompt and goes another way; 0 and 2 are untouched:
     * their next step is still the solo run's (recomputed from their caches). */
    session_truncate(ss[1], prompt_len[1]);
    int32_t other = 11;
    REQUIRE(session_eval(ss[1], &other, 1, NULL, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < N_SEQ; i += 2) {
        session_truncate(ss[i], ss[i]->n_past - 1);
        int32_t t = ss[i]->tokens[ss[i]->n_past];
        REQUIRE(session_eval(ss[i], &t, 1, NULL, err, sizeof err) == 0, "%s", err);
        CHECK(same(ss[i]->logits, ref[i] + nv * STEPS, nv),
              "%s: sequence %d after sequence 1 was truncated", name, i);
    }

    /* The asynchronous calls: one micro-batch per sequence, collected in order. */
    session_mb *mb[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        session_truncate(ss[i], prompt_len[i]);
        REQUIRE((mb[i] = session_mb_create(ss[0], err, sizeof err)), "%s", err);
    }
    CHECK(session_max_in_flight(ss[0]) == 1, "one device keeps one batch in flight");
    for (int i = 0; i < N_SEQ; i++) {
        int32_t t = fid_argmax(ref[i], (int)nv);
        const int32_t *tp = &t;
        int one = 1;
        REQUIRE(session_mb_submit(mb[i], &ss[i], &tp, &one, 1, err, sizeof err) == 0, "%s",
                err);
        REQUIRE(session_mb_collect(ss[0], err, sizeof err) == mb[i], "collect: %s", err);
        CHECK(same(ss[i]->logits, ref[i] + nv, nv), "%s: micro-batch of sequence %d", name, i);
    }
    CHECK(session_mb_collect(ss[0], err, sizeof err) == NULL && strstr(err, "no micro-batch"),
          "collect with nothing in flight: %s", err);
    /* a micro-batch freed before it is collected (as after a failure) leaves nothing behind */
    session_truncate(ss[2], prompt_len[2]);
    int32_t t2 = fid_argmax(ref[2], (int)nv);
    const int32_t *tp2 = &t2;
    int one = 1;
    REQUIRE(session_mb_submit(mb[2], &ss[2], &tp2, &one, 1, err, sizeof err) == 0, "%s", err);
    CHECK(ss[2]->in_flight && session_in_flight(ss[0]) == 1, "in flight before the free");
    session_mb_free(mb[2]);
    mb[2] = NULL;
    CHECK(!ss[2]->in_flight && session_in_flight(ss[0]) == 0, "freed micro-batch still counted");
    CHECK(session_mb_submit(mb[0], &ss[1], &tp2, &one, 1, err, sizeof err) == 0 &&
              session_mb_collect(ss[0], err, sizeof err) == mb[0],
          "a micro-batch after one was freed: %s", err);
    for (int i = 0; i < N_SEQ; i++)
        session_mb_free(mb[i]);

    /* Refusals: a session twice in a step, a peer out of range. */
    const int32_t *twice_tok[2] = {prompts[0], prompts[0]};
    int twice_n[2] = {1, 1};
    session *twice[2] = {ss[0], ss[0]};
    CHECK(session_eval_batch(twice, twice_tok, twice_n, 2, err, sizeof err) == -1 &&
              strstr(err, "twice"), "a sequence twice in one step: %s", err);
    CHECK(session_create_peer(ss[0], N_SEQ, err, sizeof err) == NULL && strstr(err, "0..2"),
          "a peer past the engine's sequences: %s", err);
    for (int i = N_SEQ - 1; i >= 0; i--)
        session_free(ss[i]);
}

/* Rows of three sequences interleaved in one engine_layers call equal each one's rows alone. */
static void interleaved(const char *name, const model *m, kern_ctx *kc)
{
    char err[256];
    const int L = m->hp.n_layer, E = m->hp.n_embd;
    engine *one = engine_create(m, kc, N_CTX, 16, NULL, err, sizeof err);
    engine *multi = engine_create_seqs(m, kc, N_CTX, 16, N_SEQ, NULL, err, sizeof err);
    REQUIRE(one && multi, "%s", err);
    uint64_t kv1, kv3, scratch;
    engine_memory(one, &kv1, &scratch);
    engine_memory(multi, &kv3, &scratch);
    CHECK(kv3 == 3 * kv1, "%s: KV bytes %llu for 3 sequences, %llu for one", name,
          (unsigned long long)kv3, (unsigned long long)kv1);
    /* rows: seq 0 pos 0..4, seq 1 pos 0..2, seq 2 pos 0..3, interleaved */
    const int32_t seq[12] = {0, 1, 2, 0, 0, 1, 2, 2, 0, 1, 2, 0};
    int32_t pos[12], count[N_SEQ] = {0};
    float *h = malloc(sizeof(float) * 12 * (size_t)E), *ref = malloc(sizeof(float) * 12 * (size_t)E);
    int32_t tokens[12];
    for (int t = 0; t < 12; t++) {
        pos[t] = count[seq[t]]++;
        tokens[t] = prompts[seq[t]][pos[t] % prompt_len[seq[t]]];
    }
    engine_embed(multi, tokens, 12, h);
    REQUIRE(engine_layers(multi, h, 12, pos, seq, 0, L) == 0, "%s: interleaved batch", name);
    for (int s = 0; s < N_SEQ; s++) {
        REQUIRE(engine_kv_truncate(one, 0, 0) == 0, "truncate");
        int32_t rows[12], rpos[12], rtok[12], n = 0;
        for (int t = 0; t < 12; t++)
            if (seq[t] == s) {
                rows[n] = t;
                rpos[n] = pos[t];
                rtok[n++] = tokens[t];
            }
        engine_embed(one, rtok, n, ref);
        REQUIRE(engine_layers(one, ref, n, rpos, NULL, 0, L) == 0, "%s: sequence %d alone",
                name, s);
        for (int r = 0; r < n; r++)
            CHECK(!memcmp(ref + (size_t)r * (size_t)E, h + (size_t)rows[r] * (size_t)E,
                          sizeof(float) * (size_t)E),
                  "%s: sequence %d row %d differs when interleaved", name, s, r);
    }
    /* what engine_layers refuses */
    int32_t bad_seq = N_SEQ, neg_seq = -1, p5 = count[0], gap = count[1] + 1, seq0 = 0;
    CHECK(engine_layers(multi, h, 1, &p5, &bad_seq, 0, L) == -1, "sequence id past n_seq");
    CHECK(engine_layers(multi, h, 1, &p5, &neg_seq, 0, L) == -1, "negative sequence id");
    int32_t one_seq = 1;
    CHECK(engine_layers(multi, h, 1, &gap, &one_seq, 0, L) == -1, "a position past the cache");
    int32_t two[2] = {count[0], count[0] + 2}, zeros[2] = {0, 0};
    CHECK(engine_layers(multi, h, 2, two, zeros, 0, L) == -1, "a gap inside one sequence");
    CHECK(engine_kv_truncate(multi, N_SEQ, 0) == -1 && engine_kv_shift(multi, -1, 1, 2, -1) == -1,
          "KV edits of a sequence that does not exist");
    /* a shift of sequence 2 leaves sequence 0's cache alone: its next row is unchanged */
    CHECK(engine_kv_shift(multi, 2, 2, count[2], -1) == 0, "shift of sequence 2");
    int32_t t0 = prompts[0][0];
    engine_embed(multi, &t0, 1, h);
    engine_embed(one, &t0, 1, ref);
    REQUIRE(engine_kv_truncate(one, 0, 0) == 0, "truncate");
    int32_t rpos0[5], rtok0[5];
    for (int r = 0; r < count[0]; r++) {
        rpos0[r] = r;
        rtok0[r] = prompts[0][r];
    }
    float *tmp = malloc(sizeof(float) * 5 * (size_t)E);
    engine_embed(one, rtok0, count[0], tmp);
    REQUIRE(engine_layers(one, tmp, count[0], rpos0, NULL, 0, L) == 0, "sequence 0 alone");
    CHECK(engine_layers(multi, h, 1, &p5, &seq0, 0, L) == 0 &&
              engine_layers(one, ref, 1, &p5, NULL, 0, L) == 0 &&
              !memcmp(h, ref, sizeof(float) * (size_t)E),
          "%s: sequence 0 after sequence 2 was shifted", name);
    free(tmp);
    free(h);
    free(ref);
    engine_free(one);
    engine_free(multi);
}

int main(void)
{
    const char *fx = test_fixtures();
    static const char *models[] = {"stories260K.gguf", "synth-spm512-l4-e256-f32.gguf",
                                   "synth-llama3-l2-e64-q8_0.gguf",
                                   "synth-qwen2-l2-e64-q8_0.gguf",
                                   "synth-spm512-l4-e256-q4_k_m.gguf",
                                   /* experts: a row is routed as it is alone (-np) */
                                   "synth-qwen3moe-l2-e64-q8_0.gguf",
                                   "synth-mixtral-l3-e64-q8_0.gguf",
                                   "synth-gptoss-l4-e64-mxfp4.gguf"};
    kern_ctx *kc = kern_ctx_create(2);
    REQUIRE(kc, "threads");
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/models/%s", fx, models[k]);
        model *m = model_load(path, err, sizeof err);
        REQUIRE(m, "%s", err);
        float *ref[N_SEQ];
        for (int i = 0; i < N_SEQ; i++)
            ref[i] = solo(m, kc, i, 16);
        batched(models[k], m, kc, ref, 16);
        batched(models[k], m, kc, ref, 5);   /* prompts cut across micro-batches */
        interleaved(models[k], m, kc);
        for (int i = 0; i < N_SEQ; i++)
            free(ref[i]);
        model_free(m);
    }
    kern_ctx_free(kc);
    return test_done();
}
