# tests/gpu/nccl_common.sh — sourced by tests/gpu/nccl_*.sh: ranks that share
# shellcheck shell=bash
# the one GPU through real NCCL, each standing for a host of its own
# (LLM3D_NCCL_HOSTS_ON_ONE_GPU=1, comm/launch.h; docs/nccl-one-gpu.md).
# Sets the switch and mpirun's permissions, $LOGS (under $OUT when set, else
# build/gpu) and a scratch folder $d with a small token set in $d/data, and
# gives check, within, job and the closing tally.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
LOGS=${OUT:-build/gpu}/$(basename "$0" .sh); mkdir -p "$LOGS"
export LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
passed=0; failed=0
# check 'CONDITION' "what it shows": one result line per check, PASS or FAIL
check() { if eval "$1"; then passed=$((passed + 1)); echo "  ok   $2"; else failed=$((failed + 1)); echo "  FAIL $2"; fi; }
within() { awk -v t="$1" -v m="$2" 'BEGIN { exit !(t != "" && t + 0 < m + 0) }'; }   # within SECONDS LIMIT
finish() { rm -rf "$d"; echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }
if [ ! -x build/train ] || ! ldd build/train | grep -q libnccl; then
    echo "  FAIL build/train is missing or has no NCCL: run make (the CUDA build) first"; failed=1; d=""; finish
fi
d=$(mktemp -d /tmp/llm3d_nccl.XXXXXX)
build/train prepare --input=tests/data/sotu_sample.txt --out="$d/data" --train-vocab=512 >/dev/null 2>&1 ||
    { echo "  FAIL build/train prepare failed"; failed=1; finish; }

# job NAME RANKS MARKER [train args...]: mpirun -np RANKS build/train into $d/NAME, log $LOGS/NAME.log, in the
# background; sets pid. MARKER (an ERE, or "") is a line of the log awaited by mark.
job() {
    local name=$1 ranks=$2; shift 2
    rm -f "$LOGS/$name.log"
    timeout 60 mpirun -np "$ranks" build/train "$@" --run_dir="$d/$name" >"$LOGS/$name.log" 2>&1 &
    pid=$!
}
# mark NAME ERE [SECONDS]: wait until the log of NAME has a line matching ERE (at most SECONDS, default 60);
# sets t_mark (epoch seconds, fractional), empty when it never came
mark() {
    local i n=$(( ${3:-60} * 10 ))
    t_mark=""
    for ((i = 0; i < n; i++)); do
        if grep -qE -- "$2" "$LOGS/$1.log" 2>/dev/null; then t_mark=$(date +%s.%N); return 0; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    grep -qE -- "$2" "$LOGS/$1.log" 2>/dev/null && t_mark=$(date +%s.%N)
    [ -n "$t_mark" ]
}
# finished: wait for the job started last; sets rc and after (seconds from t_mark to its end)
finished() {
    wait "$pid"; rc=$?
    after=$([ -n "$t_mark" ] && awk -v s="$t_mark" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - s }')
}
# the process of world rank R of job NAME
rank_pid() {
    local p
    for p in $(pgrep -f -- "--run_dir=$d/$1( |\$)"); do
        grep -qz "^OMPI_COMM_WORLD_RANK=$2\$" "/proc/$p/environ" 2>/dev/null && { echo "$p"; return; }
    done
}
left() { pgrep -f -- "--run_dir=$d/$1( |\$)" | wc -l; }   # processes of job NAME still alive
