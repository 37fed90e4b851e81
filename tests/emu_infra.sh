#!/bin/bash
# emu_infra.sh — the plumbing of the home-cluster emulator (tools/prima-emu), without prima:
# link latency, disk read throttle, memory limit, CPU quota, the measurements in summary.json, and
# that nothing is left behind (namespaces, links, cgroups), twice in a row.
#
# Only lower bounds on time are checked (a throttle or a delay can make things slower, never
# faster), so a busy machine cannot make this test fail. Skips (77) when not root or when the
# kernel lacks what the emulator needs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
emu=$here/../tools/prima-emu
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[[ $(id -u) == 0 ]] || skip "the emulator needs root"
for tool in jq ip tc ss dd; do command -v "$tool" >/dev/null || skip "$tool is not installed"; done
[[ -e /dev/net/tun ]] || skip "no /dev/net/tun"
unshare -n true 2>/dev/null || skip "cannot create network namespaces"
grep -qw memory /proc/cgroups || skip "no memory cgroup controller"
link=$(dirname "${PRIMA_BIN:-/nonexistent}")/prima-delay-link
[[ -x $link ]] || skip "prima-delay-link not built next to PRIMA_BIN"
export PRIMA_DELAY_LINK=$link

# On the disk the test runs from (the throttle needs a block device; /tmp may be a tmpfs).
work=$(mktemp -d "$PWD/emu_infra.XXXXXX") || fail "cannot create a work directory"
trap 'rm -rf "$work"' EXIT
findmnt -n -o MAJ:MIN --target "$work" | grep -q '^ *0:' && skip "the build directory is not on a block device"
dd if=/dev/urandom of="$work/data" bs=1M count=48 status=none || fail "cannot write test data"

# Device a: 32 MiB, 24 MB/s disk, a quarter of a core, 5 ms link. Device b: unlimited, 5 ms link.
cat > "$work/cluster.json" <<'EOF'
{ "name": "infra",
  "link": {"delay_ms": 5},
  "devices": [
    {"name": "a", "memory_mib": 32, "disk_read_mb_s": 24, "cpus": 0.25},
    {"name": "b", "memory_mib": 256, "link": {"rate_mbit": 100, "delay_ms": 5}}],
  "model": "data" }
EOF

# Runs on the host inside `prima-emu shell`; records elapsed times for the checks below.
cat > "$work/inside.sh" <<EOF
emu=$emu
work=$work
EOF
cat >> "$work/inside.sh" <<'EOF'
t0=$EPOCHREALTIME
"$emu" in a -- dd if="$work/data" of=/dev/null bs=1M status=none || exit 1
t1=$EPOCHREALTIME
# A refused connection costs one round trip: a -> b -> a crosses four 5 ms link delays.
for i in 1 2 3 4 5 6 7 8 9 10; do
    "$emu" in a -- bash -c 'exec 3<>/dev/tcp/10.77.0.2/9' 2>/dev/null && exit 1
done
t2=$EPOCHREALTIME
"$emu" in a -- timeout 1 sh -c 'while :; do :; done'
echo "$t0 $t1 $t2" > "$work/times"
EOF

run_emulator() {   # -> pid of the emulator in $emu_pid, status in $emu_status
    "$emu" shell "$work/cluster.json" --out "$work/out" -q -- bash "$work/inside.sh" &
    emu_pid=$!
    wait "$emu_pid"
    emu_status=$?
}

leftovers() {   # PID -> anything of that emulator still present
    ip netns list | grep -E "^prima-emu-$1-" || true
    ip -o link show | grep -E ": pe$1(br|h[0-9]+)[:@]" || true
    find /sys/fs/cgroup -maxdepth 2 -name "prima-emu-$1" 2>/dev/null || true
}

for round in 1 2; do
    run_emulator
    ((emu_status == 0)) || fail "round $round: prima-emu shell exited $emu_status"
    [[ -z $(leftovers "$emu_pid") ]] || fail "round $round: left behind: $(leftovers "$emu_pid" | tr '\n' ' ')"
done

read -r t0 t1 t2 < "$work/times" || fail "the commands inside the emulator did not run"
summary=$work/out/summary.json
jq -e . "$summary" >/dev/null || fail "summary.json is not JSON"
dev() { jq -r --arg d "$1" --arg k "$2" '.devices[] | select(.name == $d) | .[$k]' "$summary"; }

# 48 MiB at 24 MB/s takes at least 2.1 s (less 10% for timer granularity).
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a >= 0.9 * 48 * 1048576 / 24e6) }' ||
    fail "disk throttle: 48 MiB read in $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s at 24 MB/s"
# Ten round trips of at least 20 ms each.
awk -v a="$t1" -v b="$t2" 'BEGIN { exit !(b - a >= 0.2) }' ||
    fail "link delay: 10 round trips took $(awk -v a="$t1" -v b="$t2" 'BEGIN { print b - a }') s, expected >= 0.2"
(( $(dev a disk_read) >= 48 * 1048576 )) || fail "device a read $(dev a disk_read) bytes from disk, expected the whole 48 MiB"
(( $(dev a peak_total) <= 32 * 1048576 )) || fail "device a peaked at $(dev a peak_total) bytes over its 32 MiB budget"
(( $(dev a peak_file) > 0 )) || fail "device a shows no page cache although it read a file"
(( $(dev a net_tx) > 0 && $(dev b net_rx) > 0 )) || fail "no traffic counted from a to b"
# One second of busy loop under a quarter-core quota (plus the small commands around it).
awk -v c="$(dev a cpu_s)" 'BEGIN { exit !(c < 0.6) }' || fail "CPU quota: device a used $(dev a cpu_s) s"
[[ $(jq -r .status "$summary") == 0 && $(dev a role) == head && $(dev b role) == worker ]] ||
    fail "summary.json lacks the run's status or the devices' roles"
echo "emulator plumbing OK: disk $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s for 48 MiB," \
    "10 refused connections in $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.3f", b - a }') s, cpu $(dev a cpu_s) s"
