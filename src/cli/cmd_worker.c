/* prima worker — one device of a ring, serving one head after another. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "app/worker_serve.h"
#include "cluster/discover.h"
#include "cluster/ring_engine.h"
#include "kernels/kern.h"
#include "sched/startup.h"
#include "util/sysmem.h"

#define DEFAULT_PORT 9500

#define STR_(x) #x
#define STR(x) STR_(x)

static const char usage_head[] =
    "usage: prima worker -m FILE [--host ADDR] [--port P] [-t N] [options]\n"
    "       prima worker --store DIR [--store-max SIZE] [--host ADDR] [--port P] [options]\n"
    "\n"
    "Serve as one device of a ring (see prima run --workers). The worker waits for a\n"
    "head, proves with it that both hold the cluster key (--key) and agrees keys for\n"
    "the link, checks that both hold the same model file (name, shapes, tensor table),\n"
    "then computes the layers the head's plan gives it, keeping the KV cache of those\n"
    "layers only, and passes activations to the next device. When the head finishes, fails or goes silent for 5 s, the worker\n"
    "goes back to waiting: start it once, use it for any number of runs. It serves one\n"
    "head at a time and refuses others meanwhile. Only the pages of its own layers are\n"
    "read from the model file. When a head plans with the scheduler, the worker\n"
    "measures itself once (as prima profile -m FILE --gpu does, a few seconds) and keeps\n"
    "the result for later heads, re-reading only its free memory.\n"
    "\n";
static const char usage_tail[] =
    "\n"
    "Stop it with Ctrl-C or SIGTERM. Exit status: 0 when stopped, 1 on an error (model,\n"
    "port, key file), 2 on a usage error (also: neither --key nor --insecure).\n";

static int parse_method(void *dst, const char *flag, const char *v)
{
    return parse_prefetch_method(flag, v, &((serve_opts *)dst)->method);
}

/* --store-max SIZE: a number of bytes with an optional K, M, G or T (powers of 1024). */
static int parse_store_max(void *dst, const char *flag, const char *v)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
    if (end == v || *end || errno || !(x > 0) || x * mul > 1e18) {
        cli_fail("%s: expected a size such as 20G or 512M, got '%s'", flag, v);
        return -1;
    }
    ((serve_opts *)dst)->store_max = (uint64_t)(x * mul);
    return 0;
}

static int parse_gpu_mem(void *dst, const char *flag, const char *v)
{
    return parse_gib_arg(flag, v, &((serve_opts *)dst)->gpu.vram_cap);
}

