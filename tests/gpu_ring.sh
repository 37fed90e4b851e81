#!/bin/bash
# GPU layers in a ring, end to end with real workers on loopback (lavapipe here and in CI): bad
# --gpu-layers values are usage errors (exit 2, one line); a 3-device ring with GPU layers on the
# head and on a worker, in one round and in two, gives the single CPU device's greedy text, and
# the head says for every device what became of its GPU layers, whose file pages are neither
# prefetched nor counted; a worker with --no-gpu or without a Vulkan driver runs them on the
# CPU, saying so; the scheduler's profiles of the head and the workers include their GPUs.
set -u
. "$(dirname "$0")/support/ring_workers.sh" gpu-ring

run() { "$prima" run -m "$model" -p "Once upon a time" -n 16 --temp 0 -t 1 "$@"; }
# expect STATUS LINE ARGS...: run with ARGS exits STATUS and its stderr is LINE
expect() {
    local want=$1 line=$2
    shift 2
    run "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    [ $rc = "$want" ] && [ "$(cat "$tmp/err")" = "$line" ] ||
        fail "$* -> exit $rc: $(cat "$tmp/err") (expected exit $want: $line)"
}
two=127.0.0.1:1,127.0.0.1:2   # never reached: these are refused before any connection
expect 2 "prima: --gpu-layers gives 2 count(s) for the 3 window(s) of -lw (one per device, head first)" \
    --workers $two -lw 1,2,2 --gpu-layers 1,1
expect 2 "prima: --gpu-layers: device 1 has 3 GPU layers in a window of 2 (-lw)" \
    --workers $two -lw 1,2,2 --gpu-layers 0,3,0
expect 2 "prima: --gpu-layers: device 0 (the head) has 2 GPU layers in a window of 1 (-lw)" \
    --workers $two -lw 1,2,2 --gpu-layers 2,0,0
expect 2 "prima: --gpu-layers: expected up to 32 comma-separated layer counts (head first), got '0,-1,0'" \
    --workers $two -lw 1,2,2 --gpu-layers 0,-1,0
expect 2 "prima: --gpu-layers needs -lw: it gives the GPU layers of each device's window (without -lw the scheduler chooses both)" \
    --workers $two --gpu-layers 1,1,1
expect 2 "prima: -ngl is for one device: in a ring give --gpu-layers N,N,... with -lw (one per device, head first), or let the scheduler choose" \
    --workers $two -lw 1,2,2 -ngl 2
"$prima" worker -m "$model" --gpu-mem -1 --insecure 2>"$tmp/err"
[ $? = 2 ] && grep -q "^prima: --gpu-mem must be a non-negative size in GiB, got -1" "$tmp/err" ||
    fail "worker --gpu-mem -1: $(cat "$tmp/err")"

need_gpu "$model"

start_worker "$model" "$tmp/w1.log"; w1=$port
start_worker "$model" "$tmp/w2.log" --no-gpu; w2=$port
VK_ICD_FILENAMES=/nonexistent/icd.json start_worker "$model" "$tmp/w3.log"; w3=$port
run >"$tmp/cpu.txt" 2>"$tmp/err" || fail "one CPU device: $(cat "$tmp/err")"

# one round: the head's layer 0, worker 1's layer 2 and worker 2's layers 3-4 asked for the GPU
run --workers 127.0.0.1:$w1,127.0.0.1:$w2 -lw 1,2,2 --gpu-layers 1,1,2 --stats "$tmp/gpu.stats" \
    >"$tmp/ring.txt" 2>"$tmp/err" || fail "ring with GPU layers: $(cat "$tmp/err")"
cmp -s "$tmp/cpu.txt" "$tmp/ring.txt" || fail "GPU layers in a ring: the text differs: $(cat "$tmp/ring.txt")"
grep -q "^prima: GPU [0-9]*: .*: 1 of 1 layers asked for, .* MiB of VRAM" "$tmp/err" ||
    fail "the head's GPU line: $(cat "$tmp/err")"
grep -q "^prima: device 1 (127.0.0.1:$w1): GPU [0-9]*: .*: 1 of 1 layers asked for" "$tmp/err" ||
    fail "device 1's GPU line: $(cat "$tmp/err")"
grep -q "^prima: device 2 (127.0.0.1:$w2): GPU: turned off on this device; running on the CPU$" \
    "$tmp/err" || fail "device 2 (--no-gpu): $(cat "$tmp/err")"
grep -q "layers 3-4 (2 for the GPU)" "$tmp/w2.log" && grep -q "GPU: turned off" "$tmp/w2.log" ||
    fail "the --no-gpu worker's log: $(cat "$tmp/w2.log")"

