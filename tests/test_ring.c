/* The ring runtime on stand-in layers (tests/support/fake_ring.c): any plan — 1 to 4 devices,
 * uneven windows, forward-only devices, several rounds, a partial last round — must give the
 * floats a single device gives, bit for bit, through prefill, decode and KV-cache edits; with
 * every release policy and prefetch method; F16 on the wire must stay close. */
#include <math.h>
#include <string.h>

#include "cluster/ring.h"
#include "support/fake_ring.h"
#include "support/rng.h"
#include "test.h"

enum { N_LAYER = 10, N_EMBD = 16, N_CTX = 64, MAX_BATCH = 8, MAX_OUT = 4096 };

/* One scripted conversation: a prompt in one batch, decode steps fed from the previous output,
 * a truncation and a context shift. Every output row is appended to out. */
typedef struct script_io {
    int (*eval)(void *ctx, float *hidden, int n, const int32_t *pos);
    int (*truncate)(void *ctx, int p0);
    int (*shift)(void *ctx, int p0, int p1, int delta);
    void *ctx;
} script_io;

static int run_script(const script_io *io, float *out, int *n_out)
{
    float h[MAX_BATCH * N_EMBD];
    int32_t pos[MAX_BATCH];
    test_rng rng = {42};
    int o = 0;
#define EVAL(n)                                                                   \
    do {                                                                          \
        if (io->eval(io->ctx, h, (n), pos))                                       \
            return -1;                                                            \
        memcpy(out + o, h, sizeof(float) * (size_t)(n) * N_EMBD);                 \
        o += (n) * N_EMBD;                                                        \
    } while (0)
    for (int t = 0; t < 7; t++) {
        pos[t] = t;
        for (int j = 0; j < N_EMBD; j++)
            h[t * N_EMBD + j] = rng_gauss(&rng);
    }
    EVAL(7);
    /* decode: the next input depends on the last output, as a sampled token's embedding does */
    for (int step = 0; step < 5; step++) {
        for (int j = 0; j < N_EMBD; j++)
            h[j] = 0.5f * out[o - N_EMBD + j] + 0.1f * (float)step;
        pos[0] = 7 + step;
        EVAL(1);
    }
    if (io->truncate(io->ctx, 9))
        return -1;
    for (int t = 0; t < 2; t++) {
        pos[t] = 9 + t;
        for (int j = 0; j < N_EMBD; j++)
            h[t * N_EMBD + j] = rng_gauss(&rng);
    }
    EVAL(2);
    if (io->shift(io->ctx, 4, 11, -2))
        return -1;
    pos[0] = 9;
    for (int j = 0; j < N_EMBD; j++)
        h[j] = rng_gauss(&rng);
    EVAL(1);
#undef EVAL
    *n_out = o;
    return 0;
}

static const int32_t seq0[MAX_BATCH];   /* every row of sequence 0 */

/* The single-device reference: all layers in one call. */
static int local_eval(void *ctx, float *hidden, int n, const int32_t *pos)
{
    ring_layers *l = ctx;
    return l->eval(l->ctx, hidden, n, pos, seq0, 0, N_LAYER);
}
static int local_truncate(void *ctx, int p0)
{
    ring_layers *l = ctx;
    return l->kv_truncate(l->ctx, 0, p0);
}
static int local_shift(void *ctx, int p0, int p1, int delta)
{
    ring_layers *l = ctx;
    return l->kv_shift(l->ctx, 0, p0, p1, delta);
}

static int ring_eval_io(void *ctx, float *hidden, int n, const int32_t *pos)
{
    return ring_eval(ctx, hidden, n, pos, NULL);
}
static int ring_truncate_io(void *ctx, int p0) { return ring_kv_truncate(ctx, 0, p0); }
static int ring_shift_io(void *ctx, int p0, int p1, int delta)
{
    return ring_kv_shift(ctx, 0, p0, p1, delta);
}

static fake_model fm;
static fake_worker workers[3];
static float ref[MAX_OUT];
static int n_ref;

typedef struct ring_case {
    int n_dev;
    int lw[4];      /* all zero: plan by memory */
    int k;
    enum release_policy release;
    enum prefetch_method method;
    enum wire_type wire;
    int expect_k;
} ring_case;

/* Run the script through a ring; 0 on success with the outputs in out. */
static int run_ring(const ring_case *c, float *out, int *n_out, char *err, size_t errlen)
{
    char list[256];
    fake_worker_list(workers, c->n_dev - 1, list, sizeof list);
    bool by_memory = !c->lw[0] && !c->lw[1] && !c->lw[2] && !c->lw[3];
    ring_opts o = {.workers = list, .lw = c->lw, .n_lw = by_memory ? 0 : c->n_dev, .k = c->k,
                   .n_ctx = N_CTX, .max_batch = MAX_BATCH, .prefetch = true,
                   .release = c->release, .method = c->method, .wire = c->wire};
    ring *r = ring_connect(&o, &fm.rm, err, errlen);
    if (!r)
        return -1;
    const ring_plan *p = ring_get_plan(r);
    if (c->expect_k && p->k != c->expect_k) {
        snprintf(err, errlen, "plan has %d rounds, expected %d", p->k, c->expect_k);
        ring_close(r);
        return -1;
    }
    bool owns[N_LAYER];
    plan_owned_layers(p, 0, owns);
    ring_layers head;
    fake_layers_open(&fm, owns, N_CTX, &head);
    int rc = ring_start(r, &head, err, errlen);
    if (rc == 0) {
        script_io io = {ring_eval_io, ring_truncate_io, ring_shift_io, r};
        rc = run_script(&io, out, n_out);
        if (rc)
            snprintf(err, errlen, "%s", ring_error(r));
    }
    ring_close(r);
    fake_layers_close(&head);
    return rc;
}

