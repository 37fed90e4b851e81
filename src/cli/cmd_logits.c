/* prima logits — evaluate a prompt in one batch and dump the raw logits of every position. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "app/gpu_offload.h"
#include "app/progress.h"
#include "cli/ring_args.h"
#include "sched/startup.h"
#include "cli/opts.h"
#include "cli/run_opts.h"
#include "cluster/ring_engine.h"
#include "model/session.h"
#include "text/tokenizer.h"
#include "util/strbuf.h"

static const char usage_head[] =
    "usage: prima logits -m FILE (-p TEXT | --tokens ID,ID,...) -o OUT.f32 [-n N] [--json]\n"
    "\n"
    "Evaluate a prompt in one batch and write the raw logits of every prompt position to\n"
    "OUT.f32: little-endian float32, row-major [n_positions][n_vocab], row i = the logits\n"
    "after prompt tokens 0..i (the format of the test fixtures). Then optionally continue\n"
    "greedily (argmax, ties to the lowest id) for N tokens, one token per evaluation.\n"
    "\n";

static int parse_tokens(const char *s, int32_t **out)
{
    int n = 0, cap = 16;
    int32_t *v = malloc(sizeof *v * (size_t)cap);
    const char *p = s;
    while (v) {
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (errno || end == p || id < 0 || id > INT32_MAX || (*end && *end != ',')) {
            free(v);
            cli_fail("--tokens: expected comma-separated token ids, got '%s'", s);
            return -1;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, sizeof *v * (size_t)cap);
            if (!nv)
                break;
            v = nv;
        }
        v[n++] = (int32_t)id;
        if (!*end) {
            *out = v;
            return n;
        }
        p = end + 1;
    }
    free(v);
    cli_fail("out of memory");
    return -1;
}

/* Little-endian float32 regardless of the host's byte order. */
static int write_f32_le(FILE *f, const float *x, size_t n)
{
    unsigned char buf[4096];
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        for (int b = 0; b < 4; b++)
            buf[used++] = (unsigned char)(u >> (8 * b));
        if (used == sizeof buf || i + 1 == n) {
            if (fwrite(buf, 1, used, f) != used)
                return -1;
            used = 0;
        }
    }
    return 0;
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

typedef struct logits_job {
    run_opts o;
    ring_args ra;
    const char *text, *out_path;
    int32_t *ids;    /* --tokens */
    int n_ids;
    int n_predict;
    bool json;
} logits_job;

static int parse_ids(void *dst, const char *flag, const char *v)
{
    (void)flag;
    logits_job *j = dst;
    free(j->ids);
    j->ids = NULL;
    return (j->n_ids = parse_tokens(v, &j->ids)) < 0 ? -1 : 0;
}

#define F(field) offsetof(logits_job, field)
static const cli_opt logits_rows[] = {
    {"-p --prompt", "TEXT", CLI_STR, F(text),
     .help = "tokenized with the vocabulary's BOS setting; control-token\ntext is plain text"},
    {"--tokens", "ID,ID,...", CLI_FN, .fn = parse_ids, .help = "token ids, evaluated as given"},
    {"-o --output", "FILE", CLI_STR, F(out_path), .help = "where to write the logits"},
    {"-n --n-predict", "N", CLI_INT, F(n_predict), 0, 1 << 20,
     .help = "greedy tokens to print after the prompt (default 0)"},
    {"--json", NULL, CLI_FLAG, F(json),
     .help = "print a JSON object on stdout: model, n_vocab, n_positions,\n"
             "prompt_tokens, per-row argmax and max logit, greedy_tokens,\ngreedy_text"},
    {0},
};
#undef F
static const cli_group logits_group = {
    NULL, logits_rows, "  (-c defaults to the prompt plus N; -b to the whole prompt)\n"};

