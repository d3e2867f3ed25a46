#!/usr/bin/env python3
"""The Hugging Face peer check of the GPU check (docs/huggingface.md, "The peer check").

For each family's tiny checkpoint of tests/reference/hf (Mixtral, OLMoE, Qwen3-MoE; written by
make_tiny_hf.py): `skew import` it, `skew export --format hf` the import, and load both the fixture
and skew's export in `transformers` (AutoModelForCausalLM, float32, CPU). Each model's logits for
the fixture's 2 x 16 reference tokens are compared with the float64 reference logits of
<family>_reference.bin, which skew's own forward meets at 0.8-0.9% (tests/hf/test_import.cpp): the
limit is that test's, a normalized error (||a - b|| / ||b||) of 2e-2. The export's generation config
(the bos, eos and pad token ids `generate` stops and pads at) is the fixture's. The fixture's
tokenizer.json through `tokenizers` gives the same ids as `skew tokenize` on the committed
multilingual texts (tests/fixtures/data/multilingual.json); Mixtral's is the SentencePiece-style one.

Needs python3 with torch, transformers and tokenizers (the GPU machine's image has them); exits 77
with one line when they are missing, 1 when a comparison fails, 0 when every one passes.
Usage: hf_peer_check.py --skew build/tools/skew --out DIR [--root .]
"""
import argparse
import json
import os
import struct
import subprocess
import sys

FAMILIES = ("mixtral", "olmoe", "qwen3")
LIMIT = 2e-2  # tests/hf/test_import.cpp's limit on skew's logits against the same reference


def read_records(path):
    """SKEWGOLD records (make_golden.py's write_records): name -> (shape, list of float32)."""
    import numpy as np

    with open(path, "rb") as f:
        if f.read(8) != b"SKEWGOLD":
            raise SystemExit(f"{path}: not a SKEWGOLD file")
        (n,) = struct.unpack("<I", f.read(4))
        out = {}
        for _ in range(n):
            (ln,) = struct.unpack("<I", f.read(4))
            name = f.read(ln).decode()
            (nd,) = struct.unpack("<I", f.read(4))
            shape = struct.unpack(f"<{nd}q", f.read(8 * nd))
            count = 1
            for s in shape:
                count *= s
            out[name] = np.frombuffer(f.read(4 * count), dtype="<f4").reshape(shape)
        return out


def skew(binary, args, stdin=None):
    r = subprocess.run([binary] + args, input=stdin, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"skew {' '.join(args)}: exit {r.returncode}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def load_model(path):
    import torch
    from transformers import AutoModelForCausalLM

    try:
        m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except TypeError:  # transformers before 4.56 names it torch_dtype
        m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    return m.eval()


def logits_error(model, tokens, reference):
    import numpy as np
    import torch

    with torch.no_grad():
        got = model(input_ids=torch.from_numpy(tokens)).logits.double().numpy()
    got = got.reshape(-1, got.shape[-1])[:, : reference.shape[1]]
    ref = reference.astype(np.float64)
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-12))


def generation_ids(model):
    """The token ids transformers' generate() stops and pads at, from the model's generation config."""
    g = model.generation_config
    return {k: getattr(g, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skew", required=True, help="the skew binary")
    ap.add_argument("--out", required=True, help="a new folder for the imports and exports")
    ap.add_argument("--root", default=".", help="the repository (tests/reference/hf, tests/fixtures/data)")
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: the GPU machine has no network
    try:
        import numpy  # noqa: F401
        import tokenizers
        import torch  # noqa: F401
        import transformers
    except ImportError as e:
        print(f"hf peer: skipped (python3 lacks {e.name}: torch, transformers and tokenizers are needed)")
        return 77
    print(f"hf peer: transformers {transformers.__version__}, tokenizers {tokenizers.__version__}")
    hf_root = os.path.join(a.root, "tests", "reference", "hf")
    texts = json.load(open(os.path.join(a.root, "tests", "fixtures", "data", "multilingual.json"), encoding="utf-8"))
    failed = 0

    def result(name, ok, detail):
        nonlocal failed
        failed += 0 if ok else 1
        print(f"  {name}: {'passed' if ok else 'FAILED'} ({detail})")

    for fam in FAMILIES:
        fixture = os.path.join(hf_root, fam)
        imp, exp = os.path.join(a.out, fam, "import"), os.path.join(a.out, fam, "export")
        try:
            skew(a.skew, ["import", fixture, "--out", imp])
            skew(a.skew, ["export", imp, "--format", "hf", "--out", exp])
        except RuntimeError as e:
            result(f"{fam} import and export", False, str(e))
            continue
        rec = read_records(os.path.join(hf_root, f"{fam}_reference.bin"))
        tokens = rec["tokens"].astype("int64")
        ids = {}
        for what, path in (("fixture", fixture), ("skew's export", exp)):
            try:
                model = load_model(path)
                ids[what] = generation_ids(model)
                e = logits_error(model, tokens, rec["logits"])
                result(f"{fam} {what} in transformers", e <= LIMIT, f"logits error {e:.4f} against the reference, limit {LIMIT}")
            except Exception as ex:  # a model transformers cannot load is the finding
                result(f"{fam} {what} in transformers", False, f"{type(ex).__name__}: {ex}")
        if len(ids) == 2:
            want, got = ids["fixture"], ids["skew's export"]
            result(f"{fam} generation ids", want == got, f"fixture {want}, export {got}")
        tok = tokenizers.Tokenizer.from_file(os.path.join(fixture, "tokenizer.json"))
        differ = []
        for i, text in enumerate(texts):
            want = tok.encode(text, add_special_tokens=False).ids
            # tokenizers matches special added tokens in the text: skew's --allow-special
            got = [int(x) for x in skew(a.skew, ["tokenize", "--allow-special", "--tokenizer", os.path.join(imp, "tokenizer")],
                                        stdin=text.encode("utf-8")).split()]
            if got != want:
                differ.append(i)
        result(f"{fam} tokenizer.json ids", not differ,
               f"{len(texts) - len(differ)} of {len(texts)} texts equal to tokenizers'" +
               (f"; texts {differ[:5]} differ" if differ else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