# two rounds (5 layers in windows 1,1,1): worker 1 has layers 1 and 4, both asked for its GPU;
# a worker without a Vulkan driver says why and computes on the CPU
run --workers 127.0.0.1:$w1,127.0.0.1:$w3 -lw 1,1,1 --gpu-layers 0,1,1 >"$tmp/ring2.txt" \
    2>"$tmp/err" || fail "two rounds with GPU layers: $(cat "$tmp/err")"
cmp -s "$tmp/cpu.txt" "$tmp/ring2.txt" || fail "two rounds: the text differs: $(cat "$tmp/ring2.txt")"
grep -q "layers 1 4 (2 for the GPU)" "$tmp/w1.log" || fail "worker 1's plan: $(cat "$tmp/w1.log")"
grep -q "^prima: device 1 (127.0.0.1:$w1): GPU [0-9]*: .*: 2 of 2 layers asked for" "$tmp/err" ||
    fail "device 1 in two rounds: $(cat "$tmp/err")"
grep -q "^prima: device 2 (127.0.0.1:$w3): GPU: .*; running on the CPU$" "$tmp/err" ||
    fail "device 2 without a driver: $(cat "$tmp/err")"
grep -q "^prima: GPU" "$tmp/err" && fail "a head without GPU layers opened a GPU: $(cat "$tmp/err")"

# no GPU layers: no GPU line at all (and the PLAN is the one from before GPU layers existed)
run --workers 127.0.0.1:$w1,127.0.0.1:$w2 -lw 1,2,2 --stats "$tmp/cpu.stats" >"$tmp/ring3.txt" \
    2>"$tmp/err" || fail "ring without GPU layers: $(cat "$tmp/err")"
cmp -s "$tmp/cpu.txt" "$tmp/ring3.txt" || fail "ring without GPU layers: the text differs"
grep -q "GPU" "$tmp/err" && fail "a ring without GPU layers mentions a GPU: $(grep GPU "$tmp/err")"
# the file pages of layers held by a GPU are neither prefetched nor counted: the head (its one
# layer on the GPU) touches none, worker 1 those of one layer of two, the --no-gpu worker all
pages() { # stats device
    jq -s --argjson d "$2" 'map(select(.event == "batch" and .device == $d) | .pages) | add' "$1"
}
[ "$(pages "$tmp/gpu.stats" 0)" = 0 ] && [ "$(pages "$tmp/cpu.stats" 0)" -gt 0 ] &&
    [ "$(pages "$tmp/gpu.stats" 1)" -gt 0 ] &&
    [ "$(pages "$tmp/gpu.stats" 1)" -lt "$(pages "$tmp/cpu.stats" 1)" ] &&
    [ "$(pages "$tmp/gpu.stats" 2)" = "$(pages "$tmp/cpu.stats" 2)" ] ||
    fail "pages counted with / without GPU layers: head $(pages "$tmp/gpu.stats" 0) / $(pages "$tmp/cpu.stats" 0), worker 1 $(pages "$tmp/gpu.stats" 1) / $(pages "$tmp/cpu.stats" 1), worker 2 $(pages "$tmp/gpu.stats" 2) / $(pages "$tmp/cpu.stats" 2)"

# the scheduler: the head's and worker 1's profiles have their (software) GPU, the --no-gpu
# worker's none, and the plan says so for each device; whatever it gives lavapipe (nothing,
# unless a slow CPU build makes it help: gpu_cli checks that rule), the text is the CPU's
run --workers 127.0.0.1:$w1,127.0.0.1:$w2 >"$tmp/auto.txt" 2>"$tmp/err" ||
    fail "scheduled ring: $(cat "$tmp/err")"
cmp -s "$tmp/cpu.txt" "$tmp/auto.txt" || fail "scheduled ring: the text differs"
grep -Eq "^  0:.*: [0-9]+ GPU layers?, expected VRAM [0-9.]+ GiB of" "$tmp/err" &&
    grep -Eq "^  1:.*: [0-9]+ GPU layers?, expected VRAM [0-9.]+ GiB of" "$tmp/err" ||
    fail "the plan lacks the GPUs of the head or worker 1: $(cat "$tmp/err")"
grep -q "^  2:.*GPU layer" "$tmp/err" && fail "the --no-gpu worker's profile has a GPU: $(cat "$tmp/err")"

# prima cluster passes --gpu-layers to its head and the GPU options to its workers
"$prima" cluster -m "$model" --devices 3 -lw 1,2,2 --gpu-layers 0,1,1 -p "Once upon a time" -n 16 \
    --temp 0 -t 1 >"$tmp/cluster.txt" 2>"$tmp/err" || fail "cluster: $(cat "$tmp/err")"
cmp -s "$tmp/cpu.txt" "$tmp/cluster.txt" || fail "cluster with GPU layers: the text differs"
grep -q "^prima: device 2 (127.0.0.1:[0-9]*): GPU [0-9]*: .*: 1 of 1 layers asked for" "$tmp/err" ||
    fail "cluster's device 2: $(cat "$tmp/err")"

[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all GPU ring checks passed"
