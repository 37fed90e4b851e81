#!/bin/sh
# cross-arm.sh [DIR] — build the kernels and their tests for AArch64 with Debian's cross compiler
# (gcc-aarch64-linux-gnu) and run the tests under qemu-user when it is installed.
# The NEON files get the same flags as in CMakeLists.txt. Output in DIR (default build-arm/).
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build-arm}
cc=${CROSS_CC:-aarch64-linux-gnu-gcc}
command -v "$cc" >/dev/null || { echo "cross-arm.sh: $cc not found (apt-get install gcc-aarch64-linux-gnu)" >&2; exit 1; }
mkdir -p "$dir"
flags="-std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter -Werror -Isrc -Itests"
srcs=$(ls src/kernels/*.c src/gguf/*.c src/util/mem.c | grep -v -e '_avx2\.c$' -e '_avx512\.c$')
objs=""
for s in $srcs; do
    o="$dir/$(basename "$s" .c).o"
    extra=""
    case "$s" in *_neon.c) extra="-march=armv8.2-a+dotprod+fp16" ;; esac
    $cc $flags $extra -c "$s" -o "$o"
    objs="$objs $o"
done
for t in test_quant test_quant_neon test_ops; do
    $cc $flags "tests/$t.c" tests/support/quant_check.c $objs -lm -lpthread -o "$dir/$t"
done
echo "built $dir/test_quant $dir/test_quant_neon $dir/test_ops for aarch64"
if command -v qemu-aarch64 >/dev/null; then
    sysroot=${QEMU_LD_PREFIX:-/usr/aarch64-linux-gnu}
    export PRIMA_FIXTURES_DEFAULT="$(pwd)/../shared/fixtures"
    for t in test_quant test_quant_neon test_ops; do
        # qemu's default CPU model implements the dot-product and fp16 extensions
        qemu-aarch64 -L "$sysroot" "$dir/$t" || { echo "FAIL $t (qemu-aarch64)"; exit 1; }
    done
    echo "aarch64 tests passed under qemu-aarch64"
fi
