/* Layers of experts (LOP_MOE): a prompt evaluated in one batch, where the engine groups the
 * rows by expert (one product per expert over its rows), gives bit for bit the logits of the
 * same prompt fed a token at a time, at 1 and 2 threads; for a Qwen3-MoE and a Mixtral-style
 * llama file written by the synthetic writer, which must also load as the architecture says
 * (3-D expert tensors, an F32 router, the expert keys). The experts a layer reports routed
 * (engine_routed, what the ring pages by) are k per token, and a batch's are the union of its
 * tokens'. The routing calibration (sched/experts.h) gives a curve from 0 to 1 that rises ever
 * less steeply, and a dense model has none. The calibration cache keeps a model's curve: a
 * second calibration reads it without evaluating (a planted curve comes back), a damaged entry
 * (truncated, out of range, not rising or not concave, too few points, another model's) is
 * measured again with a one-line warning and replaced, another calibration's is replaced
 * silently, another model has its own entry, and a cache that cannot be used leaves the
 * measurement. The fixtures' agreement with llama.cpp is test_fidelity's. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/session.h"
#include "sched/experts.h"
#include "sched/shape.h"
#include "support/slurp.h"
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
        /* engine_count_routes: every row's 3 choices a layer, the same in a batch as alone */
        uint32_t batch_counts[8 * 8] = {0}, step_counts[8 * 8] = {0};
        engine_count_routes(a->e, batch_counts);
        REQUIRE(!session_eval(a, toks, N_PROMPT, batch, err, sizeof err), "%s", err);
        uint64_t batch_routed[8], step_routed[8] = {0};   /* 8 experts: one word a layer */
        REQUIRE(m->hp.n_layer <= 8, "%d layers", m->hp.n_layer);
        for (int il = 0; il < m->hp.n_layer; il++)
            batch_routed[il] = engine_routed(a->e, il)[0];
        session_free(a);
        session *b = session_create(m, kc, 64, 1, err, sizeof err);
        REQUIRE(b, "%s", err);
        engine_count_routes(b->e, step_counts);
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
        for (int il = 0; il < m->hp.n_layer; il++) {
            CHECK(batch_routed[il] == step_routed[il], "%s: layer %d: the batch routed to "
                  "experts %#llx, its tokens alone to %#llx", name, il,
                  (unsigned long long)batch_routed[il], (unsigned long long)step_routed[il]);
            uint32_t sum = 0;
            for (int x = 0; x < 8; x++) {
                sum += batch_counts[il * 8 + x];
                CHECK(batch_counts[il * 8 + x] == step_counts[il * 8 + x] &&
                      (batch_counts[il * 8 + x] > 0) == (int)(batch_routed[il] >> x & 1),
                      "%s: layer %d, expert %d: %u rows in the batch, %u alone (routed %#llx)",
                      name, il, x, batch_counts[il * 8 + x], step_counts[il * 8 + x],
                      (unsigned long long)batch_routed[il]);
            }
            CHECK(sum == 3 * N_PROMPT, "%s: layer %d counted %u routings of %d rows", name, il,
                  sum, N_PROMPT);
        }
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

/* A model of experts (seed: which one) and its identity. */
static model *moe_model(uint64_t seed, uint8_t identity[MANIFEST_HASH])
{
    char err[512];
    synth_params q;
    synth_tiny(&q, ARCH_QWEN3MOE);
    q.n_expert = 8;
    q.n_expert_used = 2;
    q.seed = seed;
    model *m = synth_tmp_load(&q, err, sizeof err);
    REQUIRE(m, "%s", err);
    const gguf_file *f = m->file;
    manifest *mf = manifest_for_file(f->path, f->map, f->size, f->data_offset, err, sizeof err);
    REQUIRE(mf, "%s", err);
    memcpy(identity, mf->root, MANIFEST_HASH);
    manifest_free(mf);
    return m;
}

/* Whether two curves are the same, to the digits a cache entry keeps (cJSON prints 15 when
 * they read back within a rounding error). */
static bool same_curve(const double *x, const double *y)
{
    for (int j = 0; j <= SCHED_COVER_POINTS; j++)
        if (fabs(x[j] - y[j]) > 1e-12)
            return false;
    return true;
}

/* sched_calibrate_kept, which must succeed; its info in *ci. */
static void kept(const model *m, const uint8_t *identity, bool fresh, double *cover,
                 sched_calib_info *ci)
{
    char err[512];
    REQUIRE(sched_calibrate_kept(m, identity, 1, fresh, cover, ci, err, sizeof err) == 0,
            "calibration through the cache: %s", err);
}

/* An entry for model and calibration with the points given (JSON numbers, commas between). */
static void plant(const char *path, const char *model_id, const char *calibration,
                  const char *points)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f, "cannot write %s", path);
    fprintf(f, "{\"model\": \"%s\", \"calibration\": \"%s\", \"cover\": [%s]}\n", model_id,
            calibration, points);
    REQUIRE(fclose(f) == 0, "cannot write %s", path);
}

