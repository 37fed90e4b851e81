/* progress.c — progress lines on stderr (progress.h). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/progress.h"

/* A terminal's line is redrawn this often while a part runs (its elapsed time goes on). */
#define TICK_NS 250000000L

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void app_progress_init(app_progress *p, FILE *f, const char *label)
{
    *p = (app_progress){.f = f, .tty = isatty(fileno(f)), .label = label};
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
}

/* The current part's line (p->mu held): rewritten on a terminal, a new line otherwise. */
static void draw(app_progress *p)
{
    char line[160], pct[16] = "";
    if (p->done >= 0)
        snprintf(pct, sizeof pct, ", %.0f %%", 100 * p->done);
    int n = snprintf(line, sizeof line, "prima: profiling %s: %s%s, %.1f s", p->who, p->what, pct,
                     now_s() - p->t0);
    if (n >= (int)sizeof line)
        n = (int)sizeof line - 1;
    if (p->tty) {
        /* spaces over the rest of a longer line before */
        fprintf(p->f, "\r%s%*s", line, p->width > n ? p->width - n : 0, "");
        p->width = n;
    } else
        fprintf(p->f, "%s\n", line);
    fflush(p->f);
}

static void *tick(void *arg)
{
    app_progress *p = arg;
    pthread_mutex_lock(&p->mu);
    while (p->open) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += TICK_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        if (pthread_cond_timedwait(&p->wake, &p->mu, &until) && p->open)
            draw(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void app_progress_show(app_progress *p, const char *who, const char *what, double done)
{
    pthread_mutex_lock(&p->mu);
    bool start = !p->open;
    if (start)
        p->t0 = now_s();
    p->open = true;
    snprintf(p->who, sizeof p->who, "%s", who);
    snprintf(p->what, sizeof p->what, "%s", what);
    p->done = done;
    draw(p);
    pthread_mutex_unlock(&p->mu);
    /* on a terminal the time goes on between parts; without a ticker it only moves with them */
    if (start && p->tty)
        p->ticking = pthread_create(&p->ticker, NULL, tick, p) == 0;
}

void app_progress_end(app_progress *p)
{
    pthread_mutex_lock(&p->mu);
    if (p->open && p->tty)
        fputc('\n', p->f);
    p->open = false;
    p->width = 0;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
    if (p->ticking)
        pthread_join(p->ticker, NULL);
    p->ticking = false;
}

void app_progress_profile(void *ctx, const char *what, double done)
{
    app_progress *p = ctx;
    app_progress_show(p, p->label, what, done);
}

static void planner_progress(void *ctx, int d, const char *what, double done)
{
    app_progress *p = ctx;
    if (!what) {
        app_progress_end(p);
        return;
    }
    char who[24];
    if (d)
        snprintf(who, sizeof who, "device %d", d);
    app_progress_show(p, d ? who : p->label, what, done);
}

void app_progress_planner(app_progress *p, sched_planner *sp)
{
    app_progress_init(p, stderr, "the head");
    sp->progress = planner_progress;
    sp->progress_ctx = p;
}
