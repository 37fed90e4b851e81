#!/bin/bash
# prima run / prima logits end to end on the fixture models: greedy output equal to the
# reference's, stop strings, a full context (stop, or shift and go on), seeded sampling,
# chat mode (its commands, Ctrl-C, line editing at a terminal), and one-line errors with the
# documented exit statuses.
set -u
. "$(dirname "$0")/support/needs.sh"
need_fixtures
prima=${PRIMA_BIN:?PRIMA_BIN not set}
model=$fixtures/models/stories260K.gguf
ref=$fixtures/reference/stories260K.once.json
tmp=$(mktemp -d /tmp/prima-run-cli.XXXXXX)
chat=
trap '[ -n "$chat" ] && kill -9 "$chat" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

want_text=$(sed -n 's/^  "greedy_text": "\(.*\)",$/\1/p' "$ref")
want_ids=$(sed -n 's/^  "greedy_tokens": \[\(.*\)\],$/\1/p' "$ref" | tr -d ',')
[ -n "$want_text" ] && [ -n "$want_ids" ] || fail "cannot read the reference $ref"

"$prima" run --help | grep -q -- "--context-shift" || fail "run --help"
"$prima" logits --help | grep -q -- "--tokens" || fail "logits --help"

# greedy: the prompt echoed, then the reference continuation
"$prima" run -m "$model" -p "Once upon a time" -n 32 --temp 0 -t 2 >"$tmp/out" 2>"$tmp/err" ||
    fail "run exit status"
[ "$(cat "$tmp/out")" = "Once upon a time$want_text" ] || fail "greedy text: $(cat "$tmp/out")"
grep -q "prompt 5 tokens" "$tmp/err" || fail "prompt stats"
grep -Eq "generation 32 tokens in .* ms/token, .* tokens/s" "$tmp/err" || fail "generation stats"
grep -q "KV cache" "$tmp/err" || fail "memory stats"
grep -q ", 2 threads, seed" "$tmp/err" || fail "threads: $(cat "$tmp/err")"
grep -qx "prima: stopped: 32 tokens generated, as -n asked" "$tmp/err" || fail "-n reason: $(cat "$tmp/err")"

# KV cache types: a Q8_0 cache takes 34/64 of F16's bytes, Q4_0 18/64; a bad type or a head
# size the blocks do not divide is a one-line error
kvmodel=$fixtures/models/synth-spm512-l4-e256-q8_0.gguf
for t in f16 q8_0 q4_0; do
    "$prima" run -m "$kvmodel" -p "Hello" -n 4 --temp 0 -c 2048 -ctk $t -ctv $t >/dev/null \
        2>"$tmp/kv-$t" || fail "run -ctk $t exit status"
done
kv_mib() { sed -n 's/.*KV cache \([0-9.]*\) MiB.*/\1/p' "$tmp/kv-$1"; }
[ "$(kv_mib f16)" = 4.0 ] && [ "$(kv_mib q8_0)" = 2.1 ] && [ "$(kv_mib q4_0)" = 1.1 ] ||
    fail "KV cache sizes f16/q8_0/q4_0: $(kv_mib f16) $(kv_mib q8_0) $(kv_mib q4_0) MiB"
"$prima" run -m "$kvmodel" -ctv q5 -p hi -n 1 >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -qx "prima: -ctv: expected f16, q8_0 or q4_0, got 'q5'" "$tmp/err" ||
    fail "-ctv q5: $(cat "$tmp/err")"
"$prima" run -m "$model" -ctk q8_0 -p hi -n 1 >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "K cache type Q8_0: needs a head size that is a multiple of 32" "$tmp/err" ||
    fail "-ctk q8_0 on 8-dimension heads: $(cat "$tmp/err")"

# the prompt from a file, weights locked in RAM
printf 'Once upon a time' >"$tmp/prompt.txt"
"$prima" run -m "$model" -f "$tmp/prompt.txt" -n 32 --temp 0 --mlock >"$tmp/out" 2>/dev/null ||
    fail "run -f --mlock exit status"
[ "$(cat "$tmp/out")" = "Once upon a time$want_text" ] || fail "run -f: $(cat "$tmp/out")"

