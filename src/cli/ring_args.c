/* ring_args.c — parsing and checking a head's ring options (ring_args.h), and turning them into
 * ring options, discovery and failover for the commands that run a ring. Every check happens
 * while the command line is read, before a model is loaded or a worker contacted. */
#include <errno.h>
#include <stddef.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "kernels/kern.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "cluster/net.h"
#include "cluster/discover.h"

/* A malformed address is a usage error, found before anything is loaded or connected. */
static int parse_workers(void *dst, const char *flag, const char *s)
{
    ring_args *a = dst;
    a->workers = s;
    for (const char *p = s;; p++) {
        size_t len = strcspn(p, ",");
        char addr[300], host[256], err[400];
        int port;
        if (len >= sizeof addr) {
            cli_fail("%s: an address of %zu characters", flag, len);
            return -1;
        }
        memcpy(addr, p, len);
        addr[len] = 0;
        if (net_parse_addr(addr, host, sizeof host, &port, err, sizeof err)) {
            cli_fail("%s: %s", flag, err);
            return -1;
        }
        p += len;
        if (!*p)
            return 0;
    }
}

static int parse_lw(void *dst, const char *flag, const char *v)
{
    ring_args *a = dst;
    return parse_counts_arg(flag, v, a->lw, &a->n_lw);
}

static int parse_gl(void *dst, const char *flag, const char *v)
{
    ring_args *a = dst;
    return parse_counts_arg(flag, v, a->gl, &a->n_gl);
}

static int parse_release(void *dst, const char *flag, const char *v)
{
    ring_args *a = dst;
    if (!strcmp(v, "auto"))
        a->release = RELEASE_AUTO;
    else if (!strcmp(v, "never"))
        a->release = RELEASE_NEVER;
    else if (!strcmp(v, "always"))
        a->release = RELEASE_ALWAYS;
    else
        return cli_fail("%s: expected auto, never or always, got '%s'", flag, v), -1;
    return 0;
}

static int parse_wire(void *dst, const char *flag, const char *v)
{
    ring_args *a = dst;
    if (!strcmp(v, "f32"))
        a->wire = WIRE_F32;
    else if (!strcmp(v, "f16"))
        a->wire = WIRE_F16;
    else
        return cli_fail("%s: expected f32 or f16, got '%s'", flag, v), -1;
    return 0;
}

int parse_prefetch_method(const char *flag, const char *v, enum prefetch_method *out)
{
    int m = prefetch_method_parse(v);
    if (m < 0)
        return cli_fail("%s: expected madvise, fadvise or touch, got '%s'", flag, v), -1;
    *out = (enum prefetch_method)m;
    return 0;
}

static int parse_method(void *dst, const char *flag, const char *v)
{
    return parse_prefetch_method(flag, v, &((ring_args *)dst)->method);
}

const char ring_args_key_help[] =
    "the cluster key (made by prima keygen) every device must\n"
    "hold (default: $PRIMA_KEY_FILE): each link is then\n"
    "mutually authenticated and encrypted with keys of its\n"
    "own; --secret-file is its name before keygen made keys";

