#!/bin/bash
# prima serve end to end with curl: answers equal prima run's (greedy and seeded, stop strings
# across token boundaries, streaming equal to non-streaming, a chat's next turn from the cache),
# log-probabilities, OpenAI errors with the right status (malformed JSON, wrong types, unknown
# paths, a huge body, a prompt over the context, API keys, a full queue, the connection limit:
# 503, not a reset; CORS, Host and Content-Type for browsers), a slow client, clients that disconnect (generation stops, the slot is free),
# 64 concurrent clients (nothing lost or mixed, memory back to its level), control-token text
# typed by a user (plain text), and a 3-device loopback ring that loses a worker (500 naming it,
# health says so) and serves again once the worker is back, with the cluster view's memory in
# use and Halda's reasons for the workers it leaves out.
set -u
source "$(dirname "$0")/support/ring_workers.sh" serve-cli
source "$(dirname "$0")/support/serve.sh"
command -v curl >/dev/null && command -v jq >/dev/null ||
    { echo "SKIPPED: curl and jq are needed"; exit 77; }

# POST a body: the answer in $tmp/body, the status in $code.
post() { # path body [curl options...]
    local path=$1 body=$2
    shift 2
    code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "$body" "$@" "http://127.0.0.1:$sport$path")
}
field() { jq -r "$1" "$tmp/body"; }
run_text() { "$prima" run -m "$model" -t 1 --no-display-prompt "$@" 2>/dev/null; }

# ---- usage errors
"$prima" serve -m "$model" --port x >/dev/null 2>&1
[ $? = 2 ] || fail "--port x: exit status"
"$prima" serve -m "$model" --api-key-file "$tmp/none" >/dev/null 2>&1
[ $? = 2 ] || fail "missing key file: exit status"

# ---- one device
start_server "$tmp/local.log" -m "$model" || exit 1

want=$(run_text -p "Once upon a time" -n 32 --temp 0)
post /v1/completions '{"prompt":"Once upon a time","max_tokens":32,"temperature":0}'
[ "$code" = 200 ] || fail "completion: status $code"
[ "$(field .choices[0].text)" = "$want" ] || fail "greedy completion: '$(field .choices[0].text)' vs run '$want'"
[ "$(field '.usage | "\(.prompt_tokens) \(.completion_tokens) \(.total_tokens)"')" = "5 32 37" ] ||
    fail "usage: $(field .usage)"
[ "$(field .choices[0].finish_reason)" = length ] || fail "finish_reason length"
[ "$(field .object)" = text_completion ] || fail "object"

want=$(run_text -p "Once upon a time" -n 24 --temp 0.8 --seed 7)
post /v1/completions '{"prompt":"Once upon a time","max_tokens":24,"temperature":0.8,"seed":7}'
[ "$(field .choices[0].text)" = "$want" ] || fail "seeded completion: '$(field .choices[0].text)' vs run '$want'"

# a stop string that spans two tokens ("little" " girl")
want=$(run_text -p "Once upon a time" --temp 0 --stop "le gi")
post /v1/completions '{"prompt":"Once upon a time","temperature":0,"stop":["xyz","le gi"]}'
[ "$(field .choices[0].text)" = "$want" ] && [ "$want" = ", there was a litt" ] ||
    fail "stop string: '$(field .choices[0].text)' vs run '$want'"
[ "$(field .choices[0].finish_reason)" = stop ] || fail "finish_reason stop"

# chat: streaming gives the same text as not streaming, in chunks, ending with [DONE]
chat='{"messages":[{"role":"system","content":"You tell stories."},{"role":"user","content":"Tell me a story."}],"max_tokens":20,"temperature":0'
post /v1/chat/completions "$chat}"
[ "$code" = 200 ] && [ "$(field .object)" = chat.completion ] || fail "chat: $code $(cat "$tmp/body")"
reply=$(field .choices[0].message.content)
[ "$(field .choices[0].message.role)" = assistant ] && [ -n "$reply" ] || fail "chat reply"
post /v1/chat/completions "$chat,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" -N
cp "$tmp/body" "$tmp/stream"
tail -c 14 "$tmp/stream" | cmp -s - <(printf 'data: [DONE]\n\n') || fail "stream end: $(tail -c 40 "$tmp/stream")"
sed -n 's/^data: \({.*\)$/\1/p' "$tmp/stream" >"$tmp/chunks"
[ "$(jq -j '.choices[0].delta.content // empty' "$tmp/chunks")" = "$reply" ] ||
    fail "streamed text differs: '$(jq -j '.choices[0].delta.content // empty' "$tmp/chunks")' vs '$reply'"
