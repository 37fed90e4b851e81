/* cachedir.h — the user's cache directory: where prima keeps what it can compute again but
 * would rather not (cluster/manifest.h: the manifest of a model in a read-only directory;
 * sched/experts.h: a model's routing calibration), never beside a model it may not write to.
 * It is $PRIMA_CACHE_DIR, else $XDG_CACHE_HOME/prima, else ~/.cache/prima. Needs nothing but
 * libc. */
#ifndef PRIMA_UTIL_CACHEDIR_H
#define PRIMA_UTIL_CACHEDIR_H

#include <stddef.h>

/* The directory's path into out (cap bytes), created when missing (its parent too: ~/.cache
 * may not exist yet). 0, or -1 when no variable names one or it cannot be created. */
int cache_dir(char *out, size_t cap);

#endif
