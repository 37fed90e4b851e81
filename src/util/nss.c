/* nss.c — name lookups pinned to glibc's built-in modules in a static build (nss.h). */
#include <pthread.h>

#include "util/nss.h"

#ifdef PRIMA_STATIC
#include <nss.h>

static void pin(void)
{
    __nss_configure_lookup("hosts", "files dns");
    __nss_configure_lookup("passwd", "files");
    __nss_configure_lookup("group", "files");
}
#endif

void nss_pin_builtin(void)
{
#ifdef PRIMA_STATIC
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pin);
#endif
}

bool nss_static(void)
{
#ifdef PRIMA_STATIC
    return true;
#else
    return false;
#endif
}
