#!/bin/bash
# The chat template in use: prima run -cnv and prima serve's chat endpoint tokenize the
# conversation as the Jinja template renders it (--chat-template FILE here; stories260K has no
# template of its own), control tokens parsed; POST /apply-template answers the rendering of a
# case byte for byte as jinja2 made it (the fixtures), a template's raise_exception is a 400
# with its message, on /apply-template and on the chat endpoint alike.
set -u
source "$(dirname "$0")/support/ring_workers.sh" chat-template
source "$(dirname "$0")/support/serve.sh"
command -v curl >/dev/null && command -v jq >/dev/null ||
    { echo "SKIPPED: curl and jq are needed"; exit 77; }
templates=$fixtures/templates
[ -d "$templates" ] || { echo "SKIPPED: no chat-template fixtures at $templates"; exit 77; }
qwen=$templates/Qwen-Qwen3-0.6B.jinja
gemma=$templates/google-gemma-2-2b-it.jinja

post() { # path body
    code=$(curl -sS -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "$2" "http://127.0.0.1:$sport$1")
}
# The prompt's token count: the rendering tokenized with its control tokens, and BOS once
# (Gemma's template writes bos_token itself; the vocabulary adds none then).
count_tokens() { # template case.json
    "$prima" template -m "$model" --chat-template "$1" --input "$2" >"$tmp/prompt.txt" || return
    local no_bos=
    [ "$(head -c 3 "$tmp/prompt.txt")" = "<s>" ] && no_bos=--no-bos
    "$prima" tokenize -m "$model" -f "$tmp/prompt.txt" --parse-special $no_bos | wc -w
}

# ---- prima run -cnv: the prompt is the template's (Gemma's, unlike any built-in format)
printf '{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true}' >"$tmp/hi.json"
want=$(count_tokens "$gemma" "$tmp/hi.json")
[ "$(head -c 3 "$tmp/prompt.txt")" = "<s>" ] || fail "the Gemma prompt does not start with the model's BOS"
printf 'hi\n/exit\n' | "$prima" run -m "$model" -t 1 -cnv -n 2 --temp 0 --chat-template "$gemma" \
    >/dev/null 2>"$tmp/run.err" || fail "run -cnv: exit status $? ($(tail -3 "$tmp/run.err"))"
grep -q "chat format: the chat template given" "$tmp/run.err" || fail "run -cnv: format not said"
got=$(sed -n 's/.*prompt \([0-9]*\) tokens.*/\1/p' "$tmp/run.err")
[ "$got" = "$want" ] || fail "run -cnv: prompt of $got tokens, the template's has $want"
printf 'hi\n/exit\n' | "$prima" run -m "$model" -t 1 -cnv -n 2 --chat-template "$tmp/none.jinja" \
    >/dev/null 2>"$tmp/run.err"
[ $? = 1 ] && grep -q "none.jinja" "$tmp/run.err" || fail "run: a missing --chat-template: $(cat "$tmp/run.err")"
printf '{%% if %%}' >"$tmp/bad.jinja"
printf 'hi\n/exit\n' | "$prima" run -m "$model" -t 1 -cnv -n 2 --chat-template "$tmp/bad.jinja" \
    >/dev/null 2>"$tmp/run.err"
[ $? = 1 ] && grep -q "bad.jinja: chat template: line 1: expected an expression" "$tmp/run.err" ||
    fail "run: a template that does not parse: $(cat "$tmp/run.err")"

# ---- prima serve with Qwen3's template: /apply-template equals jinja2's renderings
start_server "$tmp/qwen.log" -m "$model" --chat-template "$qwen" || exit 1
grep -q "chat format: the chat template given" "$tmp/qwen.log" || fail "serve: format not said"
n=0
for json in "$templates"/Qwen-Qwen3-0.6B.*.json; do
    post /apply-template "$(cat "$json")"
    [ "$code" = 200 ] || { fail "$(basename "$json"): status $code: $(cat "$tmp/body")"; continue; }
    jq -j .prompt "$tmp/body" >"$tmp/got.txt"
    cmp -s "$tmp/got.txt" "${json%.json}.txt" || fail "$(basename "$json"): /apply-template differs from jinja2's"
    n=$((n + 1))
done
[ $n -gt 0 ] || fail "no Qwen3 cases"
post /apply-template '[1]'
[ "$code" = 400 ] || fail "/apply-template with a list: status $code"
stop_server "$tmp/qwen.log"

# ---- Gemma 2's template refuses a system message: a 400 with its message
start_server "$tmp/gemma.log" -m "$model" --chat-template "$gemma" || exit 1
post /apply-template "$(cat "$templates/google-gemma-2-2b-it.01_system_user.json")"
[ "$code" = 400 ] && grep -q "System role not supported" "$tmp/body" ||
    fail "/apply-template raising: status $code: $(cat "$tmp/body")"
post /v1/chat/completions '{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],"max_tokens":2}'
[ "$code" = 400 ] && grep -q "System role not supported" "$tmp/body" ||
    fail "chat with a system message: status $code: $(cat "$tmp/body")"
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":0}'
[ "$code" = 200 ] || fail "chat: status $code: $(cat "$tmp/body")"
[ "$(jq -r .usage.prompt_tokens "$tmp/body")" = "$want" ] ||
    fail "chat: $(jq -r .usage.prompt_tokens "$tmp/body") prompt tokens, the template's prompt has $want"
post /apply-template "$(cat "$templates/google-gemma-2-2b-it.02_multi_turn.json")"
jq -j .prompt "$tmp/body" >"$tmp/got.txt"
cmp -s "$tmp/got.txt" "$templates/google-gemma-2-2b-it.02_multi_turn.txt" || fail "gemma multi-turn differs"
stop_server "$tmp/gemma.log"

[ $fails -eq 0 ] || exit 1
echo "chat_template_serve: $n cases through /apply-template; all checks passed"
