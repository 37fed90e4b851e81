#!/bin/bash
# plan_cli.sh — prima profile and prima plan end to end: help, the error contract (one line,
# exit 1 for bad inputs, 2 for bad usage), a measured profile planned on, hand-written profiles
# whose plan is known, deterministic output, and an infeasible set-up reported as such.
set -uo pipefail
prima=${PRIMA_BIN:?}
. "$(dirname "$0")/support/needs.sh"
need_fixtures
model=$fixtures/models/synth-spm512-l4-e256-q4_k_m.gguf
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect CODE CMD...: the exit status, and one line on stderr when it is not 0
expect() {
    local want=$1; shift
    "$@" >"$work/out" 2>"$work/err"
    local got=$?
    [[ $got == "$want" ]] || fail "'$*' exited $got, want $want: $(cat "$work/err")"
    if [[ $want != 0 ]]; then
        [[ $(wc -l <"$work/err") == 1 ]] || fail "'$*': stderr is not one line: $(cat "$work/err")"
    fi
}

expect 0 "$prima" plan --help
for opt in --device -k --layer-window --gpu-layers --ctx-size --batch-size --reserve --net --fixed-ring --allow-disk --no-prefetch --json; do
    grep -q -- "$opt" "$work/out" || fail "plan --help does not mention $opt"
done
expect 0 "$prima" profile --help
for opt in -m -t --json; do grep -q -- "$opt" "$work/out" || fail "profile --help lacks $opt"; done

expect 2 "$prima" plan
expect 2 "$prima" plan -m "$model"
expect 2 "$prima" plan -m "$model" --device x.json --bogus
expect 2 "$prima" plan -m "$model" --device x.json --reserve 2
expect 2 "$prima" plan -m "$model" --device x.json --net 5
expect 2 "$prima" profile -t 0
expect 1 "$prima" plan -m "$model" --device "$work/missing.json"
grep -q "missing.json" "$work/err" || fail "missing profile not named: $(cat "$work/err")"
echo '{"version": 1, "name": "x"' >"$work/broken.json"
expect 1 "$prima" plan -m "$model" --device "$work/broken.json"
grep -q "not valid JSON" "$work/err" || fail "broken JSON: $(cat "$work/err")"
expect 1 "$prima" plan -m "$work/missing.gguf" --device "$work/broken.json"
expect 1 "$prima" profile -m "$work/missing.gguf"

# A measured profile plans.
expect 0 "$prima" profile -m "$model" -t 1 --json
cp "$work/out" "$work/measured.json"
expect 0 "$prima" plan -m "$model" --device "$work/measured.json" --device "$work/measured.json"
grep -q "^plan: 4 layers on 2 devices" "$work/out" || fail "plan output: $(cat "$work/out")"

# The disk is measured as a streaming device reads it: evicted, then faulted in through a
# mapping ("mmap"); a file the kernel keeps in memory (tmpfs) gives no disk at all ("cached", 0),
# though tmpfs takes O_DIRECT on recent kernels (it read at 17 GB/s that way).
disk_method() {   # FILE -> the measured profile's disk method and sequential rate
    expect 0 "$prima" profile -m "$1" -t 1 --json
    jq -r '.disk.method + " " + (.disk.sequential | tostring)' "$work/out"
}
cp "$model" "$work/copy.gguf"
want=mmap
[[ $(stat -f -c %T "$work") == tmpfs ]] && want=cached
got=$(disk_method "$work/copy.gguf")
[[ $got == "$want "* ]] || fail "disk of a file just copied to $work: $got, want $want"
if [[ -d /dev/shm && -w /dev/shm ]] && shm=$(mktemp /dev/shm/plan_cli.XXXXXX); then
    cp "$model" "$shm"
    got=$(disk_method "$shm")
    rm -f "$shm"
    [[ $got == "cached 0" ]] || fail "disk of a file on tmpfs: $got, want cached 0"
fi

# Hand-written devices: "big" holds everything and is fast; "small" holds nothing but its
# buffers and is slow. The plan: every layer on big in one round, small left out.
profile() {   # NAME AVAILABLE_BYTES RATE
    cat <<EOF
{"version": 1, "name": "$1", "os": "linux", "noise": 0,
 "cpu": {"cores": 4, "threads": 4, "quota": 0, "dispatch": 0.00001, "simd": "avx2",
         "types": {"Q4_K": {"matvec": $3, "matmul": $3}, "Q6_K": {"matvec": $3, "matmul": $3}}},
 "memory": {"total": 8000000000, "available": $2, "reclaimable": 0, "swap_total": 0,
            "swap_free": 0, "cgroup_limit": 0, "cgroup_usage": 0, "cgroup_reclaimable": 0,
            "bandwidth": 10000000000},
 "disk": {"sequential": 1000000000, "random": 100000000, "method": "o_direct"},
 "gpu": {"present": false, "unified": false, "name": "", "vram_total": 0, "vram_free": 0,
         "bandwidth": 0, "types": {}},
 "network": {"rtt": 0.002, "throughput": 12500000}}
EOF
}
profile big 4000000000 1e10 >"$work/big.json"
profile small 60000000 1e8 >"$work/small.json"
expect 0 "$prima" plan -m "$model" --device "$work/big.json" --device "$work/small.json" --json
grep -q '"k":	1' "$work/out" && grep -q '"window":	4' "$work/out" && grep -q '"window":	0' "$work/out" \
    || fail "big/small plan: $(cat "$work/out")"
