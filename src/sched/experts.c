/* experts.c — the routing curve of a model of experts (experts.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kern.h"
#include "sched/experts.h"
#include "text/tokenizer.h"

/* The calibration text: ordinary prose, a little code and numbers, so that a real model's
 * router sees the kinds of tokens a home cluster is asked about. Written for prima. */
static const char calibration_text[] =
    "The old lighthouse keeper climbed the stairs every evening at six, counting the steps "
    "aloud. Tonight the wind came from the north, so he checked the lamp twice.\n"
    "def mean(xs):\n    return sum(xs) / len(xs) if xs else 0.0\n"
    "In 1969, 3 astronauts flew 384,400 km to the Moon; why did the mission matter?";

static int by_frequency_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int sched_expert_cover(const uint32_t *counts, int n_layer, int n_expert, double *cover)
{
    if (n_layer <= 0 || n_expert <= 0)
        return -1;
    double *f = malloc(sizeof *f * (size_t)n_layer * (size_t)n_expert);
    if (!f)
        return -1;
    int used = 0;   /* layers with routings */
    for (int il = 0; il < n_layer; il++) {
        const uint32_t *c = counts + (size_t)il * (size_t)n_expert;
        double total = 0;
        for (int e = 0; e < n_expert; e++)
            total += c[e];
        if (total <= 0)
            continue;
        /* the layer's routings as shares of 1, one more for each expert (experts.h) */
        for (int e = 0; e < n_expert; e++)
            f[(size_t)used * (size_t)n_expert + (size_t)e] = (c[e] + 1.0) / (total + n_expert);
        used++;
    }
    if (!used) {
        free(f);
        return -1;
    }
    size_t n = (size_t)used * (size_t)n_expert;
    qsort(f, n, sizeof *f, by_frequency_desc);
    /* cover at phi = j / POINTS: the hottest phi * n of all layers' experts, their shares
     * summed (a layer's sum to 1, so divided by the layers), the last one in part */
    double sum = 0;
    size_t i = 0;
    cover[0] = 0;
    for (int j = 1; j <= SCHED_COVER_POINTS; j++) {
        double upto = (double)n * j / SCHED_COVER_POINTS;
        while (i + 1 <= upto && i < n)
            sum += f[i++];
        double part = i < n ? (upto - (double)i) * f[i] : 0;
        cover[j] = (sum + part) / used;
    }
    cover[SCHED_COVER_POINTS] = 1;   /* exactly: the rounding of the sum aside */
    free(f);
    return 0;
}

int sched_calibrate_experts(const model *m, int threads, double *cover, char *err,
                            size_t errlen)
{
    const model_hparams *hp = &m->hp;
    if (hp->n_expert <= 0) {
        snprintf(err, errlen, "calibration: the model has no experts");
        return -1;
    }
    int rc = -1, n_tok = 0;
    int32_t *tok = NULL;
    uint32_t *counts = NULL;
    float *hidden = NULL;
    kern_ctx *kc = NULL;
    engine *e = NULL;
    tokenizer *t = tokenizer_load(m->file, err, errlen);
    if (!t)
        return -1;
    n_tok = tokenizer_encode(t, calibration_text, sizeof calibration_text - 1, false, false, &tok);
    if (n_tok <= 0) {
        snprintf(err, errlen, "calibration: cannot tokenize its text: %s",
                 n_tok < 0 ? tokenizer_strerror(n_tok) : "no tokens");
        n_tok = 0;
        goto done;
    }
    if (n_tok > SCHED_CALIBRATION_TOKENS)
        n_tok = SCHED_CALIBRATION_TOKENS;
    counts = calloc((size_t)hp->n_layer * (size_t)hp->n_expert, sizeof *counts);
    hidden = malloc(sizeof *hidden * (size_t)hp->n_embd);
    kc = kern_ctx_create(threads);
    if (!counts || !hidden || !kc) {
        snprintf(err, errlen, "calibration: out of memory");
        goto done;
    }
    e = engine_create(m, kc, n_tok, 1, NULL, err, errlen);
    if (!e)
        goto done;
    /* a token at a time: each layer's routed set is then that token's own k experts */
    for (int p = 0; p < n_tok; p++) {
        int32_t pos = p;
        engine_embed(e, &tok[p], 1, hidden);
        if (engine_layers(e, hidden, 1, &pos, NULL, 0, hp->n_layer)) {
            snprintf(err, errlen, "calibration: evaluating token %d failed", p);
            goto done;
        }
        for (int il = 0; il < hp->n_layer; il++) {
            const uint64_t *r = engine_routed(e, il);
            for (int x = 0; r && x < hp->n_expert; x++)
                counts[(size_t)il * (size_t)hp->n_expert + (size_t)x] += r[x / 64] >> (x % 64) & 1;
        }
    }
    rc = sched_expert_cover(counts, hp->n_layer, hp->n_expert, cover);
    if (rc)
        snprintf(err, errlen, "calibration: no layer routed a token");
done:
    engine_free(e);
    kern_ctx_free(kc);
    free(hidden);
    free(counts);
    free(tok);
    tokenizer_free(t);
    return rc;
}
