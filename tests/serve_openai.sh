#!/bin/bash
# The official openai npm client (web/test, installed by scripts/deps.sh --test with npm ci) against
# prima serve at the head of a 3-device loopback ring: chat and completions, streaming and not,
# stop strings, max_tokens, usage, errors; every text equals prima run's for the same seed.
set -u
source "$(dirname "$0")/support/ring_workers.sh" serve-openai
source "$(dirname "$0")/support/serve.sh"
web=$(cd "$(dirname "$0")/../web/test" && pwd)
command -v node >/dev/null && [ -d "$web/node_modules/openai" ] ||
    { echo "SKIPPED: node or $web/node_modules/openai missing (npm ci in web/test; scripts/deps.sh --test does)"; exit 77; }

start_worker "$model" "$tmp/w1.log" && p1=$port && start_worker "$model" "$tmp/w2.log" && p2=$port || exit 1
ring=(--workers "127.0.0.1:$p1,127.0.0.1:$p2" -lw 2,2,1)
run_text() { "$prima" run -m "$model" -t 1 --no-display-prompt "$@" 2>"$tmp/run.err"; }
prompt="Once upon a time"
system="You tell stories."
user="Tell me one about a cat."
greedy=$(run_text "${ring[@]}" -p "$prompt" -n 32 --temp 0)
seeded=$(run_text "${ring[@]}" -p "$prompt" -n 24 --temp 0.8 --seed 7)
stop=$(run_text "${ring[@]}" -p "$prompt" --temp 0 --stop "le gi")
# the model has no chat template: the server uses ChatML, written out here for prima run
printf -v rendered '<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$system" "$user"
chat=$(run_text "${ring[@]}" -p "$rendered" -n 24 --temp 0)
chat_tokens=$(sed -n 's/.*prompt \([0-9]*\) tokens.*/\1/p' "$tmp/run.err")
jq -n --arg prompt "$prompt" --arg greedy "$greedy" --arg seeded "$seeded" --arg stop "$stop" \
    --arg system "$system" --arg user "$user" --arg chat "$chat" --argjson ct "$chat_tokens" \
    '{prompt: $prompt, prompt_tokens: 5, greedy: $greedy, seeded: $seeded, stop: $stop,
      system: $system, user: $user, chat: $chat, chat_prompt_tokens: $ct}' >"$tmp/want.json"

start_server "$tmp/serve.log" -m "$model" "${ring[@]}" --api-key test-key || exit 1
timeout 120 node "$web/openai.test.mjs" "http://127.0.0.1:$sport" test-key "$tmp/want.json" ||
    fail "openai client checks (above); server log: $(tail -5 "$tmp/serve.log")"
stop_server "$tmp/serve.log"
[ "$fails" = 0 ] && echo "serve_openai: all passed"
exit $((fails > 0))
