/* embed.c — embeddings: OpenAI's POST /v1/embeddings and Ollama's /api/embed. The input is a
 * text, an array of texts, token ids, or an array of arrays of ids; the answer holds a vector per
 * input (the generator pools the model's last hidden states: server.h), as OpenAI's list of
 * embedding objects (floats, or base64 of little-endian float32 as the openai clients ask by
 * default) or Ollama's "embeddings" array. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

/* ---- requests --------------------------------------------------------------------------- */

static bool token_id(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 2147483648.0 &&
           v->valuedouble == floor(v->valuedouble);
}

/* The ids of every input that is an array of them, in one buffer (prompt_toks). */
static int count_ids(const cJSON *in, srv_refusal *why)
{
    int n = 0;
    const cJSON *e, *t;
    cJSON_ArrayForEach(e, in) {
        if (!cJSON_IsArray(e))
            continue;
        cJSON_ArrayForEach(t, e) {
            if (!token_id(t))
                return srv_refuse(why, "input", "'input' holds something that is not a token id "
                                  "(an integer >= 0) in an array of ids");
            n++;
        }
    }
    return n;
}

static int add_input(srv_request *r, const cJSON *e, srv_refusal *why)
{
    srv_input *in = &r->inputs[r->n_inputs];
    if (cJSON_IsString(e)) {
        *in = (srv_input){.text = e->valuestring};
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) > 0) {
        *in = (srv_input){.toks = r->prompt_toks + r->n_prompt_toks};
        const cJSON *t;
        cJSON_ArrayForEach(t, e) {
            r->prompt_toks[r->n_prompt_toks++] = (int32_t)t->valuedouble;
            in->n_toks++;
        }
    } else {
        return srv_refuse(why, "input", "'input' must be a string, an array of strings, an "
                          "array of token ids or an array of such arrays (none empty)");
    }
    if (in->text && !*in->text)
        return srv_refuse(why, "input", "'input' holds an empty string");
    r->n_inputs++;
    return 0;
}

static int parse_input(srv_request *r, const cJSON *root, srv_refusal *why)
{
    const cJSON *in = srv_field(root, "input");
    if (!in)
        return srv_refuse(why, "input", "'input' is required");
    /* one input of ids is an array of numbers: seen as an array holding that array */
    bool one = cJSON_IsString(in) ||
               (cJSON_IsArray(in) && cJSON_IsNumber(cJSON_GetArrayItem(in, 0)));
    int n = one ? 1 : cJSON_GetArraySize(in);
    if (!one && (!cJSON_IsArray(in) || n == 0))
        return srv_refuse(why, "input", "'input' must be a string or a non-empty array");
    int ids = 0;
    if (one && cJSON_IsArray(in)) {
        const cJSON *t;
        cJSON_ArrayForEach(t, in) {
            if (!token_id(t))
                return srv_refuse(why, "input", "'input' holds something that is not a token id "
                                  "(an integer >= 0)");
            ids++;
        }
    } else if (!one) {
        ids = count_ids(in, why);
        if (ids < 0)
            return -1;
    }
    r->inputs = calloc((size_t)n, sizeof *r->inputs);
    r->prompt_toks = ids ? malloc(sizeof *r->prompt_toks * (size_t)ids) : NULL;
    if (!r->inputs || (ids && !r->prompt_toks))
        return srv_refuse(why, NULL, "out of memory");
    if (one)
        return add_input(r, in, why);
    const cJSON *e;
    cJSON_ArrayForEach(e, in)
        if (add_input(r, e, why))
            return -1;
    return 0;
}

