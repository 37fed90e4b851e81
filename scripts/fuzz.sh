#!/bin/bash
# fuzz.sh [SECONDS] — build the libFuzzer targets with clang (ASan + UBSan, build-fuzz/) and run
# all seven for SECONDS in total (default 60): the ring protocol (framing and every message
# decoder) and the tokenizer a quarter each, the server's request parser and the chat-template
# interpreter an eighth each, GBNF grammars and the tool-call parser a sixteenth each, the GGUF
# reader the rest. Prints one line per target — inputs
# run, seconds, result — and keeps libFuzzer's own output in build-fuzz/TARGET.log (its last
# lines are printed when a target fails). Exits non-zero on any crash, leak, sanitizer report
# or timeout; the crashing input is build-fuzz/TARGET-crash-*, to be replayed with
# build-fuzz/TARGET FILE.
#
# Seeds: GGUF — the fixtures' files cut to their first 64 KiB (the header, which is what the
# reader parses; the data section is only bounds-checked) and small complete models from prima
# mkmodel; protocol — none (libFuzzer's comparison tracing finds the frame magic and lengths in
# seconds); tokenizer — each vocabulary's test strings (the first byte of an input picks the
# vocabulary and the flags); request parser — a body for each API's endpoints: OpenAI's chat and
# completion, Ollama's chat and generate with tools and format, Anthropic's messages with tool
# use and results, embeddings (the first byte picks the API and the endpoint); chat templates — the fixtures' published templates and a small one written
# here, with a dictionary of Jinja's tags and keywords; grammars — a JSON grammar and a small
# one with every operator, with a dictionary of GBNF's tokens; tool calls — a reply of each
# format (the first byte picks it). The tokenizer target needs the
# fixtures' vocabularies and is skipped, saying so, without them.
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-60}
fixtures=${PRIMA_FIXTURES:-../shared/fixtures}
mkdir -p build-fuzz
CC=clang cmake -S . -B build-fuzz -DPRIMA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --target fuzz_gguf fuzz_proto fuzz_tokenizer fuzz_request fuzz_jinja fuzz_grammar fuzz_toolcall prima-cli -j"$(nproc)" \
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
sixteenth=$((seconds / 16))
[ "$sixteenth" -ge 1 ] || sixteenth=1

mkdir -p build-fuzz/corpus-request
printf '\001{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stop":["a"],"logprobs":true,"top_logprobs":2}' \
    >build-fuzz/corpus-request/seed-chat
printf '\000{"prompt":"Once","temperature":0.5,"seed":3,"stream":true,"logprobs":2}' \
    >build-fuzz/corpus-request/seed-completion
printf '\003{"model":"m","messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},{"role":"tool","content":"1","tool_name":"f"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"format":{"type":"object"},"options":{"num_predict":8,"stop":["x"]}}' \
    >build-fuzz/corpus-request/seed-ollama-chat
printf '\002{"model":"m","prompt":"p","system":"s","raw":false,"format":"json","stream":false}' \
    >build-fuzz/corpus-request/seed-ollama-generate
printf '\005{"model":"m","max_tokens":9,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}],"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"f"},"stop_sequences":["z"]}' \
    >build-fuzz/corpus-request/seed-anthropic
printf '\007{"input":["a",[1,2]],"encoding_format":"base64","dimensions":8}' \
    >build-fuzz/corpus-request/seed-embeddings
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

corpus=build-fuzz/corpus-grammar
mkdir -p "$corpus"
printf 'root ::= obj\nobj ::= "{" ws (str ":" ws val ("," ws str ":" ws val)*)? "}"\nval ::= obj | str | [0-9]+ | "true"\n'\
'str ::= "\\"" ([^"\\\\] | "\\\\" ["nt])* "\\""\nws ::= " "?\n\000{"a": {"b": "x\\n"}, "c": 12}' >"$corpus/seed-json"
printf 'root ::= ("a" | [b-d]){2,4} x? y* # c\nx ::= [^\\x00-\\x1F] . "\\u00e9"+\ny ::= ("z" | "\\U0001F600"){0,3}\n\000bcd\xc3\xa9' \
    >"$corpus/seed-ops"
: >build-fuzz/grammar.dict
for w in '::=' '|' '(' ')' '[' ']' '[^' '"' '\\' '\\x' '\\u' '*' '+' '?' '{2,' '}' 'root' '#'; do
    printf '"%s"\n' "$w" >>build-fuzz/grammar.dict
done
run fuzz_grammar "$sixteenth" -max_len=4096 -dict=build-fuzz/grammar.dict "$corpus"

corpus=build-fuzz/corpus-toolcall
mkdir -p "$corpus"
printf '\000\005ok <tool_call>{"name": "f", "arguments": {"a": [1]}}</tool_call>' >"$corpus/seed-hermes"
printf '\011\003x</think><|python_tag|>{"name": "g", "parameters": {}}' >"$corpus/seed-llama3"
printf '\002\007[TOOL_CALLS][{"name": "h", "arguments": {}}]' >"$corpus/seed-mistral"
printf '\003\011<|channel|>analysis<|message|>t<|end|><|start|>assistant<|channel|>commentary to=functions.k <|constrain|>json<|message|>{}<|call|>' \
    >"$corpus/seed-gptoss"
printf '\004\002<\xef\xbd\x9ctool\xe2\x96\x81calls\xe2\x96\x81''begin\xef\xbd\x9c>' >"$corpus/seed-deepseek"
run fuzz_toolcall "$sixteenth" -max_len=4096 "$corpus"

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
run fuzz_gguf $((seconds - 2 * quarter - 2 * eighth - 2 * sixteenth)) -max_len=131072 "$corpus"

exit "$failed"
