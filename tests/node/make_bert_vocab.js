// Builds a WordPiece test vocabulary (vocab.txt) from text on stdin, big
// enough to exercise real splitting: the special tokens, the most frequent
// whole words, the most frequent "##" continuation pieces (1-4 characters)
// and every character seen at least 3 times (bare and with "##"). Rarer
// characters are left out on purpose so that words containing them become
// [UNK]. Words are found with a simplified BERT normalisation (lowercase,
// NFD, strip Mn, split on whitespace/punctuation, CJK separate); the vocab
// only has to be plausible, the parity test compares two tokenizers on it.
// usage: node make_bert_vocab.js N_WORDS N_PIECES < text > vocab.txt
"use strict";
const fs = require("fs");
const nWords = parseInt(process.argv[2] || "6000"), nPieces = parseInt(process.argv[3] || "3000");
const text = fs.readFileSync(0).toString("utf8").toLowerCase().normalize("NFD").replace(/\p{Mn}/gu, "");
const isCjk = /[\u4E00-\u9FFF\u3400-\u4DBF\uF900-\uFAFF\u{20000}-\u{2A6DF}]/u;
const words = new Map(), chars = new Map();
const bump = (m, k) => m.set(k, (m.get(k) || 0) + 1);
for (const w of text.split(/[\s\p{P}!-\/:-@\[-`{-~]+/u)) {
  if (!w) continue;
  for (const part of w.split(/([\u4E00-\u9FFF\u3400-\u4DBF\uF900-\uFAFF\u{20000}-\u{2A6DF}])/u)) {
    if (part) bump(words, part);
  }
}
const pieces = new Map();
for (const [w, c] of words) {
  const cs = [...w];
  for (const ch of cs) chars.set(ch, (chars.get(ch) || 0) + c);
  if (isCjk.test(w) || cs.length > 100) continue;
  for (let i = 1; i < cs.length; i++)
    for (let l = 1; l <= 4 && i + l <= cs.length; l++) pieces.set(cs.slice(i, i + l).join(""), (pieces.get(cs.slice(i, i + l).join("")) || 0) + c);
}
const byCount = (m) => [...m].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)).map((e) => e[0]);
const out = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
const seen = new Set(out);
const add = (t) => { if (!seen.has(t)) { seen.add(t); out.push(t); } };
for (const ch of byCount(chars)) if (chars.get(ch) >= 3) { add(ch); add("##" + ch); }
for (const p of "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") add(p);
byCount(words).slice(0, nWords).forEach(add);
byCount(pieces).slice(0, nPieces).forEach((p) => add("##" + p));
process.stdout.write(out.join("\n") + "\n");
