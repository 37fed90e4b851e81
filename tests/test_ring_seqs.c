/* Several sequences on a 3-device loopback ring of real engines (workers in threads): four
 * sequences whose rows share batches, cut into micro-batches kept in flight round the ring at
 * once, get bit for bit the logits and the greedy tokens each gets alone on one device;
 * micro-batches come back in the order they were sent, with their own content; truncating one
 * sequence leaves the others intact; what the ring refuses (too many batches in flight, a KV
 * edit of a sequence on its way, a sequence id it does not hold, failover with several
 * sequences) is refused with a message and leaves it usable. */
#include <stdlib.h>
#include <string.h>

#include "cluster/ring_engine.h"
#include "support/fake_ring.h"
#include "support/fidelity.h"
#include "support/greedy.h"
#include "test.h"

enum { N_SEQ = 4, N_CTX = 64, N_BATCH = 5, STEPS = 6 };

static const int32_t prompts[N_SEQ][9] = {
    {1, 5, 17, 42, 3, 96, 7, 61, 8},
    {1, 9, 4},
    {1, 30, 31, 32, 33, 34, 35},
    {1, 200, 100},
};
static const int prompt_len[N_SEQ] = {9, 3, 7, 3};

static model *m;
static ring_model rm;
static engine_backend backends[2];
static fake_worker workers[2];

/* Sequence i alone on one device: the logits after its prompt and after each greedy token. */
static float *solo(int i)
{
    char err[256];
    kern_ctx *kc = kern_ctx_create(1);
    session *s = session_create(m, kc, N_CTX, N_BATCH, err, sizeof err);
    REQUIRE(s, "%s", err);
    float *out = greedy_logits(s, prompts[i], prompt_len[i], STEPS, err, sizeof err);
    REQUIRE(out, "sequence %d alone: %s", i, err);
    session_free(s);
    kern_ctx_free(kc);
    return out;
}

static bool same(const float *a, const float *b)
{
    return !memcmp(a, b, sizeof(float) * (size_t)m->hp.n_vocab);
}

