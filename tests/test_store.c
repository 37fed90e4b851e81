/* test_store.c — the manifest and the store (cluster/manifest.h, cluster/store.h) on files of
 * made-up bytes: the manifest's cache and its checks, a store refusing a manifest that is not
 * the identity's and a chunk that is not the manifest's, a damaged chunk forgotten when the
 * model is opened again, the missing ranges, and eviction of the least recently used model
 * within the bound (or a refusal naming the bytes). */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/manifest.h"
#include "cluster/store.h"
#include "test.h"

#define CHUNK MANIFEST_CHUNK

static char dir[64];

/* A file of `size` bytes of a pattern set by seed, mapped. */
static uint8_t *make_file(const char *path, size_t size, unsigned seed)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0, "cannot create %s", path);
    uint8_t *b = malloc(size);
    REQUIRE(b, "out of memory");
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t i = 0; i < size; i++) {   /* xorshift: no period a chunk could repeat */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[i] = (uint8_t)(x >> 32);
    }
    REQUIRE(write(fd, b, size) == (ssize_t)size, "write %s", path);
    close(fd);
    return b;
}

static manifest *manifest_of(const char *name, size_t size, unsigned seed, uint8_t **data)
{
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *data = make_file(path, size, seed);
    manifest *m = manifest_for_file(path, *data, size, 1000, err, sizeof err);
    REQUIRE(m, "%s", err);
    return m;
}

static void test_manifest(void)
{
    uint8_t *d;
    size_t size = 2 * CHUNK + 12345;
    manifest *m = manifest_of("a.gguf", size, 1, &d);
    CHECK(m->n_chunks == 3 && m->file_size == size && m->header_bytes == 1000, "shape");
    CHECK(manifest_chunk_len(m, 2) == 12345 && manifest_chunk_len(m, 0) == CHUNK, "lengths");
    CHECK(manifest_chunk_ok(m, 1, d + CHUNK, CHUNK), "chunk 1 is its bytes");
    CHECK(!manifest_chunk_ok(m, 1, d, CHUNK), "chunk 0's bytes are not chunk 1");
    CHECK(!manifest_chunk_ok(m, 2, d + 2 * CHUNK, 12344), "a short chunk");
    /* the cache: the same manifest again, from the file beside */
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/a.gguf.prima-manifest", dir);
    struct stat st;
    CHECK(stat(path, &st) == 0, "no cache beside the file");
    snprintf(path, sizeof path, "%s/a.gguf", dir);
    manifest *again = manifest_for_file(path, d, size, 1000, err, sizeof err);
    REQUIRE(again, "%s", err);
    CHECK(!memcmp(again->root, m->root, MANIFEST_HASH), "the cached manifest differs");
    manifest_free(again);
    /* another file of the same size: another identity */
    uint8_t *d2;
    manifest *m2 = manifest_of("b.gguf", size, 2, &d2);
    CHECK(memcmp(m2->root, m->root, MANIFEST_HASH), "two files, one identity");
    manifest_free(m2);
    free(d2);
    /* parsing what a peer sent: every cut and a changed count is refused */
    for (size_t cut = 0; cut < m->len; cut += 7)
        CHECK(!manifest_parse(m->bytes, cut, err, sizeof err), "a manifest cut at %zu", cut);
    uint8_t *bad = malloc(m->len);
    memcpy(bad, m->bytes, m->len);
    bad[28] = 4;   /* chunks */
    CHECK(!manifest_parse(bad, m->len, err, sizeof err), "a wrong chunk count");
    free(bad);
    manifest_free(m);
    free(d);
}

static uint64_t count_present(store *s, uint32_t n)
{
    uint64_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        k += store_has(s, i);
    return k;
}

