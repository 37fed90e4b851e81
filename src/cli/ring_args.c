#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "cluster/net.h"

void ring_args_init(ring_args *a)
{
    memset(a, 0, sizeof *a);
    a->release = RELEASE_AUTO;
    a->method = PREFETCH_TOUCH;
    a->wire = WIRE_F32;
}

/* A malformed address is a usage error, found before anything is loaded or connected. */
static int check_workers(const char *s)
{
    for (const char *p = s;; p++) {
        size_t len = strcspn(p, ",");
        char addr[300], host[256], err[400];
        int port;
        if (len >= sizeof addr) {
            cli_fail("--workers: an address of %zu characters", len);
            return -1;
        }
        memcpy(addr, p, len);
        addr[len] = 0;
        if (net_parse_addr(addr, host, sizeof host, &port, err, sizeof err)) {
            cli_fail("--workers: %s", err);
            return -1;
        }
        p += len;
        if (!*p)
            return 0;
    }
}

static int parse_windows(ring_args *a, const char *s)
{
    a->n_lw = 0;
    const char *p = s;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1 << 20 || (*end && *end != ',') ||
            a->n_lw == PRIMA_MAX_DEVICES) {
            cli_fail("-lw: expected up to %d comma-separated layer counts (head first), got '%s'",
                     PRIMA_MAX_DEVICES, s);
            return -1;
        }
        a->lw[a->n_lw++] = (int)v;
        if (!*end)
            return 0;
        p = end + 1;
    }
}

int ring_args_parse(ring_args *a, int argc, char **argv, int *i)
{
    const char *f = argv[*i];
    if (!strcmp(f, "--no-prefetch")) {
        a->no_prefetch = true;
        return 1;
    }
    if (!strcmp(f, "--no-failover")) {
        a->no_failover = true;
        return 1;
    }
    if (!strcmp(f, "--verbose")) {
        a->verbose = true;
        return 1;
    }
    static const char *const with_value[] = {"--workers", "-lw", "--layer-window", "-k",
                                             "--rounds", "--release", "--wire", "--secret-file",
                                             "--worker-threads", "--prefetch-method",
                                             "--stats", NULL};
    int known = 0;
    for (int j = 0; with_value[j]; j++)
        known |= !strcmp(f, with_value[j]);
    if (!known)
        return 0;
    if (*i + 1 >= argc) {
        cli_fail("%s needs a value", f);
        return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(f, "--workers")) {
        a->workers = v;
        return check_workers(v) ? -1 : 1;
    } else if (!strcmp(f, "-lw") || !strcmp(f, "--layer-window")) {
        return parse_windows(a, v) ? -1 : 1;
    } else if (!strcmp(f, "-k") || !strcmp(f, "--rounds")) {
        return parse_int_arg(f, v, 1, 1 << 20, &a->k) ? -1 : 1;
    } else if (!strcmp(f, "--worker-threads")) {
        return parse_threads_arg(f, v, &a->worker_threads) ? -1 : 1;
    } else if (!strcmp(f, "--release")) {
        if (!strcmp(v, "auto"))
            a->release = RELEASE_AUTO;
        else if (!strcmp(v, "never"))
            a->release = RELEASE_NEVER;
        else if (!strcmp(v, "always"))
            a->release = RELEASE_ALWAYS;
        else {
            cli_fail("--release: expected auto, never or always, got '%s'", v);
            return -1;
        }
    } else if (!strcmp(f, "--wire")) {
        if (!strcmp(v, "f32"))
            a->wire = WIRE_F32;
        else if (!strcmp(v, "f16"))
            a->wire = WIRE_F16;
        else {
            cli_fail("--wire: expected f32 or f16, got '%s'", v);
            return -1;
        }
    } else if (!strcmp(f, "--prefetch-method")) {
        int m = prefetch_method_parse(v);
        if (m < 0) {
            cli_fail("--prefetch-method: expected madvise, fadvise or touch, got '%s'", v);
            return -1;
        }
        a->method = (enum prefetch_method)m;
    } else if (!strcmp(f, "--stats")) {
        a->stats_file = v;
    } else {
        a->secret_file = v;
    }
    return 1;
}

