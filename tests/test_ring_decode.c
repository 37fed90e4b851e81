/* Decoding handed to the one worker that holds every layer (session_decode over ring_decode):
 * the tokens it chooses must be the single device's, with a seeded sampler and penalties; when
 * the head halts it, the work it did beyond is undone, so that the history, the KV cache (the
 * logits of what is evaluated next, bit for bit) and the sampler (its next choice) are exactly
 * the single device's; also when the worker's window comes round k > 1 times. A ring whose head
 * holds layers does not decode so, and says so. Workers
 * run in threads of this process with their own engines. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/ring_engine.h"
#include "support/fake_ring.h"
#include "test.h"

enum { N_CTX = 96, N_BATCH = 8 };

static const int32_t prompt[] = {1, 403, 407, 261, 378, 434, 402, 300};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0] };

static sampler_params params(void)
{
    sampler_params p;
    sampler_params_default(&p);
    p.temp = 0.9f;
    p.repeat_penalty = 1.3f;
    p.repeat_last_n = 16;
    p.seed = 7;
    return p;
}

/* What one side did: the tokens chosen, then the logits after two more tokens and the next
 * choice, and the history's length before those. */
typedef struct outcome {
    int32_t chosen[64];
    int n_chosen, n_past;
    float *logits;
    int32_t next;
} outcome;

/* The prompt, the first token from its logits, then the rest: by session_decode, or (decode
 * false) one evaluation per token; `halt` tokens chosen in all (the first included). */
static int script(session *s, bool decode, int halt, outcome *o, char *err, size_t errlen);

typedef struct halting {
    outcome *o;
    int halt;
    int sleep_ms;   /* before halting: lets the worker run ahead */
} halting;

static int take(void *user, int32_t tok)
{
    halting *h = user;
    h->o->chosen[h->o->n_chosen++] = tok;
    if (h->o->n_chosen < h->halt)
        return 0;
    struct timespec ts = {0, h->sleep_ms * 1000000L};
    nanosleep(&ts, NULL);
    return 1;
}

static int script(session *s, bool decode, int halt, outcome *o, char *err, size_t errlen)
{
    const int nv = s->m->hp.n_vocab;
    sampler_params p = params();
    sampler *smp = sampler_create(&p, nv);
    int rc = -1;
    if (!smp || session_eval(s, prompt, N_PROMPT, NULL, err, errlen))
        goto out;
    for (int i = 0; i < N_PROMPT; i++)
        sampler_accept(smp, prompt[i]);
    o->n_chosen = 0;
    int32_t tok = sampler_sample(smp, s->logits);
    sampler_accept(smp, tok);
    o->chosen[o->n_chosen++] = tok;
    if (decode) {
        halting h = {o, halt, 30};
        int n;
        int d = session_decode(s, tok, 64, smp, take, &h, &n, err, errlen);
        if (d != 0 || n != halt - 1) {
            if (d >= 0)
                snprintf(err, errlen, "session_decode returned %d after %d tokens", d, n);
            goto out;
        }
        tok = o->chosen[o->n_chosen - 1];
    } else {
        while (o->n_chosen < halt) {
            if (session_eval(s, &tok, 1, NULL, err, errlen))
                goto out;
            tok = sampler_sample(smp, s->logits);
            sampler_accept(smp, tok);
            o->chosen[o->n_chosen++] = tok;
        }
    }
    o->n_past = s->n_past;
    /* the last chosen token was not evaluated: now it is, with one more */
    int32_t two[2] = {tok, prompt[3]};
    if (session_eval(s, two, 2, NULL, err, errlen))
        goto out;
    o->logits = malloc(sizeof(float) * (size_t)nv);
    memcpy(o->logits, s->logits, sizeof(float) * (size_t)nv);
    o->next = sampler_sample(smp, s->logits);
    rc = 0;
out:
    sampler_free(smp);
    return rc;
}

static model *m;
static ring_model rm;

/* A ring of the head and one worker with windows lw; the script through it. *batches: the
 * ring's batch count at the end. */
static int run_ring(fake_worker *w, const int lw[2], int halt, outcome *o, bool *decoded,
                    int *batches, char *err, size_t errlen)
{
    char list[64];
    fake_worker_list(w, 1, list, sizeof list);
    ring_opts ro = {.workers = list, .lw = lw, .n_lw = 2, .prefetch = true,
                    .release = RELEASE_AUTO, .method = PREFETCH_TOUCH, .wire = WIRE_F32};
    kern_ctx *kc = kern_ctx_create(1);
    ring_head h;
    session *s = ring_head_session(&h, &ro, NULL, m, kc, N_CTX, N_BATCH, err, errlen);
    int rc = -1;
    if (s) {
        sampler_params p = params();
        sampler *probe = sampler_create(&p, m->hp.n_vocab);
        *decoded = s->layers.can_decode(s->layers.ctx, probe);
        sampler_free(probe);
        rc = script(s, *decoded, halt, o, err, errlen);
        *batches = ring_batches(h.r);
        ring_head_close(&h);
        session_free(s);
    }
    kern_ctx_free(kc);
    return rc;
}

