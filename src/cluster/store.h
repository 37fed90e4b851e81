/* store.h — a worker's store of models it was sent: for each model (by identity), a sparse
 * file laid out as the original (same offsets, so mapping, paging, prefetch and release work
 * unchanged), its manifest, and a record of the chunks present and verified.
 *
 * Layout: DIR/<identity in hex>/{manifest, model.gguf, present}; `present` has one byte per
 * chunk, set only after the chunk's bytes matched their hash and were written, so a transfer
 * cut short resumes with what is recorded. The first time a model is opened after the store
 * is (store_check does it for all at start-up, so that a head is not kept waiting while a
 * large model is read), every chunk recorded present is hashed again: a damaged one is
 * forgotten (and so fetched again). The store holds at most
 * max_bytes of chunks: before a transfer the least recently used other models are removed to
 * make room, or the transfer is refused naming the bytes it needs. One worker uses a store at a
 * time (a lock file).
 *
 * Also here: which chunks a device needs for a plan (store_plan_chunks), the one rule the head
 * (which sends them) and the worker (which checks them before computing) both apply. */
#ifndef PRIMA_STORE_H
#define PRIMA_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/device.h"
#include "cluster/manifest.h"

typedef struct store store;

/* Open (creating it) the store at dir; max_bytes 0: no limit. NULL with err. */
store *store_open(const char *dir, uint64_t max_bytes, char *err, size_t errlen);
void store_free(store *s);
const char *store_dir(const store *s);

/* Hash again the recorded chunks of every model in the store: *models, and *damaged chunks
 * forgotten. 0. */
int store_check(store *s, int *models, uint32_t *damaged);
/* The model with this identity, opened (the first time, its present chunks hashed again;
 * *damaged says how many failed and were forgotten) when the store holds its manifest; else
 * NULL. Opening a model closes the one opened before. */
const manifest *store_find(store *s, const uint8_t id[MANIFEST_HASH], uint32_t *damaged);
/* Take the manifest a holder sent for identity id (it must hash to id) and open that model,
 * creating its entry when new. 0, or -1 with err. */
int store_take_manifest(store *s, const uint8_t id[MANIFEST_HASH], const void *bytes,
                        size_t len, char *err, size_t errlen);
/* Of the model opened: its manifest (NULL: none opened), its file, and whether chunk i is present and verified. */
const manifest *store_opened(const store *s);
const char *store_model_path(const store *s);
bool store_has(const store *s, uint32_t i);
/* The chunks of mark (n_chunks flags) not present, as up to max (first, count) pairs in
 * ranges; returns the number of pairs, with *bytes (may be NULL) the bytes of all the missing
 * chunks (not only those listed). */
int store_missing(const store *s, const uint8_t *mark, uint32_t *ranges, int max,
                  uint64_t *bytes);
/* Make room for `bytes` more of the model opened: remove the least recently used other models
 * while the store would exceed its bound. 0, or -1 with err naming the bytes needed. */
int store_reserve(store *s, uint64_t bytes, char *err, size_t errlen);
/* Chunk i of the model opened: 0 when it matched its hash and was written and recorded, 1 when
 * it did not match (nothing written), -1 with err on a write error. */
int store_put(store *s, uint32_t i, const void *data, size_t len, char *err, size_t errlen);
/* Bytes of chunks present, in every model of the store. */
uint64_t store_used(store *s);

/* The chunks device `rank` of plan p reads (marks n_chunks flags of m's manifest): the header,
 * its layers, the tensors every device shares and, when it decodes on its own (it holds every
 * layer, the head none), the head's. */
void store_plan_chunks(const ring_model *m, const ring_plan *p, int rank, uint8_t *mark);

#endif
