#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/auth.h"

/* A secret file is a short passphrase or key; anything larger is a mistake (a model file?). */
#define SECRET_MAX_BYTES 4096

int ring_secret_load(ring_secret *s, const char *path, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (!path || !*path)
        path = getenv("PRIMA_SECRET_FILE");
    if (!path || !*path)
        return 0;
    if (sodium_init() < 0) {
        snprintf(err, errlen, "libsodium failed to initialise");
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "secret file %s: %s", path, strerror(errno));
        return -1;
    }
    unsigned char buf[SECRET_MAX_BYTES + 1];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    /* A trailing newline from `echo secret > file` is not part of the secret. */
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    if (n == 0 || n > SECRET_MAX_BYTES) {
        snprintf(err, errlen, "secret file %s: must hold 1..%d bytes", path, SECRET_MAX_BYTES);
        sodium_memzero(buf, sizeof buf);
        return -1;
    }
    crypto_generichash(s->key, sizeof s->key, buf, n, NULL, 0);
    sodium_memzero(buf, sizeof buf);
    s->set = true;
    return 0;
}

void ring_random(void *buf, size_t n)
{
    if (sodium_init() < 0)
        abort();   /* no randomness source at all: nothing sensible can continue */
    randombytes_buf(buf, n);
}

void ring_proof(const ring_secret *s, const char *label, const void *a, size_t al, const void *b,
                size_t bl, uint8_t out[32])
{
    memset(out, 0, 32);
    if (!s || !s->set)
        return;
    crypto_generichash_state st;
    crypto_generichash_init(&st, s->key, sizeof s->key, 32);
    crypto_generichash_update(&st, (const unsigned char *)label, strlen(label) + 1);
    crypto_generichash_update(&st, a, al);
    crypto_generichash_update(&st, b, bl);
    crypto_generichash_final(&st, out, 32);
}

bool ring_proof_ok(const ring_secret *s, const char *label, const void *a, size_t al,
                   const void *b, size_t bl, const uint8_t got[32])
{
    if (!s || !s->set)
        return true;
    uint8_t want[32];
    ring_proof(s, label, a, al, b, bl, want);
    return sodium_memcmp(want, got, 32) == 0;
}