grep -q '"left_out":' "$work/out" || fail "small's absence is not explained"
# ... in words: what it would cost, and where the time would go (the plan that makes small
# compute gives it a layer, not a window the last round never reaches)
expect 0 "$prima" plan -m "$model" --device "$work/big.json" --device "$work/small.json"
grep -qxF "  small left out: giving it layers would slow every token: the best plan that does predicts 11.29 ms per token, 9.96 ms more (mostly compute)" "$work/out" ||
    fail "small left out: $(grep 'left out' "$work/out")"
profile big2 4000000000 1e10 >"$work/big2.json"
expect 0 "$prima" plan -m "$model" --device "$work/big.json" --device "$work/big2.json"
grep -qxF "  big2 left out: giving it layers would slow every token: the best plan that does predicts 3.50 ms per token, 2.17 ms more (mostly network)" "$work/out" ||
    fail "big2 left out: $(grep 'left out' "$work/out")"
# the same input gives the same plan, byte for byte (the solve time aside)
"$prima" plan -m "$model" --device "$work/big.json" --device "$work/small.json" | grep -v "solved in" >"$work/p1"
"$prima" plan -m "$model" --device "$work/big.json" --device "$work/small.json" | grep -v "solved in" >"$work/p2"
cmp -s "$work/p1" "$work/p2" || fail "two runs gave different plans"
# the solver's time limit: with no time at all, no plan, and an error naming the limit
expect 1 "$prima" plan -m "$model" --device "$work/big.json" --device "$work/small.json" --time-limit 1e-9
[[ $(cat "$work/err") == "prima: plan: no plan found within the solver's time limit of 1e-09 s" ]] ||
    fail "time limit: $(cat "$work/err")"
expect 2 "$prima" plan -m "$model" --device "$work/big.json" --time-limit 0
# forcing two rounds is obeyed
expect 0 "$prima" plan -m "$model" --device "$work/big.json" --device "$work/small.json" -k 2 --json
grep -q '"k":	2' "$work/out" || fail "-k 2 ignored: $(cat "$work/out")"

# Windows given with -lw are predicted, not searched: Halda's own plan predicts as Halda said;
# the plan that gives small a layer as its explanation above said; windows that do not fit
# the devices' count, the model or -k are one-line errors.
two=(-m "$model" --device "$work/big.json" --device "$work/small.json")
expect 0 "$prima" plan "${two[@]}" --json
halda=$(jq -c '[.tpot, [.devices[].window]]' "$work/out")
expect 0 "$prima" plan "${two[@]}" --json -lw "$(jq -r '[.devices[].window | tostring] | join(",")' "$work/out")"
[[ $(jq -c '[.tpot, [.devices[].window]]' "$work/out") == "$halda" && $(jq .integer_programs "$work/out") == 0 ]] ||
    fail "-lw of Halda's plan: $(jq -c '[.tpot, [.devices[].window], .integer_programs]' "$work/out"), Halda $halda"
expect 0 "$prima" plan "${two[@]}" -lw 3,1
grep -q "^plan: 4 layers on 2 devices, k = 1 round, predicted 11.3 ms per token" "$work/out" &&
    grep -qxF "  the plan as given: not searched" "$work/out" || fail "-lw 3,1: $(cat "$work/out")"
expect 2 "$prima" plan "${two[@]}" -lw 4
expect 2 "$prima" plan "${two[@]}" -lw 4,x
expect 2 "$prima" plan "${two[@]}" --gpu-layers 0,0
expect 1 "$prima" plan "${two[@]}" -lw 5,0
grep -q "^prima: plan: -lw 5,0: device 0 (the head) has a window of 5 layers" "$work/err" || fail "-lw 5,0: $(cat "$work/err")"
expect 1 "$prima" plan "${two[@]}" -lw 1,1 -k 3
grep -q "k = 3 does not match" "$work/err" || fail "-lw 1,1 -k 3: $(cat "$work/err")"

# A device with room for its buffers and two streamed layers, next to none resident (a budget
# is filled to the byte: 6 % of a layer): it reads all four layers per token from its 1 GB/s
# disk; the cost model counts two of them read ahead when the ring prefetches (its room), so
# without prefetching the disk term counts all four: twice, and a little more, as the room is
# two of its largest layers (layers 2 and 3 carry Q6_K matrices: 2.17 times).
profile tight 12200000 1e10 >"$work/tight.json"
disk_term() {
    expect 0 "$prima" plan -m "$model" --device "$work/tight.json" --json "$@"
    jq -r '[.devices[0].resident_layers, .devices[0].layers, .terms.disk * 1e6 | round] | @tsv' "$work/out"
}
with=$(disk_term) without=$(disk_term --no-prefetch)
read -r res layers us_with <<<"$with"
read -r _ _ us_without <<<"$without"
awk -v r="$res" 'BEGIN { exit !(r >= 0 && r < 0.1) }' && [[ $layers == 4 && $us_with -gt 0 ]] ||
    fail "tight device: $with"
(( us_without > 21 * us_with / 10 && us_without < 22 * us_with / 10 )) ||
    fail "disk term with prefetch $us_with us, without $us_without us: want 2.17 times"

# Nothing fits and nothing may read from disk: reported as infeasible.
profile none 1000000 1e10 | sed 's/"sequential": 1000000000/"sequential": 0/' >"$work/none.json"
expect 1 "$prima" plan -m "$model" --device "$work/none.json"
grep -q "no plan" "$work/err" || fail "infeasible: $(cat "$work/err")"
expect 1 "$prima" plan -m "$model" --device "$work/none.json" -lw 4
grep -q "^prima: plan: -lw: device none: " "$work/err" || fail "infeasible -lw: $(cat "$work/err")"
echo "plan_cli: ok"
