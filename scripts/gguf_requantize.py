#!/usr/bin/python3
"""Rewrite a GGUF mmproj with its matrices in Q8_0, as llama.cpp's converter writes one with
--outtype q8_0: 2-D weights whose rows are whole 32-value blocks become Q8_0 (ggml's
quantize_row_q8_0_ref: per block d = max|x| / 127 stored as f16, q = round(x / d)); 1-D tensors
(norms, biases, the class embedding) and the position embedding are stored F32; the patch
embedding (a 4-D convolution kernel) stays F16. Key/values are copied as they are.

    /usr/bin/python3 scripts/gguf_requantize.py IN.gguf OUT.gguf

Reads F32, F16, BF16, F64 and Q8_0 input tensors. numpy only (scripts/fovea_testio/).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fovea_testio import gguf  # noqa: E402


def q8_0(x):
    x = x.reshape(-1, 32).astype(np.float32)
    d = np.abs(x).max(axis=1) / np.float32(127)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    v = x * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # roundf: half away from zero
    blocks = np.empty((len(q), 34), np.uint8)  # per block: d (f16), then 32 int8
    blocks[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = q.view(np.uint8)
    return blocks.tobytes()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    g = gguf.read(sys.argv[1])
    for t in g.tensors:
        try:
            x = gguf.dequantize(t).reshape(-1)
        except ValueError as e:
            sys.exit(f"gguf_requantize: {e}")
        ne = list(reversed(t["shape"]))
        if len(ne) == 2 and ne[0] % 32 == 0 and "position" not in t["name"] and "pos_embd" not in t["name"]:
            t["type"], t["data"] = gguf.GGML_Q8_0, q8_0(x)
        elif len(ne) >= 3:
            t["type"], t["data"] = gguf.GGML_F16, x.astype("<f2").tobytes()
        else:
            t["type"], t["data"] = gguf.GGML_F32, x.astype("<f4").tobytes()
    with open(sys.argv[2], "wb") as f:
        f.write(gguf.encode(g))


if __name__ == "__main__":
    main()