#define F(field) offsetof(serve_opts, field)
static const cli_opt worker_rows[] = {
    {"-m --model", "FILE", CLI_STR, F(model_path),
     .help = "the GGUF model (the same file as the head's)"},
    {"--store", "DIR", CLI_STR, F(store_dir),
     .help = "instead of -m: keep no copy of the model; each head (or\n"
             "another worker holding them) sends the chunks of its model\n"
             "this device's plan needs, checked against the model's\n"
             "manifest and kept in DIR for later runs, and this device\n"
             "serves the chunks it holds to other workers (docs/ring.md,\n"
             "The store)"},
    {"--store-max", "SIZE", CLI_FN, .fn = parse_store_max,
     .help = "the most DIR may hold (e.g. 20G, 512M; default: no bound):\n"
             "the least recently used other models make room, or the\n"
             "transfer is refused naming the bytes it needs"},
    {"--host", "ADDR", CLI_STR, F(host), .help = "address to listen on (default: all interfaces)"},
    {"--port", "P", CLI_INT, F(port), 0, 65535,
     .help = "TCP port (default " STR(DEFAULT_PORT) "; 0 = any free port, printed)"},
    {"-t --threads", "N", CLI_INT, F(threads), 1, KERN_MAX_THREADS,
     .help = "compute threads (default: the online CPUs; a head may\n"
             "set another count with --worker-threads)"},
    {"--prefetch-method", "M", CLI_FN, .fn = parse_method,
     .help = "how the next window is loaded while other devices\n"
             "compute: touch (default), madvise or fadvise"},
    {"--key --secret-file", "FILE", CLI_STR, F(key_file), .help = ring_args_key_help},
    {"--insecure", NULL, CLI_FLAG, F(insecure),
     .help = "without a key: serve plaintext links, which anyone who\n"
             "can reach the port can read and use (refused without\n"
             "either; loudly warned about off loopback)"},
    {"--advertise", NULL, CLI_FLAG, F(advertise),
     .help = "answer discovery probes of heads with the same key\n"
             "(prima run --discover): UDP broadcast and link-local\n"
             "multicast; needs the key, which authenticates both"},
    {"--discovery-port", "P", CLI_INT, F(discovery_port), 1, 65535,
     .help = "UDP port for discovery (default " STR(DISC_PORT) ")"},
    {"--gpu", "N", CLI_INT, F(gpu.index), 0, 255,
     .help = "the Vulkan device for the GPU layers a head's plan gives\n"
             "this device (default: the first discrete GPU, else the\n"
             "first device); the scheduler's profile measures it too"},
    {"--no-gpu", NULL, CLI_UNSET, F(gpu.use),
     .help = "never use a GPU: GPU layers a plan gives this device run\n"
             "on its CPU (the head is told, and prints it), and the\n"
             "profile has no GPU, so the scheduler gives it none"},
    {"--gpu-mem", "GiB", CLI_FN, .fn = parse_gpu_mem,
     .help = "VRAM this device may use (default: what is free); GPU\n"
             "layers beyond it run on the CPU, said"},
    {"-v --verbose", NULL, CLI_FLAG, F(verbose), .help = "also log every batch's counters"},
    {"--stats", "FILE", CLI_STR, F(stats_file),
     .help = "each head's plan for this device, for programs: one JSON\n"
             "object per line (\"event\": worker_plan; device, rounds,\n"
             "layers, gpu_layers, streamed layers, weight budget,\n"
             "prefetch; \"time\": epoch s)"},
    {"--profile-cache", "FILE", CLI_STR, F(profile_cache),
     .help = "keep this device's profile (what the head's scheduler\n"
             "asks for) in FILE and reuse it in later runs, memory\n"
             "read afresh, while it matches the device and threads\n"
             "(measured again, and FILE replaced, when not)"},
    {"-q --quiet", NULL, CLI_FLAG, F(quiet), .help = "log nothing"},
    {0},
};
#undef F
static const cli_group worker_group = {NULL, worker_rows, NULL};

/* Whether a listen address reaches this machine only. */
static bool loopback(const char *host)
{
    return host && (!strcmp(host, "localhost") || !strcmp(host, "::1") ||
                    !strncmp(host, "127.", 4));
}

static worker *running;

static void on_signal(int sig)
{
    (void)sig;
    if (running)
        worker_stop(running);   /* async-signal-safe: one write to a pipe */
}

/* The profile of a store's model measures the file the store holds (its header's weight
 * types; its disk). */
typedef struct store_loader {
    engine_loader el;
    sched_profiler *prof;
} store_loader;

static int store_load(void *ctx, const char *path, const struct manifest *mf,
                      const ring_backend **out, char *err, size_t errlen)
{
    store_loader *sl = ctx;
    int rc = engine_loader_load(&sl->el, path, mf, out, err, errlen);
    sl->prof->model_path = rc ? NULL : path;
    return rc;
}

static void store_unload(void *ctx)
{
    store_loader *sl = ctx;
    sl->prof->model_path = NULL;
    engine_loader_unload(&sl->el);
}

