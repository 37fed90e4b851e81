/* attention.c — grouped-query attention over the KV cache in one pass (flash-attention style).
 *
 * Keys are visited in chunks: the chunk's scores are computed, the running maximum is raised to
 * the chunk's maximum (rescaling the partial output once per chunk, not once per key), and the
 * chunk's values are accumulated with weights exp(score - max). The chunking depends only on the
 * key index, so every output is computed the same way whichever thread computes it.
 *
 * The query heads that share a KV head are served together by every primitive (attention.h):
 * the cache is streamed from memory once per group, not once per query head, and each F16 row is
 * converted once for the group. Each KV head's rows are contiguous (kern.h), so a group streams
 * one sequential region, which the hardware prefetchers follow; rows of all heads interleaved
 * (a head's part a few cache lines, a whole row apart) decoded at 4k positions 1.6-1.8x slower
 * per byte.
 *
 * Cache types (kern_kv_type_ok): F16 rows are read as they are. A Q8_0 or Q4_0 key cache meets
 * the query quantized to Q8_0 per head, through the types' integer dot products (as llama.cpp
 * computes with such a cache); a quantized value cache is dequantized V_TILE rows at a time and
 * accumulated in F32. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/kern_impl.h"

#define KEY_CHUNK 64
#define MAX_GROUP ATTN_MAX_GROUP /* query heads processed together; bounds the per-thread stack */
#define V_TILE 16                /* rows of a quantized value cache dequantized at a time */

/* The primitives for the active kernel path. */
static const attn_vec_ops *attn_vec_ops_active(void)
{
#if KERN_X86
    if (kern_active_path() == KERN_AVX512)
        return &attn_vec_ops_avx512;
    if (kern_avx2_active())
        return &attn_vec_ops_avx2;
#endif
#if defined(__aarch64__)
    if (kern_active_path() == KERN_NEON)
        return &attn_vec_ops_neon;
#endif
    return &attn_vec_ops_scalar;
}

bool kern_kv_type_ok(enum dtype t, int head_dim)
{
    if (t == DT_F16)
        return true;
    return (t == DT_Q8_0 || t == DT_Q4_0) && head_dim % 32 == 0;
}

/* One cache (K or V): its type and the bytes of one head's row (a row of the head's region). */
struct attn_cache {
    const uint8_t *base;
    enum dtype type;
    const kern_type *kt;
    size_t row_bytes;
};

struct attn_job {
    float *out;
    const float *q;
    const int32_t *pos, *seq;
    size_t seq_rows;
    int window;
    const float *sinks;
    struct attn_cache k, v;
    const kern_type *q_type; /* a quantized key cache: the query's format (Q8_0) */
    size_t q_bytes;          /* one head of it */
    int n_head, n_head_kv, head_dim, group, piece, pieces_per_group;
    int n_units;
    float scale;
    const attn_vec_ops *ops;
    _Atomic int next_unit;
};

/* s[h * KEY_CHUNK + j] for the nk keys of rows [row, row + nk): the query is q (F16 keys) or
 * qa (quantized keys). */
static void scores_rows(const struct attn_job *J, const uint8_t *kbase, int row, int nk, int nh,
                        const float *q, const uint8_t *qa, float *s)
{
    const uint8_t *k = kbase + (size_t)row * J->k.row_bytes;
    const int hd = J->head_dim;
    if (J->k.type == DT_F16) {
        J->ops->scores(hd, nh, q, nk, (const uint16_t *)k, J->k.row_bytes / sizeof(uint16_t),
                       J->scale, s, KEY_CHUNK);
        return;
    }
    for (int j = 0; j < nk; j++)
        for (int h = 0; h < nh; h++) {
            float x;
            J->k.kt->vec_dot(hd, &x, k + (size_t)j * J->k.row_bytes, qa + (size_t)h * J->q_bytes);
            s[(size_t)h * KEY_CHUNK + j] = x * J->scale;
        }
}

/* acc += the nk value rows [row, row + nk) weighted by p (p[h * KEY_CHUNK + j]). */
static void accumulate_rows(const struct attn_job *J, const uint8_t *vbase, int row, int nk,
                            int nh, const float *p, float *acc)
{
    const uint8_t *v = vbase + (size_t)row * J->v.row_bytes;
    const int hd = J->head_dim;
    if (J->v.type == DT_F16) {
        J->ops->accumulate_f16(hd, nh, acc, p, KEY_CHUNK, nk, (const uint16_t *)v,
                               J->v.row_bytes / sizeof(uint16_t));
        return;
    }
    float tile[V_TILE * KERN_MAX_HEAD_DIM];
    for (int r0 = 0; r0 < nk; r0 += V_TILE) {
        const int rows = nk - r0 < V_TILE ? nk - r0 : V_TILE;
        for (int r = 0; r < rows; r++)
            J->v.kt->to_float(v + (size_t)(r0 + r) * J->v.row_bytes, tile + (size_t)r * hd, hd);
        J->ops->accumulate_f32(hd, nh, acc, p + r0, KEY_CHUNK, rows, tile, (size_t)hd);
    }
}

