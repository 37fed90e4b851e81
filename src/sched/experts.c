/* experts.c — the routing curve of a model of experts (experts.h). */
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kern.h"
#include "sched/experts.h"
#include "sched/jsonfile.h"
#include "text/tokenizer.h"
#include "util/cachedir.h"

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
    int32_t *tok = NULL, *pos = NULL;
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
    hidden = malloc(sizeof *hidden * (size_t)hp->n_embd * (size_t)n_tok);
    pos = malloc(sizeof *pos * (size_t)n_tok);
    kc = kern_ctx_create(threads);
    if (!counts || !hidden || !pos || !kc) {
        snprintf(err, errlen, "calibration: out of memory");
        goto done;
    }
    e = engine_create(m, kc, n_tok, n_tok, NULL, err, errlen);
    if (!e)
        goto done;
    /* the whole text as one batch, each row's chosen experts counted: a layer's weights are read
     * once, not once a token (a device that pages its experts from disk would otherwise read
     * the model n_tok times over), and a row routes in a batch as it would alone */
    for (int p = 0; p < n_tok; p++)
        pos[p] = p;
    engine_count_routes(e, counts);
    engine_embed(e, tok, n_tok, hidden);
    if (engine_layers(e, hidden, n_tok, pos, NULL, 0, hp->n_layer)) {
        snprintf(err, errlen, "calibration: evaluating its %d tokens failed", n_tok);
        goto done;
    }
    rc = sched_expert_cover(counts, hp->n_layer, hp->n_expert, cover);
    if (rc)
        snprintf(err, errlen, "calibration: no layer routed a token");
done:
    engine_free(e);
    kern_ctx_free(kc);
    free(hidden);
    free(pos);
    free(counts);
    free(tok);
    tokenizer_free(t);
    return rc;
}

/* ---- the calibration cache (experts.h) ---- */

/* An entry is a few hundred bytes; anything far larger is not one. */
#define ENTRY_MAX 4096
/* Bumped when an entry's meaning changes without the text, tokens or points changing. */
#define ENTRY_FORMAT 1
/* Steps smaller than this are the rounding of the curve's sums, not a bend the wrong way. */
#define COVER_SLACK 1e-9

/* The calibration's version, hex: what the curve was measured with. */
static void calibration_version(char hex[33])
{
    char what[64];
    int n = snprintf(what, sizeof what, "format %d, %d tokens, %d points", ENTRY_FORMAT,
                     SCHED_CALIBRATION_TOKENS, SCHED_COVER_POINTS);
    crypto_generichash_state st;
    uint8_t h[16];
    crypto_generichash_init(&st, NULL, 0, sizeof h);
    crypto_generichash_update(&st, (const uint8_t *)what, (size_t)n);
    crypto_generichash_update(&st, (const uint8_t *)calibration_text, sizeof calibration_text - 1);
    crypto_generichash_final(&st, h, sizeof h);
    sodium_bin2hex(hex, 33, h, sizeof h);
}

/* Whether cover is a curve the cost model can use: from 0 to 1, rising, ever less steeply (to
 * the rounding of its sums, which is then clamped away). */
static bool cover_sound(double *cover)
{
    if (cover[0] != 0 || cover[SCHED_COVER_POINTS] != 1)
        return false;
    for (int j = 1; j <= SCHED_COVER_POINTS; j++) {
        double rise = cover[j] - cover[j - 1];
        if (!(cover[j] >= -COVER_SLACK && cover[j] <= 1 + COVER_SLACK) || rise < -COVER_SLACK ||
            (j > 1 && rise > cover[j - 1] - cover[j - 2] + COVER_SLACK))
            return false;
    }
    for (int j = 1; j < SCHED_COVER_POINTS; j++)
        cover[j] = cover[j] < 0 ? 0 : cover[j] > 1 ? 1 : cover[j];
    return true;
}

