#!/usr/bin/env bash
# tests/test_asan.sh — the whole test suite again, on the AddressSanitizer +
# UBSan build that `make asan` leaves in $ASAN_BUILD (default build-asan): every
# $ASAN_BUILD/tests/test_* binary and every tests/test_*.sh but this one and
# tests/test_fuzz.sh, through tests/run.sh. Any heap or stack overflow, use
# after free, leak (LeakSanitizer, at each process's exit) or undefined
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
LLM3D_SANITIZER_PASS=1 BUILD=$ASAN_BUILD tests/run.sh 2>&1 | sed 's/^/  /; s/^  \([0-9]* passed, [0-9]* failed\)$/\1/'
rc=${PIPESTATUS[0]}
# clang's libomp registers each process in /dev/shm and children that end in
# _exit or SIGKILL (the crash tests) leave that file behind: remove this run's
for f in $(find /dev/shm -maxdepth 1 -name '__KMP_REGISTERED_LIB_*' -newer "$stamp" 2>/dev/null); do
    pid=${f#*__KMP_REGISTERED_LIB_}; pid=${pid%%_*}
    kill -0 "$pid" 2>/dev/null || rm -f "$f"
done
rm -f "$stamp"
exit "$rc"
