#!/bin/bash
# The official Ollama (ollama) and Anthropic (@anthropic-ai/sdk) clients and the OpenAI client's
# newer paths (web/test/apis.test.mjs, installed by scripts/deps.sh --test with npm ci) against
# prima serve on one device: each API's chat and generation, streaming and not, equal to prima
# run's text for the same settings; its model views, errors, stop sequences and usage; an unknown
# model (404 in every API), model aliases, the usage chunk, context_length_exceeded, echo and
# prompts of token ids. Then curl for what no client checks: the raw NDJSON and SSE framing and
# refusals of malformed bodies in each API's error shape. Last, tool use and constrained output
# through the three clients (web/test/agents.test.mjs, arguments validated with ajv).
set -u
source "$(dirname "$0")/support/ring_workers.sh" serve-apis
source "$(dirname "$0")/support/serve.sh"
web=$(cd "$(dirname "$0")/../web/test" && pwd)
command -v curl >/dev/null && command -v jq >/dev/null ||
    { echo "SKIPPED: curl and jq are needed"; exit 77; }
command -v node >/dev/null && [ -d "$web/node_modules/ollama" ] && [ -d "$web/node_modules/@anthropic-ai/sdk" ] ||
    { echo "SKIPPED: node or the npm clients in $web/node_modules missing (npm ci in web/test; scripts/deps.sh --test does)"; exit 77; }

# the reply: what run prints but its own final newline (a sentinel keeps $(...) from dropping a
# newline of the reply's)
run_text() { "$prima" run -m "$model" -t 1 -c 256 --no-display-prompt "$@" 2>"$tmp/run.err"; printf x; }
prompt="Once upon a time"
system="You tell stories."
user="Tell me one about a cat."
greedy=$(run_text -p "$prompt" -n 32 --temp 0)
greedy=${greedy%x}
greedy=${greedy%$'\n'}
ids=$("$prima" tokenize -m "$model" --parse-special -p "$prompt" | jq -sc .)
# the model has no chat template: the server uses ChatML, written out here for prima run
printf -v rendered '<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$system" "$user"
chat=$(run_text -p "$rendered" -n 24 --temp 0)
chat=${chat%x}
chat=${chat%$'\n'}
printf -v rendered_user '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$prompt"
generate=$(run_text -p "$rendered_user" -n 16 --temp 0)
generate=${generate%x}
generate=${generate%$'\n'}
jq -n --arg prompt "$prompt" --arg greedy "$greedy" --argjson ids "$ids" --arg system "$system" \
    --arg user "$user" --arg chat "$chat" --arg generate "$generate" \
    '{prompt: $prompt, ids: $ids, greedy: $greedy, system: $system, user: $user, chat: $chat,
      generate: $generate, alias: "tiny"}' >"$tmp/want.json" || fail "want.json (tokenize: '$ids')"

start_server "$tmp/serve.log" -m "$model" -c 256 --api-key test-key --alias tiny --embeddings || exit 1
timeout 180 node "$web/apis.test.mjs" "http://127.0.0.1:$sport" test-key "$tmp/want.json" ||
    fail "client checks (above); server log: $(tail -5 "$tmp/serve.log")"

# ---- framing and refusals, with curl
post() { # path body: the answer in $tmp/body, the status in $code
    code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' \
        -H 'Authorization: Bearer test-key' --data-binary "$2" "http://127.0.0.1:$sport$1")
}
post /api/chat '{"model":"tiny","messages":[{"role":"user","content":"Hi"}],"options":{"num_predict":4,"temperature":0}}'
[ "$code" = 200 ] && [ "$(wc -l <"$tmp/body")" = 5 ] &&
    [ "$(jq -s 'map(.done) == [false,false,false,false,true]' "$tmp/body")" = true ] ||
    fail "/api/chat NDJSON: $code $(cat "$tmp/body")"
[ "$(tail -1 "$tmp/body" | jq -r '[.done_reason, .eval_count, (.total_duration > 0), (.eval_duration > 0)] | @tsv')" = "$(printf 'length\t4\ttrue\ttrue')" ] ||
    fail "last line: $(tail -1 "$tmp/body")"
post /v1/messages '{"model":"tiny","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"Hi"}]}'
[ "$(sed -n 's/^event: //p' "$tmp/body" | tr '\n' ' ')" = "message_start ping content_block_start content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop " ] ||
    fail "/v1/messages events: $(sed -n 's/^event: //p' "$tmp/body" | tr '\n' ' ')"
# every API's refusals in its own shape, never a crash
refused() { # path body
    post "$1" "$2"
    [ "$code" = 400 ] && [ "$(jq -r '.error | type' "$tmp/body")" = string ] ||
        fail "$1 $2: $code $(cat "$tmp/body")"
}
for body in '{' '[]' '{"model":1}' '{"model":"tiny","options":{"temperature":"x"}}' '{"model":"tiny","options":{"num_predict":0}}'; do
    refused /api/chat "$body"
    refused /api/generate "$body"
done
refused /api/chat '{"model":"tiny","messages":"x"}'
refused /api/chat '{"model":"tiny","messages":[{"role":"user","content":{}}]}'
refused /api/generate '{"model":"tiny","prompt":5}'
refused /api/generate '{"model":"tiny","prompt":"x","template":"{{ .Prompt }}"}'
for body in '{' '{"model":"tiny","max_tokens":1}' '{"model":"tiny","messages":[{"role":"user","content":"x"}]}' \
            '{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image"}]}]}'; do
    post /v1/messages "$body"
    [ "$code" = 400 ] && [ "$(jq -r '"\(.type) \(.error.type)"' "$tmp/body")" = "error invalid_request_error" ] ||
        fail "/v1/messages $body: $code $(cat "$tmp/body")"
