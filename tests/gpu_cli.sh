#!/bin/bash
# GPU offload from the command line: -ngl gives the CPU's greedy text (all layers, some layers,
# -ngl past the layer count), --no-gpu and -ngl 0 never open a GPU, a VRAM cap too small keeps
# the layers (or some of them) on the CPU and says so, a weight type without shaders stays on the CPU (said), and
# a machine without a usable Vulkan driver runs on the CPU with one line saying why; the profile
# measures the GPU and Halda plans with it.
set -u
. "$(dirname "$0")/support/needs.sh"
need_fixtures
prima=${PRIMA_BIN:?PRIMA_BIN not set}
model=$fixtures/models/stories260K.gguf
tmp=$(mktemp -d /tmp/prima-gpu-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
run() { "$prima" run -m "$model" -p "Once upon a time" -n 16 --temp 0 -t 2 "$@"; }

run >"$tmp/cpu" 2>"$tmp/cpu.err" || fail "CPU run"
grep -q "GPU" "$tmp/cpu.err" && fail "a CPU run mentions a GPU: $(grep GPU "$tmp/cpu.err")"

# no usable driver: one line, then the CPU's output
VK_ICD_FILENAMES=/nonexistent/icd.json run -ngl 99 >"$tmp/nodrv" 2>"$tmp/nodrv.err" ||
    fail "run without a driver"
[ "$(grep -c "GPU" "$tmp/nodrv.err")" = 1 ] || fail "no-driver lines: $(cat "$tmp/nodrv.err")"
grep -q "running on the CPU" "$tmp/nodrv.err" || fail "no-driver line: $(cat "$tmp/nodrv.err")"
cmp -s "$tmp/cpu" "$tmp/nodrv" || fail "no-driver output differs"

need_gpu "$model"

for ngl in 99 5 2; do
    run -ngl $ngl >"$tmp/gpu$ngl" 2>"$tmp/gpu$ngl.err" || fail "-ngl $ngl exit status"
    cmp -s "$tmp/cpu" "$tmp/gpu$ngl" || fail "-ngl $ngl: text differs: $(cat "$tmp/gpu$ngl")"
done
grep -q "5 of 5 layers (99 asked for: the model has 5)" "$tmp/gpu99.err" || fail "-ngl 99 line: $(cat "$tmp/gpu99.err")"
grep -q "2 of 5 layers" "$tmp/gpu2.err" || fail "-ngl 2 line: $(cat "$tmp/gpu2.err")"

run -ngl 99 --no-gpu >"$tmp/nogpu" 2>"$tmp/nogpu.err" || fail "--no-gpu"
grep -q "GPU" "$tmp/nogpu.err" && fail "--no-gpu opened a GPU"

run -ngl 99 --gpu-mem 0.001 >"$tmp/cap" 2>"$tmp/cap.err" || fail "--gpu-mem exit status"
grep -q "0 of 5 layers.*5 more layers did not fit in 1 MiB" "$tmp/cap.err" ||
    fail "small cap line: $(cat "$tmp/cap.err")"
cmp -s "$tmp/cpu" "$tmp/cap" || fail "small cap output differs"

# a cap that holds some of the layers: the first asked-for ones stay on the CPU, said
run -ngl 99 --gpu-mem 0.0025 >"$tmp/part" 2>"$tmp/part.err" || fail "partial cap exit status"
grep -Eq "[1-4] of 5 layers.*[1-4] more layers? did not fit" "$tmp/part.err" ||
    fail "partial cap line: $(cat "$tmp/part.err")"
cmp -s "$tmp/cpu" "$tmp/part" || fail "partial cap output differs"

run -ngl 99 --gpu 7 >/dev/null 2>"$tmp/idx.err" || fail "--gpu 7 exit status"
grep -q "GPU 7 asked for" "$tmp/idx.err" || fail "--gpu 7: $(cat "$tmp/idx.err")"
run -ngl 1 --gpu-mem -1 >/dev/null 2>"$tmp/neg.err" && fail "--gpu-mem -1 accepted"
grep -q "gpu-mem" "$tmp/neg.err" || fail "--gpu-mem -1 message"

"$prima" run -m "$fixtures/models/synth-spm512-l4-e256-bf16.gguf" -p x -n 2 --temp 0 -ngl 1 \
    >/dev/null 2>"$tmp/bf16.err" || fail "bf16 run"
grep -q "layer 3 stays on the CPU: attn_q.weight is BF16" "$tmp/bf16.err" || fail "bf16: $(cat "$tmp/bf16.err")"

# prima logits with every layer on the GPU: the reference's greedy tokens
ref=$fixtures/reference/stories260K.once.json
want_ids=$(sed -n 's/^  "greedy_tokens": \[\(.*\)\],$/\1/p' "$ref" | tr -d ',')
"$prima" logits -m "$model" -p "Once upon a time" -n 32 -o "$tmp/l.f32" --json -ngl 99 \
    >"$tmp/l.json" 2>/dev/null || fail "logits -ngl 99"
got=$(jq -r '.greedy_tokens | map(tostring) | join(" ")' "$tmp/l.json" 2>/dev/null)
[ "$got" = "$want_ids" ] || fail "logits -ngl 99 greedy: $got"

# the profile measures the GPU; Halda plans with it: a software driver gets no layers, a GPU
# much faster than the CPU gets them all, with its expected VRAM
"$prima" profile --gpu -m "$model" -t 2 --json >"$tmp/prof.json" 2>"$tmp/prof.err" ||
    fail "profile --gpu: $(cat "$tmp/prof.err")"
[ "$(jq -r '.gpu.present' "$tmp/prof.json")" = true ] || fail "profile: no GPU"
jq -e '.gpu.bandwidth > 0 and .gpu.submit > 0 and .gpu.upload > 0 and .gpu.types.F32.matvec > 0' \
    "$tmp/prof.json" >/dev/null || fail "profile GPU figures: $(jq -c .gpu "$tmp/prof.json")"
"$prima" plan -m "$model" --device "$tmp/prof.json" --json >"$tmp/plan.json" 2>/dev/null ||
    fail "plan with the GPU profile"
# A software driver gets layers only where it helps: on a slow CPU build (a sanitizer build runs
# prima's kernels several times slower, lavapipe not) it may beat the CPU; then the plan with
# the GPU must predict a lower TPOT than the same profile without it.
if [ "$(jq -r '.gpu.software' "$tmp/prof.json")" = true ] &&
   [ "$(jq -r '.devices[0].gpu_layers' "$tmp/plan.json")" != 0 ]; then
    jq '.gpu.present = false | .gpu.types = {}' "$tmp/prof.json" >"$tmp/nogpu.json"
    "$prima" plan -m "$model" --device "$tmp/nogpu.json" --json >"$tmp/nogpu-plan.json" 2>/dev/null ||
        fail "plan without the GPU"
    jq -e --slurpfile cpu "$tmp/nogpu-plan.json" '.tpot < $cpu[0].tpot' "$tmp/plan.json" >/dev/null ||
        fail "Halda gave a software driver GPU layers that do not help: $(jq -c '.devices[0]' "$tmp/plan.json"), CPU-only tpot $(jq .tpot "$tmp/nogpu-plan.json")"
fi
jq '.gpu.types.F32 = {"matvec": 1e13, "matmul": 1e13} | .gpu.bandwidth = 1e13 | .gpu.dispatch = 1e-6 |
    .gpu.unified = false | .gpu.software = false' "$tmp/prof.json" >"$tmp/fast.json"
"$prima" plan -m "$model" --device "$tmp/fast.json" >"$tmp/fast.out" 2>&1 || fail "plan, fast GPU"
grep -q "5 GPU layers, expected VRAM" "$tmp/fast.out" || fail "fast GPU plan: $(cat "$tmp/fast.out")"

[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all GPU CLI checks passed"
