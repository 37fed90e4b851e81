/* opts.c — reading a command line with getopt_long from option tables, and printing their
 * usage text (opts.h). getopt_long alone would accept abbreviations (--work for --workers) and
 * read llama.cpp's single-dash names (-lw) as bundled short options, so a first pass checks that
 * every option is spelled in full and gives each single-dash name its long form ("--lw"). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/run_opts.h"

#define MAX_ROWS 256
#define MAX_SPELLINGS 4
#define SPELLING_MAX 40

/* One row of a set, as getopt_long sees it. */
typedef struct row_ref {
    const cli_opt *o;
    void *dst;
} row_ref;

typedef struct table {
    row_ref rows[MAX_ROWS];
    int n;
    struct option longs[MAX_ROWS * MAX_SPELLINGS + 1];
    int n_long;
    char shorts[2 * MAX_ROWS + 2];
    int short_row[256];   /* short option char -> row + 1 */
    char names[MAX_ROWS * MAX_SPELLINGS][SPELLING_MAX];   /* long names, without dashes */
} table;

/* The i-th space-separated spelling of names into out; false past the last. */
static bool spelling(const char *names, int i, char *out, size_t cap)
{
    const char *p = names;
    for (;;) {
        p += strspn(p, " ");
        size_t len = strcspn(p, " ");
        if (!len)
            return false;
        if (i-- == 0) {
            snprintf(out, cap, "%.*s", (int)len, p);
            return true;
        }
        p += len;
    }
}

static int build(table *t, const cli_set *sets, int n_sets)
{
    memset(t, 0, sizeof *t);
    char *sh = t->shorts;
    *sh++ = ':';   /* a missing value returns ':' instead of printing */
    for (int s = 0; s < n_sets; s++)
        for (const cli_opt *o = sets[s].g->rows; o->names; o++) {
            if (t->n == MAX_ROWS)
                return -1;
            int r = t->n++;
            t->rows[r] = (row_ref){o, sets[s].dst};
            char sp[SPELLING_MAX];
            for (int i = 0; spelling(o->names, i, sp, sizeof sp); i++) {
                if (sp[1] && !sp[2]) {   /* "-x" */
                    t->short_row[(unsigned char)sp[1]] = r + 1;
                    *sh++ = sp[1];
                    if (o->arg)
                        *sh++ = ':';
                    continue;
                }
                char *name = t->names[t->n_long];
                snprintf(name, SPELLING_MAX, "%s", sp + (sp[1] == '-' ? 2 : 1));
                t->longs[t->n_long++] = (struct option){name, o->arg ? required_argument
                                                                     : no_argument, NULL,
                                                        1000 + r};
            }
        }
    return 0;
}

/* The row whose spelling is exactly text (up to '=' for "--name=VALUE"), or -1. */
static int find(const table *t, const char *text, bool *inline_value)
{
    size_t len = strcspn(text, "=");
    *inline_value = text[len] == '=' && text[1] == '-';
    if (!*inline_value)
        len = strlen(text);
    char sp[SPELLING_MAX];
    for (int r = 0; r < t->n; r++)
        for (int i = 0; spelling(t->rows[r].o->names, i, sp, sizeof sp); i++)
            if (strlen(sp) == len && !strncmp(sp, text, len))
                return r;
    return -1;
}

static int set_value(const row_ref *rr, const char *flag, const char *v)
{
    const cli_opt *o = rr->o;
    char *field = (char *)rr->dst + o->off;
    switch (o->kind) {
    case CLI_FLAG:
        *(bool *)field = true;
        return 0;
    case CLI_UNSET:
        *(bool *)field = false;
        return 0;
    case CLI_INT:
        return parse_int_arg(flag, v, o->lo, o->hi, (int *)field);
    case CLI_FLOAT:
        return parse_float_arg(flag, v, (float *)field);
    case CLI_STR:
        *(const char **)field = v;
        return 0;
    case CLI_FN:
        return o->fn(rr->dst, flag, v);
    }
    return -1;
}

