#!/bin/bash
# Mixed-architecture rings: this machine's (x86-64) prima with the static aarch64 one
# (scripts/cross.sh aarch64) run under qemu-user, on loopback, keyed and encrypted, on the trained
# fixture models: an x86-64 head with an aarch64 worker and an aarch64 head with an x86-64 worker
# give the text of one x86-64 device (greedy: the trained fixtures' tokens are equal whatever
# kernels round them, NEON or AVX2). Profiles under qemu would be slow and mean nothing, so the
# windows are given by hand. Skips, saying why, without qemu-aarch64 or the aarch64 binary
# ($PRIMA_AARCH64_BIN, default build-aarch64/prima, which scripts/test.sh builds first), or
# where qemu cannot run it; fails instead under PRIMA_REQUIRE_CROSS.
set -u
. "$(dirname "$0")/support/ring_workers.sh" ring-mixed
arm=${PRIMA_AARCH64_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build-aarch64/prima}
command -v qemu-aarch64 >/dev/null ||
    missing PRIMA_REQUIRE_CROSS "qemu-aarch64 not found (Debian: qemu-user)"
[ -x "$arm" ] || missing PRIMA_REQUIRE_CROSS "no aarch64 binary at $arm (scripts/cross.sh aarch64)"
# ELF e_machine (bytes 18-19, little-endian) 183: AArch64
[ "$(od -An -tu2 -j18 -N2 "$arm" | tr -d ' ')" = 183 ] ||
    missing PRIMA_REQUIRE_CROSS "$arm is not an aarch64 binary"
# Run through qemu-aarch64 explicitly: binfmt_misc may be absent (or point elsewhere). Its -L
# directory stands in for the files of /etc it holds: an nsswitch.conf naming a module that
# does not exist (the static build must not follow it: util/nss.h), a hosts file with a name
# for loopback, and a resolv.conf whose DNS server answers at once (nothing listens there).
mkdir -p "$tmp/sysroot/etc"
printf 'hosts: no_such_module\npasswd: no_such_module\n' >"$tmp/sysroot/etc/nsswitch.conf"
printf '127.0.0.1 localhost ringpeer\n' >"$tmp/sysroot/etc/hosts"
printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$tmp/sysroot/etc/resolv.conf"
printf '#!/bin/sh\nexec qemu-aarch64 -L "%s" "%s" "$@"\n' "$tmp/sysroot" "$arm" >"$tmp/prima-aarch64"
chmod +x "$tmp/prima-aarch64"
x86=$prima
aarch64=$tmp/prima-aarch64
"$aarch64" --version >/dev/null 2>"$tmp/err" ||
    missing PRIMA_REQUIRE_CROSS "qemu-aarch64 cannot run $arm here: $(head -1 "$tmp/err")"

prompt="Once upon a time"
# case: model windows (head,worker) tokens
for case in "$fixtures/models/stories260K.gguf 2,3 24" \
            "$fixtures/models/tinystories-656k-q8_0.gguf 1,1 24"; do
    read -r m lw n <<<"$case"
    name=$(basename "$m" .gguf)
    "$x86" run -m "$m" -p "$prompt" -n "$n" --temp 0 -t 1 >"$tmp/one.txt" 2>"$tmp/err" ||
        fail "$name: one x86-64 device: $(cat "$tmp/err")"
    [ -s "$tmp/one.txt" ] || fail "$name: one x86-64 device printed nothing"
    for pair in "x86 aarch64" "aarch64 x86"; do
        read -r head worker <<<"$pair"
        prima=${!worker} start_worker "$m" "$tmp/w.log" || continue
        wpid=${pids[-1]}
        # the static head finds its worker by a name of its hosts file
        peer=127.0.0.1
        [ "$head" = aarch64 ] && peer=ringpeer
        "${!head}" run -m "$m" -p "$prompt" -n "$n" --temp 0 -t 1 --verbose \
            --workers $peer:$port -lw "$lw" >"$tmp/ring.txt" 2>"$tmp/err" ||
            fail "$name: $head head, $worker worker: $(tail -3 "$tmp/err")"
        cmp -s "$tmp/one.txt" "$tmp/ring.txt" ||
            fail "$name: $head head, $worker worker: text differs from one x86-64 device: $(cat "$tmp/ring.txt")"
        # the worker computed its window, over an encrypted link
        grep -q "^ring: total device 1 (" "$tmp/err" ||
            fail "$name: $head head: no work counted for the $worker worker"
        grep -q "links keyed and encrypted" "$tmp/w.log" ||
            fail "$name: the $worker worker's links are not keyed: $(head -1 "$tmp/w.log")"
        kill "$wpid" 2>/dev/null
        wait "$wpid" 2>/dev/null
    done
done

# discovery: the static worker answers an x86-64 head's probe, and the static head finds an
# x86-64 worker (a discovery port of this test's own: other rings on this machine use theirs).
# Probes go to the broadcast and multicast addresses of the network interfaces, so this needs
# one besides loopback; the worker listens on all of them.
m=$fixtures/models/stories260K.gguf
"$x86" run -m "$m" -p "$prompt" -n 24 --temp 0 -t 1 >"$tmp/one.txt" 2>/dev/null
dport=$((20000 + $$ % 20000))
pairs="x86-aarch64 aarch64-x86"
if ! ip -4 -o addr show scope global 2>/dev/null | grep -q inet; then
    echo "discovery left out: no network interface but loopback"
    pairs=""
fi
for pair in $pairs; do
    head=${pair%-*} worker=${pair#*-}
    "${!worker}" worker -m "$m" --port 0 -t 1 --advertise --discovery-port $dport \
        >"$tmp/w.log" 2>&1 &
    wpid=$!
    pids+=($wpid)
    for _ in $(seq 100); do
        grep -q "listening on" "$tmp/w.log" && break
        sleep 0.05
    done
    "${!head}" run -m "$m" -p "$prompt" -n 24 --temp 0 -t 1 --discover --discovery-port $dport \
        -lw 2,3 >"$tmp/ring.txt" 2>"$tmp/err" ||
        fail "discovery, $head head, $worker worker: $(tail -3 "$tmp/err")"
    cmp -s "$tmp/one.txt" "$tmp/ring.txt" ||
        fail "discovery, $head head, $worker worker: text differs: $(cat "$tmp/ring.txt")"
    kill "$wpid" 2>/dev/null
    wait "$wpid" 2>/dev/null
done

# a name that neither the hosts file nor DNS knows: one line, exit status 1
"$aarch64" run -m "$m" -p x -n 2 -t 1 --workers no-such-peer.invalid:9 -lw 2,3 \
    >/dev/null 2>"$tmp/err"
rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
    grep -q "cannot resolve 'no-such-peer.invalid'.*numeric address" "$tmp/err" ||
    fail "unresolvable name: status $rc, $(cat "$tmp/err")"

[ $fails = 0 ] && echo "PASS: mixed x86-64 / aarch64 rings give one x86-64 device's text" && exit 0
exit 1
