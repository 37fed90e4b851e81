#!/bin/bash
# The rules every command shares, end to end: one thread limit (the kernels' pool size), checked
# when the command line is read by every command that takes a thread count; a malformed --workers
# address is a usage error (2) found before anything is loaded; a file the command line names
# that cannot be read is an error (1), the model and the prompt file alike; --version says the
# version CMakeLists.txt declares.
set -u
prima=${PRIMA_BIN:?PRIMA_BIN not set}
tmp=$(mktemp -d /tmp/prima-usage-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

expect() { # STATUS EXACT-LINE COMMAND...
    local want=$1 line=$2
    shift 2
    "$@" >/dev/null 2>"$tmp/err" </dev/null
    local rc=$?
    [ $rc -eq "$want" ] || fail "$*: status $rc, expected $want"
    [ "$(cat "$tmp/err")" = "$line" ] || fail "$*: stderr '$(cat "$tmp/err")', expected '$line'"
}

# One limit: 256 threads for every command (a model that does not exist is never opened).
none=$tmp/none.gguf
limit="expected an integer in [1, 256], got '257'"
expect 2 "prima: -t: $limit" "$prima" run -m "$none" -p hi -t 257
expect 2 "prima: -t: $limit" "$prima" logits -m "$none" -p hi -o "$tmp/x" -t 257
expect 2 "prima: -t: $limit" "$prima" cluster -m "$none" -p hi -t 257
expect 2 "prima: -t: $limit" "$prima" worker -m "$none" -t 257
expect 2 "prima: -t: $limit" "$prima" profile -t 257
expect 2 "prima: -t: $limit" "$prima" bench kernels -t 257
expect 2 "prima: -t: $limit" "$prima" bench pages -t 257
expect 2 "prima: -t: $limit" "$prima" bench run -m "$none" -t 257
expect 2 "prima: -t: $limit" "$prima" bench ring -m "$none" -t 257
expect 2 "prima: --single-threads: $limit" "$prima" bench ring -m "$none" --single-threads 257
expect 2 "prima: --worker-threads: $limit" "$prima" run -m "$none" -p hi --worker-threads 257
expect 1 "prima: mkmodel: --threads 257 is out of range (1..256)" \
    "$prima" mkmodel -o "$tmp/m.gguf" --threads 257
# 256 itself passes the check (the model is what fails)
expect 1 "prima: $none: cannot open: No such file or directory" "$prima" worker -m "$none" -t 256

# A malformed --workers address: a usage error, before the model is opened.
expect 2 "prima: --workers: address 'foo:bar': port must be 1..65535" \
    "$prima" run -m "$none" -p hi --workers foo:bar
expect 2 "prima: --workers: address '': expected host:port" \
    "$prima" run -m "$none" -p hi --workers 127.0.0.1:9500,
expect 2 "prima: --workers: address 'h': expected host:port" \
    "$prima" logits -m "$none" -p hi -o "$tmp/x" --workers 127.0.0.1:9500,h

# A file that cannot be read is an error, whether it is the model or the prompt.
expect 1 "prima: $none: cannot open: No such file or directory" "$prima" run -m "$none" -p hi
expect 1 "prima: $tmp/none.txt: No such file or directory" \
    "$prima" run -m "$none" -f "$tmp/none.txt"

# Options are read from each command's table (src/cli/opts.h): every spelling in full, no
# abbreviation; "--name=VALUE" too; llama.cpp's single-dash names; a value is taken as it is,
# whatever it looks like; a missing value or a stray argument is a usage error naming it.
expect 2 "prima: run: unknown option '--work' (see prima run --help)" \
    "$prima" run -m "$none" -p hi --work 127.0.0.1:9500
expect 2 "prima: -t: $limit" "$prima" run -m "$none" -p hi --threads=257
expect 2 "prima: -lw: expected up to 32 comma-separated layer counts (head first), got '1,x'" \
    "$prima" run -m "$none" -p hi -lw 1,x
expect 1 "prima: $none: cannot open: No such file or directory" "$prima" run -m "$none" -p --workers
expect 2 "prima: worker: -m needs a value (see prima worker --help)" "$prima" worker -m
expect 2 "prima: keygen: unexpected argument 'extra' (see prima keygen --help)" \
    "$prima" keygen -o "$tmp/k" extra
expect 2 "prima: --heads: expected an integer in [0, 1073741824], got 'x'" \
    "$prima" mkmodel -o "$tmp/m.gguf" --heads x

# --version says the version that project() in CMakeLists.txt declares, its one place.
want=$(sed -n 's/^project(prima VERSION \([0-9.]*\) .*/\1/p' "$(dirname "$0")/../CMakeLists.txt")
[ -n "$want" ] || fail "no project version found in CMakeLists.txt"
got=$("$prima" --version)
[ "$got" = "prima $want" ] || fail "--version: '$got', expected 'prima $want'"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all usage checks passed"
