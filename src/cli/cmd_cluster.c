/* prima cluster — the one-command demo of a pipelined ring: workers on this machine, a head, a
 * prompt. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "app/gpu_offload.h"
#include "cli/opts.h"
#include "cli/ring_args.h"
#include "cli/run_opts.h"
#include "app/local_workers.h"
#include "app/runner.h"
#include "cluster/key.h"
#include "model/model.h"
#include "model/synth.h"

#define DEFAULT_DEVICES 3
#define DEFAULT_PROMPT "Once upon a time"

static const char usage_head[] =
    "usage: prima cluster [-m FILE] [--devices N] [-lw W,W,...] [run options]\n"
    "\n"
    "Run a prompt on a pipelined ring of N devices on this machine: start N-1 workers\n"
    "(separate processes, listening on free loopback ports), run `prima run` as the\n"
    "head with --workers pointing at them, then stop the workers, also when the head\n"
    "fails, on Ctrl-C, or when this process is killed.\n"
    "\n"
    "Without -m, a small random-weight llama (8 layers, 256 wide, Q8_0, byte-level\n"
    "vocabulary, so its text is gibberish) is generated once into\n"
    "$XDG_CACHE_HOME/prima (default ~/.cache/prima) and reused. Without -p, -f or\n"
    "-cnv the prompt is \"" DEFAULT_PROMPT "\". Without -lw or -k the layers are split evenly over\n"
    "the N devices in one round (the workers take the remainder), so that every\n"
    "device takes part; with -k alone the scheduler plans, and on one machine it may\n"
    "keep the whole model on one device.\n"
    "\n";
static const char usage_tail[] =
    "Every other option is prima run's (prima run --help), ring options included:\n"
    "-lw, -k, --gpu-layers, --release, --no-prefetch, --wire, --key, --insecure, ...\n"
    "-t gives the compute threads of every device (default: the online CPUs divided by N,\n"
    "at least 1); --verbose also shows the workers' logs and every batch's counters.\n"
    "--gpu, --no-gpu and --gpu-mem apply to the head and to every worker.\n"
    "Without --key or --insecure the ring's links are keyed with a fresh key made for\n"
    "this run (and removed after it).\n"
    "\n"
    "Exit status: the head's (0 on success, 1 on an error, 2 on a usage error).\n";

static const cli_opt cluster_rows[] = {
    {"--devices", "N", CLI_INT, 0, 1, PRIMA_MAX_DEVICES,
     .help = "devices in the ring, the head included (default 3)"},
    {0},
};
static const cli_group cluster_group = {NULL, cluster_rows, NULL};

/* The demo model's path in the cache directory, generated when missing. */
static int demo_model(char *path, size_t cap)
{
    char dir[1024];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/prima", xdg);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.cache/prima", home);
    else
        snprintf(dir, sizeof dir, "/tmp/prima-cache-%d", (int)getuid());
    /* mkdir -p for the two levels that may be missing */
    char parent[1024];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        mkdir(parent, 0755);
    }
    if (mkdir(dir, 0755) && errno != EEXIST)
        return cli_fail("cluster: cannot create the cache directory %s: %s", dir, strerror(errno));
    synth_params p;
    synth_defaults(&p);
    p.n_layer = 8;
    p.ftype = SYNTH_Q8_0;
    p.n_ctx = 2048;
    p.name = "prima cluster demo";
    snprintf(path, cap, "%s/cluster-demo-llama-l%d-e%d-%s.gguf", dir, p.n_layer, p.n_embd,
             synth_ftype_name(p.ftype));
    struct stat st;
    if (stat(path, &st) == 0)
        return 0;
    fprintf(stderr, "prima cluster: generating a demo model: %s (once)\n", path);
    /* Written under a temporary name and renamed, so an interrupted run leaves no half file. */
    char tmp[1500];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    char err[512];
    if (synth_write(&p, tmp, NULL, err, sizeof err)) {
        unlink(tmp);
        return cli_fail("cluster: %s", err);
    }
    if (rename(tmp, path)) {
        unlink(tmp);
        return cli_fail("cluster: %s: %s", path, strerror(errno));
    }
    return 0;
}

/* Without -lw or -k every device takes part, with an even share: on one machine the scheduler
 * would (rightly) keep the whole model on one device, and this is the ring's demo. The head
 * also embeds and samples, so the workers take what does not divide. 0, or 1 after an error. */
static int even_windows(ring_args *ra, const char *model_path, int n_dev)
{
    char err[512];
    model *m = model_load(model_path, err, sizeof err);
    if (!m)
        return cli_fail("%s", err);
    int n_layer = m->hp.n_layer;
    model_free(m);
    for (int d = 0; d < n_dev; d++)
        ra->lw[d] = n_layer / n_dev + (d >= n_dev - n_layer % n_dev);
    ra->n_lw = n_dev;
    return 0;
}

