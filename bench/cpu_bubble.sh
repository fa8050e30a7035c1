#!/usr/bin/env bash
# bench/cpu_bubble.sh — the pipeline bubble on CPU ranks: pp=4, m = 8, one
# thread a rank, with 1f1b, zb1 (at 1F1B's own memory, the default), zb1b (zb1
# with zb1_memory=busiest: ZB-H1's order) and zbv on the same model and data
# (dim 256, 8 layers, 256 tokens a micro-batch), each run SAMPLES times in
# turn (default 2). Prints, per schedule and sample, the split line's mean over
# ranks of bubble / (compute + exposed communication + bubble) — the fraction
# the formulas give (27.3%, 20.0%, 11.1%, 5.9% with F = B = W) — as the median
# of steps 3-8, the step time's median and the loss at step 8. The figures of
# docs/pipeline-parallel.md ("Measured, CPU ranks") come from it; on a machine
# with fewer than 4 cores the ranks share cores (see that section).
#   run: make && bench/cpu_bubble.sh [SAMPLES]
set -u
cd "$(dirname "$0")/.." || exit 1
samples=${1:-2}
cores=$(nproc --all)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
d=$(mktemp -d /tmp/llm3d_bubble.XXXXXX); trap 'rm -rf "$d"' EXIT
build/train prepare --input=tests/data/sotu_sample.txt --out="$d/data" --train-vocab=512 >/dev/null 2>&1 ||
    { echo "build/train prepare failed: run make first"; exit 1; }
model=(--dim=256 --n_layers=8 --n_heads=8 --n_kv_heads=4 --ffn_dim=1024 --seq_len=128 --batch_size=2 --total_batch_tokens=2048
       --pp=4 --max_steps=8 --log_every=1 --warmup_steps=0 --train_data="$d/data/train_*.bin" --val_data= --sample_tokens=0
       --eval_every=0 --checkpoint_every=0 --keep_checkpoints=0)
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "?"; else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo "$(date -u '+%F %H:%M UTC') $(git log -1 --format=%h) $cores cores; pp=4, m=8, medians of steps 3-8"
printf '%-6s %-7s %-8s %-30s %-10s %s\n' schedule sample formula "bubble (mean over ranks)" "step ms" "loss at 8"
for ((k = 1; k <= samples; k++)); do
    for s in 1f1b zb1 zb1b zbv; do
        extra=(); name=$s; [ "$s" = zb1b ] && { name=zb1; extra=(--zb1_memory=busiest); }
        log="$d/$s.$k.log"
        timeout 300 mpirun -np 4 build/train "${model[@]}" --pp_schedule=$name "${extra[@]}" --run_dir="$d/$s.$k" >"$log" 2>&1 ||
            { echo "$s: exit $? — $(tail -1 "$log")"; continue; }
        bubble=$(grep '^split' "$log" | tail -n +3 | grep -o 'mean over ranks [0-9.]*' | awk '{ print $4 }' | median)
        ms=$(grep '^step' "$log" | tail -n +3 | grep -o '[0-9.]* ms' | awk '{ print $1 }' | median)
        formula=$(grep -o 'formula [0-9.]*%' "$log" | tail -1 | awk '{ print $2 }')
        loss=$(grep '^step     8/8' "$log" | grep -o 'loss [0-9.]*' | awk '{ print $2 }')
        printf '%-8s %-7s %-8s %-30s %-10s %s\n' "$s" "$k" "$formula" "$bubble%" "$ms" "$loss"
    done
done
