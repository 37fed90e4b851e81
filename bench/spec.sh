#!/bin/bash
# spec.sh — speculative decoding against plain decoding (the numbers in docs/ring.md): greedy
# generation tokens/s and acceptance for (a) a draft model equal to the target (stories260K),
# (b) TinyStories-656K Q8_0 drafting for its F16 file (with the default --draft-p-min 0.8 and
# with 0: that small draft is rarely confident, yet mostly right), (c) n-gram drafting on a prompt that
# repeats a text, each on one device (prima run) and on a 3-device loopback ring (prima
# cluster, one thread per device). Plain and speculative runs alternate, REPS pairs per row;
# one line per run (TSV on stdout), then per row the range of tokens/s of each and of the
# ratio within each pair.
# usage: bench/spec.sh [PRIMA_BINARY [REPS [TOKENS]]]
set -eu
prima=${1:-build/prima}
reps=${2:-5}
n=${3:-200}
fx=${PRIMA_FIXTURES:-../shared/fixtures}/models
[ -f "$fx/stories260K.gguf" ] || { echo "spec.sh: no fixtures at $fx (set PRIMA_FIXTURES)" >&2; exit 1; }
story="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."
repeat="$story $story $story Once upon a time, there was"

# case: name, target, speculation flags, prompt
cases=(
    "self|$fx/stories260K.gguf|-md $fx/stories260K.gguf|Once upon a time"
    "pair|$fx/tinystories-656k-f16.gguf|-md $fx/tinystories-656k-q8_0.gguf|Once upon a time"
    "pair-pmin0|$fx/tinystories-656k-f16.gguf|-md $fx/tinystories-656k-q8_0.gguf --draft-p-min 0|Once upon a time"
    "ngram|$fx/stories260K.gguf|--spec ngram|$repeat"
)
# devices: name and command prefix (stories260K has 5 layers, TinyStories 2)
ring_of() { # target
    case $1 in
    *stories260K*) echo "cluster --devices 3 -lw 1,2,2" ;;
    *) echo "cluster --devices 3 -lw 1,0,1" ;;
    esac
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
{
printf 'case\tdevices\tmode\trep\ttokens_per_s\tevaluations\tacceptance\n'
for c in "${cases[@]}"; do
    IFS='|' read -r name target flags prompt <<<"$c"
    for dev in 1 3; do
        cmd=run
        [ $dev -eq 3 ] && cmd=$(ring_of "$target")
        for rep in $(seq "$reps"); do
            for mode in plain spec; do
                extra=
                [ $mode = spec ] && extra=$flags
                # shellcheck disable=SC2086
                "$prima" $cmd -m "$target" $extra -p "$prompt" -n "$n" --temp 0 -t 1 -c 512 \
                    --no-display-prompt >/dev/null 2>"$log"
                tps=$(sed -n 's/.*generation .* ms\/token, \([0-9.]*\) tokens\/s.*/\1/p' "$log")
                evals=$(sed -n 's/.*: \([0-9]*\) evaluations for.*/\1/p' "$log")
                acc=$(sed -n 's/.*(acceptance \([0-9.]*\)%).*/\1/p' "$log")
                printf '%s\t%d\t%s\t%d\t%s\t%s\t%s\n' "$name" "$dev" "$mode" "$rep" "$tps" \
                    "${evals:-$n}" "${acc:--}"
            done
        done
    done
done
} | tee "$log.tsv"
echo
awk -F'\t' -f "$(dirname "$0")/spec_summary.awk" "$log.tsv"
rm -f "$log.tsv"
