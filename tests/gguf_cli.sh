#!/bin/bash
# prima gguf info end to end: a fixture described in text and JSON; damaged copies (made in a
# temporary directory) give exactly one line on stderr naming the file, and exit status 1.
set -u
. "$(dirname "$0")/support/needs.sh"
need_fixtures
prima=${PRIMA_BIN:?PRIMA_BIN not set}
model=$fixtures/models/synth-spm512-l4-e256-q4_k_m.gguf
tmp=$(mktemp -d /tmp/prima-gguf-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$prima" gguf --help | grep -q "usage: prima gguf info FILE" || fail "--help"
"$prima" gguf info "$model" >"$tmp/out" || fail "info exit status"
grep -Eq '^  llama\.block_count +u32 +4$' "$tmp/out" || fail "block_count line"
grep -Eq '^  tokenizer\.ggml\.tokens +array +\[string x 512\]' "$tmp/out" || fail "tokens summary"
grep -Eq '^  output\.weight +Q6_K +256 x 512 +107520 ' "$tmp/out" || fail "output.weight row"
grep -Eq '^  blk\.2\.attn_v\.weight +Q6_K ' "$tmp/out" || fail "blk.2.attn_v row"
grep -q '^tensors: 39$' "$tmp/out" || fail "tensor count"
"$prima" gguf info --json "$model" >"$tmp/json" || fail "--json exit status"
grep -q '"llama.block_count":4,' "$tmp/json" || fail "json block_count"
grep -q '"name":"output.weight","type":"Q6_K","shape":\[256,512\]' "$tmp/json" || fail "json tensor"

# usage errors: exit 2, one line
"$prima" gguf info 2>"$tmp/err"; [ $? -eq 2 ] || fail "missing FILE status"
"$prima" gguf info "$model" --frobnicate 2>"$tmp/err"; [ $? -eq 2 ] || fail "bad option status"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "bad option: not one line"

# damaged copies: exit 1 and one line on stderr that names the file
damaged() { # NAME EXPECTED-TEXT
    "$prima" gguf info "$tmp/$1" >/dev/null 2>"$tmp/err"
    local rc=$?
    [ $rc -eq 1 ] || fail "$1: exit status $rc"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$1: stderr is not one line: $(cat "$tmp/err")"
    grep -q "$tmp/$1" "$tmp/err" || fail "$1: error does not name the file: $(cat "$tmp/err")"
    grep -Eq "$2" "$tmp/err" || fail "$1: error lacks '$2': $(cat "$tmp/err")"
}
size=$(stat -c %s "$model")
for cut in 0 3 7 23 100 1000 13000 200000 $((size - 1)); do
    head -c "$cut" "$model" >"$tmp/cut$cut.gguf"
    damaged "cut$cut.gguf" "past the end|cannot fit|empty file"
done
cp "$model" "$tmp/magic.gguf"; chmod u+w "$tmp/magic.gguf"
printf 'GGML' | dd of="$tmp/magic.gguf" conv=notrunc status=none
damaged magic.gguf "bad magic"
cp "$model" "$tmp/version.gguf"; chmod u+w "$tmp/version.gguf"
printf '\x07' | dd of="$tmp/version.gguf" bs=1 seek=4 conv=notrunc status=none
damaged version.gguf "unsupported version 7"
cp "$model" "$tmp/count.gguf"; chmod u+w "$tmp/count.gguf"
printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$tmp/count.gguf" bs=1 seek=16 conv=notrunc status=none
damaged count.gguf "metadata entries cannot fit"
damaged ../"$(basename "$tmp")"/missing.gguf "cannot open"

# A GGUF v3 file of no tensors and one string kv (KEY VALUE, as printf formats).
one_kv() { # FILE KEY VALUE
    local key val
    key=$(printf "$2"; printf x); key=${key%x}
    val=$(printf "$3"; printf x); val=${val%x}
    le64() { printf "$(printf '\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)))\x00\x00\x00\x00\x00\x00"; }
    { printf 'GGUF\x03\x00\x00\x00'; le64 0; le64 1; le64 ${#key}; printf '%s' "$key"
      printf '\x08\x00\x00\x00'; le64 ${#val}; printf '%s' "$val"; } >"$1"
}
# keys are printable ASCII (the GGUF specification): another byte is refused with its offset
LC_ALL=C one_kv "$tmp/key.gguf" 'gen\xc3\xa9ral.name' 'x'
"$prima" gguf info "$tmp/key.gguf" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(cat "$tmp/err")" = "prima: $tmp/key.gguf: kv 0: the key at offset 24 has byte 0xc3 at offset 35: GGUF keys are printable ASCII" ] ||
    fail "non-ASCII key: $(cat "$tmp/err")"
# strings are printed escaped: no control byte, C1 control or malformed UTF-8 reaches the
# terminal; printable UTF-8 (e with an acute accent) does
LC_ALL=C one_kv "$tmp/esc.gguf" 'general.name' 'a\x1b[31mred\xff\xc2\x9b!\xc3\xa9\x0a\x07'
"$prima" gguf info "$tmp/esc.gguf" >"$tmp/out" 2>"$tmp/err" || fail "escapes: $(cat "$tmp/err")"
[ "$(grep -a general.name "$tmp/out")" = "$(printf '  general.name  string  "a\\x1b[31mred\\xff\\xc2\\x9b!\xc3\xa9\\n\\x07"')" ] ||
    fail "escaped string: $(grep -a general.name "$tmp/out" | od -c | head -5)"
LC_ALL=C grep -aq "$(printf '[\x01-\x09\x0b-\x1f\x7f]')" "$tmp/out" && fail "a control byte reached stdout"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "gguf cli: all checks passed"