done
post /v1/messages '{"model":"gpt-9","max_tokens":1,"messages":[{"role":"user","content":"x"}]}'
[ "$code" = 404 ] && [ "$(jq -r .error.type "$tmp/body")" = not_found_error ] || fail "anthropic unknown model: $code $(cat "$tmp/body")"
post /api/show '{"model":"gpt-9"}'
[ "$code" = 404 ] && [ "$(jq -r .error "$tmp/body")" = "model 'gpt-9' not found" ] || fail "show unknown model: $code $(cat "$tmp/body")"
post /api/show '{}'
[ "$code" = 400 ] || fail "show without a model: $code"
# x-api-key is a key as good as the Bearer header; a wrong one is a 401 in Anthropic's shape
code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -H 'x-api-key: wrong' "http://127.0.0.1:$sport/v1/messages" \
    -H 'Content-Type: application/json' --data-binary '{}')
[ "$code" = 401 ] && [ "$(jq -r .error.type "$tmp/body")" = authentication_error ] || fail "x-api-key wrong: $code $(cat "$tmp/body")"
code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -H 'x-api-key: test-key' "http://127.0.0.1:$sport/api/tags")
[ "$code" = 200 ] || fail "x-api-key: $code"
kill -0 "$spid" || fail "the server died"
stop_server "$tmp/serve.log"

# ---- several prompts in one completions request on three slots (apis.test.mjs checks them on
# one): generated at once, each choice still the text its prompt gets alone
start_server "$tmp/np3.log" -m "$model" -c 256 -np 3 || exit 1
prompts='["Once upon a time","Lily saw a big","The sun was"]'
alone=()
for k in 0 1 2; do
    post /v1/completions "$(jq -nc --argjson p "$prompts" --argjson k $k '{prompt: $p[$k], max_tokens: 24, temperature: 0}')"
    alone+=("$(jq -c '[.choices[0].text, .usage.completion_tokens]' "$tmp/body")")
done
post /v1/completions "$(jq -nc --argjson p "$prompts" '{prompt: $p, max_tokens: 24, temperature: 0}')"
[ "$code" = 200 ] && [ "$(jq -c '[.choices[] | [.text, .index]]' "$tmp/body")" = \
    "$(printf '%s\n' "${alone[@]}" | jq -sc '[to_entries[] | [.value[0], .key]]')" ] &&
    [ "$(jq .usage.completion_tokens "$tmp/body")" = "$(printf '%s\n' "${alone[@]}" | jq -s 'map(.[1]) | add')" ] ||
    fail "3 prompts on -np 3: $code $(cat "$tmp/body") vs ${alone[*]}"
post /v1/completions "$(jq -nc --argjson p "$prompts" '{prompt: $p, max_tokens: 24, temperature: 0, stream: true}')"
streamed=$(sed -n 's/^data: //p' "$tmp/body" | grep -v '^\[DONE\]$' |
    jq -sc 'group_by(.choices[0].index) | map([(map(.choices[0].text) | add), .[0].choices[0].index])')
[ "$code" = 200 ] && [ "$streamed" = "$(printf '%s\n' "${alone[@]}" | jq -sc '[to_entries[] | [.value[0], .key]]')" ] &&
    [ "$(grep -c '^data: \[DONE\]$' "$tmp/body")" = 1 ] && [ "$(tail -2 "$tmp/body" | head -1)" = "data: [DONE]" ] ||
    fail "3 prompts streamed on -np 3: $code $streamed vs ${alone[*]}"
kill -0 "$spid" || fail "the -np 3 server died"
stop_server "$tmp/np3.log"

# ---- tool use and constrained output through the three clients, on a random-weight model (its
# template writes Hermes <tool_call>): web/test/agents.test.mjs validates with ajv
start_server "$tmp/agents.log" -m "$fixtures/models/synth-qwen2-l2-e64-q8_0.gguf" || exit 1
# without --embeddings: 501 saying how to enable them, in each API's shape
for path in /v1/embeddings /api/embed; do
    code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary '{"input":"x"}' "http://127.0.0.1:$sport$path")
    [ "$code" = 501 ] && grep -q -- "--embeddings" "$tmp/body" || fail "$path without --embeddings: $code $(cat "$tmp/body")"
done
# a schema the compiler refuses names Ollama's field, not OpenAI's
code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary \
    '{"model":"synth-qwen2-l2-e64-q8_0.gguf","messages":[{"role":"user","content":"x"}],"stream":false,"format":{"type":"object","properties":{"a":{"not":{}}}}}' \
    "http://127.0.0.1:$sport/api/chat")
[ "$code" = 400 ] && jq -r .error "$tmp/body" | grep -q '^format: ' || fail "ollama format refused: $code $(cat "$tmp/body")"
timeout 300 node "$web/agents.test.mjs" "http://127.0.0.1:$sport" ||
    fail "agent checks (above); server log: $(tail -5 "$tmp/agents.log")"
stop_server "$tmp/agents.log"
[ "$fails" = 0 ] && echo "serve_apis: all passed"
exit $((fails > 0))
