#!/usr/bin/env bash
# tests/run.sh — runs every test of `make test`: each build/tests/test_* binary,
# then each tests/test_*.sh script, and sums their closing "N passed, N failed"
# lines. Exits non-zero if any test failed or any runner did not finish; then
# names the failing runners, and prints each runner's FAIL lines (with the four lines after each: what the check printed) and any
# "command not found" (those of the sanitizer pass too, which nests this script).
# Among the scripts, tests/test_asan.sh runs a part of this list again on the
# sanitizer build and tests/test_fuzz.sh runs the fuzz harnesses.
# `tests/run.sh NAME...` runs only the runners named (test_ops: $BUILD/tests/test_ops,
# test_mpi.sh: tests/test_mpi.sh), and a named runner that is missing or
# passes no check fails: what the sanitizer pass names must really have run.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
passed=0; failed=0; broken=(); failing=()   # failing: the runners with a failure, named at the end
BUILD=${BUILD:-build}
named=$#   # runners named on the command line: each must exist and pass a check
if [ "$named" -gt 0 ]; then
    runners=()
    for n in "$@"; do case "$n" in *.sh) runners+=("tests/$n");; *) runners+=("$BUILD/tests/$n");; esac; done
else
    runners=("$BUILD"/tests/test_* tests/test_*.sh)
fi
for t in "${runners[@]}"; do
    if [ "$named" -gt 0 ] && ! { [ "${t##*.}" = sh ] && [ -f "$t" ] || [ -x "$t" ]; }; then
        echo "== $t"; broken+=("$t (named, but there is no such runner)"); failing+=("$t"); failed=$((failed + 1)); continue
    fi
    [ -x "$t" ] || [ "${t##*.}" = sh ] || continue
    case "$t" in *.o|*.d) continue;; esac
    # the sanitizer pass (tests/test_asan.sh) runs this script again: not itself, nor the fuzzers
    case "$t" in tests/test_asan.sh|tests/test_fuzz.sh) [ -n "${LLM3D_SANITIZER_PASS:-}" ] && continue;; esac
    echo "== $t"
    start=$(date +%s)
    if [ "${t##*.}" = sh ]; then out=$(bash "$t" 2>&1); rc=$?; else out=$("$t" 2>&1); rc=$?; fi
    # failures, also those of the runs nested in the sanitizer pass (indented there), and any command
    # a runner called that is not installed: scripts/setup.sh installs what the tests call
    echo "$out" | grep -E -A4 '^ *(FAIL|not ok|BROKEN:|failing runners:)|command not found|: not found$' | head -60   # -A4: what a failed check printed with it (a flake's evidence in a CI log)
    last=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
    if [ -z "$last" ]; then
        echo "$out" | tail -20
        broken+=("$t (rc=$rc, no closing line)"); failing+=("$t"); failed=$((failed + 1)); continue
    fi
    p=${last%% passed*}; f=${last#*passed, }; f=${f%% failed*}
    passed=$((passed + p)); failed=$((failed + f))
    [ "$f" -gt 0 ] && failing+=("$t")
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { broken+=("$t (rc=$rc)"); failing+=("$t"); failed=$((failed + 1)); }
    [ "$named" -gt 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$rc" -eq 0 ] && { broken+=("$t (named, but it passed no check)"); failing+=("$t"); failed=$((failed + 1)); }
    echo "   $last  ($(( $(date +%s) - start ))s)"
done
for b in "${broken[@]+"${broken[@]}"}"; do echo "BROKEN: $b"; done
[ ${#failing[@]} -gt 0 ] && echo "failing runners: ${failing[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
