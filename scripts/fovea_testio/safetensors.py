"""safetensors files: an 8-byte little-endian header length, a JSON header
{name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the tensors' bytes.

A tensor handed to encode()/write() is one of
  - a numpy array (its dtype names the file's dtype: F32, F16, F64, I8, I16, I32, I64, U8, BOOL);
  - ("BF16", uint16 array): raw bfloat16 bits (numpy has no bfloat16);
  - (dtype, shape, bytes): anything, as it is (hostile files, bytes copied from another file).
from_torch() turns a torch state dict into such tensors.
"""
import json
import os
import struct

import numpy as np

DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
    "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64,
    "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "BF16": np.uint16,  # numpy has no bfloat16: raw bits, see bf16_to_f32
}
_NAMES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.float64): "F64",
          np.dtype(np.int8): "I8", np.dtype(np.int16): "I16", np.dtype(np.int32): "I32",
          np.dtype(np.int64): "I64", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL"}


def parse(data):
    """({name: (dtype, shape, bytes)} in header order, metadata) of a file's bytes."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], bytes(data[8 + n + begin:8 + n + end]))
    return out, metadata


def read(path, strict=False):
    """{name: np.ndarray} (in data order), {str: str}. strict: also assert what a careful writer
    guarantees: the data buffer starts 8-byte aligned, and the tensors cover it exactly (no gap,
    no overlap, no trailing bytes)."""
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
        out[name] = np.frombuffer(buf[begin:end], dtype=dt).reshape(info["shape"])
    if strict:
        assert covered == len(buf), "trailing bytes"
    return out, metadata


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_torch(arr):
    import torch
    return torch.from_numpy(np.array(arr))


def _entry(value):
    """(dtype, shape, bytes) of a tensor as encode() takes it."""
    if isinstance(value, tuple) and len(value) == 3:
        dtype, shape, raw = value
        return dtype, list(shape), bytes(raw)
    if isinstance(value, tuple):  # ("BF16", uint16 array)
        dtype, arr = value
    else:
        arr = np.ascontiguousarray(value)
        dtype = _NAMES[arr.dtype]
    raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
    return dtype, list(arr.shape), raw


def encode(tensors, metadata=None, compact=True, metadata_first=True):
    """The file's bytes. tensors: {name: tensor} or [(name, tensor)], stored in that order.
    compact: the JSON header without spaces (as the safetensors library writes it);
    metadata_first: "__metadata__" before the tensors (else after them)."""
    items = tensors.items() if isinstance(tensors, dict) else tensors
    header, blobs, offset = {}, [], 0
    meta = {str(k): str(v) for k, v in metadata.items()} if metadata else None
    if meta is not None and metadata_first:
        header["__metadata__"] = meta
    for name, value in items:
        dtype, shape, raw = _entry(value)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if meta is not None and not metadata_first:
        header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":") if compact else None).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def write(path, tensors, metadata=None, **kw):
    """encode() into `path`, through a temporary file renamed into place."""
    data = encode(tensors, metadata, **kw)
    tmp = str(path) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def raw(header, data=b"", hlen=None):
    """A file from a header as it is (a dict, JSON-dumped with default spacing, or bytes) and a
    data buffer, with an optional wrong header length: for hostile files."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def from_torch(tensors, dtype=None):
    """{name: (dtype, shape, bytes)} of {name: torch tensor}. dtype (F32, F16, BF16) converts every
    floating tensor to it and every other one to I32; None keeps each tensor's own dtype."""
    import torch
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
             torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
             torch.uint8: "U8", torch.bool: "BOOL"}
    out = {}
    for name, t in tensors.items():
        t = t.detach().contiguous()
        if dtype is None:
            dt = names[t.dtype]
            if t.dtype == torch.bfloat16:
                raw = t.view(torch.int16).numpy().tobytes()
            else:
                raw = t.numpy().tobytes()
        elif not t.is_floating_point():
            dt, raw = "I32", t.to(torch.int32).numpy().astype("<i4").tobytes()
        elif dtype == "BF16":  # round to nearest even, as torch's .to(bfloat16)
            dt = dtype
            raw = t.to(torch.float32).to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            dt = dtype
            raw = t.to(torch.float32).numpy().astype({"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
        out[name] = (dt, list(t.shape), raw)
    return out


def save_torch(path, tensors, metadata=None, dtype="F32"):
    """write() of {name: torch tensor}: floating tensors stored as dtype, the others as I32."""
    write(path, from_torch(tensors, dtype), metadata)
