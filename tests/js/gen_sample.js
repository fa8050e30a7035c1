// tests/js/gen_sample.js — writes tests/data/random_unicode.txt: seeded random
// text that stresses GPT-2's pre-tokenization (every JS whitespace, letters
// and numbers of many scripts, marks, astral characters, contractions, long
// runs, punctuation full of commas and quotes), documents separated by
// <|endoftext|>. Valid UTF-8 by design,
// so the JS reference sees the same bytes as the C side.
//     node tests/js/gen_sample.js > tests/data/random_unicode.txt
'use strict';
let seed = 12345;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const pick = a => a[Math.floor(rand() * a.length)];
const cp = (lo, hi) => String.fromCodePoint(lo + Math.floor(rand() * (hi - lo + 1)));
const spaces = ['\t', '\n', '\v', '\f', '\r', ' ', '\u0085', '\u00a0', '\u1680', '\u2000', '\u2005', '\u200a', '\u200b',
                '\u2028', '\u2029', '\u202f', '\u205f', '\u3000', '\ufeff', '\r\n', '  ', '   ', '\n\n'];
const pools = [
  () => pick(['the', 'The', 'of', 'and', 'Congress', 'nation', 'GPT', 'x', 'a']),
  () => pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'", "''", "'x", "don't", "I'M"]),
  () => String(Math.floor(rand() * 1e6)),
  () => pick(['.', ',', '!', '?', '...', '--', '"', '(', ')', '[', ']', '{', '}', '<|', '|>', '$', '%', '#', '@', '\\', '/']),
  () => pick(spaces),
  () => cp(0x00c0, 0x024f),    // Latin extended
  () => cp(0x0370, 0x03ff),    // Greek
  () => cp(0x0400, 0x04ff),    // Cyrillic
  () => cp(0x0590, 0x06ff),    // Hebrew, Arabic (with marks and digits)
  () => cp(0x0900, 0x0dff),    // Indic scripts: letters, marks, digits
  () => cp(0x2150, 0x218f),    // number forms: fractions, roman numerals
  () => cp(0x2460, 0x24ff),    // enclosed numbers and letters
  () => cp(0x0300, 0x036f),    // combining marks
  () => cp(0x3040, 0x30ff),    // kana
  () => cp(0x4e00, 0x9fff),    // CJK
  () => cp(0xac00, 0xd7a3),    // Hangul
  () => cp(0x1f300, 0x1faff),  // emoji
  () => cp(0x10000, 0x1ffff),  // astral letters, numbers, symbols
  () => cp(0x00a0, 0xd7ff),    // anything in the BMP
  () => cp(0xe000, 0xffff),
];
let out = '';
for (let doc = 0; doc < 12; doc++) {
  let text = '';
  while (text.length < 2500) {
    const pool = rand() < 0.5 ? pools[Math.floor(rand() * 5)] : pick(pools);
    const n = rand() < 0.1 ? 1 + Math.floor(rand() * 40) : 1 + Math.floor(rand() * 3);
    for (let i = 0; i < n; i++) text += pool();
  }
  out += (doc ? '<|endoftext|>' : '') + text;
}
// Long pieces (over 64 bytes take the heap path in C) and punctuation runs
// full of commas and quotes, where the JS ranks pairs by "left,right" strings.
const runs = [
  () => cp(0x61, 0x7a), () => pick(['a', 'b', 'e', 'r', 't', 'h', 'E', '\u00e9', '\u00df']), () => cp(0x30, 0x39),
  () => pick(['"', ',', '"', '],[', '},{', '",', ',"', "',", ",'", '.,', ')', '(', ']', '[', '.', '"]']),
  () => pick([' ', ' ', '\t', '\n', '\u3000']), () => cp(0x4e00, 0x4fff), () => cp(0x0900, 0x097f),
];
for (const run of runs) {
  for (const n of [5, 30, 70, 300, 3000]) {
    let text = ' ';
    for (let i = 0; i < n; i++) text += run();
    out += '<|endoftext|>' + text + ' x' + text.slice(0, 40) + '\n';
  }
}
process.stdout.write(out);
