#!/usr/bin/env bash
# bench/gpu/owed_short.sh — owed_call.sh cut to what fits a short lease (about four minutes): the fa3 kernels' op
# checks forward and backward, bench_attention at head dim 64 (T = 2k, 8k, 32k), the model test with
# LLM3D_ATTENTION=fa3, and the l124m step at T = 8192 with the default and with fa3 beside the peer (carry .peer).
#   run: bench/gpu/owed_short.sh
source "$(dirname "$0")/call_start.sh"   # $OUT, log, the build
OPS_FA3_ONLY=1 timeout 120 build/gpu/test_cuda_ops >"$OUT/ops.log" 2>&1; log "ops rc=$? $(grep -cE '^FAIL' "$OUT/ops.log") FAIL; $(tail -1 "$OUT/ops.log")"
grep -E '^FAIL|^     (dq|dk|dv|out) ' "$OUT/ops.log" | head -40 >>"$OUT/summary.log"
timeout 60 build/gpu/bench_attention 64 2048 8192 32768 >>"$OUT/summary.log" 2>&1; log "bench 64 rc=$? ${SECONDS}s"
LLM3D_ATTENTION=fa3 timeout 100 build/gpu/test_cuda_model >/tmp/m.log 2>&1; log "model fa3 rc=$? $(grep -E '^[0-9]+ passed' /tmp/m.log)"
grep -E '^FAIL' /tmp/m.log | head -5 >>"$OUT/summary.log"
PYTHONUNBUFFERED=1 timeout 60 python3 .peer/torch_llama.py --cfg l124m --modes bf16-compile --T 8192 --B 2 2>/dev/null | grep '^{' >>"$OUT/summary.log"
for a in "" fa3; do LLM3D_ATTENTION=$a timeout 50 build/bench/bench_train --preset=l124m --device=cuda --steps=20 --precision=bf16 \
    --seq_len=8192 --batch_size=2 2>&1 | grep -E '^\{' | sed "s/^{/{\"attention\": \"${a:-default}\", /" >>"$OUT/summary.log"; done
log "sweep T=8192 ${SECONDS}s"