static void check(const char *fixtures, const char *file)
{
    char err[512], path[4096];
    snprintf(path, sizeof path, "%s/models/%s", fixtures, file);
    model *mm = model_load(path, err, sizeof err);
    REQUIRE(mm, "%s", err);
    m = mm;
    REQUIRE(ring_model_init(&rm, m, err, sizeof err) == 0, "%s", err);
    const int nv = m->hp.n_vocab, nl = m->hp.n_layer;
    engine_backend eb;
    engine_backend_init(&eb, &rm, m, NULL);
    fake_worker w;
    REQUIRE(fake_worker_start_backend(&w, &eb.b, NULL, 0) == 0, "worker");

    /* halts at several points; the last case in rounds: windows of half the model, k = 2 or
     * 3 with a partial last round */
    const int halts[] = {2, 12, 40, 12};
    for (size_t i = 0; i < sizeof halts / sizeof halts[0]; i++) {
        int halt = halts[i];
        const int lw[2] = {0, i == 3 ? (nl + 1) / 2 : nl};
        outcome one = {0}, two = {0};
        kern_ctx *kc = kern_ctx_create(1);
        session *s = session_create(m, kc, N_CTX, N_BATCH, err, sizeof err);
        REQUIRE(s, "%s", err);
        REQUIRE(script(s, false, halt, &one, err, sizeof err) == 0, "%s: one device: %s", file,
                err);
        session_free(s);
        kern_ctx_free(kc);

        bool decoded = false;
        int batches = 0;
        int rc = run_ring(&w, lw, halt, &two, &decoded, &batches, err, sizeof err);
        CHECK(rc == 0, "%s, halt %d, -lw 0,%d: %s", file, halt, lw[1], err);
        CHECK(decoded, "%s: a ring whose worker holds every layer does not decode there", file);
        if (rc == 0) {
            CHECK(two.n_chosen == one.n_chosen &&
                      !memcmp(two.chosen, one.chosen, sizeof(int32_t) * (size_t)one.n_chosen),
                  "%s, halt %d: the worker chose other tokens than one device", file, halt);
            CHECK(two.n_past == one.n_past, "%s, halt %d: history of %d tokens, one device %d",
                  file, halt, two.n_past, one.n_past);
            CHECK(!memcmp(two.logits, one.logits, sizeof(float) * (size_t)nv),
                  "%s, halt %d: logits after the halt differ from one device (KV cache)", file,
                  halt);
            CHECK(two.next == one.next, "%s, halt %d: the sampler's next choice differs", file,
                  halt);
            /* the prompt, the decode steps made, the two tokens after: more than the steps
             * kept shows that the worker ran ahead of the halt and was undone */
            CHECK(batches > 1 + (halt - 1) + 1, "%s, halt %d: %d batches: the worker never "
                  "ran ahead of the halt, nothing was undone", file, halt, batches);
        }
        free(one.logits);
        free(two.logits);
    }

    /* the head holds a layer: decoding stays with the head, the same tokens */
    outcome one = {0}, two = {0};
    kern_ctx *kc = kern_ctx_create(1);
    session *s = session_create(m, kc, N_CTX, N_BATCH, err, sizeof err);
    REQUIRE(s, "%s", err);
    REQUIRE(script(s, false, 10, &one, err, sizeof err) == 0, "%s", err);
    session_free(s);
    kern_ctx_free(kc);
    const int lw[2] = {1, nl - 1};
    bool decoded = true;
    int batches = 0;
    CHECK(run_ring(&w, lw, 10, &two, &decoded, &batches, err, sizeof err) == 0, "%s: %s", file,
          err);
    CHECK(!decoded, "%s: -lw 1,%d: the worker would decode without the head's layer", file,
          nl - 1);
    CHECK(!memcmp(two.chosen, one.chosen, sizeof(int32_t) * 10), "%s: -lw 1,%d: tokens differ",
          file, nl - 1);
    free(one.logits);
    free(two.logits);

    fake_worker_stop(&w);
    ring_model_release(&rm);
    model_free(mm);
}

int main(void)
{
    const char *fx = test_fixtures();
    check(fx, "stories260K.gguf");
    check(fx, "synth-spm512-l4-e256-q4_k_m.gguf");
    return test_done();
}
