/* prima keygen — a new random cluster key file. */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "cluster/key.h"

typedef struct keygen_args {
    const char *out;
    bool force;
} keygen_args;

static const cli_opt keygen_rows[] = {
    {"-o --output", "FILE", CLI_STR, offsetof(keygen_args, out), .help = "where to write the key"},
    {"--force", NULL, CLI_FLAG, offsetof(keygen_args, force),
     .help = "replace FILE if it exists (every device then needs the\nnew key)"},
    {0},
};
static const cli_group keygen_group = {NULL, keygen_rows, NULL};

static int cmd_keygen(int argc, char **argv)
{
    keygen_args k = {0};
    const cli_set set = {.g = &keygen_group, .dst = &k};
    int rc = cli_opts_parse(
        "keygen", &set, 1, argc, argv,
        "usage: prima keygen -o FILE [--force]\n"
        "\n"
        "Write a new random cluster key (256 bits, as 64 hex digits) to FILE, readable by\n"
        "its owner only (mode 0600). Copy it to every device of the cluster and give each\n"
        "head and worker --key FILE: devices then prove to each other that they hold it and\n"
        "encrypt every link with keys agreed afresh for each connection. Keep it secret:\n"
        "whoever holds it can join the ring and read what crosses it.\n"
        "\n",
        "\n"
        "Exit status: 0 on success, 1 when the file cannot be written (or exists), 2 on a\n"
        "usage error.\n",
        NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    const char *out = k.out;
    if (!out || !*out) {
        cli_fail("keygen: no output file (-o FILE)");
        return 2;
    }
    char err[512];
    rc = ring_key_write(out, k.force, err, sizeof err);
    if (rc == RING_KEY_EXISTS)
        return cli_fail("keygen: %s (--force replaces it; every device then needs the new key)",
                        err);
    if (rc)
        return cli_fail("keygen: %s", err);
    fprintf(stderr, "prima keygen: wrote a new cluster key to %s (mode 0600)\n", out);
    return 0;
}

const struct cli_command cli_cmd_keygen = {"keygen", "write a new random cluster key file",
                                           cmd_keygen};