FILE *stats_file_open(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        cli_fail("--stats: cannot write %s: %s", path, strerror(errno));
    return f;
}

int ring_args_finish(ring_args *a)
{
    char err[512];
    if (ring_secret_load(&a->secret, a->secret_file, err, sizeof err)) {
        cli_fail("%s", err);
        return -1;
    }
    if (a->stats_file && !(a->stats = stats_file_open(a->stats_file)))
        return -1;
    return 0;
}

bool ring_args_active(const ring_args *a)
{
    return (a->workers && *a->workers) || a->n_lw > 0 || a->k > 0;
}

ring_opts ring_args_opts(const ring_args *a)
{
    return (ring_opts){.workers = a->workers, .lw = a->lw, .n_lw = a->n_lw, .k = a->k,
                       .worker_threads = a->worker_threads, .prefetch = !a->no_prefetch,
                       .release = a->release, .method = a->method, .wire = a->wire,
                       .secret = &a->secret, .verbose = a->verbose ? stderr : NULL,
                       .stats = a->stats};
}

int ring_args_failover(const ring_args *a, ring_head *h, session *s, sched_planner *sp,
                       char *err, size_t errlen)
{
    if (a->no_failover)
        return 0;
    return ring_head_failover(h, s, a->n_lw ? NULL : &sp->rp, stderr, err, errlen);
}

void ring_args_usage(FILE *out)
{
    fputs("ring (layers split over devices; see prima worker):\n"
          "  --workers H:P,H:P,...   the workers, in ring order after this device (the head)\n"
          "  -lw, --layer-window W,W,...\n"
          "                          layers per device and round, head first (0 = the device\n"
          "                          only forwards); default: the scheduler (Halda) profiles\n"
          "                          this device and then each worker in turn (a worker keeps\n"
          "                          its profile for later heads), probes every link, prints\n"
          "                          the plan with the lowest predicted time per token, and\n"
          "                          leaves out workers that would only slow the ring down\n"
          "  -k, --rounds K          rounds per token (default: as many as -lw needs; without\n"
          "                          -lw the scheduler's choice, or with one device the windows\n"
          "                          split ceil(layers / K) layers); the last round may be\n"
          "                          partial\n"
          "  --worker-threads N      compute threads on every worker (default: each worker's -t)\n"
          "  --no-prefetch           do not load a device's next window while others compute\n"
          "  --prefetch-method M     touch (default: read one byte per page from a thread, so\n"
          "                          compute meets neither disk nor page faults), madvise or\n"
          "                          fadvise (WILLNEED readahead hints)\n"
          "  --release P             drop a device's window from memory after computing it:\n"
          "                          auto (default: when the device's windows do not all fit in\n"
          "                          its free memory), never or always\n"
          "  --wire T                activations between devices: f32 (default; output bit-\n"
          "                          identical to one device) or f16 (half the bytes per hop;\n"
          "                          logits change by about what an F16 KV cache costs and\n"
          "                          greedy text may diverge at near-ties)\n"
          "  --secret-file FILE      shared secret every device must prove (default:\n"
          "                          $PRIMA_SECRET_FILE; none)\n"
          "  --no-failover           stop with an error when a worker is lost (default: re-plan\n"
          "                          on the devices left, rebuild the KV cache through the new\n"
          "                          ring and finish the answer; with -lw the new plan splits\n"
          "                          the layers by free memory)\n"
          "  --verbose               per batch and device: compute and wait time, major page\n"
          "                          faults, disk bytes read, pages resident at compute start,\n"
          "                          bytes sent and received; totals at the end\n"
          "  --stats FILE            the same counters, the scheduler's plan and the prompt and\n"
          "                          generation times for programs: one JSON object per line\n"
          "                          (\"event\": batch, plan, prompt, generation; \"time\": epoch s)\n"
          "  Without --workers, -lw and -k still split this device's own work into windows and\n"
          "  rounds (with prefetching and release between them).\n",
          out);
}
