#!/usr/bin/env bash
# bench/run.sh — the benchmarks of `make bench`: CPU training steps, tokenizer speed.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), OMP_NUM_THREADS=${OMP_NUM_THREADS:-all}"
"$BUILD"/bench/bench_train --steps="${STEPS:-3}"
for b in "$BUILD"/bench/bench_tokenizer; do [ -x "$b" ] && "$b"; done