int serve_worker(const serve_opts *o)
{
    char err[512];
    model *m = NULL;
    store *st = NULL;
    int models = 0;
    uint32_t damaged = 0;
    if (o->model_path)
        m = model_load(o->model_path, err, sizeof err);
    else if ((st = store_open(o->store_dir, o->store_max, err, sizeof err)))
        store_check(st, &models, &damaged);   /* before listening: no head waits meanwhile */
    if (!m && !st)
        return cli_fail("%s", err);
    ring_model rm = {0};
    ring_key key = {.set = false};
    if (o->insecure && o->key_file) {
        model_free(m);
        store_free(st);
        cli_fail("worker: --insecure and --key contradict each other");
        return 2;
    }
    /* An explicit --insecure wins over $PRIMA_KEY_FILE. */
    if ((m && ring_model_init(&rm, m, err, sizeof err)) ||
        (!o->insecure && ring_key_load(&key, o->key_file, err, sizeof err))) {
        ring_model_release(&rm);
        model_free(m);
        store_free(st);
        return cli_fail("%s", err);
    }
    if (!key.set && !o->insecure) {
        ring_model_release(&rm);
        model_free(m);
        store_free(st);
        cli_fail("worker: no cluster key: give --key FILE (prima keygen -o FILE makes one; every "
                 "device needs the same), or --insecure to serve plaintext links");
        return 2;
    }
    FILE *stats = NULL;
    if (o->stats_file && !(stats = stats_file_open(o->stats_file))) {
        ring_model_release(&rm);
        model_free(m);
        store_free(st);
        return 1;
    }
    engine_backend eb;
    if (m)
        engine_backend_init(&eb, &rm, m, &o->gpu);
    sched_profiler prof;
    sched_profiler_init(&prof, o->model_path);
    prof.gpu = o->gpu;
    prof.profile_cache = o->profile_cache;
    store_loader sl = {.el = {.gpu = o->gpu}, .prof = &prof};
    worker_opts wo = {.host = o->host, .port = o->port, .listen_fd = o->listen_fd,
                      .threads = o->threads, .method = o->method,
                      .key = &key, .log = o->quiet ? NULL : stderr,
                      .verbose = o->verbose, .stats = stats, .profile = sched_profiler_serve,
                      .profile_ctx = &prof, .store = st, .load = store_load,
                      .unload = store_unload, .load_ctx = &sl};
    worker *w = worker_create(&wo, m ? &eb.b : NULL, err, sizeof err);
    disc_advertiser *adv = NULL;
    int rc = 0;
    if (w && o->advertise) {
        disc_keys dk;
        disc_summary ds = {.port = worker_port(w), .n_layer = (uint32_t)m->hp.n_layer,
                           .threads = (uint32_t)o->threads, .mem_budget = sysmem_budget()};
        memcpy(ds.identity, rm.identity, sizeof ds.identity);
        ring_random(&ds.instance, sizeof ds.instance);
        if (disc_keys_derive(wo.key, &dk, err, sizeof err) == 0)
            adv = disc_advertise_start(&dk, &ds, o->discovery_port, NULL,
                                       o->quiet ? NULL : stderr, err, sizeof err);
        if (!adv) {
            worker_free(w);
            w = NULL;
        }
    }
    if (!w) {
        rc = cli_fail("%s", err);
    } else {
        char what[300];
        if (m)
            snprintf(what, sizeof what, "%s: %d layers", o->model_path, m->hp.n_layer);
        else if (snprintf(what, sizeof what, "store %s: %d model(s), %.1f MiB held and verified",
                          o->store_dir, models, (double)store_used(st) / (1 << 20)) > 0 &&
                 damaged)
            snprintf(what + strlen(what), sizeof what - strlen(what), ", %u damaged chunk(s) "
                     "forgotten (to be fetched again)", damaged);
        if (!o->quiet)
            fprintf(stderr, "prima worker: %s; listening on %s:%d; %d thread%s, %.1f "
                            "GiB free for weights%s\n",
                    what, o->host ? o->host : "*", worker_port(w),
                    o->threads, o->threads > 1 ? "s" : "", (double)sysmem_budget() / (1u << 30),
                    key.set ? "; links keyed and encrypted" : "; plaintext links (--insecure)");
        if (!key.set && !loopback(o->host))
            fprintf(stderr, "prima worker: WARNING: no cluster key, and listening on %s: anyone who "
                            "can reach port %d can use this worker and read and change what "
                            "crosses its links. Use --key FILE (prima keygen) on every device.\n",
                    o->host ? o->host : "every interface", worker_port(w));
        running = w;
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        worker_run(w);
        running = NULL;
        disc_advertise_stop(adv);
        worker_free(w);
    }
    if (stats)
        fclose(stats);
    ring_model_release(&rm);
    model_free(m);
    store_free(st);
    return rc;
}


static int cmd_worker(int argc, char **argv)
{
    serve_opts o = {.port = DEFAULT_PORT, .listen_fd = -1, .threads = default_threads(),
                    .method = PREFETCH_TOUCH, .gpu = {.use = true, .index = -1}};
    const cli_set set = {.g = &worker_group, .dst = &o};
    int rc = cli_opts_parse("worker", &set, 1, argc, argv, usage_head, usage_tail, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!o.model_path == !o.store_dir) {
        cli_fail(o.model_path ? "worker: -m and --store exclude each other (a store is for a "
                                "worker without the model)"
                              : "worker: no model (-m FILE, or --store DIR to be sent it)");
        return 2;
    }
    if (o.store_max && !o.store_dir) {
        cli_fail("worker: --store-max needs --store");
        return 2;
    }
    if (o.advertise && o.store_dir) {
        cli_fail("worker: --advertise needs -m (a worker with a store is named in --workers)");
        return 2;
    }
    return serve_worker(&o);
}

const struct cli_command cli_cmd_worker = {"worker", "serve as one device of a ring, head after head",
                                           cmd_worker};
