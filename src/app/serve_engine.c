/* serve_engine.c — `prima serve`'s engine (serve_engine.h): the state the server reports
 * (health, /metrics, the ring's devices and their counters), the thread that connects the ring
 * again after a failure, and the interface server/ calls into; the slots themselves are in
 * serve_sched.c. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/serve_engine.h"
#include "sched/halda.h"

/* The memory a device's windows hold, as its counters say: of the window pages it computed
 * since the last look, the share that was resident when compute started, times the windows'
 * bytes (kept while nothing ran; after a new session the counters start again). */
static void resident(struct serve_device *sd, const ring_counters *c, uint64_t window_bytes)
{
    if (c->pages < sd->at.pages)
        sd->at = (ring_counters){0};
    uint64_t pages = c->pages - sd->at.pages, res = c->pages_resident - sd->at.pages_resident;
    if (!pages)
        return;
    sd->resident_bytes = (uint64_t)((double)window_bytes * (double)res / (double)pages);
    sd->at = *c;
}

/* The ring's plan and counters, for health, metrics and the cluster view (engine thread). */
void se_snapshot(serve_engine *se)
{
    pthread_mutex_lock(&se->mu);
    ring *rg = se->r->rh.r;
    if (rg) {
        se->plan = *ring_get_plan(rg);
        for (int d = 0; d < se->plan.n_dev; d++) {
            struct serve_device *sd = &se->devs[d];
            ring_totals(rg, d, &se->dev[d]);
            ring_device(rg, d, sd->addr, sizeof sd->addr, &sd->mem_budget);
            plan_format_layers(&se->plan, d, sd->layers, sizeof sd->layers);
            uint64_t window_bytes = 0;
            bool *owns = calloc((size_t)se->plan.n_layer, sizeof *owns);
            if (owns) {
                plan_owned_layers(&se->plan, d, owns);
                for (int il = 0; il < se->plan.n_layer; il++)
                    window_bytes += owns[il] ? model_layer_bytes(se->r->m, il) : 0;
            }
            free(owns);
            sd->weight_bytes = window_bytes + (d == 0 ? model_head_bytes(se->r->m) : 0);
            resident(sd, &se->dev[d], window_bytes);
        }
        se->batches = ring_batches(rg);
        se->n_left_out = se->r->sp.n_left_out;
        memcpy(se->left_out, se->r->sp.left_out, sizeof se->left_out);
    }
    se->snap_at = se_now();
    pthread_mutex_unlock(&se->mu);
}

static void set_state(serve_engine *se, const char *state, const char *detail)
{
    pthread_mutex_lock(&se->mu);
    se->state = state;
    snprintf(se->detail, sizeof se->detail, "%.400s", detail);
    pthread_mutex_unlock(&se->mu);
}

int serve_engine_init(serve_engine *se, runner *r, int n_slots, int in_flight, char *err,
                      size_t errlen)
{
    memset(se, 0, sizeof *se);
    se->r = r;
    se->max_mbs = in_flight;
    bool warned;
    const char *format = chat_format_describe(r->chat, &warned);
    if (warned)
        fprintf(stderr, "prima: warning: chat template not recognised, using ChatML\n");
    else
        fprintf(stderr, "prima: chat format: %s\n", format);
    pthread_mutex_init(&se->mu, NULL);
    se->ring = ring_args_active(&r->ra);
    se->state = r->s ? "ready" : "loading";
    se_snapshot(se);
    if (serve_slots_open(se, n_slots, err, errlen)) {
        serve_engine_free(se);
        return -1;
    }
    return 0;
}

void serve_engine_free(serve_engine *se)
{
    serve_slots_close(se);
    grammar_vocab_free(se->gv);
    pthread_mutex_destroy(&se->mu);
}

double se_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void se_ring_failed(serve_engine *se, const char *err)
{
    if (!se->ring)
        return;
    se_snapshot(se);
    serve_slots_session_close(se);
    set_state(se, "lost", err);
}

bool se_ring_ready(serve_engine *se, srv *sv, srv_job *job)
{
    runner *r = se->r;
    char err[512];
    srv_result res = {.finish = SRV_FINISH_ERROR, .status = 500};
    if (!r->s) {
        set_state(se, "connecting", "connecting the ring again");
        if (!serve_slots_session(se, err, sizeof err)) {
            set_state(se, "ready", "");
            se_snapshot(se);
            return false;
        }
        set_state(se, "lost", err);
        snprintf(res.error, sizeof res.error, "the ring is unavailable: %.400s", err);
    } else if (!se->ring || !runner_rejoin(r, err, sizeof err)) {
        /* workers lost (and planned around) earlier that answer again joined */
        return false;
    } else {
        snprintf(res.error, sizeof res.error, "the ring failed: %.400s", err);
        se_ring_failed(se, err);
    }
    srv_job_finish(sv, job, &res);
    return true;
}