/* Even on loopback the ring's links are keyed: with no key given (and no --insecure), a fresh
 * one for this run, in a directory of its own (keydir, keypath) that goes when the run ends.
 * 0, or 1 after an error. */
static int run_key(ring_args *ra, int n_dev, char *keydir, size_t dircap, char *keypath,
                   size_t pathcap)
{
    if (ra->key_file || ra->insecure || getenv("PRIMA_KEY_FILE") || getenv("PRIMA_SECRET_FILE") ||
        n_dev < 2)
        return 0;
    char err[512];
    snprintf(keydir, dircap, "/tmp/prima-cluster-XXXXXX");
    if (!mkdtemp(keydir)) {
        keydir[0] = 0;
        return cli_fail("cluster: cannot create a directory for the run's key: %s",
                        strerror(errno));
    }
    snprintf(keypath, pathcap, "%s/cluster.key", keydir);
    if (ring_key_write(keypath, false, err, sizeof err))
        return cli_fail("cluster: %s", err);
    ra->key_file = keypath;
    return 0;
}

static int cmd_cluster(int argc, char **argv)
{
    int n_dev = DEFAULT_DEVICES;
    runner r = {0};
    run_opts_init(&r.o, RUN_OPT_MODEL | RUN_OPT_GPU | RUN_OPT_SAMPLING | RUN_OPT_GEN |
                            RUN_OPT_CHAT | RUN_OPT_SPEC);
    ring_args_init(&r.ra);
    r.o.n_threads = 0;   /* still 0 after the command line: -t was not given */
    /* prima run's options, and --devices; the head is this process's runner */
    cli_set sets[CLI_MAX_SETS] = {{.g = &cluster_group, .dst = &n_dev}};
    int n = 1 + run_opts_sets(&r.o, sets + 1);
    n += ring_args_sets(&r.ra, true, sets + n);
    for (int k = 1; k < n; k++)
        sets[k].elsewhere = true;
    int rc = cli_opts_parse("cluster", sets, n, argc, argv, usage_head, usage_tail, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (r.ra.workers) {
        cli_fail("cluster: it starts its own workers; to use others, run prima run --workers");
        return 2;
    }
    char model_path[1400], keydir[64] = "", keypath[96] = "", list[PRIMA_MAX_DEVICES * 24] = "";
    if (!r.o.model && demo_model(model_path, sizeof model_path))
        return 1;
    if (!r.o.model)
        r.o.model = model_path;
    if (!r.ra.n_lw && !r.ra.k && n_dev > 1 && even_windows(&r.ra, r.o.model, n_dev))
        return 1;
    int ncpu = default_threads();
    if (!r.o.n_threads)
        r.o.n_threads = ncpu > n_dev ? ncpu / n_dev : 1;
    if (!r.o.prompt && !r.o.prompt_file && !r.o.conversation)
        r.o.prompt = DEFAULT_PROMPT;
    rc = run_opts_finish(&r.o);   /* 2, or 1 for a prompt file that cannot be read */
    if (rc || (rc = run_key(&r.ra, n_dev, keydir, sizeof keydir, keypath, sizeof keypath)))
        goto done;
    local_workers w = {.n = 0};
    serve_opts so = {.model_path = r.o.model, .host = "127.0.0.1", .listen_fd = -1,
                     .threads = r.o.n_threads, .method = r.ra.method, .key_file = r.ra.key_file,
                     .insecure = r.ra.insecure, .verbose = r.ra.verbose, .quiet = !r.ra.verbose,
                     .gpu = gpu_offload_opts(&r.o)};
    char err[512];
    if (local_workers_start(&w, n_dev - 1, &so, NULL, serve_worker, err, sizeof err)) {
        rc = cli_fail("cluster: %s", err);
        goto done;
    }
    local_workers_list(&w, list, sizeof list);
    r.ra.workers = w.n ? list : NULL;
    if (ring_args_finish(&r.ra) || ring_args_check_local(&r.ra, &r.o)) {
        rc = 2;
    } else {
        fprintf(stderr, "prima cluster: %d device(s) on this machine: the head%s%s, %d thread(s) "
                        "each\n", n_dev, w.n ? " and workers at " : "", list, r.o.n_threads);
        rc = cli_run_runner(&r);
    }
    local_workers_stop(&w);
done:
    if (keypath[0])
        unlink(keypath);
    if (keydir[0])
        rmdir(keydir);
    run_opts_free(&r.o);
    return rc;
}

const struct cli_command cli_cmd_cluster = {
    "cluster", "run a prompt on a ring of N devices on this machine (the demo)", cmd_cluster};
