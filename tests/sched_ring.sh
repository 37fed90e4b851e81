#!/bin/bash
# sched_ring.sh — the scheduler at a ring's start-up, with real workers on loopback: without -lw
# the head profiles itself and each worker, prints the plan and runs it, with the same greedy text
# as one device; a worker measures once and answers later heads from what it kept; -lw skips the
# scheduler; a planner failure is one line naming the cause.
set -u
fixtures=${PRIMA_FIXTURES:-${PRIMA_FIXTURES_DEFAULT:-../shared/fixtures}}
[ -f "$fixtures/README.md" ] || { echo "SKIPPED: fixtures not found at $fixtures"; exit 77; }
prima=${PRIMA_BIN:?PRIMA_BIN not set}
model=$fixtures/models/stories260K.gguf
tmp=$(mktemp -d /tmp/prima-sched-ring.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

start_worker() { # log; sets $port
    "$prima" worker -m "$model" --host 127.0.0.1 --port 0 -t 1 >"$1" 2>&1 &
    pids+=($!)
    port=
    for _ in $(seq 100); do
        port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' "$1")
        [ -n "$port" ] && return 0
        sleep 0.05
    done
    fail "worker did not start: $(cat "$1")"
    exit 1
}
start_worker "$tmp/w1.log"; w1=$port
start_worker "$tmp/w2.log"; w2=$port
workers=127.0.0.1:$w1,127.0.0.1:$w2

"$prima" run -m "$model" -p "Once upon a time" -n 24 --temp 0 -t 1 >"$tmp/one.txt" 2>/dev/null ||
    fail "single device run"
for i in 1 2; do
    "$prima" run -m "$model" -p "Once upon a time" -n 24 --temp 0 -t 1 --workers "$workers" \
        >"$tmp/ring$i.txt" 2>"$tmp/err$i" || fail "scheduled ring run $i: $(cat "$tmp/err$i")"
    cmp -s "$tmp/one.txt" "$tmp/ring$i.txt" || fail "run $i: text differs from one device's"
    for want in "scheduler: profiling this device (the head)" "scheduler: profiling device 2" \
        "^plan: 5 layers on 3 devices" "TPOT terms: compute" "(head)"; do
        grep -q -- "$want" "$tmp/err$i" || fail "run $i: no '$want' in: $(cat "$tmp/err$i")"
    done
done
# each worker was asked by both heads (test_measure checks that the second answer is the kept
# measurement)
for w in 1 2; do
    [ "$(grep -c "profiling this device for" "$tmp/w$w.log")" = 2 ] ||
        fail "worker $w profile requests: $(cat "$tmp/w$w.log")"
done

# -lw: the hand-made plan, no scheduler
"$prima" run -m "$model" -p "Once upon a time" -n 24 --temp 0 -t 1 --workers "$workers" \
    -lw 2,2,1 >"$tmp/lw.txt" 2>"$tmp/err" || fail "-lw run: $(cat "$tmp/err")"
grep -q "scheduler" "$tmp/err" && fail "-lw still ran the scheduler: $(cat "$tmp/err")"
cmp -s "$tmp/one.txt" "$tmp/lw.txt" || fail "-lw text differs"

# a plan that cannot exist (-k beyond the layers) is one line on stderr, status 1
"$prima" run -m "$model" -p x -n 1 -t 1 --workers "$workers" -k 9 >/dev/null 2>"$tmp/err"
status=$?
[ $status = 1 ] && grep -q "^prima: .*9" "$tmp/err" || fail "-k 9 for 5 layers: status $status: $(cat "$tmp/err")"

[ $fails = 0 ] && echo "sched_ring: ok"
exit $((fails > 0))