static void check_ring(const char *name, float *const *ref)
{
    char err[512], list[128];
    const size_t nv = (size_t)m->hp.n_vocab;
    fake_worker_list(workers, 2, list, sizeof list);
    const int lw[3] = {1, 2, m->hp.n_layer - 3};
    ring_opts ro = {.workers = list, .lw = lw, .n_lw = 3, .n_seq = N_SEQ, .wire = WIRE_F32};
    kern_ctx *kc = kern_ctx_create(1);
    ring_head h;
    session *ss[N_SEQ];
    ss[0] = ring_head_session(&h, &ro, NULL, m, kc, N_CTX, N_BATCH, err, sizeof err);
    REQUIRE(ss[0], "%s: %s", name, err);
    for (int i = 1; i < N_SEQ; i++)
        REQUIRE((ss[i] = session_create_peer(ss[0], i, err, sizeof err)), "%s", err);
    CHECK(session_max_in_flight(ss[0]) == 3, "%s: %d batches in flight on 3 devices", name,
          session_max_in_flight(ss[0]));
    CHECK(ring_head_failover(&h, ss[0], NULL, NULL, err, sizeof err) == -1 &&
              strstr(err, "failover keeps one sequence"),
          "%s: failover with %d sequences: %s", name, N_SEQ, err);

    /* the prompts in one step: 22 rows in micro-batches of up to 5, three in flight at a time,
     * prompts cut across them */
    const int32_t *tok[N_SEQ];
    int n[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        tok[i] = prompts[i];
        n[i] = prompt_len[i];
    }
    REQUIRE(session_eval_batch(ss, tok, n, N_SEQ, err, sizeof err) == 0, "%s: %s", name, err);
    for (int i = 0; i < N_SEQ; i++)
        CHECK(same(ss[i]->logits, ref[i]), "%s: sequence %d's prompt over the ring", name, i);
    int32_t next[N_SEQ];
    for (int g = 0; g < STEPS; g++) {
        greedy_step(ss, N_SEQ, next, tok, n);
        REQUIRE(session_eval_batch(ss, tok, n, N_SEQ, err, sizeof err) == 0, "%s: %s", name,
                err);
        for (int i = 0; i < N_SEQ; i++)
            CHECK(same(ss[i]->logits, ref[i] + nv * (size_t)(g + 1)),
                  "%s: sequence %d, decode step %d over the ring", name, i, g);
    }

    /* Back to the prompts, then micro-batches by hand: A = {0, 1}, B = {2}, C = {3} in flight
     * at once, collected in order. */
    session_mb *mb[3];
    for (int b = 0; b < 3; b++)
        REQUIRE((mb[b] = session_mb_create(ss[0], err, sizeof err)), "%s", err);
    for (int i = 0; i < N_SEQ; i++) {
        session_truncate(ss[i], prompt_len[i]);
        next[i] = fid_argmax(ref[i], (int)nv);
        tok[i] = &next[i];
        n[i] = 1;
    }
    REQUIRE(session_mb_submit(mb[0], ss, tok, n, 2, err, sizeof err) == 0, "A: %s", err);
    REQUIRE(session_mb_submit(mb[1], ss + 2, tok + 2, n, 1, err, sizeof err) == 0, "B: %s", err);
    REQUIRE(session_mb_submit(mb[2], ss + 3, tok + 3, n, 1, err, sizeof err) == 0, "C: %s", err);
    CHECK(session_in_flight(ss[0]) == 3 && ring_in_flight(h.r) == 3, "%s: three in flight",
          name);
    /* a fourth batch and an edit of a sequence on its way are refused; the ring goes on */
    float spare[8];
    int32_t p0 = 0, s0 = 0;
    CHECK(ring_submit(h.r, spare, 1, &p0, &s0) == -1 && strstr(ring_error(h.r), "at most 3"),
          "%s: a fourth batch in flight: %s", name, ring_error(h.r));
    CHECK(ring_kv_truncate(h.r, 2, 0) == -1 && strstr(ring_error(h.r), "sequence 2 while"),
          "%s: truncating a sequence in flight: %s", name, ring_error(h.r));
    for (int b = 0; b < 3; b++)
        CHECK(session_mb_collect(ss[0], err, sizeof err) == mb[b], "%s: micro-batch %d back "
              "out of order (%s)", name, b, err);
    for (int i = 0; i < N_SEQ; i++)
        CHECK(same(ss[i]->logits, ref[i] + nv), "%s: sequence %d in micro-batch %c", name, i,
              "AABC"[i]);
    for (int b = 0; b < 3; b++)
        session_mb_free(mb[b]);

    /* Sequence 1 goes another way after its prompt; the others' next steps are unchanged. */
    int32_t bad_seq = N_SEQ;
    CHECK(ring_submit(h.r, spare, 1, &p0, &bad_seq) == -1 && strstr(ring_error(h.r), "0..3"),
          "%s: a row of a sequence the ring does not hold: %s", name, ring_error(h.r));
    session_truncate(ss[1], prompt_len[1]);
    int32_t other = 11;
    REQUIRE(session_eval(ss[1], &other, 1, NULL, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < N_SEQ; i++) {
        if (i == 1)
            continue;
        int32_t t = fid_argmax(ss[i]->logits, (int)nv);
        REQUIRE(session_eval(ss[i], &t, 1, NULL, err, sizeof err) == 0, "%s: %s", name, err);
        CHECK(same(ss[i]->logits, ref[i] + 2 * nv), "%s: sequence %d after sequence 1 was "
              "truncated", name, i);
    }
    ring_head_close(&h);
    for (int i = N_SEQ - 1; i >= 0; i--)
        session_free(ss[i]);
    kern_ctx_free(kc);
}

int main(void)
{
    const char *fx = test_fixtures();
    static const char *models[] = {"stories260K.gguf", "synth-spm512-l4-e256-q4_k_m.gguf"};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        char path[512], err[512];
        snprintf(path, sizeof path, "%s/models/%s", fx, models[k]);
        model *mm = model_load(path, err, sizeof err);
        REQUIRE(mm, "%s", err);
        m = mm;
        REQUIRE(ring_model_init(&rm, m, err, sizeof err) == 0, "%s", err);
        float *ref[N_SEQ];
        for (int i = 0; i < N_SEQ; i++)
            ref[i] = solo(i);
        for (int i = 0; i < 2; i++) {
            engine_backend_init(&backends[i], &rm, m, NULL);
            REQUIRE(fake_worker_start_backend(&workers[i], &backends[i].b, NULL, 0) == 0, "worker");
        }
        check_ring(models[k], ref);
        for (int i = 0; i < 2; i++)
            fake_worker_stop(&workers[i]);
        for (int i = 0; i < N_SEQ; i++)
            free(ref[i]);
        ring_model_release(&rm);
        model_free(mm);
    }
    return test_done();
}
