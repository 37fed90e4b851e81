/* link.c — the link handshake and frame sealing (link.h): X25519 session keys proven with the
 * cluster key, then libsodium secretstreams, so that every frame is authenticated and in order
 * and a device without the key learns only that the port speaks prima. */
#include <errno.h>
#include <sodium.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/link.h"
#include "cluster/net.h"

_Static_assert(LINK_ABYTES == crypto_secretstream_xchacha20poly1305_ABYTES, "ABYTES");
_Static_assert(LINK_PROOF_BYTES == 32 + crypto_secretstream_xchacha20poly1305_HEADERBYTES, "m3");
_Static_assert(crypto_kx_PUBLICKEYBYTES == 32 && crypto_kx_SESSIONKEYBYTES == 32, "kx sizes");

#define LINK_STALL_MS 5000
#define TAG_MESSAGE crypto_secretstream_xchacha20poly1305_TAG_MESSAGE

struct link_crypto {
    crypto_secretstream_xchacha20poly1305_state tx, rx;
    uint8_t *tx_buf;           /* sealed output */
    size_t tx_cap;
    uint8_t *pt_buf;           /* a frame's body gathered from its pieces */
    size_t pt_cap;
    uint8_t *rx_buf;           /* a sealed body as read */
    size_t rx_cap;
};

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    uint8_t *nb = realloc(*buf, need);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = need;
    return 0;
}

void link_free(link_crypto *l)
{
    if (!l)
        return;
    free(l->tx_buf);
    free(l->pt_buf);
    free(l->rx_buf);
    sodium_memzero(l, sizeof *l);
    free(l);
}

static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void hello_msg(uint8_t m[LINK_HELLO_BYTES], int16_t version, int mode, const uint8_t *pk)
{
    memcpy(m, "PRMA", 4);
    put16(m + 4, (unsigned)version);
    put16(m + 6, (unsigned)mode);
    if (pk)
        memcpy(m + 8, pk, 32);
    else
        memset(m + 8, 0, 32);
}

/* Check the peer's m1/m2: 0 and its mode, or -1 with err. */
static int parse_hello(const uint8_t m[LINK_HELLO_BYTES], int16_t version, const char *name,
                       int *mode, char *err, size_t errlen)
{
    if (memcmp(m, "PRMA", 4)) {
        snprintf(err, errlen, "%s: not a prima connection (it sent %02x %02x %02x %02x)", name,
                 m[0], m[1], m[2], m[3]);
        return -1;
    }
    int v = m[4] | m[5] << 8;
    if (v != version) {
        snprintf(err, errlen, "%s speaks protocol version %d, this side speaks %d", name, v,
                 version);
        return -1;
    }
    *mode = m[6] | m[7] << 8;
    if (*mode != LINK_PLAIN && *mode != LINK_KEYED && *mode != LINK_BUSY) {
        snprintf(err, errlen, "%s: handshake with unknown mode %d", name, *mode);
        return -1;
    }
    return 0;
}

static int xfer(int fd, bool send, void *buf, size_t n, int64_t deadline, const char *name,
                const char *what, char *err, size_t errlen)
{
    int rc;
    if (send) {
        struct iovec iov = {buf, n};
        rc = net_send_until(fd, &iov, 1, LINK_STALL_MS, deadline);
    } else {
        rc = net_recv_until(fd, buf, n, LINK_STALL_MS, deadline);
    }
    if (rc == 0)
        return 0;
    if (rc == NET_STALLED)
        snprintf(err, errlen, "%s: the handshake did not finish in time (%s)", name, what);
    else
        snprintf(err, errlen, "%s: %s during the handshake (%s)", name, net_strerror(rc), what);
    return rc < 0 ? rc : -1;
}

/* The net code of a transfer that failed because the peer hung up or reset. */
static bool hung_up(int rc)
{
    return rc == NET_EOF || rc == -ECONNRESET || rc == -EPIPE;
}

