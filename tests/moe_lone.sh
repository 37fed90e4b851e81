#!/bin/bash
# moe_lone.sh — prima run on one device with a model of experts larger than its memory budget
# pages by expert (app/runner.c: a ring of this device alone): in a memory cgroup smaller than
# the file, the prompt and 32 decoded tokens read from disk less than three times the file (the
# prompt reads most of it once, a token its cold routed experts; a plain session, leaving whole
# layers to the kernel's eviction, read it 6 to 12 times over), and the answer is bit for bit
# the one of the same run without a limit. Needs root, python3 and a writable memory cgroup.
set -u
. "$(dirname "$0")/support/needs.sh"
prima=${PRIMA_BIN:?PRIMA_BIN not set}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# this process's memory cgroup directory (v1 memory controller, or v2)
v1=$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)
if [ -n "$v1" ] && [ -d "/sys/fs/cgroup/memory$v1" ]; then
    base=/sys/fs/cgroup/memory${v1%/}; limit_file=memory.limit_in_bytes
else
    base=/sys/fs/cgroup$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup); limit_file=memory.max
    base=${base%/}
fi
cg=$base/prima-moe-lone-$$
command -v python3 >/dev/null || missing PRIMA_REQUIRE_CGROUP "no python3 (to drop a file's pages)"
mkdir "$cg" 2>/dev/null && [ -w "$cg/$limit_file" ] ||
    missing PRIMA_REQUIRE_CGROUP "no writable memory cgroup here ($cg): needs root"
tmp=$(mktemp -d)
trap 'rmdir "$cg" 2>/dev/null; rm -rf "$tmp"' EXIT

moe=$tmp/moe.gguf
"$prima" mkmodel -o "$moe" --arch qwen3moe --layers 8 --embd 512 --ff 512 --experts 32 \
    --experts-used 2 --type q8_0 --seed 3 >/dev/null 2>&1 || { fail "mkmodel"; exit 1; }
size=$(stat -c %s "$moe")
args=(-m "$moe" -p "Once upon a time there was" -n 32 -t 1 --temp 0 --ignore-eos)
"$prima" run "${args[@]}" >"$tmp/free.txt" 2>"$tmp/free.err" || fail "without a limit: $(cat "$tmp/free.err")"

# 150 MiB for a 211 MiB file: the file's pages dropped first, so that they are read in the
# cgroup (and charged to it); read_bytes of the shell that waited for prima counts prima's
echo $((150 * 1024 * 1024)) >"$cg/$limit_file" || fail "cannot set $cg/$limit_file"
python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$moe" ||
    fail "cannot drop the file's pages"
read_bytes=$(bash -c 'echo $$ >"$1/cgroup.procs" && "${@:2}" >"$0.txt" 2>"$0.err" &&
                      awk "/^read_bytes/ { print \$2 }" /proc/$$/io' "$tmp/limited" "$cg" \
                 "$prima" run "${args[@]}") || fail "under 150 MiB: $(cat "$tmp/limited.err")"
grep -q "paging its experts" "$tmp/limited.err" ||
    fail "a lone run under the limit does not page by expert: $(grep '^prima: ' "$tmp/limited.err" | head -n 3)"
cmp -s "$tmp/free.txt" "$tmp/limited.txt" || fail "the answer under the limit differs"
echo "read from disk: ${read_bytes:-?} bytes for 32 tokens, the file is $size"
[ -n "$read_bytes" ] && [ "$read_bytes" -lt $((3 * size)) ] ||
    fail "read ${read_bytes:-?} bytes, more than three times the file's $size"

[ $fails = 0 ] && echo "all lone MoE checks passed"
exit $((fails > 0))
