#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU tests in one command, on a machine with an NVIDIA
# GPU: builds the CUDA backend and the GPU programs (`make gpu`), runs the op
# test (every CUDA op against the CPU reference, fp32/bf16/fp16), then the same
# test with TF32 matmuls, then the op test under compute-sanitizer memcheck.
# Then the whole-model test (tests/gpu/test_cuda_model.c), also under memcheck,
# and again with the portable attention forced (LLM3D_ATTENTION=mma: what a GPU
# without Hopper's wgmma runs), and a misspelt LLM3D_ATTENTION refused. Long
# sequences: the memory plan against the measured peak at T = 8192 and 32768,
# and a batch far past the GPU's memory refused with settings that would fit.
# Context parallelism's memory per rank at T = 32k and 64k, cp = 1, 2, 4 (tests/gpu/cp_memory.sh).
# Then multi-rank NCCL with every rank a test host on the one GPU
# (tests/gpu/nccl.sh: nccl_layouts.sh, nccl_faults.sh, nccl_doctor.sh, nccl_scale.sh;
# docs/nccl-one-gpu.md). `--bench` also times every op at the l124m shape
# (bench/gpu/bench_cuda_ops).
# --part=ops,model,long,nccl runs some of the four parts (ops: the op tests and
# memcheck; model: the model tests and the refusals; long: long sequences and
# cp's memory; nccl: tests/gpu/nccl.sh), so ten-minute device calls can run it
# in pieces. Logs go to build/gpu/*.log. Not part of `make test`: CI has no GPU.
# Ends with the summed "N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."
bench=0; parts="ops model long nccl"   # --part=LIST (comma-separated): some of them, e.g. a device call's share
for a in "$@"; do case $a in --bench) bench=1 ;; --part=*) parts=${a#--part=}; parts=${parts//,/ } ;;
    *) echo "usage: tests/gpu/run.sh [--bench] [--part=ops,model,long,nccl]"; exit 2 ;; esac; done
want() { [[ " $parts " == *" $1 "* ]]; }
for p in $parts; do case $p in ops|model|long|nccl) ;; *) echo "tests/gpu/run.sh: --part names '$p'; the parts are ops, model, long, nccl"
    echo "0 passed, 1 failed"; exit 2 ;; esac; done

mkdir -p build/gpu
make -j"$(nproc)" all gpu >build/gpu-make.log 2>&1 || { tail -40 build/gpu-make.log; echo "0 passed, 1 failed"; exit 1; }

# The CUDA libraries may live outside the loader's path (e.g. cuDNN or cuBLAS
# from Python wheels under site-packages/nvidia/*/lib): add them if needed.
if ldd build/gpu/test_cuda_ops | grep -q 'not found'; then
    for d in $(python3 -c 'import site,glob; print(" ".join(p for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/*/lib")))' 2>/dev/null); do
        LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
    done
    export LD_LIBRARY_PATH
    ldd build/gpu/test_cuda_ops | grep 'not found' && { echo "error: CUDA libraries missing (above)"; echo "0 passed, 1 failed"; exit 1; }
fi

passed=0; failed=0
tally() {   # $1: log file; adds its closing line to the totals
    local last p f
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$last" ]; then echo "   (no closing line: crashed?)"; failed=$((failed + 1)); return; fi
    p=${last%% passed*}; f=${last#*passed, }; f=${f%% failed*}
    passed=$((passed + p)); failed=$((failed + f))
    [ "$2" -ne 0 ] && [ "$f" -eq 0 ] && failed=$((failed + 1))
    echo "   $last"
}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}

if want ops; then
echo "== op test"
build/gpu/test_cuda_ops >build/gpu/test_cuda_ops.log 2>&1; rc=$?
grep -E '^FAIL|^error|hint' build/gpu/test_cuda_ops.log | head -40
tally build/gpu/test_cuda_ops.log $rc

echo "== attention at an offset (context parallelism): readable and tensor-core kernels against the CPU"
build/gpu/test_cuda_attention_at >build/gpu/test_cuda_attention_at.log 2>&1; rc=$?
grep -E '^FAIL|^error|hint' build/gpu/test_cuda_attention_at.log | head -40
tally build/gpu/test_cuda_attention_at.log $rc

