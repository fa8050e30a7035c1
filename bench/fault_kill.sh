#!/usr/bin/env bash
# bench/fault_kill.sh — SIGKILL at random moments, then resume: how often does
# the resumed run end bit-exact with one never interrupted? (not in `make test`:
# about two minutes on a 2-core machine)
#
# A 2-rank data-parallel CPU run of 24 steps saves a checkpoint every 3 steps.
# Each trial kills it once at a random moment, alternating two kinds:
#   - odd trials: rank 0 (the writer) in the middle of a random checkpoint, at a
#     random byte of state.bin or at done / rename / retention
#     (LLM3D_CKPT_HOOK=kill:STEP:WHERE, checkpoint/checkpoint.h);
#   - even trials: a random rank, at a random wall-clock time during the run
#     (mid-step, mid-checkpoint or between: wherever it lands).
# Then it checks no process of the job is left, resumes with --resume=1 to the
# end, and compares every tensor's CRC, the step, the loader and the optimizer
# of the final checkpoint with the uninterrupted run's. Prints k/N.
#   TRIALS=20 SEED=1 bench/fault_kill.sh
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
TRIALS=${TRIALS:-20}
RANDOM=${SEED:-1}
dir=$(mktemp -d /tmp/llm3d_fault_kill.XXXXXX)
trap '[ -z "${KEEP:-}" ] && rm -rf "$dir"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$BUILD"/train prepare --input=tests/data/sotu_sample.txt --out="$dir/data" --train-vocab=300 >/dev/null 2>&1
args="--train_data=$dir/data/train_*.bin --val_data= --dim=64 --n_layers=4 --n_heads=4 --n_kv_heads=2 --ffn_dim=128
      --seq_len=32 --batch_size=4 --total_batch_tokens=512 --warmup_steps=0 --log_every=1 --sample_tokens=0 --dp=2
      --max_steps=24 --checkpoint_every=3 --keep_checkpoints=2 --comm_timeout_s=20"
final=ckpt_00000024
tensors() { "$BUILD"/train inspect "$1" | grep -E "^  (step|loader|optim|loss) |  f32 "; }

t0=$(date +%s.%N)
timeout 300 mpirun -np 2 "$BUILD"/train $args --run_dir="$dir/ref" > "$dir/ref.log" 2>&1 || { echo "the reference run failed:"; tail "$dir/ref.log"; exit 1; }
run_s=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
want=$(tensors "$dir/ref/$final")
bytes=$(stat -c %s "$dir/ref/$final/state.bin")
echo "reference: 24 steps on 2 ranks in ${run_s} s, a checkpoint every 3 steps, state.bin $bytes bytes"

ok=0
for t in $(seq "$TRIALS"); do
    run="$dir/t$t"
    if [ $((t % 2)) -eq 1 ]; then
        step=$(( (RANDOM % 8 + 1) * 3 ))
        case $((RANDOM % 4)) in
            0) where=done;; 1) where=rename;; 2) where=retention;; *) where=$(( (RANDOM * 32768 + RANDOM) % bytes ));;
        esac
        moment="rank 0 in the step-$step checkpoint at $where"
        LLM3D_CKPT_HOOK=kill:$step:$where timeout 300 mpirun -np 2 "$BUILD"/train $args --run_dir="$run" > "$run.kill.log" 2>&1
    else
        victim=$((RANDOM % 2))
        delay=$(awk -v s="$run_s" -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.4 + (s - 0.4) * r / 32768 }')
        moment="rank $victim at ${delay} s"
        timeout 300 mpirun -np 2 "$BUILD"/train $args --run_dir="$run" > "$run.kill.log" 2>&1 &
        job=$!
        sleep "$delay"
        for p in $(pgrep -f -- "--run_dir=$run( |\$)"); do
            grep -qz "^OMPI_COMM_WORLD_RANK=$victim$" /proc/$p/environ 2>/dev/null && kill -KILL "$p"
        done
        wait $job
    fi
    sleep 0.5
    left=$(pgrep -f -- "--run_dir=$run( |\$)" | wc -l)
    last=$(ls -d "$run"/ckpt_[0-9]*[0-9] 2>/dev/null | tail -1)
    intact=yes
    [ -n "$last" ] && ! "$BUILD"/train inspect "$last" >/dev/null 2>&1 && intact=NO
    timeout 300 mpirun -np 2 "$BUILD"/train $args --run_dir="$run" --resume=1 > "$run.resume.log" 2>&1
    from=$(sed -n 's/^resume | step \([0-9]*\) from.*/\1/p' "$run.resume.log"); from=${from:-0}
    if [ "$left" -eq 0 ] && [ "$intact" = yes ] && [ -d "$run/$final" ] && [ "$(tensors "$run/$final")" = "$want" ]; then
        ok=$((ok + 1)); verdict="bit-exact"
    else
        verdict="DIFFERENT (processes left: $left, newest checkpoint intact: $intact)"
    fi
    printf "trial %2d: killed %-44s resumed from step %2d: %s\n" "$t" "$moment," "$from" "$verdict"
done
echo "$ok/$TRIALS resumed runs ended bit-exact with the uninterrupted one"
[ "$ok" -eq "$TRIALS" ]
