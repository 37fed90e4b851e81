/* prima bench serve — aggregate decode throughput and per-request time per output token of
 * prima serve under 1, 2, 4, 8 concurrent streaming clients, on a ring on this machine. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "app/local_workers.h"
#include "app/serve_engine.h"

#define MAX_CLIENTS 64

static const char usage_head[] =
    "usage: prima bench serve -m FILE [--devices N] [--clients C,C,...] [options]\n"
    "\n"
    "Start a ring of N devices on this machine (N-1 workers on loopback, this process the\n"
    "head running prima serve's server on a loopback port), or use the --workers given\n"
    "(an emulated cluster: tools/prima-emu run --head-command \"bench serve\"); then for\n"
    "each client count C let C clients stream --requests completions each (--tokens\n"
    "tokens, greedy, distinct prompts) at once, and report:\n"
    "  serve aggregate C    generated tokens per second of all clients together (from the\n"
    "                       first request sent to the last answer)\n"
    "  serve tpot C         median over the requests of the time between a request's\n"
    "                       first and last token, per token\n"
    "  serve ratio C        aggregate and TPOT at C clients over those at 1\n"
    "The client counts run in the order given and then in reverse (alternating pairs);\n"
    "each figure is the median of its runs, with the spread.\n\n";

typedef struct bench_opts {
    int n_dev, clients[16], n_clients, requests, tokens, slots, in_flight;
    bool json, devices_given;
} bench_opts;

static int parse_devices(void *dst, const char *flag, const char *v)
{
    bench_opts *b = dst;
    b->devices_given = true;
    return parse_int_arg(flag, v, 1, PRIMA_MAX_DEVICES, &b->n_dev);
}

static int parse_clients(void *dst, const char *flag, const char *v)
{
    bench_opts *b = dst;
    b->n_clients = parse_int_list(v, 1, MAX_CLIENTS, b->clients, 16);
    if (b->n_clients < 0) {
        cli_fail("%s: expected up to 16 comma-separated counts in [1, %d], got '%s'", flag,
                 MAX_CLIENTS, v);
        return -1;
    }
    return 0;
}

#define F(field) offsetof(bench_opts, field)
static const cli_opt bench_rows[] = {
    {"--devices", "N", CLI_FN, .fn = parse_devices,
     .help = "devices in the ring, the head included (default 3; not\nwith --workers)"},
    {"--clients", "C,C,...", CLI_FN, .fn = parse_clients,
     .help = "client counts (default 1,2,4,8; at most 64)"},
    {"--requests", "N", CLI_INT, F(requests), 1, 1000,
     .help = "requests per client and run (default 2)"},
    {"--tokens", "N", CLI_INT, F(tokens), 2, 100000, .help = "tokens per request (default 32)"},
    {"-np", "N", CLI_INT, F(slots), 1, SERVE_MAX_SLOTS,
     .help = "the server's slots (prima serve -np; default 1)"},
    {"--in-flight", "N", CLI_INT, F(in_flight), 1, PRIMA_MAX_DEVICES,
     .help = "its micro-batches in flight (prima serve --in-flight)"},
    {"--json", NULL, CLI_FLAG, F(json), .help = "one JSON object per measurement and line"},
    {0},
};
#undef F
static const cli_group bench_group = {"bench serve:", bench_rows, NULL};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct client {
    pthread_t t;
    int port, id, requests, tokens;
    int generated;       /* tokens of all its answers */
    double tpot[1000];   /* per request */
    bool failed;
} client;

/* One streamed completion over a new connection: its tokens and TPOT, or -1. */
static int stream_once(client *c, int k, double *tpot)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char body[256], req[512];
    int bl = snprintf(body, sizeof body,
                      "{\"prompt\":\"Client %d asks question %d: once upon a time\",\"max_tokens\":"
                      "%d,\"temperature\":0,\"stream\":true}",
                      c->id, k, c->tokens);
    int rl = snprintf(req, sizeof req,
                      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      "application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
                      bl, body);
    if (write(fd, req, (size_t)rl) != rl) {
        close(fd);
        return -1;
    }
    /* Count the text events as they come; the usage is in the last chunk. */
    char buf[8192], last[4096] = "";
    size_t held = 0;
    double first = 0, latest = 0;
    int events = 0;
    for (;;) {
        ssize_t n = read(fd, buf + held, sizeof buf - 1 - held);
        if (n <= 0)
            break;
        held += (size_t)n;
        buf[held] = '\0';
        char *p = buf, *e;
        while ((e = strstr(p, "\n\n"))) {
            *e = '\0';
            char *d = strstr(p, "data: {");
            if (d) {
                double t = now_s();
                if (!events++)
                    first = t;
                latest = t;
                snprintf(last, sizeof last, "%s", d + 6);
            }
            p = e + 2;
        }
        held = strlen(p);
        memmove(buf, p, held + 1);
        if (held > sizeof buf / 2)
            held = 0; /* a line this long is no event of ours */
    }
    close(fd);
    cJSON *j = cJSON_Parse(last);
    const cJSON *u = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens");
    int tokens = cJSON_IsNumber(u) ? u->valueint : -1;
    cJSON_Delete(j);
    if (tokens < 2)
        return -1;
    /* events: one per text chunk and the last; the first text arrives with the first token */
    *tpot = (latest - first) / (tokens - 1);
    return tokens;
}

static void *client_main(void *arg)
{
    client *c = arg;
    for (int k = 0; k < c->requests; k++) {
        int n = stream_once(c, k, &c->tpot[k]);
        if (n < 0) {
            c->failed = true;
            return NULL;
        }
        c->generated += n;
    }
    return NULL;
}

