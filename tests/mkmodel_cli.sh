#!/bin/bash
# prima mkmodel end to end: options reach the file (read back with prima gguf info), output is
# reproducible, presets can be shrunk, and bad options give one line and exit status 2 (1 for
# a file that cannot be read or written).
set -u
prima=${PRIMA_BIN:?PRIMA_BIN not set}
tmp=$(mktemp -d /tmp/prima-mkmodel-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -Eq "$2" "$1" || fail "$(basename "$1"): no line matching '$2'"; }

"$prima" mkmodel --help | grep -q "usage: prima mkmodel -o OUT.gguf" || fail "--help"
"$prima" --help | grep -q "mkmodel" || fail "mkmodel missing from prima --help"

"$prima" mkmodel -o "$tmp/a.gguf" --arch qwen2 --layers 3 --embd 128 --ff 384 --heads 4 \
    --kv-heads 2 --ctx 1024 --vocab 300 --type q8_0 --seed 7 >"$tmp/out" || fail "mkmodel exit status"
has "$tmp/out" "^wrote $tmp/a.gguf: 39 tensors, "
"$prima" gguf info "$tmp/a.gguf" >"$tmp/info" || fail "gguf info of the generated model"
has "$tmp/info" '^  general\.architecture +string +"qwen2"$'
has "$tmp/info" '^  qwen2\.block_count +u32 +3$'
has "$tmp/info" '^  qwen2\.context_length +u32 +1024$'
has "$tmp/info" '^  qwen2\.rope\.freq_base +f32 +1e\+06$'
has "$tmp/info" '^  qwen2\.attention\.layer_norm_rms_epsilon +f32 +1e-06$'
has "$tmp/info" '^  blk\.2\.attn_v\.bias +F32 +64 '
has "$tmp/info" '^  blk\.0\.ffn_down\.weight +Q8_0 +384 x 128 '
has "$tmp/info" '^  tokenizer\.ggml\.tokens +array +\[string x 300\]'

"$prima" mkmodel -o "$tmp/b.gguf" --arch qwen2 --layers 3 --embd 128 --ff 384 --heads 4 \
    --kv-heads 2 --ctx 1024 --vocab 300 --type q8_0 --seed 7 --threads 1 >/dev/null || fail "second run"
cmp -s "$tmp/a.gguf" "$tmp/b.gguf" || fail "same options and seed give different files"

"$prima" mkmodel -o "$tmp/p.gguf" --preset llama3-8b --layers 1 --embd 256 --ff 256 --heads 4 \
    --kv-heads 2 --vocab 300 --type q4_k_m >/dev/null || fail "shrunk preset"
"$prima" gguf info "$tmp/p.gguf" >"$tmp/pinfo"
has "$tmp/pinfo" '^  general\.name +string +"llama3-8b"$'
has "$tmp/pinfo" '^  llama\.rope\.freq_base +f32 +500000$'
has "$tmp/pinfo" '^  llama\.context_length +u32 +8192$'
has "$tmp/pinfo" '^  output\.weight +Q6_K '

usage_error() { # DESCRIPTION ARGS...
    local what=$1
    shift
    "$prima" mkmodel "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    [ $rc -eq 2 ] || fail "$what: exit status $rc"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$what: stderr is not one line"
}
usage_error "missing -o" --layers 2
usage_error "bad type" -o "$tmp/x.gguf" --type q3_k
usage_error "bad integer" -o "$tmp/x.gguf" --layers two
usage_error "bad preset" -o "$tmp/x.gguf" --preset llama9
usage_error "bad arch" -o "$tmp/x.gguf" --arch gpt2
usage_error "missing value" -o "$tmp/x.gguf" --seed
usage_error "unknown option" -o "$tmp/x.gguf" --colour red

"$prima" mkmodel -o "$tmp/x.gguf" --vocab-from "$tmp/none.gguf" 2>"$tmp/err"
[ $? -eq 1 ] || fail "missing vocabulary: exit status"
grep -q "$tmp/none.gguf" "$tmp/err" || fail "missing vocabulary: error does not name the file"
"$prima" mkmodel -o "$tmp/x.gguf" --heads 6 --kv-heads 4 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "not a multiple of --kv-heads" "$tmp/err" || fail "inconsistent heads"
[ ! -e "$tmp/x.gguf" ] || fail "a failed run left $tmp/x.gguf"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "mkmodel cli: all checks passed"
