/* Sliding-window layers keep only their window and the batch in flight (a ring, model_kv_rows):
 * a model with sliding layers gives, through the same script of batched prompt, decoding, a
 * truncation, a context shift and a truncation the ring cannot serve, bit for bit the logits
 * of an engine whose caches hold every position (a batch as wide as the context); and the ring
 * takes the memory of its rows only. */
#include <stdlib.h>
#include <string.h>

#include "model/session.h"
#include "support/synth_tmp.h"
#include "test.h"

enum { N_CTX = 48, WINDOW = 5, CHUNK = 4, MAX_ROWS = 64 };

typedef struct trace {
    float *rows;   /* logits after every step */
    int n;
} trace;

static void keep(trace *t, const session *s)
{
    const int nv = s->m->hp.n_vocab;
    REQUIRE(t->n < MAX_ROWS, "trace full");
    memcpy(t->rows + (size_t)t->n++ * (size_t)nv, s->logits, sizeof(float) * (size_t)nv);
}

/* n tokens in chunks; the logits of every chunk go to t (NULL: only the last's, by the caller) */
static void feed(session *s, const int32_t *toks, int n, trace *t)
{
    char err[256];
    for (int i = 0; i < n; i += CHUNK) {
        int k = n - i < CHUNK ? n - i : CHUNK;
        REQUIRE(session_eval(s, toks + i, k, NULL, err, sizeof err) == 0, "%s", err);
        if (t)
            keep(t, s);
    }
}

/* The history before the last truncation, and what that truncation kept. */
static int32_t hist[N_CTX];
static int kept;

static void script(session *s, trace *t)
{
    int32_t toks[N_CTX];
    for (int i = 0; i < N_CTX; i++)
        toks[i] = 3 + (i * 37) % 250;
    feed(s, toks, 30, t);                        /* wraps the ring of WINDOW + CHUNK rows */
    session_truncate(s, s->n_past - 3);          /* within the ring: kept */
    CHECK(s->n_past == 27, "a truncation by 3 kept %d positions, not 27", s->n_past);
    feed(s, toks + 30, 6, t);
    CHECK(session_shift(s, 2) > 0, "the context shift dropped nothing");
    feed(s, toks + 36, 5, t);
    memcpy(hist, s->tokens, sizeof(int32_t) * (size_t)s->n_past);
    session_truncate(s, 10);                     /* the ring no longer holds 5..9 */
    kept = s->n_past;
    feed(s, hist + kept, 12 - kept, NULL);
    keep(t, s);
}

int main(void)
{
    char err[512];
    synth_params q;
    synth_tiny(&q, ARCH_GEMMA3);
    q.n_layer = 7;          /* six sliding layers and a global one */
    q.n_swa = WINDOW;
    model *m = synth_tmp_load(&q, err, sizeof err);
    REQUIRE(m, "%s", err);
    CHECK(m->layers[0].prog.window == WINDOW && m->layers[5].prog.window == 0 &&
              m->layers[6].prog.window == WINDOW,
          "layers 0, 5, 6 slide: %d %d %d", m->layers[0].prog.window, m->layers[5].prog.window,
          m->layers[6].prog.window);
    CHECK(model_kv_rows(m, 0, N_CTX, CHUNK) == WINDOW + CHUNK && model_kv_rows(m, 5, N_CTX, CHUNK) ==
              N_CTX, "cache rows %d and %d", model_kv_rows(m, 0, N_CTX, CHUNK),
          model_kv_rows(m, 5, N_CTX, CHUNK));

    const int nv = m->hp.n_vocab;
    trace full = {malloc(sizeof(float) * MAX_ROWS * (size_t)nv), 0};
    trace ring = {malloc(sizeof(float) * MAX_ROWS * (size_t)nv), 0};
    REQUIRE(full.rows && ring.rows, "out of memory");
    kern_ctx *kc = kern_ctx_create(2);
    /* a batch as wide as the context: every cache holds every position */
    session *a = session_create(m, kc, N_CTX, N_CTX, err, sizeof err);
    REQUIRE(a, "%s", err);
    script(a, &full);
    CHECK(kept == 10, "the full cache kept %d positions of 10", kept);
    uint64_t kv_full, kv_ring, scratch;
    engine_memory(a->e, &kv_full, &scratch);
    session_free(a);
    session *b = session_create(m, kc, N_CTX, CHUNK, err, sizeof err);
    REQUIRE(b, "%s", err);
    script(b, &ring);
    /* the ring could not continue at 10: it evaluated the 12 positions afresh, and must
     * give what a fresh full cache gives for them (the full cache's own row 12 continued a
     * shifted history, which differs) */
    CHECK(kept == 0, "the ring kept %d positions where it holds too few", kept);
    engine_memory(b->e, &kv_ring, &scratch);
    session_free(b);
    session *c = session_create(m, kc, N_CTX, N_CTX, err, sizeof err);
    REQUIRE(c, "%s", err);
    feed(c, hist, 12, NULL);
    full.n--;
    keep(&full, c);
    session_free(c);

    CHECK(full.n == ring.n, "%d and %d steps", full.n, ring.n);
    for (int i = 0; i < full.n && i < ring.n; i++)
        CHECK(!memcmp(full.rows + (size_t)i * (size_t)nv, ring.rows + (size_t)i * (size_t)nv,
                      sizeof(float) * (size_t)nv),
              "step %d: the ring's logits differ from the full cache's", i);
    /* six layers of WINDOW + CHUNK rows and one of N_CTX, against seven of N_CTX */
    const uint64_t row = 2ull * 2 * (uint64_t)m->hp.n_head_kv * (uint64_t)m->hp.head_dim;
    CHECK(kv_ring == row * (6 * (WINDOW + CHUNK) + N_CTX) && kv_full == row * 7 * N_CTX,
          "KV bytes: ring %llu, full %llu", (unsigned long long)kv_ring,
          (unsigned long long)kv_full);
    free(full.rows);
    free(ring.rows);
    kern_ctx_free(kc);
    model_free(m);

    /* a llama file with a window (Mistral-style) slides in every layer; Qwen's never do */
    q.arch = ARCH_LLAMA;
    m = synth_tmp_load(&q, err, sizeof err);
    REQUIRE(m, "%s", err);
    for (int il = 0; il < m->hp.n_layer; il++)
        CHECK(m->layers[il].prog.window == WINDOW, "llama layer %d: window %d", il,
              m->layers[il].prog.window);
    model_free(m);
    q.arch = ARCH_QWEN2;
    m = synth_tmp_load(&q, err, sizeof err);
    REQUIRE(m, "%s", err);
    CHECK(m->layers[0].prog.window == 0 && model_kv_rows(m, 0, N_CTX, CHUNK) == N_CTX,
          "qwen2 slides: window %d", m->layers[0].prog.window);
    model_free(m);
    return test_done();
}
