/* conns.c — the server's own accept loop in front of libmicrohttpd.
 *
 * libmicrohttpd stops accepting once it holds its connection limit, and the connections past it
 * wait in the kernel's backlog, unanswered, until one of those it holds closes: an idle client
 * could hang a normal request for as long as its idle timeout. Here every connection is
 * accepted at once: past the limit and its spare places it is reset at once; the others go to
 * libmicrohttpd (MHD_add_connection), which answers those past the limit 503 (server.c). The
 * count is of the connections really open: up at accept, down when libmicrohttpd says one
 * closed; and a connection is past the limit when the limit was reached as it came, not when
 * its request is read (by then later ones may have come: 150 clients at once against a limit
 * of 128 would all be counted as the 150th). A request must arrive whole (headers and body) within request_ms of the connection's
 * start or of its previous answer, however its bytes trickle in: the loop shuts down the socket
 * of one past its deadline, and libmicrohttpd then closes it. */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/internal.h"

/* How often the loop looks for requests past their deadline. */
#define REAP_MS 200

typedef struct conn_slot {
    int fd;                      /* -1: free */
    int64_t deadline_ns;         /* 0: none (a request is being answered) */
    unsigned open_before;        /* connections open when it came */
} conn_slot;

struct srv_conns {
    int lfd, port, limit, spare;
    int64_t request_ns;
    int stop_pipe[2];
    struct MHD_Daemon *d;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;          /* what follows */
    unsigned open;
    conn_slot *slot;             /* limit + spare */
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

srv_conns *srv_conns_listen(const char *host, int port, int limit, int spare, int request_ms,
                            char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host, ps, &hints, &ai);
    if (gai) {
        snprintf(err, errlen, "listen host %s: %s", host, gai_strerror(gai));
        return NULL;
    }
    srv_conns *cs = calloc(1, sizeof *cs);
    conn_slot *slot = calloc((size_t)(limit + spare), sizeof *slot);
    if (!cs || !slot) {
        freeaddrinfo(ai);
        free(cs);
        free(slot);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *cs = (srv_conns){.limit = limit, .spare = spare, .slot = slot,
                      .request_ns = (int64_t)request_ms * 1000000, .stop_pipe = {-1, -1}};
    for (int i = 0; i < limit + spare; i++)
        slot[i].fd = -1;
    pthread_mutex_init(&cs->mu, NULL);
    cs->lfd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1;
    if (cs->lfd < 0 || setsockopt(cs->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(cs->lfd, ai->ai_addr, ai->ai_addrlen) || listen(cs->lfd, 128) ||
        pipe2(cs->stop_pipe, O_CLOEXEC)) {
        snprintf(err, errlen, "cannot listen on %s port %d: %s", host, port, strerror(errno));
        freeaddrinfo(ai);
        srv_conns_free(cs);
        return NULL;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(cs->lfd, (struct sockaddr *)&ss, &sl);
    cs->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
    return cs;
}

int srv_conns_port(const srv_conns *cs)
{
    return cs->port;
}


/* A reset rather than a close: the client learns at once, and nothing lingers here. */
static void reset(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

static void accept_one(srv_conns *cs)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(cs->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    pthread_mutex_lock(&cs->mu);
    conn_slot *s = NULL;
    for (int i = 0; i < cs->limit + cs->spare && !s; i++)
        if (cs->slot[i].fd < 0)
            s = &cs->slot[i];
    if (s) {
        s->fd = fd;
        s->deadline_ns = now_ns() + cs->request_ns;
        s->open_before = cs->open++;
    }
    pthread_mutex_unlock(&cs->mu);
    if (!s) {
        reset(fd);
        return;
    }
    /* It closes fd when it fails; the slot is then free again. */
    if (MHD_add_connection(cs->d, fd, (struct sockaddr *)&ss, sl) != MHD_YES) {
        pthread_mutex_lock(&cs->mu);
        if (s->fd == fd) {
            s->fd = -1;
            cs->open--;
        }
        pthread_mutex_unlock(&cs->mu);
    }
}

static void reap(srv_conns *cs)
{
    int64_t now = now_ns();
    pthread_mutex_lock(&cs->mu);
    for (int i = 0; i < cs->limit + cs->spare; i++) {
        conn_slot *s = &cs->slot[i];
        /* the slot is freed (under this lock) before libmicrohttpd closes its fd */
        if (s->fd >= 0 && s->deadline_ns && now > s->deadline_ns) {
            shutdown(s->fd, SHUT_RDWR);
            s->deadline_ns = 0;
        }
    }
    pthread_mutex_unlock(&cs->mu);
}

static void *accept_main(void *arg)
{
    srv_conns *cs = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = cs->lfd, .events = POLLIN},
                              {.fd = cs->stop_pipe[0], .events = POLLIN}};
        int rc = poll(p, 2, REAP_MS);
        if (rc < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        if (p[0].revents & POLLIN)
            accept_one(cs);
        reap(cs);
    }
    return NULL;
}

int srv_conns_run(srv_conns *cs, struct MHD_Daemon *d, char *err, size_t errlen)
{
    cs->d = d;
    if (pthread_create(&cs->thread, NULL, accept_main, cs)) {
        snprintf(err, errlen, "cannot start the accepting thread");
        return -1;
    }
    cs->started = true;
    return 0;
}

void srv_conns_stop(srv_conns *cs)
{
    if (!cs || !cs->started)
        return;
    char c = 1;
    ssize_t n = write(cs->stop_pipe[1], &c, 1);
    (void)n;
    pthread_join(cs->thread, NULL);
    cs->started = false;
}

void srv_conns_free(srv_conns *cs)
{
    if (!cs)
        return;
    srv_conns_stop(cs);
    if (cs->lfd >= 0)
        close(cs->lfd);
    for (int i = 0; i < 2; i++)
        if (cs->stop_pipe[i] >= 0)
            close(cs->stop_pipe[i]);
    pthread_mutex_destroy(&cs->mu);
    free(cs->slot);
    free(cs);
}

void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode code)
{
    srv_conns *cs = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        pthread_mutex_lock(&cs->mu);
        for (int i = 0; ci && i < cs->limit + cs->spare; i++)
            if (cs->slot[i].fd == ci->connect_fd)
                *socket_context = &cs->slot[i];
        pthread_mutex_unlock(&cs->mu);
        return;
    }
    conn_slot *s = *socket_context;
    if (!s)
        return;
    pthread_mutex_lock(&cs->mu);
    s->fd = -1;
    cs->open--;
    pthread_mutex_unlock(&cs->mu);
    *socket_context = NULL;
}

/* The connection's slot, from its socket context. */
static conn_slot *slot_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

unsigned srv_conns_open_before(srv_conns *cs, struct MHD_Connection *c)
{
    conn_slot *s = slot_of(c);
    pthread_mutex_lock(&cs->mu);
    unsigned n = s ? s->open_before : 0;
    pthread_mutex_unlock(&cs->mu);
    return n;
}

void srv_conns_deadline(srv_conns *cs, struct MHD_Connection *c, bool arm)
{
    conn_slot *s = slot_of(c);
    if (!s)
        return;
    pthread_mutex_lock(&cs->mu);
    s->deadline_ns = arm ? now_ns() + cs->request_ns : 0;
    pthread_mutex_unlock(&cs->mu);
}
