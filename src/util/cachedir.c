/* cachedir.c — the user's cache directory (cachedir.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/cachedir.h"

int cache_dir(char *out, size_t cap)
{
    const char *base = getenv("PRIMA_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    int n;
    if (base && *base)
        n = snprintf(out, cap, "%s", base);
    else if (xdg && *xdg)
        n = snprintf(out, cap, "%s/prima", xdg);
    else if (home && *home)
        n = snprintf(out, cap, "%s/.cache/prima", home);
    else
        return -1;
    if (n < 0 || (size_t)n >= cap)
        return -1;
    if (mkdir(out, 0700) == 0 || errno == EEXIST)
        return 0;
    /* $HOME/.cache may not exist yet */
    char *s = strrchr(out, '/');
    if (!s || s == out)
        return -1;
    *s = 0;
    int bad = mkdir(out, 0700) && errno != EEXIST;
    *s = '/';
    return bad || (mkdir(out, 0700) && errno != EEXIST) ? -1 : 0;
}
