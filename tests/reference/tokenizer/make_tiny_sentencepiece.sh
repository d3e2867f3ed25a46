#!/usr/bin/env bash
# The tiny SentencePiece models of the tests, BPE with byte fallback and identity normalization (no
# 240 KB character map), trained by Debian's spm_train (package sentencepiece) on 400 seeded lines of
# 15 English words:
#   sentencepiece_tiny/tokenizer.model  320 pieces (tests/data/test_tokenizer_kinds.cpp)
#   sentencepiece_302/tokenizer.model   302 pieces, white space kept as written (remove_extra_whitespaces
#                                       false, as Llama 2's and Mistral's models): the Mixtral fixture's
#                                       tokenizer (tests/reference/hf/make_tiny_hf.py writes its tokenizer.json)
# Training is not byte-reproducible, so the models are committed; the ids the tests name are the
# rule-given ones (<unk> 0, <s> 1, </s> 2, byte b at 3 + b) and a few word pieces read from the model
# with spm_encode.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fixtures="$here/../../fixtures/data"
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
train() {  # name vocab_size extra-flags...
  local name=$1 size=$2
  shift 2
  spm_train --input="$tmp/text.txt" --model_prefix="$tmp/$name" --vocab_size="$size" --model_type=bpe \
    --byte_fallback=true --character_coverage=1.0 --normalization_rule_name=identity --num_threads=1 "$@" >/dev/null 2>&1
  mkdir -p "$fixtures/$name"
  cp "$tmp/$name.model" "$fixtures/$name/tokenizer.model"
  echo "hello world €" | spm_encode --model="$fixtures/$name/tokenizer.model" --output_format=id
}
train sentencepiece_tiny 320
train sentencepiece_302 302 --remove_extra_whitespaces=false
