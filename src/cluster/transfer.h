/* transfer.h — a holder of the model file sending workers that keep a store (store.h) the
 * chunks they ask for: the loop of the head's side of MANIFEST / FETCH -> WANT -> CHUNK.
 *
 * Each active link has been sent a MANIFEST or a FETCH; its worker answers with WANTs (the
 * chunks it lacks), the holder sends those chunks, one to each link in turn so that several
 * workers fill at once, and a link is done when its worker sends an empty WANT. Frames other
 * than WANT (pings, counters, errors) go to the caller's `other`. */
#ifndef PRIMA_TRANSFER_H
#define PRIMA_TRANSFER_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/manifest.h"
#include "cluster/proto.h"

typedef struct transfer_hooks {
    void *ctx;
    /* A frame other than WANT from link i: 1 handled, 0 not expected here, -1 a failure (the
     * hook has said why). */
    int (*other)(void *ctx, int i, const frame *f);
    /* Link i's progress: bytes sent so far of total, seconds since its first WANT; a few times
     * a second, and once with done == total at its end. NULL: none. */
    void (*progress)(void *ctx, int i, uint64_t done, uint64_t total, double seconds);
} transfer_hooks;

/* Serve links[i] for every i < n with active[i] (cleared as each is done) from map, the file
 * mf describes. 0; or -1 with err and *failed the link at fault (-1: none, e.g. poll failed;
 * also -1 with err empty after `other` failed). */
int transfer_serve(conn *const *links, bool *active, int n, const manifest *mf,
                   const uint8_t *map, const transfer_hooks *h, int *failed, char *err,
                   size_t errlen);

/* Which other worker each worker should fetch from, so that the holder's link carries less:
 * need[i * n_chunks + c] whether worker i needs chunk c and lacks it, have[j * n_chunks + c]
 * whether worker j holds it. from[i]: the worker holding the most of what i needs (-1: none
 * holds any), and those chunks as ranges in want[i] (at most PROTO_FROM_MAX of them; the rest
 * come from the holder of the file). */
void transfer_peers(int n, const manifest *mf, const uint8_t *need, const uint8_t *have,
                    int *from, msg_want *want);

#endif
