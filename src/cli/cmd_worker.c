/* prima worker — one device of a ring, serving one head after another. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "cli/worker_serve.h"
#include "cluster/discover.h"
#include "cluster/ring_engine.h"
#include "sched/startup.h"
#include "util/sysmem.h"

#define DEFAULT_PORT 9500

static void usage(FILE *out)
{
    fprintf(out,
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
            "\n"
            "  -m, --model FILE        the GGUF model (the same file as the head's)\n"
            "  --store DIR             instead of -m: keep no copy of the model; each head (or\n"
            "                          another worker holding them) sends the chunks of its model\n"
            "                          this device's plan needs, checked against the model's\n"
            "                          manifest and kept in DIR for later runs, and this device\n"
            "                          serves the chunks it holds to other workers (docs/ring.md,\n"
            "                          The store)\n"
            "  --store-max SIZE        the most DIR may hold (e.g. 20G, 512M; default: no bound):\n"
            "                          the least recently used other models make room, or the\n"
            "                          transfer is refused naming the bytes it needs\n"
            "  --host ADDR             address to listen on (default: all interfaces)\n"
            "  --port P                TCP port (default %d; 0 = any free port, printed)\n"
            "  -t, --threads N         compute threads (default: the online CPUs; a head may\n"
            "                          set another count with --worker-threads)\n"
            "  --prefetch-method M     how the next window is loaded while other devices\n"
            "                          compute: touch (default), madvise or fadvise\n"
            "  --key FILE              the cluster key (made by prima keygen) every device must\n"
            "                          hold (default: $PRIMA_KEY_FILE): each link is then\n"
            "                          mutually authenticated and encrypted with keys of its\n"
            "                          own; --secret-file FILE is another name for it\n"
            "  --insecure              without a key: serve plaintext links, which anyone who\n"
            "                          can reach the port can read and use (refused without\n"
            "                          either; loudly warned about off loopback)\n"
            "  --advertise             answer discovery probes of heads with the same key\n"
            "                          (prima run --discover): UDP broadcast and link-local\n"
            "                          multicast; needs the key, which authenticates both\n"
            "  --discovery-port P      UDP port for discovery (default %d)\n"
            "  --gpu N                 the Vulkan device for the GPU layers a head's plan gives\n"
            "                          this device (default: the first discrete GPU, else the\n"
            "                          first device); the scheduler's profile measures it too\n"
            "  --no-gpu                never use a GPU: GPU layers a plan gives this device run\n"
            "                          on its CPU (the head is told, and prints it), and the\n"
            "                          profile has no GPU, so the scheduler gives it none\n"
            "  --gpu-mem GiB           VRAM this device may use (default: what is free); GPU\n"
            "                          layers beyond it run on the CPU, said\n"
            "  -v, --verbose           also log every batch's counters\n"
            "  --stats FILE            each head's plan for this device, for programs: one JSON\n"
            "                          object per line (\"event\": worker_plan; device, rounds,\n"
            "                          layers, gpu_layers, streamed layers, weight budget,\n"
            "                          prefetch; \"time\": epoch s)\n"
            "  --profile-cache FILE    keep this device's profile (what the head's scheduler\n"
            "                          asks for) in FILE and reuse it in later runs, memory\n"
            "                          read afresh, while it matches the device and threads\n"
            "                          (measured again, and FILE replaced, when not)\n"
            "  -q, --quiet             log nothing\n"
            "  -h, --help              show this help\n"
            "\n"
            "Stop it with Ctrl-C or SIGTERM. Exit status: 0 when stopped, 1 on an error (model,\n"
            "port, key file), 2 on a usage error (also: neither --key nor --insecure).\n",
            DEFAULT_PORT, DISC_PORT);
}

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

/* SIZE: a number of bytes with an optional K, M, G or T (powers of 1024). */
static int parse_size_arg(const char *flag, const char *v, uint64_t *out)
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
    *out = (uint64_t)(x * mul);
    return 0;
}

static int cmd_worker(int argc, char **argv)
{
    serve_opts o = {.port = DEFAULT_PORT, .listen_fd = -1, .threads = default_threads(),
                    .method = PREFETCH_TOUCH, .gpu = {.use = true, .index = -1}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o.verbose = true;
            continue;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o.quiet = true;
            continue;
        }
        if (!strcmp(a, "--advertise")) {
            o.advertise = true;
            continue;
        }
        if (!strcmp(a, "--insecure")) {
            o.insecure = true;
            continue;
        }
        if (!strcmp(a, "--no-gpu")) {
            o.gpu.use = false;
            continue;
        }
        bool known = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--host") ||
                     !strcmp(a, "--port") || !strcmp(a, "-t") || !strcmp(a, "--threads") ||
                     !strcmp(a, "--prefetch-method") || !strcmp(a, "--key") ||
                     !strcmp(a, "--secret-file") || !strcmp(a, "--stats") ||
                     !strcmp(a, "--discovery-port") || !strcmp(a, "--gpu") ||
                     !strcmp(a, "--gpu-mem") || !strcmp(a, "--profile-cache") ||
                     !strcmp(a, "--store") || !strcmp(a, "--store-max");
        if (!known) {
            cli_fail("worker: unknown option '%s' (see prima worker --help)", a);
            return 2;
        }
        if (i + 1 >= argc) {
            cli_fail("%s needs a value", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o.model_path = v;
        else if (!strcmp(a, "--host"))
            o.host = v;
        else if (!strcmp(a, "--key") || !strcmp(a, "--secret-file"))
            o.key_file = v;
        else if (!strcmp(a, "--stats"))
            o.stats_file = v;
        else if (!strcmp(a, "--profile-cache"))
            o.profile_cache = v;
        else if (!strcmp(a, "--store"))
            o.store_dir = v;
        else if (!strcmp(a, "--store-max")) {
            if (parse_size_arg(a, v, &o.store_max))
                return 2;
        }
        else if (!strcmp(a, "--port")) {
            if (parse_int_arg(a, v, 0, 65535, &o.port))
                return 2;
        } else if (!strcmp(a, "--discovery-port")) {
            if (parse_int_arg(a, v, 1, 65535, &o.discovery_port))
                return 2;
        } else if (!strcmp(a, "--gpu")) {
            if (parse_int_arg(a, v, 0, 255, &o.gpu.index))
                return 2;
        } else if (!strcmp(a, "--gpu-mem")) {
            if (parse_gib_arg(a, v, &o.gpu.vram_cap))
                return 2;
        } else if (!strcmp(a, "--prefetch-method")) {
            int mth = prefetch_method_parse(v);
            if (mth < 0) {
                cli_fail("--prefetch-method: expected madvise, fadvise or touch, got '%s'", v);
                return 2;
            }
            o.method = (enum prefetch_method)mth;
        } else if (parse_threads_arg(a, v, &o.threads)) {
            return 2;
        }
    }
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