/* The engine thread: connect the ring (while /health says "loading"), then the slots. */
static void se_serve(void *ctx, srv *sv)
{
    serve_engine *se = ctx;
    if (!se->r->s) {
        char err[512];
        if (serve_slots_session(se, err, sizeof err)) {
            fprintf(stderr, "prima: %s (each request tries again)\n", err);
            set_state(se, "lost", err);
        } else {
            set_state(se, "ready", "");
            se_snapshot(se);
        }
    }
    serve_slots_loop(se, sv);
    halda_thread_done(); /* the thread that planned the ring ends here */
}

static bool se_health(void *ctx, void *obj)
{
    serve_engine *se = ctx;
    cJSON *h = obj;
    pthread_mutex_lock(&se->mu);
    bool ok = !strcmp(se->state, "ready");
    cJSON_AddStringToObject(h, "status", ok ? "ok" : "unavailable");
    cJSON *rg = cJSON_AddObjectToObject(h, "ring");
    cJSON_AddStringToObject(rg, "state", se->state);
    if (*se->detail)
        cJSON_AddStringToObject(rg, "detail", se->detail);
    cJSON *devs = cJSON_AddArrayToObject(rg, "devices");
    for (int d = 0; se->ring && d < se->plan.n_dev; d++) {
        cJSON *dv = cJSON_CreateObject();
        cJSON_AddNumberToObject(dv, "rank", d);
        cJSON_AddNumberToObject(dv, "window", se->plan.window[d]);
        cJSON_AddItemToArray(devs, dv);
    }
    if (se->ring)
        cJSON_AddNumberToObject(rg, "rounds", se->plan.k);
    pthread_mutex_unlock(&se->mu);
    return ok;
}

static void se_metrics(void *ctx, FILE *f)
{
    serve_engine *se = ctx;
    pthread_mutex_lock(&se->mu);
    fprintf(f, "# HELP prima_steps_total steps of the slots (one evaluation of their rows)\n"
               "# TYPE prima_steps_total counter\nprima_steps_total %llu\n"
               "# HELP prima_step_rows_total rows evaluated in the steps: one per generating "
               "slot (decode), prompt chunks (prefill)\n# TYPE prima_step_rows_total counter\n"
               "prima_step_rows_total{kind=\"decode\"} %llu\n"
               "prima_step_rows_total{kind=\"prefill\"} %llu\n"
               "# HELP prima_steps_mixed_total steps with both a prompt chunk and decode rows\n"
               "# TYPE prima_steps_mixed_total counter\nprima_steps_mixed_total %llu\n",
            (unsigned long long)se->steps, (unsigned long long)se->step_decode_rows,
            (unsigned long long)se->step_prefill_rows, (unsigned long long)se->steps_mixed);
    pthread_mutex_unlock(&se->mu);
    if (!se->ring)
        return;
    static const struct {
        const char *name, *help;
        size_t off;
        double scale;
    } m[] = {
        {"prima_device_compute_seconds_total", "time in the device's layers",
         offsetof(ring_counters, compute_ns), 1e-9},
        {"prima_device_wait_seconds_total", "time the device waited for the previous one",
         offsetof(ring_counters, wait_ns), 1e-9},
        {"prima_device_disk_bytes_total", "bytes the device read from storage",
         offsetof(ring_counters, disk_bytes), 1},
        {"prima_device_major_faults_total", "major page faults during compute",
         offsetof(ring_counters, major_faults), 1},
    };
    pthread_mutex_lock(&se->mu);
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", m[i].name, m[i].help, m[i].name);
        for (int d = 0; d < se->plan.n_dev; d++) {
            uint64_t v;
            memcpy(&v, (const char *)&se->dev[d] + m[i].off, sizeof v);
            fprintf(f, "%s{device=\"%d\"} %.9g\n", m[i].name, d, (double)v * m[i].scale);
        }
    }
    fprintf(f, "# HELP prima_ring_batches_total batches the ring evaluated\n"
               "# TYPE prima_ring_batches_total counter\nprima_ring_batches_total %d\n",
            se->batches);
    pthread_mutex_unlock(&se->mu);
}

