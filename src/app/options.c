/* options.c — the defaults of a run's options, and what the ring's options mean at run time:
 * the ring runtime's options, discovery of workers and failover (options.h). */
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/options.h"
#include "cluster/discover.h"
#include "cluster/net.h"
#include "kernels/kern.h"
#include "model/model.h"
#include "model/spec.h"
#include "util/cachedir.h"
#include "util/sysmem.h"

int default_threads(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu < 1 ? 1 : ncpu > KERN_MAX_THREADS ? KERN_MAX_THREADS : (int)ncpu;
}

void run_opts_init(run_opts *o, unsigned groups)
{
    memset(o, 0, sizeof *o);
    o->groups = groups;
    o->n_threads = default_threads();
    o->n_batch = 512;
    o->gpu_index = -1;
    sampler_params_default(&o->sp);
    o->n_predict = -1;
    o->n_keep = -1;
    o->display_prompt = true;
    spec_params sp;
    spec_params_default(&sp, SPEC_DRAFT);
    o->draft_max = sp.n_max;
    o->draft_min = sp.n_min;
    o->draft_p_min = sp.p_min;
}

uint64_t run_opts_fresh_seed(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
}

int run_opts_apply_kv(const run_opts *o, model *m, char *err, size_t errlen)
{
    char why[256];
    if (model_set_kv_types(m, o->kv_type[0], o->kv_type[1], why, sizeof why)) {
        snprintf(err, errlen, "KV cache types: %s", why);
        return -1;
    }
    return 0;
}

int run_opts_check_repack(const run_opts *o, const model *m, char *err, size_t errlen)
{
    /* a copy the size of the weights: one the OS would evict and read again every token, like
     * the model's pages, would gain nothing, and in memory it would crowd out everything else */
    const uint64_t bytes = model_weight_bytes(m), budget = sysmem_weight_budget();
    if (!o->repack || bytes <= budget)
        return 0;
    snprintf(err, errlen, "repacking the weights: the model's weights (%llu MiB) exceed this "
             "device's memory budget (%llu MiB)", (unsigned long long)(bytes >> 20),
             (unsigned long long)(budget >> 20));
    return -1;
}

int run_opts_apply_repack(const run_opts *o, model *m, kern_ctx *kc, const session *s, char *err,
                          size_t errlen)
{
    if (!o->repack)
        return 0;
    if (run_opts_check_repack(o, m, err, errlen))
        return -1;
    bool *cpu = malloc(sizeof *cpu * (size_t)m->hp.n_layer);
    if (!cpu) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int il = 0; il < m->hp.n_layer; il++)
        cpu[il] = !engine_layer_on_gpu(s->e, il);
    /* in the cache directory, where the OS can reclaim them; in memory when that fails */
    char dir[4096], why[4608];
    int64_t kept = cache_dir(dir, sizeof dir) == 0
                       ? model_keep_weights(m, kc, cpu, true, dir, why, sizeof why)
                       : (snprintf(why, sizeof why, "no cache directory (set PRIMA_CACHE_DIR)"), -1);
    if (kept < 0) {
        fprintf(stderr, "prima: warning: repacked weights: %s; keeping them in memory\n", why);
        kept = model_keep_weights(m, kc, cpu, true, NULL, err, errlen);
    }
    free(cpu);
    return kept < 0 ? -1 : 0;
}

void run_opts_free(run_opts *o)
{
    free(o->prompt_owned);
    o->prompt_owned = NULL;
    free(o->chat_template);
    o->chat_template = NULL;
}
void ring_args_init(ring_args *a)
{
    memset(a, 0, sizeof *a);
    a->release = RELEASE_AUTO;
    a->method = PREFETCH_TOUCH;
    a->wire = WIRE_F32;
}

bool ring_args_active(const ring_args *a)
{
    return (a->workers && *a->workers) || a->n_lw > 0 || a->k > 0 || a->discover;
}

ring_opts ring_args_opts(const ring_args *a)
{
    return (ring_opts){.workers = a->workers, .lw = a->lw, .n_lw = a->n_lw, .gpu_layers = a->gl,
                       .n_gpu_layers = a->n_gl, .k = a->k,
                       .worker_threads = a->worker_threads, .prefetch = !a->no_prefetch,
                       .release = a->release, .method = a->method, .wire = a->wire,
                       .key = &a->key, .verbose = a->verbose ? stderr : NULL,
                       .stats = a->stats};
}

#define REDISCOVER_S 10
#define REDISCOVER_MS 300

int ring_args_discover(ring_args *a, const model *m, char *err, size_t errlen)
{
    char line[1024];
    ring_model rm;
    disc_keys dk;
    disc_result *res = malloc(sizeof *res);
    if (!res) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* Later probes, between requests, keep the requests waiting: briefer and rarer. */
    int64_t now = net_now_ns();
    if (a->discovery_done && now - a->discovered_ns < (int64_t)REDISCOVER_S * 1000000000) {
        free(res);
        return 0;
    }
    a->discovered_ns = now;
    disc_opts o = {.port = a->discovery_port, .wait_ms = a->discovery_done ? REDISCOVER_MS : 0};
    int rc = ring_model_init(&rm, m, err, errlen);
    if (rc == 0) {
        rc = disc_keys_derive(&a->key, &dk, err, errlen) ||
             disc_probe(&dk, rm.identity, &o, res, err, errlen);
        ring_model_release(&rm);
        sodium_memzero(&dk, sizeof dk);
    }
    if (rc) {
        free(res);
        return -1;
    }
    char found[sizeof a->discovered] = "";
    for (int i = 0, off = 0; i < res->n && off < (int)sizeof found; i++)
        off += snprintf(found + off, sizeof found - (size_t)off, "%s%s", i ? "," : "",
                        res->w[i].addr);
    bool first = !a->discovery_done;
    if (first || strcmp(found, a->discovered)) {
        disc_describe(res, line, sizeof line);
        fprintf(stderr, "prima: discovery: %s\n", line);
    }
    snprintf(a->discovered, sizeof a->discovered, "%s", found);
    free(res);
    if (!first)
        return 0;
    /* The listed workers first, in their order; then those found that are not listed. */
    snprintf(a->all_workers, sizeof a->all_workers, "%s", a->workers ? a->workers : "");
    for (char *p = found; *p;) {
        size_t len = strcspn(p, ",");
        char one[NET_HOST_MAX + 8];
        snprintf(one, sizeof one, "%.*s", (int)len, p);
        p += len + (p[len] == ',');
        bool listed = false;
        for (const char *q = a->workers; q && *q;) {
            size_t ql = strcspn(q, ",");
            listed |= ql == strlen(one) && !strncmp(q, one, ql);
            q += ql + (q[ql] == ',');
        }
        size_t used = strlen(a->all_workers);
        if (!listed)
            snprintf(a->all_workers + used, sizeof a->all_workers - used, "%s%s",
                     used ? "," : "", one);
    }
    a->workers = a->all_workers[0] ? a->all_workers : NULL;
    a->discovery_done = true;
    return 0;
}

int ring_args_failover(const ring_args *a, ring_head *h, session *s, sched_planner *sp,
                       char *err, size_t errlen)
{
    if (a->no_failover)
        return 0;
    return ring_head_failover(h, s, a->n_lw ? NULL : &sp->rp, stderr, err, errlen);
}
