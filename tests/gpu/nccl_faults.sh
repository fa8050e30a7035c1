#!/usr/bin/env bash
# tests/gpu/nccl_faults.sh — the fault table of tests/test_faults.sh through real
# NCCL, every rank a test host on the one GPU (LLM3D_NCCL_HOSTS_ON_ONE_GPU=1):
#   - a rank whose collective never starts (fault=stall: its comm stream stops);
#   - a rank that exits; SIGKILL of a non-zero rank; SIGSTOP of a whole process;
#   - NaN on one rank, fp16 (the step is skipped on every rank, as one rank with
#     the same NaN does) and bf16 (stops in words, said once);
#   - SIGTERM to rank 0, and to a non-zero rank: a checkpoint, exit 0.
# A failing job must end on every rank within comm_timeout_s (T=5) + MARGIN
# seconds of the fault (the watchdog's 2 s of questions, 1 s for
# ncclCommAbort, and mpirun ending ranks that hold CUDA contexts), name the
# culprit (the watchdog, or mpirun for a rank that died), leave no process, write
# the flight recorder, end stuck collectives with ncclCommAbort, and its last
# complete checkpoint must resume on another layout. Logs under $OUT (or
# build/gpu)/nccl_faults. Ends with "N passed, N failed".
#   run: make -j16 && tests/gpu/nccl_faults.sh
source "$(dirname "$0")/nccl_common.sh"
T=5 MARGIN=12
args="--train_data=$d/data/train_*.bin --val_data= --device=cuda --comm_backend=nccl --dim=128 --n_layers=4 --n_heads=4 --n_kv_heads=2
      --ffn_dim=256 --seq_len=64 --batch_size=4 --total_batch_tokens=1024 --warmup_steps=0 --log_every=1 --sample_tokens=0 --comm_timeout_s=$T"
