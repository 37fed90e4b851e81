/* progress.h — progress of long measurements on stderr: the library's progress callbacks
 * (measure.h, startup.h) rendered as one line updated in place (\r) on a terminal, as plain
 * lines otherwise (a log file, a pipe), each part of the work with its share done and the
 * seconds since the work began (on a terminal the seconds go on between parts):
 *
 *   prima: profiling the head: Q4_K kernels, 42 %, 2.1 s
 *   prima: profiling device 2: measuring itself, 0.0 s */
#ifndef PRIMA_APP_PROGRESS_H
#define PRIMA_APP_PROGRESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "sched/startup.h"

typedef struct app_progress {
    FILE *f;
    bool tty;       /* isatty: the line is rewritten, by a ticker thread too while a work runs */
    const char *label;   /* of the profile (app_progress_profile) */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_t ticker;
    bool ticking;
    bool open;      /* a work's line is shown (and, on a terminal, not ended) */
    int width;      /* of the line shown on a terminal */
    double t0;      /* when the work began */
    char who[32], what[64];   /* the part shown */
    double done;
} app_progress;

/* Progress of `label`'s measurement ("this device") on f. */
void app_progress_init(app_progress *p, FILE *f, const char *label);
/* One part of the work of `who` ("the head", "device 2"): what it does now and the share done
 * (0 to 1; below 0: unknown). The first part of a work starts its clock. */
void app_progress_show(app_progress *p, const char *who, const char *what, double done);
/* The work is over: a terminal's line is ended, and the next work starts its own clock. Must
 * end every work shown: it stops the terminal's ticker. */
void app_progress_end(app_progress *p);

/* profile_opts.progress, with ctx a app_progress. */
void app_progress_profile(void *ctx, const char *what, double done);
/* The planner's progress on stderr through p (the planner ends each device's work, and the
 * plan's after every plan). */
void app_progress_planner(app_progress *p, sched_planner *sp);

#endif
