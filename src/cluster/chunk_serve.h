/* chunk_serve.h — a worker serving chunks of the model it keeps in its store to another worker
 * of the same session (a FETCHER link; the head said in FROM which ranges it holds), so that
 * the head's own link carries less.
 *
 * The link gets one WANT and is sent every chunk it names, read from the store's file, then
 * closed; the fetcher checks each against the manifest (and asks the head for any that fail or
 * never come). It runs on a thread of its own, so the worker's session goes on meanwhile. */
#ifndef PRIMA_CHUNK_SERVE_H
#define PRIMA_CHUNK_SERVE_H

#include <stddef.h>

#include "cluster/manifest.h"
#include "cluster/proto.h"

/* Serve c (moved in: the thread owns it from here) from the file at path, which mf describes
 * (its sizes are copied). done(ctx) is called when the thread ends. 0, or -1 with err (c is
 * then closed, and done is not called). */
int chunk_serve_start(conn *c, const char *path, const manifest *mf, void (*done)(void *ctx),
                      void *ctx, char *err, size_t errlen);

#endif