limit=$((T + MARGIN))
not_healthy() { ! grep -qE "not arrived: rank ($1) " "$LOGS/$2.log"; }   # no rank of the ERE named as not arrived
flights() { ls "$d/$1"/flight_rank*.txt 2>/dev/null | wc -l; }
# ncclCommAbort: every rank that reported the stall called it (its line says whether it returned within the
# watchdog's 5 s). With NCCL 2.28 on test hosts it does not return while a peer is stopped or blocked: an abort
# needs every rank of the communicator to take part (NVIDIA/nccl#863), so the watchdog calls it to stop the
# spinning kernels where it can and ends the process without waiting (no process left is checked separately).
aborts() { local n w; n=$(grep -c "^error: \[rank [0-9]*/[0-9]*\] watchdog:" "$LOGS/$1.log"); w=$(grep -c "watchdog: \[rank [0-9]*\] .*ncclCommAbort" "$LOGS/$1.log"); [ "$n" -ge 1 ] && [ "$w" -eq "$n" ]; }
abort_said() { grep -ho "ncclCommAbort[^:]*" "$LOGS/$1.log" | sort | uniq -c | tr -s ' ' | paste -sd';' -; }
# resume_on NAME RANKS [layout...]: the last complete checkpoint of NAME, continued one step on another layout
resume_on() {
    local name=$1 ranks=$2; shift 2
    local last; last=$(ls -d "$d/$name"/ckpt_[0-9]*[0-9] 2>/dev/null | tail -1); last=${last##*_}; last=$((10#${last:-0}))
    local steps=$((last + 1))
    timeout 60 mpirun -np "$ranks" build/train $args "$@" --max_steps="$steps" --checkpoint_every=-1 --resume=1 --run_dir="$d/$name" \
        >"$LOGS/${name}_resume.log" 2>&1; local r=$?
    check '[ $r -eq 0 ] && [ $last -gt 0 ] && grep -q "^resume | step $last from" "$LOGS/${name}_resume.log" && grep -q "^step *$steps/$steps" "$LOGS/${name}_resume.log" && grep -q "through nccl" "$LOGS/${name}_resume.log"' \
          "$name: its last complete checkpoint (step $last) resumes on $ranks ranks, $* (exit $r): $(tail -1 "$LOGS/${name}_resume.log")"
}

echo "== a rank whose collective never starts: dp=4, rank 1's comm stream stops at step 3"
job stall 4 $args --dp=4 --max_steps=1000 --checkpoint_every=1 --fault=stall:rank=1:step=3
mark stall "fault: rank 1 stalls at step 3"; finished
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && within "$after" $limit' "stall: every rank out within $T + $MARGIN s of the stall (exit $rc, $after s)"
check 'grep -qE "watchdog: all-reduce over the dp group \(4 ranks, .* at step 3, .*did not complete within its deadline of $T s" "$LOGS/stall.log"' \
      "stall: the op, group, step and deadline named: $(grep -m1 "watchdog:" "$LOGS/stall.log" | cut -c1-200)"
check 'grep -q "not arrived: rank 1 (" "$LOGS/stall.log" && not_healthy "0|2|3" stall' "stall: rank 1 named as not arrived, no healthy rank: $(grep -m1 "not arrived" "$LOGS/stall.log")"
check 'aborts stall' "stall: every rank that saw the stall called ncclCommAbort ($(abort_said stall)), then ended its process"
check '[ "$(flights stall)" -ge 1 ] && grep -q "IN FLIGHT" "$d"/stall/flight_rank*.txt' "stall: flight recorder written ($(flights stall) file(s)), with the op in flight"
sleep 1
check '[ "$(left stall)" -eq 0 ] && [ -f "$d/stall/ckpt_00000002/DONE" ] && [ ! -e "$d/stall/ckpt_00000003" ]' "stall: no process left; checkpoint 2 complete, none after"
resume_on stall 4 --dp=2 --pp=2

echo "== a rank that exits: dp=2, rank 1 at step 3"
job exit 2 $args --dp=2 --max_steps=1000 --checkpoint_every=-1 --fault=exit:rank=1:step=3
mark exit "fault: rank 1 exits at step 3"; finished
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && within "$after" $limit' "exit: every rank out within $T + $MARGIN s (exit $rc, $after s)"
check 'grep -qE "process rank 1 with PID|Process name: \[\[[0-9]+,[0-9]+\],1\]|not answering: rank 1 |not arrived: rank 1 " "$LOGS/exit.log"' \
      "exit: rank 1 named: $(grep -m1 -E "process rank 1|Process name|not answering|not arrived" "$LOGS/exit.log")"
sleep 1
check '[ "$(left exit)" -eq 0 ]' "exit: no process left"

echo "== SIGKILL of rank 2 of dp=4"
job kill 4 $args --dp=4 --max_steps=100000 --checkpoint_every=2
mark kill "^step +5/"; victim=$(rank_pid kill 2)
[ -n "$victim" ] && kill -KILL "$victim"; t_mark=$(date +%s.%N); finished
check '[ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && within "$after" $limit' "kill: every rank out within $T + $MARGIN s of the SIGKILL (exit $rc, $after s)"
check 'grep -qE "process rank 2 with PID [0-9]+ .*signal 9|not answering: rank 2 " "$LOGS/kill.log"' "kill: rank 2 named: $(grep -m1 -E "rank 2 with PID|not answering" "$LOGS/kill.log")"
sleep 1
check '[ "$(left kill)" -eq 0 ]' "kill: no process left"
resume_on kill 4 --dp=2 --tp=2

echo "== SIGSTOP of a whole process: rank 2 of dp=4"
job stop 4 $args --dp=4 --max_steps=100000 --checkpoint_every=-1
mark stop "^step +5/"; victim=$(rank_pid stop 2)
[ -n "$victim" ] && kill -STOP "$victim"; t_mark=$(date +%s.%N); finished
sleep 1
n_left=$(left stop)
[ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
check '[ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && within "$after" $limit' "stop: every rank out within $T + $MARGIN s of the SIGSTOP (exit $rc, $after s)"
check 'grep -q "^  not answering: rank 2 did not answer the watchdog" "$LOGS/stop.log"' "stop: the frozen rank named as not answering: $(grep -m1 "not answering" "$LOGS/stop.log" | cut -c1-120)"
check 'not_healthy "0|1|3" stop && ! grep -qE "^  arrived: .* 2( |$)" "$LOGS/stop.log"' "stop: no healthy rank named in its place; the frozen one never listed as arrived"
check 'aborts stop && [ "$(flights stop)" -ge 1 ]' "stop: every rank that saw the stall called ncclCommAbort ($(abort_said stop)); flight recorder written ($(flights stop) file(s))"
check '[ "$n_left" -eq 0 ]' "stop: no process left, the stopped one included ($n_left left)"

echo "== NaN on rank 1 at step 2: fp16 skips the step on every rank; bf16 stops in words"
timeout 60 mpirun -np 2 build/train $args --dp=2 --max_steps=4 --checkpoint_every=-1 --precision=fp16 --fault=nan:rank=1:step=2 \
    --run_dir="$d/nan16" >"$LOGS/nan16.log" 2>&1; rc=$?
timeout 60 build/train $args --max_steps=4 --checkpoint_every=-1 --precision=fp16 --fault=nan:rank=0:step=2 --run_dir="$d/nan16one" \
    >"$LOGS/nan16one.log" 2>&1
losses() { grep "^step" "$1" | sed 's/.*| loss \([0-9.]*\) .*/\1/' | tr '\n' ' '; }
check '[ $rc -eq 0 ] && grep -q "^step *4/4 .* skipped 1$" "$LOGS/nan16.log" && grep -q "through nccl" "$LOGS/nan16.log"' "nan fp16: the step is skipped and the run goes on (exit $rc)"
check 'a=$(losses "$LOGS/nan16.log"); b=$(losses "$LOGS/nan16one.log"); [ -n "$b" ] && awk -v a="$a" -v b="$b" "BEGIN { n = split(a, x); m = split(b, y); if (n != m || n != 4) exit 1; for (i = 1; i <= n; i++) if ((x[i] - y[i]) ^ 2 > (1e-3 * y[i]) ^ 2) exit 1 }"' \
      "nan fp16: every rank skipped it, the losses of one rank with the same NaN within 1e-3 ($(losses "$LOGS/nan16.log")| $(losses "$LOGS/nan16one.log"))"
t0=$(date +%s.%N)
timeout 60 mpirun -np 2 build/train $args --dp=2 --max_steps=4 --checkpoint_every=-1 --precision=bf16 --fault=nan:rank=1:step=2 \
    --run_dir="$d/nanbf" >"$LOGS/nanbf.log" 2>&1; rc=$?
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "error: step 2: the gradients are not finite (global norm nan) and precision=bf16" "$LOGS/nanbf.log" && ! grep -q "^step *2/" "$LOGS/nanbf.log"' \
      "nan bf16: the run stops in words at step 2 (exit $rc, $(awk -v s="$t0" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - s }') s in all)"
