#!/usr/bin/python3
"""Fixtures for fovea's ggml block dequantisation: a GGUF file with one tensor per quantized type,
and the values a numpy reference of the GGUF spec's dequantisation gives for it.

    /usr/bin/python3 scripts/make_gguf_quant_fixtures.py [--out tests/data/gguf_quants]

Writes quants.gguf (tensors q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, q8_k, each [3, 512]:
random bytes in every quant field, finite scales) and expected.safetensors (the same names,
float32, dequantised here). Block layouts as ggml's ggml-common.h defines them; the
dequantisation as ggml-quants.c's dequantize_row_*: numpy only, written from those layouts.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fovea_testio import gguf, safetensors  # noqa: E402

# ggml type id, values per block, bytes per block.
TYPES = {"q4_0": (2, 32, 18), "q4_1": (3, 32, 20), "q5_0": (6, 32, 22), "q5_1": (7, 32, 24), "q8_0": (8, 32, 34),
         "q4_k": (12, 256, 144), "q5_k": (13, 256, 176), "q6_k": (14, 256, 210), "q8_k": (15, 256, 292)}


def f16(b, off):
    return np.frombuffer(b, "<f2", 1, off)[0].astype(np.float32)


def nib(q):
    return (q & 0xF).astype(np.int32), (q >> 4).astype(np.int32)


def scale_min_k4(j, q):
    if j < 4:
        return int(q[j] & 63), int(q[j + 4] & 63)
    return int((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4)), int((q[j + 4] >> 4) | ((q[j] >> 6) << 4))


def deq_block(kind, b):
    """One block's bytes → its float32 values (float32 arithmetic, as ggml's C)."""
    u = np.frombuffer(b, np.uint8)
    f = np.float32
    if kind in ("q4_0", "q4_1"):
        d = f16(b, 0)
        m = f16(b, 2) if kind == "q4_1" else None
        lo, hi = nib(u[4 if m is not None else 2:][:16])
        if m is None:
            return np.concatenate([(lo - 8).astype(f) * d, (hi - 8).astype(f) * d])
        return np.concatenate([lo.astype(f) * d + m, hi.astype(f) * d + m])
    if kind in ("q5_0", "q5_1"):
        one = kind == "q5_1"
        d = f16(b, 0)
        m = f16(b, 2) if one else None
        qh = int(np.frombuffer(b, "<u4", 1, 4 if one else 2)[0])
        lo, hi = nib(u[8 if one else 6:][:16])
        j = np.arange(16)
        h0 = ((qh >> j) << 4) & 0x10
        h1 = (qh >> (j + 12)) & 0x10
        x0, x1 = lo | h0, hi | h1
        if one:
            return np.concatenate([x0.astype(f) * d + m, x1.astype(f) * d + m])
        return np.concatenate([(x0 - 16).astype(f) * d, (x1 - 16).astype(f) * d])
    if kind == "q8_0":
        return f16(b, 0) * np.frombuffer(b, np.int8, 32, 2).astype(f)
    if kind == "q8_k":
        return np.frombuffer(b, "<f4", 1, 0)[0] * np.frombuffer(b, np.int8, 256, 4).astype(f)
    if kind in ("q4_k", "q5_k"):
        d, dmin = f16(b, 0), f16(b, 2)
        sc = u[4:16]
        qh = u[16:48] if kind == "q5_k" else None
        qs = u[48:176] if kind == "q5_k" else u[16:144]
        y = np.empty(256, f)
        for i in range(4):
            s1, m1 = scale_min_k4(2 * i, sc)
            s2, m2 = scale_min_k4(2 * i + 1, sc)
            lo, hi = nib(qs[32 * i:32 * i + 32])
            if qh is not None:
                lo = lo + np.where(qh & (1 << (2 * i)), 16, 0)
                hi = hi + np.where(qh & (1 << (2 * i + 1)), 16, 0)
            y[64 * i:64 * i + 32] = (d * f(s1)) * lo.astype(f) - dmin * f(m1)
            y[64 * i + 32:64 * i + 64] = (d * f(s2)) * hi.astype(f) - dmin * f(m2)
        return y
    if kind == "q6_k":
        ql, qh, sc = u[:128], u[128:192], np.frombuffer(b, np.int8, 16, 192)
        d = f16(b, 208)
        y = np.empty(256, f)
        for h in range(2):
            L, H, S = ql[64 * h:64 * h + 64].astype(np.int32), qh[32 * h:32 * h + 32].astype(np.int32), sc[8 * h:8 * h + 8]
            l = np.arange(32)
            q1 = ((L[l] & 0xF) | (((H >> 0) & 3) << 4)) - 32
            q2 = ((L[l + 32] & 0xF) | (((H >> 2) & 3) << 4)) - 32
            q3 = ((L[l] >> 4) | (((H >> 4) & 3) << 4)) - 32
            q4 = ((L[l + 32] >> 4) | (((H >> 6) & 3) << 4)) - 32
            iss = l // 16
            for k, q in enumerate((q1, q2, q3, q4)):
                y[128 * h + 32 * k + l] = d * S[iss + 2 * k].astype(f) * q.astype(f)
        return y
    raise ValueError(kind)


def dequantize(kind, data, n):
    _, block, size = TYPES[kind]
    return np.concatenate([deq_block(kind, data[i * size:(i + 1) * size]) for i in range(n // block)])


def random_blocks(kind, nblocks, rng):
    """Random quant bytes; scale fields set to finite f16 / f32 values of either sign."""
    _, block, size = TYPES[kind]
    out = bytearray(rng.integers(0, 256, nblocks * size, dtype=np.uint8).tobytes())
    for i in range(nblocks):
        o = i * size
        half = lambda: np.float16(rng.uniform(-0.05, 0.05)).tobytes()  # noqa: E731
        if kind in ("q4_0", "q5_0", "q8_0"):
            out[o:o + 2] = half()
        elif kind in ("q4_1", "q5_1", "q4_k", "q5_k"):
            out[o:o + 2], out[o + 2:o + 4] = half(), half()
        elif kind == "q6_k":
            out[o + 208:o + 210] = half()
        elif kind == "q8_k":
            out[o:o + 4] = np.float32(rng.uniform(-0.05, 0.05)).tobytes()
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                                                  "gguf_quants"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(7)
    rows, cols = 3, 512
    tensors, expected = [], {}
    for kind, (tid, block, _) in TYPES.items():
        data = random_blocks(kind, rows * cols // block, rng)
        tensors.append((kind, data, [rows, cols], tid))
        expected[kind] = dequantize(kind, data, rows * cols).reshape(rows, cols).astype(np.float32)
        assert np.isfinite(expected[kind]).all()
    gguf.write(os.path.join(a.out, "quants.gguf"), [], tensors)
    safetensors.write(os.path.join(a.out, "expected.safetensors"), expected)
    print(f"wrote {a.out}/quants.gguf and expected.safetensors ({', '.join(TYPES)})")


if __name__ == "__main__":
    main()
