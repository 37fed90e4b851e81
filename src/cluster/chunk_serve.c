/* chunk_serve.c — serving stored chunks to another worker (chunk_serve.h). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/chunk_serve.h"

typedef struct job {
    conn c;
    char path[4200];
    uint64_t file_size;
    uint32_t chunk_bytes, n_chunks;
    void (*done)(void *ctx);
    void *ctx;
} job;

static void *serve_main(void *arg)
{
    job *j = arg;
    char err[512];
    frame f;
    msg_want *m = malloc(sizeof *m);
    uint8_t *buf = malloc(j->chunk_bytes);
    int fd = open(j->path, O_RDONLY | O_CLOEXEC);
    if (m && buf && fd >= 0 && conn_recv(&j->c, &f, PROTO_DEAD_MS, err, sizeof err) == 0 &&
        proto_decode_want(&f, j->n_chunks, m, err, sizeof err) == 0) {
        for (uint32_t r = 0; r < m->n; r++)
            for (uint32_t c = m->first[r]; c < m->first[r] + m->count[r]; c++) {
                uint64_t off = (uint64_t)c * j->chunk_bytes, left = j->file_size - off;
                size_t len = left < j->chunk_bytes ? (size_t)left : j->chunk_bytes;
                if (pread(fd, buf, len, (off_t)off) != (ssize_t)len ||
                    proto_send_chunk(&j->c, c, buf, len, err, sizeof err))
                    goto out;
            }
    }
out:
    if (fd >= 0)
        close(fd);
    free(buf);
    free(m);
    conn_close_gently(&j->c);
    j->done(j->ctx);
    free(j);
    return NULL;
}

int chunk_serve_start(conn *c, const char *path, const manifest *mf, void (*done)(void *ctx),
                      void *ctx, char *err, size_t errlen)
{
    job *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "out of memory");
        conn_close(c);
        return -1;
    }
    conn_move(&j->c, c);
    snprintf(j->path, sizeof j->path, "%s", path);
    j->file_size = mf->file_size;
    j->chunk_bytes = mf->chunk_bytes;
    j->n_chunks = mf->n_chunks;
    j->done = done;
    j->ctx = ctx;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &at, serve_main, j);
    pthread_attr_destroy(&at);
    if (rc) {
        snprintf(err, errlen, "cannot start a thread to serve chunks");
        conn_close(&j->c);
        free(j);
        return -1;
    }
    return 0;
}
