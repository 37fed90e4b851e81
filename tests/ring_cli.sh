#!/bin/bash
# prima worker / prima run --workers / prima logits --workers / prima cluster end to end, with
# real processes on loopback: logits bit-identical to one device (a prompt in micro-batches
# too), the same greedy text, a worker killed mid-generation (the head stops within 5 s naming
# it; the survivor serves the next head), one-line errors, and no process left behind by prima
# cluster, even when it is killed.
set -u
. "$(dirname "$0")/support/ring_workers.sh" ring-cli

"$prima" worker --help | grep -q -- "--port P" || fail "worker --help"
"$prima" cluster --help | grep -q -- "--devices N" || fail "cluster --help"
"$prima" run --help | grep -q -- "--workers H:P" || fail "run --help lacks the ring options"

start_worker "$model" "$tmp/w1.log"; w1=$port; pid1=${pids[-1]}
start_worker "$model" "$tmp/w2.log"; w2=$port; pid2=${pids[-1]}

# logits: every prompt row and greedy token identical to one device's, for two plans
toks=1,403,407,261,378,434,402,300,306,267
"$prima" logits -m "$model" --tokens $toks -o "$tmp/one.f32" -n 12 --json -t 1 >"$tmp/one.json" \
    2>"$tmp/err" || fail "single-device logits: $(cat "$tmp/err")"
for lw in 1,2,2 0,1,1 2,1,0; do
    "$prima" logits -m "$model" --tokens $toks -o "$tmp/ring.f32" -n 12 --json -t 1 \
        --workers 127.0.0.1:$w1,127.0.0.1:$w2 -lw $lw >"$tmp/ring.json" 2>"$tmp/err" ||
        fail "ring logits -lw $lw: $(cat "$tmp/err")"
    cmp -s "$tmp/one.f32" "$tmp/ring.f32" || fail "-lw $lw: logits differ from one device"
    diff <(grep -v logits_file "$tmp/one.json") <(grep -v logits_file "$tmp/ring.json") >/dev/null ||
        fail "-lw $lw: greedy tokens or text differ"
done

# a prompt of 130 tokens goes round as micro-batches of about 32 rows, all in flight at once
# (batches 0-3 on every device), with the same logits as one device
long=$(seq -s, 5 3 392)
"$prima" logits -m "$model" --tokens "$long" -o "$tmp/one.f32" -n 1 -t 1 >/dev/null 2>"$tmp/err" ||
    fail "single-device logits of 130 tokens: $(cat "$tmp/err")"
"$prima" logits -m "$model" --tokens "$long" -o "$tmp/ring.f32" -n 1 -t 1 --verbose \
    --workers 127.0.0.1:$w1,127.0.0.1:$w2 -lw 1,2,2 >/dev/null 2>"$tmp/err" ||
    fail "ring logits of 130 tokens: $(cat "$tmp/err")"
cmp -s "$tmp/one.f32" "$tmp/ring.f32" || fail "130 tokens in micro-batches: logits differ from one device"
for d in 0 1 2; do
    grep -q "^ring: batch 3 device $d: " "$tmp/err" ||
        fail "130 tokens: device $d saw no fourth micro-batch: $(grep '^ring: batch' "$tmp/err")"
done
grep -q "^ring: batch 4 " "$tmp/err" && fail "130 tokens: more than 4 micro-batches"
# ... but one per device when the devices stream their layers (each reads them per micro-batch)
"$prima" logits -m "$model" --tokens "$long" -o "$tmp/ring.f32" -n 1 -t 1 --verbose \
    --workers 127.0.0.1:$w1,127.0.0.1:$w2 -lw 1,1,1 --release always >/dev/null 2>"$tmp/err" ||
    fail "ring logits of 130 tokens, streaming: $(cat "$tmp/err")"
cmp -s "$tmp/one.f32" "$tmp/ring.f32" || fail "130 tokens, streaming: logits differ from one device"
grep -q "^ring: batch 2 device 2: " "$tmp/err" && ! grep -q "^ring: batch 3 " "$tmp/err" ||
    fail "130 tokens, streaming: not 3 micro-batches: $(grep '^ring: batch' "$tmp/err")"

