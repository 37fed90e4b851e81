#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "support/fidelity.h"
#include "support/slurp.h"

static int int_array(const cJSON *a, int32_t **out)
{
    if (!cJSON_IsArray(a))
        return -1;
    int n = cJSON_GetArraySize(a);
    *out = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!*out)
        return -1;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (!cJSON_IsNumber(e))
            return -1;
        (*out)[i++] = (int32_t)e->valuedouble;
    }
    return n;
}

int fid_case_load(const char *dir, const char *json_name, fid_case *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, json_name);
    size_t len;
    char *text = slurp(path, &len);
    if (!text) {
        snprintf(err, errlen, "%s: cannot read", path);
        return -1;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) {
        snprintf(err, errlen, "%s: not JSON", path);
        return -1;
    }
    int rc = -1;
    const cJSON *mf = cJSON_GetObjectItem(j, "model_file"), *cs = cJSON_GetObjectItem(j, "case"),
                *pt = cJSON_GetObjectItem(j, "prompt_text"), *lf = cJSON_GetObjectItem(j, "logits_file"),
                *nv = cJSON_GetObjectItem(j, "n_vocab"), *g5 = cJSON_GetObjectItem(j, "greedy_top5");
    if (!cJSON_IsString(mf) || !cJSON_IsString(cs) || !cJSON_IsString(lf) || !cJSON_IsNumber(nv) ||
        !cJSON_IsArray(g5)) {
        snprintf(err, errlen, "%s: missing fields", path);
        goto out;
    }
    snprintf(c->model_file, sizeof c->model_file, "%s", mf->valuestring);
    snprintf(c->name, sizeof c->name, "%s", cs->valuestring);
    if (cJSON_IsString(pt))
        c->prompt_text = strdup(pt->valuestring);
    c->add_special = cJSON_IsTrue(cJSON_GetObjectItem(j, "add_special"));
    c->parse_special = cJSON_IsTrue(cJSON_GetObjectItem(j, "parse_special"));
    c->n_vocab = nv->valueint;
    c->n_prompt = int_array(cJSON_GetObjectItem(j, "prompt_tokens"), &c->prompt);
    c->n_greedy = int_array(cJSON_GetObjectItem(j, "greedy_tokens"), &c->greedy);
    if (c->n_prompt < 1 || c->n_greedy < 1 || cJSON_GetArraySize(g5) != c->n_greedy) {
        snprintf(err, errlen, "%s: bad token arrays", path);
        goto out;
    }
    c->greedy_top5 = calloc((size_t)c->n_greedy, sizeof *c->greedy_top5);
    for (int s = 0; c->greedy_top5 && s < c->n_greedy; s++) {
        const cJSON *e = cJSON_GetArrayItem(g5, s), *ids = cJSON_GetObjectItem(e, "top_ids"),
                    *lg = cJSON_GetObjectItem(e, "top_logits"),
                    *sd = cJSON_GetObjectItem(e, "row_sd");
        if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) != 5 || !cJSON_IsArray(lg) ||
            cJSON_GetArraySize(lg) != 5 || !cJSON_IsNumber(sd)) {
            snprintf(err, errlen, "%s: bad greedy_top5[%d]", path, s);
            goto out;
        }
        c->greedy_top5[s].row_sd = sd->valuedouble;
        for (int k = 0; k < 5; k++) {
            c->greedy_top5[s].ids[k] = (int32_t)cJSON_GetArrayItem(ids, k)->valuedouble;
            c->greedy_top5[s].logits[k] = cJSON_GetArrayItem(lg, k)->valuedouble;
        }
    }

    snprintf(path, sizeof path, "%s/%s", dir, lf->valuestring);
    char *raw = slurp(path, &len);
    size_t want = (size_t)c->n_prompt * (size_t)c->n_vocab * 4;
    if (!raw || len != want) {
        snprintf(err, errlen, "%s: expected %zu bytes", path, want);
        free(raw);
        goto out;
    }
    c->logits = malloc(want);
    if (c->logits) {
        for (size_t i = 0; i < want / 4; i++) {
            const unsigned char *b = (const unsigned char *)raw + 4 * i;
            uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                         (uint32_t)b[3] << 24;
            memcpy(&c->logits[i], &u, 4);
        }
        rc = 0;
    }
    free(raw);
out:
    cJSON_Delete(j);
    if (rc)
        fid_case_free(c);
    return rc;
}

void fid_case_free(fid_case *c)
{
    free(c->prompt_text);
    free(c->prompt);
    free(c->greedy);
    free(c->greedy_top5);
    free(c->logits);
    memset(c, 0, sizeof *c);
}