int cli_opts_parse(const char *cmd, const cli_set *sets, int n_sets, int argc, char **argv,
                   const char *head, const char *tail, int *positional)
{
    table *t = malloc(sizeof *t);
    char **args = malloc(((size_t)argc + 1) * sizeof *args);
    char (*alias)[SPELLING_MAX + 2] = malloc((size_t)argc * sizeof *alias);
    int rc = 2;
    if (!t || !args || !alias || build(t, sets, n_sets)) {
        cli_fail("%s: out of memory for the option table", cmd);
        goto done;
    }
    /* First pass: every option in full; "-lw" becomes "--lw" for getopt_long. */
    memcpy(args, argv, (size_t)argc * sizeof *args);
    bool options = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!options || a[0] != '-' || !a[1])
            continue;
        if (!strcmp(a, "--")) {
            options = false;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli_opts_usage(stdout, sets, n_sets, head, tail);
            rc = -1;
            goto done;
        }
        bool inl;
        int r = find(t, a, &inl);
        if (r < 0) {
            cli_usage_error(cmd, "unknown option '%s'", a);
            goto done;
        }
        if (a[1] != '-' && a[2]) {   /* a single-dash long name */
            snprintf(alias[i], sizeof alias[i], "-%s", a);
            args[i] = alias[i];
        }
        if (t->rows[r].o->arg && !inl)
            i++;   /* its value, whatever it looks like */
    }
    args[argc] = NULL;

    opterr = 0;
    optind = 0;   /* glibc: start afresh */
    int c, li;
    while ((c = getopt_long(argc, args, t->shorts, t->longs, &li)) != -1) {
        if (c == ':' || c == '?') {
            /* the first pass let only known options through: this is one without its value */
            const char *a = args[optind - 1];
            int r = optopt >= 1000 ? optopt - 1000
                    : optopt > 0 && optopt < 256 ? t->short_row[optopt] - 1 : -1;
            char sp[SPELLING_MAX] = "?";
            if (r >= 0)
                spelling(t->rows[r].o->names, 0, sp, sizeof sp);
            if (c == ':')
                cli_usage_error(cmd, "%s needs a value", sp);
            else
                cli_usage_error(cmd, "unknown option '%s'", a ? a : "?");
            goto done;
        }
        int r = c >= 1000 ? c - 1000 : t->short_row[c] - 1;
        char flag[SPELLING_MAX];
        spelling(t->rows[r].o->names, 0, flag, sizeof flag);
        if (set_value(&t->rows[r], flag, optarg))
            goto done;
    }
    int n_pos = argc - optind;
    if (n_pos && !positional) {
        cli_usage_error(cmd, "unexpected argument '%s'", args[optind]);
        goto done;
    }
    if (positional) {
        /* getopt_long moved them to the end of args: the same there in argv */
        for (int k = 0; k < n_pos; k++)
            argv[argc - n_pos + k] = args[optind + k];
        *positional = argc - n_pos;
    }
    rc = 0;
done:
    free(alias);
    free(args);
    free(t);
    return rc;
}

/* "-m, --model FILE" for the help's left column. */
static void left_column(const cli_opt *o, char *out, size_t cap)
{
    size_t n = 0;
    char sp[SPELLING_MAX];
    for (int i = 0; spelling(o->names, i, sp, sizeof sp) && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? ", " : "", sp);
    if (o->arg && n < cap)
        snprintf(out + n, cap - n, " %s", o->arg);
}

#define HELP_COLUMN 24   /* the left column's width, after two spaces */

void cli_opts_usage(FILE *out, const cli_set *sets, int n_sets, const char *head,
                    const char *tail)
{
    if (head)
        fputs(head, out);
    for (int s = 0; s < n_sets; s++) {
        const cli_group *g = sets[s].g;
        if (sets[s].elsewhere)
            continue;
        if (g->title)
            fprintf(out, "%s\n", g->title);
        for (const cli_opt *o = g->rows; o->names; o++) {
            char left[128];
            left_column(o, left, sizeof left);
            if (strlen(left) < HELP_COLUMN)
                fprintf(out, "  %-*s", HELP_COLUMN, left);
            else
                fprintf(out, "  %s\n%*s", left, HELP_COLUMN + 2, "");
            for (const char *p = o->help ? o->help : "";;) {
                size_t len = strcspn(p, "\n");
                fprintf(out, "%.*s\n", (int)len, p);
                if (!p[len])
                    break;
                p += len + 1;
                fprintf(out, "%*s", HELP_COLUMN + 2, "");
            }
        }
        if (g->note)
            fputs(g->note, out);
    }
    fprintf(out, "  %-*sshow this help\n", HELP_COLUMN, "-h, --help");
    if (tail)
        fputs(tail, out);
}
