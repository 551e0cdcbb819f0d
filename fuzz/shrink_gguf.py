#!/usr/bin/env python3
"""Writes a compact copy of a GGUF file for the fuzz_gguf seed corpus.

The key/value section is copied byte for byte and every tensor keeps its name, dimension count
and ggml type; only the extents shrink (the first dimension to one block of the type: 32 for
Q8_0, 4 elements otherwise; the others to 1 or 2), with the offsets recomputed at the file's
alignment and each tensor's data taken from the start of the original. The result parses and
decodes through exactly the same code as the original (same types, same key/value kinds, same
alignment handling), at ~1/15 of the bytes, so each fuzz iteration is ~10x cheaper and the
target can run with -max_len=8192 (scripts/fuzz.sh) without losing the decode paths.

  /usr/bin/python3 fuzz/shrink_gguf.py IN.gguf OUT.gguf
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from fovea_testio import gguf  # noqa: E402


def shrink(src: bytes) -> bytes:
    g = gguf.parse(src)
    for t in g.tensors:
        _, block, nbytes = gguf.GGML[t["type"]]
        ne = list(reversed(t["shape"]))
        ne = [block if block > 1 else min(ne[0], 4)] + [min(d, 2) for d in ne[1:]]
        t["shape"] = list(reversed(ne))
        t["data"] = t["data"][:gguf.numel(ne) // block * nbytes]
    return gguf.encode(g, pad_end=False)


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        data = shrink(f.read())
    with open(sys.argv[2], "wb") as f:
        f.write(data)
