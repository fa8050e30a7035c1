#!/usr/bin/env bash
# tests/gpu/parallel.sh — the multi-rank checks on a machine with one NVIDIA GPU.
#   1. every layout of tests/test_layouts.c (dp, pp, tp, 3D, ZeRO-1, resume
#      across layouts, bad launches) with its ranks sharing the GPU: NCCL refuses
#      two ranks on one GPU, so they talk through MPI, staged through host memory;
#   2. one rank through NCCL (comm_backend=nccl: a communicator of one, the
#      gradient buckets reduced on the comm stream) equals one rank without it;
#   3. what the parallel machinery costs at dp=1: l124m bf16 steps of the build
#      from before it ($OLD, default .old: a checkout of commit c778b26), of this
#      build, and of this build through NCCL, in turns (A B C A B C).
# Logs go to $LOGS (default build/gpu). Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-build/gpu}; OLD=${OLD:-.old}; mkdir -p "$LOGS"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
passed=0; failed=0
tally() { local last p f; last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$last" ]; then echo "   (no closing line)"; failed=$((failed + 1)); return; fi
    p=${last%% passed*}; f=${last#*passed, }; f=${f%% failed*}; passed=$((passed + p)); failed=$((failed + f)); echo "   $last"; }
check() { if eval "$1"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $2"; fi; }

echo "== 1. layouts on one GPU, ranks through MPI"
LLM3D_TEST_ARGS="--device=cuda --comm_backend=mpi" timeout 1500 build/tests/test_layouts >"$LOGS/layouts.log" 2>&1
grep -E '^FAIL|losses|resume \[' "$LOGS/layouts.log" | head -60
tally "$LOGS/layouts.log"

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

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
