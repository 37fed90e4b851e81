/* runner.c — opening what a text-generating command holds (runner.h): the model, tokenizer,
 * threads and a session on this device or round a ring; serve reopens the session through the
 * same calls after a ring failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/gpu_offload.h"
#include "app/runner.h"
#include "sched/startup.h"
#include "util/sysmem.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A device alone with a model of experts larger than its weight budget runs as a ring of one
 * device (cluster/device.c, Paging by expert): its hottest experts stay in memory and the cold
 * ones are dropped once computed, where a plain session would leave whole layers to the
 * kernel's eviction and read them again a token. Not with a GPU's layers, several sequences or
 * speculation, which a plain session does and a ring does otherwise. */
static bool lone_pages_by_expert(const runner *r)
{
    const model *m = r->m;
    if (m->hp.n_expert == 0 || r->n_seq > 1 || r->spec || r->o.n_gpu_layers > 0)
        return false;
    return model_weight_bytes(m) > sysmem_weight_budget();
}

int runner_session(runner *r, char *err, size_t errlen)
{
    bool lone = !ring_args_active(&r->ra) && lone_pages_by_expert(r);
    if (lone && run_opts_check_repack(&r->o, r->m, err, errlen))
        return -1;
    if (lone)
        fprintf(stderr, "prima: the model's weights exceed this device's memory budget: paging "
                "its experts (a ring of this device alone)\n");
    if (ring_args_active(&r->ra) || lone) {
        if (r->ra.discover && !r->ra.discovery_done && ring_args_discover(&r->ra, r->m, err, errlen))
            return -1;
        ring_opts ro = ring_args_opts(&r->ra);
        if (lone)
            ro.k = 1;
        const offload_opts go = gpu_offload_opts(&r->o);
        sched_planner_init(&r->sp, r->m, r->o.model, r->o.n_threads, stderr);
        app_progress_planner(&r->prog, &r->sp);
        r->sp.stats = r->ra.stats;
        r->sp.gpu = go;
        r->sp.profile_cache = r->ra.profile_cache;
        ro.planner = &r->sp.rp;
        ro.on_transfer = app_progress_transfer;
        ro.transfer_ctx = &r->prog;
        ro.n_seq = r->n_seq > 1 ? r->n_seq : 1;
        r->s = ring_head_session(&r->rh, &ro, &go, r->m, r->kc, r->n_ctx, r->o.n_batch, err,
                                 errlen);
        r->plan_s = r->sp.seconds;
        if (r->s)
            gpu_offload_report_ring(&r->rh);
        /* failover rebuilds one sequence's cache: with several, a lost worker ends the session */
        if (r->s && ro.n_seq == 1 &&
            ring_args_failover(&r->ra, &r->rh, r->s, &r->sp, err, errlen)) {
            runner_session_close(r);
            return -1;
        }
    } else {
        r->s = session_create_split(r->m, r->kc, r->n_ctx, r->o.n_batch,
                                    r->n_seq > 1 ? r->n_seq : 1, NULL, NULL, err, errlen);
        if (r->s && (gpu_offload_session(&r->o, r->m, r->s, &r->gpu, err, errlen) ||
                     run_opts_apply_repack(&r->o, r->m, r->kc, r->s, err, errlen)))
            return -1;
    }
    return r->s ? 0 : -1;
}

int runner_rejoin(runner *r, char *err, size_t errlen)
{
    if (r->ra.discover && ring_args_discover(&r->ra, r->m, err, errlen))
        return -1;
    return ring_head_rejoin(&r->rh, r->ra.discover ? r->ra.discovered : NULL, err, errlen);
}

void runner_session_close(runner *r)
{
    ring_head_close(&r->rh);   /* says bye to the workers: before the session goes */
    session_free(r->s);
    r->s = NULL;
    gpu_close(r->gpu);         /* after the session: it held the GPU's layers */
    r->gpu = NULL;
    gpu_close(r->rh.dev);      /* likewise, in a ring */
    r->rh.dev = NULL;
}

/* The draft model (on this device, the head, with the target's context) or the n-gram
 * drafter. 0, or -1 with err. */
static int open_spec(runner *r, char *err, size_t errlen)
{
    if (r->o.draft_model) {
        r->draft = model_load(r->o.draft_model, err, errlen);
        if (!r->draft)
            return -1;
    }
    spec_params p;
    spec_params_default(&p, r->o.spec_mode ? SPEC_NGRAM : SPEC_DRAFT);
    p.n_max = r->o.draft_max;
    p.n_min = r->o.draft_min;
    p.p_min = r->o.draft_p_min;
    p.log = r->ra.verbose ? stderr : NULL;
    r->spec = spec_create(&p, r->m, r->draft, r->kc, r->n_ctx, r->o.n_batch,
                          r->o.sp.seed ^ 0x9e3779b97f4a7c15ull, err, errlen);
    return r->spec ? 0 : -1;
}

int runner_open(runner *r, char *err, size_t errlen)
{
    double t0 = now_s();
    if (runner_load(r, err, errlen) || runner_session(r, err, errlen))
        return -1;
    r->load_s = now_s() - t0;
    return 0;
}

int runner_load(runner *r, char *err, size_t errlen)
{
    r->m = model_load(r->o.model, err, errlen);
    if (!r->m || (r->o.mlock && model_mlock(r->m, err, errlen)) ||
        run_opts_apply_kv(&r->o, r->m, err, errlen))
        return -1;
    r->tk = tokenizer_load(r->m->file, err, errlen);
    if (!r->tk)
        return -1;
    char why[512];
    r->chat = chat_format_load(r->m->file, r->tk, r->o.chat_template, r->o.chat_template_len, why,
                               sizeof why);
    if (!r->chat) {
        snprintf(err, errlen, "%s%s%s", r->o.chat_template_file ? r->o.chat_template_file : "",
                 r->o.chat_template_file ? ": " : "", why);
        return -1;
    }
    const model_hparams *hp = &r->m->hp;
    r->n_ctx = r->o.n_ctx;
    if (r->n_ctx == 0)
        r->n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    else if (r->n_ctx > hp->n_ctx_train)
        fprintf(stderr, "prima: warning: context %d is larger than the model's training context %d\n",
                r->n_ctx, hp->n_ctx_train);
    r->kc = kern_ctx_create(r->o.n_threads);
    if (!r->kc) {
        snprintf(err, errlen, "cannot start %d compute threads", r->o.n_threads);
        return -1;
    }
    r->smp = sampler_create(&r->o.sp, hp->n_vocab);
    if (!r->smp) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (r->o.speculate && open_spec(r, err, errlen))
        return -1;
    r->go = (gen_opts){.n_predict = r->o.n_predict, .ignore_eos = r->o.ignore_eos,
                       .stop = r->o.stop, .n_stop = r->o.n_stop,
                       .context_shift = r->o.context_shift, .n_keep = r->o.n_keep,
                       .spec = r->spec};
    if (r->go.n_keep < 0)
        r->go.n_keep = tokenizer_add_bos(r->tk) ? 1 : 0;
    return 0;
}

void runner_close(runner *r)
{
    sampler_free(r->smp);
    spec_free(r->spec);
    model_free(r->draft);
    runner_session_close(r);
    kern_ctx_free(r->kc);
    chat_format_free(r->chat);
    tokenizer_free(r->tk);
    model_free(r->m);
    run_opts_free(&r->o);
}
