/* prima run — generate text with a model on this device, or chat with it (-cnv). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/chat_input.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "app/runner.h"
#include "cluster/stats.h"

static const char usage_head[] =
    "usage: prima run -m FILE (-p PROMPT | -f FILE | -cnv) [--workers H:P,...] [options]\n"
    "\n"
    "Generate text on this device, or on a ring of devices: with --workers, this device\n"
    "is the head (tokenizer, embedding, output layer, sampling; the text never leaves it)\n"
    "and the model's layers are split over it and the workers (prima worker), each with\n"
    "its own copy of the model file. The answer streams to stdout; load time, prompt\n"
    "tokens/s, generation ms/token and tokens/s, and memory use go to stderr.\n"
    "Generation ends at an end-of-generation token of the vocabulary, a --stop string,\n"
    "after -n tokens, or when the context is full (unless --context-shift); a line\n"
    "on stderr says which.\n"
    "The prompt is tokenized with the vocabulary's BOS setting, and control tokens\n"
    "written in it (e.g. <|im_start|>) are recognised.\n\n";
static const char usage_tail[] =
    "\n"
    "Exit status: 0 on success (a full context included), 1 on an error (a model or\n"
    "prompt file that cannot be read included), 2 on a usage error (an unknown option,\n"
    "a malformed value or --workers address).\n";

static void emit_stdout(void *user, const char *text, size_t len)
{
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

/* A prompt or generation event of the --stats file (cluster/stats.h). */
static void emit_times(FILE *stats, const char *event, int tokens, double seconds)
{
    if (!stats || !tokens)
        return;
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddNumberToObject(o, "tokens", tokens);
        cJSON_AddNumberToObject(o, "seconds", seconds);
    }
    stats_emit(stats, event, o);
}

/* The ring's plan and each device's part in it, per batch evaluated (a prompt's chunk or a
 * generated token): what shows a ring at work whatever the model says. */
static void print_ring(const runner *r)
{
    ring *rg = r->rh.r;
    ring_finish(rg);   /* the workers' last counters */
    const ring_plan *p = ring_get_plan(rg);
    int batches = ring_batches(rg);
    if (!batches)
        return;
    fprintf(stderr, "prima: ring: %d device%s, %d round%s a token; per batch (%d batches: the "
                    "prompt's chunks and one a generated token):\n",
            p->n_dev, p->n_dev > 1 ? "s" : "", p->k, p->k > 1 ? "s" : "", batches);
    /* a model of experts: the disk read against the routed experts' bytes (paging by expert) */
    const bool experts = r->m->hp.n_expert > 0;
    fprintf(stderr, "prima:   device  address                layers       compute ms  wait ms"
                    "  sent KiB%s\n", experts ? "  disk MiB  routed MiB" : "");
    for (int d = 0; d < p->n_dev; d++) {
        ring_counters c;
        char addr[NET_HOST_MAX + 8], layers[256];
        uint64_t budget;
        ring_totals(rg, d, &c);
        ring_device(rg, d, addr, sizeof addr, &budget);
        plan_format_layers(p, d, layers, sizeof layers);
        char more[64] = "";
        if (experts)
            snprintf(more, sizeof more, "  %8.2f  %10.2f", c.disk_bytes / 1048576.0 / batches,
                     c.routed_bytes / 1048576.0 / batches);
        fprintf(stderr, "prima:   %-6d  %-21s  %-11s  %10.3f  %7.3f  %8.2f%s\n", d,
                d ? addr : "(the head)", layers, c.compute_ns / 1e6 / batches,
                c.wait_ns / 1e6 / batches, c.bytes_sent / 1024.0 / batches, more);
    }
}

