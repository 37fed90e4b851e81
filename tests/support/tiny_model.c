#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "support/tiny_model.h"

#define TINY_MAX_TENSORS 256

typedef struct tiny_tensor {
    char name[64];
    int ne0, ne1;       /* ne1 = 1 for vectors */
    float *data;
} tiny_tensor;

typedef struct tiny_layer {
    const float *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv, *q_norm, *k_norm;
    const float *ffn_norm, *gate, *up, *down;
} tiny_layer;

struct tiny_model {
    tiny_cfg c;
    bool bias, qk_norm, neox;
    float rope_base, rms_eps;
    tiny_tensor t[TINY_MAX_TENSORS];
    int n_t;
    const float *embd, *out_norm, *out, *rope_freqs;
    tiny_layer *L;
    uint64_t rng;
};

/* xorshift64 + Box-Muller: a fixed stream, independent of the library's code */
static double uniform(tiny_model *m)
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    return ((double)(m->rng >> 11) + 0.5) * 0x1.0p-53;
}

static double normal(tiny_model *m)
{
    double u = uniform(m), v = uniform(m);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static const float *add(tiny_model *m, const char *name, int ne0, int ne1, double mean, double sd)
{
    tiny_tensor *t = &m->t[m->n_t++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ne0 = ne0;
    t->ne1 = ne1;
    t->data = malloc(sizeof(float) * (size_t)ne0 * (size_t)ne1);
    for (int i = 0; i < ne0 * ne1; i++)
        t->data[i] = (float)(mean + sd * normal(m));
    return t->data;
}

static const float *add_layer(tiny_model *m, int il, const char *what, int ne0, int ne1,
                              double mean, double sd)
{
    char name[64];
    snprintf(name, sizeof name, "blk.%d.%s", il, what);
    return add(m, name, ne0, ne1, mean, sd);
}

tiny_model *tiny_model_create(const tiny_cfg *c)
{
    tiny_model *m = calloc(1, sizeof *m);
    m->c = *c;
    if (!m->c.n_rot)
        m->c.n_rot = c->head_dim;
    m->bias = !strcmp(c->arch, "qwen2");
    m->qk_norm = !strcmp(c->arch, "qwen3");
    m->neox = m->bias || m->qk_norm;
    m->rope_base = 10000.0f;
    m->rms_eps = 1e-5f;
    m->rng = c->seed * 2654435761u + 1;
    const int e = c->n_embd, q = c->n_head * c->head_dim, kv = c->n_head_kv * c->head_dim;
    m->embd = add(m, "token_embd.weight", e, c->n_vocab, 0.0, 1.0);
    if (c->rope == TINY_ROPE_FREQS_TENSOR) {
        tiny_tensor *t = &m->t[m->n_t++];
        snprintf(t->name, sizeof t->name, "rope_freqs.weight");
        t->ne0 = m->c.n_rot / 2;
        t->ne1 = 1;
        t->data = malloc(sizeof(float) * (size_t)t->ne0);
        for (int i = 0; i < t->ne0; i++)
            t->data[i] = 1.0f + 0.75f * (float)i;
        m->rope_freqs = t->data;
    }
    m->out_norm = add(m, "output_norm.weight", e, 1, 1.0, 0.05);
    m->out = c->tied ? m->embd : add(m, "output.weight", e, c->n_vocab, 0.0, 1.0 / sqrt(e));
    m->L = calloc((size_t)c->n_layer, sizeof *m->L);
    for (int il = 0; il < c->n_layer; il++) {
        tiny_layer *L = &m->L[il];
        L->attn_norm = add_layer(m, il, "attn_norm.weight", e, 1, 1.0, 0.05);
        L->wq = add_layer(m, il, "attn_q.weight", e, q, 0.0, 1.0 / sqrt(e));
        L->wk = add_layer(m, il, "attn_k.weight", e, kv, 0.0, 1.0 / sqrt(e));
        L->wv = add_layer(m, il, "attn_v.weight", e, kv, 0.0, 1.0 / sqrt(e));
        if (m->bias) {
            L->bq = add_layer(m, il, "attn_q.bias", q, 1, 0.0, 0.1);
            L->bk = add_layer(m, il, "attn_k.bias", kv, 1, 0.0, 0.1);
            L->bv = add_layer(m, il, "attn_v.bias", kv, 1, 0.0, 0.1);
        }
        if (m->qk_norm) {
            L->q_norm = add_layer(m, il, "attn_q_norm.weight", c->head_dim, 1, 1.0, 0.2);
            L->k_norm = add_layer(m, il, "attn_k_norm.weight", c->head_dim, 1, 1.0, 0.2);
        }
        L->wo = add_layer(m, il, "attn_output.weight", q, e, 0.0, 1.0 / sqrt(q));
        L->ffn_norm = add_layer(m, il, "ffn_norm.weight", e, 1, 1.0, 0.05);
        L->gate = add_layer(m, il, "ffn_gate.weight", e, c->n_ff, 0.0, 1.0 / sqrt(e));
        L->up = add_layer(m, il, "ffn_up.weight", e, c->n_ff, 0.0, 1.0 / sqrt(e));
        L->down = add_layer(m, il, "ffn_down.weight", c->n_ff, e, 0.0, 1.0 / sqrt(c->n_ff));
    }
    return m;
}

void tiny_model_free(tiny_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_t; i++)
        free(m->t[i].data);
    free(m->L);
    free(m);
}

static bool is(const char *a, const char *b)
{
    return a && !strcmp(a, b);
}

int tiny_model_write(const tiny_model *m, const char *path, const tiny_fault *fault, char *err,
                     size_t errlen)
{
    const tiny_cfg *c = &m->c;
    const tiny_fault none = {0}, *f = fault ? fault : &none;
    gguf_writer *w = gguf_writer_create(path, 32, err, errlen);
    if (!w)
        return -1;
    char key[128];
    /* an omitted key is written under a name nobody reads */
#define KEY(suffix)                                                                            \
    (snprintf(key, sizeof key, "%s.%s", is(f->omit_key, suffix) ? "omitted" : c->arch, suffix), \
     key)
    gguf_writer_set_str(w, "general.architecture", f->arch ? f->arch : c->arch);
    gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)c->n_layer);
    gguf_writer_set_u32(w, KEY("context_length"), 256);
    gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)c->n_embd);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)c->n_ff);
    gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv);
    gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
    gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)m->c.n_rot);
    gguf_writer_set_f32(w, KEY("rope.freq_base"), m->rope_base);
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), m->rms_eps);
    if (c->rope == TINY_ROPE_LINEAR) {
        gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear");
        gguf_writer_set_f32(w, KEY("rope.scaling.factor"), 4.0f);
    } else if (c->rope == TINY_ROPE_LLAMA3_KEYS) {
        gguf_writer_set_str(w, KEY("rope.scaling.type"), "llama3");
        gguf_writer_set_f32(w, KEY("rope.scaling.factor"), 8.0f);
        gguf_writer_set_f32(w, KEY("rope.scaling.low_freq_factor"), 1.0f);
        gguf_writer_set_f32(w, KEY("rope.scaling.high_freq_factor"), 4.0f);
        gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), 64);
    }
