#!/usr/bin/env bash
# tests/test_layers.sh — the library reads bottom up: each folder includes only
# the folders below it. It reads every #include "..." of the library folders
# (.c .h .cu .cuh), resolves it against the including file's folder, prints the
# folder graph it found, and fails on any arrow up or sideways out of order:
#
#     common < kernels < comm < model < parallel < data, checkpoint < train
#
# data and checkpoint stand on one floor: an arrow between them is allowed one
# way only (no circle). doctor/ is a program of its own: it may include common/,
# kernels/ and comm/, and only train/ (its command line) includes it.
# A first check feeds the same reader a made-up tree with one arrow up, so a
# reader that finds nothing cannot pass.
source "$(dirname "$0")/tally.sh"
FOLDERS="common kernels comm model parallel data checkpoint train doctor"
declare -A FLOOR=([common]=0 [kernels]=1 [comm]=2 [model]=3 [parallel]=4 [data]=5 [checkpoint]=5 [train]=6 [doctor]=5)

T=$(mktemp -d /tmp/llm3d_layers.XXXXXX); trap 'rm -rf "$T"' EXIT

# arrows ROOT: one line "from-folder to-folder file include" per quoted include that leaves its folder
arrows() {
    local root=$1
    (cd "$root" && for d in $FOLDERS; do [ -d "$d" ] && find "$d" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \); done | sort |
        xargs -r grep -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' |
        sed 's/^\([^:]*\):[^"]*"\([^"]*\)".*/\1 \2/') > "$T/includes"
    # every include resolved against its file's folder, in one call
    awk '{ f = $1; sub("/[^/]*$", "", f); print f "/" $2 }' "$T/includes" | (cd "$root" && xargs -r realpath -m --relative-to=.) > "$T/resolved"
    paste -d' ' "$T/includes" "$T/resolved" | while read -r file inc to; do
        local from=${file%%/*}
        if [ ! -e "$root/$to" ]; then echo "$from ? $file $inc"; continue; fi
        to=${to%%/*}
        [ "$to" != "$from" ] && echo "$from $to $file $inc"
    done
}

# bad ARROWS-FILE: print each arrow that breaks the order, with the file and include that make it
bad() {
    local from to file inc
    while read -r from to file inc; do
        if [ "$to" = "?" ]; then echo "  $file: #include \"$inc\" names no file"; continue; fi
        if [ -z "${FLOOR[$to]:-}" ]; then echo "  $file: #include \"$inc\" reaches $to/, outside the library folders"; continue; fi
        local ok=0
        case "$from:$to" in
            doctor:common|doctor:kernels|doctor:comm) ok=1;;
            doctor:*) ok=0;;
            *:doctor) [ "$from" = train ] && ok=1;;
            *) if [ "${FLOOR[$to]}" -lt "${FLOOR[$from]}" ]; then ok=1
               elif [ "${FLOOR[$to]}" -eq "${FLOOR[$from]}" ] && ! grep -q "^$to $from " "$1"; then ok=1; fi;;
        esac
        [ $ok -eq 1 ] || echo "  $file: #include \"$inc\" — $from/ may not include $to/"
    done < "$1"
}

# the reader on a made-up tree: model/ including parallel/ is caught, model/ including comm/ is not
mkdir -p "$T/tree/model" "$T/tree/parallel" "$T/tree/comm"
echo '#include "../parallel/ddp.h"' > "$T/tree/model/llama.c"; echo '#include "../comm/comm.h"' >> "$T/tree/model/llama.c"
touch "$T/tree/parallel/ddp.h" "$T/tree/comm/comm.h"
arrows "$T/tree" > "$T/fake"; bad "$T/fake" > "$T/fake.bad"
check '[ "$(wc -l < "$T/fake")" -eq 2 ] && [ "$(wc -l < "$T/fake.bad")" -eq 1 ] && grep -q "model/ may not include parallel/" "$T/fake.bad"' \
      "the checker, on a made-up tree with one arrow up, finds 2 arrows and flags that one: $(cat "$T/fake" "$T/fake.bad")"

arrows . > "$T/arrows"
echo "the folder graph (from -> to: includes):"
for from in $FOLDERS; do
    line=$(awk -v f="$from" '$1 == f { n[$2]++ } END { for (t in n) printf "%s(%d) ", t, n[t] }' "$T/arrows" | tr ' ' '\n' | sort | tr '\n' ' ')
    printf '  %-10s -> %s\n' "$from" "${line:-(nothing)}"
done
check '[ "$(wc -l < "$T/arrows")" -gt 50 ]' "the library's includes were read ($(wc -l < "$T/arrows") arrows between folders; expected many)"
bad "$T/arrows" > "$T/bad"
for from in $FOLDERS; do
    check '[ -d "$from" ] && ! grep -q "^  $from/" "$T/bad"' "$from/: every include goes down the order$(grep "^  $from/" "$T/bad" | sed 's/^/\n/')"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
