#!/usr/bin/env bash
# tests/gpu/tp.sh — tensor parallelism on a machine with one NVIDIA GPU: the
# ranks share the GPU through MPI (--comm_backend=mpi: NCCL refuses two ranks
# on one GPU, and device buffers are staged through host memory when Open MPI
# is not CUDA-aware), so this checks the math, not the speed.
#   1. build/tests/test_layouts --device=cuda: the tensor-parallel equalities
#      of `make test` on the GPU — tp=2, tp=4 (GQA with n_kv_heads = tp and
#      2*tp), dp=2 x tp=2, with pp, with and without sequence parallelism, tied
#      and untied, recompute, adamw8bit, ZeRO-1, bf16 — every step's loss and
#      every tensor after 3 steps against one rank on the GPU; resume across tp
#      layouts; HF export; every rank's memory plan within 10% of its peak.
#   2. A smoke benchmark of l350m, bf16, 16 x 1024, at tp=2 on the one GPU,
#      without and with sequence parallelism: tokens/s, and each rank's
#      measured and predicted memory (bench/bench_train under mpirun).
# Logs go to build/gpu/tp_*.log. Ends with "N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."
mkdir -p build/gpu
make -j"$(nproc)" all >build/gpu/tp-make.log 2>&1 || { tail -40 build/gpu/tp-make.log; echo "0 passed, 1 failed"; exit 1; }

# The CUDA libraries may live outside the loader's path (as in tests/gpu/run.sh).
if ldd build/train | grep -q 'not found'; then
    for d in $(python3 -c 'import site,glob; print(" ".join(p for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/*/lib")))' 2>/dev/null); do
        LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
    done
    export LD_LIBRARY_PATH
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
passed=0; failed=0

echo "== tensor-parallel equalities on the GPU, ranks sharing it through MPI"
build/tests/test_layouts --device=cuda >build/gpu/tp_layouts.log 2>&1; rc=$?
grep -E '^FAIL|^--|^resume|HF export|memory plan' build/gpu/tp_layouts.log | head -60
last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' build/gpu/tp_layouts.log | tail -1)
if [ -z "$last" ]; then echo "   (no closing line: crashed?)"; tail -20 build/gpu/tp_layouts.log; failed=$((failed + 1))
else
    p=${last%% passed*}; f=${last#*passed, }; f=${f%% failed*}
    passed=$((passed + p)); failed=$((failed + f))
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && failed=$((failed + 1))
    echo "   $last"
fi

echo "== smoke: l350m bf16 16x1024 at tp=2 on one GPU (2 ranks through MPI: a test setup, not a fast one)"
for sp in 0 1; do
    log=build/gpu/tp_l350m_sp$sp.log
    timeout 900 mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/bench_train --preset=l350m --device=cuda \
        --precision=bf16 --tp=2 --sequence_parallel=$sp --comm_backend=mpi --steps=3 >$log 2>&1; rc=$?
    n=$(grep -c '^{"preset"' $log)
    if [ "$rc" -ne 0 ] || [ "$n" -ne 2 ]; then
        echo "FAIL sequence_parallel=$sp: rc $rc, $n of 2 ranks reported (see $log)"; tail -20 $log; failed=$((failed + 1)); continue
    fi
    # one line per rank: tokens/s, measured peak and predicted bytes; ok when every prediction is within 10%
    ok=$(grep '^{"preset"' $log | awk -v sp=$sp '
        function get(k,   m) { match($0, "\"" k "\": [0-9.e+-]+"); m = substr($0, RSTART, RLENGTH); sub(/.*: /, "", m); return m + 0 }
        BEGIN { ok = 1 }
        { m = get("peak_allocated_bytes"); p = get("predicted_bytes"); err = m > 0 ? (p - m) / m : 1
          if (err > 0.10 || err < -0.10) ok = 0
          printf "   l350m tp=2 sequence_parallel=%d rank %d: %.0f tokens/s, %.0f ms/step, peak allocated %.2f GiB, predicted %.2f GiB (%+.1f%%), activations %.2f GiB\n",
                 sp, get("rank"), get("tokens_per_s"), get("step_ms"), m / 2^30, p / 2^30, 100 * err, get("activation_bytes") / 2^30 > "/dev/stderr" }
        END { print ok }')
    if [ "$ok" = 1 ]; then passed=$((passed + 1)); else echo "FAIL sequence_parallel=$sp: a rank's memory prediction is off by more than 10%"; failed=$((failed + 1)); fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