/* BLAKE2b keyed with the link key over label | m1 | m2 (| extra). */
static void transcript_mac(const uint8_t lk[32], const char *label, const uint8_t *m1,
                           const uint8_t *m2, const uint8_t *extra, size_t extra_len,
                           uint8_t *out, size_t outlen)
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, lk, 32, outlen);
    crypto_generichash_update(&st, (const unsigned char *)label, strlen(label) + 1);
    crypto_generichash_update(&st, m1, LINK_HELLO_BYTES);
    crypto_generichash_update(&st, m2, LINK_HELLO_BYTES);
    if (extra_len)
        crypto_generichash_update(&st, extra, extra_len);
    crypto_generichash_final(&st, out, outlen);
}

/* The tag on a keyed m1: BLAKE2b(L, "prima m1" | m1), checked before the listener spends
 * anything on the connection. */
static void first_tag(const uint8_t lk[32], const uint8_t m1[LINK_HELLO_BYTES],
                      uint8_t tag[LINK_TAG_BYTES])
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, lk, 32, LINK_TAG_BYTES);
    crypto_generichash_update(&st, (const unsigned char *)"prima m1", 9);
    crypto_generichash_update(&st, m1, LINK_HELLO_BYTES);
    crypto_generichash_final(&st, tag, LINK_TAG_BYTES);
}

void link_send_busy(int fd, int16_t version)
{
    uint8_t m[LINK_HELLO_BYTES];
    hello_msg(m, version, LINK_BUSY, NULL);
    /* Best effort and never blocking: the peer may be a stranger that reads nothing. */
    ssize_t n = send(fd, m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)n;
}

