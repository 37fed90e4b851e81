/* wire.h — one hop's payload: the activations of a batch, checked on arrival and converted to and
 * from the wire type.
 *
 * F32 on the wire is exact, so a ring computes bit for bit what one device computes. F16 halves
 * the bytes per hop but rounds the hidden states to 11 significant bits at every hop (and would
 * turn values beyond +-65504 into infinities): outputs then differ from a single device's by
 * about what an F16 KV cache costs, and greedy text can diverge at near-ties. */
#ifndef PRIMA_WIRE_H
#define PRIMA_WIRE_H

#include <stdint.h>

#include "cluster/proto.h"

typedef struct hop_buffers {
    int n_embd, max_batch;
    float *hidden;       /* max_batch x n_embd */
    int32_t *pos;        /* max_batch */
    int32_t *seq;        /* max_batch */
    uint16_t *half;      /* max_batch x n_embd, for F16 on the wire */
} hop_buffers;

int hop_buffers_init(hop_buffers *b, int n_embd, int max_batch, char *err, size_t errlen);
void hop_buffers_free(hop_buffers *b);

/* What a received batch must keep to: its round below k, 1 to max_batch rows, positions inside
 * the context, sequence ids below n_seq. */
typedef struct hop_limits {
    int k, n_ctx, n_seq, max_batch;
} hop_limits;

/* Check a received batch against lim and unpack its rows to F32 into hidden, its positions into
 * pos and its sequence ids into seq. */
int hop_unpack(const hop_buffers *b, const msg_batch *m, const hop_limits *lim, float *hidden,
               int32_t *pos, int32_t *seq, char *err, size_t errlen);
/* Send m->n rows of hidden at positions pos of sequences seq as m->wire, with header fields
 * from m. */
int hop_send(hop_buffers *b, conn *c, int type, const msg_batch *m, const float *hidden,
             const int32_t *pos, const int32_t *seq, char *err, size_t errlen);

#endif
