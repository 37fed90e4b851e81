#!/bin/bash
# stats_cli.sh — the machine-readable --stats files (src/cluster/stats.h) that tools such as
# bench/run read instead of log prose: on a 3-device ring on loopback, every line is one JSON
# event with a time; the head has one batch event per batch and device whose compute time is the
# --verbose line's, and the prompt and generation events; each worker has the plan it was given;
# with the scheduler the plan event holds the windows of the printed table. A file that cannot be
# written is one line naming it.
set -u
. "$(dirname "$0")/support/ring_workers.sh" stats-cli

start_worker "$model" "$tmp/w1.log" --stats "$tmp/w1.stats" || exit 1; w1=$port
start_worker "$model" "$tmp/w2.log" --stats "$tmp/w2.stats" || exit 1; w2=$port
workers=127.0.0.1:$w1,127.0.0.1:$w2

"$prima" run -m "$model" -p "Once upon a time" -n 6 --temp 0 -t 1 --workers "$workers" -lw 2,2,1 \
    --verbose --stats "$tmp/head.stats" >/dev/null 2>"$tmp/err" || fail "ring run: $(cat "$tmp/err")"
for f in head w1 w2; do
    [ -s "$tmp/$f.stats" ] || { fail "$f.stats is empty"; continue; }
    jq -e 'type == "object" and (.event | type) == "string" and (.time | type) == "number" and .time > 1e9' \
        "$tmp/$f.stats" >/dev/null || fail "$f.stats: a line is not an event: $(head -3 "$tmp/$f.stats")"
done
# -n 6: the prompt batch and 5 decode steps (the last token is chosen, not evaluated), 3 devices
got=$(jq -rs '[.[] | select(.event == "batch")] | "\(length) \([.[].serial] | unique | join(",")) \([.[].device] | unique | join(","))"' "$tmp/head.stats")
[ "$got" = "18 0,1,2,3,4,5 0,1,2" ] || fail "batch events (count, serials, devices): $got"
got=$(jq -rs 'map(select(.event == "prompt" or .event == "generation") | "\(.event) \(.tokens)") | join(", ")' "$tmp/head.stats")
[ "$got" = "prompt 5, generation 6" ] || fail "prompt and generation events: $got"
jq -es 'map(select(.event == "batch")) | all(.compute_ns > 0 and .pages >= .pages_resident)' \
    "$tmp/head.stats" >/dev/null || fail "batch counters: $(grep batch "$tmp/head.stats" | head -2)"
# the same figures as the --verbose prose, to its two decimals
want=$(sed -n 's/^ring: batch \([0-9]*\) device \([0-9]*\): compute \([0-9.]*\) ms.*/\1 \2 \3/p' "$tmp/err" | sort)
got=$(jq -rs '.[] | select(.event == "batch") | "\(.serial) \(.device) \(.compute_ns)"' "$tmp/head.stats" |
    awk '{ printf "%s %s %.2f\n", $1, $2, $3 / 1e6 }' | sort)
[ -n "$want" ] && [ "$want" = "$got" ] || fail "batch events differ from the --verbose lines: $(diff <(echo "$want") <(echo "$got") | head -4)"
for w in 1 2; do
    got=$(jq -rs 'map(select(.event == "worker_plan")) | last | "\(.device) \(.devices) \(.rounds) \(.layers) \(.streaming)"' "$tmp/w$w.stats")
    want=$([ $w = 1 ] && echo "1 3 1 2-3 0" || echo "2 3 1 4 0")
    [ "$got" = "$want" ] || fail "worker $w's plan event: '$got', expected '$want'"
done

# the scheduler's plan: the windows and k of the table it prints
"$prima" run -m "$model" -p "Once upon a time" -n 2 --temp 0 -t 1 --workers "$workers" \
    --stats "$tmp/plan.stats" >/dev/null 2>"$tmp/err" || fail "scheduled run: $(cat "$tmp/err")"
want=$(awk '/^plan: .* layers on / { for (i = 1; i <= NF; i++) if ($i == "k") k = $(i + 2); on = 1; next }
            on && $1 ~ /^[0-9]+$/ { w = w (w == "" ? "" : "/") $5 } /TPOT terms/ { on = 0 }
            END { print "k=" k " w=" w }' "$tmp/err")
got=$(jq -rs 'map(select(.event == "plan")) | first | "k=\(.k) w=\([.devices[].window] | map(tostring) | join("/"))"' "$tmp/plan.stats")
[ "$got" = "$want" ] && [ "$want" != "k= w=" ] || fail "plan event '$got', the printed table '$want'"

# a file that cannot be written (the status is that of the other files named by ring options)
"$prima" run -m "$model" -p x -n 1 -k 1 --stats /nonexistent/dir/x.stats >/dev/null 2>"$tmp/err"
status=$?
[ $status != 0 ] && [ "$(cat "$tmp/err")" = "prima: --stats: cannot write /nonexistent/dir/x.stats: No such file or directory" ] ||
    fail "unwritable --stats: status $status: $(cat "$tmp/err")"

[ $fails = 0 ] && echo "stats_cli: ok"
exit $((fails > 0))
