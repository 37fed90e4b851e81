/* attention.c — grouped-query attention over an F16 KV cache in one pass.
 *
 * Keys are visited in chunks: the chunk's scores are computed, the running maximum is raised to
 * the chunk's maximum (rescaling the partial output once per chunk, not once per key), and the
 * chunk's values are accumulated with weights exp(score - max). The chunking depends only on the
 * key index, so every output is computed the same way whichever thread computes it.
 *
 * The query heads that share a KV head are processed together so each chunk of K and V is read
 * from memory once for the whole group and then served from L1. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/kern_impl.h"

#define KEY_CHUNK 64
#define MAX_GROUP 8 /* query heads processed together; bounds the per-thread stack */

static void scores_scalar(int n, const float *q, int nk, const uint16_t *k, size_t stride,
                          float scale, float *s)
{
    for (int j = 0; j < nk; j++) {
        const uint16_t *kr = k + (size_t)j * stride;
        float sum = 0;
        for (int d = 0; d < n; d++)
            sum += q[d] * fp16_to_fp32(kr[d]);
        s[j] = sum * scale;
    }
}

static void accumulate_scalar(int n, float *acc, const float *p, int nk, const uint16_t *v,
                              size_t stride)
{
    for (int j = 0; j < nk; j++) {
        const uint16_t *vr = v + (size_t)j * stride;
        for (int d = 0; d < n; d++)
            acc[d] += p[j] * fp16_to_fp32(vr[d]);
    }
}

static const attn_vec_ops scalar_ops = {scores_scalar, accumulate_scalar};

/* The primitives for the active kernel path. */
static const attn_vec_ops *attn_vec_ops_active(void)
{
#if KERN_X86
    if (kern_avx2_active())
        return &attn_vec_ops_avx2;
#endif
    return &scalar_ops;
}

struct attn_job {
    float *out;
    const float *q;
    const int32_t *pos, *seq;
    size_t seq_rows;
    int window;
    const uint16_t *k, *v;
    int n_head, n_head_kv, head_dim, group, piece, pieces_per_group;
    int n_units;
    float scale;
    const attn_vec_ops *ops;
    _Atomic int next_unit;
};

/* Heads [h0, h0 + nh) of token t, all in KV head kvh. */
static void attend(const struct attn_job *J, int t, int kvh, int h0, int nh)
{
    int hd = J->head_dim, n_embd = J->n_head * hd;
    size_t kv_stride = (size_t)J->n_head_kv * hd;
    size_t first_row = J->seq ? (size_t)J->seq[t] * J->seq_rows : 0;
    const uint16_t *kbase = J->k + first_row * kv_stride + (size_t)kvh * hd;
    const uint16_t *vbase = J->v + first_row * kv_stride + (size_t)kvh * hd;
    const float *q = J->q + (size_t)t * n_embd + (size_t)h0 * hd;
    float acc[MAX_GROUP][KERN_MAX_HEAD_DIM];
    float m[MAX_GROUP], l[MAX_GROUP], s[KEY_CHUNK];
    for (int h = 0; h < nh; h++) {
        memset(acc[h], 0, sizeof(float) * (size_t)hd);
        m[h] = -INFINITY;
        l[h] = 0;
    }
    /* keys [lo, pos]: chunks start at lo whatever the ring's size, so a position's result is
     * the same on every device; a chunk that wraps around a ring is read in two pieces */
    const int p = J->pos[t];
    const int lo = J->window > 0 && p - J->window + 1 > 0 ? p - J->window + 1 : 0;
    for (int j0 = lo; j0 <= p; j0 += KEY_CHUNK) {
        int nk = p + 1 - j0 < KEY_CHUNK ? p + 1 - j0 : KEY_CHUNK;
        int piece_at[2], piece_n[2], n_pieces = 0;
        for (int j = j0; j < j0 + nk;) {
            int row = J->seq_rows ? (int)((size_t)j % J->seq_rows) : j;
            int take = j0 + nk - j;
            if (J->seq_rows && (size_t)row + (size_t)take > J->seq_rows)
                take = (int)(J->seq_rows - (size_t)row);
            piece_at[n_pieces] = row;
            piece_n[n_pieces++] = take;
            j += take;
        }
        for (int h = 0; h < nh; h++) {
            for (int i = 0, off = 0; i < n_pieces; off += piece_n[i++])
                J->ops->scores(hd, q + (size_t)h * hd, piece_n[i],
                               kbase + (size_t)piece_at[i] * kv_stride, kv_stride, J->scale,
                               s + off);
            float cmax = m[h];
            for (int j = 0; j < nk; j++)
                cmax = s[j] > cmax ? s[j] : cmax;
            if (cmax > m[h]) {
                float corr = expf(m[h] - cmax);
                for (int d = 0; d < hd; d++)
                    acc[h][d] *= corr;
                l[h] *= corr;
                m[h] = cmax;
            }
            for (int j = 0; j < nk; j++) {
                s[j] = expf(s[j] - m[h]);
                l[h] += s[j];
            }
            for (int i = 0, off = 0; i < n_pieces; off += piece_n[i++])
                J->ops->accumulate(hd, acc[h], s + off, piece_n[i],
                                   vbase + (size_t)piece_at[i] * kv_stride, kv_stride);
        }
    }
    float *o = J->out + (size_t)t * n_embd + (size_t)h0 * hd;
    for (int h = 0; h < nh; h++) {
        float inv = 1.0f / l[h];
        for (int d = 0; d < hd; d++)
            o[(size_t)h * hd + d] = acc[h][d] * inv;
    }
}