# run: the same greedy text through a 3-device ring with 2 rounds, and counters with --verbose
"$prima" run -m "$model" -p "Once upon a time" -n 24 --temp 0 -t 1 >"$tmp/one.txt" 2>/dev/null
"$prima" run -m "$model" -p "Once upon a time" -n 24 --temp 0 -t 1 --verbose \
    --workers 127.0.0.1:$w1,127.0.0.1:$w2 -lw 1,1,1 >"$tmp/ring.txt" 2>"$tmp/err" ||
    fail "ring run: $(cat "$tmp/err")"
cmp -s "$tmp/one.txt" "$tmp/ring.txt" || fail "ring text differs: $(cat "$tmp/ring.txt")"
grep -q "ring: total device 2 (.* batches): compute .* ms, wait .* major faults" "$tmp/err" ||
    fail "--verbose counters missing"

# a worker holding every layer decodes on its own: the head sends it nothing per token, and
# the text is one device's, greedy and sampled with penalties, ended by -n and by --stop
for args in "--temp 0 -n 40" "--temp 0.9 --repeat-penalty 1.3 --seed 5 -n 60" \
            "--temp 0 -n 60 --stop park"; do
    # shellcheck disable=SC2086
    "$prima" run -m "$model" -p "Once upon a time" $args -t 1 >"$tmp/dec-one.txt" 2>/dev/null
    # shellcheck disable=SC2086
    "$prima" run -m "$model" -p "Once upon a time" $args -t 1 --verbose \
        --workers 127.0.0.1:$w1 -lw 0,5 >"$tmp/dec-ring.txt" 2>"$tmp/err" ||
        fail "ring run $args: $(cat "$tmp/err")"
    cmp -s "$tmp/dec-one.txt" "$tmp/dec-ring.txt" || fail "$args: the worker's text differs: $(cat "$tmp/dec-ring.txt")"
    grep -q "^ring: batch 5 device 0: .*, sent 0 B, received" "$tmp/err" ||
        fail "$args: the head sent the worker something for a decode step: $(grep 'batch 5 device 0' "$tmp/err")"
done
grep -q "park" "$tmp/dec-one.txt" && fail "--stop park: the stop string was printed"
"$prima" run -m "$model" -p "Once upon a time" -n 8 --temp 0 -t 1 --verbose \
    --workers 127.0.0.1:$w1 -lw 1,4 >/dev/null 2>"$tmp/err"
grep -q "^ring: batch 5 device 0: .*, sent 0 B, received" "$tmp/err" &&
    fail "-lw 1,4: the head holds a layer, yet sent nothing for a decode step"

# one-line errors, non-zero status
"$prima" run -m "$model" -p x --workers 127.0.0.1:$w1 -lw 1,1,1 2>"$tmp/err" >/dev/null
[ $? = 1 ] && grep -qxF "prima: -lw: 3 for 2 device(s) (one per device, head first)" "$tmp/err" ||
    fail "wrong window count: $(cat "$tmp/err")"
# windows larger than the 5-layer model: the head says so before it sends a plan
"$prima" run -m "$model" -p x -t 1 --workers 127.0.0.1:$w1,127.0.0.1:$w2 -lw 9,9,9 2>"$tmp/err" >/dev/null
[ $? = 1 ] && [ "$(cat "$tmp/err")" = "prima: -lw 9,9,9: device 0 (the head) has a window of 9 layers, but the model has 5 (a window is 0..5 layers)" ] ||
    fail "-lw 9,9,9: $(cat "$tmp/err")"
"$prima" run -m "$model" -p x -t 1 --workers 127.0.0.1:$w1 -lw 1,6 2>"$tmp/err" >/dev/null
[ $? = 1 ] && [ "$(cat "$tmp/err")" = "prima: -lw 1,6: device 1 has a window of 6 layers, but the model has 5 (a window is 0..5 layers)" ] ||
    fail "-lw 1,6: $(cat "$tmp/err")"
