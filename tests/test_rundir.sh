#!/usr/bin/env bash
# tests/test_rundir.sh — one run at a time in a run folder, and a run that cannot train stops (issue 50, items 3 and 5):
#   - a second run started into a live run's run_dir is refused naming the live run's pid and host, and the
#     live run is unharmed: it finishes, every checkpoint of it is there, its log holds its records alone;
#   - the lock of a run that was SIGKILLed is taken over (the kernel dropped its flock), said;
#   - a fresh restart whose replaced_<time> folder already exists (two restarts in one second) keeps both;
#   - a SIGKILL while a checkpoint is pruned leaves no folder with DONE and without its tensors, and the
#     run resumes from the newest complete one;
#   - log_jsonl holding another run's records is refused (a foreign file is appended to, said); this run's own log is
#     continued by a resume and moved aside (said) by a fresh start;
#   - fp16 with lr=10 (every step non-finite) stops in words with exit 1 instead of halving the loss scale
#     for ever, and the checkpoint of its last finite step is kept and readable; max_skipped_steps bounds
#     the skips in a row; under mpirun every layout stops alike, and a refused rank 0 ends every rank.
source "$(dirname "$0")/tally.sh"
dir=$(mktemp -d /tmp/llm3d_test_rundir.XXXXXX)
trap '[ -z "${KEEP:-}" ] && rm -rf "$dir"' EXIT
"$BUILD"/train prepare --input=tests/data/sotu_sample.txt --out="$dir/data" --train-vocab=300 >/dev/null 2>&1
common="--train_data=$dir/data/train_*.bin --val_data= --dim=32 --n_layers=2 --n_heads=4 --n_kv_heads=2 --ffn_dim=64
        --seq_len=16 --batch_size=2 --total_batch_tokens=128 --warmup_steps=0 --log_every=1 --sample_tokens=0"
