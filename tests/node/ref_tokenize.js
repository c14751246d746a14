// Reference tokenizations for the parity tests and the benchmark.
// usage: node ref_tokenize.js MODE VOCAB_DIR < text > ids
//   MODE gpt2         HuggingFace tokenizers (@anush008/tokenizers): byte-level BPE
//                     from VOCAB_DIR/{vocab.json,merges.txt}, GPT-2's ByteLevel
//                     pre-tokenizer (regex on, no prefix space)
//        gpt2-special the same with <|endoftext|> as an added special token
//        tiktoken     tiktoken's built-in "gpt2" encoding, encode_ordinary
//        bert         HuggingFace BertNormalizer(clean text, CJK, strip accents,
//                     lowercase) + BertPreTokenizer + WordPiece("##", [UNK], 100)
//                     from VOCAB_DIR/vocab.txt
//        bert-special the same with [PAD] [UNK] [CLS] [SEP] [MASK] as special tokens
//        bert-decode  the inverse: each line of ids -> HF's WordPiece decoding
//                     (cleanup off, special tokens kept)
// stdin is decoded as UTF-8 with U+FFFD replacement and split on "\n" (a final
// "\n" ends the last line); each line becomes one output line of ids. No
// special tokens are added. Prints "MB/s" of the encoding itself on stderr.
"use strict";
const fs = require("fs");
const path = require("path");
const [mode, vocabDir] = process.argv.slice(2);
if (!mode || (!vocabDir && mode !== "tiktoken")) {
  console.error("usage: node ref_tokenize.js gpt2|gpt2-special|tiktoken|bert|bert-special|bert-decode VOCAB_DIR");
  process.exit(2);
}

function hfTokenizer() {
  const { Tokenizer } = require("@anush008/tokenizers");
  let cfg;
  if (mode.startsWith("gpt2")) {
    const vocab = JSON.parse(fs.readFileSync(path.join(vocabDir, "vocab.json"), "utf8"));
    const merges = fs.readFileSync(path.join(vocabDir, "merges.txt"), "utf8").split("\n")
      .filter((l, i) => l.length && !(i === 0 && l.startsWith("#version")));
    const bl = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
    cfg = {
      added_tokens: mode === "gpt2-special" ? [{ id: vocab["<|endoftext|>"], content: "<|endoftext|>", single_word: false,
        lstrip: false, rstrip: false, normalized: false, special: true }] : [],
      normalizer: null, pre_tokenizer: bl, decoder: bl,
      model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
        fuse_unk: false, byte_fallback: false, vocab, merges },
    };
  } else if (mode.startsWith("bert")) {
    const lines = fs.readFileSync(path.join(vocabDir, "vocab.txt"), "utf8").split("\n");
    if (lines[lines.length - 1] === "") lines.pop();
    const vocab = {};
    lines.forEach((l, i) => { vocab[l.trimEnd()] = i; });
    const special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].filter((t) => t in vocab);
    cfg = {
      added_tokens: mode === "bert-special" ? special.map((t) => ({ id: vocab[t], content: t, single_word: false,
        lstrip: false, rstrip: false, normalized: false, special: true })) : [],
      normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: true, lowercase: true },
      pre_tokenizer: { type: "BertPreTokenizer" },
      decoder: { type: "WordPiece", prefix: "##", cleanup: false },
      model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
    };
  } else {
    console.error(`ref_tokenize.js: unknown mode ${mode}`);
    process.exit(2);
  }
  Object.assign(cfg, { version: "1.0", truncation: null, padding: null, post_processor: null });
  return Tokenizer.fromString(JSON.stringify(cfg));
}

async function main() {
  const input = fs.readFileSync(0);
  const text = input.toString("utf8");
  const lines = text.split("\n");
  if (text.endsWith("\n") || text === "") lines.pop();
  const t0 = process.hrtime.bigint();
  let out;
  if (mode === "tiktoken") {
    const enc = require("tiktoken").get_encoding("gpt2");
    out = lines.map((l) => enc.encode_ordinary(l).join(" "));
    enc.free();
  } else if (mode === "bert-decode") {
    const tok = hfTokenizer();
    const ids = lines.map((l) => (l.trim() ? l.trim().split(" ").map(Number) : []));
    out = await tok.decodeBatch(ids, false);
  } else {
    const tok = hfTokenizer();
    const encs = await tok.encodeBatch(lines, { addSpecialTokens: false });
    out = encs.map((e) => e.getIds().join(" "));
  }
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  process.stdout.write(out.length ? out.join("\n") + "\n" : "");
  console.error(`ref_tokenize.js ${mode}: ${lines.length} lines, ${(input.length / 1e6 / secs).toFixed(2)} MB/s`);
}
main().catch((e) => { console.error(e); process.exit(1); });
