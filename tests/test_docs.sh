#!/usr/bin/env bash
# tests/test_docs.sh — the documentation stays true to the tree:
#   - every relative link and picture in README.md and docs/*.md points at a
#     file that exists (a moved or renamed file breaks this test, not a reader);
#   - the schedule pictures in docs/ are what `build/train schedule --svg` draws
#     today from the command written beside each (regenerate: the same command
#     with --svg=docs/NAME.svg);
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

# the pictures, drawn again: name, then the schedule's keys
pictures=(
    "pipeline-1f1b --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=1f1b"
    "pipeline-gpipe --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=gpipe"
    "pipeline-interleaved --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=interleaved"
    "pipeline-zb1 --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=zb1"
    "data-parallel-buckets --dp=2 --micro_batches=2 --bucket_mb=0.05 --n_layers=4"
    "data-parallel-pipeline --pp=2 --dp=2 --micro_batches=4 --n_layers=4 --bucket_mb=0.05"
)
for p in "${pictures[@]}"; do
    set -- $p; name=$1; shift
    "$BUILD"/train schedule "$@" --svg="$dir/$name.svg" > "$dir/$name.txt" 2>&1; rc=$?
    check '[ $rc -eq 0 ] && cmp -s "$dir/$name.svg" "docs/$name.svg" && grep -q "docs/$name.svg\|($name.svg)" docs/*.md' \
          "docs/$name.svg is what 'build/train schedule $* --svg=docs/$name.svg' draws today, and a page shows it (exit $rc)"
done
buckets=$(grep -o "(bucket [0-9]*)" "$dir/data-parallel-buckets.txt" | wc -l)
bars=$(grep -c "<title>bucket [0-9]* all-reduce</title>" docs/data-parallel-buckets.svg)
check '[ "$buckets" -ge 2 ] && [ "$bars" -eq "$buckets" ] && grep -q ">dp sums<" docs/data-parallel-buckets.svg' \
      "the data-parallel picture has a bar for each of the $buckets buckets the schedule reduces ($bars bars)"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
