#!/usr/bin/env bash
# bench/gpu/call_x2.sh — session X's call for the fa3 backward that accumulates dQ in its dk/dv kernel (issue 55):
# a smoke run first (a hang ends the call early with compute-sanitizer's view of a small case), the fa3 op checks
# (fused dQ twice, bitwise, and the sweep, against the CPU), bench_attention at HD 64 and 128 (fa3_bwd = fused,
# fa3_bwd_sweep = before), memcheck and racecheck on the fa3 backward, the model test (default and fa3), then the
# l124m step at 8k and 32k beside the peer (carry .peer). At most 8 files under $OUT.   run: bench/gpu/call_x2.sh
source "$(dirname "$0")/call_start.sh"   # $OUT, log, the build
timeout 30 build/gpu/bench_attention 64 1024 >>"$OUT/summary.log" 2>&1; r1=$?
timeout 30 build/gpu/bench_attention 128 1024 >>"$OUT/summary.log" 2>&1; r2=$?
log "smoke rc=$r1 $r2 ${SECONDS}s"
if [ $r1 != 0 ] || [ $r2 != 0 ]; then
  for hd in 64 128; do LLM3D_ATTENTION=fa3 timeout 60 compute-sanitizer --tool memcheck build/gpu/bench_attention $hd 300 2>&1 | grep -vE '^ +[0-9]' | head -30; done >"$OUT/sanitizer.log"
  OPS_FA3_ONLY=1 timeout 100 build/gpu/test_cuda_ops >"$OUT/ops.log" 2>&1; log "ops rc=$? $(tail -1 "$OUT/ops.log")"; exit 1; fi
OPS_FA3_ONLY=1 timeout 150 build/gpu/test_cuda_ops >"$OUT/ops.log" 2>&1; log "ops rc=$? $(grep -cE '^FAIL' "$OUT/ops.log") FAIL; $(tail -1 "$OUT/ops.log")"
grep -E '^FAIL|^     (dq|dk|dv|out) ' "$OUT/ops.log" | head -40 >>"$OUT/summary.log"
for hd in 64 128; do timeout 100 build/gpu/bench_attention $hd 1024 2048 4096 8192 16384 32768 >>"$OUT/bench.log" 2>&1; log "bench $hd rc=$? ${SECONDS}s"; done
for tool in memcheck racecheck; do for hd in 64 128; do LLM3D_ATTENTION=fa3 timeout 60 compute-sanitizer --tool $tool build/gpu/bench_attention $hd 300 2>&1 | grep -vE '^ +[0-9]' | grep -E 'Error|Race|hazard|SUMMARY' | sort | uniq -c | head -12; done; done >"$OUT/sanitizer.log"
log "sanitizer: $(grep -E 'SUMMARY' "$OUT/sanitizer.log" | tr '\n' ' ')"
for a in "" fa3; do LLM3D_ATTENTION=$a timeout 100 build/gpu/test_cuda_model >/tmp/m.log 2>&1; rc=$?
  log "model ${a:-default} rc=$rc $(grep -E '^[0-9]+ passed' /tmp/m.log)"; grep -E '^FAIL' /tmp/m.log | head -5 >>"$OUT/summary.log"; done
for T in 8192 32768; do B=$(( T >= 16384 ? 1 : 16384 / T ))
  PYTHONUNBUFFERED=1 timeout 60 python3 .peer/torch_llama.py --cfg l124m --modes bf16-compile --T $T --B $B 2>/dev/null | grep '^{' >>"$OUT/sweep.log"
  timeout 50 build/bench/bench_train --preset=l124m --device=cuda --steps=20 --precision=bf16 --seq_len=$T --batch_size=$B 2>&1 | grep -E '^\{' >>"$OUT/sweep.log"
  log "sweep T=$T ${SECONDS}s"; done
