/* The cluster key (cluster/key.h): files from keygen and passphrase files load alike, bad files
 * (missing, empty, a directory, too large) are refused with a line that says what is wrong,
 * keygen writes mode 0600 and never overwrites unless told to, and sub-keys are independent. */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/key.h"
#include "test.h"

static char dir[] = "/tmp/prima-test-key-XXXXXX";

static void write_file(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(text, 1, n, f) == n && fclose(f) == 0, "write %s", path);
}

static void refused(const char *path, const char *why)
{
    ring_key k;
    char err[512] = "";
    CHECK(ring_key_load(&k, path, err, sizeof err) == -1 && !k.set, "%s loaded", path);
    CHECK(strstr(err, path) && strstr(err, why), "%s: '%s' should say '%s'", path, err, why);
}

int main(void)
{
    REQUIRE(mkdtemp(dir), "mkdtemp");
    char path[256], other[256], big[256], empty[256];
    snprintf(path, sizeof path, "%s/cluster.key", dir);
    snprintf(other, sizeof other, "%s/other.key", dir);
    snprintf(big, sizeof big, "%s/big", dir);
    snprintf(empty, sizeof empty, "%s/empty", dir);
    char err[512] = "";

    /* keygen: 0600, 64 hex digits and a newline, refuses to overwrite, replaces when told */
    REQUIRE(ring_key_write(path, false, err, sizeof err) == 0, "%s", err);
    struct stat st;
    REQUIRE(stat(path, &st) == 0, "stat");
    CHECK((st.st_mode & 0777) == 0600, "mode %o", st.st_mode & 0777);
    CHECK(st.st_size == 65, "size %lld", (long long)st.st_size);
    ring_key a, b, a2;
    REQUIRE(ring_key_load(&a, path, err, sizeof err) == 0 && a.set, "%s", err);
    REQUIRE(ring_key_load(&a2, path, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(a.k, a2.k, sizeof a.k) == 0, "the same file gives the same key");
    CHECK(ring_key_write(path, false, err, sizeof err) == RING_KEY_EXISTS &&
              strstr(err, "already exists"),
          "overwrite without --force: '%s'", err);
    REQUIRE(ring_key_load(&a2, path, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(a.k, a2.k, sizeof a.k) == 0, "the refused overwrite changed the key");
    chmod(path, 0644);
    REQUIRE(ring_key_write(path, true, err, sizeof err) == 0, "%s", err);
    REQUIRE(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "mode after --force %o",
            st.st_mode & 0777);
    REQUIRE(ring_key_load(&b, path, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(a.k, b.k, sizeof a.k) != 0, "a new key is a new key");

    /* a passphrase file, with and without its trailing newline */
    write_file(other, "correct horse battery staple\n", 29);
    REQUIRE(ring_key_load(&a, other, err, sizeof err) == 0 && a.set, "%s", err);
    write_file(other, "correct horse battery staple", 28);
    REQUIRE(ring_key_load(&a2, other, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(a.k, a2.k, sizeof a.k) == 0, "a trailing newline is not part of the key");

    /* bad files say what is wrong */
    refused(dir, "is a directory");
    write_file(empty, "\n", 1);
    refused(empty, "empty");
    static char blob[5000];
    memset(blob, 'x', sizeof blob);
    write_file(big, blob, sizeof blob);
    refused(big, "too large");
    char missing[300];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    refused(missing, "No such file");

    /* no path and no environment: no key, no error */
    unsetenv("PRIMA_KEY_FILE");
    unsetenv("PRIMA_SECRET_FILE");
    CHECK(ring_key_load(&a, NULL, err, sizeof err) == 0 && !a.set, "no key");
    setenv("PRIMA_KEY_FILE", path, 1);
    CHECK(ring_key_load(&a, NULL, err, sizeof err) == 0 && a.set && !memcmp(a.k, b.k, sizeof a.k),
          "$PRIMA_KEY_FILE");
    unsetenv("PRIMA_KEY_FILE");

    /* sub-keys: deterministic, one per purpose, none equal to the key, none without a key */
    uint8_t l1[32], l2[32], bc[32], id[16];
    CHECK(ring_key_derive(&b, RING_KEY_LINK, l1, sizeof l1) == 0, "derive");
    CHECK(ring_key_derive(&b, RING_KEY_LINK, l2, sizeof l2) == 0 && !memcmp(l1, l2, 32), "same");
    CHECK(ring_key_derive(&b, RING_KEY_BEACON, bc, sizeof bc) == 0 && memcmp(l1, bc, 32), "purpose");
    CHECK(ring_key_derive(&b, RING_KEY_CLUSTER_ID, id, sizeof id) == 0, "cluster id");
    CHECK(memcmp(l1, b.k, 32) && memcmp(bc, b.k, 32), "a sub-key equals the key");
    ring_key none = {.set = false};
    CHECK(ring_key_derive(&none, RING_KEY_LINK, l1, sizeof l1) == -1, "derive without a key");
    CHECK(ring_key_derive(&b, RING_KEY_LINK, l1, 8) == -1, "an 8-byte sub-key");
    ring_key r1, r2;
    CHECK(ring_key_random(&r1, err, sizeof err) == 0 && ring_key_random(&r2, err, sizeof err) == 0 &&
          r1.set && memcmp(r1.k, r2.k, 32), "random keys");

    unlink(path);
    unlink(other);
    unlink(big);
    unlink(empty);
    rmdir(dir);
    return test_done();
}