"$prima" run -m "$model" -p x -t 1 --workers 127.0.0.1:$w1 -lw 0,0 2>"$tmp/err" >/dev/null
[ $? = 1 ] && [ "$(cat "$tmp/err")" = "prima: -lw 0,0: every window is 0 layers: at least one device must compute" ] ||
    fail "-lw 0,0: $(cat "$tmp/err")"
"$prima" run -m "$model" -p x --workers 127.0.0.1:$w1,127.0.0.1:$w1 2>"$tmp/err" >/dev/null
[ $? = 1 ] && grep -q "is the same worker as device 1" "$tmp/err" || fail "twice: $(cat "$tmp/err")"
"$prima" run -m "$model" -p x --release sometimes 2>"$tmp/err" >/dev/null
[ $? = 2 ] && grep -q "^prima: --release: expected auto, never or always" "$tmp/err" ||
    fail "bad --release: $(cat "$tmp/err")"
other=$fixtures/models/tinystories-656k-q8_0.gguf
"$prima" run -m "$other" -p x --workers 127.0.0.1:$w1 2>"$tmp/err" >/dev/null
[ $? = 1 ] && grep -q "model mismatch" "$tmp/err" || fail "other model: $(cat "$tmp/err")"
"$prima" worker -m /nonexistent.gguf --port 0 2>"$tmp/err"
[ $? = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] || fail "worker without a model: $(cat "$tmp/err")"

# cluster keys: the workers hold $PRIMA_KEY_FILE; a head without it is refused, by its own
# command line (no key, no --insecure) or by the worker (plaintext, another key)
"$prima" keygen -o "$tmp/other.key" 2>/dev/null
env -u PRIMA_KEY_FILE "$prima" run -m "$model" -p x --workers 127.0.0.1:$w1 2>"$tmp/err" >/dev/null
[ $? = 2 ] && grep -q "^prima: links to workers need a cluster key" "$tmp/err" ||
    fail "head without a key: $(cat "$tmp/err")"
env -u PRIMA_KEY_FILE "$prima" run -m "$model" -p x --insecure --workers 127.0.0.1:$w1 -lw 3,2 \
    2>"$tmp/err" >/dev/null
[ $? = 1 ] && grep -q "device 1 (127.0.0.1:$w1) requires a cluster key" "$tmp/err" ||
    fail "plaintext head, keyed worker: $(cat "$tmp/err")"
"$prima" run -m "$model" -p x --key "$tmp/other.key" --workers 127.0.0.1:$w1 -lw 3,2 \
    2>"$tmp/err" >/dev/null
[ $? = 1 ] && grep -q "does not hold this cluster key" "$tmp/err" ||
    fail "head with another key: $(cat "$tmp/err")"
grep -q "refused\|dropped" "$tmp/w1.log" || fail "the worker did not log the refusals"
env -u PRIMA_KEY_FILE "$prima" worker -m "$model" --host 127.0.0.1 --port 0 2>"$tmp/err"
[ $? = 2 ] && grep -q "no cluster key: give --key FILE" "$tmp/err" ||
    fail "worker without a key or --insecure: $(cat "$tmp/err")"
"$prima" worker -m "$model" --host 127.0.0.1 --port 0 --insecure --key "$tmp/other.key" 2>"$tmp/err"
[ $? = 2 ] || fail "worker --insecure --key: $(cat "$tmp/err")"
# a plaintext worker on every interface warns loudly (in a network namespace of its own; -k: a
# SIGTERM once left an ASan build spinning in its exit-time leak check for minutes, so a KILL follows)
if unshare -n true 2>/dev/null; then
    env -u PRIMA_KEY_FILE timeout -k 5 20 unshare -n "$prima" worker -m "$model" --port 0 --insecure \
        2>"$tmp/err" &
    open_pid=$!
    for _ in $(seq 200); do grep -q "WARNING" "$tmp/err" && break; sleep 0.05; done
    kill "$open_pid" 2>/dev/null
    wait "$open_pid" 2>/dev/null
    grep -q "WARNING: no cluster key, and listening on every interface: anyone" "$tmp/err" ||
        fail "plaintext worker on every interface: $(cat "$tmp/err")"
