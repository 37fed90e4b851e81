/* store.c — models kept in part, chunk by chunk, by a worker without a copy of them (store.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/store.h"

#define HEX_ID (2 * MANIFEST_HASH)

static bool is_entry(const char *name);

struct store {
    char dir[4096];
    uint64_t max_bytes;
    int lock_fd;
    /* the model opened */
    manifest *mf;
    char hex[HEX_ID + 1];
    char path[4200];           /* its model.gguf */
    int fd, present_fd;
    uint8_t *present;          /* n_chunks flags */
    /* models whose chunks were hashed again since the store was opened (not again) */
    char (*checked)[HEX_ID + 1];
    int n_checked;
};

static bool was_checked(const store *s, const char *hex)
{
    for (int i = 0; i < s->n_checked; i++)
        if (!strcmp(s->checked[i], hex))
            return true;
    return false;
}

static void set_checked(store *s, const char *hex)
{
    if (was_checked(s, hex))
        return;
    void *n = realloc(s->checked, ((size_t)s->n_checked + 1) * sizeof *s->checked);
    if (!n)
        return;   /* checked again next time: only costs time */
    s->checked = n;
    snprintf(s->checked[s->n_checked++], HEX_ID + 1, "%s", hex);
}

static void join(char *out, size_t cap, const char *dir, const char *hex, const char *name)
{
    snprintf(out, cap, "%s/%s%s%s", dir, hex, name ? "/" : "", name ? name : "");
}

store *store_open(const char *dir, uint64_t max_bytes, char *err, size_t errlen)
{
    if (sodium_init() < 0) {
        snprintf(err, errlen, "libsodium failed to initialise");
        return NULL;
    }
    if (mkdir(dir, 0700) && errno != EEXIST) {
        snprintf(err, errlen, "store %s: cannot create it: %s", dir, strerror(errno));
        return NULL;
    }
    store *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->max_bytes = max_bytes;
    s->fd = s->present_fd = -1;
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/.lock", dir);
    s->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0) {
        snprintf(err, errlen, "store %s: %s", dir, strerror(errno));
        free(s);
        return NULL;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB)) {
        snprintf(err, errlen, "store %s is in use by another worker", dir);
        close(s->lock_fd);
        free(s);
        return NULL;
    }
    return s;
}

static void close_model(store *s)
{
    manifest_free(s->mf);
    s->mf = NULL;
    free(s->present);
    s->present = NULL;
    if (s->fd >= 0)
        close(s->fd);
    if (s->present_fd >= 0)
        close(s->present_fd);
    s->fd = s->present_fd = -1;
    s->hex[0] = 0;
}

void store_free(store *s)
{
    if (!s)
        return;
    close_model(s);
    close(s->lock_fd);
    free(s->checked);
    free(s);
}

const char *store_dir(const store *s)
{
    return s->dir;
}

const manifest *store_opened(const store *s)
{
    return s->mf;
}

const char *store_model_path(const store *s)
{
    return s->path;
}

bool store_has(const store *s, uint32_t i)
{
    return s->mf && i < s->mf->n_chunks && s->present[i];
}

static manifest *read_manifest(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    manifest *m = NULL;
    uint8_t *b = NULL;
    if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size <= MANIFEST_MAX &&
        (b = malloc((size_t)st.st_size)) && pread(fd, b, (size_t)st.st_size, 0) == st.st_size) {
        char err[256];
        m = manifest_parse(b, (size_t)st.st_size, err, sizeof err);
    }
    free(b);
    close(fd);
    return m;
}

/* Open model hex (its manifest already in s->mf): the sparse file, the record of chunks, and
 * the chunks recorded present hashed again. */
