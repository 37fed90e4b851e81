#!/bin/bash
# ring_prefetch.sh — prefetching and release on a memory-starved device (the numbers in
# docs/ring.md). A 2-device ring on this machine: the head computes 7 of the 16 layers of a
# generated 413 MB model per round, the worker 1 (k = 2: it owns 2 layers, 52 MB), held by a
# cgroup-v1 memory limit of 40 MB that counts its page cache. The worker gets its own copy of
# the file, so it cannot use pages the head's readahead cached. For each setting: decode ms per
# token and, on the worker, major faults, disk MiB and resident % per token. The release
# policy applies to every device: "always" also makes the head (whose windows fit) drop and
# reload its 14 layers every token, "auto" releases on the worker only. The last row is the
# same ring without the memory limit.
# Needs root (the cgroup) and ~1 GB in $TMPDIR; removes the cgroup and the models on exit.
# usage: bench/ring_prefetch.sh [PRIMA_BINARY]
set -eu
prima=${1:-build/prima}
cg=/sys/fs/cgroup/memory/prima-ring-prefetch-$$
dir=$(mktemp -d "${TMPDIR:-/tmp}/prima-ring-prefetch.XXXXXX")
cleanup() {
    [ -d "$cg" ] && rmdir "$cg" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
"$prima" mkmodel -o "$dir/head.gguf" --layers 16 --embd 2048 --ff 5632 --heads 16 --kv-heads 4 \
    --type q4_k_m >/dev/null
cp "$dir/head.gguf" "$dir/worker.gguf"
mkdir "$cg"
echo $((40 << 20)) >"$cg/memory.limit_in_bytes"
evict() { # drop both copies from the page cache: every run starts cold
    python3 -c 'import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' \
        "$dir/head.gguf" "$dir/worker.gguf"
}
settings=("--no-prefetch --release never" "--no-prefetch --release auto"
    "--prefetch-method touch --release never" "--prefetch-method touch --release auto"
    "--prefetch-method madvise --release never" "--prefetch-method madvise --release auto"
    "--prefetch-method fadvise --release never" "--prefetch-method fadvise --release auto"
    "--prefetch-method touch --release always" "no memory limit")
passes=${PASSES:-3}
# One line per pass and setting: ms/token faults disk resident. The passes interleave the
# settings, so a burst of load elsewhere on the machine does not land on one setting only.
for pass in $(seq "$passes"); do
    for i in "${!settings[@]}"; do
        setting=${settings[i]}
        evict
        limit=(--cgroup "$cg")
        args=($setting)
        if [ "$setting" = "no memory limit" ]; then
            limit=()
            args=()
        fi
        out=$("$prima" bench ring -m "$dir/head.gguf" --worker-model "$dir/worker.gguf" \
            --devices 2 -lw 7,1 -k 2 -t 1 --decode 8 --reps 3 --no-single "${limit[@]}" \
            "${args[@]}" --json)
        val() { echo "$out" | grep "\"op\":\"$1\"" | grep "\"source\":\"$2\"" |
            sed 's/.*"value":\([^,]*\),.*/\1/'; }
        echo "$i $(val "decode ring" "2 devices") $(val "major faults" "device 1")" \
            "$(val "disk read" "device 1") $(val "resident at start" "device 1")" >>"$dir/runs"
    done
done
printf "%-44s %9s %9s %9s %9s  (median of %d passes)\n" setting "ms/token" "faults" "disk MiB" \
    resident "$passes"
for i in "${!settings[@]}"; do
    median() { awk -v i="$i" -v c="$1" '$1 == i { print $c }' "$dir/runs" | sort -g |
        awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    printf "%-44s %9.1f %9.1f %9.1f %8.1f%%\n" "${settings[i]}" "$(median 2)" "$(median 3)" \
        "$(median 4)" "$(median 5)"
done