echo "== FP8 op test: precision=fp8's casts and products against the CPU's exact emulation"
build/gpu/test_cuda_fp8 >build/gpu/test_cuda_fp8.log 2>&1; rc=$?
grep -E '^FAIL|^error|hint' build/gpu/test_cuda_fp8.log | head -40
tally build/gpu/test_cuda_fp8.log $rc

echo "== 8-bit AdamW: CUDA vs CPU, identical codes; issue 52's rare-token case on the GPU (drift bound, no v = 0 under a live m)"
build/gpu/test_adamw8bit_cuda >build/gpu/test_adamw8bit_cuda.log 2>&1; rc=$?
grep -E '^FAIL|^error|hint|timing|^drift case|^rare tokens' build/gpu/test_adamw8bit_cuda.log | head -20
tally build/gpu/test_adamw8bit_cuda.log $rc

echo "== op test, TF32 matmuls (LLM3D_TF32=1)"
LLM3D_TF32=1 build/gpu/test_cuda_ops >build/gpu/test_cuda_ops_tf32.log 2>&1; rc=$?
grep -E '^FAIL|^error|hint' build/gpu/test_cuda_ops_tf32.log | head -20
tally build/gpu/test_cuda_ops_tf32.log $rc

if command -v compute-sanitizer >/dev/null; then
    echo "== op test under compute-sanitizer memcheck"
    compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 build/gpu/test_cuda_ops \
        >build/gpu/test_cuda_ops_memcheck.log 2>&1; rc=$?
    grep -E '^FAIL|^error|=========' build/gpu/test_cuda_ops_memcheck.log | head -30
    tally build/gpu/test_cuda_ops_memcheck.log $rc
else
    echo "== compute-sanitizer not found: memcheck skipped"
fi
fi

if want model; then
echo "== model test (fixture fp32/bf16/fp16, KV cache, recompute, 20-step curves vs CPU, fp16 overflow)"
build/gpu/test_cuda_model >build/gpu/test_cuda_model.log 2>&1; rc=$?
grep -E '^FAIL|^error|hint|^fixture|^recompute|^loss curve|^fp16' build/gpu/test_cuda_model.log | head -40
tally build/gpu/test_cuda_model.log $rc

if command -v compute-sanitizer >/dev/null; then
    echo "== model test (fixture part) under compute-sanitizer memcheck"
    LLM3D_TEST_QUICK=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 build/gpu/test_cuda_model \
        >build/gpu/test_cuda_model_memcheck.log 2>&1; rc=$?
    grep -E '^FAIL|^error|=========' build/gpu/test_cuda_model_memcheck.log | head -30
    tally build/gpu/test_cuda_model_memcheck.log $rc
fi

echo "== the portable attention forced on this GPU (LLM3D_ATTENTION=mma): model test, said once at start-up"
LLM3D_ATTENTION=mma LLM3D_TEST_QUICK=1 build/gpu/test_cuda_model >build/gpu/test_cuda_model_mma.log 2>&1; rc=$?
grep -E '^FAIL|^error|hint|llm3d: attention' build/gpu/test_cuda_model_mma.log | head -10
tally build/gpu/test_cuda_model_mma.log $rc
said=$(grep -c 'llm3d: attention: .*the portable mma.sync kernels run' build/gpu/test_cuda_model_mma.log)
if [ "$said" -eq 1 ]; then passed=$((passed + 1)); else echo "FAIL: the portable path was announced $said times, not once"; failed=$((failed + 1)); fi
echo "== a misspelt LLM3D_ATTENTION is refused with one message"
LLM3D_ATTENTION=wgma build/gpu/test_cuda_ops >build/gpu/attention_env.log 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q 'LLM3D_ATTENTION=wgma is not an attention path' build/gpu/attention_env.log; then passed=$((passed + 1))
else echo "FAIL: LLM3D_ATTENTION=wgma gave rc $rc:"; tail -3 build/gpu/attention_env.log; failed=$((failed + 1)); fi

echo "== precision=fp8 forced off (LLM3D_FP8=off, as on a GPU without FP8 tensor cores) is refused at start-up, naming the GPU; the plan within 1% in fp8"
LLM3D_FP8=off build/bench/bench_train --preset=l124m --device=cuda --precision=fp8 --steps=1 >build/gpu/fp8_off.log 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q 'precision=fp8 needs' build/gpu/fp8_off.log && grep -q 'LLM3D_FP8=off' build/gpu/fp8_off.log \
        && grep -q "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" build/gpu/fp8_off.log; then passed=$((passed + 1))