static void print_stats(const runner *r)
{
    const gen_stats *st = &r->st;
    uint64_t kv, scratch;
    engine_memory(r->s->e, &kv, &scratch);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double mib = 1024.0 * 1024.0;
    const model_hparams *hp = &r->m->hp;
    fprintf(stderr, "\nprima: %s: %d layers, n_embd %d, %d heads / %d kv, vocab %d; context %d, "
                    "batch %d, %d thread%s, seed %" PRIu64 "\n",
            r->o.model, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->n_vocab,
            r->s->n_ctx, r->s->n_batch, r->o.n_threads, r->o.n_threads > 1 ? "s" : "",
            r->o.sp.seed);
    if (r->plan_s > 0)
        fprintf(stderr, "prima: load %.2f s; scheduler %.2f s (profiling the devices, probing "
                        "the links, planning)\n", r->load_s - r->plan_s, r->plan_s);
    else
        fprintf(stderr, "prima: load %.2f s\n", r->load_s);
    if (st->n_prompt)
        fprintf(stderr, "prima: prompt %d tokens in %.2f s: %.2f tokens/s\n", st->n_prompt,
                st->prompt_s, st->prompt_s > 0 ? st->n_prompt / st->prompt_s : 0.0);
    if (st->n_gen)
        fprintf(stderr, "prima: generation %d tokens in %.2f s: %.2f ms/token, %.2f tokens/s\n",
                st->n_gen, st->gen_s, 1e3 * st->gen_s / st->n_gen,
                st->gen_s > 0 ? st->n_gen / st->gen_s : 0.0);
    if (st->n_shift)
        fprintf(stderr, "prima: %d context shift(s)\n", st->n_shift);
    emit_times(r->ra.stats, "prompt", st->n_prompt, st->prompt_s);
    emit_times(r->ra.stats, "generation", st->n_gen, st->gen_s);
    if (r->spec)
        fprintf(stderr, "prima: speculation (%s): %ld evaluations for %d tokens; drafted %ld, "
                        "accepted %ld (acceptance %.1f%%)\n",
                r->draft ? r->o.draft_model : "n-gram", st->spec.steps, st->n_gen,
                st->spec.drafted, st->spec.accepted,
                st->spec.drafted ? 100.0 * (double)st->spec.accepted / (double)st->spec.drafted
                                 : 0.0);
    fprintf(stderr, "prima: memory: weights %.1f MiB mapped (%.1f MiB repacked), KV cache %.1f MiB, "
                    "scratch %.1f MiB; peak resident %.1f MiB\n",
            (double)r->m->file->size / mib, (double)model_kept_bytes(r->m) / mib, (double)kv / mib,
            (double)scratch / mib, (double)ru.ru_maxrss / 1024.0);
    if (r->rh.r)
        print_ring(r);
}

/* Say why generation ended (one line on stderr); returns the exit status. */
static int report_end(const runner *r, enum gen_end end, const char *err)
{
    switch (end) {
    case GEN_ERROR:
        return cli_fail("%s", err);
    case GEN_EOG:
        fprintf(stderr, "\nprima: stopped: the model produced an end-of-generation token\n");
        break;
    case GEN_STOP_STRING:
        fprintf(stderr, "\nprima: stopped: the output reached a --stop string\n");
        break;
    case GEN_LIMIT:
        fprintf(stderr, "\nprima: stopped: %d tokens generated, as -n asked\n", r->o.n_predict);
        break;
    case GEN_CANCELLED: /* a chat's Ctrl-C (which says so itself) or a caller's hook */
        fprintf(stderr, "\nprima: stopped: cancelled\n");
        break;
    case GEN_CONTEXT_FULL:
        fprintf(stderr, "\nprima: stopped: context full (%d tokens): use -c to enlarge it, or "
                        "--context-shift\n",
                r->s->n_ctx);
        break;
    }
    return 0;
}

static int run_prompt(runner *r)
{
    char err[512];
    int32_t *toks = NULL;
    const char *p = r->o.prompt;
    int n = tokenizer_encode(r->tk, p, strlen(p), true, true, &toks);
    if (n < 0)
        return cli_fail("cannot tokenize the prompt: %s", tokenizer_strerror(n));
    if (n == 0) {
        free(toks);
        return cli_fail("the prompt is empty and the vocabulary adds no BOS token");
    }
    /* A context shift drops earlier tokens to make room for later ones: it cannot make a
     * prompt that is evaluated whole fit. */
    if (n > r->s->n_ctx) {
        free(toks);
        return cli_fail("the prompt is too long: %d tokens, and the context holds %d (-c)", n,
                        r->s->n_ctx);
    }
    if (r->o.display_prompt) {
        fputs(p, stdout);
        fflush(stdout);
    }
    int rc = gen_feed(r->s, r->smp, &r->go, toks, n, &r->st, err, sizeof err);
    free(toks);
    if (rc)
        return cli_fail("%s", err);
    enum gen_end end = gen_reply(r->s, r->tk, r->smp, &r->go, emit_stdout, NULL, NULL, &r->st,
                                 err, sizeof err);
    fputc('\n', stdout);
    return report_end(r, end, err);
}

/* Chat: the whole conversation is rendered with the template and tokenized every turn; only
 * the tokens after the part already in the cache are evaluated. */
typedef struct chat {
    chat_msg *msgs;
    char **owned;   /* texts we allocated (user lines, replies), freed at the end */
    int n, cap;
} chat;

