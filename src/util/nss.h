/* nss.h — name lookups in a statically linked prima (scripts/cross.sh).
 *
 * glibc looks host names and users up through the modules /etc/nsswitch.conf names. A static
 * binary has "files" and "dns" built in, but would dlopen any other module (mdns on Raspberry
 * Pi OS, systemd, sss), a shared object built for the shared libc, which may crash it; Android
 * has no nsswitch.conf and no resolv.conf at all. So a static build pins those lookups to the
 * built-in modules: host names come from /etc/hosts and the DNS servers of /etc/resolv.conf,
 * numeric addresses and discovery need neither. A dynamic build uses the system's switch. */
#ifndef PRIMA_UTIL_NSS_H
#define PRIMA_UTIL_NSS_H

#include <stdbool.h>

/* Pin hosts to "files dns" and passwd and group to "files" in a static build (once, before
 * any lookup; later calls do nothing); nothing in a dynamic one. */
void nss_pin_builtin(void);

/* Was this binary linked statically (so that lookups are pinned as above)? */
bool nss_static(void);

#endif
