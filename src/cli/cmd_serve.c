/* prima serve — an OpenAI-compatible HTTP server on this device, alone or as a ring's head. */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "app/serve_engine.h"

static const char usage_head[] =
    "usage: prima serve -m FILE [--workers H:P,...] [--host ADDR] [--port N] [options]\n"
    "\n"
    "Serve the model over HTTP with OpenAI's API, on this device or as the head of a\n"
    "ring of devices (--workers, as in prima run):\n"
    "  POST /v1/chat/completions   chat with the model's template (\"stream\": true for\n"
    "                              server-sent events)\n"
    "  POST /v1/completions        continue a prompt\n"
    "  GET  /v1/models, GET /health (also the ring's state), GET /metrics (Prometheus)\n"
    "  GET  /                      a web page: chat, and a live view of the ring\n"
    "                              (GET /cluster is its JSON)\n"
    "Requests take messages / prompt, max_tokens (or max_completion_tokens),\n"
    "temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty,\n"
    "repeat_penalty, seed, stop (a string or up to 4), n = 1, logprobs and\n"
    "top_logprobs; the sampling options below are the defaults for fields a request\n"
    "does not give. An answer equals prima run's with the same settings and seed.\n"
    "Up to -np requests are generated at once, each in a slot of its own (its own KV\n"
    "cache of -c tokens): a step evaluates the next token of generating slots and at\n"
    "most one -b chunk of a new prompt, so a long prompt holds the others up by one\n"
    "chunk at a time; on a ring the slots are spread over micro-batches kept in flight\n"
    "together, so that its devices compute at once. A request that continues a slot's\n"
    "conversation reuses its cached tokens. A client that disconnects stops its\n"
    "generation and frees its slot. When the ring fails, the requests get an error\n"
    "(500) and the next one connects the ring again (the ring first connects once the\n"
    "server listens; /health says \"loading\" until then); with -np above 1 a lost\n"
    "worker is not planned around (no failover). One line per request goes to stderr;\n"
    "--stats FILE also gets a \"step\" event per step (its decode and prompt rows).\n\n";

typedef struct serve_args {
    const char *host, *api_key, *api_key_file, *cors_origins;
    int port, queue, timeout, slots, in_flight;
    char *key_owned;
} serve_args;

#define F(field) offsetof(serve_args, field)
static const cli_opt server_rows[] = {
    {"--host", "ADDR", CLI_STR, F(host),
     .help = "address to listen on (default 127.0.0.1; another\n"
             "without an API key prints a warning)"},
    {"--port", "N", CLI_INT, F(port), 0, 65535,
     .help = "TCP port (default 8080; 0 = any free port)"},
    {"--api-key", "KEY", CLI_STR, F(api_key),
     .help = "require \"Authorization: Bearer KEY\" (all but /health)"},
    {"--api-key-file", "FILE", CLI_STR, F(api_key_file),
     .help = "the same, the key being FILE's first line"},
    {"-np", "N", CLI_INT, F(slots), 1, SERVE_MAX_SLOTS,
     .help = "slots: requests generated at once (default 1, at most\n"
             "64; one with GPU layers or speculative decoding)"},
    {"--in-flight", "N", CLI_INT, F(in_flight), 1, PRIMA_MAX_DEVICES,
     .help = "on a ring, the slots' micro-batches kept in flight at\n"
             "once (default: one per device, so that the devices\n"
             "compute together; 1: every step one batch)"},
    {"--queue", "N", CLI_INT, F(queue), 0, 1 << 16,
     .help = "requests that may wait beyond those being generated\n"
             "(default 64; more are answered 429)"},
    {"--timeout", "S", CLI_INT, F(timeout), 1, 86400,
     .help = "close a connection idle for S seconds (default 60);\n"
             "a request's headers and body must come within 10 s"},
    {"--cors-origin", "ORIGIN", CLI_STR, F(cors_origins),
     .help = "let web pages of ORIGIN (http://host:port; several\n"
             "separated by commas; * for any) call the API from a\n"
             "browser (CORS); by default only the server's own page\n"
             "may. Without an API key the server answers only\n"
             "requests that name it by an address, localhost or\n"
             "this machine's name (Host), against DNS rebinding"},
    {0},
};
#undef F
static const cli_group server_group = {"server:", server_rows, NULL};
/* serve_slots_check's words for -np */
static const cli_term slot_terms[] = {{"slots", "-np"}, {NULL, NULL}};