#undef KEY
    for (int i = 0; i < m->n_t; i++) {
        const tiny_tensor *t = &m->t[i];
        if (is(f->omit_tensor, t->name))
            continue;
        uint64_t ne[2] = {(uint64_t)t->ne0, (uint64_t)t->ne1};
        if (is(f->transpose_tensor, t->name)) {
            ne[0] = (uint64_t)t->ne1;
            ne[1] = (uint64_t)t->ne0;
        }
        enum dtype type = is(f->retype_tensor, t->name) ? (enum dtype)f->retype : DT_F32;
        gguf_writer_add_tensor(w, t->name, type, ne[1] > 1 ? 2 : 1, ne);
    }
    gguf_writer_begin_data(w);
    for (int i = 0; i < m->n_t; i++) {
        const tiny_tensor *t = &m->t[i];
        if (is(f->omit_tensor, t->name))
            continue;
        if (is(f->retype_tensor, t->name)) {
            size_t bytes = dtype_row_bytes((enum dtype)f->retype, (uint64_t)t->ne0) * (size_t)t->ne1;
            void *zero = calloc(1, bytes ? bytes : 1);
            gguf_writer_write(w, zero, bytes);
            free(zero);
        } else {
            gguf_writer_write(w, t->data, sizeof(float) * (size_t)t->ne0 * (size_t)t->ne1);
        }
    }
    return gguf_writer_finish(w, err, errlen);
}

/* ---- the reference forward pass ---- */

static void rmsnorm(double *out, const double *x, const float *w, int n, double eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * s * w[i];
}

/* y = W x for a GGUF matrix W with rows of n_in (ne0) elements */
static void matvec(double *y, const float *w, const double *x, int n_in, int n_out)
{
    for (int o = 0; o < n_out; o++) {
        double s = 0.0;
        for (int i = 0; i < n_in; i++)
            s += (double)w[(size_t)o * (size_t)n_in + (size_t)i] * x[i];
        y[o] = s;
    }
}

/* The angle of pair i at position p, with every scaling form written out directly. */
static double rope_angle(const tiny_model *m, int p, int i)
{
    const int n_rot = m->c.n_rot;
    double freq = pow(m->rope_base, -2.0 * i / n_rot);
    switch (m->c.rope) {
    case TINY_ROPE_FREQS_TENSOR:
        freq /= m->rope_freqs[i];
        break;
    case TINY_ROPE_LINEAR:
        freq /= 4.0;
        break;
    case TINY_ROPE_LLAMA3_KEYS: {
        /* Llama 3.1: keep high frequencies, divide low ones by the factor, blend between */
        const double factor = 8.0, low = 1.0, high = 4.0, orig = 64.0;
        double wavelen = 2.0 * M_PI / freq;
        if (wavelen > orig / low) {
            freq /= factor;
        } else if (wavelen >= orig / high) {
            double smooth = (orig / wavelen - low) / (high - low);
            freq = (1.0 - smooth) * freq / factor + smooth * freq;
        }
        break;
    }
    case TINY_ROPE_PLAIN:
        break;
    }
    return p * freq;
}

