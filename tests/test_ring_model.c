/* The ring on real models (the trained fixtures, a synthetic Q4_K_M one, a synthetic Gemma 3
 * with sliding-window layers and synthetic mixtures of experts): rings of 1 to 4
 * devices with uneven windows, forward-only devices, k = 1, 2, 3 and partial last rounds must
 * produce the single device's logits bit for bit and its greedy tokens, through a prefill split
 * into batches, decoding, a truncation and a context shift. Workers run in threads of this
 * process with their own engines; F16 on the wire must stay within the fixtures' tolerance. */
#include <stdlib.h>
#include <string.h>

#include "cluster/ring_engine.h"
#include "support/fake_ring.h"
#include "support/fidelity.h"
#include "test.h"

enum { N_CTX = 64, N_BATCH = 6, N_GREEDY = 8 };

typedef struct outputs {
    float *logits;     /* every row produced, in order */
    int n_rows;
    int32_t tokens[N_GREEDY];
} outputs;

/* Prompt (in batches of N_BATCH), greedy decoding, a truncation and a context shift; the
 * logits of every step are kept. */
static int script(session *s, const fid_case *c, outputs *o, char *err, size_t errlen)
{
    const int nv = s->m->hp.n_vocab;
    int cap = c->n_prompt + N_GREEDY + 8;
    o->logits = malloc(sizeof(float) * (size_t)cap * (size_t)nv);
    o->n_rows = 0;
    if (session_eval(s, c->prompt, c->n_prompt, o->logits, err, errlen))
        return -1;
    o->n_rows = c->n_prompt;
#define KEEP()                                                                        \
    memcpy(o->logits + (size_t)o->n_rows++ * (size_t)nv, s->logits, sizeof(float) * (size_t)nv)
    for (int g = 0; g < N_GREEDY; g++) {
        o->tokens[g] = fid_argmax(s->logits, nv);
        if (session_eval(s, &o->tokens[g], 1, NULL, err, errlen))
            return -1;
        KEEP();
    }
    /* forget the last three tokens, then take two others */
    session_truncate(s, s->n_past - 3);
    int32_t two[2] = {o->tokens[0], o->tokens[1]};
    if (session_eval(s, two, 2, NULL, err, errlen))
        return -1;
    KEEP();
    /* drop half the history after the first token, then go on */
    if (session_shift(s, 1) <= 0) {
        snprintf(err, errlen, "context shift dropped nothing");
        return -1;
    }
    if (session_eval(s, &o->tokens[2], 1, NULL, err, errlen))
        return -1;
    KEEP();
#undef KEEP
    return 0;
}

static model *m;
static ring_model rm;
static engine_backend backends[3];
static fake_worker workers[3];

static void start_workers(void)
{
    for (int i = 0; i < 3; i++) {
        engine_backend_init(&backends[i], &rm, m, NULL);
        REQUIRE(fake_worker_start_backend(&workers[i], &backends[i].b, NULL, 0) == 0, "worker");
    }
}

static void stop_workers(void)
{
    for (int i = 0; i < 3; i++)
        fake_worker_stop(&workers[i]);
}

typedef struct plan_case {
    int n_dev;
    int lw[4];
    int k;            /* -k as given (0: as the windows need) */
    enum wire_type wire;
} plan_case;

static int run_ring(const plan_case *pc, const fid_case *c, outputs *o, char *err, size_t errlen)
{
    char list[256];
    fake_worker_list(workers, pc->n_dev - 1, list, sizeof list);
    bool by_memory = !pc->lw[0] && !pc->lw[1] && !pc->lw[2] && !pc->lw[3];
    ring_opts ro = {.workers = list, .lw = pc->lw, .n_lw = by_memory ? 0 : pc->n_dev,
                    .k = pc->k, .prefetch = true,
                    .release = RELEASE_ALWAYS, .method = PREFETCH_TOUCH, .wire = pc->wire};
    kern_ctx *kc = kern_ctx_create(1);
    ring_head h;
    session *s = ring_head_session(&h, &ro, NULL, m, kc, N_CTX, N_BATCH, err, errlen);
    int rc = -1;
    if (s) {
        rc = script(s, c, o, err, errlen);
        ring_head_close(&h);
        session_free(s);
    }
    kern_ctx_free(kc);
    return rc;
}

