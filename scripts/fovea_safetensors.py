"""Read safetensors files with nothing but numpy: the header parsed by hand.

    from fovea_safetensors import read
    tensors, metadata = read("tokens.safetensors")   # {name: np.ndarray}, {str: str}
    t = to_torch(tensors["patches"])                   # optional, if torch is installed

Used by the tests (to check fovea's files with a reader fovea did not write) and by the
fixture and benchmark scripts.
"""
import json
import struct

import numpy as np

DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
    "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64,
    "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "BF16": np.uint16,  # numpy has no bfloat16: raw bits, see bf16_to_f32
}


def read(path, strict=False):
    """{name: np.ndarray}, {str: str}. strict: also assert what a careful writer guarantees:
    the data buffer starts 8-byte aligned, and the tensors cover it exactly (no gap, no overlap,
    no trailing bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    buf = memoryview(data)[8 + n:]
    if strict:
        assert (8 + n) % 8 == 0, "data buffer should start 8-byte aligned"
    out = {}
    covered = 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        if strict:
            assert begin == covered, f"{name}: gap or overlap at {begin}"
            covered = end
        dt = np.dtype(DTYPES[info["dtype"]]).newbyteorder("<")
        arr = np.frombuffer(buf[begin:end], dtype=dt).reshape(info["shape"])
        out[name] = arr
    if strict:
        assert covered == len(buf), "trailing bytes"
    return out, metadata


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def write(path, tensors, metadata=None):
    """Writes {name: np.ndarray} (F32/F16/I32/I64/U8; BF16 as uint16 with name in bf16_names)."""
    rev = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
           np.dtype(np.int64): "I64", np.dtype(np.uint8): "U8", np.dtype(np.float64): "F64",
           np.dtype(np.int8): "I8", np.dtype(np.int16): "I16"}
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name, arr in tensors.items():
        if isinstance(arr, tuple):  # ("BF16", uint16 array)
            dtype, arr = arr
        else:
            arr = np.ascontiguousarray(arr)
            dtype = rev[arr.dtype]
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    import os
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def to_torch(arr):
    import torch
    return torch.from_numpy(np.array(arr))
