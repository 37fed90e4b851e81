#!/bin/bash
# fuzz.sh [SECONDS] — build the libFuzzer targets with clang (ASan + UBSan, build-fuzz/) and run
# all five for SECONDS in total (default 60): the ring protocol (framing and every message
# decoder) and the tokenizer a quarter each, the server's request parser and the chat-template
# interpreter an eighth each, the GGUF reader the rest. Prints one line per target — inputs
# run, seconds, result — and keeps libFuzzer's own output in build-fuzz/TARGET.log (its last
# lines are printed when a target fails). Exits non-zero on any crash, leak, sanitizer report
# or timeout; the crashing input is build-fuzz/TARGET-crash-*, to be replayed with
# build-fuzz/TARGET FILE.
#
# Seeds: GGUF — the fixtures' files cut to their first 64 KiB (the header, which is what the
# reader parses; the data section is only bounds-checked) and small complete models from prima
# mkmodel; protocol — none (libFuzzer's comparison tracing finds the frame magic and lengths in
# seconds); tokenizer — each vocabulary's test strings (the first byte of an input picks the
# vocabulary and the flags); request parser — a chat and a completion body (the first byte picks
# the endpoint); chat templates — the fixtures' published templates and a small one written
# here, with a dictionary of Jinja's tags and keywords. The tokenizer target needs the
# fixtures' vocabularies and is skipped, saying so, without them.
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-60}
fixtures=${PRIMA_FIXTURES:-../shared/fixtures}
mkdir -p build-fuzz
CC=clang cmake -S . -B build-fuzz -DPRIMA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --target fuzz_gguf fuzz_proto fuzz_tokenizer fuzz_request fuzz_jinja prima-cli -j"$(nproc)" \
    >build-fuzz/build.log 2>&1 || { tail -n 30 build-fuzz/build.log; exit 1; }

failed=0
# run TARGET SECONDS ARGS...: one summary line; libFuzzer's output goes to build-fuzz/TARGET.log.
run() {
    name=$1 secs=$2
    shift 2
    log=build-fuzz/$name.log
    t0=$(date +%s)
    if build-fuzz/"$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix=build-fuzz/"$name"- "$@" >"$log" 2>&1; then
        result="no crash"
    else
        result="FAILED (libFuzzer's output: $log)"
        failed=1
    fi
    inputs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    printf '%-15s %10s inputs in %3d s: %s\n' "$name" "${inputs:-?}" $(($(date +%s) - t0)) "$result"
    [ "$result" = "no crash" ] || tail -n 25 "$log"
}

quarter=$((seconds / 4))
[ "$quarter" -ge 1 ] || quarter=1
eighth=$((seconds / 8))
[ "$eighth" -ge 1 ] || eighth=1

mkdir -p build-fuzz/corpus-request
printf '\001{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stop":["a"],"logprobs":true,"top_logprobs":2}' \
    >build-fuzz/corpus-request/seed-chat
printf '\000{"prompt":"Once","temperature":0.5,"seed":3,"stream":true,"logprobs":2}' \
    >build-fuzz/corpus-request/seed-completion
run fuzz_request "$eighth" -max_len=4096 build-fuzz/corpus-request

corpus=build-fuzz/corpus-jinja
mkdir -p "$corpus"
for f in "$fixtures"/templates/*.jinja; do
    [ -f "$f" ] && cp "$f" "$corpus/seed-$(basename "$f")"
done
printf '{%%- for m in messages if m.role != "x" %%}{{ loop.index }}{{ m.content | trim | tojson(indent=2) }}'\
'{%% set ns = namespace(a=1) %%}{%% set ns.a = ns.a ~ m.role[1:] %%}{%% endfor -%%}' >"$corpus/seed-written"
: >build-fuzz/jinja.dict
for w in '{{' '}}' '{%' '%}' '{#' '#}' '{%-' '-%}' ' if ' ' for ' ' in ' ' set ' ' macro ' ' endif ' ' endfor ' \
    ' endmacro ' ' else ' ' elif ' ' is ' ' not ' ' and ' ' or ' ' namespace(' ' loop.' '|tojson' '|trim' '|length' \
    'messages' 'tools' '.split(' 'raise_exception(' ' break ' ' continue ' ' defined ' ' none ' ' raw ' ' endraw '; do
    printf '"%s"\n' "$w" >>build-fuzz/jinja.dict
done
run fuzz_jinja "$eighth" -max_len=16384 -dict=build-fuzz/jinja.dict "$corpus"

mkdir -p build-fuzz/corpus-proto
run fuzz_proto "$quarter" -max_len=65536 build-fuzz/corpus-proto

if [ -d "$fixtures/tokenizer" ]; then
    corpus=build-fuzz/corpus-tokenizer
    mkdir -p "$corpus"
    i=0
    for v in llama-spm llama-bpe qwen2 gpt-2 phi-3 deepseek-llm deepseek-coder; do
        # the first byte picks vocabulary i (fuzz_tokenizer.c's order), no special flags
        { printf "\\$(printf %03o "$i")"; head -c 4096 "$fixtures/tokenizer/$v.gguf.inp"; } \
            >"$corpus/seed-$v"
        i=$((i + 1))
    done
    PRIMA_FIXTURES=$fixtures run fuzz_tokenizer "$quarter" -max_len=8192 "$corpus"
else
    echo "fuzz_tokenizer: skipped (no vocabularies at $fixtures/tokenizer)"
fi

corpus=build-fuzz/corpus-gguf
mkdir -p "$corpus"
if [ -d "$fixtures" ]; then
    for f in "$fixtures"/models/*.gguf "$fixtures"/tokenizer/*.gguf; do
        [ -f "$f" ] && head -c 65536 "$f" >"$corpus/seed-$(basename "$f")"
    done
else
    echo "fuzz.sh: no fixtures at $fixtures; seeding the GGUF reader with generated models only"
fi
small="--layers 1 --embd 32 --ff 64 --heads 2 --kv-heads 1 --vocab 258"
# shellcheck disable=SC2086
build-fuzz/prima mkmodel -o "$corpus/seed-mk-llama-q8_0.gguf" $small --type q8_0 >/dev/null
# shellcheck disable=SC2086
build-fuzz/prima mkmodel -o "$corpus/seed-mk-qwen2-f16.gguf" $small --arch qwen2 --type f16 >/dev/null
run fuzz_gguf $((seconds - 2 * quarter - 2 * eighth)) -max_len=131072 "$corpus"

exit "$failed"
