#!/bin/sh
# test.sh — the whole test suite: a Release build with warnings as errors, the static aarch64
# build (its kernel tests under qemu-user; scripts/cross.sh) that the mixed-architecture ring
# test runs beside it, the same tests under AddressSanitizer + UBSan, and 60 seconds of fuzzing
# over the GGUF reader, the ring protocol and the tokenizer (one summary line per fuzzer;
# scripts/fuzz.sh).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh --test
jobs=$(nproc)

echo "== release build and tests"
scripts/build.sh build -DPRIMA_WERROR=ON
echo "== static aarch64 build (for tests/ring_mixed_arch.sh)"
scripts/cross.sh aarch64 build-aarch64 -DPRIMA_WERROR=ON
(cd build && ctest --output-on-failure -j"$jobs")

echo "== sanitizer build (ASan + UBSan) and tests"
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRIMA_SANITIZE=ON -DPRIMA_WERROR=ON
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j"$jobs")

echo "== fuzzing (60 s in all: GGUF reader, ring protocol, tokenizer)"
scripts/fuzz.sh 60
echo "all tests passed"
