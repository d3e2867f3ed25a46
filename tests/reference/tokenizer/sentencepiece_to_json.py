#!/usr/bin/python3
"""A SentencePiece BPE tokenizer.model as the tokenizer.json transformers writes for it.

transformers' LlamaConverter (convert_slow_tokenizer.py, the legacy layout of Llama 2, Mistral and
Mixtral checkpoints) turns a SentencePiece BPE model into a Hugging Face BPE with byte_fallback: the
pieces are the vocabulary (ids kept; <unk>, <s>, </s> scored 0), the merges every split of a piece into
two pieces, ordered by the merged piece's score (highest first; stable, so a piece's splits stay in
the order of their left and right ids); the normalizer prepends "▁" and replaces " " with "▁"; no
pre-tokenizer; the decoder replaces "▁" with " ", turns <0xNN> pieces into bytes, fuses and strips one
leading space. The unknown, control and user-defined pieces are added tokens (not normalized; the
first two special). Written here from that description without transformers or sentencepiece: the
model file is protobuf (ModelProto), read with the few fields this needs.

Usage: sentencepiece_to_json.py tokenizer.model tokenizer.json
"""
import json
import struct
import sys

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def fields(buf):
    """(field number, wire type, value) of a protobuf message: varints as ints, length-delimited as bytes."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise SystemExit(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def read_model(path):
    """[(piece, score, type)] in id order and the trainer's model_type (1 unigram, 2 BPE)."""
    pieces, model_type = [], 1
    with open(path, "rb") as f:
        buf = f.read()
    for number, _, value in fields(buf):
        if number == 1:  # SentencePiece {piece = 1, score = 2, type = 3 (NORMAL default)}
            piece, score, kind = "", 0.0, NORMAL
            for n, _, v in fields(value):
                if n == 1:
                    piece = v.decode("utf-8")
                elif n == 2:
                    score = struct.unpack("<f", v)[0]
                elif n == 3:
                    kind = v
            pieces.append((piece, score, kind))
        elif number == 2:  # TrainerSpec {model_type = 3}
            for n, _, v in fields(value):
                if n == 3:
                    model_type = v
    return pieces, model_type


def convert(pieces):
    vocab_scores = [(p, 0.0 if i < 3 else s) for i, (p, s, _) in enumerate(pieces)]
    vocab = {p: i for i, (p, _) in enumerate(vocab_scores)}
    merges = []
    for merge, score in vocab_scores:
        local = [(merge[:k], merge[k:], score) for k in range(1, len(merge)) if merge[:k] in vocab and merge[k:] in vocab]
        merges += sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]]))
    merges = [f"{a} {b}" for a, b, _ in sorted(merges, key=lambda x: x[2], reverse=True)]
    unk = next(p for p, _, t in pieces if t == UNKNOWN)
    added = [{"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": t != USER_DEFINED}
             for i, (p, _, t) in enumerate(pieces) if t in (UNKNOWN, CONTROL, USER_DEFINED)]
    bos = next((p for p, _, t in pieces if t == CONTROL and p == "<s>"), None)
    post = None if bos is None else {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}}}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": post,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "vocab": vocab,
                  "merges": merges},
    }


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    pieces, model_type = read_model(sys.argv[1])
    if model_type != 2:
        raise SystemExit(f"{sys.argv[1]}: model_type {model_type}, not BPE (2)")
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(convert(pieces), f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
