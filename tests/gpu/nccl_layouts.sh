#!/usr/bin/env bash
# tests/gpu/nccl_layouts.sh — llm3d's promise through real NCCL on one GPU:
# the layout table of tests/test_layouts.c (its NCCL half: dp, ZeRO-1, tp with
# and without sequence parallelism, pp 1F1B / GPipe / interleaved / zb1 / zbv, uneven
# stages, 3D on 8 ranks, adamw and adamw8bit, fp32 / bf16 / fp16, recompute,
# gradient accumulation in every run, resume across layouts: saved by an NCCL
# run, resumed by another layout), every rank a test host on GPU 0
# (LLM3D_NCCL_HOSTS_ON_ONE_GPU=1), at the CPU table's tolerances (fp32: losses
# and every tensor within 1e-5 of one rank's). Each multi-rank run must show it
# went through NCCL: its banner says "through nccl", the test setup is said
# once, and NCCL's own log (NCCL_DEBUG=INFO, written to files beside the run)
# names its socket transport (NET/Socket). The two halves (LLM3D_TEST_PART=dp,
# tp), the 8-bit AdamW layouts (test_layouts_q8's table, LLM3D_TEST_PART=table: every
# moment code against one rank's; and its tiny-preset-size runs at adam_eps 1e-8,
# LLM3D_TEST_PART=tiny: tp, dp, pp, ZeRO-1/2/3 and 3D on 8 ranks within 1e-4 whole
# and 5e-4 a tensor of one rank's, issue 52), ZeRO-2/3 (test_layouts_zero),
# precision=fp8 (test_layouts_fp8: one rank's scales through NCCL's world
# reduction) and context parallelism (test_layouts_cp: cp = 2 and 4 alone, with
# dp, tp + SP, pp, ZeRO-1/3, 8-bit AdamW, recompute, bf16, fp8, the 4D case on
# 16 ranks (its 32-rank cp = 4 row is the CPU's alone), resume cp=4 <-> cp=1)
# run side by side. One result line per layout; logs under $OUT (or
# build/gpu)/nccl_layouts. Ends with "N passed, N failed".
#   run: make -j16 && tests/gpu/nccl_layouts.sh
source "$(dirname "$0")/nccl_common.sh"
for b in test_layouts test_layouts_q8 test_layouts_zero test_layouts_fp8 test_layouts_cp; do
    [ -x build/tests/$b ] || { echo "  FAIL no build/tests/$b: run make first"; failed=1; finish; }
done
export LLM3D_TEST_ARGS="--device=cuda --comm_backend=nccl" NCCL_DEBUG=INFO
t0=$(date +%s)
pids=()
parts=${NCCL_PARTS:-"dp tp q8 q8tiny zero fp8 cp"}   # NCCL_PARTS="dp cp": some of them
for part in $parts; do
    case $part in q8) bin=test_layouts_q8 p=table;; q8tiny) bin=test_layouts_q8 p=tiny;; zero) bin=test_layouts_zero p=$part;;
                  fp8) bin=test_layouts_fp8 p=$part;; cp) bin=test_layouts_cp p=$part;; *) bin=test_layouts p=$part;; esac
    LLM3D_TEST_PART=$p timeout 400 build/tests/$bin >"$LOGS/$part.log" 2>&1 &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "== the NCCL layout table, ranks on one GPU ($(( $(date +%s) - t0 )) s, the six parts side by side)"
for part in $parts; do
    # one line per layout (its losses, val loss and tensors against one rank's) or resume; FAIL lines with their reason
    grep -E '^FAIL|losses .* val .* tensors|^resume \[|codes|8-bit|scales equal' "$LOGS/$part.log"
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOGS/$part.log" | tail -1)
    if [ -z "$last" ]; then echo "  FAIL the $part half has no closing line (crashed or timed out): $(tail -3 "$LOGS/$part.log")"; failed=$((failed + 1)); continue; fi
    p=${last%% passed*}; f=${last#*passed, }; f=${f%% failed*}
    passed=$((passed + p)); failed=$((failed + f))
    echo "   $part half: $last"
done
finish
