# bench/gpu/call_start.sh — sourced by a device call's script (owed_call*.sh): $OUT (the folder that comes back),
# log (a line to the screen and $OUT/summary.log), the first line (date, commit, GPU) and the build, with warnings
# not errors (CFLAGS, and NVCCFLAGS for nvcc's host compiler: a warning only the device's gcc 13 gives must not
# cost the call); a failed build logs its errors and ends the call.
# shellcheck shell=bash
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export CFLAGS="-O3 -Wno-error" NVCCFLAGS="-O3 -Xcompiler -Wno-error"
log() { echo "$@" | tee -a "$OUT/summary.log"; }
log "$(date -u) $(git log -1 --format=%h) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
make -j16 all gpu >/tmp/b.log 2>&1 || { grep -E " error" /tmp/b.log | head | tee -a "$OUT/summary.log"; exit 1; }
log "built ${SECONDS}s"
