#!/usr/bin/env bash
# tests/gpu/parallel.sh — the multi-rank checks on a machine with one NVIDIA GPU.
#   1. every layout of tests/test_layouts.c (dp, pp, tp, 3D, ZeRO-1, resume
#      across layouts, bad launches) with its ranks sharing the GPU: NCCL refuses
#      two ranks on one GPU, so they talk through MPI, staged through host memory;
#   2. one rank through NCCL (comm_backend=nccl: a communicator of one, the
#      gradient buckets reduced on the comm stream) equals one rank without it;
#   3. what the parallel machinery costs at dp=1: l124m bf16 steps of the build
#      from before it ($OLD, default .old: a checkout of commit c778b26), of this
#      build, and of this build through NCCL, in turns (A B C A B C);
#   4. the planner against the GPU: a one-GPU profile of l124m bf16 at B=16,
#      then plan's predicted step at B=16 and B=8 beside the measured ones;
#   5. exposed communication two ways: the split's event figure against
#      step(normal) - step(comm_ablate=1), dp=1 through NCCL and dp=2 sharing the GPU;
#      with two GPUs, tp=2 sequence_parallel=1 through NCCL shows its exposed communication.
# Logs go to $LOGS (default build/gpu); SECTIONS="2 3" runs only those. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-build/gpu}; OLD=${OLD:-.old}; SECTIONS=${SECTIONS:-1 2 3 4 5}; mkdir -p "$LOGS"
want() { case " $SECTIONS " in *" $1 "*) return 0;; esac; return 1; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
passed=0; failed=0
tally() { local last p f; last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$last" ]; then echo "   (no closing line)"; failed=$((failed + 1)); return; fi
    p=${last%% passed*}; f=${last#*passed, }; f=${f%% failed*}; passed=$((passed + p)); failed=$((failed + f)); echo "   $last"; }
check() { if eval "$1"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $2"; fi; }

if want 1; then
echo "== 1. layouts on one GPU, ranks through MPI"
LLM3D_TEST_ARGS="--device=cuda --comm_backend=mpi" timeout 1500 build/tests/test_layouts >"$LOGS/layouts.log" 2>&1
grep -E '^FAIL|losses|resume \[' "$LOGS/layouts.log" | head -60
tally "$LOGS/layouts.log"
fi

if want 2; then
echo "== 2. one rank through NCCL"
d=$(mktemp -d)
build/train prepare --input=tests/data/sotu_sample.txt --out="$d/data" --train-vocab=512 >/dev/null 2>&1
args="--train_data=$d/data/train_*.bin --val_data=$d/data/val_*.bin --device=cuda --dim=128 --n_layers=4 --n_heads=4 --n_kv_heads=2
      --ffn_dim=256 --seq_len=64 --batch_size=4 --total_batch_tokens=1024 --max_steps=5 --warmup_steps=1 --eval_every=5 --log_every=1
      --sample_tokens=0 --checkpoint_every=-1 --bucket_mb=0.05"
for prec in fp32 bf16; do
    build/train $args --precision=$prec >"$LOGS/plain_$prec.log" 2>&1
    mpirun -np 1 build/train $args --precision=$prec --comm_backend=nccl >"$LOGS/nccl_$prec.log" 2>&1
    a=$(grep -E '^step|^eval' "$LOGS/plain_$prec.log" | cut -d'|' -f1-3); b=$(grep -E '^step|^eval' "$LOGS/nccl_$prec.log" | cut -d'|' -f1-3)
    check '[ -n "$a" ] && [ "$a" = "$b" ]' "$prec: one rank through NCCL gives the losses of one rank: $(diff <(echo "$a") <(echo "$b") | head -5) $(tail -3 "$LOGS/nccl_$prec.log")"
    grep -qE 'ranks|nccl' "$LOGS/nccl_$prec.log"; echo "   $prec: $(echo "$b" | tail -2 | tr '\n' ' ')"
done
rm -rf "$d"
fi

if want 3; then
echo "== 3. the machinery's cost at dp=1: l124m bf16, tokens/s (20 timed steps each, in turns)"
bench() { "$@" --preset=l124m --device=cuda --precision=bf16 --steps=20 2>&1 | grep '^{' | sed 's/.*"tokens_per_s": \([0-9]*\).*/\1/'; }
if [ -x "$OLD/build/bench/bench_train" ]; then
    for round in 1 2; do
        o=$(bench "$OLD"/build/bench/bench_train); n=$(bench build/bench/bench_train); c=$(bench mpirun -np 1 build/bench/bench_train --comm_backend=nccl)
        echo "   round $round: before (c778b26) $o | now $n | now through NCCL $c" | tee -a "$LOGS/overhead.log"
    done
else
    echo "   no build at $OLD: skipped"
fi
fi

d=$(mktemp -d)
cat tests/data/*.txt > "$d/text.txt"
build/train prepare --input="$d/text.txt" --out="$d/data" --train-vocab=4096 >/dev/null 2>&1
if want 4; then
echo "== 4. the planner against one GPU (l124m bf16)"
l124="--preset=l124m --device=cuda --precision=bf16 --train_data=$d/data/train_*.bin --val_data= --warmup_steps=0 --sample_tokens=0
      --checkpoint_every=-1 --eval_every=0 --log_every=1"
build/train $l124 --max_steps=14 --profile_out="$LOGS/profile.json" --log_jsonl="$d/b16.jsonl" >"$LOGS/profile.log" 2>&1
build/train $l124 --max_steps=14 --batch_size=8 --total_batch_tokens=16384 --log_jsonl="$d/b8.jsonl" >"$LOGS/b8.log" 2>&1
for B in 16 8; do
    meas=$(grep -o '"ms": [0-9.]*' "$d/b$B.jsonl" | tail -10 | awk '{print $2}' | sort -n | awk '{v[NR] = $1} END {print (v[5] + v[6]) / 2}')
    pred=$(build/train plan --preset=l124m --device=cuda --precision=bf16 --gpus=1 --gpu_mem_gib=139 --profile="$LOGS/profile.json" \
           --total_batch_tokens=16384 --top=100 2>/dev/null | awk -v b=$B '$2 == 1 && $5 == b && $7 == "none" && $8 == 0 {print $11; exit}')
    echo "   B=$B: measured $meas ms a step (median of the last 10), predicted $pred ms" | tee -a "$LOGS/planner.log"
    check 'awk "BEGIN {exit !($pred > 0 && ($pred - $meas) / $meas < 0.05 && ($meas - $pred) / $meas < 0.05)}"' "planner within 5% at B=$B"
done
fi

if want 5; then
echo "== 5. exposed communication: events vs ablation"
small="--dim=512 --n_layers=8 --n_heads=8 --n_kv_heads=4 --ffn_dim=1408 --seq_len=512 --batch_size=8 --vocab_size=4096 --device=cuda
       --precision=bf16 --train_data=$d/data/train_*.bin --val_data= --warmup_steps=0 --sample_tokens=0 --checkpoint_every=-1 --eval_every=0
       --log_every=1 --max_steps=12"
ablate() {   # $1 name, then the launcher and its arguments
    local name=$1; shift
    "$@" $small --log_jsonl="$d/$name.jsonl" >"$LOGS/$name.log" 2>&1
    "$@" $small --comm_ablate=1 --log_jsonl="$d/${name}_ab.jsonl" >>"$LOGS/$name.log" 2>&1
    local n=$(grep -o '"ms": [0-9.]*' "$d/$name.jsonl" | tail -8 | awk '{s += $2} END {print s / NR}')
    local a=$(grep -o '"ms": [0-9.]*' "$d/${name}_ab.jsonl" | tail -8 | awk '{s += $2} END {print s / NR}')
    local e=$(grep -o '"comm_exposed_ms": [0-9.]*' "$d/$name.jsonl" | tail -8 | awk '{s += $2} END {print s / NR}')
    local b=$(grep -o '"comm_busy_ms": [0-9.]*' "$d/$name.jsonl" | tail -8 | awk '{s += $2} END {print s / NR}')
    echo "   $name: step $n ms, ablated $a ms: difference $(awk "BEGIN {print $n - $a}") ms; the split's exposed $e ms (all communication $b ms)" | tee -a "$LOGS/ablation.log"
}
ablate nccl1 mpirun -np 1 build/train --comm_backend=nccl
ablate mpi2 mpirun -np 2 build/train --dp=2 --comm_backend=mpi
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then   # tensor parallel's blocking reduce-scatters and all-gathers through NCCL
    ablate nccl_sp mpirun -np 2 build/train --tp=2 --sequence_parallel=1 --comm_backend=nccl
    e=$(grep -o '"comm_exposed_ms": [0-9.]*' "$d/nccl_sp.jsonl" | tail -8 | awk '{s += $2} END {print s / NR}')
    b=$(grep -o '"comm_busy_ms": [0-9.]*' "$d/nccl_sp.jsonl" | tail -8 | awk '{s += $2} END {print s / NR}')
    check 'awk "BEGIN {exit !($e > 0 && $e >= 0.5 * $b)}"' "tp=2 sequence_parallel=1 through NCCL books its communication as exposed ($e ms of $b ms busy)"
fi
fi

rm -rf "$d"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
