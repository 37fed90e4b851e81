#!/bin/bash
# The installed library as a user sees it: install to a temporary prefix, build a program that
# includes only <prima.h> with the flags pkg-config gives, and run it on a fixture model (its
# greedy continuation must be the reference's, read through a 4-byte piece buffer); the shared
# library exports the functions of prima.h and nothing else.
set -u
. "$(dirname "$0")/support/needs.sh"
need_fixtures
prima=${PRIMA_BIN:?PRIMA_BIN not set}
build=$(dirname "$prima")
tmp=$(mktemp -d /tmp/prima-api-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null || { echo "FAIL: cmake --install"; exit 1; }
[ -f "$tmp/prefix/include/prima.h" ] || { echo "FAIL: prima.h not installed"; exit 1; }
cat >"$tmp/greedy.c" <<'C'
#include <prima.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    char err[256], piece[4]; /* smaller than most pieces: the length contract matters */
    prima_model *m = prima_model_open(argv[1], NULL, err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    prima_session_params sp = prima_session_default_params();
    sp.temp = 0;
    sp.n_ctx = 64;
    prima_session *s = prima_session_create(m, &sp, err, sizeof err);
    int32_t toks[32];
    int n = s ? prima_tokenize(m, argv[2], toks, 32, true, false, err, sizeof err) : -1;
    if (n < 1 || n > 32 || prima_eval(s, toks, n, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (int i = 0; i < 32; i++) {
        int32_t t = prima_sample(s);
        size_t len = prima_token_piece(m, t, piece, sizeof piece);
        if (len > sizeof piece) { /* cut: the full length is known, ask again */
            char *big = malloc(len);
            if (!big || prima_token_piece(m, t, big, len) != len)
                return 1;
            fwrite(big, 1, len, stdout);
            free(big);
        } else {
            fwrite(piece, 1, len, stdout);
        }
        if (i < 31 && prima_eval(s, &t, 1, err, sizeof err))
            return 1;
    }
    putchar('\n');
    prima_session_free(s);
    prima_model_free(m);
    return 0;
}
C
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib64/pkgconfig:$tmp/prefix/lib/x86_64-linux-gnu/pkgconfig"
flags=$(pkg-config --define-variable=prefix="$tmp/prefix" --cflags --libs prima) || { echo "FAIL: pkg-config prima"; exit 1; }
libdir=$(pkg-config --define-variable=prefix="$tmp/prefix" --variable=libdir prima)
# Only the public API is exported: internal names (model_load, conn_send, ...) would clash with
# the embedding program's own.
[ -f "$libdir/libprima.so" ] || { echo "FAIL: no libprima.so in $libdir"; exit 1; }
exported=$(nm -D --defined-only "$libdir/libprima.so" | awk '{print $3}' | sort)
declared=$(grep -o '^PRIMA_API[^(]*(' "$tmp/prefix/include/prima.h" | sed 's/.*[ *]\(prima_[a-z_]*\)($/\1/' | sort)
[ -n "$declared" ] || { echo "FAIL: no PRIMA_API declarations in prima.h"; exit 1; }
[ "$exported" = "$declared" ] || {
    echo "FAIL: libprima.so exports other names than prima.h declares:"
    diff <(echo "$declared") <(echo "$exported") | grep '^[<>]' | head -10
    exit 1
}
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/greedy" "$tmp/greedy.c" $flags ${PRIMA_SANITIZE_FLAGS:-} ||
    { echo "FAIL: building against the installed library"; exit 1; }
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/greedy" "$fixtures/models/stories260K.gguf" "Once upon a time") ||
    { echo "FAIL: the program failed"; exit 1; }
want=$(sed -n 's/^  "greedy_text": "\(.*\)",$/\1/p' "$fixtures/reference/stories260K.once.json")
[ "$out" = "$want" ] || { echo "FAIL: '$out' != '$want'"; exit 1; }
echo "installed library works and exports the $(wc -l <<<"$exported") functions of prima.h only"
