# ring_workers.sh — sourced (with a name for the scratch directory) by the shell tests that run
# real workers on loopback: the fixtures and binary, a scratch directory, failure counting, a
# cluster key every device uses ($PRIMA_KEY_FILE, so every link is keyed and encrypted), and
# workers that are killed, with the directory removed, however the test ends.
. "$(dirname "${BASH_SOURCE[0]}")/needs.sh"
need_fixtures
prima=${PRIMA_BIN:?PRIMA_BIN not set}
model=$fixtures/models/stories260K.gguf
tmp=$(mktemp -d "/tmp/prima-$1.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
"$prima" keygen -o "$tmp/cluster.key" 2>/dev/null || { echo "FAIL: keygen"; exit 1; }
export PRIMA_KEY_FILE=$tmp/cluster.key
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Start a worker on a free port (extra arguments are the worker's); sets $port and appends its
# pid to pids. Returns 1 (counted as a failure) when it does not come up.
start_worker() { # model log [args...]
    : >"$2"   # emptied before the start: a log reused must not show the last worker's port
    "$prima" worker -m "$1" --host 127.0.0.1 --port 0 -t 1 "${@:3}" >"$2" 2>&1 &
    pids+=($!)
    await_port "$2"
}

# The same for a worker without the model, keeping a store in dir (prima worker --store).
start_store_worker() { # dir log [args...]
    : >"$2"
    "$prima" worker --store "$1" --host 127.0.0.1 --port 0 -t 1 "${@:3}" >"$2" 2>&1 &
    pids+=($!)
    await_port "$2"
}

await_port() { # log
    port=
    for _ in $(seq 100); do
        port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' "$1" 2>/dev/null)
        [ -n "$port" ] && return 0
        sleep 0.05
    done
    fail "worker did not start: $(cat "$1")"
    return 1
}
