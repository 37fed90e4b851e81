/* opts.h — a command's options as tables, one row per flag: its spellings, its value, where it
 * goes and its help. getopt_long reads the command line from the rows, and the same rows print
 * the usage text, which is also docs/cli (scripts/cli-docs.sh writes it from --help): parsing,
 * help and docs cannot drift, and adding a flag is adding a row.
 *
 * Options come in groups (a table with a heading). Shared groups are defined once (run_opts.h:
 * model, sampling, generation...; ring_args.h: the ring) and a command lists the groups it takes,
 * each with the struct its rows fill:
 *
 *     static const cli_opt my_rows[] = {
 *         {"-o --output", "FILE", CLI_STR, offsetof(my_args, out), .help = "the file to write"},
 *         {"--force", NULL, CLI_FLAG, offsetof(my_args, force), .help = "replace it"},
 *         {0},
 *     };
 *
 * A spelling is "-x" (a short option), "--name" or llama.cpp's single-dash "-name" (-lw, -ngl,
 * -cnv). Every spelling must be written in full (no abbreviations); "--name=VALUE" also works. */
#ifndef PRIMA_CLI_OPTS_H
#define PRIMA_CLI_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum cli_kind {
    CLI_FLAG,   /* no value: sets the bool at off */
    CLI_UNSET,  /* no value: clears the bool at off (--no-display-prompt) */
    CLI_INT,    /* an int in lo..hi */
    CLI_FLOAT,  /* a finite float */
    CLI_STR,    /* the value itself (const char *) */
    CLI_FN,     /* fn parses the value (NULL for a row without arg) */
};

typedef struct cli_opt cli_opt;
struct cli_opt {
    const char *names;  /* spellings, space-separated; the first is the one errors use */
    const char *arg;    /* the value's name in the help ("FILE"); NULL: the flag takes none */
    enum cli_kind kind;
    size_t off;         /* the field in the group's struct */
    long lo, hi;        /* CLI_INT: the range */
    /* CLI_FN: parse value for the struct dst; 0, or -1 after printing an error naming flag */
    int (*fn)(void *dst, const char *flag, const char *value);
    const char *help;   /* its lines, '\n' between them */
};

typedef struct cli_group {
    const char *title;   /* the heading ("ring (layers split over devices):"), NULL: none */
    const cli_opt *rows; /* ended by a row of zeros */
    const char *note;    /* lines printed after the rows, or NULL */
} cli_group;

/* A group and the struct its rows fill. */
typedef struct cli_set {
    const cli_group *g;
    void *dst;
    bool elsewhere;   /* read, but left out of the usage: another command's help has it */
} cli_set;

#define CLI_MAX_SETS 12

/* Read argv (argv[0] is the command, e.g. "run" or "bench ring") with the sets' rows. -h and
 * --help print the usage (head, the groups, then tail) to stdout. Positional arguments are
 * allowed only when positional is not NULL: argv's are then moved to the end, from
 * argv[*positional] on. Returns 0, -1 after the help (exit 0), or 2 after a one-line usage
 * error naming the flag. */
int cli_opts_parse(const char *cmd, const cli_set *sets, int n_sets, int argc, char **argv,
                   const char *head, const char *tail, int *positional);
/* The usage text: head, every group's heading, rows and note, -h, then tail. */
void cli_opts_usage(FILE *out, const cli_set *sets, int n_sets, const char *head,
                    const char *tail);
#endif
