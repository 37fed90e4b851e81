#!/bin/bash
# sched_ring.sh — the scheduler at a ring's start-up, with real workers on loopback: without -lw
# the head profiles itself and each worker, prints the plan and runs it, with the same greedy text
# as one device; a worker measures once and answers later heads from what it kept; -lw skips the
# scheduler; profile caches are saved and reused; a planner failure is one line naming the cause.
set -u
. "$(dirname "$0")/support/ring_workers.sh" sched-ring

start_worker "$model" "$tmp/w1.log" || exit 1; w1=$port
start_worker "$model" "$tmp/w2.log" || exit 1; w2=$port
workers=127.0.0.1:$w1,127.0.0.1:$w2

"$prima" run -m "$model" -p "Once upon a time" -n 24 --temp 0 -t 1 >"$tmp/one.txt" 2>/dev/null ||
    fail "single device run"
# a worker's anonymous memory (kB): what its probes leave behind, without the libraries that
# the GPU probe maps from files
anon() { awk '/^RssAnon/ {print $2}' "/proc/${pids[0]}/status"; }
anon_before=$(anon)
for i in 1 2; do
    "$prima" run -m "$model" -p "Once upon a time" -n 24 --temp 0 -t 1 --workers "$workers" \
        >"$tmp/ring$i.txt" 2>"$tmp/err$i" || fail "scheduled ring run $i: $(cat "$tmp/err$i")"
    cmp -s "$tmp/one.txt" "$tmp/ring$i.txt" || fail "run $i: text differs from one device's"
    for want in "scheduler: profiling this device (the head)" "scheduler: profiling device 2" \
        "^plan: 5 layers on 3 devices" "TPOT terms: compute" "(head)"; do
        grep -q -- "$want" "$tmp/err$i" || fail "run $i: no '$want' in: $(cat "$tmp/err$i")"
    done
    # the scheduler's time is its own, not part of the load time
    grep -Eqx "prima: load [0-9]+\.[0-9]{2} s; scheduler [0-9]+\.[0-9]{2} s \(profiling the devices, probing the links, planning\)" \
        "$tmp/err$i" || fail "run $i: load and scheduler times: $(grep load "$tmp/err$i")"
done
# the probes' buffers are given back once the profile is measured (about 39 MB stayed; now
# some 15 MB, 8 MB of it the copied data of the Vulkan driver's LLVM, which the GPU probe loads)
anon_after=$(anon)
echo "sched_ring: worker anonymous memory ${anon_before} kB before profiling, ${anon_after} kB after"
[ -n "${PRIMA_SANITIZE_FLAGS:-}" ] || [ $((anon_after - anon_before)) -lt 24576 ] ||
    fail "worker memory after profiling: $anon_before kB -> $anon_after kB"
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

# --profile-cache: the first run measures each device and saves its profile, the next ones plan
# on the saved figures (a new worker process too: neither file is written again); a file that is not a profile is one line and status 1; another device's profile is
# measured again and replaced.
start_worker "$model" "$tmp/w3.log" --profile-cache "$tmp/w3.json" || exit 1
cached_run() {   # N [workers]
    "$prima" run -m "$model" -p "Once upon a time" -n 8 --temp 0 -t 1 --workers "$2" \
        --profile-cache "$tmp/head.json" --stats "$tmp/c$1.stats" >/dev/null 2>"$tmp/cerr$1" ||
        fail "cached run $1: $(cat "$tmp/cerr$1")"
}
cached_run 1 "127.0.0.1:$port"
headsum=$(md5sum <"$tmp/head.json")
grep -q "profile (the head) measured and saved in $tmp/head.json" "$tmp/cerr1" ||
    fail "first cached run: $(cat "$tmp/cerr1")"
[ -s "$tmp/head.json" ] && [ -s "$tmp/w3.json" ] || fail "no profile caches written"
w3sum=$(md5sum <"$tmp/w3.json")
kill -9 "${pids[-1]}"
start_worker "$model" "$tmp/w3b.log" --profile-cache "$tmp/w3.json" || exit 1
cached_run 2 "127.0.0.1:$port"
grep -q "profile (the head) from $tmp/head.json" "$tmp/cerr2" || fail "second cached run: $(cat "$tmp/cerr2")"
[ "$(md5sum <"$tmp/w3.json")" = "$w3sum" ] || fail "the worker measured again instead of using its cache"
[ "$(md5sum <"$tmp/head.json")" = "$headsum" ] || fail "the head measured again instead of using its cache"
echo '{"version": 1' >"$tmp/bad.json"
"$prima" run -m "$model" -p x -n 1 -t 1 --workers "127.0.0.1:$port" --profile-cache "$tmp/bad.json" \
    >/dev/null 2>"$tmp/err"
status=$?
[ $status = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "bad.json" "$tmp/err" ||
    fail "damaged cache: status $status: $(cat "$tmp/err")"
sed '0,/"name":/s/"name":[^,]*/"name": "elsewhere"/' "$tmp/head.json" >"$tmp/other.json"  # the device's name, not its GPU's
cp "$tmp/other.json" "$tmp/head.json"
cached_run 3 "127.0.0.1:$port"
grep -q "measured and saved in" "$tmp/cerr3" && ! grep -q '"elsewhere"' "$tmp/head.json" ||
    fail "another device's cache was used: $(cat "$tmp/cerr3")"

# a plan that cannot exist (-k beyond the layers) is one line on stderr, status 1
"$prima" run -m "$model" -p x -n 1 -t 1 --workers "$workers" -k 9 >/dev/null 2>"$tmp/err"
status=$?
[ $status = 1 ] && grep -q "^prima: .*9" "$tmp/err" || fail "-k 9 for 5 layers: status $status: $(cat "$tmp/err")"

[ $fails = 0 ] && echo "sched_ring: ok"
exit $((fails > 0))
