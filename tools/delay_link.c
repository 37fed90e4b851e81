/* prima-delay-link — a network cable with latency, for the home-cluster emulator (tools/prima-emu).
 *
 * The kernel here has no netem, so latency is added in user space. Instead of a TCP proxy (which
 * would only delay connections to ports known in advance, and the ring opens connections whose
 * addresses are decided at run time, such as the head's listener), this program joins two TAP
 * interfaces and copies every Ethernet frame from one to the other after a fixed delay, in both
 * directions. One TAP lives in an emulated device's network namespace (its only interface), the
 * other is enslaved to the emulator's bridge. Bandwidth is shaped by tc on the TAPs themselves.
 *
 * Frames are never reordered: each direction is a FIFO whose entries all wait the same delay. When
 * a direction's queue is full the newest frame is dropped, as a router's would be.
 *
 * usage: prima-delay-link [--delay-ms MS] IFACE[@NETNS_PATH] IFACE[@NETNS_PATH]
 * The TAPs exist while this program runs and vanish when it exits (SIGTERM, SIGINT, or the death
 * of its parent process). */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

enum {
    SLOT_BYTES = 2048,   /* a full Ethernet frame at MTU 1500 (the TAPs keep the default MTU) */
    QUEUE_SLOTS = 8192,  /* 16 MiB per direction: far more than any link's bandwidth x delay */
    READ_BURST = 64,     /* frames taken from one TAP before looking at the other again */
};

typedef struct frame {
    int64_t due_ns;
    uint16_t len;
    unsigned char data[SLOT_BYTES];
} frame;

typedef struct direction {
    int from, to;        /* TAP file descriptors */
    frame *slot;         /* ring buffer of QUEUE_SLOTS frames */
    size_t head, count;
    uint64_t dropped;    /* frames lost to a full queue */
} direction;

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("prima-delay-link: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Create TAP `name` in the network namespace at `netns_path` (NULL: ours). A TAP is created in the
 * namespace of the process that attaches to it, so enter that namespace for the ioctl and return. */
static int open_tap(const char *name, const char *netns_path) {
    int home = -1;
    if (netns_path) {
        home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        int target = open(netns_path, O_RDONLY | O_CLOEXEC);
        if (home < 0 || target < 0)
            die("cannot open network namespace %s: %s", netns_path, strerror(errno));
        if (setns(target, CLONE_NEWNET) != 0)
            die("cannot enter network namespace %s: %s", netns_path, strerror(errno));
        close(target);
    }
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        die("cannot open /dev/net/tun: %s", strerror(errno));
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    if (ioctl(fd, TUNSETIFF, &ifr) != 0)
        die("cannot create TAP %s: %s", name, strerror(errno));
    if (home >= 0) {
        if (setns(home, CLONE_NEWNET) != 0)
            die("cannot return to the original network namespace: %s", strerror(errno));
        close(home);
    }
    return fd;
}

/* Parse "IFACE[@NETNS_PATH]" and open it. */
static int open_endpoint(const char *spec) {
    const char *at = strchr(spec, '@');
    size_t len = at ? (size_t)(at - spec) : strlen(spec);
    if (len == 0 || len >= IFNAMSIZ)
        die("bad interface name in '%s' (1 to %d characters)", spec, IFNAMSIZ - 1);
    char name[IFNAMSIZ];
    memcpy(name, spec, len);
    name[len] = '\0';
    return open_tap(name, at ? at + 1 : NULL);
}

/* Move frames that are ready to be read from d->from into the queue, stamped with their due time. */
static void take_frames(direction *d, int64_t delay_ns) {
    static unsigned char scratch[65536];
    for (int n = 0; n < READ_BURST; n++) {
        frame *f = d->count < QUEUE_SLOTS ? &d->slot[(d->head + d->count) % QUEUE_SLOTS] : NULL;
        unsigned char *buf = f ? f->data : scratch;
        ssize_t got = read(d->from, buf, f ? SLOT_BYTES : sizeof scratch);
        if (got < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            die("read from TAP failed: %s", strerror(errno));
        }
        if (!f || got > SLOT_BYTES) {   /* queue full, or a frame larger than the MTU allows */
            d->dropped++;
            continue;
        }
        f->len = (uint16_t)got;
        f->due_ns = now_ns() + delay_ns;
        d->count++;
    }
}

/* Write every frame whose time has come; return the due time of the next one (or INT64_MAX). */
static int64_t release_frames(direction *d, int64_t now) {
    while (d->count > 0) {
        frame *f = &d->slot[d->head];
        if (f->due_ns > now)
            return f->due_ns;
        /* A TAP whose interface is down answers EIO: the frame is lost, as on a cable that is
         * not plugged in yet. */
        if (write(d->to, f->data, f->len) < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != EIO)
                die("write to TAP failed: %s", strerror(errno));
        }
        d->head = (d->head + 1) % QUEUE_SLOTS;
        d->count--;
    }
    return INT64_MAX;
}

