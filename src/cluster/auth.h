/* auth.h — optional shared-secret authentication of ring links.
 *
 * Every device of a cluster may be given the same secret file (--secret-file, or the environment
 * variable PRIMA_SECRET_FILE). Its contents are hashed into a 32-byte key, and each side of a
 * link proves it holds the key with a keyed BLAKE2b over fresh nonces, without sending the key:
 *   worker -> head:  H(key, "worker" | head nonce | worker nonce)    in WELCOME
 *   head -> worker:  H(key, "head" | worker nonce | session id)      in PLAN
 *   peer -> worker:  H(key, "peer" | session id | rank)              in the peer's HELLO
 * Without a secret the proofs are all zeros and a side that has one refuses them. This
 * authenticates the devices to each other; it does not encrypt the activations. */
#ifndef PRIMA_AUTH_H
#define PRIMA_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ring_secret {
    bool set;
    uint8_t key[32];
} ring_secret;

/* path NULL: $PRIMA_SECRET_FILE if set, else no secret. Returns 0 or -1 (err set). */
int ring_secret_load(ring_secret *s, const char *path, char *err, size_t errlen);
/* Fresh random bytes. */
void ring_random(void *buf, size_t n);
void ring_proof(const ring_secret *s, const char *label, const void *a, size_t al, const void *b,
                size_t bl, uint8_t out[32]);
/* Always true without a secret; otherwise compares in constant time. */
bool ring_proof_ok(const ring_secret *s, const char *label, const void *a, size_t al,
                   const void *b, size_t bl, const uint8_t got[32]);

#endif