/* The curve of entry j into cover: 1 when it holds one for this model and calibration, 0 when
 * it is another calibration's (replaced without a word), -1 with why when it is damaged. */
static int entry_read(const cJSON *j, const char *model_hex, const char *version, double *cover,
                      char *why, size_t whylen)
{
    const cJSON *cal = cJSON_GetObjectItemCaseSensitive(j, "calibration");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *cv = cJSON_GetObjectItemCaseSensitive(j, "cover");
    if (!cJSON_IsString(cal) || !cJSON_IsString(id) || !cJSON_IsArray(cv)) {
        snprintf(why, whylen, "not a calibration");
        return -1;
    }
    if (strcmp(id->valuestring, model_hex)) {
        snprintf(why, whylen, "another model's calibration");
        return -1;
    }
    if (strcmp(cal->valuestring, version))
        return 0;
    if (cJSON_GetArraySize(cv) != SCHED_COVER_POINTS + 1) {
        snprintf(why, whylen, "%d points, not %d", cJSON_GetArraySize(cv), SCHED_COVER_POINTS + 1);
        return -1;
    }
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, cv) {
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) {
            snprintf(why, whylen, "point %d is not a number", i);
            return -1;
        }
        cover[i++] = x->valuedouble;
    }
    if (!cover_sound(cover)) {
        snprintf(why, whylen, "not a routing curve (from 0 to 1, rising ever less steeply)");
        return -1;
    }
    return 1;
}

static cJSON *entry_json(const char *model_hex, const char *version, const double *cover)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "model", model_hex);
    cJSON_AddStringToObject(j, "calibration", version);
    cJSON_AddItemToObject(j, "cover", cJSON_CreateDoubleArray(cover, SCHED_COVER_POINTS + 1));
    return j;
}

int sched_calibrate_kept(const model *m, const uint8_t *identity, int threads, bool fresh,
                         double *cover, sched_calib_info *info, char *err, size_t errlen)
{
    memset(info, 0, sizeof *info);
    if (sodium_init() < 0) {
        snprintf(err, errlen, "calibration: libsodium failed to initialise");
        return -1;
    }
    char model_hex[2 * MANIFEST_HASH + 1], version[33], dir[4096];
    sodium_bin2hex(model_hex, sizeof model_hex, identity, MANIFEST_HASH);
    calibration_version(version);
    if (cache_dir(dir, sizeof dir) == 0)
        snprintf(info->entry, sizeof info->entry, "%s/experts-%s.json", dir, model_hex);
    if (info->entry[0] && !fresh) {
        cJSON *j;
        char why[4400], bad[128];
        int got = json_file_read(info->entry, ENTRY_MAX, &j, why, sizeof why);
        if (got == 0) {
            double kept[SCHED_COVER_POINTS + 1];
            got = j ? entry_read(j, model_hex, version, kept, bad, sizeof bad) : -1;
            if (!j)
                snprintf(bad, sizeof bad, "not JSON (truncated?)");
            cJSON_Delete(j);
            if (got == 1) {
                memcpy(cover, kept, sizeof kept);
                info->cached = true;
                return 0;
            }
            if (got < 0)
                snprintf(info->warning, sizeof info->warning, "calibration cache %s: %s; "
                         "measuring again", info->entry, bad);
        } else if (got < 0) {
            snprintf(info->warning, sizeof info->warning, "calibration cache %s; measuring "
                     "again", why);
        }
    }
    if (sched_calibrate_experts(m, threads, cover, err, errlen))
        return -1;
    if (info->entry[0]) {
        char why[4400];
        cJSON *j = entry_json(model_hex, version, cover);
        /* a damaged entry's warning is the one to keep: it says why this start measured */
        info->stored = json_file_write(info->entry, j, why, sizeof why) == 0;
        if (!info->stored && !info->warning[0])
            snprintf(info->warning, sizeof info->warning, "calibration cache %s", why);
        cJSON_Delete(j);
    }
    return 0;
}
