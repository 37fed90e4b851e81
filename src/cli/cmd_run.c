/* prima run — generate text with a model on this device, or chat with it (-cnv). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "cli/runner.h"
#include "cluster/stats.h"

static void usage(FILE *out, const run_opts *o)
{
    fputs("usage: prima run -m FILE (-p PROMPT | -f FILE | -cnv) [--workers H:P,...] [options]\n"
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
          "written in it (e.g. <|im_start|>) are recognised.\n\n",
          out);
    run_opts_usage(o, out);
    ring_args_usage(out);
    ring_args_usage_session(out);
    fputs("  -h, --help              show this help\n"
          "\n"
          "Exit status: 0 on success (a full context included), 1 on an error (a model or\n"
          "prompt file that cannot be read included), 2 on a usage error (an unknown option,\n"
          "a malformed value or --workers address).\n",
          out);
}

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
                    "batch %d, %d threads, seed %" PRIu64 "\n",
            r->o.model, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->n_vocab,
            r->s->n_ctx, r->s->n_batch, r->o.n_threads, r->o.sp.seed);
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
    fprintf(stderr, "prima: memory: weights %.1f MiB mapped, KV cache %.1f MiB, scratch %.1f MiB; "
                    "peak resident %.1f MiB\n",
            (double)r->m->file->size / mib, (double)kv / mib, (double)scratch / mib,
            (double)ru.ru_maxrss / 1024.0);
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
    case GEN_CANCELLED: /* only a caller's on_token hook cancels; prima run has none */
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

static int run_chat(runner *r)
{
    char err[512];
    bool warned = false;
    const char *format = chat_format_describe(r->chat, &warned);
    if (warned)
        fprintf(stderr, "prima: warning: chat template not recognised, using ChatML\n");
    else
        fprintf(stderr, "prima: chat format: %s\n", format);
    chat c = {0};
    int rc = 0;
    if (r->o.prompt && *r->o.prompt && chat_add(&c, "system", (char *)r->o.prompt, false))
        return cli_fail("out of memory");
    fprintf(stderr, "prima: chat mode: type a message, /exit or Ctrl-D to quit\n");
    char *line = NULL;
    size_t line_cap = 0;
    for (;;) {
        fputs("\n> ", stdout);
        fflush(stdout);
        ssize_t len = getline(&line, &line_cap, stdin);
        if (len < 0)
            break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (!strcmp(line, "/exit"))
            break;
        if (len == 0)
            continue;
        /* A worker lost earlier that answers again takes part in this turn. */
        if (runner_rejoin(r, err, sizeof err)) {
            rc = cli_fail("%s", err);
            break;
        }
        char *msg = strdup(line);
        if (!msg || chat_add(&c, "user", msg, true)) {
            free(msg);
            rc = cli_fail("out of memory");
            break;
        }
        int32_t *toks = NULL;
        int n = chat_tokens(r, &c, &toks, err, sizeof err);
        if (n == CHAT_FULL) {
            fprintf(stderr, "prima: context full (%d tokens): ending the chat (use -c to "
                            "enlarge it, or --context-shift)\n",
                    r->s->n_ctx);
            break;
        }
        if (n == CHAT_ERR_TEMPLATE) {
            rc = cli_fail("%s", err);
            break;
        }
        if (n < 0) {
            rc = cli_fail("cannot tokenize the conversation: %s", tokenizer_strerror(n));
            break;
        }
        int common = 0;
        while (common < n && common < r->s->n_past && toks[common] == r->s->tokens[common])
            common++;
        if (common == n) /* at least one token must be evaluated to get fresh logits */
            common--;
        session_truncate(r->s, common);
        sampler_reset(r->smp);
        for (int i = 0; i < common; i++)
            sampler_accept(r->smp, toks[i]);
        int frc = gen_feed(r->s, r->smp, &r->go, toks + common, n - common, &r->st, err,
                           sizeof err);
        free(toks);
        if (frc) {
            rc = cli_fail("%s", err);
            break;
        }
        char *reply = NULL;
        enum gen_end end = gen_reply(r->s, r->tk, r->smp, &r->go, emit_stdout, NULL, &reply,
                                     &r->st, err, sizeof err);
        fputc('\n', stdout);
        if (!reply || chat_add(&c, "assistant", reply, true)) {
            free(reply);
            rc = cli_fail("out of memory");
            break;
        }
        if (end == GEN_ERROR || end == GEN_CONTEXT_FULL) {
            rc = report_end(r, end, err);
            break;
        }
    }
    free(line);
    chat_free(&c);
    return rc;
}

static int cmd_run(int argc, char **argv)
{
    runner r = {0};
    unsigned groups = RUN_OPT_MODEL | RUN_OPT_GPU | RUN_OPT_SAMPLING | RUN_OPT_GEN | RUN_OPT_CHAT;
    int arc = runner_args(&r, groups, argc, argv, usage, NULL, NULL);
    if (arc)
        return arc < 0 ? 0 : arc;
    if (!r.o.prompt && !r.o.conversation) {
        cli_fail("run: no prompt (-p TEXT, -f FILE, or -cnv for a chat)");
        return 2;
    }
    int rc = runner_open(&r);
    if (rc == 0) {
        rc = r.o.conversation ? run_chat(&r) : run_prompt(&r);
        if (rc == 0)
            print_stats(&r);
    }
    runner_close(&r);
    return rc;
}

const struct cli_command cli_cmd_run = {"run", "generate text or chat, on this device or a ring of devices",
                                        cmd_run};