# --repack: the CPU's kept weights give the same logits, bit for bit, in a batch of one, of
# three and of the whole prompt, and the same greedy tokens; where the path keeps Q4_K and Q8_0
# (x86 with AVX2, FMA and F16C; AVX-512 also Q6_K) the memory line counts them, elsewhere
# nothing is repacked. They live in a file in the cache directory, made by the first run and
# used by the next
export PRIMA_CACHE_DIR=$tmp/cache
kept_expected=0
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo && kept_expected=1
for m in synth-spm512-l4-e256-q4_k_m synth-spm512-l4-e256-q8_0 synth-qwen3moe-l2-e64-q8_0; do
    for b in 1 3 8; do
        args=(logits -m "$fixtures/models/$m.gguf" --tokens 1,5,9,22,7,13,4,88 -n 6 -b "$b" -t 2)
        "$prima" "${args[@]}" -o "$tmp/plain.f32" --json >"$tmp/plain.json" 2>"$tmp/err" ||
            fail "logits $m -b $b: $(cat "$tmp/err")"
        "$prima" "${args[@]}" -o "$tmp/kept.f32" --json --repack >"$tmp/kept.json" 2>"$tmp/err" ||
            fail "logits $m -b $b --repack: $(cat "$tmp/err")"
        cmp -s "$tmp/plain.f32" "$tmp/kept.f32" || fail "$m -b $b: --repack changed the logits"
        [ "$(grep -A8 greedy_tokens "$tmp/plain.json")" = "$(grep -A8 greedy_tokens "$tmp/kept.json")" ] ||
            fail "$m -b $b: --repack changed the greedy tokens"
    done
    "$prima" run -m "$fixtures/models/$m.gguf" -p "Hello" -n 4 --temp 0 --repack >/dev/null 2>"$tmp/err" ||
        fail "run $m --repack: $(cat "$tmp/err")"
    mib=$(sed -n 's/.*mapped (\([0-9.]*\) MiB repacked).*/\1/p' "$tmp/err")
    if [ $kept_expected = 1 ]; then
        awk -v v="$mib" 'BEGIN { exit !(v > 0) }' || fail "run $m --repack: nothing repacked: $(cat "$tmp/err")"
    else
        [ "$mib" = 0.0 ] || fail "run $m --repack on a path without kept forms: $mib MiB"
    fi
done

# a stop string ends the output just before it
"$prima" run -m "$model" -p "Once upon a time" --temp 0 --stop " named" --no-display-prompt \
    >"$tmp/out" 2>"$tmp/err" || fail "stop: exit status"
[ "$(cat "$tmp/out")" = ", there was a little girl" ] || fail "stop string: '$(cat "$tmp/out")'"
grep -qx "prima: stopped: the output reached a --stop string" "$tmp/err" ||
    fail "stop string reason: $(cat "$tmp/err")"

# a story model ends its story with an end-of-generation token, and says so
"$prima" run -m "$fixtures/models/tinystories-656k-q8_0.gguf" -p "Once upon a time" --temp 0 \
    -n 600 >/dev/null 2>"$tmp/err" || fail "end of generation: exit status"
grep -qx "prima: stopped: the model produced an end-of-generation token" "$tmp/err" ||
    fail "end-of-generation reason: $(cat "$tmp/err")"

# a full context stops with a message (status 0); --context-shift goes on past it
"$prima" run -m "$model" -p "Once upon a time" --temp 0 -c 12 >"$tmp/out" 2>"$tmp/err" ||
    fail "full context: exit status"
grep -qx "prima: stopped: context full (12 tokens): use -c to enlarge it, or --context-shift" \
    "$tmp/err" || fail "full context message: $(cat "$tmp/err")"
grep -q "generation 8 tokens" "$tmp/err" || fail "full context: 12 - 5 + 1 tokens expected"
"$prima" run -m "$model" -p "Once upon a time" --temp 0 -c 12 -n 40 --context-shift \
    >"$tmp/out" 2>"$tmp/err" || fail "context shift: exit status"
grep -q "generation 40 tokens" "$tmp/err" || fail "context shift: 40 tokens"
grep -q "context shift" "$tmp/err" || fail "context shift: count"

