#!/usr/bin/env bash
# tests/fuzz/run.sh — runs the libFuzzer harnesses of tests/fuzz/ (built by
# `make asan` into $BUILD/fuzz/): usage `tests/fuzz/run.sh SECONDS [NAME ...]`
# (NAME: shard, checkpoint, ...; default all). For each harness:
#   1. replay: every committed input (tests/fuzz/corpus/NAME/: seeds and every
#      crash ever found) and every fresh seed (make_seeds) runs once;
#   2. fuzz: SECONDS of coverage-guided fuzzing from them, with the format's
#      dictionary (tests/fuzz/NAME.dict), new inputs kept in $BUILD/fuzz/corpus/NAME.
# A crash, sanitizer report, leak, exit or hang (-timeout) fails the harness;
# its input is saved as $BUILD/fuzz/crashes/NAME-*. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-asan}
seconds=${1:-60}; shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for b in "$BUILD"/fuzz/fuzz_*; do names+=("${b##*/fuzz_}"); done
fi
[ -x "$BUILD/fuzz/make_seeds" ] || { echo "error: $BUILD/fuzz has no harnesses; run \`make asan\` first"; echo "0 passed, 1 failed"; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}
seeds="$BUILD/fuzz/seeds"
rm -rf "$seeds"
"$BUILD/fuzz/make_seeds" "$seeds" >/dev/null || { echo "FAIL make_seeds"; echo "0 passed, 1 failed"; exit 1; }
mkdir -p "$BUILD/fuzz/crashes"
passed=0; failed=0
for name in "${names[@]}"; do
    bin="$BUILD/fuzz/fuzz_$name" work="$BUILD/fuzz/corpus/$name" kept="tests/fuzz/corpus/$name" log="$BUILD/fuzz/$name.log"
    mkdir -p "$work" "$seeds/$name"
    inputs=("$seeds/$name"/*)
    [ -d "$kept" ] && inputs+=("$kept"/*)
    if ! "$bin" -timeout=10 -rss_limit_mb=2048 "${inputs[@]}" >"$log" 2>&1; then
        echo "FAIL fuzz_$name: a committed or seed input fails (see $log):"; grep -E "ERROR|Running|assertion|runtime error" "$log" | head -8
        failed=$((failed + 1)); continue
    fi
    dict=(); [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
    corpora=("$work" "$seeds/$name"); [ -d "$kept" ] && corpora+=("$kept")   # new inputs go to the first
    start=$(date +%s)
    if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -close_fd_mask=3 \
            -artifact_prefix="$BUILD/fuzz/crashes/$name-" "${dict[@]}" "${corpora[@]}" >"$log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
        echo "ok fuzz_$name: ${runs:-?} executions in $(( $(date +%s) - start )) s, corpus $(ls "$work" | wc -l) inputs"
        passed=$((passed + 2))
    else
        echo "FAIL fuzz_$name: found a bug (see $log; input saved under $BUILD/fuzz/crashes/):"
        grep -E "ERROR|SUMMARY|assertion|runtime error|Test unit written" "$log" | head -8
        echo "  hint: fix it, then commit the input to $kept/ so it stays a regression test"
        passed=$((passed + 1)); failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
