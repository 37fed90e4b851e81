/* wire.c — one hop's payload (wire.h): checking a received batch against the plan's limits and
 * converting its rows between F32 and the wire type. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/wire.h"
#include "kernels/types.h"

int hop_buffers_init(hop_buffers *b, int n_embd, int max_batch, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    b->n_embd = n_embd;
    b->max_batch = max_batch;
    size_t rows = (size_t)n_embd * (size_t)max_batch;
    b->hidden = malloc(sizeof(float) * rows);
    b->pos = malloc(sizeof(int32_t) * (size_t)max_batch);
    b->seq = malloc(sizeof(int32_t) * (size_t)max_batch);
    b->half = malloc(sizeof(uint16_t) * rows);
    if (!b->hidden || !b->pos || !b->seq || !b->half) {
        hop_buffers_free(b);
        snprintf(err, errlen, "out of memory for batches of %d x %d", max_batch, n_embd);
        return -1;
    }
    return 0;
}

void hop_buffers_free(hop_buffers *b)
{
    free(b->hidden);
    free(b->pos);
    free(b->seq);
    free(b->half);
    memset(b, 0, sizeof *b);
}

int hop_unpack(const hop_buffers *b, const msg_batch *m, const hop_limits *lim, float *hidden,
               int32_t *pos, int32_t *seq, char *err, size_t errlen)
{
    if (m->n > (uint32_t)lim->max_batch || m->round >= (uint32_t)lim->k) {
        snprintf(err, errlen, "batch %u of %u tokens for round %u (limits: %d tokens, %d rounds)",
                 m->serial, m->n, m->round, lim->max_batch, lim->k);
        return -1;
    }
    memcpy(pos, m->pos, sizeof(int32_t) * m->n);
    memcpy(seq, m->seq, sizeof(int32_t) * m->n);
    for (uint32_t t = 0; t < m->n; t++)
        if (pos[t] < 0 || pos[t] >= lim->n_ctx || seq[t] < 0 || seq[t] >= lim->n_seq) {
            snprintf(err, errlen, "batch %u: token %u at position %d of sequence %d (context %d, "
                     "sequences 0..%d)", m->serial, t, pos[t], seq[t], lim->n_ctx,
                     lim->n_seq - 1);
            return -1;
        }
    size_t n = (size_t)m->n * (size_t)b->n_embd;
    if (m->wire == WIRE_F32) {
        memcpy(hidden, m->hidden, sizeof(float) * n);
    } else {
        const uint8_t *h = m->hidden;
        for (size_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, h + 2 * i, sizeof v);
            hidden[i] = fp16_to_fp32(v);
        }
    }
    return 0;
}

int hop_send(hop_buffers *b, conn *c, int type, const msg_batch *m, const float *hidden,
             const int32_t *pos, const int32_t *seq, char *err, size_t errlen)
{
    size_t n = (size_t)m->n * (size_t)b->n_embd;
    msg_batch out = *m;
    out.pos = pos;
    out.seq = seq;
    out.hidden = hidden;
    size_t bytes = sizeof(float) * n;
    if (m->wire == WIRE_F16) {
        for (size_t i = 0; i < n; i++)
            b->half[i] = fp32_to_fp16(hidden[i]);
        out.hidden = b->half;
        bytes = sizeof(uint16_t) * n;
    }
    return proto_send_batch(c, type, &out, bytes, err, errlen);
}
