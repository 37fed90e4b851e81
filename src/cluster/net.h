/* net.h — TCP plumbing for the ring: addresses, listening, connecting, and whole-buffer I/O that
 * gives up when the peer makes no progress for a while (so a stuck peer can never hang us).
 *
 * Every connected socket gets TCP_NODELAY (a ring hop is one small-ish message answered only by
 * the next hop; Nagle's delay would sit on the critical path) and never raises SIGPIPE. */
#ifndef PRIMA_NET_H
#define PRIMA_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define NET_HOST_MAX 256

/* Monotonic clock in nanoseconds. */
int64_t net_now_ns(void);

/* "host:port" or "[v6addr]:port" -> host, port. */
int net_parse_addr(const char *s, char *host, size_t hostcap, int *port, char *err, size_t errlen);

/* Listen on host:port (port 0 = any free port; *bound_port gets the real one). */
int net_listen(const char *host, int port, int *bound_port, char *err, size_t errlen);
/* Connect with a time limit. Returns the socket or -1 with a reason naming host:port. */
int net_connect(const char *host, int port, int timeout_ms, char *err, size_t errlen);
/* Accept one connection; peer gets "addr:port". Returns -1 when there is none (EAGAIN) or on
 * error. */
int net_accept(int lfd, char *peer, size_t peercap);

/* Results of the whole-buffer calls: 0 = done, NET_EOF = peer closed, NET_STALLED = no byte
 * moved for stall_ms, otherwise -errno. */
#define NET_EOF (-100000)
#define NET_STALLED (-100001)
int net_send_all(int fd, const struct iovec *iov, int iovcnt, int stall_ms);
/* The same, and also NET_STALLED once the monotonic clock passes deadline_ns (0: no deadline),
 * however steadily the bytes trickle in: what bounds a whole exchange, not just one pause. */
int net_send_until(int fd, const struct iovec *iov, int iovcnt, int stall_ms, int64_t deadline_ns);
int net_recv_until(int fd, void *buf, size_t n, int stall_ms, int64_t deadline_ns);
/* Human-readable form of those results. */
const char *net_strerror(int rc);

#endif