static void attn_worker(void *arg, int ith, int nth)
{
    struct attn_job *J = arg;
    int per_token = J->n_head_kv * J->pieces_per_group;
    for (;;) {
        int u = atomic_fetch_add(&J->next_unit, 1);
        if (u >= J->n_units)
            return;
        /* Last token first: under the causal mask later tokens cost more, so handing them out
         * early balances the threads. */
        u = J->n_units - 1 - u;
        int t = u / per_token, r = u % per_token;
        int kvh = r / J->pieces_per_group, first = (r % J->pieces_per_group) * J->piece;
        int nh = J->group - first < J->piece ? J->group - first : J->piece;
        attend(J, t, kvh, kvh * J->group + first, nh);
    }
}

void kern_attention(kern_ctx *c, float *out, const float *q, int n_tokens, const int32_t *pos,
                    const int32_t *seq, size_t seq_rows, int window, const uint16_t *k_cache,
                    const uint16_t *v_cache, int n_head, int n_head_kv, int head_dim,
                    float scale)
{
    if (head_dim > KERN_MAX_HEAD_DIM || n_head_kv < 1 || n_head % n_head_kv) {
        fprintf(stderr, "prima: attention: %d heads over %d KV heads of %d dims (at most %d)\n",
                n_head, n_head_kv, head_dim, KERN_MAX_HEAD_DIM);
        abort();
    }
    int nth = kern_ctx_threads(c), group = n_head / n_head_kv;
    /* Split a head group into smaller pieces only when there are too few groups to keep every
     * thread busy; how heads are grouped never changes a result. */
    int piece = group < MAX_GROUP ? group : MAX_GROUP;
    while (piece > 1 && n_tokens * n_head_kv * ((group + piece - 1) / piece) < 2 * nth)
        piece = (piece + 1) / 2;
    struct attn_job J = {
        .out = out, .q = q, .pos = pos, .seq = seq, .seq_rows = seq_rows, .window = window,
        .k = k_cache, .v = v_cache,
        .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim, .group = group,
        .piece = piece, .pieces_per_group = (group + piece - 1) / piece, .scale = scale,
        .ops = attn_vec_ops_active(),
    };
    J.n_units = n_tokens * n_head_kv * J.pieces_per_group;
    atomic_init(&J.next_unit, 0);
    kern_parallel(c, attn_worker, &J);
}