/* Heads [h0, h0 + nh) of token t, all in KV head kvh. */
static void attend(const struct attn_job *J, int t, int kvh, int h0, int nh)
{
    const int hd = J->head_dim, n_embd = J->n_head * hd;
    /* the region of (sequence, KV head): seq_rows rows of one head */
    const size_t region = ((J->seq ? (size_t)J->seq[t] : 0) * (size_t)J->n_head_kv +
                           (size_t)kvh) * J->seq_rows;
    const uint8_t *kbase = J->k.base + region * J->k.row_bytes;
    const uint8_t *vbase = J->v.base + region * J->v.row_bytes;
    /* The query meets F16 keys at F16 precision, as the reference implementation's product
     * with its F16 cache rounds it: Q8_0 models then give its logits bit for bit, and a
     * mixture of experts whose router nearly ties follows its choices (the fixtures' gpt-oss
     * flipped an expert at a gap of 0.0022 with an F32 query). Quantized keys meet it in
     * their dot products' activation format, as there. */
    float q[MAX_GROUP * KERN_MAX_HEAD_DIM];
    uint8_t qa[MAX_GROUP * KERN_MAX_HEAD_DIM / 32 * 34];
    const float *q32 = J->q + (size_t)t * n_embd + (size_t)h0 * hd;
    if (J->k.type == DT_F16) {
        for (int i = 0; i < nh * hd; i++)
            q[i] = fp16_to_fp32(fp32_to_fp16(q32[i]));
    } else {
        for (int h = 0; h < nh; h++)
            J->q_type->quantize(q32 + (size_t)h * hd, qa + (size_t)h * J->q_bytes, hd);
    }
    float acc[MAX_GROUP * KERN_MAX_HEAD_DIM];
    float m[MAX_GROUP], l[MAX_GROUP], s[MAX_GROUP * KEY_CHUNK];
    memset(acc, 0, sizeof(float) * (size_t)(nh * hd));
    /* a sink is a key with no value: it starts the running maximum and sum */
    for (int h = 0; h < nh; h++) {
        m[h] = J->sinks ? J->sinks[h0 + h] : -INFINITY;
        l[h] = J->sinks ? 1.0f : 0.0f;
    }
    /* keys [lo, pos]: chunks start at lo whatever the ring's size, so a position's result is
     * the same on every device; a chunk that wraps around a ring is read in two pieces */
    const int p = J->pos[t];
    const int lo = J->window > 0 && p - J->window + 1 > 0 ? p - J->window + 1 : 0;
    for (int j0 = lo; j0 <= p; j0 += KEY_CHUNK) {
        int nk = p + 1 - j0 < KEY_CHUNK ? p + 1 - j0 : KEY_CHUNK;
        int piece_at[2], piece_n[2], n_pieces = 0;
        for (int j = j0; j < j0 + nk;) {
            int row = (int)((size_t)j % J->seq_rows);
            int take = j0 + nk - j;
            if ((size_t)row + (size_t)take > J->seq_rows)
                take = (int)(J->seq_rows - (size_t)row);
            piece_at[n_pieces] = row;
            piece_n[n_pieces++] = take;
            j += take;
        }
        for (int i = 0, off = 0; i < n_pieces; off += piece_n[i++])
            scores_rows(J, kbase, piece_at[i], piece_n[i], nh, q, qa, s + off);
        for (int h = 0; h < nh; h++) {
            float *sh = s + (size_t)h * KEY_CHUNK;
            float cmax = m[h];
            for (int j = 0; j < nk; j++)
                cmax = sh[j] > cmax ? sh[j] : cmax;
            if (cmax > m[h]) {
                float corr = expf(m[h] - cmax);
                for (int d = 0; d < hd; d++)
                    acc[(size_t)h * hd + d] *= corr;
                l[h] *= corr;
                m[h] = cmax;
            }
            l[h] += J->ops->exp_sum(nk, sh, m[h]);
        }
        for (int i = 0, off = 0; i < n_pieces; off += piece_n[i++])
            accumulate_rows(J, vbase, piece_at[i], piece_n[i], nh, s + off, acc);
    }
    float *o = J->out + (size_t)t * n_embd + (size_t)h0 * hd;
    for (int h = 0; h < nh; h++) {
        float inv = 1.0f / l[h];
        for (int d = 0; d < hd; d++)
            o[(size_t)h * hd + d] = acc[(size_t)h * hd + d] * inv;
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

static struct attn_cache cache_of(const void *base, enum dtype t, int head_dim)
{
    struct attn_cache c = {base, t, kern_type_require(t), 0};
    c.row_bytes = (size_t)dtype_row_bytes(t, (uint64_t)head_dim);
    return c;
}

void kern_attention(kern_ctx *c, float *out, const float *q, int n_tokens, const int32_t *pos,
                    const int32_t *seq, size_t seq_rows, int window, const float *sinks,
                    const kern_kv *kv, int n_head, int n_head_kv, int head_dim, float scale)
{
    if (head_dim > KERN_MAX_HEAD_DIM || n_head_kv < 1 || n_head % n_head_kv || seq_rows < 1 ||
        !kern_kv_type_ok(kv->k_type, head_dim) || !kern_kv_type_ok(kv->v_type, head_dim)) {
        fprintf(stderr, "prima: attention: %d heads over %d KV heads of %d dims (at most %d), "
                "cache %s/%s\n", n_head, n_head_kv, head_dim, KERN_MAX_HEAD_DIM,
                dtype_get(kv->k_type)->name, dtype_get(kv->v_type)->name);
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
        .sinks = sinks,
        .k = cache_of(kv->k, kv->k_type, head_dim),
        .v = cache_of(kv->v, kv->v_type, head_dim),
        .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim, .group = group,
        .piece = piece, .pieces_per_group = (group + piece - 1) / piece, .scale = scale,
        .ops = attn_vec_ops_active(),
    };
    if (kv->k_type != DT_F16) {
        J.q_type = kern_type_require(J.k.kt->act_type);
        J.q_bytes = (size_t)dtype_row_bytes(J.k.kt->act_type, (uint64_t)head_dim);
    }
    J.n_units = n_tokens * n_head_kv * J.pieces_per_group;
    atomic_init(&J.next_unit, 0);
    kern_parallel(c, attn_worker, &J);
}
