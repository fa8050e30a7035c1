#!/usr/bin/env bash
# tests/test_docs.sh — the documentation stays true to the tree:
#   - every relative link and picture in README.md and docs/*.md points at a
#     file that exists (a moved or renamed file breaks this test, not a reader);
#   - the schedule pictures in docs/ are what `build/train schedule --svg` draws
#     today from the command written beside each (regenerate: the same command
#     with --svg=docs/NAME.svg);
#   - no picture's text runs past its edge (7 px a character of the 12 px font);
#   - docs/reading-order.md's line counts are within 25% of the files;
#   - docs/tensor-parallel.md's and docs/context-parallel.md's memory tables are today's plan;
#   - the data-parallel picture draws one bar per gradient bucket, in the lane
#     under the stage (the buckets the text schedule lists).
source "$(dirname "$0")/tally.sh"
dir=$(mktemp -d /tmp/llm3d_test_docs.XXXXXX)
trap 'rm -rf "$dir"' EXIT

# links: [text](target) and ![alt](target), minus URLs and in-page anchors; a target is relative to its page
broken=0; links=0
for page in README.md docs/*.md; do
    base=$(dirname "$page")
    while IFS= read -r target; do
        target=${target%%#*}; target=${target%% *}
        [ -z "$target" ] && continue
        case "$target" in http://*|https://*|mailto:*) continue;; esac
        links=$((links + 1))
        if [ ! -e "$base/$target" ]; then broken=$((broken + 1)); echo "  broken link in $page: $target"; fi
    done < <(grep -o '\](\([^)]*\))' "$page" | sed 's/^](\(.*\))$/\1/')
done
check '[ "$links" -ge 10 ] && [ "$broken" -eq 0 ]' "every relative link of README.md and docs/*.md resolves ($links links, $broken broken)"

# the pictures, drawn again (each page names the command beside its picture): name, then the schedule's keys
pictures=(
    "pipeline-1f1b --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=1f1b"
    "pipeline-gpipe --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=gpipe"
    "pipeline-interleaved --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=interleaved"
    "pipeline-zb1 --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=zb1"
    "pipeline-zbv --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=zbv"
    "data-parallel-buckets --dp=2 --micro_batches=2 --bucket_mb=0.05 --n_layers=4"
    "data-parallel-pipeline --pp=2 --dp=2 --micro_batches=4 --n_layers=4 --bucket_mb=0.05"
    "zero-step --dp=2 --zero=3 --n_layers=4 --micro_batches=2 --actions"
)
# Whether every left-anchored text of an SVG fits inside its width, counting 7 px a character (the 12 px
# sans-serif's widest letters; the drawer sizes its legend by the same rule): prints the first that does not.
text_cut() {
    awk -v FS="'" '/<svg / { for (i = 1; i < NF; i++) if ($i ~ /width=$/) { w = $(i + 1); break } }
        /<text / && !/text-anchor/ { x = 0; for (i = 1; i < NF; i++) if ($i ~ / x=$/) x = $(i + 1)
            t = $0; sub(/^.*<text[^>]*>/, "", t); sub(/<\/text>.*$/, "", t); gsub(/&[a-z]+;/, "_", t)
            if (x + 7 * length(t) > w + 0) { print "cut at the edge (" w " px): " t; exit } }' "$1"
}
for p in "${pictures[@]}"; do
    set -- $p; name=$1; shift
    "$BUILD"/train schedule "$@" --svg="$dir/$name.svg" > "$dir/$name.txt" 2>&1; rc=$?
    check '[ $rc -eq 0 ] && cmp -s "$dir/$name.svg" "docs/$name.svg" && grep -q "docs/$name.svg\|($name.svg)" docs/*.md' \
          "docs/$name.svg is what 'build/train schedule $* --svg=docs/$name.svg' draws today, and a page shows it (exit $rc)"
done
# every picture in docs/, those drawn by hand (tensor-parallel-block.svg) too, is legible: nothing cut at its edge
for svg in docs/*.svg; do
    cut=$(text_cut "$svg")
    check '[ -z "$cut" ] && grep -q "<text" "$svg"' "$svg: no text runs past the picture's edge${cut:+ ($cut)}"
done
# docs/reading-order.md's line counts stay within 25% of the files they describe
stale=""; counted=0
while IFS='|' read -r _ files lines _; do
    files=$(echo "$files" | xargs); lines=$(echo "$lines" | xargs)
    [[ "$lines" =~ ^[0-9] ]] || continue
    first=${files%%,*}; folder=$(dirname "$first"); IFS=',' read -ra names <<< "$files"; IFS=',' read -ra counts <<< "$lines"
    for i in "${!names[@]}"; do
        f=$(echo "${names[$i]}" | xargs); [[ "$f" == */* ]] || f="$folder/$f"; want=$(echo "${counts[$i]}" | xargs)
        have=$(wc -l < "$f" 2>/dev/null || echo 0); counted=$((counted + 1))
        [ "$have" -gt 0 ] && [ $((have * 4)) -le $((want * 5)) ] && [ $((have * 4)) -ge $((want * 3)) ] || stale="$stale $f ($want listed, $have now)"
    done
