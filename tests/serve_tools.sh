#!/bin/bash
# Tool calls and constrained output through prima serve on random-weight fixture models, whose
# output follows no format on its own: with tool_choice required (or a named function) every
# answer is a call whose arguments validate against the function's schema (Python's
# jsonschema, independent of the server), streamed deltas reassemble into the same call as the
# answer with the same seed, a replayed agent conversation (assistant tool_calls with content
# null, a tool result) is accepted; response_format json_schema output parses and validates,
# json_object gives an object, a GBNF grammar is followed; what cannot be compiled is a 400
# naming the field. Models: qwen2 (its template writes Hermes <tool_call>), llama (its Llama 3
# template), gpt-oss (no template: its architecture names the format).
set -u
source "$(dirname "$0")/support/ring_workers.sh" serve-tools
source "$(dirname "$0")/support/serve.sh"
python3 -c 'import jsonschema' 2>/dev/null ||
    { echo "SKIPPED: python3-jsonschema missing (scripts/deps.sh --test installs it)"; exit 77; }

# validate SCHEMA_JSON INSTANCE_JSON: exit 0 when the instance is valid.
validate() {
    python3 -c 'import json, sys, jsonschema
jsonschema.validate(json.loads(sys.argv[2]), json.loads(sys.argv[1]))' "$1" "$2" 2>"$tmp/invalid"
}

post() { # body -> the answer on stdout, the status in $tmp/status
    curl -sS --max-time 120 -o "$tmp/answer" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "$1" "http://127.0.0.1:$sport/v1/chat/completions" >"$tmp/status"
    cat "$tmp/answer"
}

weather='{"type":"object","properties":{"city":{"type":"string","maxLength":16},
  "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1},
  "when":{"type":"string","format":"date"}},"required":["city","unit"],"additionalProperties":false}'
search='{"type":"object","properties":{"q":{"type":"string","maxLength":10},
  "tags":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":2}},"required":["q","tags"]}'
tools=$(jq -nc --argjson w "$weather" --argjson s "$search" '[
  {type:"function",function:{name:"get_weather",description:"Weather for a city",parameters:$w}},
  {type:"function",function:{name:"search",parameters:$s}}]')

# check_calls ANSWER: every call names a tool and its arguments validate; echoes the count.
check_calls() {
    local n i name args schema
    n=$(jq '.choices[0].message.tool_calls | length' <<<"$1")
    [ "$(jq -r '.choices[0].finish_reason' <<<"$1")" = tool_calls ] || fail "finish_reason: $1"
    for ((i = 0; i < n; i++)); do
        name=$(jq -r ".choices[0].message.tool_calls[$i].function.name" <<<"$1")
        args=$(jq -r ".choices[0].message.tool_calls[$i].function.arguments" <<<"$1")
        case $name in
        get_weather) schema=$weather ;;
        search) schema=$search ;;
        *) fail "call to an unknown function '$name'"; continue ;;
        esac
        validate "$schema" "$args" || fail "$name arguments $args: $(tail -1 "$tmp/invalid")"
    done
    echo "$n"
}

