#!/usr/bin/env bash
# bench/gpu/owed_call2.sh — the second device call owed since session V (2026-12-07), after owed_call.sh: the
# NCCL layout table on one GPU (tests/gpu/nccl_layouts.sh: cp and the zero-bubble schedules' rows among the
# others, the tiny-size 8-bit layouts of issue 52; issues 52-54), then context parallelism's memory per rank
# (tests/gpu/cp_memory.sh, issue 53), then l350m at T = 4096 and 8192 against the peer (issue 55; carry .peer
# with ../shared/peers/torch_llama.py). Each stage logged under $OUT as it goes.   run: bench/gpu/owed_call2.sh
source "$(dirname "$0")/call_start.sh"   # $OUT, log, the build
timeout 420 tests/gpu/nccl_layouts.sh >"$OUT/nccl_layouts.log" 2>&1; log "nccl_layouts rc=$? ${SECONDS}s $(tail -1 "$OUT/nccl_layouts.log")"
grep -E 'FAIL' "$OUT/nccl_layouts.log" | head -20 >>"$OUT/summary.log"
timeout 150 tests/gpu/cp_memory.sh >"$OUT/cp_memory.log" 2>&1; log "cp_memory rc=$? ${SECONDS}s $(tail -1 "$OUT/cp_memory.log")"
for T in 4096 8192; do B=$(( 16384 / T ))
  PYTHONUNBUFFERED=1 timeout 90 python3 .peer/torch_llama.py --cfg l350m --modes bf16-compile --T $T --B $B 2>/dev/null | grep '^{' >>"$OUT/sweep350.log"
  timeout 60 build/bench/bench_train --preset=l350m --device=cuda --steps=20 --precision=bf16 --seq_len=$T --batch_size=$B 2>&1 | grep -E '^\{' >>"$OUT/sweep350.log"
  log "l350m T=$T ${SECONDS}s"; done