check '[ "$(grep -c "gradients are not finite" "$LOGS/nanbf.log")" -eq 1 ]' "nan bf16: said once"

for who in "0 2 --dp=2" "3 4 --dp=2 --pp=2"; do
    set -- $who; r=$1; n=$2; shift 2
    name=term$r
    echo "== SIGTERM to rank $r of $n ($*)"
    job "$name" "$n" $args "$@" --max_steps=100000 --checkpoint_every=0
    mark "$name" "^step +4/"; victim=$(rank_pid "$name" "$r")
    [ -n "$victim" ] && kill -TERM "$victim"; finished
    stopped=$(sed -n 's/^stop  | SIGTERM after step \([0-9]*\)$/\1/p' "$LOGS/$name.log")
    check '[ -n "$victim" ] && [ $rc -eq 0 ] && [ -n "$stopped" ] && [ -f "$d/$name/ckpt_$(printf %08d "${stopped:-0}")/DONE" ]' \
          "$name: every rank finishes the step, one checkpoint (step $stopped), exit 0 (got $rc): $(tail -1 "$LOGS/$name.log")"
    check '[ "$(grep -c "^stop  |" "$LOGS/$name.log")" -eq 1 ] && [ "$(left "$name")" -eq 0 ]' "$name: the stop said once; no process left"
done
resume_on term3 4 --dp=4
finish
