/* Layers of experts (LOP_MOE): a prompt evaluated in one batch, where the engine groups the
 * rows by expert (one product per expert over its rows), gives bit for bit the logits of the
 * same prompt fed a token at a time, at 1 and 2 threads; for a Qwen3-MoE and a Mixtral-style
 * llama file written by the synthetic writer, which must also load as the architecture says
 * (3-D expert tensors, an F32 router, the expert keys). The experts a layer reports routed
 * (engine_routed, what the ring pages by) are k per token, and a batch's are the union of its
 * tokens'. The routing calibration (sched/experts.h) gives a curve from 0 to 1 that rises ever
 * less steeply, and a dense model has none. The fixtures' agreement with llama.cpp is
 * test_fidelity's. */
#include <stdlib.h>
#include <string.h>

#include "model/session.h"
#include "sched/experts.h"
#include "sched/shape.h"
#include "support/synth_tmp.h"
#include "test.h"

enum { N_PROMPT = 12 };

static int popcount(uint64_t w)
{
    int n = 0;
    for (; w; w &= w - 1)
        n++;
    return n;
}

static void check_arch(enum model_arch arch)
{
    char err[512];
    synth_params q;
    synth_tiny(&q, arch);
    q.n_expert = 8;
    q.n_expert_used = 3;
    model *m = synth_tmp_load(&q, err, sizeof err);
    REQUIRE(m, "%s", err);
    const char *name = arch_get(arch)->name;
    const gguf_tensor *router = m->layers[1].t[LT_FFN_GATE_INP];
    const gguf_tensor *down = m->layers[1].t[LT_FFN_DOWN_EXPS];
    CHECK(m->hp.n_expert == 8 && m->hp.n_expert_used == 3 && router && router->type == DT_F32 &&
              down && down->ne[0] == 32 && down->ne[1] == 64 && down->ne[2] == 8 &&
              !m->layers[0].t[LT_FFN_GATE],
          "%s: experts %d/%d, router %s, down_exps %s", name, m->hp.n_expert,
          m->hp.n_expert_used, router ? "F32?" : "missing", down ? "present" : "missing");

    const int nv = m->hp.n_vocab;
    int32_t toks[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        toks[i] = 5 + (i * 53) % 290;
    float *batch = malloc(sizeof(float) * N_PROMPT * (size_t)nv);
    float *steps = malloc(sizeof(float) * N_PROMPT * (size_t)nv);
    REQUIRE(batch && steps, "out of memory");
    for (int threads = 1; threads <= 2; threads++) {
        kern_ctx *kc = kern_ctx_create(threads);
        session *a = session_create(m, kc, 64, N_PROMPT, err, sizeof err);
        REQUIRE(a, "%s", err);
        REQUIRE(!session_eval(a, toks, N_PROMPT, batch, err, sizeof err), "%s", err);
        uint64_t batch_routed[8], step_routed[8] = {0};   /* 8 experts: one word a layer */
        REQUIRE(m->hp.n_layer <= 8, "%d layers", m->hp.n_layer);
        for (int il = 0; il < m->hp.n_layer; il++)
            batch_routed[il] = engine_routed(a->e, il)[0];
        session_free(a);
        session *b = session_create(m, kc, 64, 1, err, sizeof err);
        REQUIRE(b, "%s", err);
        for (int i = 0; i < N_PROMPT; i++) {
            REQUIRE(!session_eval(b, toks + i, 1, steps + (size_t)i * (size_t)nv, err,
                                  sizeof err), "%s", err);
            for (int il = 0; il < m->hp.n_layer; il++) {
                uint64_t r = engine_routed(b->e, il)[0];
                CHECK(popcount(r) == 3 && r < 256, "%s: token %d routed to experts %#llx of "
                      "layer %d, want 3 of 8", name, i, (unsigned long long)r, il);
                step_routed[il] |= r;
            }
        }
        for (int il = 0; il < m->hp.n_layer; il++)
            CHECK(batch_routed[il] == step_routed[il], "%s: layer %d: the batch routed to "
                  "experts %#llx, its tokens alone to %#llx", name, il,
                  (unsigned long long)batch_routed[il], (unsigned long long)step_routed[il]);
        session_free(b);
        kern_ctx_free(kc);
        for (int i = 0; i < N_PROMPT; i++)
            CHECK(!memcmp(batch + (size_t)i * (size_t)nv, steps + (size_t)i * (size_t)nv,
                          sizeof(float) * (size_t)nv),
                  "%s, %d threads: row %d of the batch differs from its token alone", name,
                  threads, i);
    }

    /* the planner charges a token the router and its 3 of 8 experts, not all of them */
    sched_model sm;
    REQUIRE(!sched_model_from(m, 64, 8, 1, 4, &sm, err, sizeof err), "%s", err);
    const double attn = 64.0 * 64 + 2 * 64.0 * 32 + 64.0 * 64, experts = 3.0 * 3 * 64 * 32;
    CHECK(sm.layer_params[DT_Q8_0] == attn + experts && sm.layer_params[DT_F32] == 64.0 * 8,
          "%s: %.0f Q8_0 and %.0f F32 weights a token, expected %.0f and %.0f", name,
          sm.layer_params[DT_Q8_0], sm.layer_params[DT_F32], attn + experts, 64.0 * 8);
    free(batch);
    free(steps);
    model_free(m);
}

static void calibration(void)
{
    char err[512];
    synth_params q;
    synth_tiny(&q, ARCH_QWEN3MOE);
    q.n_expert = 8;
    q.n_expert_used = 2;
    model *m = synth_tmp_load(&q, err, sizeof err);
    REQUIRE(m, "%s", err);
    double cover[SCHED_COVER_POINTS + 1];
    REQUIRE(sched_calibrate_experts(m, 1, cover, err, sizeof err) == 0, "calibration: %s", err);
    CHECK(cover[0] == 0 && cover[SCHED_COVER_POINTS] == 1, "cover from %.3f to %.3f", cover[0],
          cover[SCHED_COVER_POINTS]);
    for (int j = 1; j <= SCHED_COVER_POINTS; j++) {
        double rise = cover[j] - cover[j - 1];
        CHECK(rise >= 0 && (j == 1 || rise <= cover[j - 1] - (j > 1 ? cover[j - 2] : 0) + 1e-12),
              "cover[%d] = %.4f after %.4f: not concave and rising", j, cover[j], cover[j - 1]);
    }
    /* the hottest quarter takes at least its even share */
    CHECK(cover[SCHED_COVER_POINTS / 4] >= 0.25 - 1e-9, "the hottest quarter: %.3f",
          cover[SCHED_COVER_POINTS / 4]);
    model_free(m);

    synth_tiny(&q, ARCH_QWEN3);
    m = synth_tmp_load(&q, err, sizeof err);
    REQUIRE(m, "%s", err);
    CHECK(sched_calibrate_experts(m, 1, cover, err, sizeof err) == -1 && strchr(err, '\n') == NULL,
          "a dense model: %s", err);
    model_free(m);
}

int main(void)
{
    calibration();
    check_arch(ARCH_QWEN3MOE);
    check_arch(ARCH_LLAMA);
    return test_done();
}
