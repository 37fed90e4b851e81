#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "cluster/net.h"
#include "fake_ring.h"

#define HEAD_BYTES 8192

int fake_model_create(fake_model *fm, int n_layer, int n_embd, size_t layer_bytes, int id_seed)
{
    memset(fm, 0, sizeof *fm);
    fm->fd = -1;
    if (n_layer > 64)
        return -1;
    char tmp[] = "/tmp/prima-fake-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    /* The file lives only as long as its descriptor: nothing is left in /tmp, whatever ends the
     * test. Its path for the pager (and for forked workers, which inherit the descriptor) is
     * the descriptor's. */
    unlink(tmp);
    size_t size = HEAD_BYTES + layer_bytes * (size_t)n_layer;
    uint8_t *buf = malloc(size);
    for (size_t i = 0; i < size; i++)
        buf[i] = (uint8_t)(i * 131 + (size_t)id_seed);
    ssize_t wr = write(fd, buf, size);
    free(buf);
    void *map = wr == (ssize_t)size ? mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (map == MAP_FAILED) {
        close(fd);
        return -1;
    }
    fm->fd = fd;
    snprintf(fm->path, sizeof fm->path, "/proc/self/fd/%d", fd);
    ring_model *m = &fm->rm;
    for (int i = 0; i < PROTO_ID_BYTES; i++)
        m->identity[i] = (uint8_t)(id_seed * 7 + i);
    m->n_layer = n_layer;
    m->n_embd = n_embd;
    m->path = fm->path;
    m->map = map;
    m->map_size = size;
    for (int il = 0; il < n_layer; il++) {
        fm->begin[il] = HEAD_BYTES + layer_bytes * (size_t)il;
        fm->end[il] = fm->begin[il] + layer_bytes;
    }
    m->layer_begin = fm->begin;
    m->layer_end = fm->end;
    m->head_bytes = HEAD_BYTES;
    return 0;
}

void fake_model_destroy(fake_model *fm)
{
    munmap((void *)fm->rm.map, fm->rm.map_size);
    close(fm->fd);
}

typedef struct fake_layers {
    const fake_model *fm;
    bool *owns;
    int n_ctx, n_seq;
    float *kv;     /* [n_layer][n_seq][n_ctx]: one number per cached position */
    int *n_kv;     /* [n_layer][n_seq]: positions cached */
} fake_layers;

static size_t region(const fake_layers *f, int il, int seq)
{
    return (size_t)il * (size_t)f->n_seq + (size_t)seq;
}

static int fake_eval(void *ctx, float *hidden, int n, const int32_t *pos, const int32_t *seq,
                     int first, int last)
{
    fake_layers *f = ctx;
    const int n_embd = f->fm->rm.n_embd;
    for (int t = 0; t < n; t++)
        if (seq[t] < 0 || seq[t] >= f->n_seq)
            return -1;
    for (int il = first; il < last; il++) {
        if (!f->owns[il])
            return -1;
        /* Read the layer's "weights" so page faults and prefetching are real. */
        const uint8_t *wts = f->fm->rm.map + f->fm->begin[il];
        float wsum = 0;
        for (uint64_t o = 0; o < f->fm->end[il] - f->fm->begin[il]; o += 4096)
            wsum += wts[o];
        for (int t = 0; t < n; t++) {
            size_t r = region(f, il, seq[t]);
            float *kv = f->kv + r * (size_t)f->n_ctx;
            if (pos[t] < 0 || pos[t] >= f->n_ctx || pos[t] > f->n_kv[r])
                return -1;
            float *row = hidden + (size_t)t * (size_t)n_embd;
            float s = 0;
            for (int j = 0; j < n_embd; j++)
                s += row[j] * (float)(j + 1) / (float)n_embd;
            kv[pos[t]] = s;
            f->n_kv[r] = pos[t] + 1;
            float att = 0;
            for (int p = 0; p <= pos[t]; p++)
                att += kv[p] / (float)(p + 1);
            for (int j = 0; j < n_embd; j++)
                row[j] = tanhf(row[j] * (1.0f + 0.01f * (float)il) + 0.1f * att +
                               0.001f * (float)(j - il) + 1e-6f * wsum);
        }
    }
    return 0;
}