done < <(grep '^| [a-z]*/' docs/reading-order.md)
check '[ "$counted" -ge 20 ] && [ -z "$stale" ]' "docs/reading-order.md's $counted line counts are within 25% of the files${stale:+; stale:$stale}"
# docs/tensor-parallel.md's memory table is what `build/train memory` plans today, row by row
rows=0; off=""
while IFS='|' read -r _ _ keys _ act total _; do
    keys=$(echo "$keys" | tr -d '`' | sed 's/(none)//' | xargs); act=$(echo "$act" | xargs); total=$(echo "$total" | xargs)
    plan=$("$BUILD"/train memory --preset=l350m --device=cuda --precision=bf16 $keys 2>&1 | grep -m1 '^memory | predicted')
    rows=$((rows + 1))
    [[ "$plan" == *"activations $act |"* && "$plan" == *"total $total" ]] || off="$off [${keys:-tp=1}: the plan says ${plan#*predicted: }]"
done < <(sed -n '/^## Memory, l350m/,/^## /p' docs/tensor-parallel.md | grep '^| tp=')
check '[ "$rows" -eq 6 ] && [ -z "$off" ]' "docs/tensor-parallel.md's $rows memory rows are today's plan${off:+:$off}"
# docs/context-parallel.md's memory table too (l124m, one sequence of 32k tokens)
rows=0; off=""
while IFS='|' read -r _ _ keys act total _; do
    keys=$(echo "$keys" | tr -d '`' | sed 's/(none)//' | xargs); act=$(echo "$act" | xargs); total=$(echo "$total" | xargs)
    plan=$("$BUILD"/train memory --preset=l124m --device=cuda --precision=bf16 --batch_size=1 --seq_len=32768 $keys 2>&1 | grep -m1 '^memory | predicted')
    rows=$((rows + 1))
    [[ "$plan" == *"activations $act |"* && "$plan" == *"total $total" ]] || off="$off [${keys:-cp=1}: the plan says ${plan#*predicted: }]"
done < <(sed -n '/^## Memory, l124m/,/^## /p' docs/context-parallel.md | grep '^| cp=')
check '[ "$rows" -eq 3 ] && [ -z "$off" ]' "docs/context-parallel.md's $rows memory rows are today's plan${off:+:$off}"
buckets=$(grep -o "(bucket [0-9]*)" "$dir/data-parallel-buckets.txt" | wc -l)
bars=$(grep -c "<title>bucket [0-9]* all-reduce</title>" docs/data-parallel-buckets.svg)
check '[ "$buckets" -ge 2 ] && [ "$bars" -eq "$buckets" ] && grep -q ">dp sums<" docs/data-parallel-buckets.svg' \
      "the data-parallel picture has a bar for each of the $buckets buckets the schedule reduces ($bars bars)"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