static void test_store(void)
{
    char sdir[128], err[512];
    snprintf(sdir, sizeof sdir, "%s/store", dir);
    uint8_t *d, *e;
    manifest *m = manifest_of("m.gguf", 3 * CHUNK + 100, 3, &d);
    manifest *o = manifest_of("o.gguf", 3 * CHUNK + 100, 4, &e);
    store *s = store_open(sdir, (uint64_t)6 * CHUNK, err, sizeof err);
    REQUIRE(s, "%s", err);
    CHECK(!store_open(sdir, 0, err, sizeof err) && strstr(err, "in use"), "two users: %s", err);
    CHECK(!store_find(s, m->root, NULL), "an empty store holds a model");
    /* a manifest that is not the identity's */
    CHECK(store_take_manifest(s, m->root, o->bytes, o->len, err, sizeof err) &&
              strstr(err, "not that of the model"), "another file's manifest: %s", err);
    REQUIRE(store_take_manifest(s, m->root, m->bytes, m->len, err, sizeof err) == 0, "%s", err);
    uint8_t mark[4] = {1, 0, 1, 1};
    uint32_t r[8];
    uint64_t bytes;
    CHECK(store_missing(s, mark, r, 4, &bytes) == 2 && r[0] == 0 && r[1] == 1 && r[2] == 2 &&
              r[3] == 2 && bytes == 2 * CHUNK + 100, "missing ranges");
    CHECK(store_put(s, 2, e + 2 * CHUNK, CHUNK, err, sizeof err) == 1, "another file's chunk kept");
    CHECK(store_put(s, 2, d + 2 * CHUNK, CHUNK, err, sizeof err) == 0, "%s", err);
    CHECK(store_put(s, 0, d, CHUNK, err, sizeof err) == 0, "%s", err);
    CHECK(store_missing(s, mark, r, 4, &bytes) == 1 && r[0] == 3 && bytes == 100, "after two");
    CHECK(store_used(s) == 2 * CHUNK, "used %llu", (unsigned long long)store_used(s));
    /* the file holds the chunk at its offset */
    int fd = open(store_model_path(s), O_RDONLY);
    uint8_t got[64];
    CHECK(fd >= 0 && pread(fd, got, sizeof got, 2 * CHUNK) == sizeof got &&
              !memcmp(got, d + 2 * CHUNK, sizeof got), "chunk 2 not at its offset");
    close(fd);
    /* a flipped byte is found when the model is opened again */
    fd = open(store_model_path(s), O_RDWR);
    uint8_t x = (uint8_t)(d[2 * CHUNK + 77] ^ 0x10);
    CHECK(fd >= 0 && pwrite(fd, &x, 1, 2 * CHUNK + 77) == 1, "flip");
    close(fd);
    uint32_t damaged = 0;
    CHECK(store_find(s, m->root, &damaged) && damaged == 0 && store_has(s, 2),
          "checked twice in one run (%u)", damaged);
    store_free(s);   /* the next worker's start finds it */
    s = store_open(sdir, (uint64_t)6 * CHUNK, err, sizeof err);
    REQUIRE(s, "%s", err);
    int models = 0;
    CHECK(store_check(s, &models, &damaged) == 0 && models == 1 && damaged == 1,
          "damage not found at start-up (%d models, %u)", models, damaged);
    CHECK(store_find(s, m->root, &damaged) && damaged == 0 && !store_has(s, 2) &&
              store_has(s, 0), "the damaged chunk is still recorded");
    /* another model fills the store; the first is the least recently used */
    REQUIRE(store_take_manifest(s, o->root, o->bytes, o->len, err, sizeof err) == 0, "%s", err);
    CHECK(store_reserve(s, 3 * CHUNK, err, sizeof err) == 0, "%s", err);
    for (uint32_t i = 0; i < 3; i++)
        CHECK(store_put(s, i, e + (size_t)i * CHUNK, CHUNK, err, sizeof err) == 0, "%s", err);
    CHECK(store_reserve(s, 7 * CHUNK, err, sizeof err) && strstr(err, "needs 28.0 MiB more beside its 12.0 MiB held, and the store's bound is 24.0 MiB"),
          "more than the bound: %s", err);
    /* room for the first model's three chunks: the other is evicted, never the one opened */
    REQUIRE(store_take_manifest(s, m->root, m->bytes, m->len, err, sizeof err) == 0, "%s", err);
    CHECK(count_present(s, 4) == 1, "model m kept %llu chunks", (unsigned long long)count_present(s, 4));
    CHECK(store_reserve(s, 3 * CHUNK + 100, err, sizeof err) == 0, "%s", err);
    CHECK(store_used(s) == CHUNK, "after eviction: %llu", (unsigned long long)store_used(s));
    CHECK(!store_find(s, o->root, NULL), "the evicted model is still there");
    CHECK(store_find(s, m->root, NULL) && store_has(s, 0), "the model in use was evicted");
    store_free(s);
    /* reopened: what was recorded stays */
    s = store_open(sdir, 0, err, sizeof err);
    REQUIRE(s, "%s", err);
    CHECK(store_find(s, m->root, &damaged) && damaged == 0 && store_has(s, 0) && !store_has(s, 2),
          "the record after reopening");
    store_free(s);
    manifest_free(m);
    manifest_free(o);
    free(d);
    free(e);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/prima-store.XXXXXX");
    REQUIRE(mkdtemp(dir), "mkdtemp");
    test_manifest();
    test_store();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return test_failures ? 1 : 0;
}
