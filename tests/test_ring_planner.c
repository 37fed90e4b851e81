/* The ring's planner hook on stand-in layers (tests/support/fake_ring.c): a planner can ask
 * workers for their profiles and probe the links; workers it leaves out get a goodbye and the
 * ring closes over the rest, which still computes exactly what one device computes; invalid
 * answers from a planner are refused with a message. */
#include <string.h>

#include "cluster/ring.h"
#include "support/fake_ring.h"
#include "support/rng.h"
#include "test.h"

static const int32_t seq0[64];   /* sequence ids of one-sequence batches */

enum { N_LAYER = 10, N_EMBD = 16, N_CTX = 32, MAX_BATCH = 4, N_WORKERS = 3 };

static fake_model fm;

/* A worker whose profile is a fixed text naming its thread count. */
static int canned_profile(void *ctx, int threads, char *json, size_t cap, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    snprintf(json, cap, "{\"worker\": %d, \"threads\": %d}", *(int *)ctx, threads);
    return 0;
}

typedef struct served {
    worker *w;
    pthread_t thread;
    int id;
} served;

static void *serve_thread(void *arg)
{
    worker_run(arg);
    return NULL;
}

static int served_start(served *s, int id)
{
    s->id = id;
    worker_opts o = {.host = "127.0.0.1", .listen_fd = -1, .threads = 1,
                     .method = PREFETCH_MADVISE, .profile = canned_profile, .profile_ctx = &s->id};
    char err[512];
    s->w = worker_create(&o, &fm.backend, err, sizeof err);
    if (!s->w)
        return -1;
    return pthread_create(&s->thread, NULL, serve_thread, s->w);
}

static void served_stop(served *s)
{
    worker_stop(s->w);
    pthread_join(s->thread, NULL);
    worker_free(s->w);
}

/* What the planner under test does, and what it saw. */
typedef struct script {
    int windows[N_WORKERS + 1];
    bool drop[N_WORKERS + 1];
    bool profile, probe;
    char profiles[N_WORKERS + 1][128];
    double rtt[N_WORKERS + 1], big[N_WORKERS + 1];
    ring_plan_request seen;
} script;

static int scripted_plan(void *ctx, ring *r, const ring_plan_request *q, ring_plan *out,
                         bool *drop, char *err, size_t errlen)
{
    script *s = ctx;
    s->seen = *q;
    for (int d = 1; d < q->n_dev; d++) {
        if (s->profile && ring_worker_profile(r, d, 3, s->profiles[d], sizeof s->profiles[d])) {
            snprintf(err, errlen, "%s", ring_error(r));
            return -1;
        }
        if (s->probe && (ring_probe(r, d, 8, 3, &s->rtt[d]) ||
                         ring_probe(r, d, 200000, 3, &s->big[d]))) {
            snprintf(err, errlen, "%s", ring_error(r));
            return -1;
        }
    }
    memset(out, 0, sizeof *out);
    out->n_dev = q->n_dev;
    out->n_layer = q->n_layer;
    for (int d = 0; d < q->n_dev; d++) {
        out->window[d] = s->windows[d];
        drop[d] = s->drop[d];
    }
    out->k = plan_rounds_needed(out->window, q->n_dev, q->n_layer);
    return 0;
}

/* Connect with the script as planner, run one batch, compare with all layers on one device. */
static int run(const char *list, script *s, char *err, size_t errlen, int *n_dev_after)
{
    ring_planner pl = {s, scripted_plan};
    ring_opts o = {.workers = list, .n_ctx = N_CTX, .max_batch = MAX_BATCH, .prefetch = true,
                   .method = PREFETCH_MADVISE, .planner = &pl};
    ring *r = ring_connect(&o, &fm.rm, err, errlen);
    if (!r)
        return -1;
    const ring_plan *p = ring_get_plan(r);
    *n_dev_after = p->n_dev;
    bool owns[N_LAYER];
    plan_owned_layers(p, 0, owns);
    ring_layers head, all;
    fake_layers_open(&fm, owns, N_CTX, &head);
    fake_layers_open(&fm, NULL, N_CTX, &all);
    float h[MAX_BATCH * N_EMBD], want[MAX_BATCH * N_EMBD];
    int32_t pos[MAX_BATCH] = {0, 1, 2, 3};
    test_rng rng = {7};
    for (int i = 0; i < MAX_BATCH * N_EMBD; i++)
        h[i] = want[i] = rng_gauss(&rng);
    int rc = ring_start(r, &head, err, errlen);
    if (rc == 0 && ring_eval(r, h, MAX_BATCH, pos, NULL)) {
        snprintf(err, errlen, "%s", ring_error(r));
        rc = -1;
    }
    all.eval(all.ctx, want, MAX_BATCH, pos, seq0, 0, N_LAYER);
    if (rc == 0 && memcmp(h, want, sizeof h)) {
        snprintf(err, errlen, "the ring's floats differ from one device's");
        rc = -1;
    }
    ring_close(r);
    fake_layers_close(&head);
    fake_layers_close(&all);
    return rc;
}