static int chat_add(chat *c, const char *role, char *content, bool owned)
{
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 16;
        chat_msg *m = realloc(c->msgs, sizeof *m * (size_t)cap);
        if (!m)
            return -1;
        c->msgs = m;
        char **o = realloc(c->owned, sizeof *o * (size_t)cap);
        if (!o)
            return -1;
        c->owned = o;
        c->cap = cap;
    }
    c->msgs[c->n] = (chat_msg){role, content};
    c->owned[c->n] = owned ? content : NULL;
    c->n++;
    return 0;
}

static void chat_free(chat *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->owned[i]);
    free(c->msgs);
    free(c->owned);
}

/* chat_tokens' answer when the conversation does not fit: apart from every TOK_ERR_* code. */
#define CHAT_FULL (-100)

/* Tokenize the conversation (its messages as plain text: chat_tokenize); if it no longer fits,
 * drop the oldest turns after the system message (with --context-shift). Returns the token count, CHAT_FULL, or a TOK_ERR_* code
 * (tokenizer_strerror says which). */
static int chat_tokens(runner *r, chat *c, int32_t **toks, char *err, size_t errlen)
{
    for (;;) {
        int n = chat_format_tokenize(r->chat, r->tk, c->msgs, c->n, true, toks, err, errlen);
        if (n < 0 || n < r->s->n_ctx)
            return n;
        free(*toks);
        *toks = NULL;
        int first = c->n > 0 && !strcmp(c->msgs[0].role, "system") ? 1 : 0;
        if (!r->o.context_shift || c->n - first < 3)
            return CHAT_FULL;
        /* forget the oldest user/assistant exchange */
        free(c->owned[first]);
        free(c->owned[first + 1]);
        memmove(c->msgs + first, c->msgs + first + 2, sizeof *c->msgs * (size_t)(c->n - first - 2));
        memmove(c->owned + first, c->owned + first + 2,
                sizeof *c->owned * (size_t)(c->n - first - 2));
        c->n -= 2;
        r->st.n_shift++;
    }
}

static const char chat_help[] =
    "prima: /help this list; /clear forget the conversation (the system message stays);\n"
    "prima: /save FILE write the conversation to FILE as JSON; /exit end the chat (or Ctrl-D,\n"
    "prima: or Ctrl-C at an empty prompt). Ctrl-C while a reply comes stops the reply.\n";

