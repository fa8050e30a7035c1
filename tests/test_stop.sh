#!/usr/bin/env bash
# tests/test_stop.sh — a stopped run always saves (comm/launch.c, train/main.c), on a loaded machine
# (two busy loops beside the ranks, on CI's 2 cores):
#   - SIGTERM, SIGINT and SIGUSR1 to the --nproc=2 launcher (what kill, timeout, Ctrl-C and Slurm's
#     --signal send): every rank ends with a complete checkpoint (DONE) of the step it announced, the
#     launcher exits 0, the run says how long signal-to-checkpoint took, and --resume=1 continues it
#     to the next step;
#   - the same with a checkpoint every step (keep_checkpoints=2), so the signal lands while one is
#     written or pruned: no .tmp left, every checkpoint folder complete, it resumes;
#   - SIGTERM to mpirun itself (its abort sequence, given a kill timeout by the launcher), SIGKILL to
#     the launcher (mpirun gets SIGTERM as its parent dies) and SIGTERM to one rank: a complete
#     checkpoint each time;
#   - a signal during start-up (a resumed run): the checkpoint it started from is intact and the run
#     ends with a complete one;
#   - a run of one process under `timeout` (which signals the process and its group: the stop comes
#     twice at once) saves rather than dying at the repeat.
source "$(dirname "$0")/ranks.sh"
require pgrep procps
"$BUILD"/train prepare --input=tests/data/sotu_sample.txt --out="$dir/data" --train-vocab=300 >/dev/null 2>&1
common="--train_data=$dir/data/train_*.bin --val_data= --dim=32 --n_layers=2 --n_heads=4 --n_kv_heads=2 --ffn_dim=64
        --seq_len=16 --batch_size=2 --total_batch_tokens=128 --warmup_steps=0 --log_every=1 --sample_tokens=0"
busy=()
for _ in 1 2; do yes > /dev/null & busy+=($!); done
trap 'kill "${busy[@]}" 2>/dev/null; [ -z "${KEEP:-}" ] && rm -rf "$dir"' EXIT

