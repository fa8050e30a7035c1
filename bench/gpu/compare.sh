#!/usr/bin/env bash
# bench/gpu/compare.sh — llm3d against the PyTorch peer on one GPU, side by side
# in one run: the same presets, the same batch, the same FLOP count for MFU.
#
#   bench/gpu/compare.sh PEER_DIR [MODES] [PRESETS]
#
# PEER_DIR holds torch_llama.py and roofline.py (copies of shared/peers/).
# MODES (default "bf16 recompute") picks llm3d rows: bf16, fp32, recompute
# (selective and full, bf16), 8bit (optimizer=adamw8bit, bf16), fp8 (precision=fp8,
# beside the peer's bf16-fp8-compile); and sweep: the
# sequence-length sweep, l124m bf16 at T = $SWEEP_T (default 1024 2048 4096
# 8192 16384 32768) with about 16k tokens a step (B = 16384 / T, at least 1),
# the peer's bf16-compile then llm3d at each T in turn. Only the sweep when
# MODES is "sweep".
# Binaries come from $BUILD (default build): make && make gpu first.
# Writes every JSON line to $LOG (default build/gpu/compare.jsonl) and prints a table.
set -u
cd "$(dirname "$0")/../.."
peer=$1; modes=${2:-"bf16 recompute"}; presets=${3:-"l124m l350m"}
BUILD=${BUILD:-build}; LOG=${LOG:-build/gpu/compare.jsonl}
mkdir -p "$(dirname "$LOG")"; : >"$LOG"
echo "date $(date -u +%F) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"

peer_modes="bf16-compile"
case " $modes " in *" recompute "*) peer_modes="$peer_modes,bf16-compile-ckpt";; esac
case " $modes " in *" fp32 "*) peer_modes="$peer_modes,fp32";; esac
case " $modes " in *" fp8 "*) peer_modes="$peer_modes,bf16-fp8-compile";; esac
[ "$modes" = sweep ] && presets=""
for p in $presets; do
    PYTHONUNBUFFERED=1 python3 "$peer/torch_llama.py" --cfg "$p" --modes "$peer_modes" 2>/dev/null | tee -a "$LOG"
done

run() {   # llm3d row: preset, then --key=value settings
    local p=$1; shift
    "$BUILD"/bench/bench_train --preset="$p" --device=cuda --steps=20 "$@" 2>&1 | grep -E '^\{|^error|hint' | tee -a "$LOG"
}
for p in $presets; do
    case " $modes " in *" bf16 "*) run "$p" --precision=bf16;; esac
    case " $modes " in *" recompute "*) run "$p" --precision=bf16 --recompute=selective; run "$p" --precision=bf16 --recompute=full;; esac
    case " $modes " in *" 8bit "*) run "$p" --precision=bf16 --optimizer=adamw8bit;; esac
    case " $modes " in *" fp8 "*) run "$p" --precision=fp8;; esac
    case " $modes " in *" fp32 "*) run "$p" --precision=fp32;; esac
done
case " $modes " in *" sweep "*)
    for T in ${SWEEP_T:-1024 2048 4096 8192 16384 32768}; do
        B=$(( T >= 16384 ? 1 : 16384 / T ))
        echo "-- sweep: l124m T=$T B=$B"
        PYTHONUNBUFFERED=1 python3 "$peer/torch_llama.py" --cfg l124m --modes bf16-compile --T "$T" --B "$B" 2>/dev/null |
            sed "s/^{/{\"sweep_T\": $T, /" | tee -a "$LOG"
        run l124m --precision=bf16 --seq_len="$T" --batch_size="$B"
    done;;
esac
[ -z "${NO_ROOFLINE:-}" ] && [ "$modes" != sweep ] && [ -f "$peer/roofline.py" ] && python3 "$peer/roofline.py" 2>/dev/null | tee -a "$LOG"
