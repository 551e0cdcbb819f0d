#!/usr/bin/python3
"""Rewrite a GGUF mmproj with its matrices in Q8_0, as llama.cpp's converter writes one with
--outtype q8_0: 2-D weights whose rows are whole 32-value blocks become Q8_0 (ggml's
quantize_row_q8_0_ref: per block d = max|x| / 127 stored as f16, q = round(x / d)); 1-D tensors
(norms, biases, the class embedding) and the position embedding are stored F32; the patch
embedding (a 4-D convolution kernel) stays F16. Key/values are copied as they are.

    /usr/bin/python3 scripts/gguf_requantize.py IN.gguf OUT.gguf

Reads F32, F16, BF16 and Q8_0 input tensors. numpy only.
"""
import struct
import sys

import numpy as np

GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30


def read_gguf(path):
    b = open(path, "rb").read()
    assert b[:4] == b"GGUF", "not a GGUF file"
    version, nt, nkv = struct.unpack_from("<IQQ", b, 4)
    pos = 24

    def string(pos):
        n = struct.unpack_from("<Q", b, pos)[0]
        return b[pos + 8:pos + 8 + n].decode(), pos + 8 + n

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(kind, pos):
        if kind == 8:
            return string(pos)[1]
        if kind == 9:
            elem, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            for _ in range(n):
                pos = skip(elem, pos)
            return pos
        return pos + sizes[kind]

    kv_start = pos
    alignment = 32
    for _ in range(nkv):
        key, pos = string(pos)
        kind = struct.unpack_from("<I", b, pos)[0]
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", b, pos + 4)[0]
        pos = skip(kind, pos + 4)
    kv = b[kv_start:pos]
    infos = []
    for _ in range(nt):
        name, pos = string(pos)
        nd = struct.unpack_from("<I", b, pos)[0]
        ne = list(struct.unpack_from(f"<{nd}Q", b, pos + 4))
        kind, off = struct.unpack_from("<IQ", b, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        infos.append((name, ne, kind, off))
    data0 = (pos + alignment - 1) // alignment * alignment
    tensors = []
    for name, ne, kind, off in infos:
        n = int(np.prod(ne))
        o = data0 + off
        if kind == GGML_F32:
            x = np.frombuffer(b, "<f4", n, o).astype(np.float32)
        elif kind == GGML_F16:
            x = np.frombuffer(b, "<f2", n, o).astype(np.float32)
        elif kind == GGML_BF16:
            x = (np.frombuffer(b, "<u2", n, o).astype(np.uint32) << 16).view(np.float32)
        elif kind == GGML_Q8_0:
            blk = np.frombuffer(b, np.uint8, n // 32 * 34, o).reshape(-1, 34)
            d = blk[:, :2].copy().view("<f2").astype(np.float32)
            x = (d * blk[:, 2:].view(np.int8).astype(np.float32)).reshape(-1)
        else:
            sys.exit(f"gguf_requantize: {name}: ggml type {kind} is not read here")
        tensors.append((name, ne, x))
    return version, nkv, kv, alignment, tensors


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
    version, nkv, kv, alignment, tensors = read_gguf(sys.argv[1])
    out, infos, offset = [], b"", 0
    for name, ne, x in tensors:
        if len(ne) == 2 and ne[0] % 32 == 0 and "position" not in name and "pos_embd" not in name:
            kind, data = GGML_Q8_0, q8_0(x)
        elif len(ne) >= 3:
            kind, data = GGML_F16, x.astype("<f2").tobytes()
        else:
            kind, data = GGML_F32, x.astype("<f4").tobytes()
        nb = name.encode()
        infos += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", kind, offset)
        pad = (-len(data)) % alignment
        out.append(data + b"\0" * pad)
        offset += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), nkv) + kv + infos
    head += b"\0" * ((-len(head)) % alignment)
    with open(sys.argv[2], "wb") as f:
        f.write(head + b"".join(out))


if __name__ == "__main__":
    main()