else
    echo "no network namespaces here: the warning of a plaintext worker on every interface is not checked"
fi

# a worker killed mid-generation: a long run on a random model (no end-of-text token in sight)
big=$tmp/big.gguf
"$prima" mkmodel -o "$big" --layers 6 --type q8_0 --seed 7 >/dev/null 2>&1 || fail "mkmodel"
start_worker "$big" "$tmp/b1.log"; b1=$port
start_worker "$big" "$tmp/b2.log"; b2=$port; bpid2=${pids[-1]}
"$prima" run -m "$big" -p "x" -n 100000 -c 4096 --context-shift --temp 0 -t 1 --verbose \
    --no-failover --workers 127.0.0.1:$b1,127.0.0.1:$b2 -lw 2,2,2 >/dev/null 2>"$tmp/err" &
head=$!
# kill it once tokens are flowing round the ring
for _ in $(seq 200); do grep -q "^ring: batch 20 " "$tmp/err" && break; sleep 0.05; done
killed=$(date +%s%N)
{ kill -9 "$bpid2"; wait "$bpid2"; } 2>/dev/null
for _ in $(seq 70); do kill -0 $head 2>/dev/null || break; sleep 0.1; done
if kill -0 $head 2>/dev/null; then
    fail "the head still runs 7 s after its worker died"
    kill -9 $head
fi
wait $head
status=$?
took=$((($(date +%s%N) - killed) / 1000000))
[ $status = 1 ] || fail "head exit status $status after a worker died"
grep -q "^prima: .*device 2 (127.0.0.1:$b2)" "$tmp/err" || fail "head error: $(tail -n 3 "$tmp/err")"
echo "head stopped ${took} ms after the kill: $(grep "^prima: " "$tmp/err" | tail -n 1)"
# the survivor is back to waiting and serves the next head
"$prima" run -m "$big" -p "x" -n 4 --temp 0 -t 1 --workers 127.0.0.1:$b1 -lw 3,3 >/dev/null \
    2>"$tmp/err" ||
    fail "survivor did not serve the next head: $(cat "$tmp/err")"

# prima cluster: the ring's text equals one device's; its workers are gone afterwards, also
# when the cluster process is killed outright
"$prima" cluster -m "$model" --devices 3 -p "Once upon a time" -n 24 --temp 0 -t 1 \
    >"$tmp/cluster.txt" 2>"$tmp/err" || fail "cluster: $(cat "$tmp/err")"
cmp -s "$tmp/one.txt" "$tmp/cluster.txt" || fail "cluster text differs: $(cat "$tmp/cluster.txt")"
"$prima" cluster -m "$big" --devices 4 -p "x" -n 100000 -c 4096 --context-shift --temp 0 -t 1 \
    >/dev/null 2>"$tmp/cl.err" &
cl=$!
# (up to 30 s: on a crowded machine the loopback workers take a while to start; the check is that
# they start and die with the cluster, not how fast)
for _ in $(seq 600); do [ "$(pgrep -P $cl | wc -l)" = 3 ] && break; sleep 0.05; done
kids=$(pgrep -P $cl)
pids+=($kids)
[ "$(echo $kids | wc -w)" = 3 ] || fail "cluster: expected 3 workers, saw '$kids': $(tail -n 3 "$tmp/cl.err")"
kill -9 $cl
wait $cl 2>/dev/null
alive() { for k in $kids; do kill -0 "$k" 2>/dev/null && return 0; done; return 1; }
for _ in $(seq 50); do alive || break; sleep 0.1; done
alive && fail "cluster workers outlived it"
# (without a key given: the run makes one of its own)
XDG_CACHE_HOME=$tmp/cache env -u PRIMA_KEY_FILE "$prima" cluster --devices 2 -n 4 >/dev/null 2>"$tmp/err" ||
    fail "cluster with its generated model: $(cat "$tmp/err")"
