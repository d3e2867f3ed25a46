#!/usr/bin/python3
# Independent PyTorch reference for inference scoring (model/inference.h, model_token_logprobs):
# per-token log-probabilities log p(x[i+1] | x[..i]) of variable-length sequences under the tiny
# model of tests/reference/model/make_golden.py (float64, from the equations, router without
# noise), softmax over the vocabulary (padded rows excluded), each sequence run on its own.
#
# Run with Debian's python3 (torch 1.13, numpy):  /usr/bin/python3 tests/reference/eval/make_logprobs.py
# Reads tests/reference/model/golden_inputs.bin (weights, token stream) and writes golden_logprobs.bin
# here (same SKEWGOLD record format), read by tests/model/test_inference.cpp. The sequences are
# prefixes of the golden batch's rows, so every scored position sees exactly the routing whose
# top-k margins make_golden.py checked.
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "model"))
import make_golden as g  # noqa: E402

# (row, length): sequence = (tokens[row] + [targets[row][-1]])[:length]
SEQUENCES = [(0, 17), (1, 9), (0, 5), (1, 17), (1, 2)]


def read_records(path):
    out = {}
    with open(path, "rb") as f:
        assert f.read(8) == b"SKEWGOLD"
        (count,) = struct.unpack("<I", f.read(4))
        for _ in range(count):
            (n,) = struct.unpack("<I", f.read(4))
            name = f.read(n).decode()
            (ndim,) = struct.unpack("<I", f.read(4))
            shape = struct.unpack(f"<{ndim}q", f.read(8 * ndim))
            size = int(np.prod(shape)) if ndim else 1
            out[name] = np.frombuffer(f.read(4 * size), dtype=np.float32).reshape(shape)
    return out


def main():
    c = g.CFG
    rec = read_records(os.path.join(HERE, "..", "model", "golden_inputs.bin"))
    p = {n: torch.tensor(rec["weight." + n].astype(np.float64)) for n, _, _ in g.param_table(c)}
    tokens = rec["tokens"].astype(np.int64)
    targets = rec["targets"].astype(np.int64)
    V = c["vocab_size"]
    out = [("sequences", np.array([[r, n] for r, n in SEQUENCES], dtype=np.float64))]
    with torch.no_grad():
        for i, (row, n) in enumerate(SEQUENCES):
            stream = np.concatenate([tokens[row], targets[row][-1:]])[:n]
            x = torch.from_numpy(stream[:-1]).view(1, -1)
            y = torch.from_numpy(stream[1:]).view(1, -1)
            _, _, _, logits, _ = g.forward(p, x, y, c, None)
            lp = torch.log_softmax(logits[:, :V], dim=-1)  # padded columns have probability 0
            out.append((f"logprobs.{i}", lp.gather(1, y.view(-1, 1)).view(-1).numpy()))
            out.append((f"tokens.{i}", stream.astype(np.float64)))
            print(f"sequence {i}: row {row}, {n} tokens, log-likelihood {lp.gather(1, y.view(-1, 1)).sum().item():.6f}")
    g.write_records(os.path.join(HERE, "golden_logprobs.bin"), out)


if __name__ == "__main__":
    main()
