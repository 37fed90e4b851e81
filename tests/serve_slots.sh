#!/bin/bash
# prima serve with several slots (-np): 64 concurrent clients (bounded loops) against -np 4, each
# answer equal to its solo answer (greedy and seeded) and to prima run's, memory back to its
# level; a slot freed when its client disconnects while others go on; a long prompt's prefill
# in chunks of at most -b interleaved with another slot's decoding (seen in the --stats step
# events and /metrics); the prompt cache per slot (a chat's next turn finds its slot although
# another conversation ran meanwhile); -np refused where it cannot work; a 3-device loopback ring
# with four slots pipelined (a micro-batch in flight per device), and a worker lost and back.
set -u
source "$(dirname "$0")/support/ring_workers.sh" serve-slots
source "$(dirname "$0")/support/serve.sh"
command -v curl >/dev/null && command -v jq >/dev/null ||
    { echo "SKIPPED: curl and jq are needed"; exit 77; }

post() { # path body [curl options...]: the answer in $tmp/body, the status in $code
    local path=$1 body=$2
    shift 2
    code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "$body" "$@" "http://127.0.0.1:$sport$path")
}
field() { jq -r "$1" "$tmp/body"; }
metric() { curl -s "http://127.0.0.1:$sport/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
busy() { curl -s "http://127.0.0.1:$sport/health" | jq .slots.busy; }

# ---- usage: -np out of range, or with what keeps one sequence
"$prima" serve -m "$model" -np 0 >/dev/null 2>&1
[ $? = 2 ] || fail "-np 0: exit status"
"$prima" serve -m "$model" -np 2 -ngl 1 2>"$tmp/err" >/dev/null
[ $? = 2 ] && grep -q -- "-np 2: GPU layers" "$tmp/err" || fail "-np 2 with -ngl: $(cat "$tmp/err")"
"$prima" serve -m "$model" -np 2 --spec ngram 2>"$tmp/err" >/dev/null
[ $? = 2 ] && grep -q -- "-np 2: speculative" "$tmp/err" || fail "-np 2 with --spec: $(cat "$tmp/err")"

together() { # directory n...: the requests `req n` all at once, each answer in directory/n
    local dir=$1 cpids=()
    shift
    mkdir -p "$dir"
    for n in "$@"; do
        curl -sS --max-time 120 -H 'Content-Type: application/json' --data-binary "$(req $n)" \
            "http://127.0.0.1:$sport/v1/completions" >"$dir/$n" 2>&1 &
        cpids+=($!)
    done
    wait "${cpids[@]}"
}

# ---- 64 clients, two requests each, against four slots
start_server "$tmp/np4.log" -m "$model" -np 4 || exit 1
[ "$(curl -s "http://127.0.0.1:$sport/health" | jq .slots.total)" = 4 ] || fail "health: slots total"
req() { # n: odd n greedy, even n seeded
    if [ $(($1 % 2)) = 1 ]; then
        echo "{\"prompt\":\"Once upon a time $1\",\"max_tokens\":24,\"temperature\":0}"
    else
        echo "{\"prompt\":\"Once upon a time $1\",\"max_tokens\":24,\"temperature\":0.9,\"seed\":$1}"
    fi
}
burst "$tmp/warm"
idle=$(rss)
burst "$tmp/many"
after=$(rss)
[ "$(metric prima_steps_total)" -gt 0 ] && [ "$(metric 'prima_step_rows_total{kind="decode"}')" -gt 0 ] ||
    fail "step metrics: $(curl -s "http://127.0.0.1:$sport/metrics" | grep step)"
# several slots decoded together: fewer steps than decoded rows
[ "$(metric prima_steps_total)" -lt "$(metric 'prima_step_rows_total{kind="decode"}')" ] ||
    fail "no step decoded more than one slot: $(curl -s "http://127.0.0.1:$sport/metrics" | grep step)"
for n in $(seq 3 130); do
    post /v1/completions "$(req $n)"   # alone now
    [ "$(jq -r .choices[0].text "$tmp/many/$n" 2>/dev/null)" = "$(field .choices[0].text)" ] &&
        [ "$(jq -r .choices[0].text "$tmp/warm/$n" 2>/dev/null)" = "$(field .choices[0].text)" ] ||
        { fail "concurrent request $n: $(head -c 300 "$tmp/many/$n") vs alone $(cat "$tmp/body")"; break; }
done
for n in 7 8; do   # and prima run's
    seed=$([ $((n % 2)) = 1 ] && echo "--temp 0" || echo "--temp 0.9 --seed $n")
    want=$("$prima" run -m "$model" -t 1 --no-display-prompt -p "Once upon a time $n" -n 24 $seed 2>/dev/null)
    [ "$(jq -r .choices[0].text "$tmp/many/$n")" = "$want" ] ||
        fail "request $n vs prima run: '$(jq -r .choices[0].text "$tmp/many/$n")' vs '$want'"
done
[ -n "${PRIMA_SANITIZE_FLAGS:-}" ] || [ $((after - idle)) -lt 8192 ] ||
    fail "memory after 64 clients: $idle kB -> $after kB"
echo "serve_slots: RSS after the first 64 clients ${idle} kB, after the second ${after} kB"
[ "$(busy)" = 0 ] || fail "slots busy after the clients"

# ---- the prompt cache per slot: a conversation's next turn finds its slot
chat_a='{"messages":[{"role":"user","content":"Tell me a story about a cat."}],"max_tokens":16,"temperature":0}'
post /v1/chat/completions "$chat_a"
reply=$(field .choices[0].message.content)
first=$(field .usage.prompt_tokens)
post /v1/chat/completions '{"messages":[{"role":"user","content":"Something else entirely, please."}],"max_tokens":16}'
next=$(jq -c --arg r "$reply" '.messages += [{"role":"assistant","content":$r},{"role":"user","content":"More."}]' <<<"$chat_a")
post /v1/chat/completions "$next"
[ "$(field .usage.prompt_tokens_details.cached_tokens)" -ge "$first" ] ||
    fail "next turn after another conversation: $(field .usage) (first turn $first tokens)"
stop_server "$tmp/np4.log"

# ---- more generating slots than a batch has rows (-b 2): every slot gets its turn, prompts go
# in two tokens at a time, and the answers are the same
start_server "$tmp/b2.log" -m "$model" -np 4 -b 2 || exit 1
together "$tmp/b2" $(seq 3 10)
for n in $(seq 3 10); do
    [ "$(jq -r .choices[0].text "$tmp/b2/$n" 2>/dev/null)" = "$(jq -r .choices[0].text "$tmp/many/$n")" ] ||
        { fail "-b 2, request $n: $(head -c 300 "$tmp/b2/$n") vs $(head -c 300 "$tmp/many/$n")"; break; }
done
stop_server "$tmp/b2.log"

# ---- a long prompt (chunks of -b 16) beside a slot that is generating; a client that leaves
slow=$fixtures/models/synth-spm512-l4-e256-f32.gguf
start_server "$tmp/np2.log" -m "$slow" -np 2 -b 16 -c 4096 --stats "$tmp/stats" || exit 1
curl -sS -N -H 'Content-Type: application/json' --max-time 60 --data-binary \
    '{"prompt":"Once upon a time","max_tokens":3000,"temperature":0,"stream":true}' \
    "http://127.0.0.1:$sport/v1/completions" >"$tmp/long_stream" 2>/dev/null &
streamer=$!
for _ in $(seq 200); do [ -s "$tmp/long_stream" ] && break; sleep 0.02; done
long=$(printf 'the cat sat on the mat %.0s' $(seq 40))
post /v1/completions "{\"prompt\":\"$long\",\"max_tokens\":4,\"temperature\":0}" --max-time 60
[ "$code" = 200 ] || fail "long prompt beside a generating slot: $code $(cat "$tmp/body")"
plen=$(field .usage.prompt_tokens)
# every step: at most one chunk of at most 16 prompt tokens; while the long prompt went in, the
# other slot decoded in the same steps
jq -s --argjson p "$plen" '
    [.[] | select(.event == "step")] as $s
    | ($s | map(.prefill_rows <= 16) | all) and
      ([$s[] | select(.prefill_rows > 0 and .decode_rows > 0)] | length) >= (($p - 1) / 16 | floor)' \
    "$tmp/stats" | grep -qx true ||
    fail "prefill not interleaved in -b chunks ($plen prompt tokens): $(jq -c 'select(.event == "step") | [.decode_rows, .prefill_rows]' "$tmp/stats" | head -40 | tr '\n' ' ')"
[ "$(metric prima_steps_mixed_total)" -gt 0 ] || fail "metrics: no mixed steps"
[ "$(busy)" = 1 ] || fail "the generating slot is not busy: $(busy)"
kill "$streamer"
wait "$streamer" 2>/dev/null
# the slot is free within a poll interval and a step, and serves the next request
for _ in $(seq 100); do [ "$(busy)" = 0 ] && break; sleep 0.02; done
[ "$(busy)" = 0 ] || fail "slot not freed after a disconnect: $(busy) busy"
grep -q "request 1: .* cancelled" "$tmp/np2.log" || fail "no cancelled request: $(cat "$tmp/np2.log")"
post /v1/completions '{"prompt":"Once","max_tokens":2}' --max-time 10
[ "$code" = 200 ] || fail "after a disconnect: $code"
stop_server "$tmp/np2.log"

# ---- a 3-device loopback ring with four slots: the slots spread over a micro-batch per device,
# kept in flight together (pipelining); answers as alone and as prima run's; a lost worker
# fails the requests running (no failover with several slots) and serving resumes once it is
# back (the slots' sequences opened again on the new ring)
start_worker "$model" "$tmp/w1.log" && p1=$port && start_worker "$model" "$tmp/w2.log" && p2=$port &&
    w2=${pids[-1]} || exit 1
start_server "$tmp/ring.log" -m "$model" --workers "127.0.0.1:$p1,127.0.0.1:$p2" -lw 2,2,1 -np 4 \
    --stats "$tmp/ring_stats" || exit 1
together "$tmp/ring" $(seq 3 18)
for n in $(seq 3 18); do
    post /v1/completions "$(req $n)"
    [ "$(jq -r .choices[0].text "$tmp/ring/$n" 2>/dev/null)" = "$(field .choices[0].text)" ] ||
        { fail "ring, concurrent request $n: $(head -c 300 "$tmp/ring/$n") vs alone $(cat "$tmp/body")"; break; }
done
for n in 7 8; do
    seed=$([ $((n % 2)) = 1 ] && echo "--temp 0" || echo "--temp 0.9 --seed $n")
    want=$("$prima" run -m "$model" -t 1 --no-display-prompt -p "Once upon a time $n" -n 24 $seed 2>/dev/null)
    [ "$(jq -r .choices[0].text "$tmp/ring/$n")" = "$want" ] ||
        fail "ring request $n vs prima run: '$(jq -r .choices[0].text "$tmp/ring/$n")' vs '$want'"
done
[ "$(jq -s '[.[] | select(.event == "step") | .in_flight] | max' "$tmp/ring_stats")" = 3 ] ||
    fail "micro-batches in flight together: $(jq -c 'select(.event == "step") | .in_flight' "$tmp/ring_stats" | sort | uniq -c | tr '\n' ' ')"
{ kill -9 "$w2"; wait "$w2"; } 2>/dev/null
post /v1/completions "$(req 3)"
[ "$code" = 500 ] && field .error.message | grep -q "device 2" || fail "lost worker, -np 4: $code $(cat "$tmp/body")"
"$prima" worker -m "$model" --host 127.0.0.1 --port "$p2" -t 1 >"$tmp/w2b.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$tmp/w2b.log" && break; sleep 0.05; done
post /v1/completions "$(req 3)"
[ "$code" = 200 ] && [ "$(field .choices[0].text)" = "$(jq -r .choices[0].text "$tmp/ring/3")" ] ||
    fail "after the worker is back, -np 4: $code $(cat "$tmp/body")"
stop_server "$tmp/ring.log"

[ "$fails" = 0 ] && echo "serve_slots: all passed"
exit $((fails > 0))
