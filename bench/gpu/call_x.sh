#!/usr/bin/env bash
# bench/gpu/call_x.sh — session X's first device call (2026-12-07), issue 55 first: Nsight Compute on the fa3
# backward's two kernels at HD 64 and 128 (T = 8192), bench_attention at T = 512..32768 (fa3 against the wgmma
# backward with stored dS at T <= 1024), compute-sanitizer memcheck and racecheck on the fa3 backward at an odd T,
# the model test with the default attention (the fa3-backward default switch), then the l124m step at 4k and 16k
# and l350m at 4k and 8k beside the peer (carry .peer).   run: bench/gpu/call_x.sh
source "$(dirname "$0")/call_start.sh"   # $OUT, log, the build
for hd in 64 128; do OUT=$OUT KERNELS='fa3_d' bench/gpu/ncu_fa3.sh $hd 8192 >"$OUT/ncu_head_$hd.txt" 2>&1; log "ncu bwd $hd ${SECONDS}s"; done
for hd in 64 128; do timeout 90 build/gpu/bench_attention $hd 512 1024 2048 4096 8192 16384 32768 >>"$OUT/bench.log" 2>&1; log "bench $hd rc=$? ${SECONDS}s"; done
for tool in memcheck racecheck; do LLM3D_ATTENTION=fa3 timeout 90 compute-sanitizer --tool $tool build/gpu/bench_attention 128 700 2>&1 | grep -vE '^ +[0-9]' | tail -15 >"$OUT/$tool.log"
  log "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | head -2 | tr '\n' ' ')"; done
timeout 100 build/gpu/test_cuda_model >/tmp/m.log 2>&1; log "model default rc=$? $(grep -E '^[0-9]+ passed' /tmp/m.log)"; grep -E '^FAIL' /tmp/m.log | head -5 >>"$OUT/summary.log"
sweep() { local cfg=$1 T=$2 B=$3
  PYTHONUNBUFFERED=1 timeout 70 python3 .peer/torch_llama.py --cfg $cfg --modes bf16-compile --T $T --B $B 2>/dev/null | grep '^{' >>"$OUT/sweep.log"
  timeout 50 build/bench/bench_train --preset=$cfg --device=cuda --steps=20 --precision=bf16 --seq_len=$T --batch_size=$B 2>&1 | grep -E '^\{' >>"$OUT/sweep.log"
  log "sweep $cfg T=$T ${SECONDS}s"; }
sweep l124m 4096 4; sweep l124m 16384 1; sweep l350m 4096 4; sweep l350m 8192 2