/* The key: its first line, without surrounding whitespace. */
static int load_key(serve_args *a)
{
    if (a->api_key && a->api_key_file) {
        cli_fail("give --api-key or --api-key-file, not both");
        return -1;
    }
    if (a->api_key_file) {
        FILE *f = fopen(a->api_key_file, "r");
        char line[1024];
        if (!f || !fgets(line, sizeof line, f)) {
            if (f)
                fclose(f);
            cli_fail("--api-key-file %s: cannot read a key", a->api_key_file);
            return -1;
        }
        fclose(f);
        char *p = line, *end = line + strlen(line);
        while (*p == ' ' || *p == '\t')
            p++;
        while (end > p && strchr(" \t\r\n", end[-1]))
            *--end = '\0';
        a->key_owned = strdup(p);
        a->api_key = a->key_owned;
    }
    if (a->api_key && !*a->api_key) {
        cli_fail("the API key is empty");
        return -1;
    }
    return 0;
}

static bool is_loopback(const char *host)
{
    return !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The web page, generated at build time (prima_page.c; empty when it was not built). */
extern const unsigned char prima_page[];
extern const size_t prima_page_len;

static int serve(runner *r, const serve_args *a)
{
    /* Signals are taken by sigwait below; every thread started from here on blocks them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* The model now; a ring's session on the engine thread, once the server answers (its
     * /health says "loading" meanwhile: Halda's profiling can take a while). */
    char err[512];
    if (ring_args_active(&r->ra) ? runner_load(r, err, sizeof err)
                                 : runner_open(r, err, sizeof err))
        return cli_fail("%s", err);
    serve_engine se;
    if (serve_engine_init(&se, r, a->slots, a->in_flight, err, sizeof err))
        return cli_fail("%s", err);
    srv_engine e = serve_engine_iface(&se);
    srv_config c = {.host = a->host, .port = a->port, .api_key = a->api_key,
                    .model_id = base_name(r->o.model), .queue_max = a->queue,
                    .max_connections = a->queue + 64, .max_body = 8u << 20,
                    .timeout_s = (unsigned)a->timeout, .cors_origins = a->cors_origins,
                    .defaults = r->o.sp, .log = stderr,
                    .page = prima_page_len ? (const char *)prima_page : NULL,
                    .page_len = prima_page_len};
    srv *s = srv_start(&c, &e, err, sizeof err);
    if (!s) {
        serve_engine_free(&se);
        return cli_fail("%s", err);
    }
    if (!a->api_key && !is_loopback(a->host))
        fprintf(stderr, "prima: warning: listening on %s without an API key: anyone who can "
                        "reach this port can use the model (--api-key)\n",
                a->host);
    fprintf(stderr, "prima: serving %s on http://%s%s%s:%d/ (%d slot%s, queue %d)\n",
            c.model_id, strchr(a->host, ':') ? "[" : "", a->host, strchr(a->host, ':') ? "]" : "",
            srv_port(s), a->slots, a->slots > 1 ? "s" : "", a->queue);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "prima: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_stop(s);
    serve_engine_free(&se);
    return 0;
}

static int cmd_serve(int argc, char **argv)
{
    runner r = {0};
    serve_args a = {.host = "127.0.0.1", .port = 8080, .queue = 64, .timeout = 60, .slots = 1};
    unsigned groups = RUN_OPT_MODEL | RUN_OPT_GPU | RUN_OPT_SAMPLING | RUN_OPT_CHAT;
    const cli_set own = {.g = &server_group, .dst = &a};
    int arc = runner_args(&r, groups, argc, argv, usage_head,
                          "\nExit status: 0 after SIGINT or SIGTERM, 1 on an error, 2 on a usage "
                          "error.\n", &own, 1);
    if (arc)
        return arc < 0 ? 0 : arc;
    r.n_seq = a.slots;
    char err[512];
    bool bad_slots = serve_slots_check(&r, a.slots, err, sizeof err) != 0;
    if (bad_slots)
        cli_say_flags(err, sizeof err, slot_terms);
    if (load_key(&a) || (bad_slots && cli_fail("%s", err))) {
        run_opts_free(&r.o);
        free(a.key_owned);
        return 2;
    }
    int rc = serve(&r, &a);
    runner_close(&r);
    free(a.key_owned);
    return rc;
}

const struct cli_command cli_cmd_serve = {"serve", "an OpenAI-compatible HTTP server for the model or ring",
                                          cmd_serve};
