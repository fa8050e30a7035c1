#!/usr/bin/env bash
# tests/gpu/cp_memory.sh — context parallelism's memory per rank on one GPU (issue 53): l124m, bf16, one
# sequence of T = 32768 and 65536 tokens, cp = 1, 2, 4, every rank a test host through NCCL
# (LLM3D_NCCL_HOSTS_ON_ONE_GPU=1: the ranks share the GPU, so each reports its own plan and its own measured
# peak, from --memory_report=1's one step). Prints the table; checks that every rank's plan is within 2% of
# its measured peak, that each rank's peak falls with cp (the fixed part — weights, gradients, AdamW state,
# ~2 GiB at l124m — does not), and that the planned activations halve with each doubling of cp, within 15%
# (each rank also holds one layer's whole-sequence K/V buffers: docs/context-parallel.md).
#   run: make -j16 && tests/gpu/cp_memory.sh        (about two minutes on an H100)
source "$(dirname "$0")/nccl_common.sh"
for i in 1 2 3 4 5 6 7 8 9 10; do cat tests/data/sotu_sample.txt; done > "$d/long.txt"   # two 64k-token sequences and more
build/train prepare --input="$d/long.txt" --out="$d/long" --train-vocab=512 >/dev/null 2>&1 || { echo "  FAIL prepare"; failed=1; finish; }
bytes() {   # "10.9 GiB" -> bytes
    awk -v v="$1" -v u="$2" 'BEGIN { m = u == "GiB" ? 1073741824 : u == "MiB" ? 1048576 : u == "KiB" ? 1024 : 1; printf "%.0f", v * m }'
}
echo "== memory per rank, l124m bf16, batch 1 (each rank: plan / measured peak)"
printf "  %6s %3s %14s %16s %16s\n" T cp "activations" "rank 0 plan" "rank 0 measured"
for T in 32768 65536; do
    prev_peak=""; prev_act=""
    for cp in 1 2 4; do
        name=m${T}_$cp
        backend=$([ "$cp" -gt 1 ] && echo nccl || echo auto)   # several ranks: through NCCL, each a test host
        timeout 300 mpirun -np "$cp" build/train --preset=l124m --device=cuda --precision=bf16 --comm_backend="$backend" --batch_size=1 \
            --seq_len="$T" --cp="$cp" --total_batch_tokens="$T" --train_data="$d/long/train_*.bin" --val_data= --memory_report=1 \
            --sample_tokens=0 --checkpoint_every=-1 --run_dir="$d/$name" >"$LOGS/$name.log" 2>&1; rc=$?
        act=$(grep -m1 '^memory | predicted' "$LOGS/$name.log" | grep -o 'activations [0-9.]* [KMG]iB' | awk '{print $2, $3}')
        act_b=$([ -n "$act" ] && bytes $act)
        if [ "$cp" -eq 1 ]; then   # one rank (train/memory_report.c): "memory | measured: peak allocated X (...); prediction off
            # by +y%" or "...; the prediction is exact to 0.05%"
            peak=$(grep -o '^memory | measured: peak allocated [0-9.]* [KMG]iB' "$LOGS/$name.log" | awk '{print $6, $7}')
            peak_b=$([ -n "$peak" ] && bytes $peak)
            worst=$(grep -o 'prediction off by [-+][0-9.]*%' "$LOGS/$name.log" | tr -d '%+-' | awk '{print $4}')
            [ -z "$worst" ] && grep -q '^memory | measured: .*the prediction is exact to 0.05%' "$LOGS/$name.log" && worst=0
            plan0=$(grep -m1 '^memory | predicted' "$LOGS/$name.log" | grep -o 'total [0-9.]* [KMG]iB' | awk '{print $2, $3}')
            plan_b=$([ -n "$plan0" ] && bytes $plan0)
            ranks=1; lines=$([ -n "$peak" ] && echo 1 || echo 0)
        else   # every rank's line: "memory | rank R (...): predicted N bytes (...), measured peak M bytes (...): prediction +y%"
            lines=$(grep -c '^memory | rank ' "$LOGS/$name.log")
            worst=$(grep '^memory | rank ' "$LOGS/$name.log" | grep -o 'prediction [-+][0-9.]*%' | tr -d '%+-' | awk '{print $2}' | sort -g | tail -1)
            plan_b=$(grep -m1 '^memory | rank 0 ' "$LOGS/$name.log" | grep -o 'predicted [0-9]*' | awk '{print $2}')
            peak_b=$(grep -m1 '^memory | rank 0 ' "$LOGS/$name.log" | grep -o 'measured peak [0-9]*' | awk '{print $3}')
            ranks=$cp
        fi
        printf "  %6s %3s %14s %13.2f GiB %13.2f GiB\n" "$T" "$cp" "${act:-?}" "$(awk -v b="${plan_b:-0}" 'BEGIN {print b / 1073741824}')" \
            "$(awk -v b="${peak_b:-0}" 'BEGIN {print b / 1073741824}')"
        check '[ $rc -eq 0 ] && [ "$lines" -eq "$ranks" ] && within "${worst:-99}" 2' \
              "T=$T cp=$cp: ran (rc $rc), $lines of $ranks ranks reported, every rank's plan within 2% of its peak (worst ${worst:-?}%)"
        if [ -n "$prev_peak" ]; then
            check 'awk -v a="$peak_b" -v p="$prev_peak" "BEGIN {exit !(a > 0 && a < p)}"' "T=$T cp=$cp: rank 0's peak below cp=$((cp / 2))'s"
            check 'awk -v a="$act_b" -v p="$prev_act" "BEGIN {exit !(a > 0 && a < 0.575 * p)}"' \
                  "T=$T cp=$cp: planned activations ${act:-?}, about half of cp=$((cp / 2))'s"
        fi
        prev_peak=$peak_b; prev_act=$act_b
    done
done
finish
