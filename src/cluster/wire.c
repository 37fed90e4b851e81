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
    b->seq = calloc((size_t)max_batch, sizeof(int32_t));
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

int hop_unpack(const hop_buffers *b, const msg_batch *m, int k, int n_ctx, int max_batch,
               float *hidden, int32_t *pos, char *err, size_t errlen)
{
    if (m->n > (uint32_t)max_batch || m->round >= (uint32_t)k) {
        snprintf(err, errlen, "batch %u of %u tokens for round %u (limits: %d tokens, %d rounds)",
                 m->serial, m->n, m->round, max_batch, k);
        return -1;
    }
    memcpy(pos, m->pos, sizeof(int32_t) * m->n);
    for (uint32_t t = 0; t < m->n; t++) {
        int32_t s;
        memcpy(&s, (const uint8_t *)m->seq + sizeof s * t, sizeof s);
        if (pos[t] < 0 || pos[t] >= n_ctx || s != 0) {
            snprintf(err, errlen, "batch %u: token %u at position %d of sequence %d (context %d, "
                     "one sequence)", m->serial, t, pos[t], s, n_ctx);
            return -1;
        }
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
             const int32_t *pos, char *err, size_t errlen)
{
    size_t n = (size_t)m->n * (size_t)b->n_embd;
    msg_batch out = *m;
    out.pos = pos;
    out.seq = b->seq;
    out.hidden = hidden;
    size_t bytes = sizeof(float) * n;
    if (m->wire == WIRE_F16) {
        for (size_t i = 0; i < n; i++)
            b->half[i] = fp32_to_fp16(hidden[i]);
        out.hidden = b->half;
        bytes = sizeof(uint16_t) * n;
    }
    return send_batch(c, type, &out, bytes, err, errlen);
}
