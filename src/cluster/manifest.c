/* manifest.c — chunk hashes of a model file and their cache (manifest.h). */
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/manifest.h"
#include "util/cachedir.h"

static const char MAGIC[8] = {'P', 'R', 'M', 'A', 'M', 'A', 'N', '1'};
/* The cache file: the source file's stamp, then the serialized manifest. */
#define STAMP_BYTES 32

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t manifest_chunk_len(const manifest *m, uint32_t i)
{
    uint64_t b = (uint64_t)i * m->chunk_bytes;
    if (i >= m->n_chunks || b >= m->file_size)
        return 0;
    uint64_t left = m->file_size - b;
    return left < m->chunk_bytes ? (uint32_t)left : m->chunk_bytes;
}

bool manifest_chunk_ok(const manifest *m, uint32_t i, const void *data, size_t len)
{
    if (i >= m->n_chunks || len != manifest_chunk_len(m, i))
        return false;
    uint8_t h[MANIFEST_HASH];
    crypto_generichash(h, sizeof h, data, len, NULL, 0);
    return sodium_memcmp(h, m->hashes + (size_t)i * MANIFEST_HASH, sizeof h) == 0;
}

void manifest_mark(const manifest *m, uint64_t begin, uint64_t end, uint8_t *mark)
{
    if (end > m->file_size)
        end = m->file_size;
    if (begin >= end)
        return;
    for (uint64_t c = begin / m->chunk_bytes; c <= (end - 1) / m->chunk_bytes; c++)
        mark[c] = 1;
}

void manifest_free(manifest *m)
{
    if (m) {
        free(m->bytes);
        free(m);
    }
}

manifest *manifest_parse(const void *buf, size_t len, char *err, size_t errlen)
{
    const uint8_t *p = buf;
    if (sodium_init() < 0) {
        snprintf(err, errlen, "libsodium failed to initialise");
        return NULL;
    }
    if (len < MANIFEST_FIXED || len > MANIFEST_MAX || memcmp(p, MAGIC, sizeof MAGIC)) {
        snprintf(err, errlen, "not a model manifest (%zu bytes)", len);
        return NULL;
    }
    uint64_t size = get64(p + 8), header = get64(p + 16);
    uint32_t chunk = get32(p + 24), n = get32(p + 28);
    if (chunk != MANIFEST_CHUNK || header > size || size == 0 ||
        n != (size + chunk - 1) / chunk || len != MANIFEST_FIXED + (size_t)n * MANIFEST_HASH) {
        snprintf(err, errlen, "malformed model manifest (file of %llu bytes, %u chunks of %u, "
                 "%zu bytes)", (unsigned long long)size, n, chunk, len);
        return NULL;
    }
    manifest *m = calloc(1, sizeof *m);
    if (!m || !(m->bytes = malloc(len))) {
        free(m);
        snprintf(err, errlen, "out of memory for a model manifest");
        return NULL;
    }
    memcpy(m->bytes, p, len);
    m->len = len;
    m->file_size = size;
    m->header_bytes = header;
    m->chunk_bytes = chunk;
    m->n_chunks = n;
    m->hashes = m->bytes + MANIFEST_FIXED;
    crypto_generichash(m->root, sizeof m->root, m->bytes, len, NULL, 0);
    return m;
}

static manifest *compute(const uint8_t *map, uint64_t size, uint64_t header, char *err,
                         size_t errlen)
{
    uint64_t n = (size + MANIFEST_CHUNK - 1) / MANIFEST_CHUNK;
    size_t len = MANIFEST_FIXED + (size_t)n * MANIFEST_HASH;
    if (size == 0 || len > MANIFEST_MAX) {
        snprintf(err, errlen, "a file of %llu bytes has no manifest (at most %u chunks)",
                 (unsigned long long)size, (MANIFEST_MAX - MANIFEST_FIXED) / MANIFEST_HASH);
        return NULL;
    }
    uint8_t *b = malloc(len);
    if (!b) {
        snprintf(err, errlen, "out of memory for a model manifest");
        return NULL;
    }
    memcpy(b, MAGIC, sizeof MAGIC);
    put64(b + 8, size);
    put64(b + 16, header);
    for (int i = 0; i < 4; i++) {
        b[24 + i] = (uint8_t)(MANIFEST_CHUNK >> (8 * i));
        b[28 + i] = (uint8_t)(n >> (8 * i));
    }
    for (uint64_t c = 0; c < n; c++) {
        uint64_t off = c * MANIFEST_CHUNK, l = size - off < MANIFEST_CHUNK ? size - off : MANIFEST_CHUNK;
        crypto_generichash(b + MANIFEST_FIXED + c * MANIFEST_HASH, MANIFEST_HASH, map + off, l,
                           NULL, 0);
    }
    manifest *m = manifest_parse(b, len, err, errlen);
    free(b);
    return m;
}