static int fake_kv_truncate(void *ctx, int seq, int p0)
{
    fake_layers *f = ctx;
    if (seq < 0 || seq >= f->n_seq || p0 < 0 || p0 > f->n_ctx)
        return -1;
    for (int il = 0; il < f->fm->rm.n_layer; il++)
        if (f->n_kv[region(f, il, seq)] > p0)
            f->n_kv[region(f, il, seq)] = p0;
    return 0;
}

static int fake_kv_shift(void *ctx, int seq, int p0, int p1, int delta)
{
    fake_layers *f = ctx;
    if (seq < 0 || seq >= f->n_seq || p0 + delta < 0 || p1 > f->n_ctx || delta > 0)
        return -1;
    for (int il = 0; il < f->fm->rm.n_layer; il++) {
        if (!f->owns[il])
            continue;
        float *kv = f->kv + region(f, il, seq) * (size_t)f->n_ctx;
        memmove(kv + p0 + delta, kv + p0, sizeof(float) * (size_t)(p1 - p0));
        f->n_kv[region(f, il, seq)] = p1 + delta;
    }
    return 0;
}

int fake_layers_open(const fake_model *fm, const bool *owns, int n_ctx, ring_layers *out)
{
    return fake_layers_open_seqs(fm, owns, n_ctx, 1, out);
}

int fake_layers_open_seqs(const fake_model *fm, const bool *owns, int n_ctx, int n_seq,
                          ring_layers *out)
{
    fake_layers *f = calloc(1, sizeof *f);
    int n_layer = fm->rm.n_layer;
    f->fm = fm;
    f->n_ctx = n_ctx;
    f->n_seq = n_seq;
    f->owns = calloc((size_t)n_layer, sizeof *f->owns);
    f->kv = calloc((size_t)n_layer * (size_t)n_seq * (size_t)n_ctx, sizeof *f->kv);
    f->n_kv = calloc((size_t)n_layer * (size_t)n_seq, sizeof *f->n_kv);
    for (int il = 0; il < n_layer; il++)
        f->owns[il] = owns ? owns[il] : true;
    *out = (ring_layers){.ctx = f, .eval = fake_eval, .kv_truncate = fake_kv_truncate,
                         .kv_shift = fake_kv_shift};
    return 0;
}

void fake_layers_close(ring_layers *l)
{
    fake_layers *f = l->ctx;
    free(f->owns);
    free(f->kv);
    free(f->n_kv);
    free(f);
}

static int backend_open(void *ctx, const bool *owns, const bool *on_gpu, int n_ctx, int n_seq,
                        int max_batch, int threads, const uint8_t kv_type[2], ring_layers *out,
                        char *note, size_t notelen, char *err, size_t errlen)
{
    snprintf(note, notelen, "%s", on_gpu ? "GPU: a fake model has none; running on the CPU" : "");
    return fake_layers_open_seqs(ctx, owns, n_ctx, n_seq, out);
}

static void backend_close(void *ctx, ring_layers *l)
{
    fake_layers_close(l);
}

void fake_backend_init(fake_model *fm)
{
    fm->backend = (ring_backend){&fm->rm, fm, backend_open, backend_close};
}

static void *worker_thread(void *arg)
{
    worker_run(arg);
    return NULL;
}

int fake_worker_start(fake_worker *fw, fake_model *fm, const ring_key *key)
{
    return fake_worker_start_admit(fw, fm, key, 0);
}

int fake_worker_start_admit(fake_worker *fw, fake_model *fm, const ring_key *key, int admit_ms)
{
    fake_backend_init(fm);
    return fake_worker_start_backend(fw, &fm->backend, key, admit_ms);
}

