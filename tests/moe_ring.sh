#!/bin/bash
# moe_ring.sh — a model of experts on a ring of real workers on loopback: the ring's answer is
# one device's, also when every device pages its layers by expert (--release always, two rounds)
# and the ring table then counts, per device, the disk read and the routed experts' bytes; a
# worker killed mid-answer is failed over (the answer is still one device's); prima plan plans
# the file, also with its routing calibrated: measured and kept in the calibration cache (a
# directory of this test's), read from there the second time, measured again when asked to.
set -u
. "$(dirname "$0")/support/ring_workers.sh" moe-ring
export PRIMA_CACHE_DIR=$tmp/cache

moe=$tmp/moe.gguf
"$prima" mkmodel -o "$moe" --arch qwen3moe --layers 6 --embd 256 --ff 256 --experts 16 \
    --experts-used 2 --type q8_0 --seed 5 >/dev/null 2>&1 || { fail "mkmodel"; exit 1; }
run_args=(-m "$moe" -p "Once upon a time there was" -n 48 -t 1 --temp 0 --ignore-eos)
"$prima" run "${run_args[@]}" >"$tmp/one.txt" 2>"$tmp/err" || fail "one device: $(cat "$tmp/err")"

for i in 1 2; do start_worker "$moe" "$tmp/w$i.log" || exit 1; w[$i]=127.0.0.1:$port; wpid[$i]=${pids[-1]}; done
"$prima" run "${run_args[@]}" --workers "${w[1]},${w[2]}" -lw 1,1,1 -k 2 --release always \
    >"$tmp/ring.txt" 2>"$tmp/err" || fail "ring: $(cat "$tmp/err")"
cmp -s "$tmp/one.txt" "$tmp/ring.txt" || fail "the ring paging by expert differs from one device"
# the ring table: per device and batch, disk MiB and routed MiB; every device routes
grep -q "disk MiB  routed MiB" "$tmp/err" || fail "no routed experts in the ring table: $(cat "$tmp/err")"
routed=$(awk '/^prima:   [0-9]+  / { print $NF }' "$tmp/err")
[ "$(wc -l <<<"$routed")" = 3 ] && ! grep -qx "0.00" <<<"$routed" ||
    fail "a device without routed experts: $(grep '^prima:   ' "$tmp/err")"

# failover: worker 2 killed during the decode; the head finishes on the devices left
"$prima" run "${run_args[@]}" -n 400 --workers "${w[1]},${w[2]}" -lw 2,2,2 \
    >"$tmp/fo.txt" 2>"$tmp/fo.err" &
head=$!
for _ in $(seq 200); do grep -q ': plan: device' "$tmp/w2.log" 2>/dev/null && break; sleep 0.05; done
sleep 0.5
{ kill -9 "${wpid[2]}"; wait "${wpid[2]}"; } 2>/dev/null
wait $head || fail "failover: $(tail -n 3 "$tmp/fo.err")"
"$prima" run "${run_args[@]}" -n 400 >"$tmp/fo_one.txt" 2>/dev/null
cmp -s "$tmp/fo_one.txt" "$tmp/fo.txt" || fail "the answer after failover differs from one device's"
grep "^prima: lost device 2 " "$tmp/fo.err" ||
    echo "note: the answer was complete before the fault: $(grep '^prima: ' "$tmp/fo.err" | tail -n 1)"

# prima plan on the file, with a profile of this device
"$prima" profile -m "$moe" -t 1 --json >"$tmp/me.json" 2>/dev/null || fail "profile"
"$prima" plan -m "$moe" --device "$tmp/me.json" >"$tmp/plan.txt" 2>&1 &&
    grep -q "^plan: 6 layers on 1 device" "$tmp/plan.txt" || fail "plan: $(cat "$tmp/plan.txt")"
# ... with the routing measured (--calibrate) and kept; then read; then measured again
"$prima" plan -m "$moe" --device "$tmp/me.json" --calibrate >"$tmp/plan.txt" 2>"$tmp/cal.err" &&
    grep -q "^plan: 6 layers on 1 device" "$tmp/plan.txt" || fail "plan --calibrate: $(cat "$tmp/plan.txt" "$tmp/cal.err")"
grep -q "^plan: expert routing calibrated in .* and saved in $tmp/cache/experts-" "$tmp/cal.err" ||
    fail "plan --calibrate did not keep its calibration: $(cat "$tmp/cal.err")"
"$prima" plan -m "$moe" --device "$tmp/me.json" --calibrate >"$tmp/plan2.txt" 2>"$tmp/cal.err" &&
    grep -q "^plan: expert routing from $tmp/cache/experts-" "$tmp/cal.err" ||
    fail "a second plan --calibrate measured again: $(cat "$tmp/cal.err")"
# the same plan, but for the time the search took
cmp -s <(grep -v "solved in" "$tmp/plan.txt") <(grep -v "solved in" "$tmp/plan2.txt") ||
    fail "the cached calibration plans otherwise: $(diff "$tmp/plan.txt" "$tmp/plan2.txt")"
"$prima" plan -m "$moe" --device "$tmp/me.json" --recalibrate >/dev/null 2>"$tmp/cal.err" &&
    grep -q "^plan: expert routing calibrated in " "$tmp/cal.err" ||
    fail "plan --recalibrate did not measure: $(cat "$tmp/cal.err")"

[ $fails = 0 ] && echo "all MoE ring checks passed"
exit $((fails > 0))
