#!/usr/bin/env bash
# tests/gpu/nccl.sh — the four NCCL-on-one-GPU scripts (docs/nccl-one-gpu.md)
# in about five minutes, each under a cap so the whole stays under ten: the
# layout table and the doctor side by side (neither checks a speed), then the
# fault table (its deadlines want a quiet machine), then the split's
# accounting. Prints each script's result lines and closing line, and the sum;
# logs under $OUT (or build/gpu). Build first: make -j16.
#   run: tests/gpu/nccl.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
LOGS=${OUT:-build/gpu}; mkdir -p "$LOGS"
passed=0; failed=0
# start NAME CAP: tests/gpu/NAME.sh in a session of its own, ended (every process of it) after CAP seconds; sets pid_NAME
start() {
    setsid "tests/gpu/$1.sh" >"$LOGS/$1.log" 2>&1 &
    local pid=$!
    eval "pid_$1=$pid"
    (   # the watcher: gone a second after the script ends, holding no output open
        for ((i = 0; i < $2; i++)); do sleep 1; kill -0 "$pid" 2>/dev/null || exit 0; done
        echo "  FAIL $1: not done within its cap of $2 s: ended" >>"$LOGS/$1.log"
        kill -TERM -- "-$pid" 2>/dev/null; sleep 5; kill -KILL -- "-$pid" 2>/dev/null ) </dev/null >/dev/null 2>&1 &
    eval "cap_$1=$!"
}
# collect NAME: wait for it, print its lines, add its closing line to the sum
collect() {
    local pid cap last p f
    eval "pid=\$pid_$1 cap=\$cap_$1"
    wait "$pid"
    kill "$cap" 2>/dev/null
    echo "== tests/gpu/$1.sh"
    grep -vE '^[0-9]+ passed, [0-9]+ failed' "$LOGS/$1.log" | grep -E '^==|^  ok|^  FAIL|^FAIL|losses .* val|^resume \[|^   ' | cut -c1-400
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOGS/$1.log" | tail -1)
    if [ -z "$last" ]; then echo "  FAIL $1 has no closing line: $(tail -3 "$LOGS/$1.log")"; failed=$((failed + 1)); return; fi
    p=${last%% passed*}; f=${last#*passed, }; f=${f%% failed*}
    passed=$((passed + p)); failed=$((failed + f))
    echo "   $1: $last"
}
t0=$(date +%s)
start nccl_layouts 270; start nccl_doctor 270
collect nccl_doctor; collect nccl_layouts
echo "   ($(( $(date +%s) - t0 )) s so far)"
start nccl_faults 190; collect nccl_faults
echo "   ($(( $(date +%s) - t0 )) s so far)"
start nccl_scale 130; collect nccl_scale
echo "== NCCL on one GPU: $(( $(date +%s) - t0 )) s in all"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