host=$(hostname)
# waits (up to 30 s) until file $1 matches the extended regex $2
wait_for() { for _ in $(seq 300); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
complete() { [ -f "$1/DONE" ] && [ -f "$1/state.bin" ] && "$BUILD"/train inspect "$1" >/dev/null 2>&1; }

# ---- a live run's folder: a second run refused naming pid and host; the first unharmed
"$BUILD"/train $common --max_steps=30 --checkpoint_every=5 --keep_checkpoints=0 --fault=slow:rank=0:ms=100 \
    --run_dir="$dir/live" --log_jsonl="$dir/live.jsonl" > "$dir/live.log" 2>&1 &
live=$!
wait_for "$dir/live/LOCK" "^pid=$live$"; seen=$?
check '[ $seen -eq 0 ] && grep -qx "host=$host" "$dir/live/LOCK"' "the live run's LOCK names its pid $live and host: $(cat "$dir/live/LOCK" 2>&1)"
for how in "--log_jsonl=$dir/second.jsonl" "--resume=1 --log_jsonl=$dir/second.jsonl" "--log_jsonl=$dir/live.jsonl" \
           "--resume=1 --log_jsonl=$dir/live.jsonl" ""; do
    "$BUILD"/train $common --max_steps=30 --checkpoint_every=5 --run_dir="$dir/live" $how > "$dir/second.log" 2>&1; rc=$?
    check '[ $rc -eq 1 ] && grep -q "^error: run_dir=$dir/live is in use by pid $live on host $host (started .*); give another --run_dir or stop that run" "$dir/second.log"' \
          "a second run ($how) into the live run's folder: refused naming pid $live and host $host (exit $rc): $(grep error "$dir/second.log")"
done
wait $live; rc=$?
n=0; for s in 5 10 15 20 25 30; do complete "$dir/live/ckpt_$(printf %08d $s)" && n=$((n + 1)); done
check '[ $rc -eq 0 ] && [ $n -eq 6 ]' "the live run finished (exit $rc) with all 6 of its checkpoints complete ($n)"
check '! ls -d "$dir"/live/replaced_* "$dir"/live.jsonl.replaced_* >/dev/null 2>&1 && [ "$(grep -c "^{\"run\"" "$dir/live.jsonl")" = 1 ] &&
       [ "$(grep -c "^{\"step\"" "$dir/live.jsonl")" = 30 ]' \
      "nothing of the live run was moved, and its log holds its own header and 30 steps only: $(grep -c . "$dir/live.jsonl") lines"
check '[ ! -s "$dir/live/LOCK" ]' "a run that ends normally leaves its LOCK empty: $(cat "$dir/live/LOCK")"

# ---- the lock of a SIGKILLed run is taken over
{ (LLM3D_CKPT_HOOK=kill:4:done exec "$BUILD"/train $common --max_steps=6 --checkpoint_every=2 --run_dir="$dir/killed" > "$dir/killed.log" 2>&1); rc=$?; } 2>/dev/null
dead=$(sed -n 's/^pid=//p' "$dir/killed/LOCK")
check '[ $rc -eq 137 ] && [ -n "$dead" ] && ! kill -0 "$dead" 2>/dev/null' "the run was SIGKILLed mid-save (exit $rc) and its LOCK names pid $dead"
echo half > "$dir/killed/loss.svg.tmp.Ab12Cd"; echo mine > "$dir/killed/notes.tmp.txt"   # what the door leaves at a SIGKILL; a user's file
"$BUILD"/train $common --max_steps=6 --checkpoint_every=2 --resume=1 --run_dir="$dir/killed" > "$dir/taken.log" 2>&1; rc=$?
check '[ ! -e "$dir/killed/loss.svg.tmp.Ab12Cd" ] && [ -f "$dir/killed/notes.tmp.txt" ] &&
       grep -q "note  | run_dir .*: removed 1 unfinished temporary the killed run left (loss.svg.tmp.Ab12Cd)" "$dir/taken.log"' \
      "taking over a killed run's lock removes the door's temporaries it left, said, and nothing else: $(grep removed "$dir/taken.log")"
check '[ $rc -eq 0 ] && grep -q "note  | run_dir .*: its lock names pid $dead on host $host (started .*), which ended without releasing it (killed?); taking it over" "$dir/taken.log" &&
       grep -q "resume | step 2 from" "$dir/taken.log" && complete "$dir/killed/ckpt_00000006"' \
      "a stale lock is taken over, said, and the run resumes and finishes (exit $rc): $(grep -E "note|resume|error" "$dir/taken.log")"

# ---- two fresh restarts in one second: the replaced_<time> name is made unique
"$BUILD"/train $common --max_steps=2 --checkpoint_every=1 --run_dir="$dir/again" > /dev/null 2>&1
now=$(date -u +%s)
for t in $(seq "$now" $((now + 30))); do   # as if a restart had just happened in each of the next 30 seconds
    mkdir -p "$dir/again/replaced_$(date -u -d "@$t" +%Y%m%d-%H%M%S)/ckpt_00000009"; touch "$dir/again/replaced_$(date -u -d "@$t" +%Y%m%d-%H%M%S)/ckpt_00000009/DONE"
done
for k in 1 2; do
    "$BUILD"/train $common --max_steps=2 --checkpoint_every=1 --run_dir="$dir/again" > "$dir/again$k.log" 2>&1; rc=$?
    to=$(sed -n 's/.*moved to \(.*\) (--resume=1.*/\1/p' "$dir/again$k.log")
    check '[ $rc -eq 0 ] && [[ "$to" == "$dir/again/replaced_"*-[0-9]* ]] && complete "$to/ckpt_00000002" && complete "$to/ckpt_00000001"' \
          "restart $k in a second whose replaced_ folder exists: its earlier checkpoints kept whole in a new folder '$to' (exit $rc)"
done
check '[ "$(ls -d "$dir"/again/replaced_*/ckpt_00000009/DONE | wc -l)" = 31 ]' "no earlier replaced_ folder was touched"

# ---- SIGKILL while pruning: DONE goes first
LLM3D_TEST_PRUNE_PAUSE=60 "$BUILD"/train $common --max_steps=4 --checkpoint_every=1 --keep_checkpoints=1 --run_dir="$dir/prune" \
    > "$dir/prune.log" 2>&1 &
pid=$!
wait_for "$dir/prune.log" "test hook: pruning .*ckpt_00000001' paused"; seen=$?
{ kill -9 $pid; wait $pid; } 2>/dev/null
bad=""; for d in "$dir"/prune/ckpt_*; do [ -f "$d/DONE" ] && ! complete "$d" && bad="$bad $d"; done
check '[ $seen -eq 0 ] && [ -z "$bad" ] && [ -d "$dir/prune/ckpt_00000001" ] && [ ! -e "$dir/prune/ckpt_00000001/DONE" ] && complete "$dir/prune/ckpt_00000002"' \
      "killed mid-prune: the folder being pruned has no DONE, every folder with DONE is whole (bad:$bad)"
"$BUILD"/train $common --max_steps=4 --checkpoint_every=1 --keep_checkpoints=1 --resume=1 --run_dir="$dir/prune" > "$dir/prune2.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "resume | step 2 from" "$dir/prune2.log" && grep -q "ckpt_00000001. has no DONE marker" "$dir/prune2.log"' \
      "the resume takes the newest complete checkpoint and names the half-pruned one (exit $rc): $(grep -E "resume|warning" "$dir/prune2.log")"

# ---- log_jsonl: another run's records refused; this run's own continued or moved aside
logrun() { "$BUILD"/train $common --max_steps=2 --checkpoint_every=-1 --log_jsonl="$dir/log.jsonl" "$@" > "$dir/logrun.log" 2>&1; }
logrun --seed=1; rc=$?
before=$(md5sum < "$dir/log.jsonl")
logrun --seed=2; rc2=$?
check '[ $rc -eq 0 ] && [ $rc2 -eq 1 ] && grep -q "^error: log_jsonl=$dir/log.jsonl holds another run.s records (its run_id is [0-9a-f]\{8\}, this run.s [0-9a-f]\{8\}: the model, seed or train_data differ)" "$dir/logrun.log" &&
       [ "$(md5sum < "$dir/log.jsonl")" = "$before" ]' "a log of another run (seed=1, this seed=2) refused in words and left as it was (exit $rc2): $(grep error "$dir/logrun.log")"
logrun --seed=1 --resume=1; rc=$?
check '[ $rc -eq 0 ] && [ "$(grep -c "^{\"run\"" "$dir/log.jsonl")" = 2 ] && ! ls "$dir"/log.jsonl.replaced_* >/dev/null 2>&1' \
      "the same run resumed appends to its own log (exit $rc)"
logrun --seed=1; rc=$?
aside=$(ls "$dir"/log.jsonl.replaced_* 2>/dev/null)
check '[ $rc -eq 0 ] && grep -q "note  | log_jsonl=$dir/log.jsonl held this run.s records from an earlier start; this run starts the log anew" "$dir/logrun.log" &&
       [ -f "$aside" ] && [ "$(grep -c "^{\"step\"" "$aside")" = 4 ] && [ "$(grep -c . "$dir/log.jsonl")" = 3 ]' \
      "a fresh start of the same run: the old log moved aside (said), the new one holds this start alone (exit $rc)"
echo "some notes of mine" > "$dir/notes.txt"
"$BUILD"/train $common --max_steps=2 --checkpoint_every=-1 --log_jsonl="$dir/notes.txt" > "$dir/notes.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "note  | log_jsonl=$dir/notes.txt already holds something that is not an llm3d log; this run.s records follow it" "$dir/notes.log" &&
       [ "$(head -1 "$dir/notes.txt")" = "some notes of mine" ] && [ "$(grep -c "^{\"step\"" "$dir/notes.txt")" = 2 ]' \
      "a log_jsonl that is some other file: said, and the records follow what it held, nothing of it lost (exit $rc)"

# ---- fp16, lr=10: stops in words, its good checkpoint kept
"$BUILD"/train $common --precision=fp16 --lr=10 --max_steps=300 --checkpoint_every=1 --keep_checkpoints=1 --run_dir="$dir/fp16" > "$dir/fp16.log" 2>&1; rc=$?
first_bad=$(sed -n 's/^warning: step \([0-9]*\): inf\/nan in the gradients.*/\1/p' "$dir/fp16.log" | head -1)
good=$(printf "%s/fp16/ckpt_%08d" "$dir" $((first_bad - 1)))
check '[ $rc -eq 1 ] && grep -q "^error: step [0-9]*: inf/nan in the gradients, and the loss scale 1 would fall under its minimum 1 .*: the run stops rather than skip on" "$dir/fp16.log" &&
       grep -q "no checkpoint in $dir/fp16 was pruned while steps were skipped" "$dir/fp16.log" && [ "$(grep -c "^step " "$dir/fp16.log")" -lt 40 ]' \
      "fp16 lr=10: the run stops in words with exit 1 within a few dozen steps (exit $rc): $(grep error "$dir/fp16.log")"
check '[ -n "$first_bad" ] && [ "$first_bad" -gt 1 ] && complete "$good" && "$BUILD"/train inspect "$good" | grep -q "scale 65536"' \
      "the checkpoint of the last finite step ($good, before step $first_bad) survived keep_checkpoints=1 and reads back"
"$BUILD"/train $common --precision=fp16 --lr=10 --max_steps=300 --checkpoint_every=-1 --max_skipped_steps=3 > "$dir/skips.log" 2>&1; rc=$?
check '[ $rc -eq 1 ] && grep -q "^error: step [0-9]*: inf/nan in the gradients, and 3 steps in a row were skipped (max_skipped_steps=3)" "$dir/skips.log"' \
      "max_skipped_steps=3: the third skip in a row stops the run (exit $rc): $(grep error "$dir/skips.log")"
"$BUILD"/train $common --max_steps=2 --max_skipped_steps=0 > "$dir/zero.log" 2>&1; rc=$?
check '[ $rc -eq 1 ] && grep -q "max_skipped_steps" "$dir/zero.log"' "max_skipped_steps=0 is out of range, refused (exit $rc): $(head -2 "$dir/zero.log")"

# ---- many ranks: every layout stops alike; a refused rank 0 ends every rank
if ! command -v mpirun >/dev/null || ! ldd "$BUILD/train" | grep -q libmpi; then
    echo "skipped the multi-rank cases: no mpirun, or this build has no Open MPI"; echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for layout in --dp=2 --tp=2 --pp=2; do
    timeout 120 mpirun -np 2 "$BUILD"/train $common $layout --precision=fp16 --lr=10 --max_steps=300 --checkpoint_every=-1 \
        --run_dir="$dir/mpi" > "$dir/mpi.log" 2>&1; rc=$?
    check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c "the run stops rather than skip on" "$dir/mpi.log")" = 1 ]' \
          "fp16 lr=10 with $layout: every rank stops, the message said once (exit $rc): $(grep -E "error|stops" "$dir/mpi.log" | head -3)"
done
"$BUILD"/train $common --max_steps=20 --fault=slow:rank=0:ms=200 --run_dir="$dir/live2" > "$dir/live2.log" 2>&1 &
live=$!
wait_for "$dir/live2/LOCK" "^pid=$live$"
timeout 120 mpirun -np 2 "$BUILD"/train $common --dp=2 --max_steps=20 --resume=1 --run_dir="$dir/live2" > "$dir/mpi2.log" 2>&1; rc=$?
check '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "run_dir=$dir/live2 is in use by pid $live on host $host" "$dir/mpi2.log"' \
      "dp=2 into a live run's folder: rank 0 refused naming the holder, every rank out (exit $rc): $(grep error "$dir/mpi2.log" | head -2)"
wait $live; rc=$?
check '[ $rc -eq 0 ] && complete "$dir/live2/ckpt_00000020"' "and the live run finished unharmed (exit $rc)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