/* 0: go on; 1: help was printed; -1: a usage error (reported) */
static int parse_args(logits_job *j, int argc, char **argv)
{
    cli_set sets[CLI_MAX_SETS] = {{.g = &logits_group, .dst = j}};
    int n = 1 + run_opts_sets(&j->o, sets + 1);
    n += ring_args_sets(&j->ra, true, sets + n);
    int arc = cli_opts_parse("logits", sets, n, argc, argv, usage_head,
                             "\nExit status: 0 on success, 1 on an error, 2 on a usage error.\n",
                             NULL);
    if (arc)
        return arc < 0 ? 1 : -1;
    if (run_opts_finish(&j->o) || ring_args_finish(&j->ra) || ring_args_check_local(&j->ra, &j->o))
        return -1;
    if (!j->text == !j->ids) {
        cli_fail("logits: give exactly one of -p TEXT and --tokens IDS");
        return -1;
    }
    if (!j->out_path) {
        cli_fail("logits: no output file (-o OUT.f32)");
        return -1;
    }
    return 0;
}

static void print_result(const logits_job *j, const model *m, const tokenizer *tk,
                         const int32_t *toks, int n, const float *logits, const int32_t *greedy)
{
    const int nv = m->hp.n_vocab;
    char piece[512];
    strbuf tb = {0};
    bool oom = false;
    detok_stream ds;
    detok_init(&ds);
    for (int g = 0; !oom && g < j->n_predict; g++) {
        size_t np = detok_push(&ds, tk, greedy[g], piece, sizeof piece);
        if (g + 1 == j->n_predict)
            np += detok_flush(&ds, piece + np, sizeof piece - np);
        oom = strbuf_add(&tb, piece, np) != 0;
    }
    /* Out of memory, the greedy text is left out (printed empty), as before. */
    if (oom) {
        free(tb.p);
        tb.p = NULL;
    }
    char *text = tb.p;

    if (!j->json) {
        printf("wrote %d x %d logits to %s\n", n, nv, j->out_path);
        printf("prompt tokens:");
        for (int i = 0; i < n; i++)
            printf(" %d", toks[i]);
        printf("\nlast row argmax: %d\n", argmax(logits + (size_t)(n - 1) * (size_t)nv, nv));
        if (j->n_predict > 0) {
            printf("greedy tokens:");
            for (int g = 0; g < j->n_predict; g++)
                printf(" %d", greedy[g]);
            printf("\ngreedy text: %s\n", text ? text : "");
        }
        free(text);
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", j->o.model);
    cJSON_AddNumberToObject(root, "n_vocab", nv);
    cJSON_AddNumberToObject(root, "n_positions", n);
    cJSON_AddStringToObject(root, "logits_file", j->out_path);
    cJSON *pt = cJSON_AddArrayToObject(root, "prompt_tokens");
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * (size_t)nv;
        int am = argmax(row, nv);
        cJSON_AddItemToArray(pt, cJSON_CreateNumber(toks[i]));
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "pos", i);
        cJSON_AddNumberToObject(r, "argmax", am);
        cJSON_AddNumberToObject(r, "max_logit", row[am]);
        cJSON_AddItemToArray(rows, r);
    }
    cJSON *gt = cJSON_AddArrayToObject(root, "greedy_tokens");
    for (int g = 0; g < j->n_predict; g++)
        cJSON_AddItemToArray(gt, cJSON_CreateNumber(greedy[g]));
    cJSON_AddStringToObject(root, "greedy_text", text ? text : "");
    char *s = cJSON_Print(root);
    if (s)
        puts(s);
    free(s);
    cJSON_Delete(root);
    free(text);
}

