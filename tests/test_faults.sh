#!/usr/bin/env bash
# tests/test_faults.sh — what happens when one rank misbehaves (CPU ranks
# under mpirun, a tiny model, the test-only key fault=KIND:rank=R[:step=S]):
#   - a stalled rank: every rank is out within comm_timeout_s plus a few
#     seconds, the message names the op, the step and rank 1 as not arrived,
#     the flight recorder is in run_dir, and the last complete checkpoint resumes;
#     under cp = 2 the stalled collective is the cp group's K/V all-gather, and the flight
#     recorder names the cp and dp x cp groups of its records;
#     in the first step the deadline is 5 x comm_timeout_s;
#   - a rank that exits: the others are out within the deadline, none left over;
#   - a whole process frozen (SIGSTOP of rank 2 of 3): it is named as not
#     answering, never as arrived, and no healthy rank is named in its place;
#   - a NaN on one rank: fp16 skips the step on every rank (the same losses as
#     one rank with the same NaN); bf16 and fp32 stop in words;
#   - a slow rank: the straggler line names it, with its data wait;
#   - SIGKILL of rank 0 in the middle of writing a checkpoint: resuming from
#     the last complete one ends bit-exact with a run never interrupted;
#   - bad input: comm_timeout_s of 0 or below is refused in words.
source "$(dirname "$0")/tally.sh"
dir=$(mktemp -d /tmp/llm3d_test_faults.XXXXXX)
trap '[ -z "${KEEP:-}" ] && rm -rf "$dir"' EXIT
"$BUILD"/train prepare --input=tests/data/sotu_sample.txt --out="$dir/data" --train-vocab=300 >/dev/null 2>&1
common="--train_data=$dir/data/train_*.bin --val_data= --dim=32 --n_layers=2 --n_heads=4 --n_kv_heads=2 --ffn_dim=64
        --seq_len=16 --batch_size=2 --total_batch_tokens=128 --warmup_steps=0 --log_every=1 --sample_tokens=0"

# bad input, one process
for t in 0 -5; do
    "$BUILD"/train $common --comm_timeout_s=$t --run_dir="$dir/bad" > "$dir/bad.log" 2>&1; rc=$?
    check '[ $rc -eq 1 ] && grep -q "^error: comm_timeout_s=$t: a collective needs a deadline" "$dir/bad.log"' \
          "comm_timeout_s=$t is refused in words (exit $rc): $(head -3 "$dir/bad.log")"
done
# fp32 on one rank: a non-finite gradient stops the run in words (it used to skip the step)
"$BUILD"/train $common --max_steps=3 --checkpoint_every=-1 --run_dir="$dir/nan32" --fault=nan:rank=0:step=2 > "$dir/nan32.log" 2>&1; rc=$?
check '[ $rc -eq 1 ] && grep -q "^error: step 2: the gradients are not finite .* precision=fp32" "$dir/nan32.log"' \
      "fp32, one rank: a NaN gradient stops the run in words (exit $rc): $(grep error "$dir/nan32.log")"

if ! command -v mpirun >/dev/null || ! ldd "$BUILD/train" | grep -q libmpi; then
    echo "skipped the multi-rank faults: no mpirun, or this build has no Open MPI"; echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# runs `mpirun -np 2 build/train ... --run_dir=$dir/NAME`; sets rc and secs (wall time of the whole job)
job() {
    local name=$1; shift
    local t0=$(date +%s.%N)
    timeout 120 mpirun -np 2 "$BUILD"/train $common --dp=2 --run_dir="$dir/$name" "$@" > "$dir/$name.log" 2>&1; rc=$?
    secs=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
}
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }   # is $1 < $2 (seconds with decimals; awk, not bc)
# a process of that job still alive? Without pgrep it cannot tell, so it says yes: the check fails, never passes unchecked
left() { command -v pgrep >/dev/null || return 0; pgrep -f -- "--run_dir=$dir/$1( |\$)" >/dev/null; }
require pgrep procps
T=3   # comm_timeout_s of these tests; start-up and the first step get 5x
limit=$((T + 12))   # the deadline, the watchdog's questions (2 s), the end, and mpirun starting two ranks on a busy 2-core machine

# a stalled rank: rank 1 sleeps before step 3's collectives
job stall --max_steps=8 --checkpoint_every=1 --comm_timeout_s=$T --fault=stall:rank=1:step=3
log="$dir/stall.log"
check '[ $rc -ne 0 ] && [ $rc -ne 124 ]' "the stalled job fails, not hangs (exit $rc)"
check 'lt "$secs" "$limit"' "every rank is out within comm_timeout_s=$T s + a few (took $secs s)"
check 'grep -q "watchdog: all-reduce over the dp group (2 ranks, .*), its operation #[0-9]* there, at step 3, micro-batch [0-9], did not complete within its deadline of 3 s" "$log"' \
      "the message names the op, its group, size, step and micro-batch: $(grep -A3 watchdog: "$log" | head -4)"
