"""GGUF files (llama.cpp's models and mmproj files), after the spec
(https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): "GGUF", u32 version, u64 tensor
count, u64 key/value count, the key/values, the tensor infos (name, u32 n_dims, u64 ne[] in ggml
order = row-major dims reversed, u32 ggml type, u64 offset into the data), padding to the
alignment, the data (each tensor padded to the alignment). No `gguf` package is used.

    g = read(path)                 # Gguf: version, kvs [[key, type, value]], tensors [{name, shape, type, data}]
    data = encode(g)               # its bytes again, laid out as write() lays them out
    write(path, kvs, tensors)      # kvs [(key, type, value)], tensors [(name, bytes, row-major shape, ggml type)]
    values = dequantize(t)         # numpy float32 of a tensor {type, shape, data}
"""
import struct

import numpy as np

# key/value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
TYPE_NAMES = {U8: "u8", I8: "i8", U16: "u16", I16: "i16", U32: "u32", I32: "i32", F32: "f32", BOOL: "bool",
              STRING: "str", ARRAY: "arr", U64: "u64", I64: "i64", F64: "f64"}
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
              U64: "<Q", I64: "<q", F64: "<d"}
INTEGER_TYPES = (U8, U16, U32, U64, I8, I16, I32, I64)

# ggml tensor types: (name, block elements, block bytes)
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_F64, GGML_BF16 = 0, 1, 2, 8, 28, 30
GGML = {GGML_F32: ("F32", 1, 4), GGML_F16: ("F16", 1, 2), GGML_Q4_0: ("Q4_0", 32, 18), GGML_Q8_0: ("Q8_0", 32, 34),
        GGML_F64: ("F64", 1, 8), GGML_BF16: ("BF16", 1, 2)}


class Gguf:
    """A GGUF file as data: kvs [[key, type, value]] (an array's value is (element type, [items]);
    strings that are not UTF-8 stay bytes), tensors [{name, shape (row-major), type, data}]."""

    def __init__(self, version, kvs, tensors):
        self.version, self.kvs, self.tensors = version, kvs, tensors

    def copy(self):
        return Gguf(self.version, [list(kv) for kv in self.kvs], [dict(t) for t in self.tensors])

    def kv(self, key):
        for k in self.kvs:
            if k[0] == key:
                return k
        return None

    def value(self, key, default=None):
        k = self.kv(key)
        if k is None:
            return default
        return list(k[2][1]) if k[1] == ARRAY else k[2]

    def set_kv(self, key, kind, value):
        k = self.kv(key)
        if k:
            k[1], k[2] = kind, value
        else:
            self.kvs.append([key, kind, value])

    def del_kv(self, key):
        self.kvs = [k for k in self.kvs if k[0] != key]

    def tensor(self, name):
        for t in self.tensors:
            if t["name"] == name:
                return t
        return None

    def del_tensor(self, name):
        self.tensors = [t for t in self.tensors if t["name"] != name]

    def alignment(self):
        """general.alignment when it is a power-of-two integer, else the spec's default 32."""
        k = self.kv("general.alignment")
        if k and k[1] in INTEGER_TYPES and k[2] > 0 and k[2] & (k[2] - 1) == 0:
            return k[2]
        return 32


def parse(b):
    """The Gguf of a file's bytes. Tensors of a type outside GGML get data None."""
    p = 0

    def take(fmt):
        nonlocal p
        v = struct.unpack_from(fmt, b, p)
        p += struct.calcsize(fmt)
        return v

    def string():
        nonlocal p
        (n,) = take("<Q")
        s = bytes(b[p:p + n])
        p += n
        try:
            return s.decode()
        except UnicodeDecodeError:
            return s

    def value(kind):
        if kind == STRING:
            return string()
        if kind == ARRAY:
            elem, n = take("<IQ")
            return (elem, [value(elem) for _ in range(n)])
        v = take(SCALAR_FMT[kind])[0]
        return bool(v) if kind == BOOL else v

    assert b[:4] == b"GGUF", "not a GGUF file"
    p = 4
    version, nt, nkv = take("<IQQ")
    kvs = []
    for _ in range(nkv):
        key = string()
        (kind,) = take("<I")
        kvs.append([key, kind, value(kind)])
    infos = []
    for _ in range(nt):
        name = string()
        (nd,) = take("<I")
        ne = list(take("<%dQ" % nd))
        kind, off = take("<IQ")
        infos.append((name, ne, kind, off))
    g = Gguf(version, kvs, [])
    align = g.alignment()
    start = (p + align - 1) // align * align
    for name, ne, kind, off in infos:
        data = None
        if kind in GGML:
            _, blk, nbytes = GGML[kind]
            size = numel(ne) // blk * nbytes
            data = bytes(b[start + off:start + off + size])
        g.tensors.append({"name": name, "shape": list(reversed(ne)), "type": kind, "data": data})
    return g


