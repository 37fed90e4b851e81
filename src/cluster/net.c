/* net.c — TCP plumbing for the ring (net.h): non-blocking sockets with poll-bounded waits, so
 * that a stalled or vanished peer costs a bounded time instead of a hang. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/net.h"
#include "util/nss.h"

int64_t net_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int net_parse_addr(const char *s, char *host, size_t hostcap, int *port, char *err, size_t errlen)
{
    const char *colon, *hbeg = s, *hend;
    if (*s == '[') {
        hend = strchr(s, ']');
        if (!hend || hend[1] != ':') {
            snprintf(err, errlen, "address '%s': expected [v6addr]:port", s);
            return -1;
        }
        hbeg = s + 1;
        colon = hend + 1;
    } else {
        colon = strrchr(s, ':');
        hend = colon;
    }
    if (!colon || hend == hbeg) {
        snprintf(err, errlen, "address '%s': expected host:port", s);
        return -1;
    }
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || p < 1 || p > 65535) {
        snprintf(err, errlen, "address '%s': port must be 1..65535", s);
        return -1;
    }
    size_t hl = (size_t)(hend - hbeg);
    if (hl >= hostcap) {
        snprintf(err, errlen, "address '%s': host name too long", s);
        return -1;
    }
    memcpy(host, hbeg, hl);
    host[hl] = 0;
    *port = (int)p;
    return 0;
}

static void tune_socket(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static struct addrinfo *resolve(const char *host, int port, bool passive, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    if (passive)
        hints.ai_flags = AI_PASSIVE;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo *res = NULL;
    nss_pin_builtin();
    int rc = getaddrinfo(host && *host ? host : NULL, ps, &hints, &res);
    if (rc && nss_static() && host && *host)
        snprintf(err, errlen,
                 "%s:%d: cannot resolve '%s' (%s): this static build looks names up in "
                 "/etc/hosts and the DNS of /etc/resolv.conf only (Android has no resolv.conf): "
                 "give its numeric address, or let the head discover its workers",
                 host, port, host, gai_strerror(rc));
    else if (rc)
        snprintf(err, errlen, "%s:%d: %s", host ? host : "*", port, gai_strerror(rc));
    return rc ? NULL : res;
}

int net_listen(const char *host, int port, int *bound_port, char *err, size_t errlen)
{
    struct addrinfo *res = resolve(host, port, true, err, errlen);
    if (!res)
        return -1;
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 16) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "listen on %s:%d: %s", host && *host ? host : "*", port, strerror(saved));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    /* accept() must never block the event loop when a client gave up in between. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Non-blocking connect, waited for with poll so an unreachable host costs at most timeout_ms. */
static int connect_one(const struct addrinfo *ai, int timeout_ms)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return -errno;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            int e = errno;
            close(fd);
            return -e;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int rc;
        do
            rc = poll(&p, 1, timeout_ms);
        while (rc < 0 && errno == EINTR);
        if (rc == 0) {
            close(fd);
            return -ETIMEDOUT;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            close(fd);
            return -soerr;
        }
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    tune_socket(fd);
    return fd;
}

int net_connect(const char *host, int port, int timeout_ms, char *err, size_t errlen)
{
    struct addrinfo *res = resolve(host, port, false, err, errlen);
    if (!res)
        return -1;
    int fd = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = connect_one(ai, timeout_ms);
        if (fd >= 0)
            break;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "connect to %s:%d: %s", host, port, strerror(-fd));
        return -1;
    }
    return fd;
}

int net_accept(int lfd, char *peer, size_t peercap)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0)
        return -1;
    tune_socket(fd);
    char host[NET_HOST_MAX] = "?";
    int port = 0;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
    }
    snprintf(peer, peercap, "%s:%d", host, port);
    return fd;
}

/* Wait until fd is ready for `events`, or stall_ms passes. 1 = ready, 0 = timed out. */
static int wait_fd(int fd, short events, int stall_ms)
{
    struct pollfd p = {.fd = fd, .events = events};
    int rc;
    do
        rc = poll(&p, 1, stall_ms);
    while (rc < 0 && errno == EINTR);
    return rc > 0;
}

/* How long the next wait may be: stall_ms, cut to what is left before the deadline (-1: none
 * left). */
static int wait_budget(int stall_ms, int64_t deadline_ns)
{
    if (!deadline_ns)
        return stall_ms;
    int64_t left = (deadline_ns - net_now_ns()) / 1000000;
    if (left <= 0)
        return -1;
    return left < stall_ms ? (int)left : stall_ms;
}

int net_send_all(int fd, const struct iovec *iov, int iovcnt, int stall_ms)
{
    return net_send_until(fd, iov, iovcnt, stall_ms, 0);
}

int net_send_until(int fd, const struct iovec *iov_in, int iovcnt, int stall_ms,
                   int64_t deadline_ns)
{
    struct iovec iov[8];
    if (iovcnt > 8)
        return -EINVAL;
    memcpy(iov, iov_in, sizeof(struct iovec) * (size_t)iovcnt);
    int first = 0;
    while (first < iovcnt) {
        struct msghdr mh = {.msg_iov = iov + first, .msg_iovlen = (size_t)(iovcnt - first)};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return errno == EPIPE ? NET_EOF : -errno;
            int ms = wait_budget(stall_ms, deadline_ns);
            if (ms < 0 || !wait_fd(fd, POLLOUT, ms))
                return NET_STALLED;
            continue;
        }
        size_t left = (size_t)n;
        while (first < iovcnt && left >= iov[first].iov_len)
            left -= iov[first++].iov_len;
        if (first < iovcnt) {
            iov[first].iov_base = (char *)iov[first].iov_base + left;
            iov[first].iov_len -= left;
        }
    }
    return 0;
}

int net_recv_until(int fd, void *buf, size_t n, int stall_ms, int64_t deadline_ns)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, (char *)buf + got, n - got, MSG_DONTWAIT);
        if (r == 0)
            return NET_EOF;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return errno == ECONNRESET ? NET_EOF : -errno;
            int ms = wait_budget(stall_ms, deadline_ns);
            if (ms < 0 || !wait_fd(fd, POLLIN, ms))
                return NET_STALLED;
            continue;
        }
        got += (size_t)r;
    }
    return 0;
}

const char *net_strerror(int rc)
{
    if (rc == NET_EOF)
        return "connection closed by peer";
    if (rc == NET_STALLED)
        return "peer stopped responding";
    return strerror(-rc);
}
