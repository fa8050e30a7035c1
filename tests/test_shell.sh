#!/usr/bin/env bash
# tests/test_shell.sh — no path and no setting ever reaches a shell or a gnuplot command:
#   - a training run, `plot` and `scale` are given quotes, $(...), backticks, semicolons,
#     a gnuplot system() call and a newline in every path — the log's own name, --out, the
#     run folder, $TMPDIR, scale's --out — and in a key value; a canary file that any of
#     those would create never appears, and each command succeeds with the exact file
#     names asked (gnuplot really ran: the PNGs exist and are PNGs);
#   - gnuplot is found by a search of PATH (none there: plot says so);
#   - scale hands the key value to mpirun as one argument, intact, and each rank's
#     OpenMP threads through the environment, so that ranks x threads <= cores;
#   - scale --ranks goes through the one list reader (a trailing comma, a blank, '+' refused) and
#     the last of two wins; plot --keep is a number like any other;
#   - scale keeps one run's results per --out: a second run into it is refused and the
#     first run's results stay; more ranks than cores is named as contention.
source "$(dirname "$0")/tally.sh"
dir=$(mktemp -d "/tmp/llm3d_shell.XXXXXX")
trap '[ -z "${KEEP:-}" ] && rm -rf "$dir"' EXIT
T=$(realpath "$BUILD/train")
"$T" prepare --input=tests/data/sotu_sample.txt --out="$dir/data" --train-vocab=300 >/dev/null 2>&1
tiny="--train_data=$dir/data/train_*.bin --val_data= --dim=32 --n_layers=2 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=16
      --batch_size=2 --warmup_steps=0 --log_every=1 --sample_tokens=0"
# every way a string could become a command: shell quotes and substitutions, a gnuplot string break with
# system(), a gnuplot backtick, a newline that would end a gnuplot line
H="q'q\"; touch canary; \$(touch canary) \`touch canary\` ',system('touch canary'),' \"\`touch canary\`\"
nl"
w="$dir/work"
mkdir -p "$w" "$w/T$H" "$dir/rec"
cd "$w"   # where a `touch canary` that ran would leave its file
canary() { [ ! -e /canary ] && [ -z "$(find "$dir" -name canary)" ]; }
png() { [ -s "$1" ] && [ "$(head -c 4 "$1" | tail -c 3)" = PNG ]; }
require gnuplot gnuplot-nox

# a training run: the log's name, the run folder and a key value hostile
"$T" $tiny --max_steps=3 --checkpoint_every=3 --log_jsonl="$w/L$H.jsonl" --run_dir="$w/R$H" --sample_prompt="$H" > "$dir/run.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && [ -s "$w/L$H.jsonl" ] && [ -f "$w/R$H/ckpt_00000003/DONE" ] && canary' \
      "a run with hostile log, run folder and key value: exact names, nothing ran (rc $rc): $(tail -1 "$dir/run.log")"
# plot: --out, the log's name and TMPDIR hostile; then the PNG named after the log itself
TMPDIR="$w/T$H" "$T" plot "$w/L$H.jsonl" --out="$w/O$H.png" > "$dir/plot.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && png "$w/O$H.png" && [ -z "$(ls -A "$w/T$H")" ] && canary' \
      "plot with hostile --out, log name and TMPDIR: gnuplot drew the exact file asked, no scratch left, nothing ran (rc $rc): $(head -2 "$dir/plot.log")"
TMPDIR="$w/T$H" "$T" plot "$w/L$H.jsonl" > "$dir/plot.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && png "$w/L$H.png" && canary' "plot names its PNG after the hostile log: $(head -1 "$dir/plot.log")"

# gnuplot is looked for in PATH, not asked of a shell: without it in PATH, plot says so in words
mkdir "$dir/empty"
PATH="$dir/empty" TMPDIR="$w/T$H" "$T" plot "$w/L$H.jsonl" --out="$dir/none.png" > "$dir/plot.log" 2>&1; rc=$?
check '[ $rc -eq 1 ] && grep -q "^error: plot: gnuplot is not installed" "$dir/plot.log" && [ ! -e "$dir/none.png" ] && [ -z "$(ls -A "$w/T$H")" ]' \
      "plot with no gnuplot in PATH: refused in words, no PNG, no scratch (rc $rc): $(head -1 "$dir/plot.log")"

# scale: through a recording mpirun (its arguments NUL-separated, its OMP_NUM_THREADS), hostile --out,
# TMPDIR and key value
if command -v mpirun >/dev/null && ldd "$T" | grep -q libmpi; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    real=$(command -v mpirun)
    mkdir "$dir/bin"
    printf '#!/bin/bash\nprintf "%%s\\0" "$@" > "%s/args.$$"\necho "$OMP_NUM_THREADS" > "%s/threads.$$"\nexec "%s" "$@"\n' \
        "$dir/rec" "$dir/rec" "$real" > "$dir/bin/mpirun"
    chmod +x "$dir/bin/mpirun"
    ranks=1,2
