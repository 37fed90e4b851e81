# serve.sh — sourced after ring_workers.sh by the tests of prima serve: start a server on a free
# port (killed with the workers however the test ends), its memory, a burst of clients.

# Start `prima serve` with the options given, its log in the first argument; sets $sport (its
# port) and $spid. Returns 1 (counted as a failure) when it does not come up.
start_server() { # log options...
    local log=$1
    shift
    "$prima" serve --port 0 -t 1 "$@" >"$log" 2>&1 &
    spid=$!
    pids+=($spid)
    sport=
    for _ in $(seq 400); do
        sport=$(sed -n 's|.*serving .* on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$log")
        [ -n "$sport" ] && return 0
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.05
    done
    fail "server did not start: $(cat "$log")"
    return 1
}

# Stop it with SIGTERM: it must exit 0 (under ASan: without leaks).
stop_server() { # log
    kill -TERM "$spid"
    wait "$spid"
    local rc=$?
    [ "$rc" = 0 ] || fail "server exit status $rc after SIGTERM: $(tail -5 "$1")"
}

# The server's resident memory (kB).
rss() { awk '/^VmRSS/ {print $2}' "/proc/$spid/status"; }

# 64 concurrent clients, two completions each, one after the other: request n (3..130) is the
# body `req n` prints (the test defines req); its answer goes to DIR/n.
burst() { # directory
    mkdir -p "$1"
    local cpids=()
    for c in $(seq 64); do
        (for k in 1 2; do
            n=$((c * 2 + k))
            curl -sS --max-time 120 -H 'Content-Type: application/json' --data-binary "$(req $n)" \
                "http://127.0.0.1:$sport/v1/completions" >"$1/$n" || echo "curl failed" >"$1/$n"
        done) &
        cpids+=($!)
    done
    wait "${cpids[@]}"
}