static void check_case(const ring_case *c)
{
    static float out[MAX_OUT];
    int n_out = 0;
    char err[512] = "";
    int rc = run_ring(c, out, &n_out, err, sizeof err);
    CHECK(rc == 0, "%d devices, lw %d,%d,%d,%d: %s", c->n_dev, c->lw[0], c->lw[1], c->lw[2],
          c->lw[3], err);
    if (rc)
        return;
    CHECK(n_out == n_ref, "%d outputs, expected %d", n_out, n_ref);
    if (c->wire == WIRE_F32) {
        CHECK(memcmp(out, ref, sizeof(float) * (size_t)n_ref) == 0,
              "%d devices, lw %d,%d,%d,%d, k %d: outputs differ from one device", c->n_dev,
              c->lw[0], c->lw[1], c->lw[2], c->lw[3], c->k);
    } else {
        float worst = 0;
        for (int i = 0; i < n_ref; i++)
            worst = fmaxf(worst, fabsf(out[i] - ref[i]));
        CHECK(worst > 0 && worst < 1e-2f, "F16 wire: largest difference %g", worst);
    }
}

int main(void)
{
    REQUIRE(fake_model_create(&fm, N_LAYER, N_EMBD, 64 * 1024, 1) == 0, "fake model");
    ring_layers all;
    fake_layers_open(&fm, NULL, N_CTX, &all);
    script_io lio = {local_eval, local_truncate, local_shift, &all};
    REQUIRE(run_script(&lio, ref, &n_ref) == 0, "reference run failed");
    fake_layers_close(&all);

    for (int i = 0; i < 3; i++)
        REQUIRE(fake_worker_start(&workers[i], &fm, NULL) == 0, "worker %d", i);

    const ring_case cases[] = {
        {1, {10}, 0, RELEASE_AUTO, PREFETCH_MADVISE, WIRE_F32, 1},
        {1, {3}, 0, RELEASE_ALWAYS, PREFETCH_TOUCH, WIRE_F32, 4},        /* partial last round */
        {2, {4, 6}, 1, RELEASE_NEVER, PREFETCH_FADVISE, WIRE_F32, 1},
        {2, {2, 3}, 2, RELEASE_ALWAYS, PREFETCH_MADVISE, WIRE_F32, 2},
        {2, {1, 2}, 0, RELEASE_ALWAYS, PREFETCH_TOUCH, WIRE_F32, 4},     /* partial */
        {3, {3, 3, 4}, 0, RELEASE_AUTO, PREFETCH_MADVISE, WIRE_F32, 1},
        {3, {1, 1, 1}, 0, RELEASE_ALWAYS, PREFETCH_FADVISE, WIRE_F32, 4},  /* partial */
        {3, {2, 0, 1}, 0, RELEASE_NEVER, PREFETCH_TOUCH, WIRE_F32, 4},   /* forwarder, partial */
        {4, {1, 2, 3, 4}, 0, RELEASE_AUTO, PREFETCH_MADVISE, WIRE_F32, 1},
        {4, {1, 1, 1, 1}, 3, RELEASE_ALWAYS, PREFETCH_TOUCH, WIRE_F32, 3},  /* partial */
        {4, {0, 2, 1, 2}, 2, RELEASE_AUTO, PREFETCH_FADVISE, WIRE_F32, 2}, /* head forwards */
        {3, {0}, 2, RELEASE_AUTO, PREFETCH_MADVISE, WIRE_F32, 2},        /* by memory, k = 2 */
        {3, {0}, 0, RELEASE_AUTO, PREFETCH_MADVISE, WIRE_F32, 1},        /* by memory */
        {3, {3, 3, 4}, 0, RELEASE_AUTO, PREFETCH_MADVISE, WIRE_F16, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);

    /* A k that does not match the windows is refused before anything is sent. */
    ring_case bad = {3, {1, 1, 1}, 2, RELEASE_AUTO, PREFETCH_MADVISE, WIRE_F32, 0};
    static float out[MAX_OUT];
    int n_out;
    char err[512] = "";
    CHECK(run_ring(&bad, out, &n_out, err, sizeof err) != 0 && strstr(err, "k = 2 does not match"),
          "k 2 with windows 1,1,1 for 10 layers: '%s'", err);
    char list[256];
    fake_worker_list(workers, 2, list, sizeof list);
    ring_opts two = {.workers = list, .lw = (int[]){5, 5}, .n_lw = 2, .n_ctx = N_CTX,
                     .max_batch = MAX_BATCH};
    ring *r = ring_connect(&two, &fm.rm, err, sizeof err);
    CHECK(!r && strstr(err, "layer windows: 2 for 3 device(s)"), "two windows for three devices: '%s'", err);
    ring_close(r);

    for (int i = 0; i < 3; i++)
        fake_worker_stop(&workers[i]);
    fake_model_destroy(&fm);
    return test_done();
}