else echo "FAIL: precision=fp8 with LLM3D_FP8=off gave rc $rc:"; tail -3 build/gpu/fp8_off.log; failed=$((failed + 1)); fi
build/bench/bench_train --preset=l124m --device=cuda --precision=fp8 --steps=3 >build/gpu/fp8_plan.log 2>&1
off=$(grep '^{' build/gpu/fp8_plan.log | tail -1 | awk '{ match($0, /"peak_allocated_bytes": [0-9]+/); p = substr($0, RSTART + 24, RLENGTH - 24);
    match($0, /"predicted_bytes": [0-9]+/); q = substr($0, RSTART + 19, RLENGTH - 19); if (p > 0) printf "%.4f", (q - p) / p * 100 }')
if [ -n "$off" ] && awk -v o="$off" 'BEGIN { exit !(o < 1 && o > -1) }'; then echo "   fp8 l124m: plan $off% from the peak"; passed=$((passed + 1))
else echo "FAIL: fp8 l124m: plan ${off:-?}% from the peak (build/gpu/fp8_plan.log)"; tail -3 build/gpu/fp8_plan.log; failed=$((failed + 1)); fi
fi

if want long; then
echo "== long sequences: the memory plan within 1% of the peak at T = 8192 and 32768; a batch that cannot fit refused, naming settings that would"
for tb in "8192 2" "32768 1"; do
    set -- $tb
    build/bench/bench_train --preset=l124m --device=cuda --precision=bf16 --steps=3 --seq_len="$1" --batch_size="$2" >build/gpu/long_T$1.log 2>&1
    off=$(grep '^{' build/gpu/long_T$1.log | tail -1 | awk '{ match($0, /"peak_allocated_bytes": [0-9]+/); p = substr($0, RSTART + 24, RLENGTH - 24);
        match($0, /"predicted_bytes": [0-9]+/); q = substr($0, RSTART + 19, RLENGTH - 19); if (p > 0) printf "%.4f", (q - p) / p * 100 }')
    if [ -n "$off" ] && awk -v o="$off" 'BEGIN { exit !(o < 1 && o > -1) }'; then echo "   T=$1 B=$2: plan $off% from the peak"; passed=$((passed + 1))
    else echo "FAIL: T=$1 B=$2: plan ${off:-?}% from the peak (build/gpu/long_T$1.log)"; tail -3 build/gpu/long_T$1.log; failed=$((failed + 1)); fi
done
build/bench/bench_train --preset=l124m --device=cuda --precision=bf16 --steps=1 --seq_len=131072 --batch_size=16 >build/gpu/long_refused.log 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q 'this run needs about .* of GPU memory and .* is free' build/gpu/long_refused.log \
        && grep -q -- '--batch_size=' build/gpu/long_refused.log; then passed=$((passed + 1))
else echo "FAIL: T=131072 B=16 (far more than the GPU holds) gave rc $rc:"; tail -5 build/gpu/long_refused.log; failed=$((failed + 1)); fi

echo "== context parallelism's memory per rank on one GPU: l124m at T = 32k and 64k, cp = 1, 2, 4 (tests/gpu/cp_memory.sh)"
OUT=build/gpu tests/gpu/cp_memory.sh >build/gpu/cp_memory.log 2>&1; rc=$?
grep -E '^  FAIL|^ +[0-9]+ +[124] ' build/gpu/cp_memory.log | head -20
tally build/gpu/cp_memory.log $rc
fi

if want nccl; then
echo "== NCCL on one GPU, every rank a test host (LLM3D_NCCL_HOSTS_ON_ONE_GPU=1): layouts, faults, doctor, the split"
OUT=build/gpu tests/gpu/nccl.sh >build/gpu/nccl.log 2>&1; rc=$?
grep -E '^  FAIL|^FAIL|^   nccl_' build/gpu/nccl.log | head -40
tally build/gpu/nccl.log $rc
fi

if [ $bench = 1 ]; then
    echo "== l124m op timings (bf16)"
    build/gpu/bench_cuda_ops bf16 2>&1 | tee build/gpu/bench_cuda_ops.log
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
