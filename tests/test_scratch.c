/* The engine hands a prompt's scratch back to the OS at the first decode step after it
 * (engine.c, fit_scratch): the scheduler plans a device's memory with decode rows only
 * (sched/shape.c), so the pages a wide batch touched must not stay charged to the process. Read
 * from the process's anonymous resident memory (Linux's RssAnon); elsewhere the test skips. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kern.h"
#include "model/model.h"
#include "support/synth_tmp.h"
#include "test.h"

#define MIB (1024.0 * 1024.0)
#define BATCH 256

/* Anonymous resident bytes of this process, or -1 when /proc does not say. */
static double rss_anon(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    double kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %lf kB", &kib) == 1)
            break;
    fclose(f);
    return kib < 0 ? -1 : kib * 1024;
}

int main(void)
{
    if (rss_anon() < 0)
        SKIP("no RssAnon in /proc/self/status on this system");
    /* one layer whose feed-forward rows are wide: gate and up of a 256-row batch are 16 MiB */
    char err[512];
    synth_params q;
    synth_defaults(&q);
    q.n_layer = 1;
    q.n_ff = 8192;
    q.ftype = SYNTH_Q4_K;
    model *m = synth_tmp_load(&q, err, sizeof err);
    REQUIRE(m, "%s", err);
    const int n_embd = m->hp.n_embd;
    double gate_up = 2.0 * BATCH * q.n_ff * sizeof(float);

    kern_ctx *kc = kern_ctx_create(1);
    engine *e = engine_create(m, kc, BATCH + 8, BATCH, NULL, err, sizeof err);
    REQUIRE(e, "%s", err);
    float *hidden = malloc(sizeof(float) * (size_t)BATCH * (size_t)n_embd);
    int32_t *tok = malloc(sizeof(int32_t) * BATCH), *pos = malloc(sizeof(int32_t) * BATCH);
    REQUIRE(hidden && tok && pos, "out of memory");
    for (int i = 0; i < BATCH; i++) {
        tok[i] = i % m->hp.n_vocab;
        pos[i] = i;
    }
    float *logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    REQUIRE(logits, "out of memory");

    double before = rss_anon();
    engine_embed(e, tok, BATCH, hidden);
    REQUIRE(engine_layers(e, hidden, BATCH, pos, NULL, 0, 1) == 0, "the prompt's batch failed");
    double wide = rss_anon();
    CHECK(wide - before > 0.9 * gate_up, "a %d-row batch grew the process by %.1f MiB only "
          "(gate and up alone are %.1f MiB)", BATCH, (wide - before) / MIB, gate_up / MIB);

    /* the prompt's last row goes on to the output, then a decode step: the scratch is back */
    REQUIRE(engine_output(e, hidden + (size_t)(BATCH - 1) * (size_t)n_embd, 0, 1, logits) == 0,
            "the output of the last row failed");
    int32_t p1 = BATCH;
    engine_embed(e, tok, 1, hidden);
    REQUIRE(engine_layers(e, hidden, 1, &p1, NULL, 0, 1) == 0, "the decode step failed");
    double narrow = rss_anon();
    CHECK(wide - narrow > 0.9 * gate_up, "after the decode step the process holds %.1f MiB of "
          "the batch's %.1f MiB", (narrow - before) / MIB, (wide - before) / MIB);

    /* a second prompt touches the scratch again and computes as the first did */
    engine_embed(e, tok, BATCH, hidden);
    int32_t *pos2 = malloc(sizeof(int32_t) * BATCH);
    REQUIRE(pos2, "out of memory");
    for (int i = 0; i < BATCH; i++)
        pos2[i] = i;
    engine *fresh = engine_create(m, kc, BATCH + 8, BATCH, NULL, err, sizeof err);
    REQUIRE(fresh, "%s", err);
    float *ref = malloc(sizeof(float) * (size_t)BATCH * (size_t)n_embd);
    REQUIRE(ref, "out of memory");
    memcpy(ref, hidden, sizeof(float) * (size_t)BATCH * (size_t)n_embd);
    REQUIRE(engine_kv_truncate(e, 0, 0) == 0, "clearing the cache failed");
    REQUIRE(engine_layers(e, hidden, BATCH, pos2, NULL, 0, 1) == 0, "the second batch failed");
    REQUIRE(engine_layers(fresh, ref, BATCH, pos2, NULL, 0, 1) == 0, "the fresh engine failed");
    CHECK(memcmp(hidden, ref, sizeof(float) * (size_t)BATCH * (size_t)n_embd) == 0,
          "after handing its scratch back the engine computes a batch differently");

    free(ref);
    free(pos2);
    free(logits);
    free(pos);
    free(tok);
    free(hidden);
    engine_free(fresh);
    engine_free(e);
    kern_ctx_free(kc);
    model_free(m);
    return test_done();
}
