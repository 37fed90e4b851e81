/* link.h — what every ring link does before its first frame, and to every frame after it:
 * agree on plaintext or on fresh session keys (the handshake), then seal and open frames.
 *
 * Handshake, each message of a fixed size (given its mode), all before any frame:
 *   m1  dialer -> listener    "PRMA" | u16 version | u16 mode | 32-byte ephemeral X25519 key
 *                             (| keyed: 32-byte tag BLAKE2b(L, "prima m1" | the 40 bytes before))
 *   m2  listener -> dialer    "PRMA" | u16 version | u16 mode | 32-byte ephemeral X25519 key
 * mode is LINK_PLAIN (the key bytes are zeros) or LINK_KEYED. A side with a cluster key never
 * goes on in plaintext: it refuses a peer whose mode is LINK_PLAIN. The tag of m1 is the cheap
 * first check: a listener makes its key pair only for a greeting whose tag is right, and a
 * worker flooded with connections keeps those (the caller's `vouched`) while it turns away
 * the others. It does not stop a replayed m1, which the proofs below then refuse. A listener
 * that turns a connection away answers m2 with mode LINK_BUSY (key bytes zeros): the dialer
 * may try again. With both keyed:
 *   m3  dialer -> listener    BLAKE2b(L, "prima dialer" | m1 | m2) | secretstream header (d->l)
 *   m4  listener -> dialer    BLAKE2b(L, "prima listener" | m1 | m2) | secretstream header (l->d)
 * where L is the cluster key's link sub-key (key.h). The dialer proves first, so a stranger who
 * merely connects learns nothing but that the port speaks prima (m2 is random). Each side checks
 * the other's proof (constant time) before it sends anything more. The session keys are the
 * X25519 exchange of both ephemeral keys (crypto_kx), bound to L and to the transcript:
 *   k_dir = BLAKE2b(L, "prima d->l" or "prima l->d" | m1 | m2 | kx key of that direction)
 * so they are fresh for every connection (forward secret: the ephemeral secrets are erased), and
 * a man in the middle who swaps the ephemeral keys or the modes fails the proofs.
 *
 * Frames (proto.h) are then sealed with crypto_secretstream_xchacha20poly1305, one stream per
 * direction: the 16-byte frame header as one message (33 bytes on the wire), the body (if any)
 * as the next (length + 17). The receiver opens the header before it reads a byte of the body,
 * so the header's checks (type, bound, sequence) still come first. Each message's nonce is
 * implied by its place in the stream, so a changed, replayed, reordered, dropped or injected
 * message fails authentication, and the link is dropped. */
#ifndef PRIMA_LINK_H
#define PRIMA_LINK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "cluster/key.h"

#define LINK_PLAIN 1
#define LINK_KEYED 2
#define LINK_BUSY 3                /* m2 only: turned away, try again */
#define LINK_HELLO_BYTES 40        /* m1, m2 */
#define LINK_TAG_BYTES 32          /* the tag after a keyed m1 */
#define LINK_PROOF_BYTES 56        /* m3, m4: 32-byte proof + 24-byte secretstream header */
#define LINK_ABYTES 17             /* crypto_secretstream_xchacha20poly1305_ABYTES */
#define LINK_SEALED_HEADER (16 + LINK_ABYTES)

typedef struct link_crypto link_crypto;

/* Run the handshake on a connected socket as the dialer or the listener, with the cluster key
 * (NULL or unset: plaintext), finishing by deadline_ns (monotonic). name names the peer in err.
 * A listener sets *vouched (when not NULL) as soon as the peer's greeting passed the cheap check.
 * *out: the sealing state, or NULL when both sides agreed on plaintext. 0, or -1 with err, or
 * LINK_FOREIGN with err when the peer does not speak this handshake at all (another program,
 * another protocol version): a plaintext ERROR frame is then the only answer it may read; or
 * (dialer) LINK_BUSY with err when the listener turned the connection away. */
#define LINK_FOREIGN (-2)
#define LINK_BUSY_RC (-3)
int link_handshake(int fd, bool dialer, const ring_key *key, int16_t version, int64_t deadline_ns,
                   const char *name, atomic_bool *vouched, link_crypto **out, char *err,
                   size_t errlen);
/* Turn a connection away before its handshake: m2 with mode LINK_BUSY, sent without waiting. */
void link_send_busy(int fd, int16_t version);
void link_free(link_crypto *l);

/* Seal a frame: header (16 bytes) and body (len bytes in n pieces). *out then holds the wire
 * bytes, in a buffer of l valid until the next seal. 0, or -1 when out of memory. */
int link_seal(link_crypto *l, const uint8_t header[16], const struct iovec *body, int n,
              size_t len, struct iovec *out);
/* Open a sealed header (LINK_SEALED_HEADER bytes). 0, or -1 when it fails authentication. */
int link_open_header(link_crypto *l, const uint8_t *sealed, uint8_t header[16]);
/* A buffer of len + LINK_ABYTES bytes to read a sealed body into (NULL: out of memory). */
uint8_t *link_body_buffer(link_crypto *l, size_t len);
/* Open the sealed body just read into that buffer, into out (len bytes). 0, or -1. */
int link_open_body(link_crypto *l, size_t len, uint8_t *out);

#endif
