#!/usr/bin/env bash
# tests/gpu/nccl_scale.sh — the step split and `build/train scale` with several
# NCCL ranks, every rank a test host on the one GPU (LLM3D_NCCL_HOSTS_ON_ONE_GPU=1).
# It checks the accounting, not the speed (loopback sockets say nothing about
# a real network):
#   1. scale over 1, 2 and 4 ranks (strong: the same global batch): each size's
#      parts (compute, exposed communication, bubble, optimizer, data, host) sum
#      to its step within 2%, in every timed step's split of the JSONL;
#   2. the split's exposed communication agrees with step(normal) -
#      step(comm_ablate=1) within 10% of the step, at dp=2 and at tp=2 x dp=2
#      (medians of the last 8 steps of 12).
# Logs under $OUT (or build/gpu)/nccl_scale. Ends with "N passed, N failed".
#   run: make -j16 && tests/gpu/nccl_scale.sh
source "$(dirname "$0")/nccl_common.sh"
small="--dim=512 --n_layers=8 --n_heads=8 --n_kv_heads=4 --ffn_dim=1408 --seq_len=512 --batch_size=8 --device=cuda
       --comm_backend=nccl --precision=bf16 --train_data=$d/data/train_*.bin --val_data= --warmup_steps=0 --sample_tokens=0"
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
field() { grep -o "\"$1\": [-0-9.e]*" | awk '{ print $2 }'; }   # one value per line from JSONL on stdin
# The split of every step of JSONL $1 (after the first two): host is the rest (train/trainer.c), so the parts sum to the step
# by construction unless the measured parts (compute, exposed, bubble, optimizer, data: device clocks and the loader) exceed it;
# prints "GAP EXCESS STEPS": the worst |sum - step| / step and the worst (measured parts - step) / step, or "none"
split_gap() {
    grep '"split_step_ms"' "$1" | tail -n +3 | awk '{
        n = split("compute_ms comm_exposed_ms bubble_ms optimizer_ms data_ms host_ms split_step_ms", k, " ")
        for (i = 1; i <= n; i++) { if (match($0, "\"" k[i] "\": [-0-9.e]+")) v[k[i]] = substr($0, RSTART + length(k[i]) + 4, RLENGTH - length(k[i]) - 4) + 0 }
        m = v["compute_ms"] + v["comm_exposed_ms"] + v["bubble_ms"] + v["optimizer_ms"] + v["data_ms"]; t = v["split_step_ms"]
        g = (m + v["host_ms"] - t) / t; if (g < 0) g = -g; if (g > gap) gap = g
        x = (m - t) / t; if (steps == 0 || x > excess) excess = x; steps++
    } END { if (steps == 0) print "none"; else printf "%.4f %.4f %d\n", gap, excess, steps }'
}
# split_ok "GAP EXCESS STEPS": both within 2%
split_ok() { [ "$1" != none ] && awk -v s="$1" 'BEGIN { split(s, v, " "); exit !(v[1] <= 0.02 && v[2] <= 0.02) }'; }

echo "== 1. scale over 1, 2, 4 ranks through NCCL (strong scaling), the split of each"
timeout 300 build/train scale --ranks=1,2,4 --mode=strong --steps=6 --warmup=2 --out="$d/scale" $small --total_batch_tokens=16384 \
    >"$LOGS/scale.log" 2>&1; rc=$?
cp "$d"/scale/ranks_*.log "$d"/scale/ranks_*.jsonl "$d"/scale/scale.json "$LOGS"/ 2>/dev/null
sed -n '/^ranks /,/^$/p' "$LOGS/scale.log"
check '[ $rc -eq 0 ] && grep -q "through nccl" "$d/scale/ranks_2.log" && grep -q "through nccl" "$d/scale/ranks_4.log"' \
      "scale ran 1, 2, 4 ranks, the multi-rank ones through NCCL (exit $rc): $(tail -2 "$LOGS/scale.log" | tr '\n' ' ')"
for r in 2 4; do
    g=$(split_gap "$d/scale/ranks_$r.jsonl")
    check 'split_ok "$g"' "scale, $r ranks: the parts sum to the step within 2%, the measured ones (all but host, the rest) never over it by 2% (worst gap, excess, steps: $g)"
done

echo "== 2. exposed communication: the split against step(normal) - step(comm_ablate=1)"
ablate() {   # NAME RANKS LAYOUT...
    local name=$1 ranks=$2; shift 2
    timeout 200 mpirun -np "$ranks" build/train $small "$@" --log_every=1 --max_steps=12 --checkpoint_every=-1 --eval_every=0 \
        --run_dir="$d/$name" --log_jsonl="$d/$name.jsonl" >"$LOGS/$name.log" 2>&1 || { echo "  $name failed: $(tail -2 "$LOGS/$name.log")"; }
    timeout 200 mpirun -np "$ranks" build/train $small "$@" --log_every=1 --max_steps=12 --checkpoint_every=-1 --eval_every=0 --comm_ablate=1 \
        --run_dir="$d/${name}_ab" --log_jsonl="$d/${name}_ab.jsonl" >"$LOGS/${name}_ab.log" 2>&1 || { echo "  $name ablated failed: $(tail -2 "$LOGS/${name}_ab.log")"; }
    cp "$d/$name.jsonl" "$d/${name}_ab.jsonl" "$LOGS"/ 2>/dev/null
    local n a e b g
    n=$(grep '"loss"' "$d/$name.jsonl" 2>/dev/null | tail -8 | field ms | median)
    a=$(grep '"loss"' "$d/${name}_ab.jsonl" 2>/dev/null | tail -8 | field ms | median)
    e=$(grep '"loss"' "$d/$name.jsonl" 2>/dev/null | tail -8 | field comm_exposed_ms | median)
    b=$(grep '"loss"' "$d/$name.jsonl" 2>/dev/null | tail -8 | field comm_busy_ms | median)
    g=$(split_gap "$d/$name.jsonl")
    echo "   $name: step $n ms, ablated $a ms, difference $(awk -v n="$n" -v a="$a" 'BEGIN { print n - a }') ms; the split's exposed $e ms (all communication $b ms)"
    check 'grep -q "through nccl" "$LOGS/$name.log" && [ -n "$n" ] && [ -n "$a" ] && [ -n "$e" ] && awk -v n="$n" -v a="$a" -v e="$e" "BEGIN { d = n - a - e; if (d < 0) d = -d; exit !(d <= 0.10 * n) }"' \
          "$name: exposed communication $e ms vs step - ablated step $(awk -v n="$n" -v a="$a" 'BEGIN { print n - a }') ms: within 10% of the step ($n ms)"
    check 'split_ok "$g"' "$name: the parts sum to the step within 2%, the measured ones never over it by 2% (worst gap, excess, steps: $g)"
}
ablate dp2 2 --dp=2 --total_batch_tokens=8192
ablate dp2tp2 4 --dp=2 --tp=2 --sequence_parallel=1 --total_batch_tokens=8192
finish
