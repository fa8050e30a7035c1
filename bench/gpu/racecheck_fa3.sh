#!/usr/bin/env bash
# bench/gpu/racecheck_fa3.sh — compute-sanitizer racecheck on the fa3 backward with source lines (issue 55): builds
# with -lineinfo, then runs bench_attention at HD 64 and 128 (T = 300, 54 sequences) under racecheck, forcing the
# dQ accumulator and then the sweep, and prints each distinct hazard once with its file:line (the 2026-12-07 run
# flagged the accumulating dk/dv kernel's lse/Dsum stores against the consumers' reads, not the sweep variant's).
#   run: bench/gpu/racecheck_fa3.sh   (on the device; writes $OUT/racecheck.log; HDS="64" for one head dim)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CFLAGS="-O3 -Wno-error" NVCCFLAGS="-O3 -lineinfo -Xcompiler -Wno-error"
make -j16 gpu >/tmp/b.log 2>&1 || { grep -E " error" /tmp/b.log | head; exit 1; }
for hd in ${HDS:-64 128}; do
  echo "== HD $hd"
  BENCH_ONCE=1 LLM3D_ATTENTION=fa3 timeout "${RC_LIMIT:-240}" compute-sanitizer --tool racecheck --racecheck-report hazard --show-backtrace no \
      build/gpu/bench_attention $hd 300 2>&1 | grep -E 'Error|access at|\.cu:|SUMMARY' | sed 's/(CUtensorMap_st[^)]*)//' | sort | uniq -c | sort -rn | head -30
done | tee "$OUT/racecheck.log"
