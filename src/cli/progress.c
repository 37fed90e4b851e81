/* progress.c — progress lines on stderr (progress.h). */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli/progress.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_init(cli_progress *p, FILE *f, const char *label)
{
    *p = (cli_progress){.f = f, .tty = isatty(fileno(f)), .label = label};
}

void cli_progress_show(cli_progress *p, const char *who, const char *what, double done)
{
    if (!p->open)
        p->t0 = now_s();
    p->open = true;
    char line[160], pct[16] = "";
    if (done >= 0)
        snprintf(pct, sizeof pct, ", %.0f %%", 100 * done);
    int n = snprintf(line, sizeof line, "prima: profiling %s: %s%s, %.1f s", who, what, pct,
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

void cli_progress_end(cli_progress *p)
{
    if (p->open && p->tty)
        fputc('\n', p->f);
    p->open = false;
    p->width = 0;
}

void cli_progress_profile(void *ctx, const char *what, double done)
{
    cli_progress *p = ctx;
    cli_progress_show(p, p->label, what, done);
}

static void planner_progress(void *ctx, int d, const char *what, double done)
{
    cli_progress *p = ctx;
    if (!what) {
        cli_progress_end(p);
        return;
    }
    char who[24];
    if (d)
        snprintf(who, sizeof who, "device %d", d);
    cli_progress_show(p, d ? who : p->label, what, done);
}

void cli_progress_planner(cli_progress *p, sched_planner *sp)
{
    cli_progress_init(p, stderr, "the head");
    sp->progress = planner_progress;
    sp->progress_ctx = p;
}
