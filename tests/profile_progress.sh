#!/bin/bash
# profile_progress.sh — prima profile says what it measures while it measures: plain lines, one
# per part in order with its share done and the time so far, when stderr is not a terminal; one
# line rewritten in place (\r) on a terminal (a pseudo-terminal from script(1)). The profile itself
# is on stdout ("1 thread", not "1 threads").
set -uo pipefail
prima=${PRIMA_BIN:?}
fx=${PRIMA_FIXTURES:-${PRIMA_FIXTURES_DEFAULT:-}}
[[ -f $fx/README.md ]] || { echo "SKIP: fixtures not found at '$fx'"; exit 77; }
model=$fx/models/synth-spm512-l4-e256-q4_k_m.gguf   # Q4_K and Q6_K matrices
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

parts="FMA peak|memory bandwidth|thread pool|layer work|Q4_K kernels|Q6_K kernels|disk|done"

"$prima" profile -m "$model" -t 1 >"$work/out" 2>"$work/err" || fail "profile: $(cat "$work/err")"
grep -Eq "^cpu +[0-9]+ usable cores?, measured with 1 thread, SIMD path" "$work/out" ||
    fail "no profile on stdout: $(cat "$work/out")"
grep -q $'\r' "$work/err" && fail "carriage returns in a file: $(cat -A "$work/err")"
line_re='^prima: profiling this device: (.+), ([0-9]+) %, ([0-9]+\.[0-9]) s$'
got=() prev_pct=-1 prev_s=-1
while IFS= read -r line; do
    [[ $line =~ $line_re ]] || fail "not a progress line: '$line'"
    got+=("${BASH_REMATCH[1]}")
    pct=${BASH_REMATCH[2]} s=${BASH_REMATCH[3]/./}
    ((pct >= prev_pct && 10#$s >= prev_s)) || fail "share or time went back at '$line'"
    prev_pct=$pct prev_s=$((10#$s))
done <"$work/err"
[[ $(IFS='|'; echo "${got[*]}") == "$parts" ]] ||
    fail "parts: $(IFS='|'; echo "${got[*]}"), want $parts"
((prev_pct == 100)) || fail "the last line is not at 100 %: $(tail -1 "$work/err")"

# On a terminal: one line, rewritten for every part and as the seconds go on, ended once the
# measurement is over.
script -qec "'$prima' profile -m '$model' -t 1 --json 2>&1 >/dev/null" /dev/null \
    >"$work/tty" </dev/null || fail "profile on a terminal: $(cat -A "$work/tty")"
[[ $(grep -c "prima: profiling" "$work/tty") == 1 ]] ||
    fail "more than one line on a terminal: $(cat -A "$work/tty")"
tr '\r' '\n' <"$work/tty" | grep -v '^$' | sed 's/ *$//' >"$work/parts"
got=$(sed -E "s/$line_re/\\1/" "$work/parts" | uniq | paste -sd '|')
[[ $got == "$parts" ]] || fail "terminal parts: $got, want $parts ($(cat -A "$work/tty"))"
# the seconds go on within a part (redrawn 4 times a second): more lines than parts
(($(wc -l <"$work/parts") > $(tr '|' '\n' <<<"$parts" | wc -l) + 4)) ||
    fail "the terminal line is not redrawn within parts: $(cat -A "$work/tty")"
grep -Eq "done, 100 %, [0-9.]+ s *"$'\r'"?\$" "$work/tty" ||
    fail "the terminal line does not end at done: $(cat -A "$work/tty")"
echo "profile_progress: all passed"
