#!/bin/bash
# prima tokenize end to end: ids with and without BOS, special-token parsing, pieces, input from
# a file, and one-line errors with the documented exit status.
set -u
. "$(dirname "$0")/support/needs.sh"
need_fixtures
prima=${PRIMA_BIN:?PRIMA_BIN not set}
stories=$fixtures/models/stories260K.gguf
qwen=$fixtures/tokenizer/qwen2.gguf
tmp=$(mktemp -d /tmp/prima-tokenize-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() { # DESCRIPTION EXPECTED COMMAND...
    local what=$1 want=$2
    shift 2
    local got
    got=$("$@" 2>"$tmp/err") || fail "$what: exit status $? ($(cat "$tmp/err"))"
    [ "$got" = "$want" ] || fail "$what: got '$got', expected '$want'"
}

"$prima" tokenize --help | grep -q "usage: prima tokenize -m FILE" || fail "--help"
# reference/stories260K.once.json: prompt_tokens
expect "BOS added" "1 403 407 261 378" "$prima" tokenize -m "$stories" -p "Once upon a time"
expect "--no-bos" "403 407 261 378" "$prima" tokenize -m "$stories" -p "Once upon a time" --no-bos
printf 'Once upon a time' >"$tmp/prompt.txt"
expect "-f FILE" "1 403 407 261 378" "$prima" tokenize -m "$stories" -f "$tmp/prompt.txt"
expect "--pieces" "$(printf '1\t"<s>"\n403\t" Once"\n407\t" upon"\n261\t" a"\n378\t" time"')" \
    "$prima" tokenize -m "$stories" -p "Once upon a time" --pieces
# qwen2 adds no BOS; control tokens are text unless --parse-special
expect "control text as text" "27 91 318 4906 91 29 872" "$prima" tokenize -m "$qwen" -p "<|im_start|>user"
expect "--parse-special" "151644 872" "$prima" tokenize -m "$qwen" -p "<|im_start|>user" --parse-special
expect "escaped pieces" "$(printf '198\t"\\n"\n11162\t" \\xf0\\x9f"\n99\t"\\xa6"\n247\t"\\x99"')" \
    "$prima" tokenize -m "$qwen" -p $'\n 🦙' --pieces

# errors: one line on stderr; 2 for usage, 1 for files
source "$(dirname "$0")/support/cli_error.sh"
error 2 "no model" "$prima" tokenize -p x
error 2 "exactly one of" "$prima" tokenize -m "$qwen"
error 2 "exactly one of" "$prima" tokenize -m "$qwen" -p x -f "$tmp/prompt.txt"
error 2 "unknown option '--frobnicate'" "$prima" tokenize -m "$qwen" -p x --frobnicate
error 2 "-p needs a value" "$prima" tokenize -m "$qwen" -p
error 1 "cannot read $tmp/missing.txt" "$prima" tokenize -m "$qwen" -f "$tmp/missing.txt"
error 1 "$tmp/missing.gguf" "$prima" tokenize -m "$tmp/missing.gguf" -p x
error 1 "bad magic" "$prima" tokenize -m "$tmp/prompt.txt" -p x

[ $fails -eq 0 ] || exit 1
echo "tokenize_cli: all checks passed"
