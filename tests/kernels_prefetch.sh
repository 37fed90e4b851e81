#!/bin/bash
# The x86 tile kernels that stream weights (decode, a few sequences at once) must contain their
# software prefetches. A refactor once moved _mm_prefetch behind an always_inline helper and GCC
# dropped every one of them without a word; only the machine code shows it. Reads the binary's
# disassembly: every quantized tile of both x86 paths has at least one prefetcht0.
set -u
prima=${PRIMA_BIN:?PRIMA_BIN not set}
case "$(uname -m)" in x86_64) ;; *) echo "SKIPPED: not an x86-64 build"; exit 77 ;; esac
command -v objdump > /dev/null || { echo "SKIPPED: objdump not installed (binutils)"; exit 77; }

# function name -> prefetch count, one line per function instance (the two paths' tiles share
# names: both instances are listed)
counts=$(objdump -d --no-show-raw-insn "$prima" | awk '
    /^[0-9a-f]+ <[^>]+>:$/ { if (f != "") print f, n; f = $2; sub(/:$/, "", f); n = 0; next }
    /prefetcht0/ { n++ }
    END { if (f != "") print f, n }' | grep '^<tile_')
fails=0
for tile in tile_q4k tile_q5k tile_q6k tile_q8_0 tile_q4_0 tile_iq4_nl; do
    lines=$(grep -c "^<$tile> " <<< "$counts")
    if [ "$lines" -lt 2 ]; then
        echo "FAIL: $tile: $lines instance(s) in the binary, expected one per x86 path (2)"
        fails=$((fails + 1))
        continue
    fi
    without=$(grep "^<$tile> 0$" <<< "$counts" | wc -l)
    if [ "$without" -gt 0 ]; then
        echo "FAIL: $tile: $without of $lines instances have no prefetcht0"
        fails=$((fails + 1))
    fi
done
[ "$fails" -eq 0 ] && echo "all streaming tiles prefetch"
exit $((fails > 0))
