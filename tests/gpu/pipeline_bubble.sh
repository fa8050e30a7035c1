#!/usr/bin/env bash
# tests/gpu/pipeline_bubble.sh — the pipeline bubble on real devices: pp=4 on
# four GPUs (one rank a GPU, through NCCL), m = 8, with 1f1b, zb1 (at 1F1B's
# own memory, the default), zb1b (zb1 with zb1_memory=busiest: ZB-H1's order)
# and zbv, the same model and data. For each: the log's split line (the mean
# over ranks of bubble / (compute + exposed communication + bubble), the
# fraction the formulas give: 27.3%, 20.0%, 11.1% and 5.9% with F = B = W) and the step time,
# medians of steps 3-8. It checks that every run went through NCCL, that the
# three trained the same (losses within bf16's rounding), and that each
# zero-bubble schedule measured a smaller bubble than 1F1B; the figures are
# for docs/pipeline-parallel.md ("not measured on GPUs yet"). Needs 4 GPUs
# (nvidia-h100-x4). Logs under $OUT (or build/gpu)/pipeline_bubble. Ends with
# "N passed, N failed".
#   run: make -j16 && tests/gpu/pipeline_bubble.sh
source "$(dirname "$0")/nccl_common.sh"
unset LLM3D_NCCL_HOSTS_ON_ONE_GPU   # real GPUs, one a rank
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -lt 4 ]; then echo "  FAIL needs 4 GPUs, this machine has $gpus (use nvidia-h100-x4)"; failed=1; finish; fi
model="--dim=1024 --n_layers=16 --n_heads=16 --n_kv_heads=8 --ffn_dim=2816 --seq_len=512 --batch_size=8 --total_batch_tokens=32768
       --device=cuda --comm_backend=nccl --precision=bf16 --train_data=$d/data/train_*.bin --val_data= --warmup_steps=0
       --sample_tokens=0 --eval_every=0 --checkpoint_every=0 --keep_checkpoints=0 --max_steps=8 --log_every=1 --pp=4"
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo "== pp=4, m=8 on 4 GPUs: the measured bubble of each schedule beside its formula"
declare -A bubble ms loss
for s in 1f1b zb1 zb1b zbv; do
    name=${s%b}; [ "$s" = zb1b ] && extra="--zb1_memory=busiest" || extra=""
    [ "$s" = 1f1b ] && name=1f1b
    # shellcheck disable=SC2086
    timeout 300 mpirun -np 4 build/train $model --pp_schedule=$name $extra --run_dir="$d/$s" >"$LOGS/$s.log" 2>&1; rc=$?
    check '[ $rc -eq 0 ] && grep -q "through nccl" "$LOGS/$s.log" && grep -q "| $name, 8 micro-batches" "$LOGS/$s.log"' \
          "$s ran on 4 GPUs through NCCL (exit $rc): $(tail -1 "$LOGS/$s.log")"
    bubble[$s]=$(grep '^split' "$LOGS/$s.log" | tail -n +3 | grep -o 'mean over ranks [0-9.]*' | awk '{ print $4 }' | median)
    ms[$s]=$(grep '^step' "$LOGS/$s.log" | tail -n +3 | grep -o '[0-9.]* ms' | awk '{ print $1 }' | median)
    loss[$s]=$(grep '^step     8/8' "$LOGS/$s.log" | grep -o 'loss [0-9.]*' | awk '{ print $2 }')
    echo "   $s: bubble ${bubble[$s]:-?}% (formula $(grep -o 'formula [0-9.]*%' "$LOGS/$s.log" | tail -1 | awk '{ print $2 }')), step ${ms[$s]:-?} ms, loss at step 8 ${loss[$s]:-?}"
done
for s in zb1 zb1b zbv; do
    check 'awk -v a="${loss[$s]}" -v b="${loss[1f1b]}" "BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != \"\" && b != \"\" && d <= 0.01 * b) }"' \
          "$s trained as 1f1b did: loss ${loss[$s]:-?} against ${loss[1f1b]:-?} (within 1%, bf16)"
    check 'awk -v a="${bubble[$s]}" -v b="${bubble[1f1b]}" "BEGIN { exit !(a != \"\" && b != \"\" && a + 0 < b + 0) }"' \
          "$s's measured bubble ${bubble[$s]:-?}% is below 1f1b's ${bubble[1f1b]:-?}% (steps ${ms[$s]:-?} ms against ${ms[1f1b]:-?} ms)"
done
finish