/* Where the cache of path lives: beside it when its directory is writable, else in the user's
 * cache directory under a name derived from the file's absolute path. */
static int cache_path(const char *path, char *out, size_t cap)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = 0;
    else
        snprintf(dir, sizeof dir, ".");
    if (access(dir, W_OK) == 0) {
        snprintf(out, cap, "%s.prima-manifest", path);
        return 0;
    }
    char cdir[4096];
    if (cache_dir(cdir, sizeof cdir))
        return -1;
    char *abs = realpath(path, NULL);
    if (!abs)
        return -1;
    uint8_t h[16];
    crypto_generichash(h, sizeof h, (const uint8_t *)abs, strlen(abs), NULL, 0);
    free(abs);
    char hex[33];
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    snprintf(out, cap, "%s/manifest-%s", cdir, hex);
    return 0;
}

static void stamp_of(const struct stat *st, uint8_t out[STAMP_BYTES])
{
    put64(out, (uint64_t)st->st_size);
    put64(out + 8, (uint64_t)st->st_mtim.tv_sec);
    put64(out + 16, (uint64_t)st->st_mtim.tv_nsec);
    put64(out + 24, (uint64_t)st->st_ino);
}

static manifest *read_cache(const char *cpath, const uint8_t stamp[STAMP_BYTES], uint64_t size,
                            uint64_t header)
{
    int fd = open(cpath, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    manifest *m = NULL;
    struct stat st;
    uint8_t *b = NULL;
    if (fstat(fd, &st) || st.st_size < STAMP_BYTES + MANIFEST_FIXED ||
        st.st_size > STAMP_BYTES + (off_t)MANIFEST_MAX || !(b = malloc((size_t)st.st_size)) ||
        pread(fd, b, (size_t)st.st_size, 0) != st.st_size || memcmp(b, stamp, STAMP_BYTES))
        goto done;
    char err[256];
    m = manifest_parse(b + STAMP_BYTES, (size_t)st.st_size - STAMP_BYTES, err, sizeof err);
    if (m && (m->file_size != size || m->header_bytes != header)) {
        manifest_free(m);
        m = NULL;
    }
done:
    free(b);
    close(fd);
    return m;
}

/* Written to a temporary file and renamed, so a reader never sees half a cache. */
static void write_cache(const char *cpath, const uint8_t stamp[STAMP_BYTES], const manifest *m)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", cpath, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    bool ok = write(fd, stamp, STAMP_BYTES) == STAMP_BYTES &&
              write(fd, m->bytes, m->len) == (ssize_t)m->len;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, cpath))
        unlink(tmp);
}

manifest *manifest_for_file(const char *path, const uint8_t *map, uint64_t size,
                            uint64_t header_bytes, char *err, size_t errlen)
{
    if (sodium_init() < 0) {
        snprintf(err, errlen, "libsodium failed to initialise");
        return NULL;
    }
    struct stat st;
    char cpath[4200];
    bool cacheable = stat(path, &st) == 0 && (uint64_t)st.st_size == size &&
                     cache_path(path, cpath, sizeof cpath) == 0;
    uint8_t stamp[STAMP_BYTES];
    if (cacheable) {
        stamp_of(&st, stamp);
        manifest *m = read_cache(cpath, stamp, size, header_bytes);
        if (m)
            return m;
    }
    manifest *m = compute(map, size, header_bytes, err, errlen);
    if (!m) {
        char e[256];
        snprintf(e, sizeof e, "%s", err);
        snprintf(err, errlen, "%s: %s", path, e);
        return NULL;
    }
    if (cacheable)
        write_cache(cpath, stamp, m);
    return m;
}