int main(void)
{
    REQUIRE(fake_model_create(&fm, N_LAYER, N_EMBD, 16 * 1024, 3) == 0, "fake model");
    fake_backend_init(&fm);
    served ws[N_WORKERS];
    for (int i = 0; i < N_WORKERS; i++)
        REQUIRE(served_start(&ws[i], i + 1) == 0, "worker %d", i + 1);
    char list[256];
    snprintf(list, sizeof list, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", worker_port(ws[0].w),
             worker_port(ws[1].w), worker_port(ws[2].w));
    char err[512] = "";
    int n_after = 0;

    /* profiles and probes, every device kept */
    script all = {.windows = {3, 2, 3, 2}, .profile = true, .probe = true};
    CHECK(run(list, &all, err, sizeof err, &n_after) == 0 && n_after == 4, "all kept: %s", err);
    CHECK(all.seen.n_dev == 4 && all.seen.n_layer == N_LAYER && all.seen.n_ctx == N_CTX &&
          all.seen.max_batch == MAX_BATCH, "request %d devices %d layers", all.seen.n_dev,
          all.seen.n_layer);
    for (int d = 1; d <= N_WORKERS; d++) {
        char want[64];
        snprintf(want, sizeof want, "{\"worker\": %d, \"threads\": 3}", d);
        CHECK(!strcmp(all.profiles[d], want), "device %d profile '%s'", d, all.profiles[d]);
        CHECK(all.rtt[d] > 0 && all.big[d] > 0, "device %d probes %g %g", d, all.rtt[d], all.big[d]);
    }

    /* devices 1 and 3 left out: the ring is the head and device 2, numbered 1 */
    script two = {.windows = {4, 0, 6, 0}, .drop = {false, true, false, true}};
    CHECK(run(list, &two, err, sizeof err, &n_after) == 0 && n_after == 2, "two left out: %s (%d "
          "devices)", err, n_after);
    /* the workers left out are free again: the next head gets all three */
    CHECK(run(list, &all, err, sizeof err, &n_after) == 0 && n_after == 4, "after leaving out: %s",
          err);

    script bad_drop = {.windows = {4, 3, 3, 0}, .drop = {false, true}};
    CHECK(run(list, &bad_drop, err, sizeof err, &n_after) != 0 && strstr(err, "has layers"),
          "dropping a device with layers: '%s'", err);
    script bad_plan = {.windows = {0, 0, 0, 0}};
    CHECK(run(list, &bad_plan, err, sizeof err, &n_after) != 0 && strstr(err, "planner's plan"),
          "an empty plan: '%s'", err);

    /* a worker with no profile service refuses, and the head says which */
    fake_worker plain;
    REQUIRE(fake_worker_start(&plain, &fm, NULL) == 0, "plain worker");
    char one[64];
    fake_worker_list(&plain, 1, one, sizeof one);
    script ask = {.windows = {5, 5}, .profile = true};
    CHECK(run(one, &ask, err, sizeof err, &n_after) != 0 && strstr(err, "cannot profile") &&
              strstr(err, "device 1"), "no profile service: '%s'", err);
    fake_worker_stop(&plain);

    for (int i = 0; i < N_WORKERS; i++)
        served_stop(&ws[i]);
    fake_model_destroy(&fm);
    return test_done();
}
