/* A ring whose head and workers hold GPU layers, through a failover: stories260K's prompt on a
 * 3-device ring (windows 2,2,1, GPU layers 1,1,0), greedy decoding, then the second worker is
 * stopped mid-answer. The head re-plans over the devices left, its engine is rebuilt and the new
 * plan's GPU layers uploaded (engine_set_owned cannot re-lay a GPU's caches), the cache replayed,
 * and the answer goes on: every step's logits within the fixtures' tolerance of one CPU device,
 * the reference's greedy tokens, and each device's note saying what its GPU holds. Once with a
 * new plan that has GPU layers on the head (2 of 3) and on the worker left, once with a plan by
 * free memory (none: the head's GPU is let go). Workers run in threads of this process. Skips
 * (77) without fixtures or a usable GPU. */
#include <stdlib.h>
#include <string.h>

#include "cluster/ring_engine.h"
#include "support/fake_ring.h"
#include "support/fidelity.h"
#include "test.h"

enum { N_CTX = 64, N_BATCH = 4, N_STEPS = 16, LOSE_AT = 5 };

static model *m;
static ring_model rm;
static engine_backend backends[2];
static fake_worker workers[2];
static const offload_opts gpu = {.use = true, .index = -1};

static void start_workers(void)
{
    for (int i = 0; i < 2; i++) {
        engine_backend_init(&backends[i], &rm, m, &gpu);
        REQUIRE(fake_worker_start_backend(&workers[i], &backends[i].b, NULL, 0) == 0, "worker");
    }
}

/* The plan after the loss: the head 3 layers (2 on its GPU), the worker left 2 (1 on its GPU). */
static int plan_gpu(void *ctx, ring *r, const ring_plan_request *q, ring_plan *out, bool *drop,
                    char *err, size_t errlen)
{
    (void)ctx, (void)r, (void)drop;
    if (q->n_dev != 2) {
        snprintf(err, errlen, "plan_gpu: %d devices", q->n_dev);
        return -1;
    }
    *out = (ring_plan){.n_dev = 2, .n_layer = q->n_layer, .k = 1, .window = {3, 2},
                       .gpu_layers = {2, 1}};
    return 0;
}

/* The reference's prompt and N_STEPS greedy steps, the second worker stopped after LOSE_AT of
 * them; every step's logits compared with the CPU's (ref: N_STEPS rows). */
static void trial(const fid_case *c, const float *ref, const ring_planner *after, int head_gpu_after)
{
    const int nv = m->hp.n_vocab;
    const fid_tol tol = fid_tolerance(FID_FLOAT);
    char err[512], list[128];
    start_workers();
    fake_worker_list(workers, 2, list, sizeof list);
    const int lw[3] = {2, 2, 1}, gl[3] = {1, 1, 0};
    ring_opts ro = {.workers = list, .lw = lw, .n_lw = 3, .gpu_layers = gl, .n_gpu_layers = 3,
                    .prefetch = true, .method = PREFETCH_TOUCH, .wire = WIRE_F32};
    kern_ctx *kc = kern_ctx_create(1);
    ring_head h;
    session *s = ring_head_session(&h, &ro, &gpu, m, kc, N_CTX, N_BATCH, err, sizeof err);
    REQUIRE(s, "%s", err);
    CHECK(strstr(h.note, ": 1 of 1 layers asked for"), "the head's note: '%s'", h.note);
    CHECK(strstr(ring_device_note(h.r, 1), ": 1 of 1 layers asked for"), "device 1's note: '%s'",
          ring_device_note(h.r, 1));
    CHECK(!ring_device_note(h.r, 2)[0], "device 2 has no GPU layers, but a note: '%s'",
          ring_device_note(h.r, 2));
    REQUIRE(ring_head_failover(&h, s, after, getenv("PRIMA_TEST_VERBOSE") ? stderr : NULL, err,
                               sizeof err) == 0, "%s", err);
    REQUIRE(session_eval(s, c->prompt, c->n_prompt, NULL, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < N_STEPS; i++) {
        fid_row row = fid_compare_row(ref + (size_t)i * (size_t)nv, s->logits, nv, &tol);
        CHECK(row.ok, "step %d (%s): cos %.7f, dev %.4f sd", i, i < LOSE_AT ? "before" : "after",
              row.cos, row.dev);
        int32_t t = fid_argmax(s->logits, nv);
        CHECK(t == c->greedy[i], "step %d: token %d, the reference's %d", i, t, c->greedy[i]);
        if (i == LOSE_AT)
            fake_worker_stop(&workers[1]);
        if (i + 1 < N_STEPS)
            REQUIRE(session_eval(s, &t, 1, NULL, err, sizeof err) == 0, "step %d: %s", i, err);
    }
    const ring_plan *p = ring_get_plan(h.r);
    CHECK(p->n_dev == 2, "the ring has %d devices after the loss", p->n_dev);
    if (head_gpu_after) {
        CHECK(strstr(h.note, ": 2 of 2 layers asked for") && h.dev, "the head's new note: '%s'",
              h.note);
        CHECK(strstr(ring_device_note(h.r, 1), ": 1 of 1 layers asked for"),
              "device 1's new note: '%s'", ring_device_note(h.r, 1));
    } else {
        CHECK(!h.note[0] && !h.dev, "no GPU layers on the head, but note '%s', GPU %p", h.note,
              (void *)h.dev);
    }
    ring_head_close(&h);
    session_free(s);
    gpu_close(h.dev);
    kern_ctx_free(kc);
    fake_worker_stop(&workers[0]);
}

int main(void)
{
    kern_init();
    const char *fx = test_fixtures();
    char why[256], err[512], path[4096];
    gpu_dev *g = gpu_open(-1, why, sizeof why);
    if (!g)
        SKIP_NO_GPU("no GPU: %s", why);
    gpu_close(g);
    fid_case c;
    snprintf(path, sizeof path, "%s/reference", fx);
    REQUIRE(fid_case_load(path, "stories260K.once.json", &c, err, sizeof err) == 0, "%s", err);
    REQUIRE(c.n_greedy >= N_STEPS, "the case has %d greedy tokens", c.n_greedy);
    model *mm = fid_load_model(fx, &c, err, sizeof err);
    REQUIRE(mm, "%s", err);
    m = mm;
    REQUIRE(ring_model_init(&rm, m, err, sizeof err) == 0, "%s", err);

    /* one CPU device: the logits of every step */
    const int nv = m->hp.n_vocab;
    float *ref = malloc(sizeof(float) * (size_t)N_STEPS * (size_t)nv);
    REQUIRE(ref, "out of memory");
    kern_ctx *kc = kern_ctx_create(1);
    session *s = session_create(m, kc, N_CTX, N_BATCH, err, sizeof err);
    REQUIRE(s, "%s", err);
    REQUIRE(session_eval(s, c.prompt, c.n_prompt, NULL, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < N_STEPS; i++) {
        memcpy(ref + (size_t)i * (size_t)nv, s->logits, sizeof(float) * (size_t)nv);
        REQUIRE(session_eval(s, &c.greedy[i], 1, NULL, err, sizeof err) == 0, "%s", err);
    }
    session_free(s);
    kern_ctx_free(kc);

    const ring_planner with_gpu = {.ctx = NULL, .plan = plan_gpu};
    trial(&c, ref, &with_gpu, 1);
    trial(&c, ref, NULL, 0);

    free(ref);
    ring_model_release(&rm);
    model_free(mm);
    fid_case_free(&c);
    return test_done();
}
