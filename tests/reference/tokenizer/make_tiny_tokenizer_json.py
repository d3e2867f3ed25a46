#!/usr/bin/env python3
"""The tiny tokenizer.json of the prepare/tokenize tests and the fuzz seeds
(tests/fixtures/data/hf_tiny/tokenizer.json): the 256 byte tokens (byte b has id b), merges for
"the", " the", "he", "ll", "hello" in both forms, Qwen's NFC normalizer and Split pattern before a
ByteLevel step, and the added tokens <|endoftext|> (300, special) and <think> (301)."""
import json
import os

def byte_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}

A = byte_alphabet()
def spell(text):
    return "".join(A[b] for b in text.encode("utf-8"))

vocab = {A[b]: b for b in range(256)}
merges = []
for a, b in [("t", "h"), ("th", "e"), (" ", "the"), ("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o")]:
    vocab.setdefault(spell(a + b), len(vocab))
    merges.append(spell(a) + " " + spell(b) if len(merges) % 2 == 0 else [spell(a), spell(b)])
qwen_pattern = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
def added(i, content, special):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}
tokenizer = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [added(300, "<|endoftext|>", True), added(301, "<think>", False)],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": qwen_pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
              "fuse_unk": False, "byte_fallback": False, "ignore_merges": False, "vocab": vocab, "merges": merges},
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../fixtures/data/hf_tiny/tokenizer.json")
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "w", encoding="utf-8") as f:
    json.dump(tokenizer, f, ensure_ascii=False, indent=1)
    f.write("\n")
