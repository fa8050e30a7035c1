#!/usr/bin/env bash
# tests/test_launch.sh — starting and stopping many ranks, as a user does:
#   - `--nproc=2` re-runs the command under mpirun and trains on 2 ranks with
#     the same losses as `mpirun -np 2` itself;
#   - SIGTERM to ONE rank of a running job: every rank finishes the step, the
#     job saves one checkpoint and every rank exits 0; --resume continues it;
#   - the test switch LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 (comm/launch.h; its GPU
#     runs are tests/gpu/nccl_*.sh): refused in words with device=cpu, with a
#     value other than 0/1, and in a build without NCCL; ranks that disagree on
#     it are caught by the config check, naming it: one line, every rank out.
source "$(dirname "$0")/ranks.sh"
"$BUILD"/train prepare --input=tests/data/sotu_sample.txt --out="$dir/data" --train-vocab=300 >/dev/null 2>&1
common="--train_data=$dir/data/train_*.bin --val_data= --dim=32 --n_layers=2 --n_heads=4 --n_kv_heads=2 --ffn_dim=64
        --seq_len=16 --batch_size=2 --total_batch_tokens=128 --warmup_steps=0 --log_every=1 --sample_tokens=0"

# --nproc=2 equals mpirun -np 2
timeout 120 "$BUILD"/train $common --dp=2 --max_steps=3 --run_dir="$dir/a" --nproc=2 > "$dir/a.log" 2>&1; rc=$?
check '[ $rc -eq 0 ]' "--nproc=2 exited $rc: $(tail -5 "$dir/a.log")"
check 'grep -q "^launch | mpirun.* -np 2 " "$dir/a.log"' "--nproc=2 says the mpirun line it runs"
timeout 120 mpirun -np 2 "$BUILD"/train $common --dp=2 --max_steps=3 --run_dir="$dir/b" > "$dir/b.log" 2>&1
check '[ "$(grep "^step" "$dir/a.log" | cut -d"|" -f2)" = "$(grep "^step" "$dir/b.log" | cut -d"|" -f2)" ] && [ -n "$(grep "^step" "$dir/b.log")" ]' \
      "--nproc=2 and mpirun -np 2 give the same losses"

# SIGTERM to rank 1 alone
timeout 300 mpirun -np 2 "$BUILD"/train $common --dp=2 --max_steps=100000 --run_dir="$dir/c" > "$dir/c.log" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "^step *5/" "$dir/c.log" 2>/dev/null && break; sleep 0.1; done
rank1=""
require pgrep procps
for p in $(pgrep -f "run_dir=$dir/c"); do
    grep -qz "^OMPI_COMM_WORLD_RANK=1$" /proc/$p/environ 2>/dev/null && rank1=$p
done
check '[ -n "$rank1" ]' "found rank 1's process"
if [ -n "$rank1" ]; then kill -TERM "$rank1"; else kill -TERM "$job"; fi   # not found: end the job now, not at its timeout
wait $job; rc=$?
check '[ $rc -eq 0 ]' "after SIGTERM to rank 1 the job exits 0 (got $rc): $(tail -5 "$dir/c.log")"
stopped=$(sed -n 's/^stop  | SIGTERM after step \([0-9]*\)$/\1/p' "$dir/c.log")
check '[ -n "$stopped" ] && [ -f "$dir/c/ckpt_$(printf %08d "$stopped")/DONE" ]' "a complete checkpoint at the step the job stopped ($stopped)"
check '[ "$(grep -c "^stop  | .* after step" "$dir/c.log")" -eq 1 ]' "the stop is announced once"
timeout 120 mpirun -np 2 "$BUILD"/train $common --dp=2 --max_steps=$((stopped + 2)) --run_dir="$dir/c" --resume=1 > "$dir/d.log" 2>&1; rc=$?
check '[ $rc -eq 0 ] && grep -q "^resume | step $stopped from" "$dir/d.log" && grep -q "^step *$((stopped + 2))/" "$dir/d.log"' \
      "the stopped job resumes and continues: $(tail -3 "$dir/d.log")"

# LLM3D_NCCL_HOSTS_ON_ONE_GPU: the refusals a CPU machine can see (each: exit 1, not a timeout, said once)
refused() {   # $1: what; $2: the words; then the command
    local what=$1 words=$2; shift 2
    timeout 60 "$@" > "$dir/sw.log" 2>&1; rc=$?
    check '[ $rc -eq 1 ] && [ "$(grep -c -- "$words" "$dir/sw.log")" -eq 1 ]' "$what: want exit 1 and '$words' once, got $rc: $(head -3 "$dir/sw.log")"
}
sw=(env LLM3D_NCCL_HOSTS_ON_ONE_GPU=1)
refused "the switch with device=cpu, 2 ranks" "LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 puts every rank on GPU 0 .*, but device=cpu" \
    "${sw[@]}" mpirun -np 2 "$BUILD"/train $common --dp=2 --max_steps=1 --run_dir="$dir/sw"
refused "the switch with device=cpu, one rank" "but device=cpu" "${sw[@]}" "$BUILD"/train $common --max_steps=1 --run_dir="$dir/sw"
refused "the switch set to 'yes'" "LLM3D_NCCL_HOSTS_ON_ONE_GPU=yes: use 1 .* or 0" \
    env LLM3D_NCCL_HOSTS_ON_ONE_GPU=yes "$BUILD"/train $common --max_steps=1 --run_dir="$dir/sw"
if ! ldd "$BUILD"/train | grep -q libnccl; then
    refused "the switch in a build without NCCL" "but this build of llm3d has no NCCL" \
        "${sw[@]}" mpirun -np 2 "$BUILD"/train $common --dp=2 --device=cuda --max_steps=1 --run_dir="$dir/sw"
fi
# rank 0 with the switch, rank 1 without (one command line per rank): the config check names it
refused "ranks that disagree on the switch" "different config than rank 0: LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 on rank 0, LLM3D_NCCL_HOSTS_ON_ONE_GPU=0 on rank 1" \
    mpirun -np 1 "${sw[@]}" "$BUILD"/train $common --dp=2 --max_steps=1 --run_dir="$dir/sw" : -np 1 "$BUILD"/train $common --dp=2 --max_steps=1 --run_dir="$dir/sw"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