static int open_files(store *s, uint32_t *damaged, char *err, size_t errlen)
{
    char p[4200];
    join(s->path, sizeof s->path, s->dir, s->hex, "model.gguf");
    s->fd = open(s->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    join(p, sizeof p, s->dir, s->hex, "present");
    s->present_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    s->present = calloc(s->mf->n_chunks, 1);
    if (s->fd < 0 || s->present_fd < 0 || !s->present ||
        ftruncate(s->fd, (off_t)s->mf->file_size)) {
        snprintf(err, errlen, "store %s: model %.16s: %s", s->dir, s->hex,
                 s->present ? strerror(errno) : "out of memory");
        return -1;
    }
    ssize_t got = pread(s->present_fd, s->present, s->mf->n_chunks, 0);
    if (got < 0)
        got = 0;
    for (size_t i = (size_t)got; i < s->mf->n_chunks; i++)
        s->present[i] = 0;
    if (damaged)
        *damaged = 0;
    futimens(s->present_fd, NULL);   /* used now: the last to be evicted */
    if (was_checked(s, s->hex))
        return 0;
    uint8_t *buf = malloc(MANIFEST_CHUNK);
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    uint32_t bad = 0;
    for (uint32_t i = 0; i < s->mf->n_chunks; i++) {
        if (!s->present[i])
            continue;
        uint32_t len = manifest_chunk_len(s->mf, i);
        if (s->present[i] != 1 ||
            pread(s->fd, buf, len, (off_t)i * s->mf->chunk_bytes) != (ssize_t)len ||
            !manifest_chunk_ok(s->mf, i, buf, len)) {
            s->present[i] = 0;
            (void)!pwrite(s->present_fd, &s->present[i], 1, i);
            bad++;
        }
    }
    free(buf);
    if (damaged)
        *damaged = bad;
    set_checked(s, s->hex);
    return 0;
}

const manifest *store_find(store *s, const uint8_t id[MANIFEST_HASH], uint32_t *damaged)
{
    char hex[HEX_ID + 1];
    sodium_bin2hex(hex, sizeof hex, id, MANIFEST_HASH);
    close_model(s);
    char p[4200];
    join(p, sizeof p, s->dir, hex, "manifest");
    manifest *m = read_manifest(p);
    if (!m || sodium_memcmp(m->root, id, MANIFEST_HASH)) {
        manifest_free(m);
        return NULL;
    }
    s->mf = m;
    memcpy(s->hex, hex, sizeof hex);
    char err[512];
    if (open_files(s, damaged, err, sizeof err)) {
        close_model(s);
        return NULL;
    }
    return s->mf;
}

int store_check(store *s, int *models, uint32_t *damaged)
{
    DIR *d = opendir(s->dir);
    *models = 0;
    *damaged = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        uint8_t id[MANIFEST_HASH];
        if (!is_entry(e->d_name) ||
            sodium_hex2bin(id, sizeof id, e->d_name, HEX_ID, NULL, NULL, NULL))
            continue;
        uint32_t bad = 0;
        if (store_find(s, id, &bad)) {
            ++*models;
            *damaged += bad;
        }
    }
    if (d)
        closedir(d);
    close_model(s);
    return 0;
}

int store_take_manifest(store *s, const uint8_t id[MANIFEST_HASH], const void *bytes,
                        size_t len, char *err, size_t errlen)
{
    close_model(s);
    manifest *m = manifest_parse(bytes, len, err, errlen);
    if (!m)
        return -1;
    if (sodium_memcmp(m->root, id, MANIFEST_HASH)) {
        manifest_free(m);
        snprintf(err, errlen, "the manifest sent is not that of the model asked for (another "
                 "file): refused");
        return -1;
    }
    s->mf = m;
    sodium_bin2hex(s->hex, sizeof s->hex, id, MANIFEST_HASH);
    char d[4200], p[4200], tmp[4300];
    join(d, sizeof d, s->dir, s->hex, NULL);
    join(p, sizeof p, s->dir, s->hex, "manifest");
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    int fd = -1;
    if ((mkdir(d, 0700) && errno != EEXIST) ||
        (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
        write(fd, m->bytes, m->len) != (ssize_t)m->len || close(fd) || rename(tmp, p)) {
        snprintf(err, errlen, "store %s: cannot keep the manifest: %s", s->dir, strerror(errno));
        close_model(s);
        return -1;
    }
    if (open_files(s, NULL, err, errlen)) {
        close_model(s);
        return -1;
    }
    return 0;
}

int store_missing(const store *s, const uint8_t *mark, uint32_t *ranges, int max,
                  uint64_t *bytes)
{
    int n = 0;
    uint64_t total = 0;
    for (uint32_t i = 0; s->mf && i < s->mf->n_chunks; i++) {
        if (!mark[i] || s->present[i])
            continue;
        total += manifest_chunk_len(s->mf, i);
        if (n > 0 && ranges[2 * (n - 1)] + ranges[2 * (n - 1) + 1] == i)
            ranges[2 * (n - 1) + 1]++;
        else if (n < max) {
            ranges[2 * n] = i;
            ranges[2 * n + 1] = 1;
            n++;
        }
    }
    if (bytes)
        *bytes = total;
    return n;
}

/* Bytes of chunks recorded present in model hex, and when it was last used. */
static uint64_t entry_bytes(const store *s, const char *hex, struct timespec *used)
{
    char p[4200];
    join(p, sizeof p, s->dir, hex, "manifest");
    manifest *m = read_manifest(p);
    join(p, sizeof p, s->dir, hex, "present");
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    uint64_t total = 0;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && used)
        *used = st.st_mtim;
    if (m && fd >= 0) {
        uint8_t *pr = calloc(m->n_chunks, 1);
        if (pr && pread(fd, pr, m->n_chunks, 0) >= 0)
            for (uint32_t i = 0; i < m->n_chunks; i++)
                total += pr[i] == 1 ? manifest_chunk_len(m, i) : 0;
        free(pr);
    }
    if (fd >= 0)
        close(fd);
    manifest_free(m);
    return total;
}

