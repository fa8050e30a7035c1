#!/usr/bin/env bash
# bench/gpu/q8_quality.sh — issue 52's quality run: l124m on the State of the Union shards with
# GPT-2's vocabulary (most of its 50k rows are rare there, so the embedding is where an 8-bit
# representation that drifts rare rows would show), 1,000 steps of AdamW and then of 8-bit AdamW
# on one GPU in the same call; prints each run's final val loss and the largest L2 norm of an
# embedding row (bench/bench_q8_drift rownorm on its final checkpoint).
#
#   bench/gpu/q8_quality.sh            (STEPS=1000 BUILD=build OUT=build/gpu/q8_quality; extra
#                                       train keys in Q8_ARGS, e.g. Q8_ARGS=--precision=bf16)
# Needs `make` (build/train, build/bench/bench_q8_drift) with CUDA. Writes the shards once under
# $OUT/data (`build/train prepare --input=sotu`, no --train_vocab: GPT-2's vocabulary), each run's
# log to $OUT/<optimizer>.log and .jsonl, and a summary line per run.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}; OUT=${OUT:-build/gpu/q8_quality}; STEPS=${STEPS:-1000}; Q8_ARGS=${Q8_ARGS:---precision=bf16}
PRESET=${PRESET:-l124m}; DEVICE=${DEVICE:-cuda}   # PRESET=tiny DEVICE=cpu Q8_ARGS= STEPS=2: a check of the script on a CPU
mkdir -p "$OUT"
echo "date $(date -u +%F) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
if ! ls "$OUT"/data/train_*.bin >/dev/null 2>&1; then
    "$BUILD"/train prepare --input=sotu --out="$OUT/data" | tail -3
fi
for opt in adamw adamw8bit; do
    rm -rf "${OUT:?}/$opt" "$OUT/$opt.jsonl"
    # shellcheck disable=SC2086  # Q8_ARGS is a list of --key=value words
    "$BUILD"/train --preset="$PRESET" --vocab_size=0 --device="$DEVICE" --optimizer="$opt" --max_steps="$STEPS" \
        --train_data="$OUT/data/train_*.bin" --val_data="$OUT/data/val_*.bin" --run_dir="$OUT/$opt" \
        --log_jsonl="$OUT/$opt.jsonl" --eval_every="$STEPS" --checkpoint_every=0 --keep_checkpoints=1 \
        --sample_tokens=0 $Q8_ARGS >"$OUT/$opt.log" 2>&1 || { echo "$opt: the run failed; the end of $OUT/$opt.log:"; tail -20 "$OUT/$opt.log"; exit 1; }
    grep -E '^optim' "$OUT/$opt.log" | head -1 || true
    val=$(grep '"val_loss"' "$OUT/$opt.jsonl" | tail -1 | sed 's/.*"val_loss": *\([0-9.eE+-]*\).*/\1/')
    ckpt=$(ls -d "$OUT/$opt"/ckpt_* | tail -1)
    norm=$("$BUILD"/bench/bench_q8_drift rownorm "$ckpt/state.bin")
    echo "$opt: $STEPS steps, val loss $val; $norm"
done
