/* prima keygen — a new random cluster key file. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cluster/key.h"

static void usage(FILE *out)
{
    fputs("usage: prima keygen -o FILE [--force]\n"
          "\n"
          "Write a new random cluster key (256 bits, as 64 hex digits) to FILE, readable by\n"
          "its owner only (mode 0600). Copy it to every device of the cluster and give each\n"
          "head and worker --key FILE: devices then prove to each other that they hold it and\n"
          "encrypt every link with keys agreed afresh for each connection. Keep it secret:\n"
          "whoever holds it can join the ring and read what crosses it.\n"
          "\n"
          "  -o, --output FILE       where to write the key\n"
          "  --force                 replace FILE if it exists (every device then needs the\n"
          "                          new key)\n"
          "  -h, --help              show this help\n"
          "\n"
          "Exit status: 0 on success, 1 when the file cannot be written (or exists), 2 on a\n"
          "usage error.\n",
          out);
}

static int cmd_keygen(int argc, char **argv)
{
    const char *out = NULL;
    bool force = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--force")) {
            force = true;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) {
                cli_fail("%s needs a value", a);
                return 2;
            }
            out = argv[++i];
        } else {
            cli_fail("keygen: unknown option '%s' (see prima keygen --help)", a);
            return 2;
        }
    }
    if (!out || !*out) {
        cli_fail("keygen: no output file (-o FILE)");
        return 2;
    }
    char err[512];
    int rc = ring_key_write(out, force, err, sizeof err);
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
