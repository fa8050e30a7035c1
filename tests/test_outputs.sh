#!/usr/bin/env bash
# tests/test_outputs.sh — the one output door (common/output.c), writer by writer:
#   - every writer refuses, in words and at once, a target that is a FIFO (under
#     `timeout`: a hang fails), a device, a folder, or a symbolic link to a FIFO,
#     and leaves it as it was: logits --out, plan --out, schedule --svg,
#     plot --out, --profile_out, --log_jsonl, export (a FIFO where config.json goes);
#   - a write that fails (a file-size limit: writes fail with EFBIG, a real write
#     error) exits non-zero naming the file, leaves the earlier file intact and
#     no temporary behind: plan --out, --profile_out (and no 0-byte profile);
#   - a symbolic link to a regular file is written through: the file replaced (its mode kept), the link kept;
#   - the one JSON number reader of plot, scale and plan is strict: a malformed
#     number is refused naming the file, the line and the key.
source "$(dirname "$0")/tally.sh"
dir=$(mktemp -d "/tmp/llm3d_outputs.XXXXXX")
trap '[ -z "${KEEP:-}" ] && rm -rf "$dir"' EXIT
T="$BUILD/train"
"$T" prepare --input=tests/data/sotu_sample.txt --out="$dir/data" --train-vocab=300 >/dev/null 2>&1
tiny="--train_data=$dir/data/train_*.bin --val_data= --dim=32 --n_layers=2 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=16
      --batch_size=2 --warmup_steps=0 --log_every=1 --sample_tokens=0"
OMP_NUM_THREADS=1 "$T" $tiny --max_steps=2 --checkpoint_every=2 --run_dir="$dir/run" --log_jsonl="$dir/good.jsonl" > "$dir/run.log" 2>&1
check '[ -f "$dir/run/ckpt_00000002/DONE" ] && [ -s "$dir/good.jsonl" ]' "a tiny run leaves a checkpoint and a log to work on: $(tail -2 "$dir/run.log")"
no_tmp() { [ -z "$(find "$dir" -name '*.tmp.*' 2>/dev/null)" ]; }