/* One run with n clients: aggregate tokens/s and the median TPOT. 0, or -1. */
static int run_clients(int port, const bench_opts *b, int n, double *agg, double *tpot)
{
    client *cs = calloc((size_t)n, sizeof *cs);
    if (!cs)
        return -1;
    double t0 = now_s();
    int started = 0;
    for (int i = 0; i < n; i++) {
        cs[i] = (client){.port = port, .id = i, .requests = b->requests, .tokens = b->tokens};
        if (pthread_create(&cs[i].t, NULL, client_main, &cs[i]))
            break;
        started++;
    }
    int total = 0, nt = 0;
    bool bad = started < n;
    double *all = malloc(sizeof *all * (size_t)(n * b->requests));
    for (int i = 0; i < started; i++) {
        pthread_join(cs[i].t, NULL);
        bad |= cs[i].failed;
        total += cs[i].generated;
        for (int k = 0; all && !cs[i].failed && k < b->requests; k++)
            all[nt++] = cs[i].tpot[k];
    }
    double wall = now_s() - t0;
    if (!bad && all) {
        *agg = total / wall;
        double spread;
        *tpot = bench_median_spread(all, nt, &spread);
    }
    free(all);
    free(cs);
    return bad || !all ? -1 : 0;
}

static void report(const bench_opts *b, const char *op, int c, double v, double spread,
                   const char *unit)
{
    char name[48];
    snprintf(name, sizeof name, "serve %s %d", op, c);
    bench_result r = {.op = name, .tokens = b->tokens, .threads = c, .value = v, .unit = unit,
                      .fraction = -1, .spread = spread};
    bench_print(&r, b->json);
}

static int measure(int port, const bench_opts *b)
{
    enum { MAX_RUNS = 2 };
    double agg[16][MAX_RUNS], tpot[16][MAX_RUNS];
    for (int pass = 0; pass < MAX_RUNS; pass++)
        for (int j = 0; j < b->n_clients; j++) {
            int i = pass ? b->n_clients - 1 - j : j;
            if (run_clients(port, b, b->clients[i], &agg[i][pass], &tpot[i][pass]))
                return cli_fail("bench serve: a request failed with %d clients", b->clients[i]);
        }
    double agg1 = 0, tpot1 = 0;
    for (int i = 0; i < b->n_clients; i++) {
        double sa, st;
        double a = bench_median_spread(agg[i], MAX_RUNS, &sa);
        double t = bench_median_spread(tpot[i], MAX_RUNS, &st);
        if (i == 0)
            agg1 = a, tpot1 = t;
        report(b, "aggregate", b->clients[i], a, sa, "tokens/s");
        report(b, "tpot", b->clients[i], 1e6 * t, st, "us");
        report(b, "ratio aggregate", b->clients[i], a / agg1, -1, "x");
        report(b, "ratio tpot", b->clients[i], t / tpot1, -1, "x");
    }
    return 0;
}

static int run(int argc, char **argv)
{
    runner r = {0};
    bench_opts b = {.n_dev = 3, .clients = {1, 2, 4, 8}, .n_clients = 4, .requests = 2,
                    .tokens = 32, .slots = 1};
    const cli_set own = {.g = &bench_group, .dst = &b};
    int rc = runner_args(&r, RUN_OPT_MODEL | RUN_OPT_SAMPLING, argc, argv, usage_head, NULL,
                         &own, 1);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (r.ra.workers && b.devices_given) {
        run_opts_free(&r.o);
        return cli_fail("bench serve: --devices and --workers: give one (the workers make the ring)"), 2;
    }
    /* Workers first: they are forked, and this process has no threads yet. */
    local_workers w = {.n = 0};
    char list[PRIMA_MAX_DEVICES * 24];
    if (!r.ra.workers) {
        serve_opts so = {.model_path = r.o.model, .host = "127.0.0.1", .listen_fd = -1,
                         .threads = r.o.n_threads, .method = r.ra.method,
                         .key_file = r.ra.key_file,
                         .insecure = !r.ra.key.set, .quiet = true};
        char err[512];
        if (local_workers_start(&w, b.n_dev - 1, &so, NULL, serve_worker, err, sizeof err)) {
            run_opts_free(&r.o);
            return cli_fail("bench serve: %s", err);
        }
        local_workers_list(&w, list, sizeof list);
        r.ra.workers = b.n_dev > 1 ? list : NULL;
    }
    r.n_seq = b.slots;
    char err[512];
    rc = runner_open(&r, err, sizeof err) ? cli_fail("%s", err) : 0;
    srv *s = NULL;
    serve_engine se;
    if (rc == 0 && serve_engine_init(&se, &r, b.slots, b.in_flight, err, sizeof err))
        rc = cli_fail("%s", err);
    if (rc == 0) {
        srv_engine e = serve_engine_iface(&se);
        srv_config c = {.host = "127.0.0.1", .port = 0, .model_id = "bench",
                        .queue_max = MAX_CLIENTS, .max_connections = 2 * MAX_CLIENTS,
                        .max_body = 1 << 20, .timeout_s = 60, .defaults = r.o.sp};
        s = srv_start(&c, &e, err, sizeof err);
        rc = s ? measure(srv_port(s), &b) : cli_fail("%s", err);
        srv_stop(s);
        serve_engine_free(&se);
    }
    runner_close(&r);
    local_workers_stop(&w);
    return rc;
}

const struct bench_sub bench_serve = {
    "serve", "prima serve's throughput and TPOT under 1-8 concurrent clients on a ring", run};