# the same seed gives the same sample; sampling flags are accepted
for i in 1 2; do
    "$prima" run -m "$model" -p "Once upon a time" -n 24 --seed 7 --temp 1.2 --top-k 20 \
        --top-p 0.9 --min-p 0.02 --repeat-penalty 1.1 --repeat-last-n 16 \
        --presence-penalty 0.1 --frequency-penalty 0.1 >"$tmp/seed$i" 2>/dev/null ||
        fail "seeded run $i"
done
cmp -s "$tmp/seed1" "$tmp/seed2" || fail "same seed, different text"

# chat (ChatML control tokens in a BPE vocabulary): two turns then /exit
printf 'Hello\nTell me a story\n/exit\n' |
    "$prima" run -m "$fixtures/models/synth-qwen2-l2-e64-q8_0.gguf" -cnv -n 6 --temp 0 >"$tmp/out" 2>"$tmp/err" || fail "chat exit status"
[ "$(grep -c '^> ' "$tmp/out")" -ge 2 ] || fail "chat: expected two prompts"
grep -q "generation 12 tokens" "$tmp/err" || fail "chat: 2 x 6 tokens"
[ "$(grep -c "the reply was cut off at 6 tokens (-n)" "$tmp/err")" = 2 ] ||
    fail "chat: replies cut off by -n say so: $(cat "$tmp/err")"

# the chat's commands: /help, /save FILE (the conversation as JSON), /clear, an unknown one
printf 'Hello\n/help\n/save %s\n/clear\n/nonsense\n/save %s\n' "$tmp/chat1.json" "$tmp/chat2.json" |
    "$prima" run -m "$model" -cnv -p "Be brief." -n 4 --temp 0 -t 1 >"$tmp/out" 2>"$tmp/err" ||
    fail "chat commands: exit status"
grep -q "^prima: /help this list" "$tmp/err" && grep -q "^prima: /nonsense: no such command" "$tmp/err" ||
    fail "chat commands: $(cat "$tmp/err")"
[ "$(jq -r 'map(.role) | join(",")' "$tmp/chat1.json")" = system,user,assistant ] &&
    [ "$(jq -r '.[1].content' "$tmp/chat1.json")" = Hello ] &&
    [ "$(jq -r 'map(.role) | join(",")' "$tmp/chat2.json")" = system ] ||
    fail "chat /save and /clear: $(cat "$tmp/chat1.json" "$tmp/chat2.json")"

# Ctrl-C stops a reply and the chat goes on with it in the conversation; Ctrl-C at an empty
# prompt ends the chat, with the statistics, exit status 0
mkfifo "$tmp/chat_in"
"$prima" run -m "$model" -cnv --temp 0 -n 100000 --ignore-eos -c 100000 -t 1 <"$tmp/chat_in" \
    >"$tmp/out" 2>"$tmp/err" &
chat=$!
exec 7>"$tmp/chat_in"
echo "Tell me a story" >&7
for _ in $(seq 100); do [ "$(wc -c <"$tmp/out")" -gt 100 ] && break; sleep 0.05; done
kill -INT $chat
for _ in $(seq 100); do grep -q "reply stopped (Ctrl-C)" "$tmp/err" && break; sleep 0.05; done
echo "/save $tmp/stopped.json" >&7
for _ in $(seq 100); do [ -s "$tmp/stopped.json" ] && break; sleep 0.05; done
kill -INT $chat
for _ in $(seq 100); do kill -0 $chat 2>/dev/null || break; sleep 0.05; done
kill -0 $chat 2>/dev/null && { fail "Ctrl-C at an empty prompt did not end the chat"; kill -9 $chat; }
wait $chat
st=$?
exec 7>&-
[ $st = 0 ] && grep -q "^prima: generation [0-9]* tokens" "$tmp/err" ||
    fail "Ctrl-C at the prompt: status $st, $(tail -3 "$tmp/err")"
[ "$(jq -r 'map(.role) | join(",")' "$tmp/stopped.json" 2>/dev/null)" = user,assistant ] &&
    [ -n "$(jq -r '.[1].content' "$tmp/stopped.json")" ] &&
    grep -qF -- "$(jq -r '.[1].content' "$tmp/stopped.json" | head -1)" "$tmp/out" ||
    fail "the stopped reply in the conversation: $(head -c 300 "$tmp/stopped.json")"

