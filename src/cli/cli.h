/* cli.h — the prima command line: one source file per subcommand (cmd_NAME.c), each defining
 *     const struct cli_command cli_cmd_NAME = { "NAME", "one-line summary", run_fn };
 * The build generates the command table from the files present (CMakeLists.txt). */
#ifndef PRIMA_CLI_H
#define PRIMA_CLI_H

#include <stddef.h>

struct serve_opts;   /* app/worker_serve.h */

struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);  /* argv[0] is the subcommand name */
};

/* A library's name for something the command line sets, and the flag that sets it: the library
 * speaks in its own terms ("layer windows", n_head), the command line in its flags. */
typedef struct cli_term {
    const char *term, *flag;
} cli_term;
/* Rewrite msg in place (cap bytes) in the command line's terms: every whole-word occurrence of
 * a term of the table (ended by a row of NULLs) becomes its flag. */
void cli_say_flags(char *msg, size_t cap, const cli_term *terms);

/* prima worker's body (cmd_worker.c): load the model and serve heads until SIGINT or SIGTERM;
 * also what the workers that prima cluster and the benchmarks fork run. The exit status. */
int serve_worker(const struct serve_opts *o);

struct runner;   /* app/runner.h */
/* prima run's work once its options are read and checked: open the runner (the model, and the
 * session on this device or the ring), generate or chat, print the statistics, close it. The
 * exit status. prima cluster runs its head so. */
int cli_run_runner(struct runner *r);

/* Print "prima: <msg>" to stderr (one line), with the terms of the ring, the scheduler and the
 * server said as the flags that set them. Returns 1 for `return cli_fail(...)`. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "prima: CMD: <msg> (see prima CMD --help)" to stderr. Returns 2, a usage error's exit
 * status. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