def read(path):
    with open(path, "rb") as f:
        return parse(f.read())


def encode_string(s):
    if isinstance(s, str):
        s = s.encode()
    return struct.pack("<Q", len(s)) + s


def encode_value(kind, v):
    if kind == STRING:
        return encode_string(v)
    if kind == ARRAY:
        elem, items = v
        return struct.pack("<IQ", elem, len(items)) + b"".join(encode_value(elem, x) for x in items)
    if kind == BOOL:
        return struct.pack("<B", 1 if v else 0)
    return struct.pack(SCALAR_FMT[kind], v)


def encode(g, alignment=None, pad_end=True):
    """The bytes of `g`: each tensor padded to the alignment (`alignment`, else the file's own);
    pad_end=False leaves the last tensor unpadded (the file ends with its data)."""
    align = alignment or g.alignment()
    head = b"GGUF" + struct.pack("<IQQ", g.version, len(g.tensors), len(g.kvs))
    for k, kind, v in g.kvs:
        head += encode_string(k) + struct.pack("<I", kind) + encode_value(kind, v)
    offset, infos, blobs = 0, [], []
    for t in g.tensors:
        ne = list(reversed(t["shape"]))
        infos.append(encode_string(t["name"]) + struct.pack("<I", len(ne)) +
                     b"".join(struct.pack("<Q", n) for n in ne) + struct.pack("<IQ", t["type"], offset))
        data = t["data"]
        pad = (-len(data)) % align
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    body = head + b"".join(infos)
    body += b"\0" * ((-len(body)) % align)
    if blobs and not pad_end:
        blobs[-1] = blobs[-1][:len(g.tensors[-1]["data"])]
    return body + b"".join(blobs)


def write(path, kvs, tensors, alignment=32, version=3):
    """kvs: [(key, type, value)]; tensors: [(name, data bytes, row-major shape, ggml type)]."""
    g = Gguf(version, [list(kv) for kv in kvs],
             [{"name": n, "data": d, "shape": list(s), "type": k} for n, d, s, k in tensors])
    with open(path, "wb") as f:
        f.write(encode(g, alignment))


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def dequantize(t):
    """numpy float32 values of tensor t ({type, shape, data}) of type F32, F16, BF16, F64 or Q8_0."""
    kind, n, d = t["type"], numel(t["shape"]), t["data"]
    if kind == GGML_F32:
        x = np.frombuffer(d, "<f4", n).astype(np.float32)
    elif kind == GGML_F16:
        x = np.frombuffer(d, "<f2", n).astype(np.float32)
    elif kind == GGML_F64:
        x = np.frombuffer(d, "<f8", n).astype(np.float32)
    elif kind == GGML_BF16:
        x = (np.frombuffer(d, "<u2", n).astype(np.uint32) << 16).view(np.float32)
    elif kind == GGML_Q8_0:  # blocks of 32: an f16 scale, then 32 int8
        blk = np.frombuffer(d, np.uint8, n // 32 * 34).reshape(-1, 34)
        scale = blk[:, :2].copy().view("<f2").astype(np.float32)
        x = (scale * blk[:, 2:].view(np.int8).astype(np.float32)).reshape(-1)
    else:
        raise ValueError("%s: ggml type %d is not read here" % (t["name"], kind))
    return x.reshape(t["shape"])
