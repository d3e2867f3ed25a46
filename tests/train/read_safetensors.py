#!/usr/bin/python3
"""An independent safetensors reader (json + numpy only, no skew code) for the checkpoint tests.

Usage: read_safetensors.py FILE
Parses the 8-byte little-endian header length and the JSON header the way the safetensors
specification describes it, checks that the tensors tile the data region, decodes every tensor
(BF16 widened to float32 by shifting its bits) and prints JSON: {"metadata": {...},
"tensors": {name: {"dtype", "shape", "values": [float, ...]}}}. Exits 1 with a message on any
violation of the format.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.dtype("<f4"), "BF16": np.dtype("<u2"), "I32": np.dtype("<i4"), "U16": np.dtype("<u2")}


def main(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    out = {}
    spans = []
    for name, entry in header.items():
        dt = DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        count = int(np.prod(entry["shape"], dtype=np.int64))
        if end - begin != count * dt.itemsize or end > len(data):
            sys.exit(f"{path}: {name}: bad data_offsets")
        arr = np.frombuffer(data[begin:end], dtype=dt).reshape(entry["shape"])
        if entry["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        spans.append((begin, end))
        out[name] = {"dtype": entry["dtype"], "shape": entry["shape"], "values": arr.reshape(-1).astype(np.float64).tolist()}
    spans.sort()
    pos = 0
    for begin, end in spans:
        if begin != pos:
            sys.exit(f"{path}: data region has a gap or overlap at byte {begin}")
        pos = end
    if pos != len(data):
        sys.exit(f"{path}: {len(data) - pos} trailing bytes")
    json.dump({"metadata": metadata, "tensors": out}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