int link_handshake(int fd, bool dialer, const ring_key *key, int16_t version, int64_t deadline_ns,
                   const char *name, atomic_bool *vouched, link_crypto **out, char *err,
                   size_t errlen)
{
    *out = NULL;
    bool keyed = key && key->set;
    if (keyed && sodium_init() < 0) {
        snprintf(err, errlen, "libsodium failed to initialise");
        return -1;
    }
    uint8_t mine[LINK_HELLO_BYTES + LINK_TAG_BYTES], theirs[LINK_HELLO_BYTES];
    uint8_t tag[LINK_TAG_BYTES], want_tag[LINK_TAG_BYTES];
    uint8_t pk[crypto_kx_PUBLICKEYBYTES] = {0}, sk[crypto_kx_SECRETKEYBYTES] = {0};
    uint8_t lk[32] = {0}, ktx[32] = {0}, krx[32] = {0};
    link_crypto *l = NULL;
    int mode = 0;
    if (keyed)
        ring_key_derive(key, RING_KEY_LINK, lk, sizeof lk);
    if (dialer) {
        if (keyed)
            crypto_kx_keypair(pk, sk);
        hello_msg(mine, version, keyed ? LINK_KEYED : LINK_PLAIN, keyed ? pk : NULL);
        if (keyed)
            first_tag(lk, mine, mine + LINK_HELLO_BYTES);
        int rc = xfer(fd, true, mine, LINK_HELLO_BYTES + (keyed ? LINK_TAG_BYTES : 0),
                      deadline_ns, name, "sending", err, errlen);
        if (!rc)
            rc = xfer(fd, false, theirs, sizeof theirs, deadline_ns, name,
                      "waiting for its greeting", err, errlen);
        /* A listener hangs up unanswered only when it is too busy to greet (a worker of this
         * version answers every greeting it reads otherwise): as busy as a LINK_BUSY. */
        if (rc && !hung_up(rc))
            goto fail;
        if (!rc && parse_hello(theirs, version, name, &mode, err, errlen))
            goto foreign;
        if (rc || mode == LINK_BUSY) {
            if (!rc)
                snprintf(err, errlen, "%s turned the connection away: too many connections in "
                         "their handshake", name);
            sodium_memzero(sk, sizeof sk);
            sodium_memzero(lk, sizeof lk);
            return LINK_BUSY_RC;
        }
    } else {
        if (xfer(fd, false, theirs, sizeof theirs, deadline_ns, name, "waiting for its greeting",
                 err, errlen))
            goto fail;
        if (parse_hello(theirs, version, name, &mode, err, errlen) || mode == LINK_BUSY) {
            if (mode == LINK_BUSY)
                snprintf(err, errlen, "%s: a listener's answer as its first message", name);
            goto foreign;
        }
        /* A keyed greeting's tag is read whatever this side holds, so that a refusal is not
         * turned into a reset by bytes left unread. */
        if (mode == LINK_KEYED && xfer(fd, false, tag, sizeof tag, deadline_ns, name,
                                       "waiting for its greeting", err, errlen))
            goto fail;
        bool tag_ok = false;
        if (keyed && mode == LINK_KEYED) {
            first_tag(lk, theirs, want_tag);
            tag_ok = sodium_memcmp(tag, want_tag, sizeof tag) == 0;
        }
        /* Past the cheap check (the key's tag, or a plaintext prima greeting where plaintext is
         * agreed): only now does the connection get a key pair of its own. */
        if (vouched && (tag_ok || (!keyed && mode == LINK_PLAIN)))
            atomic_store(vouched, true);
        if (tag_ok)
            crypto_kx_keypair(pk, sk);
        else if (keyed)
            randombytes_buf(pk, sizeof pk);   /* a refusal looks like any other answer */
        hello_msg(mine, version, keyed ? LINK_KEYED : LINK_PLAIN, keyed ? pk : NULL);
        /* The listener answers whatever it was sent, so that a peer of the other kind learns
         * why it is refused. */
        if (xfer(fd, true, mine, LINK_HELLO_BYTES, deadline_ns, name, "answering", err, errlen))
            goto fail;
        if (keyed && mode == LINK_KEYED && !tag_ok) {
            snprintf(err, errlen, "%s does not hold this cluster key (the tag of its greeting is "
                     "wrong)", name);
            goto fail;
        }
    }
    if (!keyed && mode == LINK_PLAIN)
        return 0;
    if (!keyed) {
        snprintf(err, errlen, "%s requires a cluster key (give this device the same one)", name);
        goto fail;
    }
    if (mode == LINK_PLAIN) {
        snprintf(err, errlen, "%s has no cluster key: nothing is sent to it in plaintext (give "
                 "it the same one)", name);
        goto fail;
    }

    const uint8_t *m1 = dialer ? mine : theirs, *m2 = dialer ? theirs : mine;
    /* session keys: X25519 of both ephemeral keys, bound to the link key and the transcript */
    uint8_t rx[32], tx[32];
    int kx = dialer ? crypto_kx_client_session_keys(rx, tx, pk, sk, theirs + 8)
                    : crypto_kx_server_session_keys(rx, tx, pk, sk, theirs + 8);
    sodium_memzero(sk, sizeof sk);
    if (kx) {
        snprintf(err, errlen, "%s: handshake with an invalid public key", name);
        goto fail;
    }
    transcript_mac(lk, dialer ? "prima d->l" : "prima l->d", m1, m2, tx, sizeof tx, ktx, 32);
    transcript_mac(lk, dialer ? "prima l->d" : "prima d->l", m1, m2, rx, sizeof rx, krx, 32);
    sodium_memzero(rx, sizeof rx);
    sodium_memzero(tx, sizeof tx);

    l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    uint8_t proof[LINK_PROOF_BYTES], want[32], got[LINK_PROOF_BYTES];
    transcript_mac(lk, dialer ? "prima dialer" : "prima listener", m1, m2, NULL, 0, proof, 32);
    transcript_mac(lk, dialer ? "prima listener" : "prima dialer", m1, m2, NULL, 0, want, 32);
    sodium_memzero(lk, sizeof lk);
    crypto_secretstream_xchacha20poly1305_init_push(&l->tx, proof + 32, ktx);
    /* The dialer proves first; the listener checks that proof before it proves anything. */
    if (dialer && xfer(fd, true, proof, sizeof proof, deadline_ns, name, "proving the key", err,
                       errlen))
        goto fail;
    int rc = xfer(fd, false, got, sizeof got, deadline_ns, name, "waiting for its proof", err,
                  errlen);
    if (rc && dialer && strstr(err, "closed"))
        snprintf(err, errlen, "%s does not hold this cluster key (it closed the link in the "
                 "handshake; give every device the same cluster key)", name);
    if (rc)
        goto fail;
    if (sodium_memcmp(got, want, 32)) {
        snprintf(err, errlen, "%s does not hold this cluster key (its handshake proof is wrong)",
                 name);
        goto fail;
    }
    if (crypto_secretstream_xchacha20poly1305_init_pull(&l->rx, got + 32, krx)) {
        snprintf(err, errlen, "%s: bad stream header in the handshake", name);
        goto fail;
    }
    if (!dialer && xfer(fd, true, proof, sizeof proof, deadline_ns, name, "proving the key", err,
                        errlen))
        goto fail;
    sodium_memzero(ktx, sizeof ktx);
    sodium_memzero(krx, sizeof krx);
    *out = l;
    return 0;
foreign:
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(lk, sizeof lk);
    return LINK_FOREIGN;
fail:
    link_free(l);
    sodium_memzero(ktx, sizeof ktx);
    sodium_memzero(krx, sizeof krx);
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(lk, sizeof lk);
    return -1;
}