int main(int argc, char **argv) {
    double delay_ms = 0;
    int argi = 1;
    if (argi < argc && (strcmp(argv[argi], "-h") == 0 || strcmp(argv[argi], "--help") == 0)) {
        printf("usage: prima-delay-link [--delay-ms MS] IFACE[@NETNS_PATH] IFACE[@NETNS_PATH]\n"
               "Creates two TAP interfaces (each optionally inside the network namespace at\n"
               "NETNS_PATH) and forwards every frame between them after MS milliseconds (one way,\n"
               "default 0), in both directions, until terminated.\n");
        return 0;
    }
    if (argi + 1 < argc && strcmp(argv[argi], "--delay-ms") == 0) {
        char *end;
        delay_ms = strtod(argv[argi + 1], &end);
        if (*end || end == argv[argi + 1] || !(delay_ms >= 0 && delay_ms <= 10000))
            die("bad --delay-ms '%s' (0 to 10000)", argv[argi + 1]);
        argi += 2;
    }
    if (argc - argi != 2)
        die("expected two interfaces (see --help)");

    /* The emulator that started us may be killed without a chance to clean up: follow it. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* Signals are taken only inside ppoll, so a stop request cannot slip in between the check of
     * stop_requested and the wait. */
    sigset_t blocked, waiting;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigprocmask(SIG_BLOCK, &blocked, &waiting);

    int tap_a = open_endpoint(argv[argi]);
    int tap_b = open_endpoint(argv[argi + 1]);
    int64_t delay_ns = (int64_t)(delay_ms * 1e6);
    direction dir[2] = {{.from = tap_a, .to = tap_b}, {.from = tap_b, .to = tap_a}};
    for (int i = 0; i < 2; i++) {
        dir[i].slot = malloc(sizeof(frame) * QUEUE_SLOTS);
        if (!dir[i].slot)
            die("out of memory for the frame queues");
    }

    while (!stop_requested) {
        int64_t now = now_ns();
        int64_t next = INT64_MAX;
        for (int i = 0; i < 2; i++) {
            int64_t due = release_frames(&dir[i], now);
            if (due < next)
                next = due;
        }
        struct timespec timeout, *timeout_p = NULL;
        if (next != INT64_MAX) {
            int64_t wait = next - now_ns();
            if (wait < 0)
                wait = 0;
            timeout.tv_sec = (time_t)(wait / 1000000000);
            timeout.tv_nsec = (long)(wait % 1000000000);
            timeout_p = &timeout;
        }
        struct pollfd pfd[2] = {{.fd = tap_a, .events = POLLIN}, {.fd = tap_b, .events = POLLIN}};
        int ready = ppoll(pfd, 2, timeout_p, &waiting);
        if (ready < 0 && errno != EINTR)
            die("poll failed: %s", strerror(errno));
        for (int i = 0; i < 2 && ready > 0; i++) {
            if (pfd[i].revents & (POLLERR | POLLHUP | POLLNVAL))
                die("TAP interface %s went away", argv[argi + i]);
            if (pfd[i].revents & POLLIN)
                take_frames(&dir[i], delay_ns);
        }
    }
    if (dir[0].dropped || dir[1].dropped)
        fprintf(stderr, "prima-delay-link: dropped %llu + %llu frames (queue full)\n",
                (unsigned long long)dir[0].dropped, (unsigned long long)dir[1].dropped);
    return 0;
}
