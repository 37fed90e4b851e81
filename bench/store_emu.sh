#!/bin/bash
# store_emu.sh [PRIMA [MODEL [LW [REPS]]]] — the first token on the emulated paper-4dev cluster
# (tools/prima-emu: 300 Mbit/s Wi-Fi-like links, CPU quotas, memory budgets) when the three
# workers keep stores (prima worker --store) that start empty, then full; and the time copying
# the whole file to every worker would take through the head's link at the same rate. Needs
# root and what tools/prima-emu needs (its --help). The model is copied to a temporary
# directory; every store is in it too.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prima=$(realpath "${1:-build/prima}")
model=$(realpath "${2:?a model}")
lw=${3:-3,3,3,3}
reps=${4:-2}
export PRIMA_DELAY_LINK=${PRIMA_DELAY_LINK:-$(dirname "$prima")/prima-delay-link}
dir=$(mktemp -d "${TMPDIR:-/tmp}/prima-store-emu.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cp "$model" "$dir/m.gguf"
"$prima" keygen -o "$dir/k" 2>/dev/null
cat >"$dir/inside.sh" <<EOF
#!/bin/bash
# inside prima-emu shell: the workers with their stores, then two heads
set -u
emu=$here/../tools/prima-emu
pids=()
for i in 1 2 3; do
    "\$emu" in \$i -- "$prima" worker --store "$dir/s\$i" --host 10.77.0.\$((i + 1)) --port 9741 \
        --key "$dir/k" -t 1 >"$dir/w\$i.log" 2>&1 &
    pids+=(\$!)
done
sleep 1
for run in cold warm; do
    start=\$(date +%s.%N)
    "\$emu" in 0 -- "$prima" run -m "$dir/m.gguf" -p Hello -n 1 --temp 0 -t 1 --key "$dir/k" \
        --workers 10.77.0.2:9741,10.77.0.3:9741,10.77.0.4:9741 -lw $lw >/dev/null 2>"$dir/\$run.err"
    echo "\$run \$(echo "\$(date +%s.%N) - \$start" | bc)" >>"$dir/times"
done
for p in "\${pids[@]}"; do kill \$p; done
wait
EOF
chmod +x "$dir/inside.sh"
size=$(stat -c %s "$model")
echo "model $model: $size bytes; -lw $lw; paper-4dev; load $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq "$reps"); do
    rm -rf "$dir"/s? "$dir/times"
    "$here/../tools/prima-emu" shell "$here/scenarios/paper-4dev.json" --prima "$prima" \
        --model "$dir/m.gguf" --cache keep -q -- "$dir/inside.sh" >/dev/null 2>"$dir/emu.err" ||
        { echo "store_emu.sh: the emulator failed: $(tail -3 "$dir/emu.err")" >&2; exit 1; }
    grep -q "^prima: stopped" "$dir/cold.err" ||
        { echo "store_emu.sh: the run failed: $(cat "$dir/cold.err")" >&2; exit 1; }
    sent=$(sed -n 's/^prima: device [0-9]: received its share of the model, \([0-9.]*\) MiB.*/\1/p' \
        "$dir/cold.err" | awk '{ s += $1 } END { print s + 0 }')
    secs=$(for w in "$dir"/w?.log; do
               sed -n 's/.*store: received .* in \([0-9.]*\) s .*/\1/p' "$w" | awk '{ s += $1 } END { print s + 0 }'
           done | sort -g | tail -1)
    echo "rep $rep: first token from empty stores $(sed -n 's/^cold //p' "$dir/times") s," \
         "from full stores $(sed -n 's/^warm //p' "$dir/times") s (wall, the head's command);" \
         "sent $sent MiB in $secs s; full copies to 3 workers at that rate:" \
         "$(awk -v s="$size" -v m="$sent" -v t="$secs" 'BEGIN { printf "%.1f", 3 * s / 1048576 / m * t }') s;" \
         "load $(cut -d' ' -f1 /proc/loadavg)"
done
