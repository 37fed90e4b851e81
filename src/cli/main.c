#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cluster/logline.h"

#define COMMAND(name) extern const struct cli_command cli_cmd_##name;
#include "commands.inc"
#undef COMMAND

static const struct cli_command *const commands[] = {
#define COMMAND(name) &cli_cmd_##name,
#include "commands.inc"
#undef COMMAND
    NULL
};

int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vline(stderr, "prima: ", fmt, ap);
    va_end(ap);
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_line(stderr, "prima: ", "%s: %s (see prima %s --help)", cmd, msg, cmd);
    return 2;
}

static void usage(FILE *out)
{
    fprintf(out, "prima — distributed LLM inference for home clusters\n\n"
                 "usage: prima COMMAND [options]   (prima COMMAND --help for its options)\n\n"
                 "commands:\n");
    for (int i = 0; commands[i]; i++)
        fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("prima 0.1.0\n");
        return 0;
    }
    for (int i = 0; commands[i]; i++)
        if (!strcmp(argv[1], commands[i]->name))
            return commands[i]->run(argc - 1, argv + 1);
    fprintf(stderr, "prima: unknown command '%s' (see prima --help)\n", argv[1]);
    return 2;
}
