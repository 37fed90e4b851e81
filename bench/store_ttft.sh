#!/bin/bash
# store_ttft.sh PRIMA MODEL [LW] [REPS] — time to the first token of a 3-device loopback ring
# whose two workers start with empty stores (prima worker --store), against the same ring once
# the stores hold their shares, and what copying the whole file to each worker would cost at
# the rate the head sent the shares (both workers receive at once). One line per repetition;
# wall and CPU seconds of the head.
set -eu
prima=$1 model=$2 lw=${3:-4,4,4} reps=${4:-3}
tmp=$(mktemp -d /tmp/prima-store-ttft.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
"$prima" keygen -o "$tmp/k" 2>/dev/null
export PRIMA_KEY_FILE=$tmp/k
size=$(stat -c %s "$model")
start() { # store log
    "$prima" worker --store "$1" --host 127.0.0.1 --port 0 -t 1 >"$2" 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do
        port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' "$2" 2>/dev/null || true)
        [ -n "$port" ] && return 0
        sleep 0.05
    done
    echo "worker did not start: $(cat "$2")" >&2
    exit 1
}
first() { # workers log: one token; prints wall and CPU (user+sys) seconds of the head
    /usr/bin/time -f "%e %U %S" -o "$tmp/time" "$prima" run -m "$model" -p "Hello" -n 1 \
        --temp 0 -t 1 --workers "$1" -lw "$lw" >/dev/null 2>"$2"
    awk '{ printf "%.2f s wall, %.2f s CPU", $1, $2 + $3 }' "$tmp/time"
}
echo "model $model: $size bytes; -lw $lw; load $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq "$reps"); do
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null || true
    pids=()
    rm -rf "$tmp/s1" "$tmp/s2"
    start "$tmp/s1" "$tmp/w1.log"; a=$port
    start "$tmp/s2" "$tmp/w2.log"; b=$port
    cold=$(first 127.0.0.1:$a,127.0.0.1:$b "$tmp/cold.err") || true
    grep -q "^prima: stopped" "$tmp/cold.err" || { echo "the run failed: $(cat "$tmp/cold.err")" >&2; exit 1; }
    warm=$(first 127.0.0.1:$a,127.0.0.1:$b "$tmp/warm.err")
    # MiB sent per device and the rate of the whole transfer (both devices at once)
    sent=$(sed -n 's/^prima: device [0-9]: received its share of the model, \([0-9.]*\) MiB.*/\1/p' \
        "$tmp/cold.err" | awk '{ s += $1 } END { print s + 0 }')
    # the workers receive at once: the transfer took the longer of their receiving times
    secs=$(for w in "$tmp/w1.log" "$tmp/w2.log"; do
               sed -n 's/.*store: received .* in \([0-9.]*\) s .*/\1/p' "$w" |
                   awk '{ s += $1 } END { print s + 0 }'
           done | sort -g | tail -1)
    echo "rep $rep: empty stores: $cold; full stores: $warm; sent $sent MiB of" \
         "$(awk -v s="$size" 'BEGIN { printf "%.1f", 2 * s / 1048576 }') MiB a full copy to" \
         "each worker needs; transfer $secs s, so the full copies at that rate:" \
         "$(awk -v s="$size" -v m="$sent" -v t="$secs" 'BEGIN { if (m > 0) printf "%.2f", 2 * s / 1048576 / m * t; else print "-" }') s;" \
         "load $(cut -d' ' -f1 /proc/loadavg)"
done
