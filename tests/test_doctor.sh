#!/usr/bin/env bash
# tests/test_doctor.sh — `build/train doctor` on CPU ranks (CUDA_VISIBLE_DEVICES
# emptied, so a GPU machine runs the same checks):
#   - without a GPU it says so and runs the CPU sections only;
#   - on 2 ranks (mpirun and --nproc=2): every rank reaches rank 0's port, the
#     sweep of the four collectives runs over MPI from 8 B to --max_bytes with
#     nccl-tests' bus bandwidth, and the pair of ranks gets a verdict;
#   - the default options on 2 CPU ranks (the README's pre-flight check) end
#     green within the sweep's budget: sizes grow while the time allows, the
#     sweep says where it stopped, no operation is cut off as a missing rank,
#     and every table row is a whole line (no message inside one);
#   - risky and unknown NCCL_* variables are named; an interface name that
#     matches nothing is warned about;
#   - bad input: a timeout of 0 or below, --device=cuda without a GPU, and a
#     bootstrap address no rank can reach (NCCL_COMM_ID) each end in words
#     with exit 1;
#   - the layout keys (--dp --pp --cp --tp): on 4 ranks dp2 x cp2 (mpirun),
#     tp2 x cp2 (--nproc=4) and pp2 x cp2 each print an OK line for every axis
#     of more than one rank, with the groups the grid formula gives, and no
#     other; without the keys there is no axes section; a wrong sum (--fault=sum)
#     is a FAIL and a PROBLEM naming the axis; a rank that never joins
#     (--fault=stall) ends every rank within the watchdog's --timeout, naming
#     the axis; a layout that is not the world is refused in words, once, with
#     a non-zero exit (alone, under mpirun, and before --nproc launches).
source "$(dirname "$0")/tally.sh"
export CUDA_VISIBLE_DEVICES=
out=$(mktemp /tmp/llm3d_test_doctor.XXXXXX)
trap 'rm -f "$out"' EXIT
doctor() { timeout 120 "$BUILD"/train doctor "$@" > "$out" 2>&1; rc=$?; }

doctor --help
check '[ $rc -eq 0 ] && grep -q "^usage: build/train doctor" "$out"' "doctor --help"
for t in 0 -3; do
    doctor --timeout=$t
    check '[ $rc -eq 1 ] && grep -q "^error: doctor: --timeout=$t: the init and every connection need a deadline above 0 seconds" "$out"' \
          "--timeout=$t is refused in words (exit $rc): $(head -2 "$out")"
done
doctor --device=cuda
check '[ $rc -eq 1 ] && grep -q "^error: doctor --device=cuda, but no GPU is visible here" "$out"' "--device=cuda without a GPU (exit $rc): $(head -2 "$out")"
doctor --sweep_size=1
check '[ $rc -eq 1 ] && grep -q "^error: doctor: unknown option --sweep_size" "$out"' "an unknown option is named (exit $rc)"
doctor --tp=0
check '[ $rc -eq 1 ] && grep -q "^error: doctor: tp=0: is out of range \[1, 1024\]" "$out"' "--tp=0 is refused with the trainer's bounds (exit $rc): $(head -1 "$out")"
doctor --cp=2 --sweep=0
check '[ $rc -eq 1 ] && grep -q "^error: dp\*pp\*cp\*tp = 1\*1\*2\*1 = 2 ranks asked for, but this process runs alone" "$out"' \
      "a layout of 2 ranks on one process is refused in words (exit $rc): $(head -1 "$out")"
doctor --fault=sum:axis=cp:rank=1 --sweep=0
check '[ $rc -eq 1 ] && grep -q "^error: doctor: --fault checks an axis: give the layout too" "$out"' "--fault without a layout is refused (exit $rc)"
doctor --dp=1 --sweep=0
check '[ $rc -eq 0 ] && grep -q "^  every axis has one rank: no group to check" "$out"' "a layout of one rank: no group to check (exit $rc)"

# one rank, no GPU
NCCL_P2P_DISABLE=1 NCCL_DEBGU=WARN NCCL_SOCKET_IFNAME=nosuchif doctor --sweep=0
check '[ $rc -eq 0 ] && grep -q "^doctor | 1 rank(s) on 1 host(s) | device cpu: no GPU visible, so the GPU sections are skipped" "$out" && ! grep -q "^GPUs of" "$out"' \
      "no GPU: the CPU sections only, and it says so (exit $rc): $(head -1 "$out")"
