// Writes the tricky tokenizer test set to stdout (one case per line; some
// lines contain invalid UTF-8 on purpose). Written as a script so every
// control character and byte is explicit.
"use strict";
const cases = [
  // scripts
  "English, Français: déjà vu — naïve café; Español: ¿Qué tal? ¡Olé!",
  "Русский текст: Съешь же ещё этих мягких французских булок.",
  "Ελληνικά: Σίσυφος ΣΊΣΥΦΟΣ ὀδυσσεύς",
  "עברית: שָׁלוֹם עוֹלָם; العربية: مرحبا بالعالم ١٢٣ ٤٥٦",
  "हिन्दी: नमस्ते दुनिया; বাংলা: হ্যালো; தமிழ்: வணக்கம்; ไทย: สวัสดีชาวโลก",
  "日本語: こんにちは世界、カタカナとひらがな。中文：你好，世界！繁體字：臺灣",
  "한국어: 안녕하세요 세계; 漢字と한글 mixed with latin",
  "CJK ext: 𠀀𠀁 𪜀 𫝀 𬺰 compat 豈 更 and U+31350 𱍐 (Unicode 15)",
  "Georgian ქართული, Armenian Հայերեն, Ethiopic ሰላም, Tibetan བོད་ཡིག",
  // emoji, ZWJ sequences, modifiers, flags
  "emoji 😀😃 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ keycap 1️⃣ #️⃣",
  "zwj alone a\u200db, zwnj a\u200cb, bom \ufeffstart, soft\u00adhyphen",
  // combining marks
  "combining: e\u0301 a\u0300 o\u0308 n\u0303 A\u030a; stacked: Z\u0351\u0352\u0353\u0354 ; mark alone \u0301x",
  "precomposed vs decomposed: \u00e9 e\u0301 \u00c5 A\u030a \u212b; ligatures: ﬁ ﬂ ǅ Ǆ ǆ; İstanbul ß ẞ",
  // non-ASCII digits
  "digits: ٠١٢٣ ۴۵۶ ०१२३ ০১২ ๑๒๓ ０１２ ²³¹ ½ ⅓ Ⅻ ⅻ ① 〇 𝟘𝟙",
  "mixed 12abc 3.14 1,000,000 ١٢abc x²y",
  // contractions
  "it's don't I'm you're we've they'll he'd IT'S DON'T I'M YOU'RE WE'VE THEY'LL HE'D",
  "curly it’s don’t I’m; 's 't 're alone; ''s '''s rock'n'roll 'twas o'clock '",
  "quotes: 'single' \"double\" “curly” ‘curly’ «guillemets» „low“",
  // whitespace runs
  "two  spaces   three    four     five",
  "tabs\tand\t\ttabs \t mixed\t \t",
  "nbsp\u00a0x \u00a0\u00a0y  \u00a0z\u00a0 end",
  "ls\u2028ps\u2029nel\u0085x vt\u000bff\u000cx",
  "ideographic\u3000space\u3000\u3000x em\u2003en\u2002thin\u2009hair\u200anarrow\u202fmath\u205fogham\u1680x",
  "   leading spaces",
  "trailing spaces   ",
  " ",
  "",
  "\t",
  "cr\rinside line",
  // control characters
  "ctrl: a\u0000b\u0001c\u0007d\u001be\u001ff\u007fg\u0080h\u009fi",
  "format: a\u200eb\u200fc\u202ad\u2066e\u2069f\u00adg\u0600h",
  "private use \ue000\uf8ff and replacement \ufffd char",
  // special token text
  "<|endoftext|>",
  "before<|endoftext|>after <|endoftext|> spaced <|endoftext|><|endoftext|>",
  "almost <|endoftext| and <|endoftext and |endoftext|> <|ENDOFTEXT|>",
  "[CLS] [SEP] [MASK] [PAD] [UNK] [cls] [Mask]",
  // long words
  "a".repeat(1000),
  "x " + "Supercalifragilistic".repeat(50) + " y",
  "é".repeat(101) + " " + "b".repeat(100) + " " + "c".repeat(101),
  "9".repeat(300) + " " + "!?".repeat(200),
  // URLs, e-mail, code
  "https://example.com/path/to-page?query=1&x=%20y#frag http://a.b/c_d mailto:someone@example.org",
  "www.Example.co.uk/Über-uns?lang=de",
  "int main(void) { return printf(\"%d\\n\", x[i++] >= 0 ? a->b : c::d); } // comment",
  "def f(x): return {'a': [1, 2.5e-3, None], \"b\": x ** 2}  # python",
  "if (a && b || !c) { $var = @array; } <div class=\"x\">&amp;&lt;</div>",
  "snake_case camelCase PascalCase kebab-case SCREAMING_CASE __dunder__",
  "math: ∑∫∂ √2 ≈ 1.414 ≠ π; arrows → ⇒ ←; box ─│┌",
  "currency $100 €50 £30 ¥1000 ₹500 ₿0.1 12% 3°C",
  "punct ... !!! ??? —– ‐‑‒ ・ ¿¡ … ‽ ※ § ¶ † ‡ • ·",
  "hyphen-ated words, e.g. state-of-the-art, U.S.A., Ph.D., i.e.",
  "word's words' Jones's 'quoted' rock 'n' roll",
];
// long pieces (BPE on more than a few dozen bytes): pseudo-random words over
// small alphabets, so that many different merges compete
let seed = 12345;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
for (const alphabet of ["ab", "thequickbrownfox", "ing", "0123456789", "éàü", "!?.,-"]) {
  const a = [...alphabet];
  let s = "";
  for (let i = 0; i < 60 + rnd(400); i++) s += a[rnd(a.length)];
  cases.push(s, " " + s + " " + s.toUpperCase());
}
const bufs = cases.map((c) => Buffer.from(c, "utf8"));
// invalid UTF-8: stray continuation, truncated sequences, overlong, surrogate, > U+10FFFF
bufs.push(Buffer.from([0x61, 0x80, 0x62, 0xc3, 0x63, 0xe2, 0x82, 0x20, 0xf0, 0x9f, 0x98, 0x64]));
bufs.push(Buffer.from([0xc0, 0xaf, 0x20, 0xed, 0xa0, 0x80, 0x20, 0xf4, 0x90, 0x80, 0x80, 0x20, 0xff, 0xfe, 0x65]));
bufs.push(Buffer.concat([Buffer.from("valid then truncated at end "), Buffer.from([0xe6, 0x97])]));
// random byte soup biased towards UTF-8 lead and continuation bytes: the
// U+FFFD replacement must match node's (WHATWG = Python's) decoder exactly
const pool = [0x20, 0x61, 0x27, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1,
  0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf4, 0xf5, 0xff, 0x0d, 0x00];
for (let line = 0; line < 24; line++) {
  const b = [];
  for (let i = 0; i < 200; i++) b.push(pool[rnd(pool.length)]);
  bufs.push(Buffer.from(b));
}
process.stdout.write(Buffer.concat(bufs.flatMap((b) => [b, Buffer.from("\n")])));