static int parse_embed(srv_request *r, enum srv_api api, const cJSON *root, srv_refusal *why)
{
    const cJSON *model = srv_field(root, "model");
    if (model && !cJSON_IsString(model))
        return srv_refuse(why, "model", "'model' must be a string");
    r->model = model ? model->valuestring : NULL;
    double v;
    int got = srv_get_int(root, "dimensions", 1, 1 << 20, &v, why);
    if (got < 0)
        return -1;
    r->dimensions = got ? (int)v : 0;
    if (api == SRV_API_OLLAMA) {
        r->truncate = true; /* Ollama's default: an input is cut to the context */
        if (srv_get_bool(root, "truncate", &r->truncate, why))
            return -1;
    } else {
        const cJSON *f = srv_field(root, "encoding_format");
        if (f && !(cJSON_IsString(f) && (!strcmp(f->valuestring, "float") ||
                                         !strcmp(f->valuestring, "base64"))))
            return srv_refuse(why, "encoding_format", "'encoding_format' must be float or base64");
        r->base64 = f && !strcmp(f->valuestring, "base64");
    }
    return parse_input(r, root, why);
}

int srv_embed_parse(srv_request *r, enum srv_api api, const char *body, size_t len,
                    const sampler_params *defaults, srv_refusal *why)
{
    cJSON *root = srv_request_json(r, SRV_EMBED, body, len, defaults, why);
    if (!root)
        return -1;
    r->api = api;
    int rc = parse_embed(r, api, root, why);
    if (rc)
        srv_request_free(r);
    return rc;
}

/* ---- answers ---------------------------------------------------------------------------- */

void srv_job_embedding(srv_job *j, int index, const float *v, int n)
{
    pthread_mutex_lock(&j->mu);
    if (!j->emb && index >= 0 && index < j->req.n_inputs) {
        j->emb = calloc((size_t)j->req.n_inputs * (size_t)n, sizeof *j->emb);
        j->emb_dim = n;
    }
    if (j->emb && n == j->emb_dim && index >= 0 && index < j->req.n_inputs)
        memcpy(j->emb + (size_t)index * (size_t)n, v, sizeof *v * (size_t)n);
    pthread_mutex_unlock(&j->mu);
}

static cJSON *floats(const float *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* RFC 4648 base64 of the vector's bytes (little-endian float32, as the machines prima runs on
 * store them). */
static cJSON *base64(const float *v, int n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)v;
    size_t len = sizeof *v * (size_t)n, o = 0;
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i += 3) {
        unsigned b = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0) |
                     (i + 2 < len ? p[i + 2] : 0);
        out[o++] = abc[b >> 18 & 63];
        out[o++] = abc[b >> 12 & 63];
        out[o++] = i + 1 < len ? abc[b >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? abc[b & 63] : '=';
    }
    out[o] = '\0';
    cJSON *s = cJSON_CreateString(out);
    free(out);
    return s;
}

cJSON *srv_embed_answer(srv_job *j)
{
    const srv_request *q = &j->req;
    const srv_result *r = &j->res;
    cJSON *o = cJSON_CreateObject();
    const char *model = q->model ? q->model : j->model_id;
    if (q->api == SRV_API_OLLAMA) {
        cJSON_AddStringToObject(o, "model", model);
        cJSON *all = cJSON_AddArrayToObject(o, "embeddings");
        for (int i = 0; j->emb && i < q->n_inputs; i++)
            cJSON_AddItemToArray(all, floats(j->emb + (size_t)i * (size_t)j->emb_dim, j->emb_dim));
        cJSON_AddNumberToObject(o, "total_duration", round((srv_now() - j->t_start) * 1e9));
        cJSON_AddNumberToObject(o, "load_duration", 0);
        cJSON_AddNumberToObject(o, "prompt_eval_count", r->prompt_tokens);
        return o;
    }
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; j->emb && i < q->n_inputs; i++) {
        const float *v = j->emb + (size_t)i * (size_t)j->emb_dim;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "object", "embedding");
        cJSON_AddNumberToObject(e, "index", i);
        cJSON_AddItemToObject(e, "embedding", q->base64 ? base64(v, j->emb_dim)
                                                        : floats(v, j->emb_dim));
        cJSON_AddItemToArray(data, e);
    }
    cJSON_AddStringToObject(o, "model", model);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->prompt_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", r->prompt_tokens);
    return o;
}