check 'grep -q "^  every rank (1): MPI " "$out"' "the versions section"
check 'grep -q "warning: NCCL_P2P_DISABLE=1: GPUs of one host talk through host memory" "$out"' "NCCL_P2P_DISABLE=1 is warned about"
check 'grep -A1 "^  NCCL_DEBGU=WARN" "$out" | grep -q "not one doctor knows: NCCL ignores a misspelt name"' "a misspelt NCCL_ variable is named"
check 'grep -q "warning: on host .* NCCL_SOCKET_IFNAME=nosuchif matches no interface" "$out"' "an interface name that matches nothing is warned about"
check 'grep -q "^doctor | 0 problem(s), 2 warning(s)$" "$out"' "the count of problems and warnings: $(tail -1 "$out")"

if ! command -v mpirun >/dev/null || ! ldd "$BUILD/train" | grep -q libmpi; then
    echo "skipped the multi-rank doctor: no mpirun, or this build has no Open MPI"; echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
timeout 120 mpirun -np 2 "$BUILD"/train doctor --max_bytes=1M --sweep_seconds=20 > "$out" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "^doctor | 2 rank(s) on 1 host(s) | device cpu: .* | device collectives through mpi" "$out"' "2 ranks through MPI (exit $rc): $(tail -3 "$out")"
check '[ "$(grep -c "^    rank [01] (.*): .* ok in [0-9.]* ms" "$out")" -eq 2 ] && grep -q "verdict: every rank reaches rank 0.s bootstrap port" "$out"' \
      "both ranks reach rank 0's bootstrap port"
check 'grep -q "^  all 2 rank(s) joined in [0-9.]* ms (an MPI barrier); the mpi transport set up" "$out"' "the init of every rank, timed"
rows=$(grep -cE "^ +[0-9]+ (B|KiB|MiB) \| +[0-9.]+ us +[0-9.]+ +\| +[0-9.]+ us +[0-9.]+ +\| +[0-9.]+ us +[0-9.]+ +\| +[0-9.]+ us +[0-9.]+" "$out")
check '[ "$rows" -eq 18 ] && grep -q "^ *1 MiB |" "$out"' "the sweep has a row for each size 8 B ... 1 MiB, each with all four collectives ($rows rows)"
check 'grep -q "busbw = algbw x 2(n-1)/n (all-reduce), x (n-1)/n" "$out" && grep -q "^  verdict: all-reduce  *peaks at" "$out"' "nccl-tests' bus bandwidth and a verdict"
check 'grep -q "^  rank 0 <-> rank 1 | shm .* measured *[0-9.]* GB/s each way .* verdict:" "$out"' "a verdict line for the pair"
check 'grep -q "^doctor | 0 problem(s)" "$out"' "no problem on a healthy pair of CPU ranks"
check '! grep -q "^axes:" "$out"' "without layout keys there is no axes section (the world's checks alone, as before)"
# the defaults, as the README runs them: 1 GiB at most, 20 s of sweep; on 2 busy cores it stops where the time runs out
# (once: the sanitizer pass runs the same code in the short sweeps around it)
if [ -z "${LLM3D_SANITIZER_PASS:-}" ]; then
t0=$(date +%s)
timeout 120 mpirun -np 2 "$BUILD"/train doctor > "$out" 2>&1; rc=$?
secs=$(( $(date +%s) - t0 ))
check '[ $rc -eq 0 ] && grep -q "^doctor | 0 problem(s)" "$out"' "the default sweep on 2 CPU ranks ends green (exit $rc, $secs s): $(grep -m3 -E "error|watchdog|PROBLEM" "$out")"
check '[ $secs -le 60 ]' "it fits its budget: --sweep_seconds=20, the whole doctor in $secs s (at most 60)"
check 'grep -q "while the next size fits in 20 s" "$out" && { grep -q "^ *1 GiB |" "$out" || grep -q "^  (stopped after [0-9]* [KMG]*i*B: [0-9.]* s spent, and [0-9]* [KMG]*i*B would take about [0-9.]* s more, past --sweep_seconds=20;" "$out"; }' \
      "it reaches --max_bytes or says where it stopped and why: $(grep -A1 "stopped after" "$out")"
