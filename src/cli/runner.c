/* runner.c — opening what a text-generating command holds (runner.h): the model, tokenizer,
 * threads and a session on this device or round a ring; serve reopens the session through the
 * same calls after a ring failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/gpu_offload.h"
#include "cli/runner.h"
#include "sched/startup.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int runner_args(runner *r, unsigned groups, int argc, char **argv,
                void (*usage)(FILE *out, const run_opts *o),
                int (*extra)(void *ctx, int argc, char **argv, int *i), void *ctx)
{
    run_opts_init(&r->o, groups | RUN_OPT_SPEC); /* every runner can speculate (runner_load) */
    ring_args_init(&r->ra);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout, &r->o);
            return -1;
        }
        int c = run_opts_parse(&r->o, argc, argv, &i);
        if (c == 0)
            c = ring_args_parse(&r->ra, argc, argv, &i);
        if (c == 0 && extra)
            c = extra(ctx, argc, argv, &i);
        if (c < 0)
            return 2;
        if (c == 0) {
            cli_fail("%s: unknown option '%s' (see prima %s --help)", argv[0], argv[i], argv[0]);
            return 2;
        }
    }
    int rc = run_opts_finish(&r->o);   /* 2, or 1 for a prompt file that cannot be read */
    if (!rc && (ring_args_finish(&r->ra) || gpu_offload_check_ring(&r->o, &r->ra)))
        rc = 2;
    if (rc)
        run_opts_free(&r->o);
    return rc;
}

int runner_session(runner *r, char *err, size_t errlen)
{
    if (ring_args_active(&r->ra)) {
        if (r->ra.discover && !r->ra.discovery_done && ring_args_discover(&r->ra, r->m, err, errlen))
            return -1;
        ring_opts ro = ring_args_opts(&r->ra);
        const offload_opts go = gpu_offload_opts(&r->o);
        sched_planner_init(&r->sp, r->m, r->o.model, r->o.n_threads, stderr);
        cli_progress_planner(&r->prog, &r->sp);
        r->sp.stats = r->ra.stats;
        r->sp.gpu = go;
        r->sp.profile_cache = r->ra.profile_cache;
        ro.planner = &r->sp.rp;
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
        if (r->s && gpu_offload_session(&r->o, r->m, r->s, &r->gpu, err, errlen))
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
 * drafter. 0, or 1 after printing an error. */
static int open_spec(runner *r)
{
    char err[512];
    if (r->o.draft_model) {
        r->draft = model_load(r->o.draft_model, err, sizeof err);
        if (!r->draft)
            return cli_fail("%s", err);
    }
    spec_params p;
    spec_params_default(&p, r->o.spec_mode ? SPEC_NGRAM : SPEC_DRAFT);
    p.n_max = r->o.draft_max;
    p.n_min = r->o.draft_min;
    p.p_min = r->o.draft_p_min;
    p.log = r->ra.verbose ? stderr : NULL;
    r->spec = spec_create(&p, r->m, r->draft, r->kc, r->n_ctx, r->o.n_batch,
                          r->o.sp.seed ^ 0x9e3779b97f4a7c15ull, err, sizeof err);
    return r->spec ? 0 : cli_fail("%s", err);
}

int runner_open(runner *r)
{
    char err[512];
    double t0 = now_s();
    int rc = runner_load(r);
    if (rc)
        return rc;
    if (runner_session(r, err, sizeof err))
        return cli_fail("%s", err);
    r->load_s = now_s() - t0;
    return 0;
}

int runner_load(runner *r)
{
    char err[512];
    r->m = model_load(r->o.model, err, sizeof err);
    if (!r->m)
        return cli_fail("%s", err);
    if (r->o.mlock && model_mlock(r->m, err, sizeof err))
        return cli_fail("%s", err);
    if (run_opts_apply_kv(&r->o, r->m))
        return 1;
    r->tk = tokenizer_load(r->m->file, err, sizeof err);
    if (!r->tk)
        return cli_fail("%s", err);
    r->chat = chat_format_load(r->m->file, r->tk, r->o.chat_template, r->o.chat_template_len, err,
                               sizeof err);
    if (!r->chat)
        return cli_fail("%s%s%s", r->o.chat_template_file ? r->o.chat_template_file : "",
                        r->o.chat_template_file ? ": " : "", err);
    const model_hparams *hp = &r->m->hp;
    r->n_ctx = r->o.n_ctx;
    if (r->n_ctx == 0)
        r->n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    else if (r->n_ctx > hp->n_ctx_train)
        fprintf(stderr, "prima: warning: context %d is larger than the model's training context %d\n",
                r->n_ctx, hp->n_ctx_train);
    r->kc = kern_ctx_create(r->o.n_threads);
    if (!r->kc)
        return cli_fail("cannot start %d compute threads", r->o.n_threads);
    r->smp = sampler_create(&r->o.sp, hp->n_vocab);
    if (!r->smp)
        return cli_fail("out of memory");
    if (r->o.speculate && open_spec(r))
        return 1;
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