# at a terminal (a pseudo-terminal here): line editing (a backspace) and history (up arrow)
if command -v script >/dev/null; then
    (sleep 1; printf 'hellp\177o\r'; sleep 1; printf '\033[A\r'; sleep 1
     printf '/save %s\r' "$tmp/tty.json"; sleep 1; printf '\004') |
        timeout 30 script -qc "$prima run -m $model -cnv --temp 0 -n 4 -t 1" /dev/null >/dev/null 2>&1
    [ "$(jq -r '[.[] | select(.role == "user") | .content] | join(",")' "$tmp/tty.json" 2>/dev/null)" = hello,hello ] ||
        fail "chat at a terminal: $(cat "$tmp/tty.json" 2>&1)"
fi

# logits: file size, the reference's greedy ids, and identical bits at 1 and 2 threads
"$prima" logits -m "$model" -p "Once upon a time" -o "$tmp/l1.f32" -n 32 -t 1 >"$tmp/out" ||
    fail "logits exit status"
[ "$(stat -c %s "$tmp/l1.f32")" -eq $((5 * 512 * 4)) ] || fail "logits file size"
grep -q "^greedy tokens: $want_ids$" "$tmp/out" || fail "logits greedy: $(grep greedy "$tmp/out")"
"$prima" logits -m "$model" --tokens 1,403,407,261,378 -o "$tmp/l2.f32" -t 2 --json >"$tmp/json" ||
    fail "logits --tokens exit status"
cmp -s "$tmp/l1.f32" "$tmp/l2.f32" || fail "logits differ between -p/1 thread and --tokens/2 threads"
grep -Eq '"n_positions":[[:space:]]*5,' "$tmp/json" || fail "logits --json"

# bench run: every measurement present, in JSON lines
"$prima" bench run -m "$model" -t 2 --reps 1 --decode 2 --json >"$tmp/bench" || fail "bench run status"
for op in load read_bandwidth first_token prefill prefill_roofline decode decode_roofline memory; do
    grep -q "\"op\":\"$op\"" "$tmp/bench" || fail "bench run: no $op"
done
[ "$(grep -c '"op":"prefill"' "$tmp/bench")" -eq 2 ] || fail "bench run: prefill at 64 and 512"
jq -e -s 'all(.[]; type == "object") and .[0] == {op: "path", path: .[0].path}' "$tmp/bench" \
    >/dev/null || fail "bench run: not JSON lines, or no path line first: $(head -2 "$tmp/bench")"
# --decode-at: decode after contexts of each length (extending one context), as llama-bench -d
"$prima" bench run -m "$model" -t 1 --reps 1 --decode 2 --decode-at 10,40,90 --json \
    >"$tmp/bench" || fail "bench run --decode-at status"
[ "$(jq -s -c '[.[] | select(.op == "decode_at" or .op == "decode_at_cpu") | .tokens]' \
    "$tmp/bench")" = "[10,10,40,40,90,90]" ] || fail "bench run --decode-at: $(cat "$tmp/bench")"

