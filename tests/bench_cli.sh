#!/bin/bash
# prima bench tables as text: one header row, and every column where the header puts it, for
# bench plan, bench pages and bench ring (the JSON lines are checked with each benchmark; bench
# kernels' here).
set -u
prima=${PRIMA_BIN:?PRIMA_BIN not set}
. "$(dirname "$0")/support/needs.sh"
tmp=$(mktemp -d /tmp/prima-bench-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

header="type    shape       tokens thr     value unit      bound spread  measurement"
# FILE NAME: the header first (after an optional SIMD line), then rows whose value ends, and
# whose measurement starts, under the header's ("±" is one column).
table() {
    local rows
    rows=$(grep -v '^SIMD path' "$1")
    [ "$(head -1 <<<"$rows")" = "$header" ] || fail "$2: header row: $(head -1 <<<"$rows")"
    [ "$(grep -c "^type " <<<"$rows")" = 1 ] || fail "$2: not one header row"
    [ "$(wc -l <<<"$rows")" -ge 3 ] || fail "$2: too few rows: $rows"
    tail -n +2 <<<"$rows" | sed 's/±/+/' | awk -v name="$2" -v header="$header" '
        BEGIN { v = index(header, "value") + 4; w = index(header, "measurement") }
        substr($0, v, 1) !~ /[0-9]/ || substr($0, v + 1, 1) != " " ||
        substr($0, w - 2, 2) != "  " || substr($0, w, 1) !~ /[a-z]/ {
            printf "FAIL: %s: misaligned row: %s\n", name, $0; bad++ }
        END { exit bad > 0 }' || fails=$((fails + 1))
}

"$prima" bench plan --devices 3 --layers 8 --reps 1 >"$tmp/plan" 2>"$tmp/err" ||
    fail "bench plan: $(cat "$tmp/err")"
table "$tmp/plan" "bench plan"
"$prima" bench pages --size 64 --reps 1 -t 1 --dir "$tmp" >"$tmp/pages" 2>"$tmp/err" ||
    fail "bench pages: $(cat "$tmp/err")"
table "$tmp/pages" "bench pages"
"$prima" bench kernels -t 1 --reps 1 --type q8_0 >"$tmp/kernels" 2>"$tmp/err" ||
    fail "bench kernels: $(cat "$tmp/err")"
table "$tmp/kernels" "bench kernels"
# its JSON lines, all through cJSON (the CPU's features included)
"$prima" bench kernels -t 1 --reps 1 --type q8_0 --json >"$tmp/kernels.json" 2>"$tmp/err" ||
    fail "bench kernels --json: $(cat "$tmp/err")"
jq -e -s 'length > 3 and .[0].op == "path" and (.[0].cpu | type) == "string"' \
    "$tmp/kernels.json" >/dev/null || fail "bench kernels --json: $(head -3 "$tmp/kernels.json")"
# small batches: 2, 4 and 8 tokens, each as a multiple of one token's time
jq -e -s '[.[] | select(.op == "batch")] | map(.tokens) == [2, 4, 8] and all(.[]; .unit == "x1 tok")' \
    "$tmp/kernels.json" >/dev/null || fail "bench kernels --json: no batch rows: $(grep batch "$tmp/kernels.json")"
if have_fixtures "bench ring"; then
    "$prima" bench ring -m "$fixtures/models/stories260K.gguf" --devices 3 -lw 1,2,2 -t 1 \
        --decode 4 --reps 1 >"$tmp/ring" 2>"$tmp/err" || fail "bench ring: $(cat "$tmp/err")"
    table "$tmp/ring" "bench ring"
fi

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "bench tables: all checks passed"
