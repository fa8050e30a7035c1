#!/usr/bin/env bash
# tests/gpu/nccl_doctor.sh — `build/train doctor` over 2, 4 and 8 test hosts on
# the one GPU (LLM3D_NCCL_HOSTS_ON_ONE_GPU=1): every rank a host of its own,
# each pair's transport named (net: NCCL's network transport, sockets on lo),
# the bandwidth sweep through NCCL with a verdict that says it measured loopback
# sockets, not NVLink; then two of the seed's errors provoked and answered with
# the doctor's hint: NCCL_SOCKET_IFNAME naming no interface, and a rank that
# cannot reach rank 0 (NCCL_COMM_ID at an unreachable address); the layout keys'
# axis checks (dp2 x cp2, tp2 x pp2) through NCCL's split communicators. Logs under
# $OUT (or build/gpu)/nccl_doctor. Ends with "N passed, N failed".
#   run: make -j16 && tests/gpu/nccl_doctor.sh
source "$(dirname "$0")/nccl_common.sh"

for n in 2 4 8; do
    echo "== doctor over $n test hosts"
    log="$LOGS/doctor$n.log"
    t0=$(date +%s)
    timeout 120 mpirun -np $n build/train doctor --device=cuda --max_bytes=4M --sweep_seconds=60 >"$log" 2>&1; rc=$?
    pairs=$((n * (n - 1) / 2))
    check '[ $rc -eq 0 ] && grep -q "^doctor | $n rank(s) on $n host(s) | device cuda, .* | device collectives through nccl" "$log"' \
          "$n hosts: $n ranks on $n hosts through NCCL, exit $rc ($(( $(date +%s) - t0 )) s): $(grep -m1 "^doctor |" "$log")"
    check '[ "$(grep -c "^comm  | LLM3D_NCCL_HOSTS_ON_ONE_GPU=1, a test setup" "$log")" -eq 1 ]' "$n hosts: the test setup said once"
    check 'grep -q "verdict: every rank reaches rank 0.s bootstrap port" "$log" && grep -q "NCCL.s bootstrap would use lo (127.0.0.1), chosen by NCCL_SOCKET_IFNAME" "$log"' \
          "$n hosts: every rank reaches rank 0's bootstrap port on lo"
    check '[ "$(grep -cE "^  rank [0-9]+ <-> rank [0-9]+ \| net .*verdict: loopback sockets" "$log")" -eq $pairs ]' \
          "$n hosts: each of the $pairs pairs named net (NCCL's network transport) with the loopback verdict: $(grep -m1 "<->" "$log" | cut -c1-150)"
    check 'grep -q "^  verdict: every collective above measured loopback sockets" "$log" && grep -qE "^ +4 MiB \|" "$log"' \
          "$n hosts: the sweep reaches 4 MiB and its verdict says it measured loopback sockets, not NVLink"
    check 'grep -q "^doctor | 0 problem(s)" "$log"' "$n hosts: no problem found: $(tail -1 "$log")"
done

# the layout keys through NCCL (split communicators, one per group): every axis of more than one rank OK over the
# members the grid formula gives (tests/test_doctor.sh has the same cases on CPU ranks, and the faults)
axis_ok() { grep -qE "^  $1 +\| $2 ranks x [0-9]+ groups?: $3 \| sum, members, host sum right \| all-reduce 64 KiB [0-9.]+ GB/s \| all-gather 64 KiB [0-9.]+ GB/s \| OK$" "$log"; }
axes_seen() { grep -cE "^  (tp|cp|pp|dp|dp x cp|tp x pp) +\| " "$log"; }
echo "== the axes of dp2 x cp2 and tp2 x pp2, 4 test hosts"
log="$LOGS/axes_dpcp.log"
timeout 120 mpirun -np 4 build/train doctor --device=cuda --dp=2 --cp=2 --sweep=0 --max_bytes=64K >"$log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "^doctor | 4 rank(s) on 4 host(s) | device cuda, .* | device collectives through nccl" "$log" && grep -q "^doctor | 0 problem(s)" "$log"' \
      "dp2 x cp2 through NCCL, exit $rc: $(grep -m2 -E "^error|PROBLEM" "$log")"
check 'axis_ok cp 2 "\[0 1\] \[2 3\]" && axis_ok dp 2 "\[0 2\] \[1 3\]" && axis_ok "dp x cp" 4 "\[0 1 2 3\]" && [ "$(axes_seen)" -eq 3 ]' \
      "dp2 x cp2: cp, dp and dp x cp OK through NCCL: $(grep -E "^  (cp|dp) " "$log" | cut -c1-60 | tr '\n' ';')"
log="$LOGS/axes_tppp.log"
timeout 120 mpirun -np 4 build/train doctor --device=cuda --tp=2 --pp=2 --sweep=0 --max_bytes=64K >"$log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && axis_ok tp 2 "\[0 1\] \[2 3\]" && axis_ok pp 2 "\[0 2\] \[1 3\]" && axis_ok "tp x pp" 4 "\[0 1 2 3\]" && [ "$(axes_seen)" -eq 3 ]' \
      "tp2 x pp2: tp, pp and tp x pp OK through NCCL, exit $rc: $(grep -E "^  (tp|pp) " "$log" | cut -c1-60 | tr '\n' ';')"

echo "== NCCL_SOCKET_IFNAME naming no interface, 2 test hosts"
log="$LOGS/ifname.log"
NCCL_SOCKET_IFNAME=nosuchif timeout 120 mpirun -np 2 build/train doctor --device=cuda --sweep=0 --timeout=5 >"$log" 2>&1; rc=$?
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "PROBLEM: on host llm3d-test-host-0 NCCL_SOCKET_IFNAME=nosuchif matches no interface" "$log"' \
      "the interface is named as a PROBLEM on the test host, exit $rc not a hang: $(grep -m1 PROBLEM "$log")"
check 'grep -q "fix: .ip -br addr. on each host; set NCCL_SOCKET_IFNAME" "$log"' "with the error table's fix"

echo "== a rank that cannot reach rank 0 (NCCL_COMM_ID at the limited broadcast address), 2 test hosts"
log="$LOGS/unreachable.log"
NCCL_COMM_ID=255.255.255.255:29500 timeout 120 mpirun -np 2 build/train doctor --device=cuda --sweep=0 --timeout=2 >"$log" 2>&1; rc=$?
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "PROBLEM: rank 1 (host llm3d-test-host-1) cannot reach rank 0 at 255.255.255.255:29500: Network is unreachable" "$log"' \
      "the rank, its test host, the address and why, exit $rc not a hang: $(grep -m1 "cannot reach" "$log")"
check 'grep -q "fix: set NCCL_SOCKET_IFNAME" "$log"' "with the error table's fix"
finish