/* The points of a curve f(j / SCHED_COVER_POINTS), j = 0..SCHED_COVER_POINTS, as plant takes
 * them; point bad (when in range) replaced by bad_value. */
static void points_of(double (*f)(double), int bad, const char *bad_value, char *out, size_t cap)
{
    size_t n = 0;
    for (int j = 0; j <= SCHED_COVER_POINTS && n < cap; j++) {
        if (j == bad)
            n += (size_t)snprintf(out + n, cap - n, "%s%s", j ? ", " : "", bad_value);
        else
            n += (size_t)snprintf(out + n, cap - n, "%s%.17g", j ? ", " : "",
                                  f((double)j / SCHED_COVER_POINTS));
    }
}

static double even(double phi) { return phi; }
static double skewed(double phi) { return sqrt(phi); }
static double bent_wrong(double phi) { return phi * phi; }

static void calibration_cache(void)
{
    char dir[] = "/tmp/prima-test-calcache.XXXXXX", err[512];
    REQUIRE(mkdtemp(dir), "mkdtemp");
    REQUIRE(setenv("PRIMA_CACHE_DIR", dir, 1) == 0, "setenv");
    uint8_t id_a[MANIFEST_HASH], id_b[MANIFEST_HASH];
    model *a = moe_model(1, id_a);
    double measured[SCHED_COVER_POINTS + 1], cover[SCHED_COVER_POINTS + 1];
    REQUIRE(sched_calibrate_experts(a, 1, measured, err, sizeof err) == 0, "%s", err);
    sched_calib_info ci;

    /* (1) the first calibration measures and stores */
    kept(a, id_a, false, cover, &ci);
    struct stat st;
    CHECK(!ci.cached && ci.stored && !ci.warning[0] && stat(ci.entry, &st) == 0 &&
              strstr(ci.entry, dir) == ci.entry,
          "first: cached %d, stored %d, entry %s, warning '%s'", ci.cached, ci.stored, ci.entry,
          ci.warning);
    CHECK(same_curve(cover, measured), "first: not the measured curve");
    char entry[sizeof ci.entry];
    snprintf(entry, sizeof entry, "%s", ci.entry);
    size_t len;
    char *text = slurp(entry, &len);
    REQUIRE(text, "cannot read %s", entry);
    cJSON *j = cJSON_Parse(text);
    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *jc = cJSON_GetObjectItemCaseSensitive(j, "calibration");
    REQUIRE(cJSON_IsString(jm) && cJSON_IsString(jc), "the entry: %s", text);
    char model_hex[2 * MANIFEST_HASH + 1], version[64];
    snprintf(model_hex, sizeof model_hex, "%s", jm->valuestring);
    snprintf(version, sizeof version, "%s", jc->valuestring);
    cJSON_Delete(j);

    /* (2) the second reads it: the same curve, and a curve planted there comes back as it is,
     * so nothing was evaluated */
    kept(a, id_a, false, cover, &ci);
    CHECK(ci.cached && !ci.stored && !ci.warning[0] && same_curve(cover, measured),
          "second: cached %d, warning '%s'", ci.cached, ci.warning);
    char pts[1024];
    points_of(skewed, -1, NULL, pts, sizeof pts);
    plant(entry, model_hex, version, pts);
    kept(a, id_a, false, cover, &ci);
    CHECK(ci.cached && fabs(cover[SCHED_COVER_POINTS / 4] - 0.5) < 1e-12,
          "a planted curve: cached %d, %.4f at a quarter, not 0.5", ci.cached,
          cover[SCHED_COVER_POINTS / 4]);

    /* (3) damaged entries: each measured again, said in one line, and replaced */
    struct {
        const char *what;
        double (*f)(double);
        int bad;
        const char *value;
    } damaged[] = {
        {"out of range", even, 8, "1.5"},
        {"negative", even, 3, "-0.25"},
        {"not rising", even, 4, "0.1"},
        {"not concave", bent_wrong, -1, NULL},
        {"a string", even, 5, "\"0.3\""},
        {"not ending at 1", skewed, SCHED_COVER_POINTS, "0.9"},
        {"too few points", even, SCHED_COVER_POINTS, NULL},
        {"truncated", NULL, 0, NULL},
        {"another model's", NULL, 1, NULL},
        {"not an entry", NULL, 2, NULL},
    };
    for (size_t i = 0; i < sizeof damaged / sizeof damaged[0]; i++) {
        const char *what = damaged[i].what;
        if (damaged[i].f && damaged[i].bad == SCHED_COVER_POINTS && !damaged[i].value) {
            points_of(damaged[i].f, -1, NULL, pts, sizeof pts);
            *strrchr(pts, ',') = 0;   /* the last point left out */
            plant(entry, model_hex, version, pts);
        } else if (damaged[i].f) {
            points_of(damaged[i].f, damaged[i].bad, damaged[i].value, pts, sizeof pts);
            plant(entry, model_hex, version, pts);
        } else if (damaged[i].bad == 0) {
            FILE *f = fopen(entry, "w");
            REQUIRE(f && fwrite(text, 1, len / 2, f) == len / 2 && fclose(f) == 0, "truncating");
        } else if (damaged[i].bad == 1) {
            points_of(skewed, -1, NULL, pts, sizeof pts);
            char other[sizeof model_hex];
            snprintf(other, sizeof other, "%s", model_hex);
            other[0] = other[0] == '0' ? '1' : '0';
            plant(entry, other, version, pts);
        } else {
            FILE *f = fopen(entry, "w");
            REQUIRE(f && fputs("[1, 2, 3]\n", f) >= 0 && fclose(f) == 0, "writing");
        }
        kept(a, id_a, false, cover, &ci);
        CHECK(!ci.cached && ci.stored && same_curve(cover, measured),
              "%s: cached %d, stored %d", what, ci.cached, ci.stored);
        CHECK(ci.warning[0] && !strchr(ci.warning, '\n') && strstr(ci.warning, entry) &&
                  strstr(ci.warning, "measuring again"),
              "%s: the warning '%s'", what, ci.warning);
        kept(a, id_a, false, cover, &ci);
        CHECK(ci.cached && !ci.warning[0], "%s: the replaced entry is not read back", what);
    }

    /* another calibration's entry (other text or points) is replaced without a warning */
    points_of(skewed, -1, NULL, pts, sizeof pts);
    plant(entry, model_hex, "0123456789abcdef0123456789abcdef", pts);
    kept(a, id_a, false, cover, &ci);
    CHECK(!ci.cached && ci.stored && !ci.warning[0] && same_curve(cover, measured),
          "another calibration's entry: cached %d, warning '%s'", ci.cached, ci.warning);

    /* fresh: measured and stored even over a sound entry */
    plant(entry, model_hex, version, pts);
    kept(a, id_a, true, cover, &ci);
    CHECK(!ci.cached && ci.stored && same_curve(cover, measured),
          "fresh: cached %d, stored %d", ci.cached, ci.stored);
    kept(a, id_a, false, cover, &ci);
    CHECK(ci.cached && same_curve(cover, measured), "fresh: not stored");

    /* (4) another model: its own entry, its own curve; the first one's stays */
    model *b = moe_model(2, id_b);
    REQUIRE(memcmp(id_a, id_b, sizeof id_a), "two models of one identity");
    double measured_b[SCHED_COVER_POINTS + 1];
    REQUIRE(sched_calibrate_experts(b, 1, measured_b, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(measured, measured_b, sizeof measured), "the two models route alike");
    kept(b, id_b, false, cover, &ci);
    CHECK(!ci.cached && ci.stored && strcmp(ci.entry, entry) &&
              same_curve(cover, measured_b),
          "another model: cached %d, entry %s", ci.cached, ci.entry);
    kept(b, id_b, false, cover, &ci);
    CHECK(ci.cached && same_curve(cover, measured_b), "another model: not kept");
    kept(a, id_a, false, cover, &ci);
    CHECK(ci.cached && same_curve(cover, measured), "the first model's entry lost");
    char entry_b[sizeof ci.entry];
    kept(b, id_b, false, cover, &ci);
    snprintf(entry_b, sizeof entry_b, "%s", ci.entry);

    /* an entry that cannot be read (a directory) is measured past, said; a cache directory
     * that cannot be made leaves the measurement alone */
    REQUIRE(unlink(entry) == 0 && mkdir(entry, 0700) == 0, "mkdir %s", entry);
    kept(a, id_a, false, cover, &ci);
    CHECK(!ci.cached && !ci.stored && ci.warning[0] && !strchr(ci.warning, '\n') &&
              same_curve(cover, measured),
          "an entry that is a directory: cached %d, warning '%s'", ci.cached, ci.warning);
    char nodir[sizeof entry_b + 32];
    snprintf(nodir, sizeof nodir, "%s/not-a-dir/cache", entry_b);
    REQUIRE(setenv("PRIMA_CACHE_DIR", nodir, 1) == 0, "setenv");
    kept(a, id_a, false, cover, &ci);
    CHECK(!ci.cached && !ci.stored && !ci.entry[0] && !ci.warning[0] &&
              same_curve(cover, measured),
          "no cache directory: cached %d, entry '%s', warning '%s'", ci.cached, ci.entry,
          ci.warning);

    rmdir(entry);
    unlink(entry_b);
    rmdir(dir);
    free(text);
    model_free(a);
    model_free(b);
}

int main(void)
{
    calibration();
    calibration_cache();
    check_arch(ARCH_QWEN3MOE);
    check_arch(ARCH_LLAMA);
    return test_done();
}
