#!/usr/bin/env bash
# tests/test_asan.sh — the tests where memory errors and undefined behaviour
# live, again, on the AddressSanitizer + UBSan build that `make asan` leaves in
# $ASAN_BUILD (default build-asan), through `tests/run.sh NAME...`:
#   - every reader and every bad or hostile input: checkpoints (test_checkpoint,
#     test_resume: damaged and half-written ones), the config file and command
#     line (test_cli), the tokenizer and prepare (test_tokenizer), the data
#     loader (test_train), hostile bytes for every reader (test_readers,
#     test_hostile), NaN/inf and self-contradicting files for every loader
#     (test_load_checks), vocabularies and models given to `sample` (test_sample),
#     the error table (test_errors);
#   - the ops' CPU references (test_ops), the bf16/fp16 emulation's
#     conversions (test_precision) and FP8's (test_fp8: its rounding is bit
#     arithmetic; a damaged FP8 history in a checkpoint);
#   - one layout of each parallel strategy — dp, tp, pp, dp x tp x pp — a resume
#     across layouts and the refused launches, on sanitized ranks
#     (test_layouts with LLM3D_TEST_PART=each), and the ranks' own checks of
#     gradient and ZeRO-3 gather overlap (test_mpi.sh).
# Left to the normal pass, which runs the whole suite once: the rest of the
# layout tables (the same code on more shapes, ZeRO-2/3 and 8-bit AdamW), 8-bit
# AdamW's 300-step training, the fault, launch, report and doctor scripts (runs
# of many ranks, timed), the build, docs, layering, setup and README checks
# (no sanitized code) and the JavaScript references. All of it here took 5.5
# minutes; this part keeps `make test` under ten on CI's 2 cores. run.sh fails
# a named runner that is missing or passes no check, so this part cannot
# quietly stop running. Any heap or stack overflow, use after free, leak
# (LeakSanitizer, at each process's exit; not in ranks under mpirun) or undefined
# behaviour (signed overflow, bad shift, float-to-int overflow, misaligned
# access...) fails the test that met it. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
ASAN_BUILD=${ASAN_BUILD:-build-asan}
if [ ! -x "$ASAN_BUILD/tests/test_checkpoint" ]; then
    echo "FAIL no sanitizer build in $ASAN_BUILD: run \`make asan\` (make test does)"; echo "0 passed, 1 failed"; exit 1
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# libomp leaves its thread pool behind in forked children that exit: not ours
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}
stamp=$(mktemp)
# LLM3D_TEST_PART=each: test_layouts runs one layout of each strategy, not its table
runners=(test_checkpoint test_resume test_cli test_tokenizer test_train test_readers test_hostile test_load_checks test_sample
         test_errors test_ops test_precision test_fp8 test_layouts test_mpi.sh)
LLM3D_SANITIZER_PASS=1 LLM3D_TEST_PART=each BUILD=$ASAN_BUILD tests/run.sh "${runners[@]}" 2>&1 | sed 's/^/  /; s/^  \([0-9]* passed, [0-9]* failed\)$/\1/'
rc=${PIPESTATUS[0]}
# clang's libomp registers each process in /dev/shm and children that end in
# _exit or SIGKILL (the crash tests) leave that file behind: remove this run's
for f in $(find /dev/shm -maxdepth 1 -name '__KMP_REGISTERED_LIB_*' -newer "$stamp" 2>/dev/null); do
    pid=${f#*__KMP_REGISTERED_LIB_}; pid=${pid%%_*}
    kill -0 "$pid" 2>/dev/null || rm -f "$f"
done
rm -f "$stamp"
exit "$rc"