# the launcher: the child of `timeout` (which passes on TERM and INT, but not USR1)
launcher() { pgrep -P "$1" -x train; }
# wait_step LOG N: until the log shows step N (at most 60 s)
wait_step() { for _ in $(seq 600); do grep -q "^step *$2/" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# the pid of rank R of the run in run_dir D
rank_pid() {
    for p in $(pgrep -f "run_dir=$1( |$)"); do
        grep -qz "^OMPI_COMM_WORLD_RANK=$2$" /proc/$p/environ 2>/dev/null && { echo "$p"; return; }
    done
}
# complete NAME: the run in $dir/NAME stopped at step S with a complete checkpoint of step S, none
# incomplete beside it, and --resume=1 continues it to step S+1
complete() {
    local name=$1 log="$dir/$1.log" stopped
    stopped=$(sed -n 's/^stop  | SIG[A-Z0-9]* after step \([0-9]*\)$/\1/p' "$log")
    check '[ -n "$stopped" ] && [ -f "$dir/$name/ckpt_$(printf %08d "$stopped")/DONE" ]' \
          "$name: a complete checkpoint of the step the run stopped at (${stopped:-none}): $(grep -E '^(stop|launch|ckpt|error)' "$log" | tail -4)"
    check '[ -z "$(ls -d "$dir/$name"/*.tmp 2>/dev/null)" ] && for c in "$dir/$name"/ckpt_*; do [ -f "$c/DONE" ] || exit 1; done' \
          "$name: no unfinished checkpoint left: $(ls "$dir/$name" | tr '\n' ' ')"
    [ -n "$stopped" ] || return
    timeout 120 mpirun -np 2 "$BUILD"/train $common --dp=2 --max_steps=$((stopped + 1)) --run_dir="$dir/$name" --resume=1 \
        > "$dir/$name.resume.log" 2>&1
    check 'grep -q "^resume | step $stopped from" "$dir/$name.resume.log" && grep -q "^step *$((stopped + 1))/" "$dir/$name.resume.log"' \
          "$name: --resume=1 continues from step $stopped to $((stopped + 1)): $(tail -3 "$dir/$name.resume.log")"
}

# signals to the launcher
for sig in TERM INT USR1 TERM; do
    name=launcher_$sig; [ -e "$dir/$name.log" ] && name=${name}_2
    timeout 300 "$BUILD"/train $common --dp=2 --max_steps=100000 --run_dir="$dir/$name" --nproc=2 > "$dir/$name.log" 2>&1 &
    job=$!
    wait_step "$dir/$name.log" 3
    kill -$sig "$(launcher $job)"; wait $job; rc=$?
    check '[ $rc -eq 0 ]' "$name: the launcher exits 0 after SIG$sig (got $rc): $(tail -3 "$dir/$name.log")"
    check 'grep -q "^launch | SIG$sig: every rank" "$dir/$name.log" && grep -q "^stop  | SIGUSR1 after step" "$dir/$name.log"' \
          "$name: the launcher passes SIG$sig on as SIGUSR1, which stops the ranks"
    check 'grep -q "^stop  | SIGUSR1 to checkpoint: [0-9]* ms" "$dir/$name.log"' "$name: says how long signal-to-checkpoint took"
    complete "$name"
done
check 'grep -q "^launch | .*odls_base_sigkill_timeout 30 " "$dir/launcher_TERM.log" && grep -q "^launch | .*kills them 30 s after" "$dir/launcher_TERM.log"' \
      "the launcher gives mpirun a kill timeout of 30 s and says so"

# a checkpoint every step, pruned to 2: the signal lands while one is written or pruned
timeout 300 "$BUILD"/train $common --dp=2 --max_steps=100000 --checkpoint_every=1 --keep_checkpoints=2 --run_dir="$dir/every" \
    --nproc=2 > "$dir/every.log" 2>&1 &
job=$!
wait_step "$dir/every.log" 4
kill -TERM "$(launcher $job)"; wait $job; rc=$?
check '[ $rc -eq 0 ] && [ "$(ls -d "$dir/every"/ckpt_* | wc -l)" -le 3 ]' "every: exits 0, pruned as asked (rc $rc): $(ls "$dir/every" | tr '\n' ' ')"
complete every

# SIGTERM to mpirun itself: its abort sequence, with the launcher's kill timeout (shortened here to keep the test fast;
# the ranks log rarely, so their output fits in the pipes while mpirun sleeps)
OMPI_MCA_odls_base_sigkill_timeout=3 timeout 300 "$BUILD"/train $common --log_every=1000 --dp=2 --max_steps=100000 \
    --run_dir="$dir/mpirun" --nproc=2 > "$dir/mpirun.log" 2>&1 &
job=$!
for _ in $(seq 100); do [ -n "$(rank_pid "$dir/mpirun" 1)" ] && break; sleep 0.1; done
sleep 1
mpirun_pid=$(pgrep -P "$(launcher $job)" -x mpirun)
check '[ -n "$mpirun_pid" ] && grep -q "^launch | .*kills them 3 s after .*from OMPI_MCA_odls_base_sigkill_timeout" "$dir/mpirun.log"' \
      "mpirun: found mpirun's process ($mpirun_pid); the launcher takes the kill timeout from the environment"
if [ -n "$mpirun_pid" ]; then kill -TERM "$mpirun_pid"; else kill -TERM $job; fi
wait $job
check 'grep -q "^stop  | SIGTERM after step" "$dir/mpirun.log"' "mpirun: the ranks stop on mpirun's SIGTERM: $(grep -E '^(stop|error)' "$dir/mpirun.log" | tail -3)"
complete mpirun

# the launcher killed outright (SIGKILL): mpirun, its child, gets SIGTERM (PR_SET_PDEATHSIG) and stops the ranks its own way
OMPI_MCA_odls_base_sigkill_timeout=2 "$BUILD"/train $common --log_every=1000 --dp=2 --max_steps=100000 --run_dir="$dir/orphan" \
    --nproc=2 > "$dir/orphan.log" 2>&1 &
job=$!
for _ in $(seq 100); do [ -n "$(rank_pid "$dir/orphan" 1)" ] && break; sleep 0.1; done
sleep 1
kill -KILL $job; wait $job 2>/dev/null
for _ in $(seq 300); do [ -z "$(pgrep -f "run_dir=$dir/orphan( |$)")" ] && break; sleep 0.1; done
check '[ -z "$(pgrep -f "run_dir=$dir/orphan( |$)")" ] && grep -q "^stop  | SIGTERM after step" "$dir/orphan.log"' \
      "orphan: a launcher killed by SIGKILL takes mpirun and the ranks with it, which stop and save: $(grep -E '^(stop|error)' "$dir/orphan.log" | tail -2)"
complete orphan

# SIGTERM to one rank, under the launcher
timeout 300 "$BUILD"/train $common --dp=2 --max_steps=100000 --run_dir="$dir/rank" --nproc=2 > "$dir/rank.log" 2>&1 &
job=$!
wait_step "$dir/rank.log" 3
rank1=$(rank_pid "$dir/rank" 1)
check '[ -n "$rank1" ]' "rank: found rank 1's process"
if [ -n "$rank1" ]; then kill -TERM "$rank1"; else kill -TERM $job; fi
wait $job; rc=$?
check '[ $rc -eq 0 ] && grep -q "^stop  | SIGTERM after step" "$dir/rank.log"' "rank: SIGTERM to rank 1 stops the run, exit 0 (got $rc)"
complete rank

# a signal during start-up, resuming the launcher_TERM run (which now holds steps S and S+1)
start=$(ls -d "$dir/launcher_TERM"/ckpt_* | tail -1)
# (mpirun's kill timeout short: should the stop come before mpirun has ranks to pass it to, a second one ends the run)
OMPI_MCA_odls_base_sigkill_timeout=2 timeout 300 "$BUILD"/train $common --dp=2 --max_steps=100000 --run_dir="$dir/launcher_TERM" \
    --resume=1 --nproc=2 > "$dir/startup.log" 2>&1 &
job=$!
for _ in $(seq 300); do [ -n "$(rank_pid "$dir/launcher_TERM" 1)" ] && break; sleep 0.05; done
started=$(launcher $job)
kill -TERM "$started"
for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
kill -0 $job 2>/dev/null && kill -TERM "$started"
wait $job; rc=$?
check '[ -f "$start/DONE" ] && [ -s "$start/state.bin" ]' "startup: the checkpoint the run started from is intact ($start; rc $rc): $(grep -E '^(stop|launch|ckpt|resume|error)' "$dir/startup.log" | tail -4)"
check '[ -z "$(ls -d "$dir/launcher_TERM"/*.tmp 2>/dev/null)" ] && for c in "$dir/launcher_TERM"/ckpt_*; do [ -f "$c/DONE" ] || exit 1; done' \
      "startup: every checkpoint folder is complete: $(ls "$dir/launcher_TERM" | tr '\n' ' ')"

# one process under timeout: SIGTERM to it and to its group, twice at once
timeout -s TERM 3 "$BUILD"/train $common --log_every=100 --max_steps=1000000 --run_dir="$dir/one" > "$dir/one.log" 2>&1; rc=$?
stopped=$(sed -n 's/^stop  | SIGTERM after step \([0-9]*\)$/\1/p' "$dir/one.log")
check '[ $rc -eq 124 ] && [ -n "$stopped" ] && [ -f "$dir/one/ckpt_$(printf %08d "$stopped")/DONE" ]' \
      "one process under timeout: stops once, saves (step ${stopped:-none}, rc $rc): $(grep -E '^(stop|ckpt|error)' "$dir/one.log" | tail -3)"

kill "${busy[@]}" 2>/dev/null
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