enum fid_class fid_weight_class(const gguf_file *f)
{
    bool bf16 = false, quant = false;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->n_dims < 2)
            continue;
        if (t->type == DT_BF16)
            bf16 = true;
        else if (t->type != DT_F32 && t->type != DT_F16)
            quant = true;
    }
    return quant ? FID_QUANT : bf16 ? FID_BF16 : FID_FLOAT;
}

const char *fid_class_name(enum fid_class c)
{
    return c == FID_QUANT ? "quantized" : c == FID_BF16 ? "bf16" : "float";
}

fid_tol fid_tolerance(enum fid_class c)
{
    switch (c) {
    case FID_BF16:
        return (fid_tol){0.9999, 0.05, 0.05};
    case FID_QUANT:
        return (fid_tol){0.999, 0.25, 0.10};
    case FID_FLOAT:
        break;
    }
    return (fid_tol){0.99999, 0.01, 0.01};
}

int fid_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

fid_row fid_compare_row(const float *ref, const float *cand, int n, const fid_tol *tol)
{
    double mean = 0.0;
    for (int i = 0; i < n; i++)
        mean += ref[i];
    mean /= n;
    double var = 0.0, dot = 0.0, rr = 0.0, cc = 0.0, dev = 0.0;
    for (int i = 0; i < n; i++) {
        double r = ref[i], c = cand[i];
        var += (r - mean) * (r - mean);
        dot += r * c;
        rr += r * r;
        cc += c * c;
        double d = fabs(r - c);
        if (!(d <= dev)) /* NaN counts as the largest deviation */
            dev = isnan(d) ? INFINITY : d;
    }
    double sd = sqrt(var / n);
    fid_row row = {.ref_argmax = fid_argmax(ref, n), .argmax = fid_argmax(cand, n)};
    row.cos = rr > 0 && cc > 0 ? dot / sqrt(rr * cc) : 0.0;
    row.dev = sd > 0 ? dev / sd : INFINITY;
    bool top = row.argmax == row.ref_argmax ||
               ref[row.argmax] >= ref[row.ref_argmax] - tol->near_tie * sd;
    row.ok = row.cos >= tol->min_cos && row.dev <= tol->max_dev && top;
    return row;
}

bool fid_compare_greedy(const fid_case *c, const int32_t *cand, bool trained, const fid_tol *tol,
                        char *msg, size_t msglen)
{
    for (int s = 0; s < c->n_greedy; s++) {
        if (cand[s] == c->greedy[s])
            continue;
        const fid_top5 *t = &c->greedy_top5[s];
        if (!trained)
            for (int k = 0; k < 5; k++)
                if (t->ids[k] == cand[s] && t->logits[k] >= t->logits[0] - tol->near_tie * t->row_sd) {
                    snprintf(msg, msglen, "diverged at step %d on a near-tie (%d vs %d)", s,
                             cand[s], c->greedy[s]);
                    return true;
                }
        snprintf(msg, msglen, "greedy step %d: token %d, reference %d", s, cand[s], c->greedy[s]);
        return false;
    }
    snprintf(msg, msglen, "all %d greedy tokens equal", c->n_greedy);
    return true;
}

int fid_compare_rows(const fid_case *c, const float *logits, const fid_tol *tol,
                     const char *what, double *worst_cos, double *worst_dev)
{
    int bad = 0;
    *worst_cos = 1.0;
    *worst_dev = 0.0;
    for (int i = 0; i < c->n_prompt; i++) {
        const size_t off = (size_t)i * (size_t)c->n_vocab;
        fid_row row = fid_compare_row(c->logits + off, logits + off, c->n_vocab, tol);
        if (row.cos < *worst_cos)
            *worst_cos = row.cos;
        if (row.dev > *worst_dev)
            *worst_dev = row.dev;
        if (!row.ok) {
            bad++;
            fprintf(stderr, "%s row %d: cos %.7f (min %.5f), dev %.4f sd (max %.2f), argmax %d "
                    "vs %d\n", what, i, row.cos, tol->min_cos, row.dev, tol->max_dev,
                    row.argmax, row.ref_argmax);
        }
    }
    return bad;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int fid_list_cases(const char *refdir, char **names, int max)
{
    DIR *d = opendir(refdir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < max) {
        size_t len = strlen(de->d_name);
        if (len > 5 && !strcmp(de->d_name + len - 5, ".json"))
            names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    return n;
}

model *fid_load_model(const char *fixtures, const fid_case *c, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", fixtures, c->model_file);
    return model_load(path, err, errlen);
}

bool fid_trained(const fid_case *c)
{
    return strncmp(c->model_file, "synth-", 6) != 0;
}
