#!/bin/bash
# prima template end to end: every chat-template fixture case rendered by the binary, byte for
# byte as Python's jinja2 rendered it (a case where jinja2 raised: exit 1 and the template's
# message), the model's own template and tokens (-m), and one-line errors with the documented
# exit status.
set -u
fixtures=${PRIMA_FIXTURES:-${PRIMA_FIXTURES_DEFAULT:-../shared/fixtures}}
[ -d "$fixtures/templates" ] || { echo "SKIPPED: chat-template fixtures not found at $fixtures/templates"; exit 77; }
prima=${PRIMA_BIN:?PRIMA_BIN not set}
tmp=$(mktemp -d /tmp/prima-template-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

cases=0
for json in "$fixtures"/templates/*.json; do
    base=${json%.json}
    name=${base%.*}                  # NAME is everything before the last .CASE
    cases=$((cases + 1))
    "$prima" template --chat-template "$name.jinja" --input "$json" --now 2026-07-26 \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ -f "$base.txt" ]; then
        [ $rc -eq 0 ] || { fail "$(basename "$base"): exit status $rc ($(cat "$tmp/err"))"; continue; }
        cmp -s "$tmp/out" "$base.txt" || fail "$(basename "$base"): differs from jinja2's rendering"
    else
        [ $rc -eq 1 ] || fail "$(basename "$base"): exit status $rc, expected 1 (jinja2 raised)"
        [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$(basename "$base"): stderr is not one line"
        want=$(cat "$base.error.txt")
        case $want in
        TemplateError:*) grep -qF -e "${want#TemplateError: }" "$tmp/err" ||
            fail "$(basename "$base"): error lacks '${want#TemplateError: }': $(cat "$tmp/err")" ;;
        esac
    fi
done
[ $cases -gt 0 ] || fail "no cases in $fixtures/templates"

# -m: the model's template, with its BOS token where the case gives none (phi-3's vocabulary
# carries a template that starts with bos_token)
phi3=$fixtures/tokenizer/phi-3.gguf
printf '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true}' >"$tmp/case.json"
got=$("$prima" template -m "$phi3" --input "$tmp/case.json")
[ "$got" = "$(printf '<s><|user|>\nHi<|end|>\n<|assistant|>')" ] || fail "-m: got '$got'"
# --chat-template replaces the model's; the case's own bos_token wins over the model's
printf '{{ bos_token }}{{ messages[0].content | upper }}' >"$tmp/t.jinja"
printf '{"messages":[{"role":"user","content":"hi"}],"bos_token":"[B]"}' >"$tmp/case2.json"
got=$("$prima" template -m "$phi3" --chat-template "$tmp/t.jinja" --input "$tmp/case2.json")
[ "$got" = "[B]HI" ] || fail "--chat-template over -m: got '$got'"
printf '{{ strftime_now("%%d %%b %%Y") }}' >"$tmp/date.jinja"
got=$("$prima" template --chat-template "$tmp/date.jinja" --input "$tmp/case.json" --now 2026-07-26T13:00:00)
[ "$got" = "26 Jul 2026" ] || fail "--now: got '$got'"

source "$(dirname "$0")/support/cli_error.sh"
"$prima" template --help | grep -q "usage: prima template" || fail "--help"
error 2 "no template" "$prima" template --input "$tmp/case.json"
error 2 "no conversation" "$prima" template --chat-template "$tmp/t.jinja"
error 2 "unknown option '--frobnicate'" "$prima" template --frobnicate
error 2 "--input needs a value" "$prima" template --chat-template "$tmp/t.jinja" --input
error 2 "--now: expected" "$prima" template --chat-template "$tmp/t.jinja" --input "$tmp/case.json" --now July
error 1 "$tmp/missing.json" "$prima" template --chat-template "$tmp/t.jinja" --input "$tmp/missing.json"
printf '[1, 2]' >"$tmp/list.json"
error 1 "not a JSON object" "$prima" template --chat-template "$tmp/t.jinja" --input "$tmp/list.json"
printf 'a\n{%% if x %%}\nb' >"$tmp/bad.jinja"
error 1 "bad.jinja: chat template: line 3: .*'if' \\(line 2\\) is not closed" \
    "$prima" template --chat-template "$tmp/bad.jinja" --input "$tmp/case.json"
printf '\n\n{{ raise_exception("no " + messages[0].role) }}' >"$tmp/raise.jinja"
error 1 "raised an error \(line 3\): no user$" "$prima" template --chat-template "$tmp/raise.jinja" --input "$tmp/case.json"
printf '{{ messages[0].nothing.deeper }}' >"$tmp/undef.jinja"
error 1 "line 1: UndefinedError" "$prima" template --chat-template "$tmp/undef.jinja" --input "$tmp/case.json"

[ $fails -eq 0 ] || exit 1
echo "template_cli: $cases fixture cases byte for byte; all checks passed"
