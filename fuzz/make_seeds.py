#!/usr/bin/env python3
"""Write the seed corpora of the fuzz targets (fuzz/corpus/<target>/): small valid inputs of every
format, so that coverage starts from the parsers' accepting paths. Re-run after a format change;
the files are committed. Uses only the standard library."""
import gzip
import json
import os
import struct
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = os.path.join(root, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(rel):
    with open(os.path.join(root, rel), "rb") as f:
        return f.read()


# config: the shipped configs, and small ones exercising lists, optimizer entries and tiers.
for name in ("tiny.yaml", "quickstart.yaml"):
    put("config", name, read("configs/" + name))
put("config", "optimizers.yaml", "train:\n  optimizers: [skewadam, adamw, mine]\n  steps: 10\noptimizers:\n"
    "  mine:\n    type: lion\n    lr: 1.0e-4\n  skewadam:\n    tiers:\n      router:\n        momentum: fp32\n")
put("config", "model.yaml", "model:\n  d_model: 64\n  n_heads: 4\n  n_kv_heads: 2\n  moe_blocks: [0, 1]\n  top_k: 1\n")


# safetensors: header JSON + little-endian data, as write_safetensors lays it out.
def safetensors(tensors, metadata=None):
    header, blob = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + blob


put("safetensors", "two.safetensors", safetensors(
    [("embed.tokens", "F32", [2, 3], struct.pack("<6f", *range(6))), ("final_ln.weight", "BF16", [4], b"\x80\x3f" * 4)],
    {"format": "pt", "step": "3"}))
put("safetensors", "ints.safetensors", safetensors([("a", "I32", [3], struct.pack("<3i", 1, 2, 3)),
                                                    ("b", "U16", [2], struct.pack("<2H", 7, 8)), ("c", "F32", [0], b"")]))
put("safetensors", "empty.safetensors", safetensors([]))

# trainer_state.json as save_checkpoint writes it.
put("trainer_state", "state.json", json.dumps({
    "step": 8, "optimizer": "skewadam", "data_position": 8, "seed": 1, "skipped_steps": 0, "best_val_step": 4,
    "tokens_seen": 4096, "train_seconds": 1.5, "config_hash": "0123456789abcdef", "extra": {"optimizer_t": 8},
    "best_val_loss": 5.25}, indent=2))
put("trainer_state", "null_best.json", json.dumps({
    "step": 0, "optimizer": "adamw", "data_position": 0, "seed": 0, "skipped_steps": 0, "best_val_step": 0,
    "tokens_seen": 0, "train_seconds": 0, "config_hash": "", "best_val_loss": None}))

# manifest.json as skew prepare writes it.
put("manifest", "manifest.json", json.dumps({
    "separator": "eot", "tokenizer": {"vocab_size": 50257, "source": "gpt2"},
    "split": {"val_ratio": 0.05, "train_buckets": 950},
    "shards": [{"file": "train_000000.bin", "split": "train", "tokens": 10, "md5": "0" * 32},
               {"file": "val_000000.bin", "split": "val", "tokens": 4, "md5": "f" * 32}],
    "documents": {"train": 3, "val": 1}, "tokens": {"train": 10, "val": 4}}, indent=2))


# llm.c shard: 256 int32 header (magic, version, token count), uint16 tokens.
def shard(tokens):
    header = struct.pack("<3i", 20240520, 1, len(tokens)) + b"\0" * (256 * 4 - 12)
    return header + struct.pack("<%dH" % len(tokens), *tokens)


put("shard", "small.bin", shard([50256, 464, 2068, 7586, 21831, 50256, 0, 65535]))
put("shard", "empty.bin", shard([]))
put("shard", "uint32.bin", struct.pack("<256i", *([20240801, 7, 5] + [0] * 253)) + struct.pack("<5I", 151643, 9707, 1879, 65536, 151668))
put("shard", "llmc.bin", read("tests/fixtures/data/llmc/tiny_val_000000.bin")[:1024 + 2 * 512])

# JSONL / text corpora (the jsonl target writes each input as .jsonl, .jsonl.gz and .txt).
lines = read("tests/fixtures/train/sample.jsonl").split(b"\n")[:6]
put("jsonl", "sample.jsonl", b"\n".join(lines) + b"\n")
put("jsonl", "sample.jsonl.gz", gzip.compress(b"\n".join(lines) + b"\n", mtime=0))
put("jsonl", "fields.jsonl", '{"text": "a\\u00e9\\ud83d\\ude00", "id": 1}\n\n{"text": ""}\n{"other": 2}\n[1]\nnot json\n')

# tokenizer: English, accents, CJK, emoji, contractions, whitespace runs, the special token.
text = read("tests/fixtures/data/sample_english.txt")
put("tokenizer", "english.txt", text[:2000])
put("tokenizer", "mixed.txt", "Héllo wörld! 你好，世界 🙂🙃 don't I'll we've  \t\n\n  <|endoftext|> 12345 $%^&*".encode())
put("tokenizer", "bytes.bin", bytes(range(256)))

# tokenizer_json: the tiny tokenizer.json of the tests (NFC, Qwen's Split pattern, added tokens, both
# merge forms) and smaller variants: GPT-2's ByteLevel regex with a prefix space and ignore_merges,
# each Split behavior, a Sequence normalizer. Written compact so that each stays under 8 KiB.
tiny = json.loads(read("tests/fixtures/data/hf_tiny/tokenizer.json"))
put("tokenizer_json", "hf_tiny.json", json.dumps(tiny, ensure_ascii=False, separators=(",", ":")).encode())
byte_level = dict(tiny, normalizer=None,
                  pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True})
byte_level["model"] = dict(tiny["model"], ignore_merges=True)
put("tokenizer_json", "byte_level.json", json.dumps(byte_level, ensure_ascii=False, separators=(",", ":")).encode())
for behavior in ("Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"):
    split = dict(tiny, normalizer={"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFD"}]},
                 pre_tokenizer={"type": "Sequence", "pretokenizers": [
                     {"type": "Split", "pattern": {"String": " "}, "behavior": behavior, "invert": behavior == "Removed"},
                     {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]})
    put("tokenizer_json", "split_%s.json" % behavior.lower(), json.dumps(split, ensure_ascii=False, separators=(",", ":")).encode())
print(f"seeds written to {out}", file=sys.stderr)
