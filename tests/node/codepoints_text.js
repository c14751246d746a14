// Writes every assigned, non-private-use code point (except "\n"), each in a
// few contexts that exercise the tokenizers' character classes (letter,
// number, whitespace, punctuation, marks, controls): "x"+c, " 1"+c, c+c,
// "\u00a0"+c, "  "+c+"a". Large uniform ideograph/syllable blocks (CJK,
// Hangul, Tangut, Yi) are sampled every 31st code point to keep the file
// small (~1.5 MB). Eight code points per line.
"use strict";
const assigned = /[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Z}\p{Cc}\p{Cf}]/u;
const sampled = [[0x3400, 0x4DBF], [0x4E00, 0x9FFF], [0x20000, 0x323AF], [0xAC00, 0xD7A3], [0x17000, 0x18AFF], [0xA000, 0xA48C]];
const lines = [];
let cur = [];
for (let c = 0; c < 0x110000; c++) {
  if (c === 10 || (c >= 0xD800 && c < 0xE000)) continue;
  const s = String.fromCodePoint(c);
  if (!assigned.test(s)) continue;
  if (sampled.some(([a, b]) => c >= a && c <= b && (c - a) % 31 !== 0)) continue;
  cur.push("x" + s + " 1" + s + " " + s + s + "\u00a0" + s + "  " + s + "a");
  if (cur.length === 8) { lines.push(cur.join(" ")); cur = []; }
}
if (cur.length) lines.push(cur.join(" "));
process.stdout.write(lines.join("\n") + "\n");
