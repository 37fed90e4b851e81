#!/bin/sh
# fuzz.sh [SECONDS] — build the libFuzzer targets with clang (ASan + UBSan, build-fuzz/) and run
# the GGUF reader fuzzer for SECONDS (default 60). Seeds: the fixtures' GGUF files cut to their
# first 64 KiB (the header, which is what the reader parses; the data section is only
# bounds-checked), and small complete models from prima mkmodel so that valid files with tensors
# are in the corpus too. Before that, the ring protocol fuzzer (framing and every message decoder,
# tests/fuzz/fuzz_proto.c) runs for a third of SECONDS from an empty corpus: the frame magic and
# lengths are found by libFuzzer's comparison tracing within seconds. Exits non-zero on any
# crash, leak or sanitizer report.
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-60}
fixtures=${PRIMA_FIXTURES:-../shared/fixtures}
CC=clang cmake -S . -B build-fuzz -DPRIMA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --target fuzz_gguf fuzz_proto prima-cli -j"$(nproc)"

mkdir -p build-fuzz/corpus-proto
build-fuzz/fuzz_proto -max_total_time=$((seconds / 3 + 1)) -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-fuzz/ build-fuzz/corpus-proto

corpus=build-fuzz/corpus-gguf
mkdir -p "$corpus"
if [ -d "$fixtures" ]; then
    for f in "$fixtures"/models/*.gguf "$fixtures"/tokenizer/*.gguf; do
        [ -f "$f" ] && head -c 65536 "$f" >"$corpus/seed-$(basename "$f")"
    done
else
    echo "fuzz.sh: no fixtures at $fixtures; seeding with generated models only" >&2
fi
small="--layers 1 --embd 32 --ff 64 --heads 2 --kv-heads 1 --vocab 258"
build-fuzz/prima mkmodel -o "$corpus/seed-mk-llama-q8_0.gguf" $small --type q8_0 >/dev/null
build-fuzz/prima mkmodel -o "$corpus/seed-mk-qwen2-f16.gguf" $small --arch qwen2 --type f16 >/dev/null
# The artifact (crashing input) goes to build-fuzz/ so a failure can be reproduced with
# build-fuzz/fuzz_gguf FILE.
exec build-fuzz/fuzz_gguf -max_total_time="$seconds" -max_len=131072 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-fuzz/ "$corpus"