else
    ranks=1; echo "note: no Open MPI in this build: scale runs one rank only"
fi
cores=$(nproc)
PATH="$dir/bin:$PATH" TMPDIR="$w/T$H" timeout 300 "$T" scale --ranks=$ranks --steps=2 --warmup=1 --out="$w/S$H" $tiny --checkpoint_every=-1 \
    --total_batch_tokens=64 --sample_prompt="$H" > "$dir/scale.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && [ -s "$w/S$H/scale.json" ] && png "$w/S$H/scale.png" && [ -s "$w/S$H/ranks_1.log" ] && [ -z "$(ls -A "$w/T$H")" ] && canary' \
      "scale with hostile --out, TMPDIR and key value: its JSON and picture under the exact folder asked, nothing ran (rc $rc): $(tail -2 "$dir/scale.log")"
if [ "$ranks" = 1,2 ]; then
    found=0
    for f in "$dir"/rec/args.*; do
        while IFS= read -r -d '' a; do [ "$a" = "--sample_prompt=$H" ] && found=1; done < "$f"
    done
    check '[ $found = 1 ]' "scale hands the hostile key value to mpirun as one argument, intact"
    want=$(( cores / 2 > 0 ? cores / 2 : 1 ))
    check '[ "$(cat "$dir"/rec/threads.*)" = "$want" ] && grep -q "^scale | 2 ranks: mpirun, $want OpenMP thread" "$dir/scale.log" &&
           grep -q "\"ranks\": 2, .*\"omp_threads\": $want," "$w/S$H/scale.json"' \
          "each of 2 ranks gets cores/2 = $want OpenMP threads through the environment: $(grep '^scale | 2' "$dir/scale.log")"
fi
check 'grep -q "^scale | 1 rank: one process, $cores OpenMP thread" "$dir/scale.log"' "one rank gets every core: $(grep '^scale | 1' "$dir/scale.log")"
# one run's results per --out: a second run into it is refused, the first one's kept
cp "$w/S$H/scale.json" "$dir/first.json"
TMPDIR="$w/T$H" "$T" scale --ranks=1 --steps=2 --warmup=1 --out="$w/S$H" $tiny --checkpoint_every=-1 > "$dir/again.log" 2>&1; rc=$?
check '[ $rc -eq 1 ] && grep -q "already holds a scale run.s results" "$dir/again.log" && grep -q "give another --out" "$dir/again.log" && cmp -s "$dir/first.json" "$w/S$H/scale.json"' \
      "a second scale run into the same --out is refused, the first one's results kept (rc $rc): $(head -1 "$dir/again.log")"
"$T" scale --help | grep -q "give another --out"
check '[ $? -eq 0 ]' "scale --help says what happens to an --out that holds results"
# more ranks than cores: the verdict names the contention
if [ "$ranks" = 1,2 ]; then
    n=$((cores + 1))
    PATH="$dir/bin:$PATH" timeout 300 "$T" scale --ranks=1,$n --steps=1 --warmup=1 --out="$dir/over" $tiny --checkpoint_every=-1 \
        --total_batch_tokens=32 > "$dir/over.log" 2>&1; rc=$?
    check '[ $rc -eq 0 ] && grep -q "^why   | $n ranks: .*contention, not scaling: $n ranks share $cores cores" "$dir/over.log"' \
          "$n ranks on $cores cores: the verdict names contention (rc $rc): $(grep "^why" "$dir/over.log")"
fi
# lists and repeated options (issue 50, 6): --ranks through the one list reader, the last --ranks wins
for bad in "1,2," "1,,2" "+1,2" " 1,2"; do
    "$T" scale --ranks="$bad" --out="$dir/never" $tiny > "$dir/bad.log" 2>&1; rc=$?
    check '[ $rc -eq 1 ] && grep -q "error: scale: ranks=" "$dir/bad.log" && [ ! -e "$dir/never" ]' "scale --ranks='$bad' refused in words (rc $rc): $(head -1 "$dir/bad.log")"
done
timeout 300 "$T" scale --ranks=1,2 --ranks=1 --steps=1 --warmup=0 --out="$dir/last" $tiny --checkpoint_every=-1 --total_batch_tokens=32 > "$dir/last.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && [ -s "$dir/last/ranks_1.log" ] && [ ! -e "$dir/last/ranks_2.log" ]' "scale --ranks given twice: the last (1) wins, as in training (rc $rc)"
"$T" plot "$dir/nothing.jsonl" --keep=2 > "$dir/bad.log" 2>&1; rc=$?
check '[ $rc -eq 1 ] && grep -q "keep=2: is out of range" "$dir/bad.log"' "plot --keep=2 refused in words (rc $rc): $(head -1 "$dir/bad.log")"
cd - >/dev/null
check '[ ! -e canary ] && canary' "no canary anywhere"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