[ -f "$tmp/cache/prima/cluster-demo-llama-l8-e256-q8_0.gguf" ] || fail "no demo model in the cache"
# --ignore-eos (what scripts/quickstart.sh runs): a seed whose reply ends with an end-of-
# generation token goes on to all of -n; and the ring's table of devices closes the run
demo=$tmp/cache/prima/cluster-demo-llama-l8-e256-q8_0.gguf
eos_seed=
for s in $(seq 12); do
    "$prima" run -m "$demo" -p "Once upon a time" --seed "$s" -t 1 -n 200 2>&1 >/dev/null |
        grep -q "stopped: the model produced an end-of-generation token" && { eos_seed=$s; break; }
done
[ -n "$eos_seed" ] || fail "no seed of 1..12 ends the demo model's reply early (this test needs one)"
XDG_CACHE_HOME=$tmp/cache "$prima" cluster --devices 2 -n 200 --seed "${eos_seed:-1}" --ignore-eos \
    >/dev/null 2>"$tmp/err" || fail "cluster --ignore-eos: $(cat "$tmp/err")"
grep -q "stopped: 200 tokens generated, as -n asked" "$tmp/err" ||
    fail "--ignore-eos (seed $eos_seed): $(grep stopped "$tmp/err")"
grep -q "^prima: ring: 2 devices, 1 round a token; per batch" "$tmp/err" &&
    grep -Eq "^prima:   1 +127\.0\.0\.1:[0-9]+ +[0-9]-[0-9] +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$tmp/err" ||
    fail "the ring's table: $(tail -4 "$tmp/err")"

# prima bench ring: a ring and one device, with every device's counters
"$prima" bench ring -m "$model" --devices 3 -lw 1,2,2 -t 1 --decode 4 --reps 1 --json \
    >"$tmp/bench.json" 2>"$tmp/err" || fail "bench ring: $(cat "$tmp/err")"
for op in "decode single" "decode ring" "ring overhead"; do
    grep -q "\"op\":\"$op\"" "$tmp/bench.json" || fail "bench ring: no '$op'"
done
[ "$(grep -c '"op":"resident at start"' "$tmp/bench.json")" = 3 ] ||
    fail "bench ring: counters of 3 devices expected: $(cat "$tmp/bench.json")"
grep -q '"op":"decode ring keyed"' "$tmp/bench.json" && fail "bench ring: a keyed ring without --key"
grep -q '"op":"prefill ring"' "$tmp/bench.json" && fail "bench ring: prefill figures without --prompt"
# with --prompt: the prompt's tokens/s on both, and their ratio
"$prima" bench ring -m "$model" --devices 3 -lw 1,2,2 -t 1 --decode 2 --reps 1 --prompt 40 \
    --json >"$tmp/bench.json" 2>"$tmp/err" || fail "bench ring --prompt: $(cat "$tmp/err")"
for op in "prefill single" "prefill ring" "prefill speedup" "decode ring"; do
    grep -Eq "\"op\":\"$op\".*\"value\":[0-9.]+[,}]" "$tmp/bench.json" ||
        fail "bench ring --prompt: no '$op': $(cat "$tmp/bench.json")"
done
# with --key: a keyed ring beside the plaintext one, compared pair by pair
"$prima" bench ring -m "$model" --devices 3 -lw 1,2,2 -t 1 --decode 4 --reps 2 --no-single \
    --key "$PRIMA_KEY_FILE" --json >"$tmp/bench.json" 2>"$tmp/err" || fail "bench ring --key: $(cat "$tmp/err")"
for op in "decode ring" "decode ring keyed" "decode overhead of keys" "cpu ring keyed" \
    "cpu overhead lowest" "cpu overhead highest"; do
    grep -q "\"op\":\"$op\"" "$tmp/bench.json" || fail "bench ring --key: no '$op'"
done

grep -q "session ended: the head finished; waiting for a head" "$tmp/w1.log" ||
    fail "worker 1 log: $(cat "$tmp/w1.log")"
[ $fails = 0 ] && echo "all ring CLI checks passed"
exit $((fails > 0))
