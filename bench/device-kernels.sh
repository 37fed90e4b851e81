#!/bin/bash
# bench/device-kernels.sh [OUT] — the kernel checks for a many-core x86 machine lent for a few
# minutes: build, the SIMD kernel tests, `prima bench kernels` on the AVX2 and the AVX-512 path,
# and a model's decode and prefill at 1, 4, 8 and 16 threads (thread scaling). Everything it
# prints also goes to OUT/ (default ./device-out): build.log, tests.log, cpu.txt,
# kernels-PATH.jsonl, run-tN.jsonl and summary.txt. Sized for about 8 minutes on 16 cores.
# Needs cmake, a C compiler and the Debian packages of scripts/deps.sh; no network.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-device-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-device}
CPUS=$(nproc)
say() { echo "device-kernels: $*" | tee -a "$OUT/summary.txt"; }

{
    lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|L2|L3' || true
    echo "avx512 flags: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
} >"$OUT/cpu.txt"
cat "$OUT/cpu.txt"

say "build (Release, -j$CPUS)"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1
cmake --build "$BUILD" -j"$CPUS" >>"$OUT/build.log" 2>&1
PRIMA=$BUILD/prima

say "kernel tests"
(cd "$BUILD" && ctest -R 'test_quant|test_ops' --output-on-failure) >"$OUT/tests.log" 2>&1 \
    && say "kernel tests passed" || say "kernel tests FAILED (tests.log)"
grep -E 'Passed|Skipped|Failed' "$OUT/tests.log" | tee -a "$OUT/summary.txt" || true

for path in avx2 avx512; do
    if "$PRIMA" bench kernels -t "$CPUS" --type q4_k,q6_k,q8_0 --reps 7 --path "$path" --json \
        >"$OUT/kernels-$path.jsonl" 2>>"$OUT/summary.txt"; then
        say "bench kernels --path $path ($CPUS threads):"
        jq -r 'select(.op == "matvec" or .op == "matmul" or .op == "read_bandwidth" or .op == "fma_peak")
               | "  \(.type // "-") \(.op) \(.shape // "") \(.tokens // "") t\(.threads) \(.value) \(.unit)"' \
            "$OUT/kernels-$path.jsonl" | tee -a "$OUT/summary.txt"
    else
        say "bench kernels --path $path: cannot run here"
    fi
done

# A model with Llama-3-8B's matrices and 8 of its 32 layers (about 1.3 GB): the same kernels and
# shapes as the full model in a fifth of the time.
MODEL=$OUT/l8b8-q4_k_m.gguf
"$PRIMA" mkmodel --preset llama3-8b --layers 8 --type q4_k_m --threads "$CPUS" -o "$MODEL" \
    >>"$OUT/build.log" 2>&1
say "decode and prefill, $(basename "$MODEL") ($(du -h "$MODEL" | cut -f1))"
for t in 1 4 8 16; do
    ((t <= CPUS)) || { say "  $t threads: only $CPUS CPUs"; continue; }
    "$PRIMA" bench run -m "$MODEL" -t "$t" --reps 2 --decode 16 --json >"$OUT/run-t$t.jsonl" 2>>"$OUT/summary.txt"
    jq -rs --arg t "$t" '
        def v(op; tok): (map(select(.op == op and ((.tokens // 0) == tok))) | .[0].value);
        "  \($t) threads: decode \(v("decode"; 0)) ms/tok (cpu \(v("decode_cpu"; 0))), prefill 64 \(v("prefill"; 64)) tok/s, 512 \(v("prefill"; 512)) tok/s"' \
        "$OUT/run-t$t.jsonl" | tee -a "$OUT/summary.txt"
done
rm -f "$MODEL"
say "done"