check 'grep -q "not arrived: rank 1 (host .*: step 3, busy outside any collective; it has begun [0-9]* operations over dp, the stalled one is #[0-9]*)" "$log"' \
      "the message names rank 1 as not arrived"
check 'grep -q "IN FLIGHT" "$dir/stall/flight_rank0.txt" && grep -q "^# flight recorder of rank 0 of 2" "$dir/stall/flight_rank0.txt"' \
      "rank 0's flight recorder is in run_dir with the stalled all-reduce in flight"
sleep 0.5
check '! left stall' "no process of the stalled job is left"
check '[ -f "$dir/stall/ckpt_00000002/DONE" ] && [ ! -e "$dir/stall/ckpt_00000003" ]' "the last complete checkpoint (step 2) is intact"
job stall --max_steps=3 --checkpoint_every=1 --comm_timeout_s=$T --resume=1
check '[ $rc -eq 0 ] && grep -q "^resume | step 2 from" "$dir/stall.log" && grep -q "^step *3/3" "$dir/stall.log"' \
      "the job resumes from it: $(tail -2 "$dir/stall.log")"

# the same stall under context parallelism: the first collective rank 0 waits in is a layer's K/V all-gather, named
# with the cp group (a blocking collective, in the flight recorder as the others are)
job cpstall --dp=1 --cp=2 --max_steps=4 --checkpoint_every=-1 --comm_timeout_s=$T --fault=stall:rank=1:step=3
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && lt "$secs" $limit && grep -q "watchdog: all-gather over the cp group (2 ranks" "$dir/cpstall.log" && grep -q "not arrived: rank 1 " "$dir/cpstall.log"' \
      "cp=2: a stalled rank is called in the cp group's all-gather, every rank out (exit $rc, $secs s): $(grep -m1 watchdog: "$dir/cpstall.log" | cut -c1-160)"
fr="$dir/cpstall/flight_rank0.txt"
check 'grep -q "all-gather  *cp  .*IN FLIGHT" "$fr" && grep -q "reduce-scatter  *cp  .*done" "$fr" && grep -q "all-reduce  *dp x cp  .*done" "$fr"' \
      "cp=2: the flight recorder holds the cp all-gather in flight, the dK/dV reduce-scatters over cp and the gradients' all-reduce over dp x cp: $(grep -c ' cp ' "$fr" 2>/dev/null) records over cp"
check '! left cpstall' "no process of the stalled cp job is left"

# the first step gets 5x the deadline (start-up, NCCL's connections): a stall there is called after 5 s, not 1
job stall1 --max_steps=3 --checkpoint_every=-1 --comm_timeout_s=1 --fault=stall:rank=1:step=1
check '[ $rc -ne 0 ] && grep -q "at step 1, micro-batch [0-9], did not complete within its deadline of 5 s" "$dir/stall1.log" && lt 5 "$secs"' \
      "a stall in the first step is called after 5 x comm_timeout_s (exit $rc, $secs s): $(grep watchdog: "$dir/stall1.log")"

# a rank that exits at step 2
job exit --max_steps=8 --checkpoint_every=-1 --comm_timeout_s=$T --fault=exit:rank=1:step=2
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && lt "$secs" "$limit"' "a rank that exits ends the job within the deadline (exit $rc, $secs s)"
sleep 0.5
check '! left exit' "no process of that job is left"

# a whole process frozen: SIGSTOP to rank 2 of 3 in the middle of the run
timeout 120 mpirun -np 3 "$BUILD"/train $common --dp=3 --total_batch_tokens=96 --max_steps=100000 --checkpoint_every=-1 \
    --comm_timeout_s=$T --run_dir="$dir/frozen" > "$dir/frozen.log" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "^step *4/" "$dir/frozen.log" 2>/dev/null && break; sleep 0.1; done
victim=""
for p in $(pgrep -f -- "--run_dir=$dir/frozen( |\$)"); do
    grep -qz "^OMPI_COMM_WORLD_RANK=2$" /proc/$p/environ 2>/dev/null && victim=$p