check '! grep -qE "watchdog|did not complete|not arrived|^error" "$out"' "no operation is cut off by a deadline"
rows=$(grep -cE "^ +[0-9]+ (B|KiB|MiB|GiB) " "$out")
bad=$(grep -E "^ +[0-9]+ (B|KiB|MiB|GiB) " "$out" | grep -cvE "^ +[0-9]+ (B|KiB|MiB|GiB)( \| +[0-9.]+ us +[0-9.]+ +){4}$")
check '[ "$rows" -ge 18 ] && [ "$bad" -eq 0 ]' "every row of the table is a whole line of four cells ($rows rows, 8 B up to 1 MiB at least; $bad not whole)"
fi
# a budget of 1 s: the sweep stops early, and says so
timeout 120 mpirun -np 2 "$BUILD"/train doctor --sweep_seconds=1 --pairs=0 > "$out" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "^  (stopped after .* past --sweep_seconds=1;" "$out" && ! grep -q "^ *1 GiB |" "$out"' \
      "--sweep_seconds=1 stops the sweep early and says so (exit $rc): $(grep "stopped after" "$out")"

timeout 120 "$BUILD"/train doctor --nproc=2 --sweep=0 > "$out" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "^launch | mpirun .*-np 2 .* doctor --sweep=0" "$out" && grep -q "^doctor | 2 rank(s)" "$out"' "doctor --nproc=2 (exit $rc)"

# a bootstrap address no rank can reach (the limited broadcast address: \"Network is unreachable\" on any Linux)
NCCL_COMM_ID=255.255.255.255:29500 timeout 120 mpirun -np 2 "$BUILD"/train doctor --timeout=2 --sweep=0 > "$out" 2>&1; rc=$?
check '[ $rc -ne 0 ] && grep -q "PROBLEM: rank 1 (host .*) cannot reach rank 0 at 255.255.255.255:29500: Network is unreachable" "$out"' \
      "an unreachable bootstrap address is a PROBLEM naming the rank, the address and why (exit $rc)"
check 'grep -q "fix: set NCCL_SOCKET_IFNAME" "$out" && grep -q "^doctor | 2 problem(s)" "$out"' "with the error table's fix, and exit 1"

# the layout keys: every axis of more than one rank, each of its groups as the grid formula has them, OK; no other axis
# axis_ok NAME SIZE GROUPS: the axis's line is there, with its members and OK
axis_ok() { grep -qE "^  $1 +\| $2 ranks x [0-9]+ groups?: $3 \| sum, members, host sum right \| all-reduce 64 KiB [0-9.]+ GB/s \| all-gather 64 KiB [0-9.]+ GB/s \| OK$" "$out"; }
axes_seen() { grep -cE "^  (tp|cp|pp|dp|dp x cp|tp x pp) +\| " "$out"; }
timeout 120 mpirun -np 4 "$BUILD"/train doctor --dp=2 --cp=2 --sweep=0 --max_bytes=64K > "$out" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "^doctor | 4 rank(s) .* | layout dp=2 x pp=1 x cp=2 x tp=1$" "$out" && grep -q "^doctor | 0 problem(s)" "$out"' \
      "dp2 x cp2 on 4 ranks (exit $rc): $(grep -m2 -E "^error|PROBLEM" "$out")"
check 'axis_ok cp 2 "\[0 1\] \[2 3\]" && axis_ok dp 2 "\[0 2\] \[1 3\]" && axis_ok "dp x cp" 4 "\[0 1 2 3\]" && [ "$(axes_seen)" -eq 3 ]' \
      "dp2 x cp2: cp, dp and dp x cp each OK over the grid's groups, no other axis: $(grep -E "^  (tp|cp|pp|dp)" "$out")"
