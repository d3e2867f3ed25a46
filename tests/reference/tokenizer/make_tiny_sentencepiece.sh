#!/usr/bin/env bash
# The tiny SentencePiece model of tests/data/test_tokenizer_kinds.cpp: BPE, 320 pieces, byte fallback,
# identity normalization (no 240 KB character map), trained by Debian's spm_train (package
# sentencepiece) on 400 seeded lines of 15 English words. Training is not byte-reproducible, so the
# model is committed; its ids the test names are the rule-given ones (<unk> 0, <s> 1, </s> 2, byte b
# at 3 + b) and three word pieces read from this model with spm_encode.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../../fixtures/data/sentencepiece_tiny"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/text.txt" <<'PY'
import random, sys
random.seed(1)
words = "the quick brown fox jumps over lazy dog hello world tokenizer model piece sentence".split()
with open(sys.argv[1], "w") as f:
    for _ in range(400):
        f.write(" ".join(random.choice(words) for _ in range(8)) + "\n")
PY
spm_train --input="$tmp/text.txt" --model_prefix="$tmp/tiny" --vocab_size=320 --model_type=bpe --byte_fallback=true \
  --character_coverage=1.0 --normalization_rule_name=identity --num_threads=1 >/dev/null 2>&1
mkdir -p "$out"
cp "$tmp/tiny.model" "$out/tokenizer.model"
echo "hello world €" | spm_encode --model="$out/tokenizer.model" --output_format=id
