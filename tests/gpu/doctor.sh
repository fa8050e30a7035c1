#!/usr/bin/env bash
# tests/gpu/doctor.sh — the doctor and the watchdog on a machine with one NVIDIA GPU.
#   1. doctor on one GPU: versions, NVML's view of the GPU, the environment
#      (NCCL_NVLS_ENABLE=0, as the shared H200 machine asks), the sweep at one
#      rank through a one-rank NCCL communicator, 8 B to 1 GiB;
#   2. doctor with 2 ranks sharing the GPU (NCCL refuses that: they talk
#      through MPI, staged through host memory), the sweep and the pair;
#   3. the watchdog with 2 ranks sharing the GPU through MPI: rank 1 stalls at
#      step 3; every rank out within comm_timeout_s + a few seconds, rank 1
#      named, the flight recorder written, checkpoint 2 intact;
#   4. the watchdog with one NCCL rank: fault=stall stops the rank's comm stream (a
#      host function that never returns), so its NCCL collective never
#      completes; the watchdog's thread sees the GPU's events, aborts NCCL and
#      ends the process within the deadline + a few seconds. And a run without
#      a fault is not stopped by it.
# Logs go to $LOGS (default build/gpu); SECTIONS="3 4" runs only those. Ends with "N passed, N failed".
#   run: make -j16 && tests/gpu/doctor.sh
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-build/gpu}; mkdir -p "$LOGS"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export NCCL_NVLS_ENABLE=0
passed=0; failed=0
check() { if eval "$1"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $2"; fi; }
secs_since() { awk -v s="$1" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - s }'; }
within() { awk -v t="$1" -v m="$2" 'BEGIN { exit !(t != "" && t < m) }'; }   # within SECONDS LIMIT
SECTIONS=${SECTIONS:-1 2 3 4}
want() { case " $SECTIONS " in *" $1 "*) return 0;; esac; return 1; }

if want 1; then
echo "== 1. doctor on one GPU (a one-rank NCCL communicator), sweep 8 B .. 1 GiB"
timeout 600 build/train doctor --max_bytes=1G --sweep_seconds=120 >"$LOGS/doctor1.log" 2>&1; rc=$?
cat "$LOGS/doctor1.log"
check '[ $rc -eq 0 ]' "doctor on one GPU exits 0 (got $rc)"
check 'grep -q "^doctor | 1 rank(s) on 1 host(s) | device cuda, 1 GPU(s) visible to rank 0 | device collectives through nccl" "$LOGS/doctor1.log"' "one GPU rank goes through a NCCL communicator of one"
check 'grep -q "^GPUs of host .* (NVML, driver " "$LOGS/doctor1.log" && grep -q "^  GPU0 .*H200" "$LOGS/doctor1.log"' "NVML sees the H200"
check 'grep -q "CUDA runtime .*, the driver supports up to .* | NCCL " "$LOGS/doctor1.log" && grep -q "verdict: the versions fit together" "$LOGS/doctor1.log"' "versions fit"
check 'grep -q "^ *1 GiB |" "$LOGS/doctor1.log"' "the sweep reaches 1 GiB"
check 'grep -q "NCCL_NVLS_ENABLE=0" "$LOGS/doctor1.log"' "NCCL_NVLS_ENABLE=0 is shown"

fi
if want 2; then
echo "== 2. doctor with 2 ranks sharing the GPU (through MPI)"
timeout 600 mpirun -np 2 build/train doctor --device=cuda --max_bytes=256M --sweep_seconds=120 >"$LOGS/doctor2.log" 2>&1; rc=$?
cat "$LOGS/doctor2.log"
check '[ $rc -eq 0 ] && grep -q "^doctor | 2 rank(s) on 1 host(s) | device cuda, .* | device collectives through mpi" "$LOGS/doctor2.log"' "2 ranks on one GPU through MPI (exit $rc)"
check 'grep -q "rank 1 -> GPU0 (shared with other ranks)" "$LOGS/doctor2.log" && grep -q "rank 0 <-> rank 1 | same GPU" "$LOGS/doctor2.log"' "the shared GPU is named, and the pair"

fi
d=$(mktemp -d)
build/train prepare --input=tests/data/sotu_sample.txt --out="$d/data" --train-vocab=512 >/dev/null 2>&1
args="--train_data=$d/data/train_*.bin --val_data= --device=cuda --dim=128 --n_layers=4 --n_heads=4 --n_kv_heads=2 --ffn_dim=256
      --seq_len=64 --batch_size=4 --max_steps=20 --warmup_steps=0 --log_every=1 --sample_tokens=0 --comm_timeout_s=5"

if want 3; then
echo "== 3. the watchdog, 2 ranks sharing the GPU through MPI: rank 1 stalls at step 3"
t0=$(date +%s.%N)
timeout 300 mpirun -np 2 build/train $args --dp=2 --comm_backend=mpi --run_dir="$d/mpi" --checkpoint_every=1 \
    --fault=stall:rank=1:step=3 >"$LOGS/watchdog_mpi.log" 2>&1; rc=$?
took=$(secs_since "$t0")
grep -A6 "watchdog:" "$LOGS/watchdog_mpi.log"
check '[ $rc -ne 0 ] && [ $rc -ne 124 ]' "the stalled job fails, not hangs (exit $rc)"
check 'within "$took" 30' "every rank out within 5 s + start-up + a few (took $took s)"
check 'grep -q "not arrived: rank 1 " "$LOGS/watchdog_mpi.log" && grep -q "at step 3" "$LOGS/watchdog_mpi.log"' "rank 1 and step 3 are named"
check '[ -s "$d/mpi/flight_rank0.txt" ] && [ -f "$d/mpi/ckpt_00000002/DONE" ]' "flight recorder written; checkpoint 2 intact"
echo "   took $took s"

fi
if want 4; then
echo "== 4. the watchdog, one NCCL rank: its comm stream stops at step 3"
t0=$(date +%s.%N)
timeout 300 mpirun -np 1 build/train $args --comm_backend=nccl --run_dir="$d/nccl" --checkpoint_every=-1 \
    --fault=stall:rank=0:step=3 >"$LOGS/watchdog_nccl.log" 2>&1; rc=$?
took=$(secs_since "$t0")
grep -A6 "watchdog:" "$LOGS/watchdog_nccl.log"
check '[ $rc -ne 0 ] && [ $rc -ne 124 ]' "the hung NCCL rank ends, not hangs (exit $rc): $(tail -3 "$LOGS/watchdog_nccl.log")"
check 'within "$took" 30' "out within 5 s + start-up + a few (took $took s)"
check 'grep -q "watchdog: all-reduce over the .* group .* at step 3.*did not complete within its deadline of 5 s" "$LOGS/watchdog_nccl.log"' "the NCCL op and step 3 are named"
check 'grep -q "this is the only rank" "$LOGS/watchdog_nccl.log" && [ -s "$d/nccl/flight_rank0.txt" ]' "one rank: said so; flight recorder written"
echo "   took $took s"
timeout 300 mpirun -np 1 build/train $args --comm_backend=nccl --run_dir="$d/nccl_ok" --checkpoint_every=-1 --max_steps=30 \
    --comm_timeout_s=2 >"$LOGS/watchdog_nccl_ok.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "^step *30/30" "$LOGS/watchdog_nccl_ok.log"' "without a fault the watchdog lets a NCCL run finish (exit $rc)"
fi
rm -rf "$d"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
