/* libFuzzer target for the ring protocol: any byte stream arriving on a link must be cut into
 * frames, checked and decoded without crashing, reading out of bounds or allocating more than a
 * frame's bound; every message decoder (and the batch checks) runs on whatever frame comes. */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/manifest.h"
#include "cluster/proto.h"
#include "cluster/wire.h"

enum { N_EMBD = 8, MAX_BATCH = 16, N_CTX = 32, FUZZ_CHUNKS = 40 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int sv[2];
    if (size > 200000 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        return 0;
    int one = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof one);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &one, sizeof one);
    if (write(sv[0], data, size) != (ssize_t)size) {
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    close(sv[0]);   /* the peer is gone after its bytes: every read ends */
    conn c;
    conn_init(&c, sv[1], "fuzz peer");
    /* the first byte decides whether data frames are allowed yet (before / after a plan) */
    if (size && data[0] & 1)
        c.max_data = proto_data_bound(N_EMBD, MAX_BATCH, WIRE_F32);
    hop_buffers hb;
    char err[512];
    if (hop_buffers_init(&hb, N_EMBD, MAX_BATCH, err, sizeof err)) {
        conn_close(&c);
        return 0;
    }
    float hidden[N_EMBD * MAX_BATCH];
    int32_t pos[MAX_BATCH], seq[MAX_BATCH];
    const hop_limits lim = {.k = 3, .n_ctx = N_CTX, .n_seq = 4, .max_batch = MAX_BATCH};
    frame f;
    while (conn_recv(&c, &f, 0, err, sizeof err) == 0) {
        if (f.len > PROTO_SMALL_MAX && f.type != RM_BATCH && f.type != RM_RESULT &&
            !(f.type == RM_PROBE && f.len <= PROTO_PROBE_MAX) &&
            !(f.type == RM_MANIFEST && f.len <= MANIFEST_MAX) &&
            !(f.type == RM_HAVE && f.len <= MANIFEST_MAX / 256) &&
            !(f.type == RM_CHUNK && f.len <= 4 + MANIFEST_CHUNK))
            __builtin_trap();   /* the bound was not enforced */
        union {
            msg_hello h;
            msg_welcome w;
            msg_plan p;
            msg_batch b;
            msg_kvop k;
            msg_stats s;
            msg_error e;
            msg_decode dec;
            msg_token tok;
            msg_want want;
            msg_from from;
            uint8_t have[FUZZ_CHUNKS];
            uint32_t steps;
            char note[PROTO_NOTE_MAX];
        } m;
        switch (f.type) {
        case RM_HELLO:
            proto_decode_hello(&f, &m.h, err, sizeof err);
            break;
        case RM_WELCOME:
            proto_decode_welcome(&f, &m.w, err, sizeof err);
            break;
        case RM_PLAN:
            if (proto_decode_plan(&f, &m.p, err, sizeof err) == 0)
                for (uint32_t d = m.p.n_dev; d < PRIMA_MAX_DEVICES; d++)
                    if (m.p.gpu_layers[d])
                        __builtin_trap();   /* GPU layers only for the plan's devices */
            break;
        case RM_READY:
            if (proto_decode_ready(&f, m.note, sizeof m.note, err, sizeof err) == 0 &&
                strchr(m.note, '\n'))
                __builtin_trap();   /* a note stays one line */
            break;
        case RM_BATCH:
        case RM_RESULT:
            if (proto_decode_batch(&f, N_EMBD, &m.b, err, sizeof err) == 0)
                hop_unpack(&hb, &m.b, &lim, hidden, pos, seq, err, sizeof err);
            break;
        case RM_KVOP:
            proto_decode_kvop(&f, &m.k, err, sizeof err);
            break;
        case RM_STATS:
            proto_decode_stats(&f, &m.s, err, sizeof err);
            break;
        case RM_DECODE:
            if (proto_decode_decode(&f, &m.dec, err, sizeof err) == 0 &&
                (m.dec.n_window > (uint32_t)m.dec.sp.repeat_last_n ||
                 m.dec.sp.repeat_last_n > PROTO_DECODE_WINDOW || m.dec.max_steps < 1))
                __builtin_trap();   /* the window and steps are checked */
            break;
        case RM_TOKEN:
            proto_decode_token(&f, &m.tok, err, sizeof err);
            break;
        case RM_DONE:
            proto_decode_done(&f, &m.steps, err, sizeof err);
            break;
        case RM_FETCH:   /* a plan's body */
            proto_decode_plan(&f, &m.p, err, sizeof err);
            break;
        case RM_WANT:
            if (proto_decode_want(&f, FUZZ_CHUNKS, &m.want, err, sizeof err) == 0)
                for (uint32_t i = 0; i < m.want.n; i++)
                    if (!m.want.count[i] || m.want.first[i] + m.want.count[i] > FUZZ_CHUNKS)
                        __builtin_trap();   /* ranges inside the file */
            break;
        case RM_HAVE:
            if (proto_decode_have(&f, FUZZ_CHUNKS, m.have, err, sizeof err) == 0)
                for (int i = 0; i < FUZZ_CHUNKS; i++)
                    if (m.have[i] > 1)
                        __builtin_trap();   /* flags, one per chunk */
            break;
        case RM_FROM:
            if (proto_decode_from(&f, FUZZ_CHUNKS, &m.from, err, sizeof err) == 0 &&
                (m.from.want.n > PROTO_FROM_MAX || (m.from.want.n && !m.from.port) ||
                 strnlen(m.from.host, sizeof m.from.host) == sizeof m.from.host))
                __builtin_trap();   /* ranges need an address; the host is a C string */
            break;
        case RM_CHUNK: {
            uint32_t idx;
            const uint8_t *data;
            size_t len;
            if (proto_decode_chunk(&f, &idx, &data, &len, err, sizeof err) == 0 &&
                (data + len != f.body + f.len || len > MANIFEST_CHUNK))
                __builtin_trap();   /* the chunk lies inside its frame */
            break;
        }
        case RM_MANIFEST: {
            manifest *mf = manifest_parse(f.body, f.len, err, sizeof err);
            if (mf && (mf->len != f.len || (uint64_t)mf->n_chunks * mf->chunk_bytes < mf->file_size))
                __builtin_trap();   /* the chunks cover the file */
            manifest_free(mf);
            break;
        }
        case RM_ERROR:
            if (proto_decode_error(&f, &m.e, err, sizeof err) == 0 && strchr(m.e.text, '\n'))
                __builtin_trap();   /* a refusal must stay one line */
            break;
        default:
            break;
        }
    }
    if (!err[0] || strchr(err, '\n'))
        __builtin_trap();   /* every dropped link has a one-line reason */
    hop_buffers_free(&hb);
    conn_close(&c);
    return 0;
}