# the hostile targets: a FIFO, a device (a null device of our own where mknod is allowed; else /dev/null,
# which the door must not replace either), a folder, a link to the FIFO
mkfifo "$dir/fifo"
if mknod "$dir/null" c 1 3 2>/dev/null; then device="$dir/null"; else device=/dev/null; fi
mkdir "$dir/folder"
ln -s fifo "$dir/link"
declare -A words=([fifo]="a FIFO (named pipe)" [device]="a character device" [folder]="a folder" [link]="a symbolic link to a FIFO (named pipe)")
target() { case "$1" in fifo) echo "$dir/fifo";; device) echo "$device";; folder) echo "$dir/folder";; link) echo "$dir/link";; esac; }
intact() {   # every target is still what it was
    [ -p "$dir/fifo" ] && [ -c "$device" ] && [ -d "$dir/folder" ] && [ -L "$dir/link" ] && [ -p "$dir/link" ] && [ -z "$(ls -A "$dir/folder")" ]
}
for kind in fifo device folder link; do
    p=$(target $kind)
    writers=(
        "logits|$T logits --model=$dir/run --ids=1,2,3 --out=$p"
        "plan|$T plan --gpus=8 --preset=l124m --out=$p"
        "schedule --svg|$T schedule --pp=2 --micro_batches=4 --svg=$p"
        "plot|$T plot $dir/good.jsonl --out=$p"
        "profile_out|$T $tiny --max_steps=2 --checkpoint_every=-1 --profile_out=$p"
        "log_jsonl|$T $tiny --max_steps=2 --checkpoint_every=-1 --log_jsonl=$p"
    )
    for w in "${writers[@]}"; do
        name=${w%%|*}
        timeout 20 ${w#*|} > "$dir/w.log" 2>&1; rc=$?
        check '[ $rc -eq 1 ] && grep -q "^error: .*${words[$kind]}, not a regular file" "$dir/w.log" && grep -qF "$p" "$dir/w.log" && intact && no_tmp' \
              "$name onto $kind: refused at once in words, the target as it was (rc $rc): $(head -2 "$dir/w.log")"
    done
done
# export: a FIFO where its config.json goes is refused, not opened (the safetensors beside it is complete)
mkdir "$dir/hf" && mkfifo "$dir/hf/config.json"
timeout 20 "$T" export --checkpoint="$dir/run" --out="$dir/hf" > "$dir/w.log" 2>&1; rc=$?
check '[ $rc -eq 1 ] && grep -q "config.json. is a FIFO" "$dir/w.log" && [ -p "$dir/hf/config.json" ] && no_tmp' \
      "export onto a FIFO config.json: refused in words (rc $rc): $(head -1 "$dir/w.log")"

# a write that fails: writes beyond a file-size limit of 0 fail with EFBIG (SIGXFSZ ignored, as a
# program that handles it sees); output to a pipe, which the limit does not touch
limited() { ( ulimit -f 0; trap '' XFSZ; exec "$@" ) 2>&1 | cat > "$dir/w.log"; }
echo "the earlier plan" > "$dir/plan.json"
limited "$T" plan --gpus=8 --preset=l124m --out="$dir/plan.json"
check 'grep -q "^error: writing .*plan.json. failed: File too large" "$dir/w.log" && [ "$(cat "$dir/plan.json")" = "the earlier plan" ] && no_tmp' \
      "plan --out on a failing write: exit non-zero naming the file, the earlier file intact, no temporary: $(head -1 "$dir/w.log")"
limited "$T" $tiny --max_steps=4 --checkpoint_every=-1 --profile_out="$dir/profile.json"
check 'grep -q "^error: profile_out: writing .*profile.json. failed: File too large" "$dir/w.log" && [ ! -e "$dir/profile.json" ] && no_tmp' \
      "--profile_out on a failing write: exit non-zero naming the file, no 0-byte profile, no temporary: $(grep error "$dir/w.log" | head -1)"
"$T" $tiny --max_steps=4 --checkpoint_every=-1 --profile_out="$dir/profile.json" > "$dir/w.log" 2>&1
check '[ -s "$dir/profile.json" ] && grep -q "^profile | " "$dir/w.log"' "without the limit the same profile is written: $(grep profile "$dir/w.log")"

# a link to a regular file: the file it points to is replaced, the link kept
echo old > "$dir/real.json" && chmod 600 "$dir/real.json" && ln -s real.json "$dir/alias.json"
"$T" plan --gpus=8 --preset=l124m --out="$dir/alias.json" > "$dir/w.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && [ -L "$dir/alias.json" ] && grep -q "\"layouts\"" "$dir/real.json" && [ "$(stat -c %a "$dir/real.json")" = 600 ] && no_tmp' \
      "plan --out through a link to a regular file: the file written with its mode (600) kept, the link kept (rc $rc)"

# the strict JSON number reader: file, line and key named
{ head -2 "$dir/good.jsonl"; head -3 "$dir/good.jsonl" | tail -1 | sed 's/"loss": [0-9.]*/"loss": 5.1x/'; } > "$dir/bad.jsonl"
"$T" plot "$dir/bad.jsonl" --out="$dir/bad.png" > "$dir/w.log" 2>&1; rc=$?
check '[ $rc -eq 1 ] && grep -q "bad.jsonl. line 3: \"loss\" is 5.1x, not a finite number" "$dir/w.log" && [ ! -e "$dir/bad.png" ]' \
      "plot: a malformed number named by file, line and key (rc $rc): $(head -1 "$dir/w.log")"
# a diverged step's loss is written as JSON's null (train/trainer.c): plot draws the log, that step left out
{ head -2 "$dir/good.jsonl"; head -3 "$dir/good.jsonl" | tail -1 | sed 's/"loss": [0-9.]*/"loss": null/; s/"grad_norm": [0-9.]*/"grad_norm": null/'; } > "$dir/nan.jsonl"
"$T" plot "$dir/nan.jsonl" --out="$dir/nan.png" > "$dir/w.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && [ -s "$dir/nan.png" ] && grep -q "\"loss\": null" "$dir/nan.jsonl"' "plot: a log whose step has a null loss (a diverged step) is drawn (rc $rc): $(head -1 "$dir/w.log")"
sed 's/"compute_ms": [0-9.]*/"compute_ms": 1e999/' "$dir/profile.json" > "$dir/badprofile.json"
"$T" plan --gpus=8 --preset=l124m --profile="$dir/badprofile.json" > "$dir/w.log" 2>&1; rc=$?
check '[ $rc -eq 1 ] && grep -q "badprofile.json.: \"compute_ms\" is 1e999, not a finite number" "$dir/w.log"' \
      "plan: an infinite number in a profile named by file and key (rc $rc): $(head -1 "$dir/w.log")"
# a profile holds for the model, device and compute dtype that measured it: another of any is refused, naming which
for other in "--dim=64|model" "--n_layers=3|model" "--device=cuda|device" "--precision=bf16|precision"; do
    "$T" plan --gpus=8 $tiny ${other%|*} --profile="$dir/profile.json" > "$dir/w.log" 2>&1; rc=$?
    check '[ $rc -eq 1 ] && grep -q "profile.json. was measured on another ${other#*|} than this plan" "$dir/w.log"' \
          "plan with ${other%|*} and the CPU fp32 profile of another run: refused naming the ${other#*|} (rc $rc)"
done
"$T" plan --gpus=8 $tiny --profile="$dir/profile.json" > "$dir/w.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "compute from the profile" "$dir/w.log"' "plan of the model, device and dtype its profile measured: taken (rc $rc)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
