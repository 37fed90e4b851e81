/* guard.c — which requests a browser may make of the server.
 *
 * A page on any website can make the browser send requests to the server: simple ones (a POST
 * with a text/plain body, in "no-cors" mode) without asking, and, through DNS rebinding (the
 * website's name made to resolve to this server's address), same-origin ones whose answers it
 * reads. So: the JSON endpoints take only application/json bodies, which a page can send to
 * another origin only after a CORS preflight; a request whose Origin is not the server's own
 * is refused unless it is one the server allows (srv_config.cors_origins); and without an API
 * key, the Host a request names must be this server's: an IP address, localhost, the bound
 * name, or this machine's name (a rebinding website's name is none of these). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "server/internal.h"

const char *srv_origin_form(const char *url, char *authority, size_t cap)
{
    authority[0] = '\0';
    size_t skip = !strncasecmp(url, "http://", 7) ? 7 : !strncasecmp(url, "https://", 8) ? 8 : 0;
    if (!skip)
        return url;
    const char *a = url + skip, *path = strchr(a, '/');
    size_t n = path ? (size_t)(path - a) : strlen(a);
    snprintf(authority, cap, "%.*s", (int)n, a);
    return path ? path : "/";
}

/* The host of an authority ("name:port", "[v6]:port"), lower-case, without the port. */
static void host_part(const char *authority, char *out, size_t cap)
{
    const char *end;
    if (authority[0] == '[') {
        authority++;
        end = strchr(authority, ']');
    } else {
        end = strchr(authority, ':');
    }
    size_t n = end ? (size_t)(end - authority) : strlen(authority);
    if (n >= cap)
        n = cap - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)tolower((unsigned char)authority[i]);
    out[n] = '\0';
}

/* An IPv4 or IPv6 address written out: no name to rebind. */
static bool ip_literal(const char *h)
{
    if (!*h)
        return false;
    if (strchr(h, ':'))
        return strspn(h, "0123456789abcdef:.") == strlen(h);
    return strspn(h, "0123456789.") == strlen(h);
}

bool srv_host_allowed(const srv_config *c, const char *authority)
{
    if (c->api_key)
        return true;   /* a rebinding website does not hold the key */
    char host[256], bound[256], mine[256];
    host_part(authority, host, sizeof host);
    host_part(c->host, bound, sizeof bound);
    if (ip_literal(host) || !strcmp(host, "localhost") || !strcmp(host, bound))
        return true;
    if (gethostname(mine, sizeof mine - 8))
        return false;
    mine[sizeof mine - 9] = '\0';
    for (char *p = mine; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    size_t n = strlen(mine);
    /* the machine's name, and its mDNS name */
    return !strcmp(host, mine) || (!strncmp(host, mine, n) && !strcmp(host + n, ".local"));
}

/* Whether origin ("scheme://authority") is one of the allowed list ("*", or origins separated
 * by commas). */
static bool origin_listed(const char *list, const char *origin)
{
    if (!list)
        return false;
    size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ",");
        if ((k == 1 && *p == '*') || (k == n && !strncasecmp(p, origin, n)))
            return true;
        p += k + (p[k] == ',');
    }
    return false;
}

enum srv_origin srv_origin_check(const srv_config *c, const char *origin, const char *host)
{
    if (!origin)
        return SRV_ORIGIN_SAME;   /* not a browser's cross-origin request */
    const char *sep = strstr(origin, "://");
    if (sep && host && !strcasecmp(sep + 3, host))
        return SRV_ORIGIN_SAME;
    return origin_listed(c->cors_origins, origin) ? SRV_ORIGIN_ALLOWED : SRV_ORIGIN_REFUSED;
}

bool srv_json_type(const char *content_type)
{
    if (!content_type)
        return false;
    while (*content_type == ' ')
        content_type++;
    size_t n = strlen("application/json");
    return !strncasecmp(content_type, "application/json", n) &&
           (!content_type[n] || content_type[n] == ';' || content_type[n] == ' ');
}