static void rope(const tiny_model *m, double *head, int p)
{
    const int half = m->c.n_rot / 2;
    for (int i = 0; i < half; i++) {
        int a = m->neox ? i : 2 * i, b = m->neox ? i + half : 2 * i + 1;
        double th = rope_angle(m, p, i), x0 = head[a], x1 = head[b];
        head[a] = x0 * cos(th) - x1 * sin(th);
        head[b] = x0 * sin(th) + x1 * cos(th);
    }
}

void tiny_model_forward(const tiny_model *m, const int32_t *tokens, int n, float *logits)
{
    const tiny_cfg *c = &m->c;
    const int e = c->n_embd, hd = c->head_dim, q_dim = c->n_head * hd, kv_dim = c->n_head_kv * hd;
    const int group = c->n_head / c->n_head_kv;
    double *x = calloc((size_t)n * (size_t)e, sizeof(double));
    double *h = malloc(sizeof(double) * (size_t)e);
    double *q = malloc(sizeof(double) * (size_t)n * (size_t)q_dim);
    double *k = malloc(sizeof(double) * (size_t)n * (size_t)kv_dim);
    double *v = malloc(sizeof(double) * (size_t)n * (size_t)kv_dim);
    double *att = malloc(sizeof(double) * (size_t)q_dim);
    double *o = malloc(sizeof(double) * (size_t)e);
    double *g = malloc(sizeof(double) * (size_t)c->n_ff), *u = malloc(sizeof(double) * (size_t)c->n_ff);
    double *sc = malloc(sizeof(double) * (size_t)n);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < e; i++)
            x[(size_t)t * e + i] = m->embd[(size_t)tokens[t] * (size_t)e + (size_t)i];

    for (int il = 0; il < c->n_layer; il++) {
        const tiny_layer *L = &m->L[il];
        /* every position's q, k, v first (causality comes from the score range) */
        for (int t = 0; t < n; t++) {
            rmsnorm(h, x + (size_t)t * e, L->attn_norm, e, m->rms_eps);
            double *qt = q + (size_t)t * q_dim, *kt = k + (size_t)t * kv_dim, *vt = v + (size_t)t * kv_dim;
            matvec(qt, L->wq, h, e, q_dim);
            matvec(kt, L->wk, h, e, kv_dim);
            matvec(vt, L->wv, h, e, kv_dim);
            for (int i = 0; m->bias && i < q_dim; i++)
                qt[i] += L->bq[i];
            for (int i = 0; m->bias && i < kv_dim; i++) {
                kt[i] += L->bk[i];
                vt[i] += L->bv[i];
            }
            for (int hh = 0; hh < c->n_head; hh++) {
                if (m->qk_norm)
                    rmsnorm(qt + hh * hd, qt + hh * hd, L->q_norm, hd, m->rms_eps);
                rope(m, qt + hh * hd, t);
            }
            for (int hh = 0; hh < c->n_head_kv; hh++) {
                if (m->qk_norm)
                    rmsnorm(kt + hh * hd, kt + hh * hd, L->k_norm, hd, m->rms_eps);
                rope(m, kt + hh * hd, t);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int hh = 0; hh < c->n_head; hh++) {
                const double *qh = q + (size_t)t * q_dim + hh * hd;
                int kvh = hh / group;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    const double *kj = k + (size_t)j * kv_dim + kvh * hd;
                    double s = 0.0;
                    for (int i = 0; i < hd; i++)
                        s += qh[i] * kj[i];
                    sc[j] = s / sqrt(hd);
                    if (sc[j] > mx)
                        mx = sc[j];
                }
                for (int j = 0; j <= t; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double a = 0.0;
                    for (int j = 0; j <= t; j++)
                        a += sc[j] * v[(size_t)j * kv_dim + kvh * hd + i];
                    att[hh * hd + i] = a / sum;
                }
            }
            double *xt = x + (size_t)t * e;
            matvec(o, L->wo, att, q_dim, e);
            for (int i = 0; i < e; i++)
                xt[i] += o[i];
            rmsnorm(h, xt, L->ffn_norm, e, m->rms_eps);
            matvec(g, L->gate, h, e, c->n_ff);
            matvec(u, L->up, h, e, c->n_ff);
            for (int i = 0; i < c->n_ff; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            matvec(o, L->down, g, c->n_ff, e);
            for (int i = 0; i < e; i++)
                xt[i] += o[i];
        }
    }
    double *row = malloc(sizeof(double) * (size_t)c->n_vocab);
    for (int t = 0; t < n; t++) {
        rmsnorm(h, x + (size_t)t * e, m->out_norm, e, m->rms_eps);
        matvec(row, m->out, h, e, c->n_vocab);
        for (int i = 0; i < c->n_vocab; i++)
            logits[(size_t)t * (size_t)c->n_vocab + (size_t)i] = (float)row[i];
    }
    free(row);
    free(x);
    free(h);
    free(q);
    free(k);
    free(v);
    free(att);
    free(o);
    free(g);
    free(u);
    free(sc);
}