# errors: one line naming the problem; 1 for errors, 2 for usage
expect() { # STATUS TEXT COMMAND...
    local want=$1 text=$2
    shift 2
    "$@" >/dev/null 2>"$tmp/err" </dev/null
    local rc=$?
    [ $rc -eq "$want" ] || fail "$*: status $rc, expected $want"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$*: stderr is not one line: $(cat "$tmp/err")"
    grep -q -- "$text" "$tmp/err" || fail "$*: error lacks '$text': $(cat "$tmp/err")"
}
expect 1 "$tmp/none.gguf" "$prima" run -m "$tmp/none.gguf" -p hi
expect 1 "$fixtures/README.md" "$prima" run -m "$fixtures/README.md" -p hi
expect 2 "unknown option '--frobnicate'" "$prima" run -m "$model" -p hi --frobnicate
expect 2 "--temp: expected a number" "$prima" run -m "$model" -p hi --temp warm
# the file is made once and used again (not rewritten); a stale or damaged one is made again;
# where the cache directory cannot be written the weights are kept in memory, with a warning
if [ $kept_expected = 1 ]; then
    km=$fixtures/models/synth-spm512-l4-e256-q4_k_m.gguf
    kfile=$(ls "$tmp"/cache/synth-spm512-l4-e256-q4_k_m.gguf.*.kept 2>/dev/null)
    [ -f "$kfile" ] || fail "--repack left no file of kept weights in $tmp/cache: $(ls "$tmp/cache")"
    before=$(stat -c %Y.%i "$kfile")
    sleep 1
    "$prima" logits -m "$km" --tokens 1,5,9,22 -o "$tmp/again.f32" --repack >/dev/null 2>"$tmp/err" || fail "logits again"
    [ "$(stat -c %Y.%i "$kfile")" = "$before" ] || fail "--repack rewrote its file"
    "$prima" logits -m "$km" --tokens 1,5,9,22 -o "$tmp/plain4.f32" >/dev/null 2>&1
    cmp -s "$tmp/again.f32" "$tmp/plain4.f32" || fail "--repack from its file changed the logits"
    truncate -s -4096 "$kfile"
    "$prima" logits -m "$km" --tokens 1,5,9,22 -o "$tmp/again.f32" --repack >/dev/null 2>"$tmp/err" || fail "logits, file cut"
    cmp -s "$tmp/again.f32" "$tmp/plain4.f32" || fail "--repack after its file was cut changed the logits"
    [ "$(stat -c %s "$kfile")" -gt 4096 ] && [ "$(stat -c %Y.%i "$kfile")" != "$before" ] ||
        fail "a cut file of kept weights was not made again"
    PRIMA_CACHE_DIR=/proc/no-such-dir "$prima" logits -m "$km" --tokens 1,5,9,22 -o "$tmp/again.f32" \
        --repack >/dev/null 2>"$tmp/err" || fail "logits, no cache directory: $(cat "$tmp/err")"
    grep -q "^prima: warning: repacked weights: .*; keeping them in memory$" "$tmp/err" ||
        fail "no cache directory: $(cat "$tmp/err")"
    cmp -s "$tmp/again.f32" "$tmp/plain4.f32" || fail "--repack in memory changed the logits"
fi
unset PRIMA_CACHE_DIR
expect 2 "^prima: --repack is for one device: the devices of a ring read their model files as they are$" \
    "$prima" run -m "$model" -p hi --repack --workers 127.0.0.1:1 --insecure
expect 2 "-n needs a value" "$prima" run -m "$model" -p hi -n
expect 2 "no prompt" "$prima" run -m "$model"
expect 2 "no model" "$prima" run -p hi
expect 2 "--top-p must be in" "$prima" run -m "$model" -p hi --top-p 0
expect 1 "^prima: the prompt is too long: 7 tokens, and the context holds 4 (-c)$" \
    "$prima" run -m "$model" -p "Once upon a time there was" -c 4
expect 1 "^prima: the prompt is too long: 7 tokens, and the context holds 4 (-c)$" \
    "$prima" run -m "$model" -p "Once upon a time there was" -c 4 --context-shift
expect 1 "token id 512 is outside the vocabulary" "$prima" logits -m "$model" --tokens 1,512 -o "$tmp/x"
expect 2 "expected comma-separated token ids" "$prima" logits -m "$model" --tokens 1,,2 -o "$tmp/x"
expect 1 "$tmp/no/dir/x.f32" "$prima" logits -m "$model" --tokens 1 -o "$tmp/no/dir/x.f32"
expect 2 "exactly one of -p TEXT and --tokens" "$prima" logits -m "$model" -o "$tmp/x"
expect 2 "unknown option '--frob'" "$prima" bench run -m "$model" --frob
expect 2 "no model" "$prima" bench run
expect 1 "$tmp/none.gguf" "$prima" bench run -m "$tmp/none.gguf"
expect 2 "--decode-at: expected up to 8 ascending" "$prima" bench run -m "$model" --decode-at 40,10
expect 2 "--decode-at: expected up to 8 ascending" "$prima" bench run -m "$model" --decode-at 1,x

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all checks passed"