static void add_counters(cJSON *o, const ring_counters *c)
{
    cJSON_AddNumberToObject(o, "compute_seconds", (double)c->compute_ns * 1e-9);
    cJSON_AddNumberToObject(o, "wait_seconds", (double)c->wait_ns * 1e-9);
    cJSON_AddNumberToObject(o, "disk_bytes", (double)c->disk_bytes);
    cJSON_AddNumberToObject(o, "major_faults", (double)c->major_faults);
    cJSON_AddNumberToObject(o, "pages", (double)c->pages);
    cJSON_AddNumberToObject(o, "pages_resident", (double)c->pages_resident);
}

/* Workers of --workers that are not in the ring: the scheduler left them out. */
static void add_left_out(const serve_engine *se, cJSON *arr)
{
    const char *list = se->r->ra.workers;
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        bool in = false;
        for (int d = 1; d < se->plan.n_dev; d++)
            in |= strlen(se->devs[d].addr) == len && !strncmp(se->devs[d].addr, p, len);
        if (!in && len) {
            cJSON *o = cJSON_CreateObject();
            char addr[64];
            snprintf(addr, sizeof addr, "%.*s", (int)(len < 63 ? len : 63), p);
            cJSON_AddStringToObject(o, "addr", addr);
            const char *why = "not in the ring: lost, or not answering when the ring was planned";
            for (int i = 0; i < se->n_left_out; i++)
                if (!strcmp(se->left_out[i].addr, addr))
                    why = se->left_out[i].why;
            cJSON_AddStringToObject(o, "why", why);
            cJSON_AddItemToArray(arr, o);
        }
        p += len + (p[len] == ',');
    }
}

static void *se_cluster(void *ctx)
{
    serve_engine *se = ctx;
    const model_hparams *hp = &se->r->m->hp;
    cJSON *o = cJSON_CreateObject();
    pthread_mutex_lock(&se->mu);
    cJSON_AddStringToObject(o, "state", se->state);
    cJSON_AddStringToObject(o, "detail", se->detail);
    cJSON_AddBoolToObject(o, "ring", se->ring);
    cJSON_AddNumberToObject(o, "n_layer", hp->n_layer);
    cJSON_AddNumberToObject(o, "n_ctx", se->r->n_ctx);
    cJSON_AddNumberToObject(o, "rounds", se->ring ? se->plan.k : 1);
    cJSON_AddNumberToObject(o, "batches", se->batches);
    cJSON_AddNumberToObject(o, "generated_tokens", (double)se->tokens);
    cJSON_AddNumberToObject(o, "decode_seconds", se->decode_s);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    int n = se->ring ? se->plan.n_dev : 1;
    for (int d = 0; d < n; d++) {
        cJSON *dv = cJSON_CreateObject();
        cJSON_AddNumberToObject(dv, "rank", d);
        if (se->ring) {
            const struct serve_device *sd = &se->devs[d];
            cJSON_AddStringToObject(dv, "addr", d ? sd->addr : "head (this device)");
            cJSON_AddNumberToObject(dv, "window", se->plan.window[d]);
            cJSON_AddNumberToObject(dv, "gpu_layers", se->plan.gpu_layers[d]);
            cJSON_AddStringToObject(dv, "layers", sd->layers);
            cJSON_AddNumberToObject(dv, "weight_bytes", (double)sd->weight_bytes);
            cJSON_AddNumberToObject(dv, "mem_budget", (double)sd->mem_budget);
            cJSON_AddNumberToObject(dv, "resident_bytes", (double)sd->resident_bytes);
            add_counters(dv, &se->dev[d]);
        } else {
            cJSON_AddStringToObject(dv, "addr", "this device");
            cJSON_AddNumberToObject(dv, "window", hp->n_layer);
            cJSON_AddNumberToObject(dv, "gpu_layers", 0);
            cJSON_AddNumberToObject(dv, "weight_bytes", (double)se->r->m->file->size);
        }
        cJSON_AddItemToArray(devs, dv);
    }
    add_left_out(se, cJSON_AddArrayToObject(o, "left_out"));
    pthread_mutex_unlock(&se->mu);
    return o;
}

/* POST /apply-template (a connection's thread): the chat format is read-only once loaded. */
static char *se_apply_template(void *ctx, const void *vars, size_t *len, char *err, size_t errlen)
{
    serve_engine *se = ctx;
    jinja_error je;
    char *text = chat_format_apply(se->r->chat, vars, time(NULL), len, &je);
    if (!text)
        snprintf(err, errlen, "chat template: %s%s", je.raised ? "the template raised an error: " : "", je.msg);
    return text;
}

srv_engine serve_engine_iface(serve_engine *se)
{
    return (srv_engine){.ctx = se, .serve = se_serve, .slots = se->n_slots,
                        .health = se_health, .metrics = se_metrics, .cluster = se_cluster,
                        .apply_template = se_apply_template};
}