check 'grep -q "^  verdict: every axis sums right over the members the grid formula gives" "$out"' "dp2 x cp2: the axes' verdict"
timeout 120 "$BUILD"/train doctor --nproc=4 --tp=2 --cp=2 --sweep=0 --max_bytes=64K > "$out" 2>&1; rc=$?
check '[ $rc -eq 0 ] && axis_ok tp 2 "\[0 1\] \[2 3\]" && axis_ok cp 2 "\[0 2\] \[1 3\]" && axis_ok "dp x cp" 2 "\[0 2\] \[1 3\]" && [ "$(axes_seen)" -eq 3 ]' \
      "tp2 x cp2 (--nproc=4): tp, cp and dp x cp each OK (exit $rc): $(grep -E "^  (tp|cp|pp|dp)|^error" "$out")"
timeout 120 mpirun -np 4 "$BUILD"/train doctor --pp=2 --cp=2 --sweep=0 --max_bytes=64K > "$out" 2>&1; rc=$?
check '[ $rc -eq 0 ] && axis_ok cp 2 "\[0 1\] \[2 3\]" && axis_ok pp 2 "\[0 2\] \[1 3\]" && axis_ok "dp x cp" 2 "\[0 1\] \[2 3\]" && [ "$(axes_seen)" -eq 3 ]' \
      "pp2 x cp2: cp, pp and dp x cp each OK (exit $rc): $(grep -E "^  (tp|cp|pp|dp)|^error" "$out")"
# a wrong sum over one axis: FAIL on its line, a PROBLEM naming it, exit 1; the other axes stay OK
timeout 120 mpirun -np 4 "$BUILD"/train doctor --tp=2 --cp=2 --sweep=0 --max_bytes=64K --fault=sum:axis=cp:rank=3 > "$out" 2>&1; rc=$?
check '[ $rc -ne 0 ] && grep -qE "^  cp +\| 2 ranks x 2 groups: \[0 2\] \[1 3\] \| sum or members WRONG \| .* \| FAIL$" "$out" && axis_ok tp 2 "\[0 1\] \[2 3\]"' \
      "a wrong sum over cp is its FAIL line, tp stays OK (exit $rc): $(grep -E "^  (tp|cp)" "$out")"
check 'grep -q "PROBLEM: axis cp: 2 rank(s) got a wrong result; rank 1 (group \[1 3\]): the all-reduce gave 7 at value 15 where 6" "$out" && grep -q "^doctor | 1 problem(s)" "$out"' \
      "the PROBLEM names the axis, the group and the sums: $(grep PROBLEM "$out")"
# a rank that never joins one axis's sum: the watchdog ends every rank within --timeout, and the doctor names the axis
t0=$(date +%s)
timeout 120 mpirun -np 4 "$BUILD"/train doctor --tp=2 --cp=2 --sweep=0 --max_bytes=64K --timeout=2 --fault=stall:axis=cp:rank=3 > "$out" 2>&1; rc=$?
secs=$(( $(date +%s) - t0 ))
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "watchdog: .* did not complete within its deadline of 2 s" "$out" && grep -q "doctor | axis cp: FAIL: this rank (its group \[[0-9 ]*\]) ended while the axis was being checked" "$out"' \
      "a rank that never joins cp: the watchdog ends the job and the doctor names the axis (exit $rc, $secs s): $(grep -m3 -E "watchdog:|axis cp" "$out")"
check '[ $secs -le 30 ]' "the stall ends within the deadline and a few seconds ($secs s)"
# a layout that is not the world: refused once, non-zero, under mpirun (comm_init, as training) and before --nproc starts ranks
timeout 60 mpirun -np 4 "$BUILD"/train doctor --dp=2 --cp=2 --tp=2 --sweep=0 > "$out" 2>&1; rc=$?
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c "dp\*pp\*cp\*tp = 2\*1\*2\*2 = 8, but 4 ranks were launched" "$out")" -eq 1 ] && ! grep -q "^axes:" "$out"' \
      "dp2 x cp2 x tp2 on 4 ranks is refused in words, once (exit $rc): $(grep -m2 "error" "$out")"
timeout 60 "$BUILD"/train doctor --nproc=4 --cp=3 --sweep=0 > "$out" 2>&1; rc=$?
check '[ $rc -eq 1 ] && grep -q "^error: doctor: --nproc=4 starts 4 ranks, but the layout dp=1 x pp=1 x cp=3 x tp=1 takes 3" "$out" && ! grep -q "^launch |" "$out"' \
      "--nproc=4 --cp=3 is refused before any rank starts (exit $rc): $(head -1 "$out")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
