#!/usr/bin/env bash
# tests/test_mpi.sh — runs the programs of tests/mpi/ under mpirun (2 ranks,
# oversubscribed, as CI's 2-core machine allows) and sums their closing lines.
# Each program checks one multi-rank behaviour from inside the ranks.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
# the sanitizer pass (tests/test_asan.sh): ranks keep ASan and UBSan, not LeakSanitizer — Open MPI leaves
# allocations in components it has unloaded by exit, which LSan can neither free nor name to suppress
[ -n "${LLM3D_SANITIZER_PASS:-}" ] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
if ! command -v mpirun >/dev/null || [ ! -d "$BUILD/tests/mpi" ]; then
    echo "skipped: no mpirun, or this build has no Open MPI"; echo "0 passed, 0 failed"; exit 0
fi
passed=0; failed=0
for t in "$BUILD"/tests/mpi/*; do
    [ -x "$t" ] || continue
    out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$t" 2>&1); rc=$?
    last=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
    echo "$out" | grep -vE '^[0-9]+ passed, [0-9]+ failed'
    if [ -z "$last" ] || [ "$rc" -ne 0 ]; then echo "FAIL $t (rc=$rc)"; failed=$((failed + 1)); fi
    while read -r p; do   # every rank checks its own side and prints its closing line
        [ -n "$p" ] || continue
        f=${p#*passed, }; passed=$((passed + ${p%% passed*})); failed=$((failed + ${f%% failed*}))
    done <<< "$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed')"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
