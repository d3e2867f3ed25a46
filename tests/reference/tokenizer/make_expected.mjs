// Expected GPT-2 token ids for tests/data/test_tokenizer.cpp, from OpenAI's tiktoken (its
// WebAssembly build, encoding "gpt2"). Run: npm install && node make_expected.mjs
// Writes tests/fixtures/data/tokenizer_expected.json: [{name, text | hex, ids}].
import { get_encoding } from "tiktoken";
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";

const here = path.dirname(fileURLToPath(import.meta.url));
const fixtures = path.join(here, "../../fixtures/data");
const enc = get_encoding("gpt2");

// A deterministic pseudo-random word (an LCG), so the test need not store its generator.
function random_word(n, seed) {
  let s = seed >>> 0, w = "";
  for (let i = 0; i < n; i++) { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; w += "abcdefghijklmnopqrstuvwxyz"[s >>> 27 & 15 ? (s >>> 20) % 26 : 0]; }
  return w;
}

// Each case is a list of segments: a string (valid UTF-8) or an array of raw bytes (invalid UTF-8).
const cases = [
  ["ascii", ["Hello, world! This is a test of the GPT-2 tokenizer; it has 3 sentences. Right?"]],
  ["accents", ["Café naïve façade résumé — São Paulo, Zürich, Ångström, Dvořák, Œuvre, ÉCOLE, àéîõü"]],
  ["cjk", ["日本語のテキストと中文文本，还有한국어 텍스트。東京タワーは高い！"]],
  ["emoji", ["I love 🍕 and 🚀🚀! Family: 👨‍👩‍👧‍👦, flag 🇫🇷, skin 👍🏽, 😀😃😄 end"]],
  ["contractions", ["it's don't they're we've I'm you'll he'd 's 't 're 've 'm 'll 'd rock'n'roll o'clock"]],
  ["contractions upper", ["IT'S DON'T THEY'RE WE'VE I'M YOU'LL HE'D It'S 'S 'T 'RE 'VE 'M 'LL 'D"]],
  ["spaces and newlines", ["a  b   c    d\n\n\ne\t\tf \n \n g\r\nh     \n"]],
  ["leading spaces", ["   leading spaces"]],
  ["trailing spaces", ["trailing spaces   "]],
  ["trailing newlines", ["trailing newlines\n\n"]],
  ["only whitespace", [" \n\t  \n   "]],
  ["digits", ["1234567890 3.14159 1,000,000 2026-11-29 0x1F 1e10 ١٢٣ ² 4½ 007"]],
  ["punctuation", ["Hello!!! ... ??? (parens) [brackets] {braces} <tags> @user #hash $100 50% a&b *bold* _u_ ~t~ `code` --- ==="]],
  ["unicode whitespace", ["a\u00a0b\u3000c\u2028d\u0085e\u2009f \u00a0 g\u000bh\u000ci"]],
  ["next line and bom", ["x \u0085y and \u0085\u0085 z\u0085 \ufeffw \u180e v\u2028 u"]],
  ["endoftext literal", ["before<|endoftext|>after <|endoftext|>"]],
  ["code", ["def f(x):\n    if x > 0:\n        return x ** 2  # square\n    return -x\n\n\nprint(f(3))\n"]],
  ["long word", [random_word(10000, 7)]],
  ["long repeated", ["x".repeat(5000) + " " + "ab".repeat(3000)]],
  ["long spaces", [" ".repeat(3000) + "x" + "\n".repeat(2000)]],
  ["invalid lone ff", ["abc", [0xff], "def"]],
  ["invalid truncated 2-byte", ["caf", [0xc3], " ok"]],
  ["invalid truncated 3-byte", [[0xe2, 0x82], "A b"]],
  ["invalid overlong", ["x ", [0xc0, 0x80], " y"]],
  ["invalid surrogate", ["s", [0xed, 0xa0, 0x80], "t"]],
  ["invalid above max", [[0xf4, 0x90, 0x80, 0x80], "z"]],
  ["invalid continuation", ["hi  ", [0x80], "  there"]],
  ["invalid only", [[0xfe, 0xff, 0xfe]]],
  ["sample english", [fs.readFileSync(path.join(fixtures, "sample_english.txt"), "utf8")]],
];

// tiktoken's byte_pair_encode over raw bytes: merge the leftmost lowest-rank adjacent pair whose
// bytes are a token, until none is; ranks are gpt2's token ids (encode_single_token).
function rank_of(bytes) {
  try { return enc.encode_single_token(Uint8Array.from(bytes)); } catch { return Infinity; }
}
function bpe_bytes(bytes) {
  let parts = bytes.map(b => [b]);
  for (;;) {
    let best = Infinity, at = -1;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = rank_of([...parts[i], ...parts[i + 1]]);
      if (r < best) { best = r; at = i; }
    }
    if (at < 0) break;
    parts.splice(at, 2, [...parts[at], ...parts[at + 1]]);
  }
  return parts.map(p => enc.encode_single_token(Uint8Array.from(p)));
}

const out = [];
for (const [name, segments] of cases) {
  const ids = [];
  const bytes = [];
  let valid = true;
  for (const seg of segments) {
    if (typeof seg === "string") {
      ids.push(...enc.encode_ordinary(seg));
      bytes.push(...Buffer.from(seg, "utf8"));
    } else {
      valid = false;
      ids.push(...bpe_bytes(seg));  // a run of invalid bytes is a piece of its own
      bytes.push(...seg);
    }
  }
  const decoded = Buffer.from(enc.decode(Uint32Array.from(ids)));
  if (!decoded.equals(Buffer.from(bytes))) throw new Error(`case ${name}: tiktoken does not decode its own ids back`);
  const entry = { name };
  if (valid) entry.text = Buffer.from(bytes).toString("utf8");
  else entry.hex = Buffer.from(bytes).toString("hex");
  entry.ids = ids;
  out.push(entry);
}
const target = path.join(fixtures, "tokenizer_expected.json");
fs.writeFileSync(target, "[\n" + out.map(e => JSON.stringify(e)).join(",\n") + "\n]\n");
console.log(`wrote ${out.length} cases to ${target}`);