# The calls of a stream, reassembled as OpenAI's clients do (by index: id and name once,
# arguments concatenated), as [{name, arguments}].
reassemble() {
    sed -n 's/^data: //p' | grep -v '^\[DONE\]' |
        jq -s '[.[].choices[0].delta.tool_calls // [] | .[]] | group_by(.index) |
               map({name: (map(.function.name // "") | add), arguments: (map(.function.arguments // "") | add)})'
}

models=(synth-qwen2-l2-e64-q8_0 synth-llama3-l2-e64-q8_0 synth-gptoss-l4-e64-mxfp4)
for m in "${models[@]}"; do
    start_server "$tmp/serve-$m.log" -m "$fixtures/models/$m.gguf" || continue
    calls=0
    for seed in 1 2 3 4 5 6; do
        choice='"required"'
        [ "$seed" -gt 4 ] && choice='{"type":"function","function":{"name":"search"}}'
        body=$(jq -nc --argjson t "$tools" --argjson c "$choice" --argjson s "$seed" \
            '{messages:[{role:"user",content:"What is the weather in Paris?"}],tools:$t,
              tool_choice:$c,max_tokens:300,seed:$s,temperature:1}')
        a=$(post "$body")
        [ "$(cat "$tmp/status")" = 200 ] || { fail "$m seed $seed: $(cat "$tmp/status") $a"; continue; }
        n=$(check_calls "$a" | tail -1)
        [ "$n" -ge 1 ] 2>/dev/null || fail "$m seed $seed: no tool call: $a"
        calls=$((calls + ${n:-0}))
        if [ "$seed" -gt 4 ]; then
            [ "$(jq -r '[.choices[0].message.tool_calls[].function.name] | unique | join(",")' <<<"$a")" = search ] ||
                fail "$m: a named function, but $(jq -c .choices[0].message.tool_calls <<<"$a")"
        fi
        # the same request streamed: the deltas reassemble into the same calls
        streamed=$(curl -sSN --max-time 120 -H 'Content-Type: application/json' \
            --data-binary "$(jq -c '.stream = true' <<<"$body")" \
            "http://127.0.0.1:$sport/v1/chat/completions" | reassemble)
        whole=$(jq -c '[.choices[0].message.tool_calls[].function | {name, arguments}]' <<<"$a")
        [ "$(jq -c . <<<"$streamed")" = "$whole" ] || fail "$m seed $seed: streamed $streamed, whole $whole"
    done
    echo "$m: $calls calls, all valid"

    # an agent's conversation replayed: a call (content null) and its result
    replay=$(jq -nc --argjson t "$tools" '{messages:[{role:"user",content:"Weather?"},
        {role:"assistant",content:null,tool_calls:[{id:"call_1",type:"function",
          function:{name:"get_weather",arguments:"{\"city\":\"Oslo\",\"unit\":\"celsius\"}"}}]},
        {role:"tool",tool_call_id:"call_1",content:"{\"temp\": 21}"}],tools:$t,max_tokens:8,seed:1}')
    a=$(post "$replay")
    [ "$(cat "$tmp/status")" = 200 ] || fail "$m: replayed conversation: $(cat "$tmp/status") $a"

    # response_format json_schema (strict): the content parses and validates
    schema='{"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0},
      "kind":{"anyOf":[{"const":"cat"},{"type":"null"}]},"born":{"type":"string","format":"date-time"}},
      "required":["name","age","kind","born"],"additionalProperties":false}'
    for seed in 1 2 3; do
        a=$(post "$(jq -nc --argjson s "$schema" --argjson seed "$seed" '{messages:[{role:"user",content:"A pet."}],
            response_format:{type:"json_schema",json_schema:{name:"pet",strict:true,schema:$s}},max_tokens:300,seed:$seed}')")
        content=$(jq -r '.choices[0].message.content' <<<"$a")
        validate "$schema" "$content" || fail "$m json_schema seed $seed: '$content': $(tail -1 "$tmp/invalid")"
        [ "$(jq -r '.choices[0].finish_reason' <<<"$a")" = stop ] || fail "$m json_schema: not ended by the grammar: $a"
    done
    a=$(post '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"},"max_tokens":64,"seed":2}')
    content=$(jq -r '.choices[0].message.content' <<<"$a")
    # cut short by max_tokens it may be unfinished; what there is must be an object's start
    [ "${content:0:1}" = "{" ] || fail "$m json_object: '$content'"
    a=$(post '{"messages":[{"role":"user","content":"x"}],"grammar":"root ::= (\"yes\" | \"no\") \", \" [0-9]{2} # two digits","max_tokens":30,"seed":5}')
    [[ "$(jq -r '.choices[0].message.content' <<<"$a")" =~ ^(yes|no),\ [0-9]{2}$ ]] || fail "$m grammar: $a"
    stop_server "$tmp/serve-$m.log"
done

# A model whose template knows <think> (Qwen3's, given to the qwen2 model): reasoning it opens
# itself, without tools, goes to reasoning_content (a grammar makes the random model write it).
start_server "$tmp/serve-think.log" -m "$fixtures/models/${models[0]}.gguf" \
    --chat-template "$fixtures/templates/Qwen-Qwen3-0.6B.jinja" || exit 1
a=$(post '{"messages":[{"role":"user","content":"x"}],"grammar":"root ::= \"<think>\" [a-z]{3,8} \"</think>\" [a-z]{3,8}","max_tokens":40,"seed":3}')
[[ "$(jq -r '.choices[0].message.reasoning_content' <<<"$a")" =~ ^[a-z]{3,8}$ &&
   "$(jq -r '.choices[0].message.content' <<<"$a")" =~ ^[a-z]{3,8}$ ]] || fail "reasoning of a <think> template: $a"
stop_server "$tmp/serve-think.log"

# refusals, each a 400 naming the field
start_server "$tmp/serve.log" -m "$fixtures/models/${models[0]}.gguf" || exit 1
refuse() { # body field message-part
    local a
    a=$(post "$1")
    [ "$(cat "$tmp/status")" = 400 ] && [ "$(jq -r .error.param <<<"$a")" = "$2" ] &&
        grep -qF -- "$3" <<<"$(jq -r .error.message <<<"$a")" || fail "refusal of $1: $(cat "$tmp/status") $a"
}
refuse '{"messages":[{"role":"user","content":"x"}],"grammar":"root ::= \"a\" b"}' grammar "line 1, column 14: undefined rule 'b'"
refuse '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"string","pattern":"^a"}}}}' \
    response_format "unsupported keyword 'pattern'"
refuse "$(jq -nc --argjson t "$tools" '{messages:[{role:"user",content:"x"}],tools:$t,tool_choice:{type:"function",function:{name:"nope"}}}')" \
    tool_choice "'nope', which is not in 'tools'"
refuse '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"not":{}}}}}}],"tool_choice":"required"}' \
    tools "unsupported keyword 'not' at #/properties/a"
refuse '{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}' tool_choice "needs 'tools'"
refuse '{"messages":[{"role":"user","content":null}]}' messages "'content' is required"
stop_server "$tmp/serve.log"
[ "$fails" = 0 ] && echo "serve_tools: all passed"
exit $((fails > 0))
