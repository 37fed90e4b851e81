#!/bin/bash
# A damaged model end to end: for every fixture model, a copy whose first attention norm is NaN
# (made here, in a temporary directory) goes through `prima run` with the default sampler,
# greedy (--temp 0) and a repetition penalty. Each run must stop with exit status 1 and the one
# line that names the position — never a token id out of the vocabulary, blanks, or (in the
# sanitizer build) a report of a read outside the sampler's candidates. And a worker that decodes
# on its own checks the logits it makes: the head names the device and the position.
set -u
. "$(dirname "$0")/support/needs.sh"
need_fixtures
prima=${PRIMA_BIN:?PRIMA_BIN not set}
tmp=$(mktemp -d /tmp/prima-nan-logits.XXXXXX)
worker=
trap '[ -n "$worker" ] && kill "$worker" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0 models=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
prompt="Once upon a time"

# damage SRC TENSOR COPY: COPY is SRC with the F32 tensor TENSOR all quiet NaNs (00 00 c0 7f,
# little-endian), found where the machine-readable description puts it. SRC = COPY: in place.
damage() {
    local at off bytes
    at=$("$prima" gguf info --json "$1" | jq -r --arg t "$2" '.data_offset as $d | .tensors[] |
        select(.name == $t and .type == "F32") | "\($d + .offset) \(.bytes)"')
    [ -n "$at" ] || { fail "$(basename "$1"): no F32 $2"; return 1; }
    read -r off bytes <<<"$at"
    [ "$1" = "$3" ] || { cp "$1" "$3" && chmod u+w "$3"; }
    head -c $((bytes / 4)) /dev/zero | tr '\0' 'n' | sed 's/n/\x00\x00\xc0\x7f/g' |
        dd of="$3" bs=1 seek="$off" conv=notrunc status=none
    cmp -s "$1" "$3" && [ "$1" != "$3" ] && { fail "$(basename "$1"): the copy was not damaged"; return 1; }
    return 0
}

for src in "$fixtures"/models/*.gguf; do
    name=$(basename "$src" .gguf)
    copy=$tmp/$name.gguf
    damage "$src" blk.0.attn_norm.weight "$copy" || continue
    n=$("$prima" tokenize -m "$src" -p "$prompt" --parse-special | wc -w)
    want="prima: the model produced NaN logits at position $((n - 1)): the weights are damaged or the type is unsupported"
    for flags in "" "--temp 0" "--repeat-penalty 1.1"; do
        # shellcheck disable=SC2086
        "$prima" run -m "$copy" -p "$prompt" -n 8 -t 2 $flags >"$tmp/out" 2>"$tmp/err"
        rc=$?
        [ "$rc" -eq 1 ] || fail "$name ${flags:-(defaults)}: exit status $rc"
        [ "$(tail -n 1 "$tmp/err")" = "$want" ] ||
            fail "$name ${flags:-(defaults)}: last line '$(tail -n 1 "$tmp/err")'"
        grep -q "Sanitizer\|runtime error" "$tmp/err" && fail "$name ${flags:-(defaults)}: sanitizer report"
    done
    models=$((models + 1))
done
[ "$models" -gt 0 ] || fail "no fixture models in $fixtures/models"

# The worker holds every layer (-lw 0,5) and decodes alone with its own copy, whose output norm
# turned NaN after the copy's manifest was cached (bit rot: the model identity, the manifest's
# hash, still says intact, so the head's intact file matches it): the worker's first decode
# step makes NaN logits, and the head names it.
start_worker() {
    # emptied here, not by the worker's redirection: a restart must not find the last one's port
    : >"$tmp/worker.log"
    "$prima" worker -m "$tmp/worker.gguf" --host 127.0.0.1 --port 0 -t 1 --insecure \
        >"$tmp/worker.log" 2>&1 &
    worker=$!
    port=
    for _ in $(seq 100); do
        port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' "$tmp/worker.log")
        [ -n "$port" ] && break
        sleep 0.1
    done
}
src=$fixtures/models/stories260K.gguf
cp "$src" "$tmp/worker.gguf" && chmod u+w "$tmp/worker.gguf"
start_worker   # caches the intact copy's manifest
kill "$worker"; wait "$worker" 2>/dev/null
mtime=$(stat -c %.9Y "$tmp/worker.gguf")
if damage "$tmp/worker.gguf" output_norm.weight "$tmp/worker.gguf"; then
    touch -d "@$mtime" "$tmp/worker.gguf"   # as the cache recorded it
    start_worker
    n=$("$prima" tokenize -m "$src" -p "$prompt" --parse-special | wc -w)
    "$prima" run -m "$src" -p "$prompt" -n 4 -t 1 --temp 0 --workers "127.0.0.1:$port" -lw 0,5 \
        --insecure >/dev/null 2>"$tmp/err"
    grep -q "device 1 (127.0.0.1:$port): the model produced NaN logits at position $n:" "$tmp/err" ||
        fail "a worker decoding alone with NaN logits: $(cat "$tmp/err")"
fi
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "NaN weights stop with the position named in $models models"
