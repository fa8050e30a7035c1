#!/usr/bin/env bash
# tests/test_eval.sh — an evaluation means the same on every layout (train/trainer.c's trainer_eval):
#   - the README's dp4 example in small (a fixed total_batch_tokens, the batch split over the ranks):
#     one rank at batch_size 4, dp=2 at 2, dp=4 at 1, dp=2 with zero=3 and dp=2 x pp=2 score the same
#     eval_tokens of validation, so every `eval | step N` val_loss equals one rank's within 1e-5
#     relative; 13 sequences, so the last micro-batch of some layouts is part padding;
#   - eval_tokens that is not a whole number of sequences is rounded down to whole ones;
#   - the deprecated eval_batches still works, as eval_batches x batch_size sequences, and says so.
source "$(dirname "$0")/ranks.sh"
"$BUILD"/train prepare --input=tests/data/sotu_sample.txt --out="$dir/data" --train-vocab=300 >/dev/null 2>&1
common="--train_data=$dir/data/train_*.bin --val_data=$dir/data/val_*.bin --dim=32 --n_layers=2 --n_heads=4 --n_kv_heads=2
        --ffn_dim=64 --seq_len=16 --total_batch_tokens=256 --warmup_steps=1 --lr=3e-3 --adam_eps=1e-5 --max_steps=4 --eval_every=2
        --log_every=1 --sample_tokens=0 --checkpoint_every=-1 --eval_tokens=208"
# val NAME: the val_loss of every evaluation in NAME's log, one a line ("step loss")
val() { grep '"val_loss"' "$dir/$1.jsonl" | sed 's/.*"step": \([0-9]*\), "val_loss": \([-0-9.e]*\).*/\1 \2/'; }
# same A B: every evaluation of B equals A's within 1e-5 relative, and there are two of them
same() {
    paste -d' ' <(val "$1") <(val "$2") | awk '{ n++; d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * ($2 < 0 ? -$2 : $2)) bad++ }
                                               END { exit !(n == 2 && bad == 0) }'
}
run() {   # run NAME RANKS ARGS...: NAME.log and NAME.jsonl
    local name=$1 n=$2; shift 2
    if [ "$n" -eq 1 ]; then timeout 120 "$BUILD"/train $common "$@" --log_jsonl="$dir/$name.jsonl" > "$dir/$name.log" 2>&1
    else timeout 120 mpirun -np "$n" "$BUILD"/train $common "$@" --log_jsonl="$dir/$name.jsonl" > "$dir/$name.log" 2>&1; fi
}

run one 1 --batch_size=4
check '[ "$(val one | wc -l)" -eq 2 ] && grep -q "^eval  | step 4 | val_loss" "$dir/one.log"' "one rank evaluates at steps 2 and 4: $(grep -E '^(eval|error)' "$dir/one.log")"
for layout in "dp2 2 --dp=2 --batch_size=2" "dp4 4 --dp=4 --batch_size=1" "zero3 2 --dp=2 --zero=3 --batch_size=4" \
              "dp2pp2 4 --dp=2 --pp=2 --batch_size=2" "b2 1 --batch_size=2"; do
    set -- $layout
    name=$1 ranks=$2
    run "$@"
    check '[ "$ranks" -eq 1 ] || grep -q "^ranks | $ranks = dp" "$dir/$name.log"' "$name ran on $ranks ranks: $(grep -E '^(ranks|error)' "$dir/$name.log")"
    check 'same one "$name"' "$name (${*:3}): its val losses equal one rank's within 1e-5: $(val one | tr '\n' ' ') against $(val "$name" | tr '\n' ' ') $(grep -E '^error' "$dir/$name.log")"
done

# not a whole number of sequences: rounded down (13 x 16 + 10 tokens score the 13 sequences)
run part 1 --batch_size=4 --eval_tokens=218
check 'same one part' "eval_tokens=218 scores the 13 whole sequences of eval_tokens=208: $(val part | tr '\n' ' ')"

# the deprecated eval_batches: eval_batches x batch_size sequences, said once
run alias 2 --dp=2 --batch_size=2 --eval_batches=4 --eval_tokens=40960
run eight 1 --batch_size=4 --eval_tokens=128
check 'same eight alias && [ "$(grep -c "warning: eval_batches=4 is deprecated.*use --eval_tokens=128 " "$dir/alias.log")" -eq 1 ]' \
      "eval_batches=4 at batch_size 2 scores 8 sequences, as eval_tokens=128, and says it is deprecated once: $(grep -E 'warning|error' "$dir/alias.log")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
