/* startup.h — Halda at a ring's start-up.
 *
 * The head's planner (ring_opts.planner): profiles the head, then asks each worker in turn for
 * its profile (devices may share hardware, so never two at once), probes each link with the
 * plan's message size, solves, prints the plan, and hands it to the ring. A ring of one device
 * keeps the ring's own plan (there is nothing to place). It keeps what it measured: a later plan
 * of the same ring (failover, a worker that rejoins) solves on the profiles it has, measuring
 * only devices (by address) it has not seen.
 *
 * The worker's profile service (worker_opts.profile): measures the device once per worker
 * process and model and keeps the result; later heads get it at once, with the memory figures
 * read afresh (they change while the rest does not).
 *
 * Profile cache (profile_cache, both sides; `--profile-cache FILE`): a profile measured once is
 * saved there and reused by later processes, memory read afresh, as long as it matches the
 * device and settings (measure.h, profile_matches); otherwise the device is measured again and
 * the file replaced. On shared cores a fresh profile swings, and with it the plan: a cache
 * makes repeated runs plan on the same figures. A file that is not a profile is an error.
 *
 * A model of experts: before its first plan the head measures how the model routes (a short
 * built-in text through every layer, sched/experts.h), or reads it from the calibration cache
 * where an earlier start kept it (said either way), and Halda plans the devices that keep only
 * their hottest experts with that skew; the plans of the same ring reuse it. */
#ifndef PRIMA_STARTUP_H
#define PRIMA_STARTUP_H

#include <stdio.h>

#include "cluster/ring.h"
#include "model/model.h"
#include "model/offload.h"
#include "sched/cost.h"
#include "sched/profile.h"

typedef struct sched_known {
    char addr[NET_HOST_MAX + 8];
    dev_profile p;
    double rtt, bw;             /* of the head's link to it */
} sched_known;

/* Progress of a plan, for a caller that shows it: device d (0 the head) and what is done to it
 * now (the head's profile: the parts of measure.h's progress; a worker: "measuring itself",
 * "probing its link"), with the share of the device's part done (0 to 1; -1: unknown, a worker
 * measures itself). what NULL: the device's part is over, or the plan (also after a failure,
 * which may cut a part short). */
typedef void (*sched_progress_fn)(void *ctx, int device, const char *what, double done);

typedef struct sched_planner {
    ring_planner rp;            /* give &rp to ring_opts.planner */
    bool head_measured;
    dev_profile head;
    sched_known known[PRIMA_MAX_DEVICES];
    int n_known;
    const model *m;
    const char *model_path;
    int head_threads;
    sched_opts opts;
    FILE *log;                  /* progress and the plan; NULL: quiet */
    double seconds;             /* spent planning: profiling, link probes, solving */
    FILE *stats;                /* the plan as a plan event (cluster/stats.h); NULL: none */
    offload_opts gpu;           /* the head's GPU, profiled when used (init: not used) */
    struct sched_left_out {     /* the last plan's workers without layers, and why (Halda's */
        char addr[NET_HOST_MAX + 8];   /* explanation: "left out: ..." or "forwards only: ...") */
        char why[192];
    } left_out[PRIMA_MAX_DEVICES];
    int n_left_out;
    const char *profile_cache;  /* the head's profile cache file; NULL: none */
    bool experts_tried;         /* a model of experts: its routing calibrated (experts.h), */
    double expert_cover[SCHED_COVER_POINTS + 1];   /* the curve, or 0s when that failed */
    sched_progress_fn progress; /* NULL: none */
    void *progress_ctx;
} sched_planner;

void sched_planner_init(sched_planner *sp, const model *m, const char *model_path,
                        int head_threads, FILE *log);

typedef struct sched_profiler {
    const char *model_path;
    bool measured;
    int threads;                /* of the kept profile */
    dev_profile p;
    offload_opts gpu;           /* this device's GPU, profiled when used (init: not used) */
    const char *profile_cache;  /* the worker's profile cache file; NULL: none */
} sched_profiler;

void sched_profiler_init(sched_profiler *sp, const char *model_path);
/* worker_opts.profile, with ctx a sched_profiler. */
int sched_profiler_serve(void *ctx, int threads, char *json, size_t cap, char *err, size_t errlen);

#endif
