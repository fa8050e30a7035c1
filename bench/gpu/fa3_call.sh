#!/usr/bin/env bash
# bench/gpu/fa3_call.sh — one device call for the fa3 attention forward (issue 55),
# in the order of what matters, each later step only while the call's time allows
# ($FA3_BUDGET seconds, default 540): build; a 20-second smoke test; the op test's
# fa3 checks (OPS_FA3_ONLY=1; `full` runs the whole op test instead); the fa3
# forward alone beside the other paths (bench_attention) and PyTorch's SDPA at the
# same shapes (sdpa_time.py), head dims 64 and 128; compute-sanitizer
# memcheck on the fa3 kernel; then the l124m sweep, T by T, the peer (.peer/), the
# default attention and LLM3D_ATTENTION=fa3 at each. Logs under $OUT (at most 8
# files come back).
#   bench/gpu/fa3_call.sh [full] [nosweep] [nosdpa]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/gpu/out}; mkdir -p "$OUT"
budget=${FA3_BUDGET:-540}
Ts=${FA3_T:-"1024 2048 4096 8192 16384 32768"}
left() { [ $((budget - SECONDS)) -gt "$1" ]; }   # more than $1 seconds of the call left
{ date -u; git log -1 --format='commit %h %s' 2>/dev/null; git status --short 2>/dev/null | head -20
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } | tee "$OUT/info.log"
make -j16 gpu >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }   # the test and bench programs first
echo "built at ${SECONDS}s"
timeout 20 build/gpu/bench_attention 128 1024; rc=$?   # a hang costs 20 s, not the call
if [ $rc != 0 ]; then
    echo "fa3 smoke rc=$rc; without ping-pong:"; FA3_PINGPONG=0 timeout 20 build/gpu/bench_attention 128 1024; echo "rc=$?"
    FA3_PINGPONG=0 timeout 20 build/gpu/bench_attention 64 1024; echo "rc=$?"; exit 1
fi
case " $* " in *" full "*) only=0;; *) only=1;; esac
OPS_FA3_ONLY=$only timeout $((only ? 100 : 400)) build/gpu/test_cuda_ops >"$OUT/ops.log" 2>&1; echo "test_cuda_ops rc=$?" >>"$OUT/ops.log"
grep -E "FAIL|passed|rc=" "$OUT/ops.log" | tail -30
echo "fa3 ok lines: $(grep -c '^ok.*fa3' "$OUT/ops.log"); op test done at ${SECONDS}s"
if left 400; then   # the whole model in bf16 beside the fp32 CPU: the default attention, then fa3 forward and backward
    for a in "" fa3; do echo "== LLM3D_ATTENTION=${a:-unset}" >>"$OUT/model.log"
        LLM3D_ATTENTION=$a timeout 150 build/gpu/test_cuda_model >/tmp/model.log 2>&1; rc=$?; cat /tmp/model.log >>"$OUT/model.log"
        echo "test_cuda_model LLM3D_ATTENTION=${a:-unset} rc=$rc $(grep -E '^[0-9]+ passed' /tmp/model.log)"
        grep -E '^FAIL' /tmp/model.log | head -5; done
fi
{ for hd in 64 128; do timeout 100 build/gpu/bench_attention "$hd" $Ts; echo "bench_attention $hd rc=$?"; done
  case " $* " in *" nosdpa "*) ;; *) for hd in 64 128; do PYTHONUNBUFFERED=1 timeout 100 python3 bench/gpu/sdpa_time.py --hd "$hd" $Ts; echo "sdpa $hd rc=$?"; done;; esac
} 2>&1 | tee "$OUT/bench.log"
echo "benched at ${SECONDS}s"
if left 200; then
    { for hd in 128 64; do timeout 60 compute-sanitizer --tool memcheck build/gpu/bench_attention "$hd" 700 2>&1 | tail -4; done
      for hd in 128 64; do timeout 60 compute-sanitizer --tool racecheck build/gpu/bench_attention "$hd" 300 2>&1 | tail -4; done; } |
        tee "$OUT/sanitizer.log"
fi
case " $* " in *" nosweep "*) exit 0;; esac
left 150 && { make -j16 >>"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }; }   # bench_train for the sweep
for T in 8192 32768 4096 16384 2048; do   # per T: the peer (bf16-compile), llm3d's wgmma kernels, the default, then fa3
    left 100 || { echo "-- sweep: no time left for T=$T (${SECONDS}s)"; continue; }
    B=$(( T >= 16384 ? 1 : 16384 / T ))
    echo "-- sweep: l124m T=$T B=$B at ${SECONDS}s"
    PYTHONUNBUFFERED=1 timeout 90 python3 .peer/torch_llama.py --cfg l124m --modes bf16-compile --T "$T" --B "$B" 2>/dev/null |
        sed "s/^{/{\"sweep_T\": $T, /"
    for a in wgmma "" fa3; do
        LLM3D_ATTENTION=$a timeout 60 build/bench/bench_train --preset=l124m --device=cuda --steps=20 --precision=bf16 \
            --seq_len="$T" --batch_size="$B" 2>&1 | grep -E '^\{|^error|hint' | sed "s/^{/{\"attention\": \"${a:-default}\", /"
    done
done 2>&1 | tee "$OUT/sweep.log"
echo "done at ${SECONDS}s"
