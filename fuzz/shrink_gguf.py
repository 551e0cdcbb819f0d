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
import struct
import sys

SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
BLOCK = {0: (1, 4), 1: (1, 2), 8: (32, 34), 30: (1, 2)}  # the types fovea decodes: F32, F16, Q8_0, BF16


def shrink(src: bytes) -> bytes:
    p = 0

    def take(fmt):
        nonlocal p
        v = struct.unpack_from(fmt, src, p)
        p += struct.calcsize(fmt)
        return v

    def string():
        nonlocal p
        (n,) = take("<Q")
        s = src[p:p + n]
        p += n
        return s

    assert src[:4] == b"GGUF"
    p = 4
    version, n_tensors, n_kv = take("<IQQ")
    alignment = 32
    for _ in range(n_kv):
        key = string()
        (t,) = take("<I")
        if t == 9:
            et, n = take("<IQ")
            for _ in range(n):
                if et == 8:
                    string()
                else:
                    p += SCALAR[et]
        elif t == 8:
            string()
        else:
            if key == b"general.alignment":
                (alignment,) = struct.unpack_from("<I", src, p)
            p += SCALAR[t]
    kv_end = p
    infos = []
    for _ in range(n_tensors):
        name = string()
        (nd,) = take("<I")
        ne = take("<%dQ" % nd)
        t, off = take("<IQ")
        infos.append((name, ne, t, off))
    data_start = (p + alignment - 1) // alignment * alignment

    out = bytearray(src[:4] + struct.pack("<IQQ", version, n_tensors, n_kv) + src[24:kv_end])
    blobs, offset = [], 0
    for name, ne, t, off in infos:
        block, nbytes = BLOCK[t]
        new_ne = [block if block > 1 else min(ne[0], 4)] + [min(d, 2) for d in ne[1:]]
        numel = 1
        for d in new_ne:
            numel *= d
        size = numel // block * nbytes
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(new_ne))
        out += struct.pack("<%dQ" % len(new_ne), *new_ne) + struct.pack("<IQ", t, offset)
        blobs.append((offset, src[data_start + off:data_start + off + size]))
        offset = (offset + size + alignment - 1) // alignment * alignment
    start = (len(out) + alignment - 1) // alignment * alignment
    out += bytes(start - len(out))
    for off, blob in blobs:
        out += bytes(start + off - len(out)) + blob
    return bytes(out)


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        data = shrink(f.read())
    with open(sys.argv[2], "wb") as f:
        f.write(data)