#define F(field) offsetof(ring_args, field)
static const cli_opt ring_rows[] = {
    {"--workers", "H:P,H:P,...", CLI_FN, .fn = parse_workers,
     .help = "the workers, in ring order after this device (the head)"},
    {"-lw --layer-window", "W,W,...", CLI_FN, .fn = parse_lw,
     .help = "layers per device and round, head first (0 = the device\n"
             "only forwards); default: the scheduler (Halda) profiles\n"
             "this device and then each worker in turn (a worker keeps\n"
             "its profile for later heads), probes every link, prints\n"
             "the plan with the lowest predicted time per token, and\n"
             "leaves out workers that would only slow the ring down"},
    {"--gpu-layers", "N,N,...", CLI_FN, .fn = parse_gl,
     .help = "with -lw: of each device's window, the last N layers run on\n"
             "its GPU (whole layers, KV cache in VRAM; in every round),\n"
             "head first, 0..window each. The head uses --gpu, --no-gpu\n"
             "and --gpu-mem, each worker its own; a device without a\n"
             "usable GPU runs them on the CPU, and the head prints a\n"
             "line per device on what became of them. Without -lw the\n"
             "scheduler sets them from the GPUs in the profiles (-ngl is\n"
             "for one device only)"},
    {"-k --rounds", "K", CLI_INT, F(k), 1, 1 << 20,
     .help = "rounds per token (default: as many as -lw needs; without\n"
             "-lw the scheduler's choice, or with one device the windows\n"
             "split ceil(layers / K) layers); the last round may be\n"
             "partial"},
    {"--worker-threads", "N", CLI_INT, F(worker_threads), 1, KERN_MAX_THREADS,
     .help = "compute threads on every worker (default: each worker's -t)"},
    {"--no-prefetch", NULL, CLI_FLAG, F(no_prefetch),
     .help = "do not load a device's next window while others compute"},
    {"--prefetch-method", "M", CLI_FN, .fn = parse_method,
     .help = "touch (default: read one byte per page from a thread, so\n"
             "compute meets neither disk nor page faults), madvise or\n"
             "fadvise (WILLNEED readahead hints)"},
    {"--release", "P", CLI_FN, .fn = parse_release,
     .help = "drop a device's window from memory after computing it:\n"
             "auto (default: when the device's windows do not all fit in\n"
             "its free memory), never or always"},
    {"--wire", "T", CLI_FN, .fn = parse_wire,
     .help = "activations between devices: f32 (default; output bit-\n"
             "identical to one device) or f16 (half the bytes per hop;\n"
             "logits change by about what an F16 KV cache costs and\n"
             "greedy text may diverge at near-ties)"},
    {"--key --secret-file", "FILE", CLI_STR, F(key_file), .help = ring_args_key_help},
    {"--insecure", NULL, CLI_FLAG, F(insecure),
     .help = "without a key: plaintext links, which anyone on the\n"
             "network can read and join (refused without either)"},
    {"--verbose", NULL, CLI_FLAG, F(verbose),
     .help = "per batch and device: compute and wait time, major page\n"
             "faults, disk bytes read, pages resident at compute start,\n"
             "bytes sent and received; totals at the end"},
    {"--stats", "FILE", CLI_STR, F(stats_file),
     .help = "the same counters, the scheduler's plan and the prompt and\n"
             "generation times for programs: one JSON object per line\n"
             "(\"event\": batch, plan, prompt, generation; \"time\": epoch s)"},
    {"--profile-cache", "FILE", CLI_STR, F(profile_cache),
     .help = "keep this device's profile for the scheduler in FILE and\n"
             "reuse it in later runs, memory read afresh, while it\n"
             "matches the device and threads (measured again, and FILE\n"
             "replaced, when not); give workers theirs (prima worker\n"
             "--profile-cache) for plans that repeat"},
    {0},
};
static const cli_opt session_rows[] = {
    {"--discover", NULL, CLI_FLAG, F(discover),
     .help = "also use the workers that answer a discovery probe on the\n"
             "local network (prima worker --advertise) with this model\n"
             "and the same --key (needed); they follow those of\n"
             "--workers. Says what it found (and what it ignored);\n"
             "between requests (chat turns, server requests; at most\n"
             "every 10 s) asks again and takes newcomers in"},
    {"--discovery-port", "P", CLI_INT, F(discovery_port), 1, 65535,
     .help = "UDP port for discovery (default 9499)"},
    {"--no-failover", NULL, CLI_FLAG, F(no_failover),
     .help = "stop with an error when a worker is lost (default: re-plan\n"
             "on the devices left, rebuild the KV cache through the new\n"
             "ring and finish the answer; with -lw the new plan splits\n"
             "the layers by free memory)"},
    {0},
};
#undef F

static const cli_group ring_group = {
    "ring (layers split over devices; see prima worker):", ring_rows,
    "  Without --workers, -lw and -k still split this device's own work into windows and\n"
    "  rounds (with prefetching and release between them).\n"};
static const cli_group session_group = {"failover and discovery:", session_rows, NULL};

int ring_args_sets(ring_args *a, bool answers, cli_set *sets)
{
    sets[0] = (cli_set){.g = &ring_group, .dst = a};
    if (!answers)
        return 1;
    sets[1] = (cli_set){.g = &session_group, .dst = a};
    return 2;
}

/* --gpu-layers splits the windows of -lw: one count per window, none above its window. */
static int check_gpu_layers(const ring_args *a)
{
    if (!a->n_gl)
        return 0;
    if (!a->n_lw) {
        cli_fail("--gpu-layers needs -lw: it gives the GPU layers of each device's window (without "
                 "-lw the scheduler chooses both)");
        return -1;
    }
    if (a->n_gl != a->n_lw) {
        cli_fail("--gpu-layers gives %d count(s) for the %d window(s) of -lw (one per device, head "
                 "first)", a->n_gl, a->n_lw);
        return -1;
    }
    for (int d = 0; d < a->n_gl; d++)
        if (a->gl[d] > a->lw[d]) {
            cli_fail("--gpu-layers: device %d%s has %d GPU layers in a window of %d (-lw)", d,
                     d ? "" : " (the head)", a->gl[d], a->lw[d]);
            return -1;
        }
    return 0;
}

int ring_args_finish(ring_args *a)
{
    char err[512];
    if (check_gpu_layers(a))
        return -1;
    if (a->key_file && a->insecure) {
        cli_fail("--insecure and --key contradict each other");
        return -1;
    }
    /* An explicit --insecure wins over $PRIMA_KEY_FILE. */
    memset(&a->key, 0, sizeof a->key);
    if (!a->insecure && ring_key_load(&a->key, a->key_file, err, sizeof err)) {
        cli_fail("%s", err);
        return -1;
    }
    if (a->workers && *a->workers && !a->key.set && !a->insecure) {
        cli_fail("links to workers need a cluster key: give every device --key FILE (prima keygen "
                 "-o FILE makes one), or --insecure for plaintext links that anyone on the "
                 "network can read and join");
        return -1;
    }
    if (a->stats_file && !(a->stats = stats_file_open(a->stats_file)))
        return -1;
    return 0;
}

int ring_args_check_local(const ring_args *a, const run_opts *o)
{
    if (!ring_args_active(a))
        return 0;
    if (o->n_gpu_layers) {
        cli_fail("-ngl is for one device: in a ring give --gpu-layers N,N,... with -lw (one per "
                 "device, head first), or let the scheduler choose");
        return -1;
    }
    if (o->repack) {
        cli_fail("--repack is for one device: the devices of a ring read their model files as "
                 "they are");
        return -1;
    }
    return 0;
}

FILE *stats_file_open(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        cli_fail("--stats: cannot write %s: %s", path, strerror(errno));
    return f;
}
