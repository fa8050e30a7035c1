#!/usr/bin/env bash
# bench/gpu/ncu_fa3.sh — Nsight Compute on the fa3 attention kernels (issue 55's profile where a target is not
# reached): bench_attention at head dim HD (default 64) and T (default 8192), the forward and both backward
# kernels, two launches each, with the sections that say why a kernel is where it is: speed of light, occupancy
# and launch figures (registers, shared memory), warp stall reasons, scheduler issue-slot use, memory workload.
# --clock-control none: the card's clocks are left as they are (METHOD.md), so durations match the bench's.
# KERNELS (a regex, default fa3: every fa3 kernel, the forward's first) picks which; KERNELS='fa3_d' the backward's
# dk/dv and dq kernels alone, KERNELS=fa3_forward the forward alone, either with the source counters (where the
# warps stall, by instruction) added.
# SKIP=n skips the first n matching launches (bench_attention's rows run 18 launches each: SKIP=54 with
# KERNELS=fa3_forward is its fourth forward row, the persistent grid); NCU_LIMIT (seconds, default 300) caps ncu. Writes $OUT/ncu_fa3_<HD>_<T>[_KERNELS][_skipN].txt and prints a short table of each kernel's headline figures.
#   run: make -j16 gpu && bench/gpu/ncu_fa3.sh [HD] [T]
set -u
hd=${1:-64}; T=${2:-8192}; OUT=${OUT:-build/gpu}; mkdir -p "$OUT"
k=${KERNELS:-fa3}; extra=(); [ "$k" = fa3 ] || extra=(--section SourceCounters --section InstructionStats)
rep="$OUT/ncu_fa3_${hd}_${T}${KERNELS:+_$KERNELS}${SKIP:+_skip$SKIP}.txt"
timeout "${NCU_LIMIT:-300}" ncu --clock-control none --kernel-name regex:"$k" --launch-skip "${SKIP:-0}" --launch-count 6 "${extra[@]}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis build/gpu/bench_attention "$hd" "$T" >"$rep" 2>&1
echo "ncu rc=$? -> $rep"
grep -E '^  [a-z_0-9]+.*\(|Duration|Registers Per Thread|Dynamic Shared Memory Per Block|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Compute \(SM\) Throughput|Memory Throughput|Stall' "$rep" | head -80