int fake_worker_start_backend(fake_worker *fw, const ring_backend *b, const ring_key *key,
                              int admit_ms)
{
    worker_opts o = {.host = "127.0.0.1", .listen_fd = -1, .threads = 1,
                     .method = PREFETCH_MADVISE, .key = key, .admit_ms = admit_ms,
                     .log = getenv("PRIMA_TEST_VERBOSE") ? stderr : NULL};
    char err[512];
    fw->w = worker_create(&o, b, err, sizeof err);
    if (!fw->w) {
        fprintf(stderr, "fake worker: %s\n", err);
        return -1;
    }
    fw->port = worker_port(fw->w);
    return pthread_create(&fw->thread, NULL, worker_thread, fw->w);
}

ring *fake_head_connect(const fake_model *fm, const ring_opts *o, ring_layers *layers, char *err,
                        size_t errlen)
{
    ring *r = ring_connect(o, &fm->rm, err, errlen);
    if (!r)
        return NULL;
    bool *owns = calloc((size_t)fm->rm.n_layer, sizeof *owns);
    plan_owned_layers(ring_get_plan(r), 0, owns);
    fake_layers_open_seqs(fm, owns, o->n_ctx, o->n_seq > 1 ? o->n_seq : 1, layers);
    free(owns);
    return r;
}

int fake_head_once(const fake_model *fm, const char *workers, const ring_key *key, char *err,
                   size_t errlen)
{
    int n_dev = 2;
    for (const char *p = workers; *p; p++)
        n_dev += *p == ',';
    int lw[PRIMA_MAX_DEVICES];
    for (int d = 0; d < n_dev && d < PRIMA_MAX_DEVICES; d++)
        lw[d] = 1;
    ring_opts o = {.workers = workers, .lw = lw, .n_lw = n_dev, .n_ctx = 16, .max_batch = 4,
                   .key = key};
    ring_layers head;
    ring *r = fake_head_connect(fm, &o, &head, err, errlen);
    if (!r)
        return -1;
    int rc = ring_start(r, &head, err, errlen);
    float *h = calloc((size_t)fm->rm.n_embd, sizeof *h);
    int32_t pos = 0;
    if (!h)
        rc = -1;
    else
        h[0] = 0.5f;
    if (rc == 0 && (rc = ring_eval(r, h, 1, &pos, NULL)) != 0)
        snprintf(err, errlen, "%s", ring_error(r));
    free(h);
    ring_close(r);
    fake_layers_close(&head);
    return rc;
}

int fake_worker_fork(fake_model *fm, int *port)
{
    char err[256];
    int lfd = net_listen("127.0.0.1", *port, port, err, sizeof err);
    if (lfd < 0) {
        fprintf(stderr, "fake worker: %s\n", err);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlive the test */
        for (int fd = 3; fd < 1024; fd++)
            if (fd != lfd && fd != fm->fd)
                close(fd);
        worker_opts o = {.listen_fd = lfd, .threads = 1, .method = PREFETCH_MADVISE,
                         .log = getenv("PRIMA_TEST_VERBOSE") ? stderr : NULL};
        fake_backend_init(fm);
        worker *wk = worker_create(&o, &fm->backend, err, sizeof err);
        if (!wk)
            _exit(3);
        worker_run(wk);
        _exit(0);
    }
    close(lfd);
    return pid;
}

void fake_worker_stop(fake_worker *fw)
{
    worker_stop(fw->w);
    pthread_join(fw->thread, NULL);
    worker_free(fw->w);
}

void fake_worker_list(const fake_worker *fw, int n, char *out, size_t cap)
{
    size_t off = 0;
    out[0] = 0;
    for (int i = 0; i < n && off < cap; i++)
        off += (size_t)snprintf(out + off, cap - off, "%s127.0.0.1:%d", i ? "," : "", fw[i].port);
}