[ "$(head -1 "$tmp/chunks" | jq -r .choices[0].delta.role)" = assistant ] || fail "first chunk's role"
# the finish in the last chunk with a choice, the usage (asked for) in one of its own after it
[ "$(tail -2 "$tmp/chunks" | jq -sr '"\(.[0].choices[0].finish_reason) \(.[1].usage.completion_tokens) \(.[1].choices | length)"')" = "length 20 0" ] ||
    fail "last chunks: $(tail -2 "$tmp/chunks")"
[ "$(jq -s 'map(.object == "chat.completion.chunk") | all' "$tmp/chunks")" = true ] || fail "chunk object"

# the next turn reuses the cached conversation and answers as a fresh one does
next=$(jq -c --arg r "$reply" '.messages += [{"role":"assistant","content":$r},{"role":"user","content":"Another one."}]' <<<"$chat}")
post /v1/chat/completions "$next"
cached=$(field .usage.prompt_tokens_details.cached_tokens)
turn2=$(field .choices[0].message.content)
[ "$cached" -gt 20 ] || fail "next turn: $cached cached tokens"
post /v1/completions '{"prompt":"Something else","max_tokens":3}'
post /v1/chat/completions "$next"
[ "$(field .usage.prompt_tokens_details.cached_tokens)" -lt "$cached" ] || fail "cache after another prompt"
[ "$(field .choices[0].message.content)" = "$turn2" ] || fail "cached turn differs from a fresh one"

# log-probabilities: greedy picks the most likely token
post /v1/completions '{"prompt":"Once upon a time","max_tokens":6,"temperature":0,"logprobs":3}'
[ "$(field '.choices[0].logprobs.tokens | length')" = 6 ] || fail "logprobs tokens: $(cat "$tmp/body")"
[ "$(field '[.choices[0].logprobs as $l | range(6) | ($l.top_logprobs[.] | [.[]] | max) == $l.token_logprobs[.]] | all')" = true ] ||
    fail "greedy token is not the most likely: $(field .choices[0].logprobs)"
[ "$(field '.choices[0].logprobs.tokens | join("")')" = "$(field .choices[0].text)" ] || fail "logprob tokens spell the text"
post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"logprobs":true,"top_logprobs":2}'
[ "$(field '.choices[0].logprobs.content | map(.top_logprobs | length == 2) | length')" = 4 ] ||
    fail "chat logprobs: $(field .choices[0].logprobs)"

# errors
post /v1/chat/completions '{"messages": [ {"role": "user", '
[ "$code" = 400 ] && [ "$(field .error.type)" = invalid_request_error ] &&
    field .error.message | grep -q "malformed JSON" || fail "malformed JSON: $code $(cat "$tmp/body")"
