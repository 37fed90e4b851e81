/* local_workers.c — ring workers forked from this process on loopback (local_workers.h). Each
 * child gets its listening socket already bound, so the head knows every port before any worker
 * runs, and dies with its parent (PR_SET_PDEATHSIG), so none outlives a killed head. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "app/local_workers.h"
#include "cluster/net.h"
#include "util/logline.h"

void local_workers_stop(local_workers *w)
{
    for (int i = 0; i < w->n; i++)
        if (w->pid[i] > 0)
            kill(w->pid[i], SIGTERM);
    /* A worker stops within a poll period; give them two seconds, then insist. */
    struct timespec tick = {0, 20 * 1000000};
    for (int t = 0; t < 100; t++) {
        int alive = 0;
        for (int i = 0; i < w->n; i++)
            if (w->pid[i] > 0 && waitpid(w->pid[i], NULL, WNOHANG) == 0)
                alive++;
            else
                w->pid[i] = 0;
        if (!alive)
            return;
        nanosleep(&tick, NULL);
    }
    for (int i = 0; i < w->n; i++)
        if (w->pid[i] > 0) {
            kill(w->pid[i], SIGKILL);
            waitpid(w->pid[i], NULL, 0);
            w->pid[i] = 0;
        }
}

static int join_cgroup(const char *dir)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = fprintf(f, "%d\n", (int)getpid()) > 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

int local_workers_start(local_workers *w, int n, const serve_opts *base, const char *cgroup,
                        int (*serve)(const serve_opts *o), char *err, size_t errlen)
{
    int fds[PRIMA_MAX_DEVICES];
    w->n = 0;
    for (int i = 0; i < n; i++) {
        fds[i] = net_listen("127.0.0.1", 0, &w->port[i], err, errlen);
        if (fds[i] < 0) {
            for (int j = 0; j < i; j++)
                close(fds[j]);
            return -1;
        }
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            snprintf(err, errlen, "fork: %s", strerror(errno));
            for (int j = i; j < n; j++)
                close(fds[j]);
            local_workers_stop(w);
            return -1;
        }
        if (pid == 0) {
            /* Never outlive the parent, even when it is killed outright. */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent)
                _exit(1);
            for (int j = 0; j < n; j++)
                if (j != i)
                    close(fds[j]);
            if (cgroup && join_cgroup(cgroup)) {
                log_line(stderr, "prima: ", "cannot join the cgroup %s: %s", cgroup,
                         strerror(errno));
                _exit(1);
            }
            serve_opts o = *base;
            o.listen_fd = fds[i];
            _exit(serve(&o));
        }
        w->pid[i] = pid;
        w->n = i + 1;
        close(fds[i]);
    }
    return 0;
}

void local_workers_list(const local_workers *w, char *out, size_t cap)
{
    size_t off = 0;
    out[0] = 0;
    for (int i = 0; i < w->n && off < cap; i++)
        off += (size_t)snprintf(out + off, cap - off, "%s127.0.0.1:%d", i ? "," : "", w->port[i]);
}