static int run_logits(logits_job *j)
{
    char err[512];
    int rc = 1;
    int32_t *toks = NULL, *greedy = NULL;
    float *logits = NULL;
    tokenizer *tk = NULL;
    kern_ctx *kc = NULL;
    session *s = NULL;
    gpu_dev *gpu = NULL;
    ring_head rh = {0};
    sched_planner sp;   /* plans the ring at the start and after a loss */
    app_progress prog;  /* its progress */
    model *m = model_load(j->o.model, err, sizeof err);
    if (!m)
        return cli_fail("%s", err);
    if (j->o.mlock && model_mlock(m, err, sizeof err)) {
        cli_fail("%s", err);
        goto done;
    }
    if (run_opts_apply_kv(&j->o, m, err, sizeof err)) {
        cli_fail("%s", err);
        goto done;
    }
    tk = tokenizer_load(m->file, err, sizeof err);
    if (!tk) {
        cli_fail("%s", err);
        goto done;
    }
    int n = j->n_ids;
    if (j->text) {
        n = tokenizer_encode(tk, j->text, strlen(j->text), true, false, &toks);
        if (n <= 0) {
            if (n == 0)
                cli_fail("logits: the prompt gives no tokens");
            else
                cli_fail("logits: cannot tokenize the prompt: %s", tokenizer_strerror(n));
            goto done;
        }
    } else {
        toks = j->ids;
        j->ids = NULL;
    }
    const int nv = m->hp.n_vocab;
    int n_ctx = j->o.n_ctx ? j->o.n_ctx : n + j->n_predict;
    int n_batch = j->o.n_batch ? j->o.n_batch : n;
    kc = kern_ctx_create(j->o.n_threads);
    if (!kc) {
        cli_fail("cannot start %d compute threads", j->o.n_threads);
        goto done;
    }
    if (ring_args_active(&j->ra)) {
        if (j->ra.discover && ring_args_discover(&j->ra, m, err, sizeof err)) {
            cli_fail("%s", err);
            goto done;
        }
        ring_opts ro = ring_args_opts(&j->ra);
        const offload_opts go = gpu_offload_opts(&j->o);
        sched_planner_init(&sp, m, j->o.model, j->o.n_threads, stderr);
        app_progress_planner(&prog, &sp);
        sp.stats = j->ra.stats;
        sp.gpu = go;
        sp.profile_cache = j->ra.profile_cache;
        ro.planner = &sp.rp;
        ro.on_transfer = app_progress_transfer;
        ro.transfer_ctx = &prog;
        s = ring_head_session(&rh, &ro, &go, m, kc, n_ctx, n_batch, err, sizeof err);
        if (s)
            gpu_offload_report_ring(&rh);
        if (s && ring_args_failover(&j->ra, &rh, s, &sp, err, sizeof err)) {
            cli_fail("%s", err);
            goto done;
        }
    } else {
        s = session_create(m, kc, n_ctx, n_batch, err, sizeof err);
        if (s && gpu_offload_session(&j->o, m, s, &gpu, err, sizeof err)) {
            cli_fail("GPU: %s", err);
            goto done;
        }
        if (s && run_opts_apply_repack(&j->o, m, kc, s, err, sizeof err)) {
            cli_fail("%s", err);
            goto done;
        }
    }
    logits = malloc(sizeof(float) * (size_t)n * (size_t)nv);
    greedy = malloc(sizeof(int32_t) * (size_t)(j->n_predict + 1));
    if (!s || !logits || !greedy) {
        cli_fail("%s", s ? "out of memory" : err);
        goto done;
    }
    if (session_eval(s, toks, n, logits, err, sizeof err)) {
        cli_fail("logits: %s", err);
        goto done;
    }
    FILE *f = fopen(j->out_path, "wb");
    if (!f) {
        cli_fail("%s: %s", j->out_path, strerror(errno));
        goto done;
    }
    int wrc = write_f32_le(f, logits, (size_t)n * (size_t)nv);
    if (fclose(f) || wrc) {
        cli_fail("%s: write error", j->out_path);
        goto done;
    }
    for (int g = 0; g < j->n_predict; g++) {
        greedy[g] = argmax(s->logits, nv);
        if (g + 1 < j->n_predict && session_eval(s, &greedy[g], 1, NULL, err, sizeof err)) {
            cli_fail("logits: greedy step %d: %s", g, err);
            goto done;
        }
    }
    print_result(j, m, tk, toks, n, logits, greedy);
    rc = 0;
done:
    free(greedy);
    free(logits);
    free(toks);
    ring_head_close(&rh);
    session_free(s);
    gpu_close(gpu);
    gpu_close(rh.dev);
    kern_ctx_free(kc);
    tokenizer_free(tk);
    model_free(m);
    return rc;
}

static int cmd_logits(int argc, char **argv)
{
    logits_job j = {0};
    run_opts_init(&j.o, RUN_OPT_MODEL | RUN_OPT_GPU);
    ring_args_init(&j.ra);
    j.o.n_batch = 0; /* default: the whole prompt in one batch */
    int prc = parse_args(&j, argc, argv);
    if (prc) {
        free(j.ids);
        return prc > 0 ? 0 : 2;
    }
    int rc = run_logits(&j);
    free(j.ids);
    run_opts_free(&j.o);
    return rc;
}

const struct cli_command cli_cmd_logits = {
    "logits", "evaluate a prompt in one batch and write the logits of every position", cmd_logits};
