/* cli.h — the prima command line: one source file per subcommand (cmd_NAME.c), each defining
 *     const struct cli_command cli_cmd_NAME = { "NAME", "one-line summary", run_fn };
 * The build generates the command table from the files present (CMakeLists.txt). */
#ifndef PRIMA_CLI_H
#define PRIMA_CLI_H

struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);  /* argv[0] is the subcommand name */
};

/* Print "prima: <msg>" to stderr (one line). Returns 1 for `return cli_fail(...)`. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "prima: CMD: <msg> (see prima CMD --help)" to stderr. Returns 2, a usage error's exit
 * status. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