done
t0=$(date +%s.%N)
[ -n "$victim" ] && kill -STOP "$victim"
wait $job; rc=$?
secs=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
[ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null   # if the job left it stopped, the check below says so first
log="$dir/frozen.log"
check '[ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && lt "$secs" "$limit"' \
      "a frozen rank 2: the job ends within comm_timeout_s=$T s + a few (exit $rc, $secs s after the SIGSTOP)"
check 'grep -q "^  not answering: rank 2 did not answer the watchdog within 2 s: its whole process is frozen" "$log"' \
      "the frozen rank is named as not answering: $(grep -A4 "watchdog:" "$log" | head -5)"
check '! grep -q "not arrived: rank [01] " "$log" && ! grep -qE "^  arrived: .* 2( |$)" "$log"' \
      "no healthy rank is named in its place, and the frozen one is never listed as arrived"
check 'grep -qE "^  arrived: 1 rank\(s\): [01]$" "$log" && [ -s "$dir/frozen/flight_rank0.txt" ]' \
      "the healthy rank waiting with the reporter is listed as arrived; rank 0's flight recorder is written"

# NaN on rank 1 at step 2
job nan16 --max_steps=4 --checkpoint_every=-1 --precision=fp16 --fault=nan:rank=1:step=2
one=$(timeout 60 "$BUILD"/train $common --max_steps=4 --checkpoint_every=-1 --precision=fp16 --run_dir="$dir/nan16one" --fault=nan:rank=0:step=2 2>&1)
losses() { grep "^step" | sed 's/.*| loss \([0-9.]*\) .*/\1/' | tr '\n' ' '; }
check '[ $rc -eq 0 ] && grep -q "^step *4/4 .* skipped 1$" "$dir/nan16.log"' "fp16: the NaN step is skipped and the run goes on (exit $rc)"
check '[ "$(losses < "$dir/nan16.log")" = "$(echo "$one" | losses)" ] && [ -n "$(echo "$one" | losses)" ]' \
      "fp16: every rank skipped it — the same losses as one rank with the same NaN ($(losses < "$dir/nan16.log")| $(echo "$one" | losses))"
job nanbf --max_steps=4 --checkpoint_every=-1 --precision=bf16 --fault=nan:rank=1:step=2
# (not anchored at a line's start: mpirun may forward another rank's unfinished line just before it)
check '[ $rc -ne 0 ] && grep -q "error: step 2: the gradients are not finite (global norm nan) and precision=bf16" "$dir/nanbf.log" && ! grep -q "^step *2/" "$dir/nanbf.log"' \
      "bf16: the run stops in words at step 2 (exit $rc): $(grep error "$dir/nanbf.log" | head -2)"
check '[ "$(grep -c "gradients are not finite" "$dir/nanbf.log")" -eq 1 ]' "bf16: said once, by rank 0"

# a slow rank: 300 ms more in its loader every step
job slow --max_steps=3 --checkpoint_every=-1 --straggler_pct=50 --fault=slow:rank=1:ms=300
check '[ $rc -eq 0 ] && [ "$(grep -c "^straggler | rank 1: step work [0-9.]* ms, [0-9]*% over the others. median .* | data wait 3[0-9][0-9].[0-9] ms | compute" "$dir/slow.log")" -eq 3 ]' \
      "the straggler check names rank 1 and its data wait on every logged step: $(grep straggler "$dir/slow.log" | head -1)"

# SIGKILL of rank 0 while it writes the step-4 checkpoint; resume from step 2; compare with a run never killed
job ref --max_steps=6 --checkpoint_every=2 --keep_checkpoints=0
LLM3D_CKPT_HOOK=kill:4:100000 job kill --max_steps=6 --checkpoint_every=2 --keep_checkpoints=0
check '[ $rc -ne 0 ] && grep -q "test hook: SIGKILL while writing .*ckpt_00000004.tmp/state.bin.tmp.[A-Za-z0-9]*. at byte 100000" "$dir/kill.log"' \
      "rank 0 is killed mid-checkpoint (exit $rc): $(grep "test hook" "$dir/kill.log")"
check '[ -f "$dir/kill/ckpt_00000002/DONE" ] && [ ! -e "$dir/kill/ckpt_00000004" ]' "the step-2 checkpoint is complete and no step-4 one counts"
sleep 0.5
check '! left kill' "no process of the killed job is left"
job kill --max_steps=6 --checkpoint_every=2 --keep_checkpoints=0 --resume=1
tensors() { "$BUILD"/train inspect "$1" | grep -E "^  (step|loader|optim|loss) |  f32 "; }
check '[ $rc -eq 0 ] && grep -q "^resume | step 2 from" "$dir/kill.log"' "the killed job resumes from step 2 (exit $rc)"
check '[ -n "$(tensors "$dir/ref/ckpt_00000006")" ] && [ "$(tensors "$dir/ref/ckpt_00000006")" = "$(tensors "$dir/kill/ckpt_00000006")" ]' \
      "the resumed run ends bit-exact with the uninterrupted one (every tensor's CRC, step, loader, optimizer)"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