static bool is_entry(const char *name)
{
    if (strlen(name) != HEX_ID)
        return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return false;
    return true;
}

/* Every model in the store but the one opened: total bytes, and the least recently used. */
static uint64_t others(const store *s, char *lru, struct timespec *lru_used)
{
    DIR *d = opendir(s->dir);
    uint64_t total = 0;
    if (lru)
        lru[0] = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!is_entry(e->d_name) || !strcmp(e->d_name, s->hex))
            continue;
        struct timespec used = {0};
        total += entry_bytes(s, e->d_name, &used);
        if (lru && (!lru[0] || used.tv_sec < lru_used->tv_sec ||
                    (used.tv_sec == lru_used->tv_sec && used.tv_nsec < lru_used->tv_nsec))) {
            memcpy(lru, e->d_name, HEX_ID + 1);   /* is_entry: HEX_ID long */
            *lru_used = used;
        }
    }
    if (d)
        closedir(d);
    return total;
}

static uint64_t own_bytes(const store *s)
{
    uint64_t total = 0;
    for (uint32_t i = 0; s->mf && i < s->mf->n_chunks; i++)
        total += s->present[i] ? manifest_chunk_len(s->mf, i) : 0;
    return total;
}

uint64_t store_used(store *s)
{
    return own_bytes(s) + others(s, NULL, NULL);
}

static void remove_entry(const store *s, const char *hex)
{
    static const char *const files[] = {"model.gguf", "present", "manifest", "manifest.tmp"};
    char p[4200];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        join(p, sizeof p, s->dir, hex, files[i]);
        unlink(p);
    }
    join(p, sizeof p, s->dir, hex, NULL);
    rmdir(p);
}

int store_reserve(store *s, uint64_t bytes, char *err, size_t errlen)
{
    if (!s->max_bytes || !bytes)
        return 0;
    uint64_t own = own_bytes(s);
    for (;;) {
        char lru[HEX_ID + 1];
        struct timespec used;
        uint64_t rest = others(s, lru, &used);
        if (own + rest + bytes <= s->max_bytes)
            return 0;
        if (!lru[0] || own + bytes > s->max_bytes) {
            snprintf(err, errlen, "store %s: this model needs %.1f MiB more beside its %.1f MiB "
                     "held, and the store's bound is %.1f MiB: refused", s->dir,
                     (double)bytes / (1 << 20), (double)own / (1 << 20),
                     (double)s->max_bytes / (1 << 20));
            return -1;
        }
        remove_entry(s, lru);
    }
}

int store_put(store *s, uint32_t i, const void *data, size_t len, char *err, size_t errlen)
{
    if (!s->mf || !manifest_chunk_ok(s->mf, i, data, len))
        return 1;
    uint8_t one = 1;
    if (pwrite(s->fd, data, len, (off_t)i * s->mf->chunk_bytes) != (ssize_t)len ||
        pwrite(s->present_fd, &one, 1, i) != 1) {
        snprintf(err, errlen, "store %s: writing chunk %u: %s", s->dir, i,
                 errno ? strerror(errno) : "short write");
        return -1;
    }
    s->present[i] = 1;
    return 0;
}

void store_plan_chunks(const ring_model *m, const ring_plan *p, int rank, uint8_t *mark)
{
    const manifest *mf = m->manifest;
    memset(mark, 0, mf->n_chunks);
    manifest_mark(mf, 0, mf->header_bytes, mark);
    bool *owns = calloc((size_t)m->n_layer + 1, sizeof *owns);
    if (!owns) {   /* out of memory: every chunk, which is never wrong */
        memset(mark, 1, mf->n_chunks);
        return;
    }
    int n_own = 0;
    plan_owned_layers(p, rank, owns);
    for (int il = 0; il < m->n_layer; il++)
        if (owns[il]) {
            manifest_mark(mf, m->layer_begin[il], m->layer_end[il], mark);
            n_own++;
        }
    free(owns);
    if (n_own == 0)
        return;
    for (int i = 0; i < m->n_shared; i++)
        manifest_mark(mf, m->shared[i].begin, m->shared[i].end, mark);
    if (n_own == m->n_layer && p->window[0] == 0)
        for (int i = 0; i < m->n_head_only; i++)
            manifest_mark(mf, m->head_only[i].begin, m->head_only[i].end, mark);
}
