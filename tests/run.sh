#!/usr/bin/env bash
# tests/run.sh — runs every test of `make test`: each build/tests/test_* binary,
# then each tests/test_*.sh script, and sums their closing "N passed, N failed"
# lines. Exits non-zero if any test failed or any runner did not finish.
# Among the scripts, tests/test_asan.sh runs this whole list again on the
# sanitizer build and tests/test_fuzz.sh runs the fuzz harnesses.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
passed=0; failed=0; broken=()
BUILD=${BUILD:-build}
for t in "$BUILD"/tests/test_* tests/test_*.sh; do
    [ -x "$t" ] || [ "${t##*.}" = sh ] || continue
    case "$t" in *.o|*.d) continue;; esac
    # the sanitizer pass (tests/test_asan.sh) runs this script again: not itself, nor the fuzzers
    case "$t" in tests/test_asan.sh|tests/test_fuzz.sh) [ -n "${LLM3D_SANITIZER_PASS:-}" ] && continue;; esac
    echo "== $t"
    start=$(date +%s)
    if [ "${t##*.}" = sh ]; then out=$(bash "$t" 2>&1); rc=$?; else out=$("$t" 2>&1); rc=$?; fi
    echo "$out" | grep -E '^(FAIL|not ok)' | head -20
    last=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
    if [ -z "$last" ]; then
        echo "$out" | tail -20
        broken+=("$t (rc=$rc, no closing line)"); failed=$((failed + 1)); continue
    fi
    p=${last%% passed*}; f=${last#*passed, }; f=${f%% failed*}
    passed=$((passed + p)); failed=$((failed + f))
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { broken+=("$t (rc=$rc)"); failed=$((failed + 1)); }
    echo "   $last  ($(( $(date +%s) - start ))s)"
done
for b in "${broken[@]+"${broken[@]}"}"; do echo "BROKEN: $b"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
