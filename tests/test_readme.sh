#!/usr/bin/env bash
# tests/test_readme.sh — the README's commands and the docs' that run on a CPU,
# as written, so that they cannot drift from the program: every line of every
# ```sh block of README.md, then of each page in DOC_PAGES below, in order, in
# a scratch folder that holds what a fresh clone holds (build/, configs/,
# node_modules/ for the corpus) and a my_texts/ folder of text, where
# runs/, data/ and hf/ are made by the commands themselves.
#   - a line of several commands joined by && runs as its parts;
#   - a training command (build/train --key=..., under mpirun or not) runs with
#     --max_steps=2 --eval_tokens=4096 added (unless it names its own max_steps of
#     at most 20: a profile needs its steps), the doctor with --sweep=0 (its sweep
#     is tests/test_doctor.sh's); an `export` line holds for the block's later lines;
#   - skipped, saying so: scripts/setup.sh (its --check runs instead), make
#     (the build and this runner itself; make bench times for minutes), and
#     anything that trains or opens a device with --device=cuda (no GPU here;
#     `memory` and `plan` plan for one without it, so they run, unless `plan`
#     reads a --profile, which only a GPU run writes).
# Each must exit 0 with no "error:" line; and the 4-rank line that the README
# says trains the one-rank model gives the one-rank run's losses.
# About 40 s on 2 quiet cores. Not in the sanitizer pass (time: the commands'
# code runs there through the other tests).
source "$(dirname "$0")/tally.sh"
if [ -n "${LLM3D_SANITIZER_PASS:-}" ]; then
    echo "skipped in the sanitizer pass: the README's commands take a minute of the 8 make test has; the other tests run their code there"
    echo "0 passed, 0 failed"; exit 0
fi
root=$PWD
dir=$(mktemp -d /tmp/llm3d_test_readme.XXXXXX)
trap '[ -z "${KEEP:-}" ] && rm -rf "$dir"' EXIT
ln -s "$root/$BUILD" "$dir/build"
ln -s "$root/configs" "$dir/configs"
ln -s "$root/node_modules" "$dir/node_modules"
mkdir "$dir/my_texts"
cp tests/data/sotu_sample.txt "$dir/my_texts/"

scripts/setup.sh --check > "$dir/setup.log" 2>&1; rc=$?
check '[ $rc -eq 0 ]' "scripts/setup.sh --check (the first command's setup) finds everything: $(cat "$dir/setup.log")"

# the pages whose blocks run after the README's, in the README's folder (their commands read what its made)
DOC_PAGES=(docs/speedup.md docs/tensor-parallel.md docs/nccl-errors.md docs/context-parallel.md)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1   # the pages' mpirun lines, as root on 2 cores
# every line of the ```sh blocks, comments dropped; "@end" ends a block (and its export lines' hold); "@page P" starts page P
lines=$(for page in README.md "${DOC_PAGES[@]}"; do
            echo "@page $page"
            awk '/^```sh$/ {on = 1; next} /^```/ {if (on) print "@end"; on = 0; next} on' "$page" | sed 's/[[:space:]]*#.*$//'
        done)
for page in README.md "${DOC_PAGES[@]}"; do
    grep -q '^```sh$' "$page" || check false "found no \`\`\`sh block in $page"
done
page=README.md
n=0; ran=0; prefix=""; skipped=()
declare -A log_of   # command -> its log
while IFS= read -r line; do
    if [ "$line" = "@end" ]; then prefix=""; continue; fi
    if [[ "$line" == "@page "* ]]; then page=${line#@page }; continue; fi
    # a line's parts joined by &&, one by one
    rest="$line"
    while [ -n "$rest" ]; do
        part=${rest%% && *}
        [ "$part" = "$rest" ] && rest="" || rest=${rest#* && }
        part=$(echo "$part" | sed 's/^ *//; s/ *$//')
        [ -z "$part" ] && continue
        case "$part" in
            export\ *) prefix="$prefix$part; "; continue;;
            scripts/setup.sh*) skipped+=("$part: installs packages (scripts/setup.sh --check ran instead)"); continue;;
            make*) skipped+=("$part: the build and this test runner (make bench: timings, minutes)"); continue;;
        esac
        if [[ "$part" == *--device=cuda* && ( ( "$part" != *"build/train memory"* && "$part" != *"build/train plan"* ) || "$part" == *--profile=* ) ]]; then
            skipped+=("$page: $part: needs a GPU"); continue
        fi
        cmd="$part"
        own_steps=$(echo "$part" | sed -n 's/.*--max_steps=\([0-9]*\).*/\1/p')
        if [[ "$part" =~ build/train\ -- && "$part" != *--help* ]]; then
            if [ -n "$own_steps" ] && [ "$own_steps" -le 20 ]; then cmd="$part --eval_tokens=4096"; else cmd="$part --max_steps=2 --eval_tokens=4096"; fi
        elif [[ "$part" =~ build/train\ doctor ]]; then cmd="$part --sweep=0"; fi
        n=$((n + 1))
        log="$dir/cmd$n.log"
        t0=$(date +%s)
        (cd "$dir" && timeout 180 bash -c "$prefix$cmd") < /dev/null > "$log" 2>&1; rc=$?   # not the loop's stdin
        ran=$((ran + 1))
        check '[ $rc -eq 0 ] && ! grep -q "error:" "$log"' "$page: \`$part\` (ran as \`$cmd\`) exited $rc: $(grep -m3 -A2 "error:" "$log" || tail -5 "$log")"
        echo "ran  $(( $(date +%s) - t0 ))s  $cmd"
        log_of["$part"]=$log
    done
done <<< "$lines"
for s in "${skipped[@]}"; do echo "skipped  $s"; done
check '[ $ran -ge 15 ]' "the README's blocks gave $ran commands to run (want at least 15)"

# the README's promise: the 4-rank line trains the one-rank model (2 steps: the step-2 loss of each)
one=${log_of["build/train --preset=tiny"]:-}; four=""
for k in "${!log_of[@]}"; do [[ "$k" == *--dp=4*--nproc=4* ]] && four=${log_of[$k]}; done
loss() { sed -n 's/^step *2\/2 | loss \([0-9.]*\) .*/\1/p' "$1" 2>/dev/null; }
check '[ -n "$one" ] && [ -n "$four" ] && [ -n "$(loss "$one")" ] && [ "$(loss "$one")" = "$(loss "$four")" ]' \
      "the README's --dp=4 line gives the one-rank run's loss: $(loss "$one") (one rank), $(loss "$four") (dp=4)"
# the main job's sample opens from the preset's prompt, and the own-text run has its own run_dir
check 'grep -A1 "^---$" "$one" | grep -q "^The"' "the main job's sample starts with the tiny preset's prompt \"The\": $(grep -A1 -m1 "^---$" "$one" | tail -1 | cut -c1-60)"
check '[ -f "$dir/runs/mine/ckpt_00000002/DONE" ] && [ -f "$dir/runs/default/ckpt_00000002/DONE" ]' "the own-text run kept the main job's runs/default beside its runs/mine"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
