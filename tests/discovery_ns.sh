#!/bin/bash
# Discovery between network namespaces on a bridge (all created here, in a namespace of their
# own, and removed however the test ends): a head finds, with no addresses typed, the two
# workers holding its model and key (over IPv4 broadcast and multicast, and over IPv6
# link-local multicast alone), reports the one that advertised another model, never hears from
# the one with another key, ignores a forger's beacons, and its ring answers as one device does.
# Skips (77) when not root or without network namespaces.
set -u
skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
unshare -n true 2>/dev/null || skip "cannot create network namespaces"
. "$(dirname "$0")/support/ring_workers.sh" discovery-ns
forger=$(dirname "$prima")/test_discovery
[ -x "$forger" ] || skip "test_discovery not built next to PRIMA_BIN"

p=pd$$
namespaces=()
cleanup_ns() {
    for ns in "${namespaces[@]}"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    cleanup
}
trap cleanup_ns EXIT
in_ns() { ip netns exec "$p-$1" "${@:2}"; }
ip netns add "$p-sw" || skip "cannot add a network namespace"
namespaces+=("$p-sw")
in_ns sw ip link add br0 type bridge
in_ns sw ip link set br0 up
# Device X: namespace $p-X, veth eth0 there, its peer on the bridge, 10.77.0.N/24 and an IPv6
# link-local address (no duplicate detection: usable at once).
n=10
for dev in h a b c d f v; do
    ns=$p-$dev
    ip netns add "$ns" && namespaces+=("$ns") || { fail "namespace $ns"; exit 1; }
    in_ns "$dev" sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.accept_dad=0
    ip link add "$p$dev" type veth peer name "$p${dev}s" || { fail "veth"; exit 1; }
    ip link set "$p$dev" netns "$ns" name eth0
    ip link set "$p${dev}s" netns "$p-sw"
    in_ns sw ip link set "$p${dev}s" master br0 up
    n=$((n + 1))
    [ $dev = v ] || in_ns "$dev" ip addr add "10.77.0.$n/24" dev eth0
    in_ns "$dev" ip link set eth0 up
    in_ns "$dev" ip link set lo up
done

echo "cluster key one" >"$tmp/key"
echo "cluster key two" >"$tmp/key2"
other=$fixtures/models/tinystories-656k-q8_0.gguf
wait_log() { for _ in $(seq 100); do grep -q "$2" "$1" && return 0; sleep 0.05; done; fail "$1: $(cat "$1")"; }
advertise() { # namespace model key
    in_ns "$1" "$prima" worker -m "$2" --secret-file "$3" --advertise -t 1 >"$tmp/$1.log" 2>&1 &
    pids+=($!)
    wait_log "$tmp/$1.log" "answering discovery probes"
}
advertise a "$model" "$tmp/key"
advertise b "$model" "$tmp/key"
advertise c "$other" "$tmp/key"
advertise d "$model" "$tmp/key2"
in_ns f "$forger" --forge &
pids+=($!)

"$prima" run -m "$model" -p "Once upon a time" -n 16 --temp 0 -t 1 >"$tmp/one.txt" 2>/dev/null
in_ns h "$prima" run -m "$model" -p "Once upon a time" -n 16 --temp 0 -t 1 --discover \
    --secret-file "$tmp/key" -lw 1,2,2 >"$tmp/ring.txt" 2>"$tmp/err" ||
    fail "head with --discover: $(cat "$tmp/err")"
line=$(grep "^prima: discovery:" "$tmp/err")
echo "$line"
want="^prima: discovery: found 2 workers with this model (10.77.0.12:9500, 10.77.0.13:9500); "
want+="1 advertised another model; ignored [0-9]* beacons that did not prove the key$"
grep -q "$want" <<<"$line" || fail "discovery line: '$line'"
cmp -s "$tmp/one.txt" "$tmp/ring.txt" || fail "the discovered ring's text differs from one device"
# (each worker logs the end of its session on its own, possibly after the head has exited)
for log in "$tmp/a.log" "$tmp/b.log"; do wait_log "$log" "session ended: the head finished"; done
grep -q "serving" "$tmp/c.log" "$tmp/d.log" && fail "a worker of another model or key served"

# IPv6 only: a head whose namespace has no IPv4 address finds them by link-local multicast.
in_ns v "$prima" run -m "$model" -p "Once upon a time" -n 16 --temp 0 -t 1 --discover \
    --secret-file "$tmp/key" -lw 1,2,2 >"$tmp/ring6.txt" 2>"$tmp/err6"
line6=$(grep "^prima: discovery:" "$tmp/err6")
echo "$line6"
grep -q "found 2 workers with this model (\[fe80::[0-9a-f:]*%eth0\]:9500, \[fe80::" <<<"$line6" ||
    fail "IPv6 discovery: '$line6' $(tail -n 2 "$tmp/err6")"

# another key: the head finds nobody of its cluster (the forger's beacons do not count)
in_ns h "$prima" run -m "$model" -p "x" -n 1 -t 1 --discover --secret-file "$tmp/key2" \
    >/dev/null 2>"$tmp/err2"
grep -q "^prima: discovery: found 1 worker with this model (10.77.0.15:9500)" "$tmp/err2" ||
    fail "the other key's cluster: $(grep discovery "$tmp/err2")"
# no key: discovery is refused with one line
in_ns h env -u PRIMA_KEY_FILE "$prima" run -m "$model" -p "x" -n 1 --discover >/dev/null 2>"$tmp/err3"
[ $? = 1 ] && grep -q "^prima: discovery needs the cluster key" "$tmp/err3" ||
    fail "discovery without a key: $(cat "$tmp/err3")"

cleanup_ns
trap - EXIT
left=$(ip netns list | grep -c "^$p-")
[ "$left" = 0 ] || { echo "FAIL: $left namespaces left behind"; exit 1; }
[ $fails = 0 ] && echo "all discovery checks passed"
exit $((fails > 0))
