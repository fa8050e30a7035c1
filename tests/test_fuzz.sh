#!/usr/bin/env bash
# tests/test_fuzz.sh — the fuzz harnesses in `make test` (tests/fuzz/run.sh):
# every committed input (seeds and every crash ever found, tests/fuzz/corpus/)
# and fresh seeds replayed, then LLM3D_FUZZ_S seconds (default 5, so `make
# test` stays under ten minutes on 2 cores) of fuzzing per harness. A crash,
# sanitizer report, leak or hang fails. For longer runs: `make fuzz FUZZ_S=600`.
cd "$(dirname "$0")/.."
BUILD=${ASAN_BUILD:-build-asan} exec tests/fuzz/run.sh "${LLM3D_FUZZ_S:-5}"