post /v1/completions '{"prompt":"a","max_tokens":"many"}'
[ "$code" = 400 ] && [ "$(field .error.param)" = max_tokens ] || fail "wrong type: $code $(cat "$tmp/body")"
post /v1/completions '{"prompt":"a","n":3}'
[ "$code" = 400 ] && [ "$(field .error.param)" = n ] || fail "n = 3: $code"
post /v1/nothing '{}'
[ "$code" = 404 ] && [ "$(field .error.type)" = not_found_error ] || fail "404: $code"
code=$(curl -sS -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$sport/v1/completions")
[ "$code" = 405 ] || fail "GET on a POST endpoint: $code"
head -c $((9 << 20)) /dev/zero | tr '\0' ' ' >"$tmp/huge"
post /v1/completions "@$tmp/huge"
[ "$code" = 413 ] || fail "huge body: $code"
{ printf '{"prompt":"'; head -c $((8 << 20)) /dev/zero | tr '\0' ' '; printf '"}'; } >"$tmp/huge"
code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' \
    --data-binary "@$tmp/huge" "http://127.0.0.1:$sport/v1/completions")
[ "$code" = 413 ] || fail "huge chunked body: $code"
long=$(printf 'Once upon a time %.0s' $(seq 700))
post /v1/completions "{\"prompt\":\"$long\",\"max_tokens\":2}"
[ "$code" = 400 ] && [ "$(field .error.param)" = prompt ] && field .error.message | grep -q "context holds" ||
    fail "prompt over the context: $code $(cat "$tmp/body")"

# a slow client (one byte a second) holds its connection, not the server
body='{"prompt":"Once upon a time","max_tokens":8,"temperature":0}'
exec 3<>"/dev/tcp/127.0.0.1/$sport"
printf 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    ${#body} "${body:0:$((${#body} - 4))}" >&3
for i in 4 3 2 1; do
    sleep 1
    printf '%s' "${body:$((${#body} - i)):1}" >&3
    [ "$i" = 3 ] && { post /v1/completions "$body"; [ "$code" = 200 ] || fail "served beside a slow client: $code"; }
done
slow=$(timeout 10 cat <&3)
exec 3<&-
[ "$(sed -n '$p' <<<"$slow" | jq -r .choices[0].text)" = "$(field .choices[0].text)" ] ||
    fail "slow client's answer: $slow"

# 64 concurrent clients, two requests each: each answer equals its request's answer alone,
# and the server's memory comes back to where it was
req() { echo "{\"prompt\":\"Once upon a time $1\",\"max_tokens\":12,\"temperature\":0.9,\"seed\":$1}"; }
burst "$tmp/warm"
idle=$(rss)
burst "$tmp/many"
after=$(rss)
for n in $(seq 3 130); do
    post /v1/completions "$(req $n)"
    [ "$(jq -r .choices[0].text "$tmp/many/$n" 2>/dev/null)" = "$(field .choices[0].text)" ] ||
        { fail "concurrent request $n: $(head -c 300 "$tmp/many/$n") vs alone $(cat "$tmp/body")"; break; }
done
# (under ASan freed memory sits in its quarantine; its leak check at exit covers that build)
[ -n "${PRIMA_SANITIZE_FLAGS:-}" ] || [ $((after - idle)) -lt 8192 ] ||
    fail "memory after 64 clients: $idle kB -> $after kB"
echo "serve_cli: RSS after the first 64 clients ${idle} kB, after the second ${after} kB"
curl -s "http://127.0.0.1:$sport/metrics" >"$tmp/metrics"
grep -q '^prima_requests_total{endpoint="completions"} ' "$tmp/metrics" &&
    grep -q '^prima_tpot_seconds_bucket{le="+Inf"} ' "$tmp/metrics" &&
    grep -q '^prima_slots_busy 0$' "$tmp/metrics" || fail "metrics: $(head -20 "$tmp/metrics")"
stop_server "$tmp/local.log"

# with no queue, a request beside a running one is refused (429); a client that disconnects
# (here: mid-stream) stops its generation and frees the slot
slowmodel=$fixtures/models/synth-spm512-l4-e256-f32.gguf
start_server "$tmp/cancel.log" -m "$slowmodel" -c 4096 --queue 0 || exit 1
curl -sS -o /dev/null -H 'Content-Type: application/json' --max-time 60 --data-binary \
    '{"prompt":"Once upon a time","max_tokens":4000,"temperature":0}' \
    "http://127.0.0.1:$sport/v1/completions" &
busy=$!
for _ in $(seq 100); do
    [ "$(curl -s "http://127.0.0.1:$sport/health" | jq .slots.busy)" = 1 ] && break
    sleep 0.05
done
post /v1/completions '{"prompt":"Once","max_tokens":2}' -D "$tmp/headers"
[ "$code" = 429 ] && [ "$(field .error.type)" = rate_limit_error ] &&
    grep -qi '^retry-after: 1' "$tmp/headers" || fail "queue full: $code $(cat "$tmp/body")"
kill "$busy"
wait "$busy" 2>/dev/null
# noticed within a poll interval and a token, however fast tokens come (not seconds later)
for _ in $(seq 50); do grep -q "request 1: .*cancelled" "$tmp/cancel.log" && break; sleep 0.02; done
grep -q "request 1: .*cancelled" "$tmp/cancel.log" || fail "a client gone while waiting, after 1 s: $(cat "$tmp/cancel.log")"
curl -sS -N -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":4000,"temperature":0,"stream":true}' \
    "http://127.0.0.1:$sport/v1/completions" 2>/dev/null | head -c 3000 >/dev/null
for _ in $(seq 100); do grep -q "request 3: .*cancelled" "$tmp/cancel.log" && break; sleep 0.05; done
gen=$(sed -n 's/.*request 3: .* \([0-9]*\) generated .*cancelled$/\1/p' "$tmp/cancel.log")
[ -n "$gen" ] && [ "$gen" -lt 1000 ] || fail "mid-stream disconnect: $(grep 'request 3' "$tmp/cancel.log")"
curl -s "http://127.0.0.1:$sport/health" >"$tmp/body"
[ "$(field .slots.busy)" = 0 ] || fail "slot not freed: $(cat "$tmp/body")"
post /v1/completions '{"prompt":"Once","max_tokens":2}' --max-time 10
[ "$code" = 200 ] || fail "after a disconnect: $code"
stop_server "$tmp/cancel.log"

# at the connection limit (--queue 0: 64) a client gets 503 in OpenAI's error JSON, not a reset
start_server "$tmp/limit.log" -m "$model" --queue 0 --cors-origin http://app.example || exit 1
# (first, the browser's rules: a page of the allowed origin may call, after its preflight; a
# website whose name resolves here may not, nor may a text/plain body)
curl -sS -o /dev/null -D "$tmp/headers" -X OPTIONS -H 'Origin: http://app.example' \
    -H 'Access-Control-Request-Method: POST' "http://127.0.0.1:$sport/v1/completions"
grep -qi '^access-control-allow-origin: http://app.example' "$tmp/headers" ||
    fail "preflight of an allowed origin: $(cat "$tmp/headers")"
post /v1/completions '{"prompt":"Once","max_tokens":2}' -H 'Origin: http://elsewhere.example'
[ "$code" = 403 ] || fail "a foreign origin: $code $(cat "$tmp/body")"
code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -H 'Host: evil.example' "http://127.0.0.1:$sport/cluster")
[ "$code" = 403 ] || fail "Host evil.example: $code $(cat "$tmp/body")"
code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -d '{"prompt":"Once","max_tokens":2}' "http://127.0.0.1:$sport/v1/completions")
[ "$code" = 415 ] || fail "a form-encoded body: $code $(cat "$tmp/body")"
held=()
for _ in $(seq 64); do exec {fd}<>"/dev/tcp/127.0.0.1/$sport"; held+=("$fd"); done
sleep 0.3
code=$(curl -sS -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$sport/v1/models" 2>&1)
[ "$code" = 503 ] && field .error.message | grep -q "connections are open" ||
    fail "at the connection limit: $code $(cat "$tmp/body")"
for fd in "${held[@]}"; do exec {fd}<&-; done
for _ in $(seq 50); do
    code=$(curl -sS -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$sport/v1/models")
    [ "$code" = 200 ] && break
    sleep 0.1
done
[ "$code" = 200 ] || fail "after the connections closed: $code"
stop_server "$tmp/limit.log"

# control-token text a user types is plain text, not the template's control token (Llama 3)
llama3=$fixtures/models/synth-llama3-l2-e64-q8_0.gguf
start_server "$tmp/llama3.log" -m "$llama3" || exit 1
usage_of() { # content: the prompt tokens of a one-message chat
    post /v1/chat/completions "$(jq -nc --arg c "$1" '{messages:[{role:"user",content:$c}],max_tokens:1}')"
    field .usage.prompt_tokens
}
plain=$("$prima" tokenize -m "$llama3" --no-bos -p "<|eot_id|>" | wc -w)
base=$(usage_of "Hi")
typed=$(usage_of "Hi<|eot_id|>")
[ "$plain" -gt 1 ] && [ "$((typed - base))" = "$plain" ] ||
    fail "typed <|eot_id|>: $base -> $typed prompt tokens, plain text is $plain"
stop_server "$tmp/llama3.log"

# API keys
printf '  s3cret key \n' >"$tmp/key"
start_server "$tmp/key.log" -m "$model" --api-key-file "$tmp/key" || exit 1
post /v1/completions '{"prompt":"a","max_tokens":1}'
[ "$code" = 401 ] && [ "$(field .error.code)" = invalid_api_key ] || fail "no key: $code"
post /v1/completions '{"prompt":"a","max_tokens":1}' -H 'Authorization: Bearer s3cret'
[ "$code" = 401 ] || fail "wrong key: $code"
post /v1/completions '{"prompt":"a","max_tokens":1}' -H 'Authorization: Bearer s3cret key'
[ "$code" = 200 ] || fail "right key: $code"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$sport/health")" = 200 ] || fail "health without a key"
stop_server "$tmp/key.log"
"$prima" serve -m "$model" --host 0.0.0.0 --port 0 -t 1 >"$tmp/open.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q serving "$tmp/open.log" && break; sleep 0.05; done
grep -q "warning: listening on 0.0.0.0 without an API key" "$tmp/open.log" || fail "no warning for 0.0.0.0"
kill -TERM $! && wait $!

# a 3-device loopback ring: the same text; a lost worker is planned around (failover) and, back,
# rejoins at the next request; with --no-failover it is a 500 naming it, and serving resumes
start_worker "$model" "$tmp/w1.log" && p1=$port && start_worker "$model" "$tmp/w2.log" && p2=$port &&
    w2=${pids[-1]} || exit 1
ring=(--workers "127.0.0.1:$p1,127.0.0.1:$p2" -lw 2,2,1)
want=$(run_text -p "Once upon a time" -n 32 --temp 0)
devices() { curl -s "http://127.0.0.1:$sport/health" >"$tmp/body"; field '.ring.devices | length'; }
restart_w2() {   # each time with a log of its own (the old one says "listening" already)
    local log=$tmp/w2.$RANDOM$RANDOM.log
    "$prima" worker -m "$model" --host 127.0.0.1 --port "$p2" -t 1 >"$log" 2>&1 &
    w2=$!
    pids+=($w2)
    for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.05; done
}
start_server "$tmp/ring.log" -m "$model" "${ring[@]}" || exit 1
post /v1/completions '{"prompt":"Once upon a time","max_tokens":32,"temperature":0}'
[ "$(field .choices[0].text)" = "$want" ] || fail "ring completion: '$(field .choices[0].text)' vs '$want'"
curl -s "http://127.0.0.1:$sport/health" >"$tmp/body"
[ "$(field '.ring.devices | map(.window) | join(",")')" = 2,2,1 ] || fail "health devices: $(cat "$tmp/body")"
curl -s "http://127.0.0.1:$sport/cluster" >"$tmp/body"
[ "$(field '[.devices[] | "\(.window)@\(.addr)"] | join(",")')" = "2@head (this device),2@127.0.0.1:$p1,1@127.0.0.1:$p2" ] &&
    [ "$(field '.generated_tokens > 0 and .devices[1].compute_seconds > 0 and .devices[2].mem_budget > 0')" = true ] &&
    [ "$(field '.left_out | length')" = 0 ] || fail "cluster: $(cat "$tmp/body")"
# memory in use from the counters: the resident share of each device's windows, in its budget
[ "$(field '[.devices[] | .resident_bytes > 0 and .resident_bytes <= .weight_bytes and .resident_bytes < .mem_budget] | all')" = true ] ||
    fail "cluster memory in use: $(field '[.devices[] | {resident_bytes, weight_bytes, mem_budget}]')"
{ kill -9 "$w2"; wait "$w2"; } 2>/dev/null
post /v1/completions '{"prompt":"Once upon a time","max_tokens":32,"temperature":0}'
[ "$code" = 200 ] && [ "$(field .choices[0].text)" = "$want" ] ||
    fail "failover: $code $(cat "$tmp/body")"
grep -q "^prima: lost device 2 (127.0.0.1:$p2)" "$tmp/ring.log" || fail "no failover line: $(cat "$tmp/ring.log")"
[ "$(devices)" = 2 ] || fail "health after the loss: $(cat "$tmp/body")"
restart_w2
post /v1/completions '{"prompt":"Once upon a time","max_tokens":32,"temperature":0}'
[ "$code" = 200 ] && [ "$(field .choices[0].text)" = "$want" ] || fail "after the rejoin: $code $(cat "$tmp/body")"
[ "$(devices)" = 3 ] || fail "health after the rejoin: $(cat "$tmp/body")"
stop_server "$tmp/ring.log"
start_server "$tmp/ring2.log" -m "$model" "${ring[@]}" --no-failover || exit 1
{ kill -9 "$w2"; wait "$w2"; } 2>/dev/null
post /v1/completions '{"prompt":"Once upon a time","max_tokens":32,"temperature":0}'
[ "$code" = 500 ] && [ "$(field .error.type)" = server_error ] && field .error.message | grep -q "device 2" ||
    fail "lost worker: $code $(cat "$tmp/body")"
code=$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$sport/health")
[ "$code" = 503 ] && [ "$(field .ring.state)" = lost ] || fail "health after the loss: $code $(cat "$tmp/body")"
restart_w2
post /v1/completions '{"prompt":"Once upon a time","max_tokens":32,"temperature":0}'
[ "$code" = 200 ] && [ "$(field .choices[0].text)" = "$want" ] || fail "after the worker is back: $code $(cat "$tmp/body")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$sport/health")" = 200 ] || fail "health when back"
curl -s "http://127.0.0.1:$sport/metrics" | grep -q '^prima_device_compute_seconds_total{device="2"} ' ||
    fail "per-device metrics"
stop_server "$tmp/ring2.log"

# Halda plans the ring: on loopback, with one request at a time and devices alike, a worker's
# layers only add hops, so it is left out; /cluster gives Halda's own reason for each
start_server "$tmp/halda.log" -m "$model" --workers "127.0.0.1:$p1,127.0.0.1:$p2" || exit 1
post /v1/completions '{"prompt":"Once upon a time","max_tokens":4,"temperature":0}'
curl -s "http://127.0.0.1:$sport/cluster" >"$tmp/body"
[ "$(field '(.devices | length) + (.left_out | length)')" = 3 ] && [ "$(field '.left_out | length')" -gt 0 ] &&
    [ "$(field '[.left_out[].why | test("^(left out|forwards only): .* ms per token")] | all')" = true ] ||
    fail "left out by Halda: $(field '{devices: [.devices[].addr], left_out}')"
stop_server "$tmp/halda.log"

# prima bench serve: a row per figure and client count, the ratios against one client
"$prima" bench serve -m "$model" --devices 2 --clients 1,2 --requests 1 --tokens 8 -t 1 --json \
    >"$tmp/bench" 2>"$tmp/bench.err" || fail "bench serve: $(cat "$tmp/bench.err")"
[ "$(jq -s 'map(.op) | join(",")' "$tmp/bench")" = '"serve aggregate 1,serve tpot 1,serve ratio aggregate 1,serve ratio tpot 1,serve aggregate 2,serve tpot 2,serve ratio aggregate 2,serve ratio tpot 2"' ] &&
    [ "$(jq -s 'map(.value > 0) | all' "$tmp/bench")" = true ] &&
    [ "$(jq -s '.[2].value' "$tmp/bench")" = 1 ] || fail "bench serve rows: $(cat "$tmp/bench")"
# ... on workers of its own choosing (an emulated cluster's): the ring's workers, the same rows
"$prima" bench serve -m "$model" "${ring[@]}" --clients 1 --requests 1 --tokens 8 -t 1 --json \
    >"$tmp/bench" 2>"$tmp/bench.err" || fail "bench serve --workers: $(cat "$tmp/bench.err")"
[ "$(jq -s 'map(.op) | join(",")' "$tmp/bench")" = '"serve aggregate 1,serve tpot 1,serve ratio aggregate 1,serve ratio tpot 1"' ] ||
    fail "bench serve --workers rows: $(cat "$tmp/bench")"
"$prima" bench serve -m "$model" "${ring[@]}" --devices 3 >/dev/null 2>"$tmp/bench.err"
[ $? = 2 ] && grep -q -- "--devices and --workers" "$tmp/bench.err" || fail "bench serve --devices --workers: $(cat "$tmp/bench.err")"

[ "$fails" = 0 ] && echo "serve_cli: all passed"
exit $((fails > 0))
