/* manifest.h — what a model file holds, chunk by chunk: the BLAKE2b-256 of every 4 MiB of it,
 * and the hash of that list, which is the model identity the ring checks.
 *
 * Serialized (little-endian), the form that crosses the wire (MANIFEST) and is cached on disk:
 *     "PRMAMAN1" | u64 file size | u64 header bytes (GGUF metadata and tensor table: everything
 *     before the tensor data) | u32 chunk bytes | u32 chunks | chunks x 32-byte BLAKE2b-256
 * Chunk i covers file bytes [i * chunk, min((i + 1) * chunk, size)). The identity is the
 * BLAKE2b-256 of the serialized form, so two devices with the same identity hold the same bytes,
 * weights included, and a device that holds a manifest can check every chunk it is sent.
 *
 * A device holding the file computes the manifest once (reading the whole file) and caches it
 * beside the model (FILE.prima-manifest), or, when that directory is not writable, under
 * $PRIMA_CACHE_DIR, $XDG_CACHE_HOME/prima or ~/.cache/prima; the cache is used while the file's
 * size, modification time and inode are those recorded with it. */
#ifndef PRIMA_MANIFEST_H
#define PRIMA_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MANIFEST_CHUNK (4u << 20)
#define MANIFEST_HASH 32
#define MANIFEST_FIXED 32              /* bytes before the chunk hashes */
/* Bound on a serialized manifest (a 1 TiB file in 4 MiB chunks): the MANIFEST frame's bound. */
#define MANIFEST_MAX (MANIFEST_FIXED + (1u << 18) * MANIFEST_HASH)

typedef struct manifest {
    uint64_t file_size, header_bytes;
    uint32_t chunk_bytes, n_chunks;
    const uint8_t *hashes;             /* n_chunks x MANIFEST_HASH, inside bytes */
    uint8_t root[MANIFEST_HASH];       /* the model identity */
    uint8_t *bytes;                    /* the serialized form */
    size_t len;
} manifest;

/* The manifest of the file at path (map: its size bytes, mapped; header_bytes: where its tensor
 * data starts), from the cache when it is current, else computed and cached (best effort).
 * NULL with err on failure. */
manifest *manifest_for_file(const char *path, const uint8_t *map, uint64_t size,
                            uint64_t header_bytes, char *err, size_t errlen);
/* Check and copy a serialized manifest (what a peer sent, what a store kept). NULL with err. */
manifest *manifest_parse(const void *buf, size_t len, char *err, size_t errlen);
void manifest_free(manifest *m);

/* Bytes of chunk i (the last one may be shorter). */
uint32_t manifest_chunk_len(const manifest *m, uint32_t i);
/* Whether data (len bytes) is chunk i exactly. */
bool manifest_chunk_ok(const manifest *m, uint32_t i, const void *data, size_t len);
/* Set mark[c] for every chunk c that overlaps file bytes [begin, end). */
void manifest_mark(const manifest *m, uint64_t begin, uint64_t end, uint8_t *mark);

#endif
