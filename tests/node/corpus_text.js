// Writes every paragraph of data/nlp-corpus (builds/doc-*.json: JSON arrays of
// strings) to stdout, one paragraph per line, files in numeric order.
// Paragraphs that contain "\n" span several lines; every line is then a test case.
// usage: node corpus_text.js NLP_CORPUS_DIR > corpus.txt
"use strict";
const fs = require("fs");
const path = require("path");
const dir = path.join(process.argv[2], "builds");
const files = fs.readdirSync(dir).filter((f) => /^doc-\d+\.json$/.test(f))
  .sort((a, b) => parseInt(a.slice(4)) - parseInt(b.slice(4)));
if (!files.length) { console.error(`corpus_text.js: no doc-N.json in ${dir}`); process.exit(1); }
const out = [];
for (const f of files) {
  const doc = JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
  if (!Array.isArray(doc)) { console.error(`corpus_text.js: ${f}: not an array`); process.exit(1); }
  for (const p of doc) out.push(String(p));
}
process.stdout.write(out.join("\n") + "\n");