int link_seal(link_crypto *l, const uint8_t header[16], const struct iovec *body, int n,
              size_t len, struct iovec *out)
{
    size_t wire = LINK_SEALED_HEADER + (len ? len + LINK_ABYTES : 0);
    if (grow(&l->tx_buf, &l->tx_cap, wire) || (len && grow(&l->pt_buf, &l->pt_cap, len)))
        return -1;
    crypto_secretstream_xchacha20poly1305_push(&l->tx, l->tx_buf, NULL, header, 16, NULL, 0,
                                               TAG_MESSAGE);
    if (len) {
        const uint8_t *m = body[0].iov_base;
        if (n != 1) {   /* gather the pieces: a stream message is one contiguous run */
            size_t off = 0;
            for (int i = 0; i < n; i++) {
                memcpy(l->pt_buf + off, body[i].iov_base, body[i].iov_len);
                off += body[i].iov_len;
            }
            m = l->pt_buf;
        }
        crypto_secretstream_xchacha20poly1305_push(&l->tx, l->tx_buf + LINK_SEALED_HEADER, NULL,
                                                   m, len, NULL, 0, TAG_MESSAGE);
    }
    *out = (struct iovec){l->tx_buf, wire};
    return 0;
}

static int open_msg(link_crypto *l, const uint8_t *in, size_t inlen, uint8_t *out)
{
    unsigned char tag;
    unsigned long long outlen;
    if (crypto_secretstream_xchacha20poly1305_pull(&l->rx, out, &outlen, &tag, in, inlen, NULL, 0))
        return -1;
    return tag == TAG_MESSAGE && outlen == inlen - LINK_ABYTES ? 0 : -1;
}

int link_open_header(link_crypto *l, const uint8_t *sealed, uint8_t header[16])
{
    return open_msg(l, sealed, LINK_SEALED_HEADER, header);
}

uint8_t *link_body_buffer(link_crypto *l, size_t len)
{
    return grow(&l->rx_buf, &l->rx_cap, len + LINK_ABYTES) ? NULL : l->rx_buf;
}

int link_open_body(link_crypto *l, size_t len, uint8_t *out)
{
    return open_msg(l, l->rx_buf, len + LINK_ABYTES, out);
}