/* The conversation as JSON: [{"role": ..., "content": ...}, ...]. */
static int chat_save(const chat *c, const char *path)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < c->n; i++) {
        cJSON *m = cJSON_CreateObject();
        if (!m || !cJSON_AddStringToObject(m, "role", c->msgs[i].role) ||
            !cJSON_AddStringToObject(m, "content", c->msgs[i].content)) {
            cJSON_Delete(m);
            cJSON_Delete(a);
            a = NULL;
            break;
        }
        cJSON_AddItemToArray(a, m);
    }
    char *text = a ? cJSON_Print(a) : NULL;
    cJSON_Delete(a);
    if (!text) {
        fprintf(stderr, "prima: /save: out of memory\n");
        return -1;
    }
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f))
        ok = false;
    free(text);
    if (!ok) {
        fprintf(stderr, "prima: /save %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(stderr, "prima: the conversation (%d messages) is in %s\n", c->n, path);
    return 0;
}

/* A line that starts with '/': one of the chat's commands. 1: the chat ends. */
static int chat_command(chat *c, const char *line)
{
    if (!strcmp(line, "/exit"))
        return 1;
    if (!strcmp(line, "/help")) {
        fputs(chat_help, stderr);
    } else if (!strcmp(line, "/clear")) {
        int first = c->n > 0 && !strcmp(c->msgs[0].role, "system") ? 1 : 0;
        for (int i = first; i < c->n; i++)
            free(c->owned[i]);
        c->n = first;
        fprintf(stderr, "prima: the conversation is forgotten%s\n",
                first ? " (the system message stays)" : "");
    } else if (!strncmp(line, "/save ", 6) && line[6]) {
        chat_save(c, line + 6);
    } else {
        fprintf(stderr, "prima: %s: no such command (/help lists them)\n", line);
    }
    return 0;
}

/* One turn: the user's line in, the model's reply out. 0, 1 when the chat must end, or an
 * exit status with a message printed. */
static int chat_turn(runner *r, chat *c, const char *line)
{
    char err[512];
    /* A worker lost earlier that answers again takes part in this turn. */
    if (runner_rejoin(r, err, sizeof err))
        return cli_fail("%s", err);
    char *msg = strdup(line);
    if (!msg || chat_add(c, "user", msg, true)) {
        free(msg);
        return cli_fail("out of memory");
    }
    int32_t *toks = NULL;
    int n = chat_tokens(r, c, &toks, err, sizeof err);
    if (n == CHAT_FULL) {
        fprintf(stderr, "prima: context full (%d tokens): ending the chat (use -c to "
                        "enlarge it, or --context-shift)\n",
                r->s->n_ctx);
        return -1;
    }
    if (n == CHAT_ERR_TEMPLATE)
        return cli_fail("%s", err);
    if (n < 0)
        return cli_fail("cannot tokenize the conversation: %s", tokenizer_strerror(n));
    int common = 0;
    while (common < n && common < r->s->n_past && toks[common] == r->s->tokens[common])
        common++;
    if (common == n) /* at least one token must be evaluated to get fresh logits */
        common--;
    session_truncate(r->s, common);
    common = r->s->n_past;   /* fewer when sliding layers cannot resume there */
    sampler_reset(r->smp);
    for (int i = 0; i < common; i++)
        sampler_accept(r->smp, toks[i]);
    int frc = gen_feed(r->s, r->smp, &r->go, toks + common, n - common, &r->st, err,
                       sizeof err);
    free(toks);
    if (frc)
        return cli_fail("%s", err);
    char *reply = NULL;
    enum gen_end end = gen_reply(r->s, r->tk, r->smp, &r->go, emit_stdout, NULL, &reply,
                                 &r->st, err, sizeof err);
    fputc('\n', stdout);
    fflush(stdout);
    /* a reply stopped or cut off stays in the conversation as far as it went */
    if (!reply || chat_add(c, "assistant", reply, true)) {
        free(reply);
        return cli_fail("out of memory");
    }
    if (end == GEN_CANCELLED)
        fprintf(stderr, "prima: reply stopped (Ctrl-C)\n");
    else if (end == GEN_LIMIT)
        fprintf(stderr, "prima: the reply was cut off at %d tokens (-n)\n", r->o.n_predict);
    if (end == GEN_ERROR || end == GEN_CONTEXT_FULL) {
        int rc = report_end(r, end, err);
        return rc ? rc : -1;
    }
    return 0;
}

static int run_chat(runner *r)
{
    bool warned = false;
    const char *format = chat_format_describe(r->chat, &warned);
    if (warned)
        fprintf(stderr, "prima: warning: chat template not recognised, using ChatML\n");
    else
        fprintf(stderr, "prima: chat format: %s\n", format);
    chat c = {0};
    if (r->o.prompt && *r->o.prompt && chat_add(&c, "system", (char *)r->o.prompt, false))
        return cli_fail("out of memory");
    chat_input *in = chat_input_open();
    if (!in) {
        chat_free(&c);
        return cli_fail("out of memory");
    }
    r->go.cancel = chat_input_cancel();
    fprintf(stderr, "prima: chat mode: type a message; /help for commands, /exit or Ctrl-D to "
                    "quit\n");
    int rc = 0;
    const char *line;
    while (chat_input_read(in, &line) == CHAT_LINE) {
        if (line[0] == '/') {
            if (chat_command(&c, line))
                break;
        } else if (line[0] && (rc = chat_turn(r, &c, line)) != 0) {
            rc = rc < 0 ? 0 : rc;   /* -1: the chat ends, without an error */
            break;
        }
    }
    r->go.cancel = NULL;
    chat_input_close(in);
    chat_free(&c);
    return rc;
}

int cli_run_runner(runner *r)
{
    char err[512];
    int rc = runner_open(r, err, sizeof err) ? cli_fail("%s", err) : 0;
    if (rc == 0) {
        rc = r->o.conversation ? run_chat(r) : run_prompt(r);
        if (rc == 0)
            print_stats(r);
    }
    runner_close(r);
    return rc;
}

static int cmd_run(int argc, char **argv)
{
    runner r = {0};
    unsigned groups = RUN_OPT_MODEL | RUN_OPT_GPU | RUN_OPT_SAMPLING | RUN_OPT_GEN | RUN_OPT_CHAT;
    int arc = runner_args(&r, groups, argc, argv, usage_head, usage_tail, NULL, 0);
    if (arc)
        return arc < 0 ? 0 : arc;
    if (!r.o.prompt && !r.o.conversation) {
        cli_fail("run: no prompt (-p TEXT, -f FILE, or -cnv for a chat)");
        run_opts_free(&r.o);
        return 2;
    }
    return cli_run_runner(&r);
}

const struct cli_command cli_cmd_run = {"run", "generate text or chat, on this device or a ring of devices",
                                        cmd_run};
