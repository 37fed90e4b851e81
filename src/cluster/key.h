/* key.h — the cluster key: one secret every device of a ring holds, from which every use of it
 * is derived (link handshakes, discovery beacons, a public cluster id).
 *
 * `prima keygen` writes a random key file (64 hex digits, mode 0600). Any other file of 1..4096
 * bytes (a passphrase; a trailing newline is not part of it) is accepted too, as --secret-file
 * was: the file's contents are hashed into the 32-byte key, so both kinds work alike. A
 * passphrase is only as strong as it is long; a keygen key is 256 random bits.
 *
 * The key itself is never used directly and never sent: ring_key_derive() gives an independent
 * sub-key per purpose (keyed BLAKE2b of the purpose's name), so that e.g. the cluster id a beacon
 * carries reveals nothing about the key that authenticates the links. */
#ifndef PRIMA_KEY_H
#define PRIMA_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RING_KEY_BYTES 32

typedef struct ring_key {
    bool set;
    uint8_t k[RING_KEY_BYTES];
} ring_key;

/* Load a key file. path NULL or "": $PRIMA_KEY_FILE, else $PRIMA_SECRET_FILE, else no key
 * (k->set false, returns 0). Returns 0, or -1 with err naming the file and what is wrong. */
int ring_key_load(ring_key *k, const char *path, char *err, size_t errlen);
/* A fresh random key in memory (a ring whose devices share this process's memory, e.g. the
 * workers `prima cluster` forks). 0, or -1 with err. */
int ring_key_random(ring_key *k, char *err, size_t errlen);
/* Write a new random key file at path, mode 0600. An existing file is refused unless replace is
 * set (then it is removed first, so neither its permissions nor a symbolic link survive).
 * 0, RING_KEY_EXISTS when path exists and replace is not set, or -1; err says which. */
#define RING_KEY_EXISTS (-2)
int ring_key_write(const char *path, bool replace, char *err, size_t errlen);

/* Purposes of sub-keys; each name gives an independent key. */
#define RING_KEY_LINK "link"          /* the handshake of every ring link (proto.c) */
#define RING_KEY_BEACON "beacon"      /* authenticating discovery beacons */
#define RING_KEY_CLUSTER_ID "cluster-id" /* a public name of the cluster (not secret) */

/* out (16..64 bytes) = BLAKE2b keyed with the cluster key over "prima/" + purpose. Returns 0,
 * or -1 when the key is not set or len is out of range. */
int ring_key_derive(const ring_key *k, const char *purpose, void *out, size_t len);
/* Fresh random bytes from the system. 0, or -1 when no randomness source can be opened. */
int ring_random(void *buf, size_t n);

#endif
