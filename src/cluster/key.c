/* key.c — the cluster key (key.h): reading and writing key files and deriving the per-use
 * subkeys with libsodium, so that no use of the key (links, discovery, the cluster id) can be
 * turned against another. */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/key.h"

/* A key file is a keygen key or a short passphrase; anything larger is a mistake (a model?). */
#define KEY_FILE_MAX 4096

static int sodium_ready(char *err, size_t errlen)
{
    if (sodium_init() < 0) {
        snprintf(err, errlen, "libsodium failed to initialise (no randomness source?)");
        return -1;
    }
    return 0;
}

int ring_random(void *buf, size_t n)
{
    if (sodium_init() < 0)
        return -1;
    randombytes_buf(buf, n);
    return 0;
}

int ring_key_load(ring_key *k, const char *path, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    if (!path || !*path)
        path = getenv("PRIMA_KEY_FILE");
    if (!path || !*path)
        path = getenv("PRIMA_SECRET_FILE");
    if (!path || !*path)
        return 0;
    if (sodium_ready(err, errlen))
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "key file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "key file %s: %s", path,
                 S_ISDIR(st.st_mode) ? "is a directory, not a key file (make one with prima keygen)"
                                     : "is not a regular file");
        close(fd);
        return -1;
    }
    unsigned char buf[KEY_FILE_MAX + 1];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof buf - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "key file %s: %s", path, strerror(errno));
            close(fd);
            sodium_memzero(buf, sizeof buf);
            return -1;
        }
        if (r == 0 || (n += (size_t)r) == sizeof buf)
            break;
    }
    close(fd);
    /* A trailing newline from `echo secret > file` is not part of the secret. */
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    if (n == 0 || n > KEY_FILE_MAX) {
        snprintf(err, errlen, "key file %s: %s (a key file holds 1..%d bytes; make one with "
                 "prima keygen)", path, n ? "too large" : "empty", KEY_FILE_MAX);
        sodium_memzero(buf, sizeof buf);
        return -1;
    }
    static const char domain[] = "prima cluster key";
    crypto_generichash(k->k, sizeof k->k, buf, n, (const unsigned char *)domain, sizeof domain - 1);
    sodium_memzero(buf, sizeof buf);
    k->set = true;
    return 0;
}

int ring_key_random(ring_key *k, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    if (sodium_ready(err, errlen))
        return -1;
    randombytes_buf(k->k, sizeof k->k);
    k->set = true;
    return 0;
}

int ring_key_write(const char *path, bool replace, char *err, size_t errlen)
{
    if (sodium_ready(err, errlen))
        return -1;
    if (replace && unlink(path) && errno != ENOENT) {
        snprintf(err, errlen, "%s: cannot replace it: %s", path, strerror(errno));
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST) {
            snprintf(err, errlen, "%s already exists", path);
            return RING_KEY_EXISTS;
        }
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    uint8_t raw[32];
    char text[2 * sizeof raw + 2];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(text, sizeof text, raw, sizeof raw);
    sodium_memzero(raw, sizeof raw);
    size_t len = strlen(text);
    text[len++] = '\n';
    /* umask may have narrowed the mode further; it must not have widened it. */
    int ok = fchmod(fd, 0600) == 0 && write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
    int e = errno;
    sodium_memzero(text, sizeof text);
    if (close(fd) || !ok) {
        snprintf(err, errlen, "%s: %s", path, strerror(ok ? errno : e));
        unlink(path);
        return -1;
    }
    return 0;
}

int ring_key_derive(const ring_key *k, const char *purpose, void *out, size_t len)
{
    if (!k || !k->set || len < crypto_generichash_BYTES_MIN || len > crypto_generichash_BYTES_MAX)
        return -1;
    char label[64];
    int n = snprintf(label, sizeof label, "prima/%s", purpose);
    if (n < 0 || (size_t)n >= sizeof label)
        return -1;
    crypto_generichash(out, len, (const unsigned char *)label, (size_t)n, k->k, sizeof k->k);
    return 0;
}
