#!/usr/bin/env bash
# bench/gpu/fa3_call.sh — one device call for the fa3 attention forward (issue 55):
# build, the fa3 forward alone beside the other paths (bench_attention) at head dims
# 64 and 128, the op test (every attention path against the CPU, which kernel ran),
# PyTorch's SDPA at the same shapes (sdpa_time.py), and compute-sanitizer memcheck
# on the fa3 kernel. Logs under $OUT (at most 8 files come back).
#   bench/gpu/fa3_call.sh [sweep|only-sweep]    (sweep: also the l124m sweep against the peer in .peer/, its
#   default attention and LLM3D_ATTENTION=fa3 at each T; only-sweep: build and the sweep alone)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/gpu/out}; mkdir -p "$OUT"
Ts=${FA3_T:-"2048 4096 8192 16384 32768"}
{ date -u; git log -1 --format='commit %h %s' 2>/dev/null; git status --short 2>/dev/null | head -20
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } | tee "$OUT/info.log"
( make -j16 && make -j16 gpu ) >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "built"
if [ "${1:-}" != only-sweep ]; then
timeout 30 build/gpu/bench_attention 128 1024 2048; rc=$?   # a smoke test first: a hang costs 30 s, not the call
if [ $rc != 0 ]; then
    echo "fa3 smoke rc=$rc; without ping-pong:"; FA3_PINGPONG=0 timeout 30 build/gpu/bench_attention 128 1024; echo "rc=$?"
    FA3_PINGPONG=0 timeout 30 build/gpu/bench_attention 64 1024; echo "rc=$?"; exit 1
fi
for hd in 64 128; do timeout 150 build/gpu/bench_attention "$hd" $Ts; echo "bench_attention $hd rc=$?"; done 2>&1 | tee "$OUT/bench.log"
for hd in 64 128; do PYTHONUNBUFFERED=1 timeout 150 python3 bench/gpu/sdpa_time.py --hd "$hd" $Ts; echo "sdpa $hd rc=$?"; done 2>&1 |
    tee -a "$OUT/bench.log"
timeout 300 build/gpu/test_cuda_ops >"$OUT/ops.log" 2>&1; echo "test_cuda_ops rc=$?" | tee -a "$OUT/ops.log"
grep -E "fa3|FAIL|passed" "$OUT/ops.log" | grep -v "^ok.*attention_fwd fa3 ran" | tail -40
grep -c "^ok.*fa3" "$OUT/ops.log"
for hd in 64 128; do timeout 90 compute-sanitizer --tool memcheck build/gpu/bench_attention "$hd" 700 2>&1 | tail -5; done | tee "$OUT/sanitizer.log"
fi
if [ "${1:-}" = sweep ] || [ "${1:-}" = only-sweep ]; then   # per T: the peer (bf16-compile), llm3d's default attention, then LLM3D_ATTENTION=fa3
    for T in ${SWEEP_T:-2048 4096 8192 16384 32768}; do
        B=$(( T >= 16384 ? 1 : 16384 / T ))
        echo "-- sweep: l124m T=$T B=$B"
        PYTHONUNBUFFERED=1 timeout 150 python3 .peer/torch_llama.py --cfg l124m --modes bf16-compile --T "$T" --B "$B" 2>/dev/null |
            sed "s/^{/{\"sweep_T\": $T, /"
        for a in "" fa3; do
            LLM3D_ATTENTION=$a timeout 100 build/bench/bench_train --preset=l124m --device=cuda --steps=20 --precision=bf16 \
                --seq_len="$T" --batch_size="$B" 2>&1 | grep -E '^\{|^error|hint' | sed "s/^{/{\"attention\": \"${a:-default}\", /"
        done
    done 2>&1 | tee "$OUT/sweep.log"
fi
