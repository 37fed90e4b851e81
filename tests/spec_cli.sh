#!/bin/bash
# Speculative decoding end to end (prima run, prima cluster, prima serve): greedy output with a
# draft model (the target itself, TinyStories-656K Q8_0 for its F16 file) or n-gram drafting is
# the plain output, on one device and on rings of 2 and 3 devices with uneven windows and k > 1,
# across context shifts, with stop strings, a full context and chat, and the server's answers
# with their log-probabilities; the statistics line; refusals.
set -u
. "$(dirname "$0")/support/needs.sh"
need_fixtures
prima=${PRIMA_BIN:?PRIMA_BIN not set}
stories=$fixtures/models/stories260K.gguf
f16=$fixtures/models/tinystories-656k-f16.gguf
q8=$fixtures/models/tinystories-656k-q8_0.gguf
tmp=$(mktemp -d /tmp/prima-spec-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# same NAME CMD...: run CMD (stdout to $tmp/NAME, stderr to $tmp/NAME.err) and compare its output
# with $tmp/plain
same() {
    local name=$1
    shift
    "$@" >"$tmp/$name" 2>"$tmp/$name.err" || { fail "$name: exit status: $(tail -2 "$tmp/$name.err")"; return; }
    cmp -s "$tmp/plain" "$tmp/$name" || fail "$name: output differs from plain decoding"
}

# stories260K, greedy, a context of 40 shifted twice on the way to 90 tokens
opts=(-p "Once upon a time" -n 90 --temp 0 -c 40 --context-shift -t 1)
"$prima" run -m "$stories" "${opts[@]}" >"$tmp/plain" 2>"$tmp/plain.err" || fail "plain run"
grep -q "context shift" "$tmp/plain.err" || fail "the plain run did not shift its context"
same self "$prima" run -m "$stories" -md "$stories" "${opts[@]}"
grep -Eq "speculation \(.*stories260K.gguf\): [0-9]+ evaluations for 90 tokens; drafted [0-9]+, accepted [0-9]+ \(acceptance 100.0%\)" \
    "$tmp/self.err" || fail "self: statistics line: $(grep speculation "$tmp/self.err")"
same ngram "$prima" run -m "$stories" --spec ngram --draft-max 8 "${opts[@]}"
grep -q "speculation (n-gram)" "$tmp/ngram.err" || fail "ngram: statistics line"
same self-3dev "$prima" cluster --devices 3 -lw 1,2,2 -m "$stories" -md "$stories" --draft-p-min 0 "${opts[@]}"
same ngram-2dev-k3 "$prima" cluster --devices 2 -lw 1,1 -k 3 -m "$stories" --spec ngram "${opts[@]}"

# TinyStories-656K: the Q8_0 file drafts for the F16 file
opts=(-p "Once upon a time" -n 80 --temp 0 -c 48 --context-shift -t 1 --repeat-penalty 1.1)
"$prima" run -m "$f16" "${opts[@]}" >"$tmp/plain" 2>/dev/null || fail "plain run (tinystories)"
same pair "$prima" run -m "$f16" -md "$q8" --draft-max 6 --draft-p-min 0 "${opts[@]}"
same pair-3dev-k2 "$prima" cluster --devices 3 -lw 1,0,1 -k 1 -m "$f16" -md "$q8" "${opts[@]}"
same ngram-3dev "$prima" cluster --devices 3 -lw 0,1,1 -m "$f16" --spec ngram "${opts[@]}"
grep -Eq "accepted [1-9][0-9]*" "$tmp/pair.err" || fail "pair: nothing accepted"

# --verbose: one line per step
"$prima" run -m "$f16" -md "$q8" -p "Once upon a time" -n 16 --temp 0 --verbose >/dev/null \
    2>"$tmp/verbose.err" || fail "verbose run"
grep -Eq "^spec: position [0-9]+: drafted [0-9]+, accepted [0-9]+$" "$tmp/verbose.err" ||
    fail "--verbose: no per-step line"

# a stop string, the token limit and a full context end generation exactly where they do
# without speculation
for extra in "--stop lived" "-n 7" "-c 20"; do
    # shellcheck disable=SC2086
    "$prima" run -m "$f16" -p "Once upon a time" --temp 0 $extra >"$tmp/plain" 2>"$tmp/plain.err" ||
        fail "plain run $extra"
    # shellcheck disable=SC2086
    same "end$extra" "$prima" run -m "$f16" -md "$q8" --draft-p-min 0 -p "Once upon a time" --temp 0 $extra
    grep -o "generation [0-9]* tokens" "$tmp/plain.err" >"$tmp/n1"
    grep -o "generation [0-9]* tokens" "$tmp/end$extra.err" >"$tmp/n2"
    cmp -s "$tmp/n1" "$tmp/n2" || fail "$extra: $(cat "$tmp/n1") without speculation, $(cat "$tmp/n2") with"
done

# chat: every turn's reply is the plain one
printf 'Hello\nTell me a story\n' >"$tmp/chat.in"
"$prima" run -m "$f16" -cnv --temp 0 -n 24 <"$tmp/chat.in" >"$tmp/plain" 2>/dev/null || fail "plain chat"
same chat "$prima" run -m "$f16" -md "$q8" -cnv --temp 0 -n 24 <"$tmp/chat.in"

# sampling with a seed is reproducible with speculation too
for i in 1 2; do
    "$prima" run -m "$f16" -md "$q8" -p "Once upon a time" -n 40 --seed 11 --temp 1 \
        --repeat-penalty 1.2 >"$tmp/seed$i" 2>/dev/null || fail "seeded run $i"
done
cmp -s "$tmp/seed1" "$tmp/seed2" || fail "same seed, different text with a draft model"

# prima serve: every request speculates; greedy answers and their log-probabilities are the
# plain server's (the logits rows of a verified batch are the target's)
if command -v curl >/dev/null && command -v jq >/dev/null; then
    serve_answer() { # name options...: one completion with log-probabilities into $tmp/NAME
        local name=$1 port=
        shift
        "$prima" serve -m "$f16" --port 0 -t 1 "$@" >"$tmp/$name.log" 2>&1 &
        local pid=$!
        for _ in $(seq 400); do
            port=$(sed -n 's|.*serving .* on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$tmp/$name.log")
            [ -n "$port" ] && break
            kill -0 $pid 2>/dev/null || break
            sleep 0.05
        done
        for prompt in "Once upon a time" "Lily and Tom"; do
            curl -sS --max-time 60 -H 'Content-Type: application/json' --data-binary \
                "{\"prompt\":\"$prompt\",\"max_tokens\":40,\"temperature\":0,\"logprobs\":2}" \
                "http://127.0.0.1:$port/v1/completions" | jq -c '.choices[0] | [.text, .logprobs]'
        done >"$tmp/$name"
        kill -TERM $pid
        wait $pid || fail "serve $*: exit status after SIGTERM"
    }
    serve_answer serve-plain
    serve_answer serve-spec -md "$q8" --draft-p-min 0
    [ -s "$tmp/serve-plain" ] && cmp -s "$tmp/serve-plain" "$tmp/serve-spec" ||
        fail "serve with a draft: $(head -c 300 "$tmp/serve-spec") vs $(head -c 300 "$tmp/serve-plain")"
else
    echo "spec_cli: curl or jq missing: prima serve not checked"
fi

# refusals: a draft with another vocabulary, bad flags
"$prima" run -m "$stories" -md "$q8" -p "Once upon a time" -n 4 >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || fail "vocabulary mismatch: exit status $rc"
grep -q "vocabulary" "$tmp/err" && [ "$(wc -l <"$tmp/err")" -eq 1 ] ||
    fail "vocabulary mismatch: $(cat "$tmp/err")"
bad() { # expected-message args...
    local want=$1
    shift
    "$prima" run -m "$stories" -p x "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    [ $rc -eq 2 ] || fail "$*: exit status $rc"
    grep -q -- "$want" "$tmp/err" || fail "$*: $(cat "$tmp/err")"
}
bad "expected 'ngram'" --spec lookahead
bad "not both" --spec ngram -md "$stories"
bad "larger than --draft-max" --draft-min 5 --draft-max 2
bad "draft-max" --draft-max 0
bad "draft-p-min" --draft-p-min 1.5
"$prima" run -m "$stories" -md "$tmp/missing.gguf" -p x >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "missing.gguf" "$tmp/err" || fail "missing draft: $(cat "$tmp/err")"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "spec_cli: all passed"
