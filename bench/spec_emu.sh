#!/bin/bash
# spec_emu.sh — speculative decoding on the emulated paper-4dev cluster (tools/prima-emu:
# Wi-Fi-like links, 3 ms one way between two devices, CPU quotas, memory budgets): greedy
# generation tokens/s with and without speculation, every device in the ring (stories260K
# -lw 2,1,1,1; TinyStories-656K -lw 1,0,0,1: two forwarders), plain and speculative runs
# alternating, REPS pairs per case; one TSV line per run, then the ranges (as bench/spec.sh).
# Needs root and what tools/prima-emu needs (its --help); the models are copied to a
# temporary directory (the emulator throttles the disk they are read from).
# usage: bench/spec_emu.sh [PRIMA_BINARY [REPS [TOKENS]]]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prima=$(realpath "${1:-build/prima}")
reps=${2:-3}
n=${3:-64}
fx=${PRIMA_FIXTURES:-../shared/fixtures}/models
[ -f "$fx/stories260K.gguf" ] || { echo "spec_emu.sh: no fixtures at $fx (set PRIMA_FIXTURES)" >&2; exit 1; }
export PRIMA_DELAY_LINK=${PRIMA_DELAY_LINK:-$(dirname "$prima")/prima-delay-link}
dir=$(mktemp -d "${TMPDIR:-/tmp}/prima-spec-emu.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cp "$fx/stories260K.gguf" "$fx/tinystories-656k-f16.gguf" "$fx/tinystories-656k-q8_0.gguf" "$dir/"
story="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."
cases=(
    "self|stories260K.gguf|-lw 2,1,1,1|-md $dir/stories260K.gguf|Once upon a time"
    "pair|tinystories-656k-f16.gguf|-lw 1,0,0,1|-md $dir/tinystories-656k-q8_0.gguf|Once upon a time"
    "pair-pmin0|tinystories-656k-f16.gguf|-lw 1,0,0,1|-md $dir/tinystories-656k-q8_0.gguf --draft-p-min 0|Once upon a time"
    "ngram|stories260K.gguf|-lw 2,1,1,1|--spec ngram|$story $story $story Once upon a time, there was"
)
printf 'case\tdevices\tmode\trep\ttokens_per_s\tevaluations\tacceptance\n' | tee "$dir/runs.tsv"
for c in "${cases[@]}"; do
    IFS='|' read -r name target lw flags prompt <<<"$c"
    for rep in $(seq "$reps"); do
        for mode in plain spec; do
            extra=
            [ $mode = spec ] && extra=$flags
            rm -rf "$dir/out"
            # shellcheck disable=SC2086
            "$here/../tools/prima-emu" run "$here/scenarios/paper-4dev.json" --prima "$prima" \
                --model "$dir/$target" --prompt "$prompt" -n "$n" --port 9731 --out "$dir/out" -q \
                -- --temp 0 $lw $extra >/dev/null 2>&1 || { echo "spec_emu.sh: $name $mode failed" >&2; continue; }
            log=$dir/out/head.err
            tps=$(sed -n 's/.*generation .* ms\/token, \([0-9.]*\) tokens\/s.*/\1/p' "$log")
            evals=$(sed -n 's/.*: \([0-9]*\) evaluations for.*/\1/p' "$log")
            acc=$(sed -n 's/.*(acceptance \([0-9.]*\)%).*/\1/p' "$log")
            printf '%s\t4\t%s\t%d\t%s\t%s\t%s\n' "$name" "$mode" "$rep" "$tps" "${evals:-$n}" \
                "${acc:--}" | tee -a "$dir/runs.tsv"
        done
    done
done
echo
awk -F'\t' -f "$here/spec_summary.awk" "$dir/runs.tsv"