/* kv: the KV cache type of K and V on every device (the head's, which its PLAN carries) */
static void check_model_kv(const char *fixtures, const char *case_json, const plan_case *cases,
                           int n, enum dtype kv)
{
    char err[512], path[4096];
    fid_case c;
    snprintf(path, sizeof path, "%s/reference", fixtures);
    REQUIRE(fid_case_load(path, case_json, &c, err, sizeof err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/models/%s", fixtures, c.model_file);
    model *mm = model_load(path, err, sizeof err);
    REQUIRE(mm, "%s", err);
    m = mm;
    REQUIRE(model_set_kv_types(m, kv, kv, err, sizeof err) == 0, "%s", err);
    REQUIRE(ring_model_init(&rm, m, err, sizeof err) == 0, "%s", err);
    const int nv = m->hp.n_vocab;

    /* the single device */
    outputs ref = {0};
    kern_ctx *kc = kern_ctx_create(1);
    session *s = session_create(m, kc, N_CTX, N_BATCH, err, sizeof err);
    REQUIRE(s, "%s", err);
    REQUIRE(script(s, &c, &ref, err, sizeof err) == 0, "%s: single device: %s", c.model_file, err);
    session_free(s);
    kern_ctx_free(kc);
    /* the script is meaningful: the trained model continues its prompt as the reference does */
    if (strncmp(c.model_file, "synth-", 6))
        CHECK(memcmp(ref.tokens, c.greedy, sizeof ref.tokens) == 0,
              "%s: single-device greedy tokens differ from the reference", c.model_file);

    start_workers();
    fid_tol tol = fid_tolerance(fid_weight_class(m->file));
    for (int i = 0; i < n; i++) {
        const plan_case *pc = &cases[i];
        outputs o = {0};
        int rc = run_ring(pc, &c, &o, err, sizeof err);
        CHECK(rc == 0, "%s, %d devices, lw %d,%d,%d,%d k %d: %s", c.model_file, pc->n_dev,
              pc->lw[0], pc->lw[1], pc->lw[2], pc->lw[3], pc->k, err);
        if (rc == 0 && pc->wire == WIRE_F32) {
            CHECK(o.n_rows == ref.n_rows &&
                      memcmp(o.logits, ref.logits, sizeof(float) * (size_t)nv * (size_t)ref.n_rows) == 0,
                  "%s, %d devices, lw %d,%d,%d,%d: logits differ from one device", c.model_file,
                  pc->n_dev, pc->lw[0], pc->lw[1], pc->lw[2], pc->lw[3]);
            CHECK(memcmp(o.tokens, ref.tokens, sizeof o.tokens) == 0,
                  "%s, %d devices: greedy tokens differ", c.model_file, pc->n_dev);
        } else if (rc == 0) {
            /* F16 hops: not exact, but within the fixtures' tolerance for this weight class */
            size_t prompt_bytes = sizeof(float) * (size_t)nv * (size_t)c.n_prompt;
            bool exact = memcmp(o.logits, ref.logits, prompt_bytes) == 0;
            CHECK(!exact, "%s: F16 on the wire gave exactly the F32 logits", c.model_file);
            for (int row = 0; row < c.n_prompt; row++) {
                fid_row fr = fid_compare_row(ref.logits + (size_t)row * (size_t)nv,
                                             o.logits + (size_t)row * (size_t)nv, nv, &tol);
                CHECK(fr.ok, "%s: F16 wire, row %d: cos %.6f dev %.4f", c.model_file, row, fr.cos,
                      fr.dev);
            }
        }
        free(o.logits);
    }
    stop_workers();
    free(ref.logits);
    ring_model_release(&rm);
    model_free(mm);
    fid_case_free(&c);
}

static void check_model(const char *fixtures, const char *case_json, const plan_case *cases, int n)
{
    check_model_kv(fixtures, case_json, cases, n, DT_F16);
}

int main(void)
{
    const char *fx = test_fixtures();
    /* stories260K: 5 layers */
    const plan_case stories[] = {
        {1, {2}, 0, WIRE_F32},                  /* one device, 3 rounds, partial */
        {2, {2, 3}, 1, WIRE_F32},
        {2, {1, 1}, 3, WIRE_F32},               /* 3 rounds, partial */
        {3, {1, 2, 2}, 0, WIRE_F32},
        {3, {1, 1, 1}, 2, WIRE_F32},            /* 2 rounds, partial */
        {4, {1, 1, 2, 1}, 0, WIRE_F32},
        {4, {0, 1, 1, 1}, 2, WIRE_F32},         /* the head only forwards; partial */
        {4, {2, 0, 1, 0}, 0, WIRE_F32},         /* forwarders; partial */
        {3, {0}, 0, WIRE_F32},                  /* windows by free memory */
        {3, {1, 2, 2}, 0, WIRE_F16},
    };
    check_model(fx, "stories260K.once.json", stories, sizeof stories / sizeof stories[0]);
    /* tinystories-656k: 2 layers */
    const plan_case tiny[] = {
        {1, {1}, 2, WIRE_F32},
        {2, {1, 1}, 0, WIRE_F32},
        {2, {1, 0}, 2, WIRE_F32},
        {3, {1, 0, 1}, 0, WIRE_F32},
        {4, {0, 1, 0, 1}, 0, WIRE_F32},
    };
    check_model(fx, "tinystories-656k-q8_0.lily.json", tiny, sizeof tiny / sizeof tiny[0]);
    /* synthetic Q4_K_M: 4 layers */
    const plan_case synth[] = {
        {2, {1, 3}, 0, WIRE_F32},
        {2, {1, 2}, 2, WIRE_F32},               /* partial */
        {3, {1, 1, 2}, 0, WIRE_F32},
        {3, {1, 1, 0}, 2, WIRE_F32},
        {4, {1, 1, 1, 1}, 0, WIRE_F32},
        {4, {1, 0, 1, 0}, 2, WIRE_F32},
        {3, {1, 1, 2}, 0, WIRE_F16},
    };
    check_model(fx, "synth-spm512-l4-e256-q4_k_m.mixed.json", synth, sizeof synth / sizeof synth[0]);
    /* quantized caches: the workers store them as the head's PLAN says, so the ring still gives
     * one device's bits (on one device: F16 would give other logits) */
    const plan_case synth_kv[] = {
        {3, {1, 1, 2}, 0, WIRE_F32},
        {2, {1, 1}, 2, WIRE_F32},               /* 2 rounds, partial */
    };
    check_model_kv(fx, "synth-spm512-l4-e256-q4_k_m.mixed.json", synth_kv, 2, DT_Q8_0);
    check_model_kv(fx, "synth-spm512-l4-e256-q4_k_m.mixed.json", synth_kv, 2, DT_Q4_0);
    /* Gemma 3: 6 layers, five sliding (window 8: rings of 14 rows here) and a global one */
    const plan_case gemma[] = {
        {2, {2, 4}, 0, WIRE_F32},
        {3, {1, 2, 1}, 2, WIRE_F32},            /* 2 rounds, the global layer on the head */
        {4, {2, 1, 1, 2}, 0, WIRE_F32},
    };
    check_model(fx, "synth-gemma3-l6-e64-f32.window.json", gemma, sizeof gemma / sizeof gemma[0]);
    /* experts: Mixtral (3 layers) and Qwen3-MoE (2 layers) */
    const plan_case mixtral[] = {
        {2, {1, 2}, 0, WIRE_F32},
        {3, {1, 1, 1}, 0, WIRE_F32},
        {2, {1, 1}, 2, WIRE_F32},               /* 2 rounds, partial */
    };
    check_model(fx, "synth-mixtral-l3-e64-q8_0.experts.json", mixtral,
                sizeof mixtral / sizeof mixtral[0]);
    const plan_case qwen3moe[] = {
        {2, {1, 1}, 0, WIRE_F32},
        {3, {1, 0, 1}, 0, WIRE_F32},
    };
    check_model(fx, "synth-qwen3moe-l2-e64-q8_0.route.json", qwen3moe,
                sizeof qwen3moe / sizeof qwen3moe[0]);
    /* gpt-oss: 4 layers, sliding and global alternating, sinks, MXFP4 experts */
    const plan_case gptoss[] = {
        {2, {1, 3}, 0, WIRE_F32},
        {3, {1, 1, 0}, 2, WIRE_F32},            /* 2 rounds */
    };
    check_model(fx, "synth-gptoss-l4-e64-mxfp4.sinks.json", gptoss, sizeof gptoss / sizeof gptoss[0]);
    return test_done();
}
