#!/bin/bash
# emu_ring.sh — a 2-device ring run through the home-cluster emulator (tools/prima-emu: memory
# cgroups, disk throttle, CPU quota, network namespaces with delayed, rate-limited links) produces
# exactly the same greedy text as the same model run on one device without it, and the emulator
# leaves nothing behind. Skips (77) when not root or when the kernel lacks what the emulator needs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
emu=$here/../tools/prima-emu
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

prima=${PRIMA_BIN:?PRIMA_BIN must name the prima binary}
fixtures=${PRIMA_FIXTURES:-${PRIMA_FIXTURES_DEFAULT:-}}
model=$fixtures/models/stories260K.gguf
[[ -r $model ]] || skip "fixture $model not found (set PRIMA_FIXTURES)"
[[ $(id -u) == 0 ]] || skip "the emulator needs root"
for tool in jq ip tc ss nsenter; do command -v "$tool" >/dev/null || skip "$tool is not installed"; done
[[ -e /dev/net/tun ]] || skip "no /dev/net/tun"
unshare -n true 2>/dev/null || skip "cannot create network namespaces"
grep -qw memory /proc/cgroups || skip "no memory cgroup controller"
PRIMA_DELAY_LINK=$(dirname "$prima")/prima-delay-link
export PRIMA_DELAY_LINK
[[ -x $PRIMA_DELAY_LINK ]] || skip "prima-delay-link not built next to $prima"

work=$(mktemp -d "${TMPDIR:-/tmp}/emu_ring.XXXXXX") || fail "cannot create a work directory"
trap 'rm -rf "$work"' EXIT
# The fixture is read-only and may sit on a file system without a block device (no throttle):
# the emulator gets a copy next to the work directory.
cp "$model" "$work/model.gguf"
findmnt -n -o MAJ:MIN --target "$work" | grep -q '^ *0:' && disk='' || disk='"disk_read_mb_s": 200,'

prompt="Once upon a time"
gen=(-n 24 --temp 0 -t 1)

"$prima" run -m "$work/model.gguf" -p "$prompt" "${gen[@]}" > "$work/alone.txt" 2> "$work/alone.err" ||
    fail "prima run on one device failed: $(tail -n 3 "$work/alone.err")"
[[ -s $work/alone.txt ]] || fail "prima run printed nothing"

cat > "$work/cluster.json" <<EOF
{ "name": "ring2",
  "link": {"rate_mbit": 100, "delay_ms": 2},
  "devices": [
    {"name": "head", "memory_mib": 256, $disk "cpus": 1},
    {"name": "w1", "memory_mib": 256, $disk "cpus": 1, "args": ["-t", "1"]}] }
EOF

# Windows 3 and 2 over the model's five layers: both devices compute.
"$emu" run "$work/cluster.json" --prima "$prima" --model "$work/model.gguf" --prompt "$prompt" \
    --port 9611 --out "$work/out" -q -- "${gen[@]}" -lw 3,2 > "$work/ring.txt" &
emu_pid=$!
wait "$emu_pid" || fail "prima-emu run failed: $(tail -n 5 "$work/out/head.err" "$work/out/w1.log" 2>/dev/null)"

cmp -s "$work/alone.txt" "$work/ring.txt" ||
    fail "the ring through the emulator printed different text:
alone: $(head -c 300 "$work/alone.txt")
ring:  $(head -c 300 "$work/ring.txt")"

summary=$work/out/summary.json
(( $(jq '.devices[] | select(.name == "w1") | .net_rx' "$summary") > 0 )) ||
    fail "no traffic reached the worker: the ring did not go through the emulated network"

# The head may run prima bench serve instead (its server and clients in the head's device).
"$emu" run "$work/cluster.json" --prima "$prima" --model "$work/model.gguf" --port 9611 \
    --out "$work/out-serve" -q --head-command "bench serve" -- -t 1 -lw 3,2 --clients 1 --requests 1 \
    --tokens 8 --json > "$work/serve.json" &
emu_pid=$!
wait "$emu_pid" || fail "prima-emu run --head-command 'bench serve' failed: $(tail -n 5 "$work/out-serve/head.err" 2>/dev/null)"
[[ $(jq -s 'map(select(.op == "serve aggregate 1" and .value > 0)) | length' "$work/serve.json") == 1 ]] ||
    fail "bench serve through the emulator: $(cat "$work/serve.json")"

# A device's profile records its CPU quota and the quota's period (the cost model lets a device
# whose work fits them compute at full speed): one CPU for two threads, the default period.
"$emu" shell "$work/cluster.json" --model "$work/model.gguf" --out "$work/out-profile" -q -- \
    "$emu" in w1 -- "$prima" profile -m "$work/model.gguf" -t 2 --json > "$work/profile.json" &
emu_pid=$!
wait "$emu_pid" || fail "prima profile in an emulated device failed"
[[ $(jq -c '[.cpu.quota, .cpu.quota_period]' "$work/profile.json") == "[1,0.1]" ]] ||
    fail "profile under a quota of one CPU: $(jq -c .cpu "$work/profile.json")"

left=$( { ip netns list | grep -E "^prima-emu-$emu_pid-"; ip -o link show | grep -E ": pe${emu_pid}(br|h[0-9]+)[:@]";
          find /sys/fs/cgroup -maxdepth 2 -name "prima-emu-$emu_pid"; } 2>/dev/null)
[[ -z $left ]] || fail "the emulator left behind: $left"
echo "ring through the emulator matches the single device: $(wc -c < "$work/ring.txt") bytes of text"
