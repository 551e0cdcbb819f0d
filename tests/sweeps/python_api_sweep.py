#!/usr/bin/env python3
"""Hostile-argument sweep of fovea's Python API: bad arguments must raise, not crash or hang.

Every public entry point of the `fovea` package (tokenize, Model and its encode / encode_full,
Tokens, Encoding, TensorFile, load / save, VideoReader, video, VideoFrameResult and the module-level functions
in fovea/__init__.py) is called with hostile arguments: arrays of every dtype, shape and stride
pattern (0-size, 1x1, 1x100000, dims past 2^31, broadcast, flipped, overlapping, read-only,
big-endian), garbage and truncated encoded images (PNG, JPEG, PNM, BMP, GIF, QOI, WebP, TIFF,
Y4M headers claiming huge sizes), paths that do not exist / are directories / devices / FIFOs,
junk safetensors, GGUF, PyTorch and config.json files, keyword arguments set to None, negative,
zero, 2**31, 2**63, NaN, inf, wrong types and wrong nesting.

Each case runs in its own child process (a fresh `python3 -c ...`) with a timeout, an address-
space limit (setrlimit RLIMIT_AS, 4 GiB unless a case says otherwise), no core files and nice 5,
so a crash is observed, not suffered. A case's outcome is one of

    ok          returned normally (and the case allowed that)
    raised      a normal Python exception with a clear message (and the case allowed that)
    CRASH       killed by a signal (SIGSEGV, SIGABRT: std::terminate, SIGFPE, ...) or died
                without reporting, also at interpreter exit
    HANG        still running at the timeout (60 s unless a case says otherwise)
    MEMORY      peak RSS over the case's budget (2 GiB unless a case says otherwise)
    UNHELPFUL   SystemError, an empty message, an odd exception class, or a message naming C++
                types ("Unable to cast ... to C++ type 'std::pair<int, int>'")
    UNEXPECTED  returned where an exception was due (bad input silently accepted), or raised
                where the input is valid
    SILENT      the case's own check failed (a wrong result without an error)

The upper-case outcomes are findings; the script prints each with its code and exits 1 if there
are any.

Run from the repository root:

    PYTHONPATH=build/python /usr/bin/python3 tests/sweeps/python_api_sweep.py            # ~1500 cases, ~14 min on 2 busy cores
    PYTHONPATH=build/python /usr/bin/python3 tests/sweeps/python_api_sweep.py --quick    # ~1140: no video / big-memory cases
    ... --only 'load|save' --jobs 1 --json /tmp/sweep.json --verbose --keep

Fixtures (junk files, crafted headers, tiny videos made with ffmpeg) are written to a temporary
directory, removed at the end unless --keep. The checkpoints are the tiny ones under
tests/data/encoder. Nothing outside that temporary directory is written, apart from writes that
must fail (/proc/x, /sys/x, /, /dev/full).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import List, Optional

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from fovea_testio.safetensors import raw as safetensors  # noqa: E402
GiB = 1 << 30
MiB = 1 << 20

# ---------------------------------------------------------------------------------------------
# cases


@dataclass
class Case:
    name: str
    code: str
    expect: Optional[str] = None  # "ok", "exc" or None (either, as long as it is clean)
    quick: bool = True            # part of --quick
    timeout: float = 60.0
    mem_limit: int = 4 * GiB      # RLIMIT_AS
    rss_budget: int = 2 * GiB     # peak RSS over this is a finding
    outcome: str = ""
    detail: str = ""
    secs: float = 0.0
    rss_mb: float = 0.0
    report: dict = field(default_factory=dict)


CASES: List[Case] = []


def case(name, code, expect=None, **kw):
    code = code.strip("\n")
    first, _, rest = code.partition("\n")
    if rest and first[:1] not in (" ", "\t"):  # a one-line setup, then an indented block
        code = first + "\n" + textwrap.dedent(rest).strip("\n")
    else:
        code = textwrap.dedent(code).strip("\n")
    CASES.append(Case(name, code, expect, **kw))


def r(v):
    """repr() that round-trips nan / inf through the prelude's names."""
    return repr(v)


# The child's prelude: names every case can use.
PRELUDE = r'''
import os, sys, io, gc, math, time, json, struct, pathlib, threading, warnings
import numpy as np
import fovea
from fovea import _fovea
nan = float("nan"); inf = float("inf")
R = os.environ["SWEEP_REPO"]; F = os.environ["SWEEP_FIX"]; W = os.environ["SWEEP_WORK"]
IMG = R + "/tests/data/images/source.png"
ENC = R + "/tests/data/encoder"
MODEL = ENC + "/timm_vit/model.safetensors"          # P = 8, D = 32
VIDEO = R + "/tests/data/video/small.mp4"              # 160x96, 12 frames
A = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)
G = np.ascontiguousarray(A[..., 1])
_model = None
def M():
    global _model
    if _model is None:
        _model = fovea.Model(MODEL)
    return _model
def T(image=None, **kw):
    return fovea.tokenize(A if image is None else image, **kw)
def rb(p):
    with open(p, "rb") as f:
        return f.read()
def touch_tokens(t):
    """Every accessor of a Tokens; returns a short summary."""
    out = [len(t), repr(t), t.patches.shape, t.patches.dtype, t.positions.shape, t.levels.shape, t.rate_map.shape,
           t.relevance.shape, t.boxes.shape, t.image_size, t.query_outside, t.patch_size, t.budget, t.mode,
           t.source[:40], sorted(t.metadata)[:3], sorted(t.timings)]
    float(np.asarray(t.patches, np.float64).sum()); float(t.positions.sum()); int(t.levels.sum())
    int(t.rate_map.sum()); float(np.nansum(t.relevance)); float(t.boxes.sum())
    s = t.seen(); o = t.overlay()
    assert s.shape == (t.image_size[1], t.image_size[0], 3), "SILENT: seen() shape %r vs image_size %r" % (s.shape, t.image_size)
    assert o.shape == s.shape, "SILENT: overlay() shape %r" % (o.shape,)
    out.append(s.shape)
    return out
def touch_encoding(e):
    out = [len(e), e.embeddings.shape, e.encode_ms >= 0, e.precision, e.attention]
    for k in ("projected", "class_token", "pooled", "image_embeds", "logits"):
        v = getattr(e, k)
        out.append(None if v is None else v.shape)
        if v is not None: float(np.nansum(v))
    float(np.nansum(e.embeddings))
    return out
def touch_file(f):
    out = [len(f), repr(f), f.path, f.metadata, list(f), f.keys()]
    for k in f.keys():
        a = f[k]
        out.append((k[:20], a.dtype, a.shape))
        np.asarray(a).tobytes()
        assert k in f
    return out
def touch_frame(fr):
    out = [len(fr), repr(fr), fr.index, fr.pts, fr.patches.shape, fr.positions.shape, fr.levels.shape,
           fr.recomputed.shape, fr.previous_row.shape, fr.dirty_tiles, fr.tiles, fr.resampled_tokens,
           fr.recomputed_tokens, fr.refresh, fr.refresh_reason, fr.layout_changed, fr.approximate, sorted(fr.timings)]
    e = fr.embeddings
    out.append(None if e is None else e.shape)
    if e is not None: float(np.nansum(e))
    float(np.nansum(np.asarray(fr.patches, np.float64)))
    return out
def touch_reader(vr, limit=100):
    n = 0
    info = vr.info
    for f in vr:
        assert f.image.ndim in (2, 3) and f.image.dtype == np.uint8
        int(f.image[::7, ::7].sum()); n += 1
        if n >= limit: break
    return [n, info, vr.frames_decoded, vr.corrupt_packets, vr.corrupt_frames, vr.timestamps_repaired, vr.warnings[:3]]
def fifo_with(data, name="fifo"):
    """A FIFO a thread writes `data` into (then closes): a non-seekable file."""
    p = os.path.join(W, name)
    os.mkfifo(p)
    def writer():
        with open(p, "wb") as f:
            f.write(data)
    threading.Thread(target=writer, daemon=True).start()
    return p
'''

# The child's driver: run the prelude and the case, report to SWEEP_OUT as JSON.
CHILD = r'''
import os, sys, json, time, traceback, resource, warnings
out = os.environ["SWEEP_OUT"]
def report(d):
    d["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open(out, "w") as f:
        json.dump(d, f, default=str)
g = {"__name__": "__sweep__"}
t0 = time.time()
try:
    exec(compile(os.environ["SWEEP_PRELUDE"], "<prelude>", "exec"), g)
except BaseException as e:
    report({"status": "setup", "type": type(e).__name__, "msg": str(e)[:2000], "tb": traceback.format_exc()[-2000:]})
    sys.exit(0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    t0 = time.time()
    try:
        exec(compile(os.environ["SWEEP_CODE"], "<case>", "exec"), g)
        res = g.get("result")
        try:
            text = repr(res)
        except BaseException as e:
            text = "<repr raised %s: %s>" % (type(e).__name__, e)
        d = {"status": "ok", "result": text[:600]}
    except BaseException as e:
        d = {"status": "exc", "type": type(e).__name__, "module": type(e).__module__,
             "mro": [c.__name__ for c in type(e).__mro__], "msg": str(e)[:3000], "tb": traceback.format_exc()[-2500:]}
    d["secs"] = time.time() - t0
    d["warnings"] = [("%s: %s" % (w.category.__name__, w.message))[:300] for w in caught]
report(d)
sys.stdout.flush(); sys.stderr.flush()
'''

# Exception classes a bad argument may raise (and their subclasses, by name in the MRO).
NORMAL_EXC = {"ValueError", "TypeError", "RuntimeError", "OSError", "KeyError", "IndexError", "MemoryError",
              "StopIteration", "OverflowError", "NotImplementedError", "UnicodeError", "RuntimeWarning"}
# Message fragments that mean the user sees C++ internals instead of what to do.
CXX_RE = re.compile(r"C\+\+ type|Unable to cast|std::|__cxx11|PYBIND11|pybind11::|basic_string|"
                    r"Caught an unknown exception|unknown exception|\bN5fovea|St\d+[a-z_]+|fovea::")


# ---------------------------------------------------------------------------------------------
# fixtures


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(w, h, bit_depth=8, color=2, idat=None, extra=b"", interlace=0) -> bytes:
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color, 0, 0, interlace)
    if idat is None:
        ch = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(color, 3)
        row = b"\0" + bytes((w * ch * bit_depth + 7) // 8)
        idat = zlib.compress(row * h)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


def write(path, data: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def ffmpeg(*args) -> bool:
    try:
        return subprocess.run(["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *args],
                              capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def build_fixtures(F: str, quick: bool) -> dict:
    """Junk and crafted files; returns {name: path} of the ones that were made."""
    import random
    rnd = random.Random(1234)
    fx = {}

    def put(name, data):
        fx[name] = write(os.path.join(F, name), data)

    src_png = open(os.path.join(REPO, "tests/data/images/source.png"), "rb").read()
    put("junk.bin", bytes(rnd.getrandbits(8) for _ in range(4096)))
    put("empty.bin", b"")
    put("text.txt", b"hello, this is not an image\n" * 10)
    put("zeros_1m.bin", bytes(1 << 20))
    # PNG: truncations, a bad CRC, crafted IHDRs.
    put("png_trunc8.png", src_png[:8])
    put("png_trunc33.png", src_png[:33])
    put("png_trunc100.png", src_png[:100])
    put("png_trunc_half.png", src_png[: len(src_png) // 2])
    put("png_no_iend.png", src_png[:-12])
    bad = bytearray(src_png)
    bad[60] ^= 0xFF
    put("png_badcrc.png", bytes(bad))
    put("png_0x0.png", png(0, 0, idat=zlib.compress(b"")))
    put("png_huge.png", png(0x7FFFFFFF, 0x7FFFFFFF, idat=zlib.compress(b"\0" * 64)))
    put("png_huge_w.png", png(0x7FFFFFFF, 1, idat=zlib.compress(b"\0" * 64)))
    put("png_2e31.png", png(0x80000000, 1, idat=zlib.compress(b"\0" * 64)))
    put("png_wide.png", png(100000, 1))
    put("png_tall.png", png(1, 100000))
    put("png_1x1.png", png(1, 1))
    put("png_16bit.png", png(8, 8, bit_depth=16))
    put("png_gray1.png", png(13, 7, bit_depth=1, color=0))
    put("png_palette_noplte.png", png(8, 8, color=3))
    put("png_bad_depth.png", png(8, 8, bit_depth=7))
    put("png_bad_color.png", png(8, 8, color=5))
    put("png_interlaced_junk.png", png(8, 8, interlace=1))
    put("png_idat_short.png", png(64, 64, idat=zlib.compress(b"\0" * 10)))
    put("png_idat_garbage.png", png(16, 16, idat=bytes(rnd.getrandbits(8) for _ in range(200))))
    put("png_ztxt_bomb.png", png(4, 4, extra=png_chunk(b"zTXt", b"k\0\0" + zlib.compress(b"\0" * (64 * MiB), 9))))
    put("png_many_chunks.png", png(4, 4, extra=png_chunk(b"tEXt", b"k\0v") * 20000))
    # JPEG (PIL), then truncations and a patched SOF.
    try:
        import io
        import numpy as np
        from PIL import Image
        a = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)
        b = io.BytesIO()
        Image.fromarray(a).save(b, "JPEG", quality=80)
        jpg = b.getvalue()
        put("ok.jpg", jpg)
        put("jpg_trunc2.jpg", jpg[:2])
        put("jpg_trunc200.jpg", jpg[:200])
        put("jpg_trunc_half.jpg", jpg[: len(jpg) // 2])
        sof = jpg.find(b"\xff\xc0")
        for tag, (hh, ww) in {"huge": (65535, 65535), "zero": (0, 0), "w0": (64, 0)}.items():
            j = bytearray(jpg)
            j[sof + 5:sof + 9] = struct.pack(">HH", hh, ww)
            put(f"jpg_sof_{tag}.jpg", bytes(j))
        j = bytearray(jpg)
        j[sof + 9] = 77  # component count
        put("jpg_sof_ncomp.jpg", bytes(j))
        for orient in (0, 9, 255, 65535):
            ex = Image.Exif()
            ex[0x0112] = orient
            b = io.BytesIO()
            Image.fromarray(a).save(b, "JPEG", exif=ex.tobytes())
            put(f"jpg_exif_{orient}.jpg", b.getvalue())
        b = io.BytesIO()
        Image.fromarray(a).convert("CMYK").save(b, "JPEG")
        put("cmyk.jpg", b.getvalue())
        b = io.BytesIO()
        Image.fromarray(a).save(b, "JPEG", progressive=True)
        put("progressive.jpg", b.getvalue())
        put("progressive_trunc.jpg", b.getvalue()[: len(b.getvalue()) * 2 // 3])
    except Exception as e:  # no PIL: those cases report the missing file
        print(f"(no JPEG fixtures: {e})", file=sys.stderr)
    # Other formats' headers claiming huge or zero sizes (decoded by FFmpeg when built with it).
    put("pnm_huge.ppm", b"P6\n100000 100000\n255\n" + bytes(64))
    put("pnm_zero.ppm", b"P6\n0 0\n255\n")
    put("pnm_neg.ppm", b"P6\n-5 5\n255\n" + bytes(64))
    put("pnm_overflow.pgm", b"P5\n99999999999999999999 1\n255\n" + bytes(64))
    put("pnm_maxval.ppm", b"P6\n4 4\n65536\n" + bytes(96))
    put("pnm_short.ppm", b"P6\n64 64\n255\n" + bytes(100))
    put("pfm_neg.pfm", b"Pf\n4 4\n-1.0\n" + struct.pack("<16f", *([float("nan")] * 16)))
    put("pam_depth.pam", b"P7\nWIDTH 4\nHEIGHT 4\nDEPTH 99\nMAXVAL 255\nTUPLTYPE RGB\nENDHDR\n" + bytes(64))
    put("bmp_huge.bmp", b"BM" + struct.pack("<IHHI", 70, 0, 0, 54) +
        struct.pack("<IiiHHIIiiII", 40, 0x7FFFFFFF, -0x80000000, 1, 24, 0, 0, 0, 0, 0, 0) + bytes(16))
    put("gif_huge.gif", b"GIF89a" + struct.pack("<HH", 65535, 65535) + b"\xf7\0\0" + bytes(768) +
        b",\0\0\0\0" + struct.pack("<HH", 65535, 65535) + b"\0\x08\x02\x4c\x01\0;")
    put("qoi_huge.qoi", b"qoif" + struct.pack(">II", 0x80000000, 0x80000000) + b"\x03\x00" + bytes(16) + b"\0" * 7 + b"\1")
    put("webp_junk.webp", b"RIFF" + struct.pack("<I", 1000) + b"WEBPVP8 " + struct.pack("<I", 990) + bytes(64))
    put("tiff_junk.tiff", b"II*\x00\x08\x00\x00\x00" + struct.pack("<H", 3) +
        struct.pack("<HHII", 256, 4, 1, 0x7FFFFFFF) + struct.pack("<HHII", 257, 4, 1, 0x7FFFFFFF) +
        struct.pack("<HHII", 273, 4, 1, 8) + b"\0\0\0\0")
    rgb_tiff = open(os.path.join(REPO, "tests/data/images/rgb.tiff"), "rb").read()
    put("tiff_trunc.tiff", rgb_tiff[: len(rgb_tiff) // 3])
    put("psd_junk.psd", b"8BPS\x00\x01" + bytes(6) + struct.pack(">HIIHH", 3, 300000, 300000, 8, 3) + bytes(64))
    put("j2k_trunc.j2k", open(os.path.join(REPO, "tests/data/images/rgb.j2k"), "rb").read()[:80])
    put("webp_trunc.webp", open(os.path.join(REPO, "tests/data/images/lossy.webp"), "rb").read()[:60])
    put("y4m_huge.y4m", b"YUV4MPEG2 W100000 H100000 F25:1 C420jpeg\nFRAME\n" + bytes(256))
    put("y4m_zero.y4m", b"YUV4MPEG2 W0 H0 F25:1 C420jpeg\nFRAME\n" + bytes(256))
    put("y4m_fps0.y4m", b"YUV4MPEG2 W16 H16 F0:0 C420jpeg\nFRAME\n" + bytes(384) + b"FRAME\n" + bytes(384))
    # safetensors: headers a hostile or broken writer could produce.
    T8 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    st = {
        "st_ok": safetensors({"a": T8}, bytes(8)),
        "st_hlen_huge": safetensors({"a": T8}, bytes(8), hlen=2**64 - 1),
        "st_hlen_past_end": safetensors({"a": T8}, bytes(8), hlen=5000),
        "st_hlen_zero": safetensors(b"", b"", hlen=0),
        "st_short": b"\x10\0\0",
        "st_not_json": safetensors(b"{not json at all", bytes(8)),
        "st_array": safetensors(b"[1, 2, 3]"),
        "st_null": safetensors(b"null"),
        "st_empty_obj": safetensors(b"{}"),
        "st_dtype_bogus": safetensors({"a": dict(T8, dtype="X9")}, bytes(8)),
        "st_dtype_int": safetensors({"a": dict(T8, dtype=5)}, bytes(8)),
        "st_shape_neg": safetensors({"a": dict(T8, shape=[-2])}, bytes(8)),
        "st_shape_float": safetensors({"a": dict(T8, shape=[2.0])}, bytes(8)),
        "st_shape_overflow": safetensors({"a": dict(T8, shape=[2**32, 2**32, 2**32])}, bytes(8)),
        "st_shape_2e63": safetensors({"a": dict(T8, shape=[2**63])}, bytes(8)),
        "st_offsets_reversed": safetensors({"a": dict(T8, data_offsets=[8, 0])}, bytes(8)),
        "st_offsets_past": safetensors({"a": dict(T8, data_offsets=[0, 2**64 - 1])}, bytes(8)),
        "st_offsets_mismatch": safetensors({"a": dict(T8, data_offsets=[0, 4])}, bytes(8)),
        "st_offsets_string": safetensors({"a": dict(T8, data_offsets="0,8")}, bytes(8)),
        "st_overlap": safetensors({"a": T8, "b": T8}, bytes(8)),
        "st_gap": safetensors({"a": dict(T8, data_offsets=[8, 16])}, bytes(16)),
        "st_missing_field": safetensors({"a": {"dtype": "F32", "shape": [2]}}, bytes(8)),
        "st_tensor_not_obj": safetensors({"a": [1, 2]}, bytes(8)),
        "st_meta_nonstr": safetensors({"__metadata__": {"k": 5}, "a": T8}, bytes(8)),
        "st_meta_nested": safetensors({"__metadata__": {"k": {"x": [1]}}, "a": T8}, bytes(8)),
        "st_meta_array": safetensors({"__metadata__": [1], "a": T8}, bytes(8)),
        "st_dup_keys": safetensors(b'{"a": ' + json.dumps(T8).encode() + b', "a": ' + json.dumps(T8).encode() + b"}", bytes(8)),
        "st_deep": safetensors(b'{"__metadata__": {"k": "v"}, "x": ' + b"[" * 200000 + b"]" * 200000 + b"}"),
        "st_bf16": safetensors({"a": dict(T8, dtype="BF16", shape=[4])}, bytes(8)),
        "st_f8": safetensors({"a": dict(T8, dtype="F8_E4M3", shape=[8])}, bytes(8)),
        "st_bool": safetensors({"a": dict(T8, dtype="BOOL", shape=[8])}, bytes(8)),
        "st_u32": safetensors({"a": dict(T8, dtype="U32", shape=[2])}, bytes(8)),
        "st_u64": safetensors({"a": dict(T8, dtype="U64", shape=[1])}, bytes(8)),
        "st_c64": safetensors({"a": dict(T8, dtype="C64", shape=[1])}, bytes(8)),
        "st_scalar": safetensors({"a": dict(T8, shape=[], data_offsets=[0, 4])}, bytes(4)),
        "st_zero_size": safetensors({"a": dict(T8, shape=[0, 5], data_offsets=[0, 0])}),
        "st_zero_huge_dim": safetensors({"a": dict(T8, shape=[0, 2**62], data_offsets=[0, 0])}),
        "st_unicode_name": safetensors({"é\u0000\n\"": T8}, bytes(8)),
        "st_trailing_nul": safetensors(json.dumps({"a": T8}).encode() + b"\0\0\0", bytes(8)),
        "st_padded": safetensors(json.dumps({"a": T8}).encode() + b"      ", bytes(8)),
        "st_invalid_utf8": safetensors(b'{"\xff\xfe": ' + json.dumps(T8).encode() + b"}", bytes(8)),
        "st_header_200mb": struct.pack("<Q", 200 * MiB) + b"{" + bytes(100),
    }
    for k, v in st.items():
        put(k + ".safetensors", v)
    # A real checkpoint, cut short and with bytes flipped.
    ckpt = open(os.path.join(REPO, "tests/data/encoder/timm_vit/model.safetensors"), "rb").read()
    for frac in (0.01, 0.5, 0.99):
        put(f"ckpt_cut{int(frac * 100)}.safetensors", ckpt[: int(len(ckpt) * frac)])
    gguf = open(os.path.join(REPO, "tests/data/encoder/gguf_siglip/mmproj.gguf"), "rb").read()
    for n in (4, 24, 200, 2000, len(gguf) // 2, len(gguf) - 1):
        put(f"gguf_cut{n}.gguf", gguf[:n])
    for off in (4, 8, 16, 24, 40, 64, 100, 300, 1000):
        g = bytearray(gguf)
        for i in range(off, min(off + 8, len(g))):
            g[i] = 0xFF
        put(f"gguf_ff{off}.gguf", bytes(g))
    put("gguf_counts.gguf", b"GGUF" + struct.pack("<IQQ", 3, 2**63, 2**63))
    put("gguf_v99.gguf", b"GGUF" + struct.pack("<IQQ", 99, 0, 0))
    put("zip_junk.bin", b"PK\x03\x04" + bytes(rnd.getrandbits(8) for _ in range(500)))
    oc = open(os.path.join(REPO, "tests/data/encoder/open_clip/open_clip_pytorch_model.bin"), "rb").read()
    put("torch_cut.bin", oc[: len(oc) // 2])
    put("torch_tail.bin", oc[: len(oc) - 30])
    # Model directories: a real checkpoint beside a hostile config / preprocessor / index file.
    hf = json.load(open(os.path.join(REPO, "tests/data/encoder/hf_vit/config.json")))
    timm = json.load(open(os.path.join(REPO, "tests/data/encoder/timm_vit/config.json")))
    hf_ck = open(os.path.join(REPO, "tests/data/encoder/hf_vit/model.safetensors"), "rb").read()

    def model_dir(name, files, ck=hf_ck):
        d = os.path.join(F, "models", name)
        write(os.path.join(d, "model.safetensors"), ck)
        for fn, content in files.items():
            if content is None:
                os.makedirs(os.path.join(d, fn), exist_ok=True)
            else:
                write(os.path.join(d, fn), content if isinstance(content, bytes) else content.encode())
        fx["model:" + name] = os.path.join(d, "model.safetensors")

    def hfc(**kw):
        c = dict(hf)
        c.update(kw)
        return json.dumps(c)

    deep = "[" * 200000 + "]" * 200000
    for key, vals in {
        "hidden_size": [0, 7, -32, 2**40], "num_attention_heads": [0, 3, -4, 2**31, 64], "patch_size": [0, 1, -8, 3, 4, 2**31],
        "image_size": [0, -32, 1, 8, 2**31, 1e300], "num_hidden_layers": [0, -1, 1000], "layer_norm_eps": [-1, 0, 1e308],
        "hidden_act": ["bogus", 5, None], "num_channels": [0, 1, 4, -3], "intermediate_size": [0, 7], "model_type": [5, "clip", "llava", "siglip_vision_model"],
        "qkv_bias": ["yes"],
    }.items():
        for v in vals:
            model_dir(f"hf_{key}_{v}", {"config.json": hfc(**{key: v})})
    model_dir("cfg_not_json", {"config.json": "{"})
    model_dir("cfg_array", {"config.json": "[]"})
    model_dir("cfg_null", {"config.json": "null"})
    model_dir("cfg_empty", {"config.json": ""})
    model_dir("cfg_dir", {"config.json": None})
    model_dir("cfg_deep_top", {"config.json": hfc()[:-1] + ', "junk": ' + deep + "}"})
    model_dir("cfg_deep_vision", {"config.json": '{"vision_config": ' + hfc()[:-1] + ', "junk": ' + deep + "}}"})
    model_dir("cfg_deep_10k", {"config.json": hfc()[:-1] + ', "junk": ' + "[" * 10000 + "]" * 10000 + "}"})
    model_dir("cfg_vision_config_num", {"config.json": '{"vision_config": 5}'})
    model_dir("cfg_big_string", {"config.json": hfc()[:-1] + ', "junk": "' + "x" * (30 * MiB) + '"}'})
    model_dir("pre_deep", {"config.json": hfc(), "preprocessor_config.json": '{"x": ' + deep + "}"})
    model_dir("pre_std0", {"config.json": hfc(), "preprocessor_config.json": '{"image_mean": [0.5,0.5,0.5], "image_std": [0,0,0]}'})
    model_dir("pre_std_neg", {"config.json": hfc(), "preprocessor_config.json": '{"image_mean": [0.5,0.5,0.5], "image_std": [-1,1,1]}'})
    model_dir("pre_mean2", {"config.json": hfc(), "preprocessor_config.json": '{"image_mean": [0.5,0.5], "image_std": [1,1]}'})
    model_dir("pre_mean_str", {"config.json": hfc(), "preprocessor_config.json": '{"image_mean": "x", "image_std": [1,1,1]}'})
    model_dir("pre_huge_num", {"config.json": hfc(), "preprocessor_config.json": '{"image_mean": [1e309,0,0], "image_std": [1e-320,1,1]}'})
    model_dir("oc_deep", {"config.json": hfc(), "open_clip_config.json": '{"x": ' + deep + "}"})
    model_dir("idx_deep", {"model.safetensors.index.json": '{"weight_map": ' + deep + "}"})
    model_dir("idx_junk", {"model.safetensors.index.json": "{"})
    model_dir("idx_wm_num", {"model.safetensors.index.json": '{"weight_map": 5}'})
    model_dir("idx_escape", {"model.safetensors.index.json": '{"weight_map": {"a": "../../../../../../etc/passwd"}}'})
    model_dir("idx_abs", {"model.safetensors.index.json": '{"weight_map": {"a": "/dev/zero"}}'})
    model_dir("idx_missing", {"model.safetensors.index.json": '{"weight_map": {"a": "nope.safetensors"}}'})
    model_dir("idx_self", {"model.safetensors.index.json": '{"weight_map": {"a": "model.safetensors.index.json"}}'})
    model_dir("idx_empty", {"model.safetensors.index.json": '{"weight_map": {}}'})
    tc = lambda **kw: json.dumps({**timm, **kw})
    ma = lambda **kw: tc(model_args={**timm["model_args"], **kw})
    pc = lambda **kw: tc(pretrained_cfg={**timm["pretrained_cfg"], **kw})
    timm_ck = open(os.path.join(REPO, "tests/data/encoder/timm_vit/model.safetensors"), "rb").read()
    for name, content in {
        "heads0": ma(num_heads=0), "heads3": ma(num_heads=3), "heads_neg": ma(num_heads=-4), "heads_big": ma(num_heads=10**9),
        "patch0": ma(patch_size=0), "img0": ma(img_size=0), "depth0": ma(depth=0), "depth_big": ma(depth=10**6),
        "embed7": ma(embed_dim=7), "args_num": tc(model_args=5), "input0": pc(input_size=[3, 0, 0]),
        "input_neg": pc(input_size=[3, -1, -1]), "input_c0": pc(input_size=[0, 32, 32]), "mean2": pc(mean=[1, 2]),
        "std0": pc(std=[0, 0, 0]), "mean_str": pc(mean="x"), "classes_neg": tc(num_classes=-1), "pool_bogus": tc(global_pool="bogus"),
        "arch_other": tc(architecture="vit_huge_patch14_clip_224"), "arch_num": tc(architecture=5),
    }.items():
        model_dir("timm_" + name, {"config.json": content}, ck=timm_ck)
    # Videos (ffmpeg): tiny, odd shapes, audio only, truncated, corrupt, resolution change.
    small = os.path.join(REPO, "tests/data/video/small.mp4")
    V = os.path.join(F, "video")
    os.makedirs(V, exist_ok=True)
    data = open(small, "rb").read()
    put("video/trunc1k.mp4", data[:1024])
    put("video/trunc_half.mp4", data[: len(data) // 2])
    put("video/trunc_90.mp4", data[: len(data) * 9 // 10])
    cor = bytearray(data)
    for i in range(len(cor) // 3, len(cor) // 3 + 4000, 7):
        cor[i] ^= 0x5A
    put("video/corrupt.mp4", bytes(cor))
    vids = {
        "tiny2.mp4": ["-f", "lavfi", "-i", "testsrc=s=2x2:d=0.2:r=25", "-c:v", "libx264", "-pix_fmt", "yuv420p"],
        "one1.mkv": ["-f", "lavfi", "-i", "testsrc=s=1x1:d=0.12:r=25", "-c:v", "ffv1"],
        "wide.mkv": ["-f", "lavfi", "-i", "testsrc=s=4096x2:d=0.08:r=25", "-c:v", "ffv1"],
        "tall.mkv": ["-f", "lavfi", "-i", "testsrc=s=2x4096:d=0.08:r=25", "-c:v", "ffv1"],
        "gray.mkv": ["-f", "lavfi", "-i", "testsrc=s=64x48:d=0.2:r=25", "-pix_fmt", "gray", "-c:v", "ffv1"],
        "rgba.mkv": ["-f", "lavfi", "-i", "testsrc=s=64x48:d=0.2:r=25", "-pix_fmt", "rgba", "-c:v", "ffv1"],
        "yuv444_16.mkv": ["-f", "lavfi", "-i", "testsrc=s=64x48:d=0.2:r=25", "-pix_fmt", "yuv444p16le", "-c:v", "ffv1"],
        "audio.wav": ["-f", "lavfi", "-i", "sine=d=0.5", "-c:a", "pcm_s16le"],
        "audio.m4a": ["-f", "lavfi", "-i", "sine=d=0.5", "-c:a", "aac"],
        "one_frame.mp4": ["-f", "lavfi", "-i", "testsrc=s=64x48:d=0.04:r=25", "-c:v", "libx264", "-pix_fmt", "yuv420p"],
        "mjpeg.avi": ["-f", "lavfi", "-i", "testsrc=s=64x48:d=0.2:r=25", "-c:v", "mjpeg"],
        "vfr.mkv": ["-f", "lavfi", "-i", "testsrc=s=64x48:d=1:r=25", "-vf", "select='not(mod(n\\,3))'", "-fps_mode", "vfr", "-c:v", "ffv1"],
    }
    if not quick:
        for name, args in vids.items():
            if ffmpeg(*args, os.path.join(V, name)):
                fx["video/" + name] = os.path.join(V, name)
        a = os.path.join(V, "a.ts")
        b = os.path.join(V, "b.ts")
        if ffmpeg("-f", "lavfi", "-i", "testsrc=s=64x48:d=0.2:r=25", "-c:v", "libx264", "-pix_fmt", "yuv420p", a) and \
                ffmpeg("-f", "lavfi", "-i", "testsrc2=s=96x80:d=0.2:r=25", "-c:v", "libx264", "-pix_fmt", "yuv420p", b):
            put("video/reschange.ts", open(a, "rb").read() + open(b, "rb").read() + open(a, "rb").read())
    return fx


# ---------------------------------------------------------------------------------------------
# the sweep


def define_cases(fx: dict):
    F = "F"  # the fixtures directory, as the prelude's name F

    def fp(name):  # a fixture path expression in the child
        return f"F + {('/' + name)!r}"

    # ---- module level functions, classes without constructors ----------------------------------
    case("module/info", "result = (fovea.__version__, fovea.bf16_supported(), fovea.image_formats(), fovea.image_extensions())", "ok")
    case("module/all_names", "result = [getattr(fovea, n) is not None for n in fovea.__all__]", "ok")
    for expr in ["fovea.bf16_supported(1)", "fovea.image_formats('x')", "fovea.Tokens()", "fovea.Encoding()",
                 "fovea.TensorFile()", "fovea.VideoFrameResult()", "_fovea.VideoReader()", "_fovea.Model()",
                 "fovea.Fixation(1)", "fovea.Fixation()",
                 "fovea.VideoFrame(1, 2)", "_fovea.tokenize()", "_fovea.video()", "_fovea.load()", "_fovea.save()"]:
        case(f"module/{expr}", f"result = {expr}", "exc")
    # pybind11 lets a private class's __new__ make an instance without a C++ value (by design,
    # docs/explanation/reliability.md); using that instance is a crash, so only the __new__ is a case.
    case("module/_fovea.Tokens.__new__(_fovea.Tokens)", "result = type(_fovea.Tokens.__new__(_fovea.Tokens)).__name__", "ok")
    case("module/Model_subclass_no_init", """
        class X(fovea.Model):
            def __init__(self): pass
        result = X().description""", "exc")
    case("module/Model_subclass_no_init_encode", """
        class X(fovea.Model):
            def __init__(self): pass
        result = X().encode(T())""", "exc")
    case("module/Model_subclass_no_init_as_model", """
        class X(fovea.Model):
            def __init__(self): pass
        result = T(model=X())""", "exc")
    case("module/Fixation_tokenize", "result = touch_tokens(T(fixations=[fovea.Fixation(10, 20, radius=5, weight=2)]))", "ok")
    case("module/Fixation_str", "result = T(fixations=[fovea.Fixation('a', 'b')])", "exc")
    case("module/Fixation_neg_radius", "result = T(fixations=[fovea.Fixation(1, 2, radius=-1)])", "exc")
    case("module/Fixation_nan", "result = T(fixations=[fovea.Fixation(nan, 2)])", "exc")
    # _pixels_of: PIL images of every mode, and PIL look-alikes.
    for mode in ["1", "L", "P", "RGB", "RGBA", "CMYK", "I", "I;16", "F", "LA", "YCbCr", "HSV", "LAB", "PA", "RGBX"]:
        case(f"pil/mode_{mode}", f"""
            from PIL import Image
            im = Image.fromarray(A).convert({mode!r}) if {mode!r} not in ("HSV", "LAB") else Image.fromarray(A).convert("RGB").convert({mode!r})
            result = touch_tokens(fovea.tokenize(im, budget=40))""")
    case("pil/size_0x0", "from PIL import Image\nresult = fovea.tokenize(Image.new('RGB', (0, 0)))", "exc")
    case("pil/size_1x1", "from PIL import Image\nresult = touch_tokens(fovea.tokenize(Image.new('RGB', (1, 1))))", "ok")
    case("pil/size_100000x1", "from PIL import Image\nresult = touch_tokens(fovea.tokenize(Image.new('L', (100000, 1))))")
    case("pil/lookalike_float", """
        class P:
            mode = "RGB"; size = (4, 4)
            def convert(self, m): return self
            def __array__(self, dtype=None): return np.zeros((4, 4, 3), np.float32)
        result = fovea.tokenize(P())""", "exc")
    case("pil/lookalike_convert_raises", """
        class P:
            mode = "P"; size = (4, 4)
            def convert(self, m): raise RuntimeError("convert failed")
        result = fovea.tokenize(P())""", "exc")
    case("pil/lookalike_mode_int", """
        class P:
            mode = 5; size = (4, 4)
            def convert(self, m): return self
        result = fovea.tokenize(P())""", "exc")
    case("pil/lookalike_array_object", """
        class P:
            mode = "RGB"; size = (4, 4)
            def convert(self, m): return self
            def __array__(self, dtype=None): return np.array([object()] * 3)
        result = fovea.tokenize(P())""", "exc")

    # ---- tokenize: the image as an array -------------------------------------------------------
    dtypes = ["int8", "uint16", "int16", "int32", "int64", "uint32", "uint64", "float16", "float32", "float64",
              "longdouble", "bool", "complex64", "complex128", "object", "U1", "S1", "M8[s]", "m8[s]", "V3",
              "[('r','u1'),('g','u1'),('b','u1')]", ">u2", ">f4", ">i8"]
    for dt in dtypes:
        dexpr = dt if dt.startswith("[") else repr(dt)
        case(f"array/dtype_{dt}", f"result = fovea.tokenize(np.zeros((8, 8, 3), dtype=np.dtype({dexpr})))", "exc")
    for dt in ["'|u1'", "'>u1'", "np.ubyte", "'B'"]:
        case(f"array/dtype_u8_{dt}", f"result = touch_tokens(fovea.tokenize(A.astype(np.dtype({dt}))))", "ok")
    shapes = {(0, 0, 3): "exc", (0, 5, 3): "exc", (5, 0, 3): "exc", (0,): "exc", (5,): "exc", (): "exc",
              (1, 1, 3): "ok", (1, 1): "ok", (1, 1, 1): "ok", (1, 100000, 3): None, (100000, 1, 3): None,
              (1, 100000): None, (2, 2, 4): "exc", (2, 2, 2): "exc", (2, 2, 0): "exc", (2, 2, 5): "exc",
              (2, 2, 3, 1): "exc", (1, 2, 2, 3): "exc", (3, 2, 2): "exc", (2, 3): "ok", (3, 2, 3): "ok",
              (1, 2**24 + 1): None, (17, 1, 3): "ok"}
    for shp, ex in shapes.items():
        case(f"array/shape_{shp}", f"""
            a = np.random.default_rng(1).integers(0, 256, {shp!r}, dtype=np.uint8)
            result = touch_tokens(fovea.tokenize(a, budget=64))""", ex)
    layouts = {
        "crop": ("A[3:50:2, 5:90:3]", "ok"), "flip_rows": ("A[::-1]", "exc"), "flip_cols": ("A[:, ::-1]", "exc"),
        "flip_channels": ("A[..., ::-1]", "exc"), "transposed": ("A.transpose(1, 0, 2)", "ok"),
        "fortran": ("np.asfortranarray(A)", "ok"), "planar": ("np.ascontiguousarray(A.transpose(2, 0, 1)).transpose(1, 2, 0)", "ok"),
        "rgba_slice": ("np.concatenate([A, A[..., :1]], 2)[..., :3]", "ok"), "one_channel_3d": ("A[..., :1]", "ok"),
        "gray_slice": ("A[..., 1]", "ok"), "every_other_channel": ("np.concatenate([A, A], 2)[..., ::2]", "ok"),
        "broadcast_rows": ("np.broadcast_to(A[:1], (64, 96, 3))", "exc"),
        "broadcast_scalar": ("np.broadcast_to(np.uint8(5), (10, 10, 3))", "exc"),
        "broadcast_channels": ("np.broadcast_to(G[..., None], (64, 96, 3))", "exc"),
        "overlap_rows": ("np.lib.stride_tricks.as_strided(A, shape=(64, 96, 3), strides=(96, 1, 1))", "exc"),
        "overlap_channels": ("np.lib.stride_tricks.as_strided(A, shape=(32, 32, 3), strides=(288, 3, 2))", "exc"),
        "overlap_planes": ("np.lib.stride_tricks.as_strided(A, shape=(8, 8, 3), strides=(8, 1, 10))", "exc"),
        "readonly": ("(lambda b: (b.setflags(write=False), b)[1])(A.copy())", "ok"),
        "frombuffer": ("np.frombuffer(A.tobytes(), np.uint8).reshape(A.shape)", "ok"),
        "masked": ("np.ma.masked_array(A, mask=A > 128)", "ok"),
        "matrix": ("np.matrix(G)", "ok"),
        "zero_d": ("np.array(5, np.uint8)", "exc"),
        "numpy_scalar": ("np.uint8(5)", "exc"),
        "list": ("A.tolist()", "exc"),
        "memmap": ("(lambda p: (A.tofile(p), np.memmap(p, np.uint8, 'r', shape=A.shape))[1])(W + '/mm.bin')", "ok"),
        "unaligned_view": ("np.frombuffer(b'x' + A.tobytes(), np.uint8, offset=1).reshape(A.shape)", "ok"),
        "huge_row_stride": ("np.zeros((3, 1 << 22, 3), np.uint8)[:, :4]", "ok"),
    }
    for name, (expr, ex) in layouts.items():
        case(f"array/layout_{name}", f"result = touch_tokens(fovea.tokenize({expr}, budget=50))", ex)
    case("array/keeps_array_alive", """
        a = A.copy(); t = fovea.tokenize(a); del a; gc.collect()
        result = touch_tokens(t)""", "ok")
    case("array/modified_after", """
        a = A.copy(); t = fovea.tokenize(a); a[:] = 255
        result = touch_tokens(t)""", "ok")
    case("array/views_outlive_tokens", """
        t = T(); p, q, l, rm, rel = t.patches, t.positions, t.levels, t.rate_map, t.relevance
        del t; gc.collect(); [np.zeros(1 << 16) for _ in range(50)]
        result = (float(p.sum()), float(q.sum()), int(l.sum()), int(rm.sum()), float(rel.sum()))""", "ok")
    case("array/concurrent_threads", """
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(4) as ex:
            result = [len(x) for x in ex.map(lambda i: T(budget=20 + i, fixations=[(i, i)]), range(40))]""", "ok")
    # Dimensions past int: the array exists (calloc'd, untouched), its size does not fit an int.
    for shp, mem in [((1, 2**31 + 64), 5 * GiB), ((2**31 + 64, 1), 5 * GiB), ((1, 2**32 + 64), 7 * GiB),
                     ((2**32 + 64, 1), 7 * GiB), ((1, 2**32 + 64, 1), 7 * GiB)]:
        case(f"array/dim_over_int_{shp}", f"""
            a = np.zeros({shp!r}, np.uint8)
            try:
                t = fovea.tokenize(a, budget=16)
            except ValueError as e:
                assert "(-" not in str(e) and "x-" not in str(e), "UNHELPFUL: %r array: %s" % (a.shape, e)
                raise
            result = t.image_size
            assert t.image_size == ({shp[1]}, {shp[0]}), "SILENT: a %r array was tokenized as a %r image" % (a.shape, t.image_size)""",
             None, quick=False, mem_limit=mem, rss_budget=3 * GiB, timeout=120)
    case("array/big_20000x20000", """
        a = np.zeros((20000, 20000, 3), np.uint8)
        t = fovea.tokenize(a, budget=273)
        result = (len(t), t.image_size)""", None, quick=False, mem_limit=6 * GiB, rss_budget=3 * GiB, timeout=180)

    # ---- tokenize: encoded bytes and paths ------------------------------------------------------
    junk_files = [k for k in fx if "/" not in k and not k.startswith(("st_", "ckpt_", "gguf_", "torch_", "zip_", "model:"))
                  and not k.endswith(".safetensors")]
    for name in sorted(junk_files):
        ex = "ok" if name in ("ok.jpg", "png_1x1.png", "png_16bit.png", "png_gray1.png", "cmyk.jpg", "progressive.jpg", "pfm_neg.pfm", "pnm_maxval.ppm",
                              "png_ztxt_bomb.png", "png_many_chunks.png", "png_wide.png", "png_tall.png") or name.startswith("jpg_exif") else "exc"
        if name in ("png_wide.png", "png_tall.png", "pfm_neg.pfm", "pnm_maxval.ppm"):
            ex = None
        case(f"bytes/{name}", f"result = touch_tokens(fovea.tokenize(rb({fp(name)}), budget=40))", ex)
        if name.startswith(("png_trunc", "png_huge", "jpg_trunc", "jpg_sof", "pnm_", "ok.", "empty", "junk", "zeros", "y4m")):
            # (a path is read whole, then decoded as bytes are: a sample is enough)
            case(f"path/{name}", f"result = touch_tokens(fovea.tokenize({fp(name)}, budget=40))", ex)
    for name in ["png_huge.png", "png_huge_w.png", "pnm_huge.ppm", "jpg_sof_huge.jpg", "qoi_huge.qoi", "bmp_huge.bmp",
                 "gif_huge.gif", "psd_junk.psd", "tiff_junk.tiff", "png_2e31.png"]:
        case(f"bytes/{name}_nolimit", f"result = touch_tokens(fovea.tokenize(rb({fp(name)}), max_pixels=2**64 - 1))", "exc",
             timeout=90)
    for p in sorted(os.listdir(os.path.join(REPO, "tests/data/images"))):
        case(f"path/testdata_{p}", f"result = touch_tokens(fovea.tokenize(R + '/tests/data/images/{p}', budget=60))", None,
             timeout=30 if "hang" in p else 60)
    for expr, ex in [("b''", "exc"), ("b'\\x00' * 10", "exc"), ("bytearray(rb(IMG))", "ok"), ("memoryview(rb(IMG))", "ok"),
                     ("memoryview(np.frombuffer(rb(IMG) * 2, np.uint8))[::2]", "exc"), ("memoryview(np.frombuffer(rb(IMG), np.uint8))", "ok"),
                     ("memoryview(A)", "exc"), ("A.tobytes()", "exc"), ("bytes(200 << 20)", "exc"),
                     ("memoryview(b'')", "exc"), ("bytearray()", "exc"), ("IMG.encode()", "exc")]:
        case(f"bytes/{expr}", f"result = touch_tokens(fovea.tokenize({expr}, budget=30))", ex)
    paths = {
        "missing": ("'/nonexistent/x.png'", "exc"), "empty": ("''", "exc"), "root": ("'/'", "exc"), "tmpdir": ("W", "exc"),
        "dev_null": ("'/dev/null'", "exc"), "dev_zero": ("'/dev/zero'", "exc"), "dev_urandom": ("'/dev/urandom'", "exc"),
        "proc_status": ("'/proc/self/status'", "exc"), "proc_mem": ("'/proc/self/mem'", "exc"),
        "nul_in_path": ("IMG + '\\x00junk'", "exc"), "long_path": ("'/tmp/' + 'a/' * 3000 + 'x.png'", "exc"),
        "long_name": ("W + '/' + 'a' * 300 + '.png'", "exc"), "pathlib": ("pathlib.Path(IMG)", "ok"),
        "fspath_bytes": ("type('P', (), {'__fspath__': lambda s: IMG.encode()})()", None),
        "fspath_int": ("type('P', (), {'__fspath__': lambda s: 5})()", "exc"),
        "fspath_raises": ("type('P', (), {'__fspath__': lambda s: 1 / 0})()", "exc"),
        "surrogate": ("'/tmp/\\udc80.png'", "exc"), "int": ("5", "exc"), "none": ("None", "exc"), "dict": ("{}", "exc"),
        "dir_named_png": ("(os.makedirs(W + '/d.png'), W + '/d.png')[1]", "exc"),
        "symlink_loop": ("(os.symlink(W + '/loop', W + '/loop'), W + '/loop')[1]", "exc"),
        "symlink_dev_zero": ("(os.symlink('/dev/zero', W + '/z.png'), W + '/z.png')[1]", "exc"),
        "fifo_png": ("fifo_with(rb(IMG))", None), "fifo_empty": ("fifo_with(b'')", "exc"),
    }
    for name, (expr, ex) in paths.items():
        code = f"result = touch_tokens(fovea.tokenize({expr}, budget=30))"
        if name == "fspath_bytes":  # either decode the path, or say so; not a path named "b'...'"
            code = f"""
                try:
                    result = touch_tokens(fovea.tokenize({expr}, budget=30))
                except OSError as e:
                    assert "b'" not in str(e), "UNHELPFUL: a bytes __fspath__ became the path " + repr(str(e)[:120])
                    raise"""
        case(f"path/{name}", code, ex, timeout=8 if "fifo" in name else 60)
    case("path/fifo_no_writer", """
        p = W + "/fifo0"; os.mkfifo(p)
        result = fovea.tokenize(p)""", "exc", timeout=8)
    # max_pixels / exif / source with paths and bytes
    for v, ex in [(0, None), (1, "exc"), (6144, "ok"), (2**64 - 1, "ok"), (-1, "exc"), (2**64, "exc"), (1.5, "exc"), (None, "exc"), ("nan", "exc")]:
        case(f"kw/max_pixels={v}", f"result = touch_tokens(fovea.tokenize(IMG, max_pixels={v}))", ex)
        case(f"kw/max_pixels_bytes={v}", f"result = touch_tokens(fovea.tokenize(rb(IMG), max_pixels={v}))", ex)
    case("kw/max_pixels_array_ignored", "result = touch_tokens(fovea.tokenize(A, max_pixels=1))", None)
    for v, ex in [(False, "ok"), (None, None), ("yes", "exc"), (2, None)]:
        case(f"kw/exif={v!r}", f"result = touch_tokens(fovea.tokenize({fp('jpg_exif_9.jpg')}, exif={v!r}))", ex)
    for v, ex in [("'x' * 10_000_000", "ok"), ("'\\x00'", "ok"), ("'\\udc80'", "exc"), ("5", "exc"), ("None", "exc"), ("b'x'", None)]:
        case(f"kw/source={v[:20]}", f"t = T(source={v}); result = touch_tokens(t); t.save(W + '/s.safetensors'); result = touch_file(fovea.load(W + '/s.safetensors'))[:3]", ex)

    # ---- tokenize: keyword arguments ------------------------------------------------------------
    NUMS = [0, -1, 1, 2, 2**31 - 1, 2**31, 2**63, -2**63, 1.5, True, None, "'10'", "nan", "inf", "np.int64(5)", "np.float64(5.0)"]

    def kwcases(kw, values, ok=(), call="T", extra="", exc=()):
        for v in values:
            ex = "ok" if v in ok else "exc" if v in exc else None
            case(f"kw/{kw}={v}", f"result = touch_tokens({call}({kw}={v}{extra}))", ex)

    # The budget is capped at 2^24 tokens (docs/reference/cli.md): 2**31 - 1 is a clear ValueError.
    kwcases("budget", NUMS + [2**24, 2**24 + 1], ok=(2, 2**24, "np.int64(5)"), exc=(0, -1, 2**24 + 1, 2**31 - 1))
    case("kw/budget=2**31-1_patch2", "result = len(T(budget=2**31 - 1, patch=2))", "exc")
    case("kw/budget=2**24_patch2", "result = len(T(budget=2**24, patch=2))", "ok")
    kwcases("patch", [None, 0, 1, 2, 3, 7, 255, 256, 257, -1, 2**31, 1.5, "'16'", True, "nan"], ok=(None, 2, 3, 7, 255, 256))
    case("kw/patch=256_tiny", "result = touch_tokens(fovea.tokenize(np.zeros((1, 1, 3), np.uint8), patch=256))", "ok")
    case("kw/patch=2_wide", "result = touch_tokens(fovea.tokenize(np.zeros((1, 100000, 3), np.uint8), patch=2, budget=10**6))", None)
    case("kw/patch=3_uniform", "result = touch_tokens(T(patch=3, uniform=True))", "ok")
    kwcases("uniform", [True, False, None, "'yes'", 2, "np.bool_(True)"], ok=(True, False))
    for img in ["np.zeros((1, 1, 3), np.uint8)", "np.zeros((1, 100000), np.uint8)", "G", "np.zeros((100000, 1, 3), np.uint8)"]:
        for kw in ["budget=1", "budget=2**31 - 1", "patch=256", "patch=2, budget=100000"]:
            case(f"kw/uniform_{img[:24]}_{kw}", f"result = touch_tokens(fovea.tokenize({img}, uniform=True, {kw}))", None)
    kwcases("threads", [-1, 0, 1, 3, 64, 1025, 2**31, None, 1.5, "'2'"], ok=(0, 1, 3, 64))
    # Under the 4 GiB RLIMIT_AS 1023 thread stacks do not fit: a clear error (not a hang) is right.
    case("kw/threads=1024", "result = touch_tokens(T(threads=1024))", None, timeout=20)
    case("kw/threads=1024_roomy", "result = touch_tokens(T(threads=1024))", "ok", timeout=60, mem_limit=16 * GiB)
    kwcases("max_level", [-2, -1, 0, 1, 24, 25, 2**31, None, 1.5], ok=(-1, 0, 1, 24))
    for w, ex in [("{}", "ok"), ("{'detail': 1}", "ok"), ("{'bogus': 1}", "exc"), ("{'detail': -1}", "exc"),
                  ("{'detail': nan}", "exc"), ("{'detail': inf}", "exc"), ("{'detail': 1e38}", None), ("{'detail': 1e39}", "exc"),
                  ("{1: 2}", "exc"), ("{'detail': 'x'}", "exc"), ("[('detail', 1)]", "ok"), ("'abc'", "exc"), ("5", "exc"),
                  ("{'detail': 0, 'query': 0, 'floor': 0, 'information': 0, 'saliency': 0}", None),
                  ("{'info': 1, 'entropy': 2, 'sal': 3, 'q': 4}", "ok"), ("{'floor': 1e30, 'detail': 1e-30}", None)]:
        case(f"kw/weights={w[:40]}", f"t = T(weights={w}, fixations=[(5, 5)]); result = touch_tokens(t)", ex)
    case("kw/weights_all_zero_no_nan", """
        t = T(weights={'detail': 0, 'query': 0, 'floor': 0, 'information': 0, 'saliency': 0})
        result = touch_tokens(t)
        assert np.isfinite(t.relevance).all(), "SILENT: relevance has NaN/inf"
        assert np.isfinite(t.patches).all()""", None)
    for kw, vals, good in [("e0", [0, -1, "nan", "inf", 1e-30, 1e-45, 1e30, 1e38, 1e39, "'x'", None], (1e30, 1e38, None)),
                           ("sharpness", [0.49, 0.5, 4, 4.01, "nan", "inf", "-inf", None], (0.5, 4, None)),
                           ("fine_bias", [-0.1, 0, 4, 4.1, "nan", "inf", None], (0, 4, None)),
                           ("detail_focus", [-0.1, 0, 4, 4.1, "nan", "inf", None], (0, 4, None)),
                           ("fixation_spread", [0, 1e-30, 1e-45, 1, 1.01, "nan", "-inf", None], (1e-30, 1, None)),
                           ("lookahead", [0, 1, 8, 9, -1, 2**31, 1.5, None], (1, 8, None))]:
        kwcases(kw, vals, ok=good, extra=", fixations=[(10, 10, 3)]")
    case("kw/e0_tiny_finite", "t = T(e0=1e-30, fixations=[(10, 10)]); result = touch_tokens(t); assert np.isfinite(t.relevance).all(), 'SILENT: NaN relevance'", None)
    case("kw/fixation_spread_tiny_finite", "t = T(fixation_spread=1e-38, fixations=[(10, 10)]); result = touch_tokens(t); assert np.isfinite(t.relevance).all(), 'SILENT: NaN relevance'", None)
    for d, ex in [("'f32'", "ok"), ("'f16'", "ok"), ("'u8'", "ok"), ("'float32'", "ok"), ("'uint8'", "ok"), ("'float64'", "exc"),
                  ("''", "exc"), ("'F32'", "exc"), ("None", "exc"), ("5", "exc"), ("'f32\\x00'", "exc"), ("np.float32", "exc")]:
        case(f"kw/dtype={d}", f"result = touch_tokens(T(dtype={d}))", ex)
    for kw in ["mean", "std"]:
        for v, ex in [("[0.5, 0.5, 0.5]", "ok"), ("[1, 2]", "exc"), ("[1, 2, 3, 4]", "exc"), ("'abc'", "exc"), ("5", "exc"),
                      ("[nan] * 3", "exc"), ("[inf] * 3", "exc"), ("[1e39] * 3", "exc"), ("[0, 0, 0]", "exc" if kw == "std" else "ok"),
                      ("[-1, 1, 1]", "exc" if kw == "std" else "ok"), ("[1e-45] * 3", None), ("np.ones(3)", "ok"), ("[[1], [2], [3]]", "exc"),
                      ("[None] * 3", "exc"), ("iter([1, 2, 3])", "ok")]:
            case(f"kw/{kw}={v}", f"t = T({kw}={v}); result = touch_tokens(t); assert np.isfinite(t.patches).all(), 'SILENT: non-finite patches'", ex)
    case("kw/std0_normalize_false", "result = touch_tokens(T(std=[0, 0, 0], normalize=False))", None)
    case("kw/std0_u8", "result = touch_tokens(T(std=[0, 0, 0], dtype='u8'))", None)
    kwcases("normalize", [True, False, None, "'no'", 0], ok=(True, False))
    # fixations / regions
    fix = {"[]": "ok", "[(1, 2)]": "ok", "[(1,)]": "exc", "[(1, 2, 3, 4, 5)]": "exc", "[()]": "exc", "[(nan, 1)]": "exc",
           "[(inf, 1)]": "exc", "[(1e30, 1e30)]": "ok", "[(-1e30, 5)]": "ok", "[(1, 2, -1)]": "exc", "[(1, 2, 0, -1)]": "exc",
           "[(1, 2, 1e38, 1e38)]": None, "[(1, 2, 1e39)]": "exc", "'abc'": "exc", "None": "exc", "[(1, 'a')]": "exc",
           "[(True, False)]": "ok", "[np.array([1, 2])]": "ok", "[[[1, 2]]]": "exc", "{(1, 2): 3}": "ok", "(p for p in [(1, 2)])": "ok",
           "np.zeros((3, 2))": "ok", "np.zeros((3, 5))": "exc", "[(1, 2)] * 100000": None, "[5]": "exc", "[(1, None)]": "exc",
           "[(2**31, 2**31)]": "ok", "[(1e-45, 1e-45, 1e-45, 1e-45)]": "ok", "[(10, 10, 0, 0)]": None,
           "[fovea.Fixation(1, 2, radius=nan)]": "exc", "[(0, 0, 1e30)]": None}
    for v, ex in fix.items():
        case(f"kw/fixations={v[:40]}", f"t = T(fixations={v}); result = touch_tokens(t); assert np.isfinite(t.relevance).all(), 'SILENT: NaN relevance'", ex)
    reg = {"[(0, 0, 10, 10)]": "ok", "[(10, 10, 0, 0)]": "exc", "[(0, 0, 0, 0)]": "exc", "[(0, 0, 1)]": "exc",
           "[(0, 0, 1, 1, 1, 1)]": "exc", "[(nan, 0, 1, 1)]": "exc", "[(0, 0, 1e38, 1e38)]": "ok", "[(-1e38, -1e38, 1e38, 1e38)]": None,
           "[(0, 0, 1, 1, -1)]": "exc", "[(0, 0, 1, 1, 1e38)]": None, "[(0, 0, 1, 1)] * 100000": None, "[(1000, 1000, 2000, 2000)]": "ok",
           "[(0, 0, inf, 5)]": "exc", "[(0, 0, 1e-45, 1e-45)]": None, "'abcd'": "exc", "[[0, 0, 10, 10]]": "ok", "5": "exc"}
    for v, ex in reg.items():
        case(f"kw/regions={v[:40]}", f"t = T(regions={v}); result = touch_tokens(t); assert np.isfinite(t.relevance).all(), 'SILENT: NaN relevance'", ex)
    case("kw/outside_warns", """
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            t = T(fixations=[(5000, 5000)], regions=[(2000, 2000, 3000, 3000)])
        result = (t.query_outside, [str(x.message)[:60] for x in w])
        assert len(w) == 2, 'SILENT: no warning for a query outside the image'""", "ok")
    case("kw/fixations_many_big_image", """
        a = np.zeros((2048, 2048, 3), np.uint8)
        t0 = time.time(); t = fovea.tokenize(a, fixations=[(i % 2048, i // 2048) for i in range(0, 2**20, 7)])
        result = (len(t), time.time() - t0)""", None, quick=False)
    # query_embedding / model
    D = 32
    qe = {"np.ones(32)": "ok", "np.ones((1, 32))": "ok", "np.ones((2, 32))": "exc", "np.ones(0)": "exc", "np.ones((1, 0))": "exc",
          "np.float32(1)": "exc", "np.ones(33)": "exc", "np.full(32, nan)": "exc", "np.full((1, 32), nan)": "exc",
          "np.full((1, 32), inf)": "exc", "np.zeros(32)": None, "np.ones(32, complex)": None, "np.array(['a'] * 32)": "exc",
          "np.array([None] * 32)": "exc", "[1.0] * 32": "ok", "'x'": "exc", "np.ones((32, 1))": "exc", "np.ones((1, 1, 32))": "exc",
          "np.full(32, 1e38)": None, "np.full(32, 1e-45)": None}
    for v, ex in qe.items():
        case(f"kw/query_embedding={v}", f"""
            t = T(query_embedding={v}, model=M())
            result = touch_tokens(t)
            assert np.isfinite(t.relevance).all(), 'SILENT: non-finite relevance'""", ex)
    case("kw/query_embedding_no_model", "result = T(query_embedding=np.ones(32))", "exc")
    case("kw/query_embedding_clip_projected", """
        m = fovea.Model(ENC + '/clip/model.safetensors'); E = m.config['projection_dim']
        result = touch_tokens(T(query_embedding=np.ones(E), model=m))""", None)
    for v, ex in [("'x'", "exc"), ("5", "exc"), ("fovea", "exc"), ("object()", "exc"), ("M()", "ok"), ("M", "exc")]:
        case(f"kw/model={v}", f"result = touch_tokens(T(model={v}))", ex)
    case("kw/model_patch_mismatch", "result = T(model=M(), patch=16)", "exc")
    case("kw/model_patch_match", "result = touch_tokens(T(model=M(), patch=8))", "ok")
    case("kw/model_with_mean_std", "result = touch_tokens(T(model=M(), mean=[0, 0, 0], std=[1, 1, 1]))", "ok")
    # positional misuse of the C++ function itself (the wrapper's arguments reach it as given)
    case("raw/tokenize_fixation_list_of_str", "result = _fovea.tokenize(A, 10, ['ab'], [])", "exc")
    case("raw/tokenize_defaults", "result = touch_tokens(_fovea.tokenize(A))", "ok")
    case("raw/tokenize_weights_bytes_keys", "result = _fovea.tokenize(A, weights={b'detail': 1.0})", None)
    case("raw/tokenize_weights_int_keys", "result = _fovea.tokenize(A, weights={1: 1.0})", "exc")

    # ---- Tokens methods ---------------------------------------------------------------------------
    for v, ex in [(-1, "exc"), (0, "ok"), (1, "ok"), (1024, None), (1025, "exc"), (2**31, "exc"), (None, "exc"), (1.5, "exc")]:
        case(f"tokens/seen(threads={v})", f"result = T().seen(threads={v}).shape", ex, timeout=20)
    for img in ["np.zeros((1, 1, 3), np.uint8)", "np.zeros((1, 100000, 3), np.uint8)", "G", "np.zeros((3000, 4000, 3), np.uint8)"]:
        for u in (False, True):
            case(f"tokens/seen_overlay_{img[:30]}_u{int(u)}", f"""
                t = fovea.tokenize({img}, uniform={u}, budget=10**6)
                result = (t.seen().shape, t.overlay().shape, t.seen(threads=1).shape)""", "ok")
    for dt in ["f16", "u8"]:
        case(f"tokens/seen_{dt}", f"result = touch_tokens(T(dtype='{dt}'))", "ok")
    saves = {"ok": ("W + '/t.safetensors'", "ok"), "dir": ("W", "exc"), "root": ("'/'", "exc"), "proc": ("'/proc/x'", "exc"),
             "proc_self": ("'/proc/self/status'", "exc"), "missing_dir": ("W + '/nope/t.safetensors'", "exc"), "empty": ("''", "exc"),
             "nul": ("W + '/t\\x00.safetensors'", "exc"), "none": ("None", "exc"), "int": ("5", "exc"), "sys": ("'/sys/x'", "exc"),
             "long_name": ("W + '/' + 'a' * 250", None), "too_long_name": ("W + '/' + 'a' * 300", "exc"),
             "pathlib": ("pathlib.Path(W) / 't.safetensors'", "ok"), "fifo": ("(os.mkfifo(W + '/ff'), W + '/ff')[1]", None),
             "symlink_dangling": ("(os.symlink(W + '/nowhere/x', W + '/dl'), W + '/dl')[1]", None),
             "fspath_bytes": ("type('P', (), {'__fspath__': lambda s: (W + '/fb.safetensors').encode()})()", None),
             # a file name that is not UTF-8 is a valid name (test_py_binding.py::test_paths_that_are_not_utf8)
             "surrogate": ("W + '/\\udc80'", "ok"), "file_as_dir": ("IMG + '/x.safetensors'", "exc")}
    for name, (expr, ex) in saves.items():
        if name == "fifo":
            continue  # a FIFO is written in place (fovea/files.hpp): with no reader it waits, by design
        case(f"tokens/save_{name}", f"t = T(); t.save({expr}); result = sorted(os.listdir(W))", ex)
        if name in ("ok", "dir", "proc", "missing_dir", "empty", "nul", "none", "file_as_dir"):
            case(f"encoding/save_{name}", f"m = M(); e = m.encode_full(T(model=m)); e.save({expr}); result = sorted(os.listdir(W))", ex)
    for cname, call in [("tokens/save_fspath_bytes_relative", "T().save(P())"),
                        ("save/fspath_bytes_relative", "fovea.save(P(), {'a': np.zeros(2)})"),
                        ("encoding/save_fspath_bytes_relative", "M().encode_full(T(model=M())).save(P())"),
                        ("tokens/save_bytes_path", "T().save(b'fb.safetensors')"),
                        ("save/bytes_path", "fovea.save(b'fb.safetensors', {'a': np.zeros(2)})")]:
        case(cname, f"""
            os.chdir(W)
            P = type('P', (), {{'__fspath__': lambda s: b'fb.safetensors'}})
            {call}
            result = sorted(os.listdir(W))
            assert result == ['fb.safetensors'], "SILENT: a PathLike giving b'fb.safetensors' wrote " + repr(result)""", None)
    case("tokens/save_roundtrip", """
        t = T(fixations=[(5, 5, 2, 3)], regions=[(1, 1, 20, 20, 2)]); t.save(W + '/t.safetensors')
        f = fovea.load(W + '/t.safetensors'); result = touch_file(f)[:4]
        assert np.array_equal(f['patches'], t.patches)""", "ok")
    case("tokens/save_no_space", "t = fovea.tokenize(np.zeros((2000, 2000, 3), np.uint8), patch=2, budget=10**6); t.save('/dev/full')", "exc")

    # ---- Model ------------------------------------------------------------------------------------
    specs = {"none": ("None", "exc"), "int": ("123", "exc"), "empty": ("''", "exc"), "missing": ("'/nonexistent'", "exc"),
             "dir_empty": ("W", "exc"), "root": ("'/'", "exc"), "dev_zero": ("'/dev/zero'", "exc"), "dev_null": ("'/dev/null'", "exc"),
             "proc": ("'/proc/self/status'", "exc"), "nul": ("MODEL + '\\x00x'", "exc"), "image": ("IMG", "exc"),
             "random_bad": ("'random:'", "exc"), "random_noseed": ("'random:vit-b16:'", "exc"),
             "random_seed_long": ("'random:vit-tiny:' + '9' * 19", "exc"), "random_seed_neg": ("'random:vit-tiny:-1'", "exc"),
             "random_seed_max": ("'random:vit-tiny:999999999999999999'", "ok"), "random_tiny": ("'random:vit-tiny'", "ok"),
             "random_h14": ("'random:vit-h14'", "exc"), "random_spaces": ("' random:vit-tiny'", "exc"),
             "bytes": ("MODEL.encode()", None), "pathlib": ("pathlib.Path(MODEL)", "ok"), "dir": ("ENC + '/hf_vit'", "ok"),
             "fifo": ("fifo_with(rb(MODEL))", None), "fifo_empty": ("fifo_with(b'')", "exc"), "surrogate": ("'\\udc80'", "exc"),
             "fspath_bytes": ("type('P', (), {'__fspath__': lambda s: MODEL.encode()})()", None)}
    for name, (expr, ex) in specs.items():
        case(f"model/spec_{name}", f"""
            m = fovea.Model({expr})
            result = (m.description, m.source, m.is_random, sorted(m.config)[:5], repr(m))
            result += (touch_encoding(m.encode_full(T(model=m))),)""", ex, timeout=8 if "fifo" in name else 60)
    case("model/random_b16", "m = fovea.Model('random:vit-b16'); result = (m.config['hidden_size'], m.encode(T(model=m, budget=16)).shape)", "ok", quick=False)
    for k in sorted(fx):
        if k.endswith(".safetensors") and (k.startswith("st_") or k.startswith("ckpt_")) or k.startswith(("gguf_", "torch_", "zip_")):
            case(f"model/file_{k}", f"""
                m = fovea.Model({fp(k)})
                result = (m.description, touch_encoding(m.encode_full(T(model=m))))""", None if k.startswith("gguf_ff") else "exc")
    for k in ["junk.bin", "empty.bin", "text.txt", "zeros_1m.bin"]:
        case(f"model/file_{k}", f"m = fovea.Model({fp(k)})", "exc")
    for k in sorted(x for x in fx if x.startswith("model:")):
        name = k[len("model:"):]
        case(f"model/dir_{name}", f"""
            m = fovea.Model({fx[k]!r})
            result = [m.description, m.config]
            t = fovea.tokenize(A, model=m, budget=40)
            result.append(touch_tokens(t))
            result.append(touch_encoding(m.encode_full(t)))
            result.append(touch_encoding(m.encode_full(t, attention='hierarchical:1:1')))""", None, timeout=60)
        if name.startswith(("cfg_deep", "pre_deep", "oc_deep", "idx_deep")):
            case(f"model/dir_{name}_as_directory", f"m = fovea.Model({os.path.dirname(fx[k])!r}); result = m.description", None)
    # Every fixture checkpoint, with every output, both precisions and hierarchical attention.
    for d in sorted(os.listdir(os.path.join(REPO, "tests/data/encoder"))):
        if not os.path.isdir(os.path.join(REPO, "tests/data/encoder", d)):
            continue  # qwen_smart_resize.json and the like
        files = os.listdir(os.path.join(REPO, "tests/data/encoder", d))
        ck = "mmproj.gguf" if "mmproj.gguf" in files else "model.safetensors" if "model.safetensors" in files else None
        if d == "open_clip":
            ck = "open_clip_pytorch_model.bin"
        if "model.safetensors.index.json" in files:
            ck = ""  # a sharded checkpoint: the directory
        if ck is None:
            continue
        if "naflex_sizes.json" in files:
            # SigLIP 2 NaFlex (scripts/make_siglip2_fixtures.py): the processor's path (encode_naflex,
            # its windows), and fovea's own tokens through encode_full as for any SigLIP 2 tower.
            case(f"model/fixture_{d}", f"""
                m = fovea.Model(ENC + '/{d}/{ck}')
                result = [m.description, sorted(m.config.items())[:3]]
                a = fovea.decode_image(rb(ENC + '/{d}/image_200x120.png'))
                for prec in ('fp32', 'bf16'):
                    r = _fovea.encode_naflex(m, [a, A], precision=prec)
                    assert all(np.isfinite(e).all() for e in r['embeddings']), 'SILENT: non-finite rows'
                    result.append([e.shape for e in r['embeddings']])
                r = _fovea.encode_naflex_windows(m, a, fixations=[(3, 3)], budget_tokens=40)
                result.append([e.shape for e in r['embeddings']])
                t = fovea.tokenize(a, model=m, budget=30, fixations=[(3, 3)])
                result.append(touch_encoding(m.encode_full(t)))""", "ok", timeout=90)
            continue
        if "preprocessor_config.json" in files and "image.png" not in files:
            # A native-resolution tower (Qwen2-VL and kin, fovea/native.hpp; its images are in
            # qwen_images/): encoded through encode_native, and Model.encode_full refuses it clearly.
            case(f"model/fixture_{d}", f"""
                m = fovea.Model(ENC + '/{d}/{ck}')
                result = [m.description, sorted(m.config.items())[:3]]
                a = fovea.decode_image(rb(ENC + '/qwen_images/image_224x320.png'))
                for prec in ('fp32', 'bf16'):
                    with warnings.catch_warnings():
                        warnings.simplefilter('ignore')
                        r = _fovea.encode_native(m, [a, A], precision=prec)
                    assert np.isfinite(r['projected']).all(), 'SILENT: non-finite projected rows'
                    result.append((r['projected'].shape, r['image_grid_thw'].tolist()))
                r = _fovea.encode_native_windows(m, a, fixations=[(3, 3)], budget_tokens=200)
                result.append(r['projected'].shape)
                t = fovea.tokenize(a, model=m, budget=30, fixations=[(3, 3)])
                try:
                    m.encode_full(t)
                except ValueError as e:
                    assert 'native' in str(e), 'UNHELPFUL: ' + str(e)
                else:
                    raise AssertionError('SILENT: encode_full of a native-resolution tower returned')""", "ok", timeout=90)
            continue
        img = "ENC + '/%s/image.png'" % d
        case(f"model/fixture_{d}", f"""
            m = fovea.Model(ENC + '/{d}/{ck}')
            result = [m.description, sorted(m.config.items())[:3]]
            t = fovea.tokenize({img}, model=m, budget=30, fixations=[(3, 3)])
            for prec in ('fp32', 'bf16'):
                for att in ('exact', 'hierarchical', 'hierarchical:1:1', 'hierarchical:1048576:1048576'):
                    with warnings.catch_warnings():
                        warnings.simplefilter('ignore')
                        e = m.encode_full(t, precision=prec, attention=att)
                    result.append(touch_encoding(e))
            e.save(W + '/e.safetensors'); result.append(touch_file(fovea.load(W + '/e.safetensors'))[:3])
            t1 = fovea.tokenize(np.zeros((1, 1, 3), np.uint8), model=m)
            result.append(touch_encoding(m.encode_full(t1)))""", "ok", timeout=90)
    # encode / encode_full arguments
    enc_setup = "m = M(); t = T(model=m, budget=40); p = np.ascontiguousarray(t.patches); q = np.ascontiguousarray(t.positions); N = len(t)\n"
    enc = {
        "tokens_none": ("m.encode(None)", "exc"), "tokens_str": ("m.encode('x')", "exc"), "tokens_list": ("m.encode([1, 2])", "exc"),
        "tokens_u8": ("m.encode(T(model=m, dtype='u8'))", "exc"), "tokens_f16": ("m.encode(T(model=m, dtype='f16'))", "ok"),
        "tokens_other_patch": ("m.encode(T(patch=16))", "exc"), "tokens_tiny": ("m.encode(fovea.tokenize(np.zeros((1, 1, 3), np.uint8), model=m))", "ok"),
        "tokens_with_positions": ("m.encode(t, positions=q)", "exc"), "tokens_with_image_size": ("m.encode(t, image_size=(1, 1))", "exc"),
        "arr_ok": ("m.encode(p, positions=q, image_size=t.image_size)", "ok"),
        "arr_f16": ("m.encode(p.astype(np.float16), positions=q, image_size=t.image_size)", "ok"),
        "arr_no_positions": ("m.encode(p)", "exc"), "arr_no_image_size": ("m.encode(p, positions=q)", "exc"),
        "arr_N0": ("m.encode(p[:0].copy(), positions=q[:0].copy(), image_size=(8, 8))", "exc"),
        "arr_rank3": ("m.encode(p[:, 0].copy(), positions=q, image_size=(8, 8))", "exc"),
        "arr_rank5": ("m.encode(p[None].copy(), positions=q, image_size=(8, 8))", "exc"),
        "arr_rank0": ("m.encode(np.float32(1), positions=q, image_size=(8, 8))", "exc"),
        "arr_channels1": ("m.encode(p[:, :1].copy(), positions=q, image_size=(8, 8))", "exc"),
        "arr_patch16": ("m.encode(np.zeros((N, 3, 16, 16), np.float32), positions=q, image_size=(8, 8))", "exc"),
        "arr_f64": ("m.encode(p.astype(np.float64), positions=q, image_size=(8, 8))", "exc"),
        "arr_int": ("m.encode(p.astype(np.int32), positions=q, image_size=(8, 8))", "exc"),
        "arr_bf16_like_u16": ("m.encode(p.view(np.uint16)[..., ::2].copy(), positions=q, image_size=(8, 8))", "exc"),
        "arr_fortran": ("m.encode(np.asfortranarray(p), positions=q, image_size=(8, 8))", "exc"),
        "arr_strided": ("m.encode(np.concatenate([p, p])[::2], positions=q, image_size=(8, 8))", "exc"),
        "arr_readonly": ("(p.setflags(write=False), m.encode(p, positions=q, image_size=(96, 64)))[1]", "ok"),
        "arr_unaligned": ("m.encode(np.frombuffer(b'x' + p.tobytes(), np.float32, offset=1).reshape(p.shape), positions=q, image_size=(96, 64))", "ok"),
        "arr_nan": ("m.encode(np.full_like(p, nan), positions=q, image_size=(96, 64))", None),
        "arr_inf": ("m.encode(np.full_like(p, inf), positions=q, image_size=(96, 64))", None),
        "arr_huge": ("m.encode(np.full_like(p, 3e38), positions=q, image_size=(96, 64))", None),
        "pos_f64": ("m.encode(p, positions=q.astype(np.float64), image_size=(96, 64))", "exc"),
        "pos_int": ("m.encode(p, positions=q.astype(np.int32), image_size=(96, 64))", "exc"),
        "pos_N_plus_1": ("m.encode(p, positions=np.concatenate([q, q[:1]]), image_size=(96, 64))", "exc"),
        "pos_cols1": ("m.encode(p, positions=q[:, :1].copy(), image_size=(96, 64))", "exc"),
        "pos_cols2": ("m.encode(p, positions=q[:, :2].copy(), image_size=(96, 64))", "ok"),
        "pos_cols3": ("m.encode(p, positions=q[:, :3].copy(), image_size=(96, 64))", "ok"),
        "pos_cols100": ("m.encode(p, positions=np.zeros((N, 100), np.float32), image_size=(96, 64))", "ok"),
        "pos_1d": ("m.encode(p, positions=q[:, 0].copy(), image_size=(96, 64))", "exc"),
        "pos_3d": ("m.encode(p, positions=q[None].copy(), image_size=(96, 64))", "exc"),
        "pos_nan_xy": ("m.encode(p, positions=np.where(np.arange(4) == 0, nan, q).astype(np.float32), image_size=(96, 64))", "exc"),
        "pos_nan_side": ("m.encode(p, positions=np.where(np.arange(4) == 2, nan, q).astype(np.float32), image_size=(96, 64))", None),
        "pos_nan_level": ("m.encode(p, positions=np.where(np.arange(4) == 3, nan, q).astype(np.float32), image_size=(96, 64))", None),
        "pos_huge": ("m.encode(p, positions=np.full_like(q, 3e38), image_size=(96, 64))", "ok"),
        "pos_neg_huge": ("m.encode(p, positions=np.full_like(q, -3e38), image_size=(96, 64))", "ok"),
        "pos_side0": ("m.encode(p, positions=np.where(np.arange(4) == 2, 0, q).astype(np.float32), image_size=(96, 64))", "ok"),
        "pos_side_neg": ("m.encode(p, positions=np.where(np.arange(4) == 2, -1e30, q).astype(np.float32), image_size=(96, 64))", "ok"),
        "pos_fortran": ("m.encode(p, positions=np.asfortranarray(q), image_size=(96, 64))", "exc"),
        "pos_list": ("m.encode(p, positions=q.tolist(), image_size=(96, 64))", None),
        "pos_none_str": ("m.encode(p, positions='x', image_size=(96, 64))", "exc"),
        "size_0": ("m.encode(p, positions=q, image_size=(0, 0))", "exc"), "size_neg": ("m.encode(p, positions=q, image_size=(-1, 5))", "exc"),
        "size_1x1": ("m.encode(p, positions=q, image_size=(1, 1))", "ok"),
        "size_max": ("m.encode(p, positions=q, image_size=(2**31 - 1, 2**31 - 1))", "ok"),
        "size_2e31": ("m.encode(p, positions=q, image_size=(2**31, 1))", "exc"), "size_3": ("m.encode(p, positions=q, image_size=(1, 2, 3))", "exc"),
        "size_1": ("m.encode(p, positions=q, image_size=(96,))", "exc"), "size_int": ("m.encode(p, positions=q, image_size=96)", "exc"),
        "size_float": ("m.encode(p, positions=q, image_size=(96.0, 64.0))", "exc"), "size_str": ("m.encode(p, positions=q, image_size='ab')", "exc"),
        "size_np": ("m.encode(p, positions=q, image_size=np.array([96, 64]))", "ok"), "size_list": ("m.encode(p, positions=q, image_size=[96, 64])", "ok"),
        "size_nan": ("m.encode(p, positions=q, image_size=(nan, nan))", "exc"),
        "N_over_limit": ("m.encode(np.zeros((2**20 + 1, 3, 8, 8), np.float32), positions=np.zeros((2**20 + 1, 4), np.float32), image_size=(8, 8))", "exc"),
        "N_big_nan_pos": ("m.encode(np.zeros((300000, 3, 8, 8), np.float32), positions=np.full((300000, 4), nan, np.float32), image_size=(8, 8))", "exc"),
    }
    precs = {"'fp32'": "ok", "'bf16'": "ok", "'FP32'": "exc", "''": "exc", "'fp16'": "exc", "'bf16\\x00'": "exc", "None": "exc", "5": "exc"}
    for p_, ex in precs.items():
        enc[f"precision={p_}"] = (f"m.encode(t, precision={p_})", ex)
    atts = {"'exact'": "ok", "'hierarchical'": "ok", "'hierarchical:0'": "exc", "'hierarchical:1:1'": "ok", "'hierarchical:1:0'": "exc",
            "'hierarchical:1048576:1048576'": "ok", "'hierarchical:1048577'": "exc", "'hierarchical:-1'": "exc", "'hierarchical:1:'": "exc",
            "'hierarchical::'": "exc", "'hierarchical:1:1:1'": "exc", "'hierarchicalX'": "exc", "''": "exc", "'exact '": "exc",
            "'hierarchical:99999999999999999999'": "exc", "'hierarchical: 1'": "exc", "'hierarchical:+1'": "exc", "None": "exc",
            "'hierarchical:2:3'": "ok", "'hierarchical:\\x00'": "exc"}
    for a_, ex in atts.items():
        enc[f"attention={a_}"] = (f"m.encode(t, attention={a_})", ex)
        if a_ in ("'hierarchical'", "'hierarchical:1:1'", "'hierarchical:1048576:1048576'", "'hierarchical:0'"):
            enc[f"attention_arr={a_}"] = (f"m.encode(p, positions=q, image_size=t.image_size, attention={a_})", ex)
    for th, ex in [(-1, "exc"), (0, "ok"), (1, "ok"), (1024, None), (1025, "exc"), (2**31, "exc"), (None, "exc"), (1.5, "exc")]:
        enc[f"threads={th}"] = (f"m.encode(t, threads={th})", ex)  # 1024: see kw/threads=1024
    for name, (expr, ex) in enc.items():
        case(f"encode/{name}", enc_setup + f"""
            with warnings.catch_warnings():
                warnings.simplefilter('ignore', RuntimeWarning)
                r_ = {expr}
            result = (r_.shape, r_.dtype, float(np.isnan(r_).mean()))""", ex,
             quick=not name.startswith("N_"), mem_limit=6 * GiB if name.startswith("N_") else 4 * GiB,
             timeout=20 if "1024" in name else 60)
    case("encode/bigendian_patches", enc_setup + """
        e1 = m.encode(p, positions=q, image_size=t.image_size)
        e2 = m.encode(p.astype('>f4'), positions=q, image_size=t.image_size)
        result = float(np.nanmax(np.abs(e1 - e2)))
        assert np.allclose(e1, e2), 'SILENT: big-endian float32 patches were read as little-endian (max diff %r)' % result""", None)
    case("encode/bigendian_positions", enc_setup + """
        e1 = m.encode(p, positions=q, image_size=t.image_size)
        e2 = m.encode(p, positions=q.astype('>f4'), image_size=t.image_size)
        result = float(np.nanmax(np.abs(e1 - e2)))
        assert np.allclose(e1, e2), 'SILENT: big-endian float32 positions were read as little-endian (max diff %r)' % result""", None)
    case("encode/bigendian_f16", enc_setup + """
        e1 = m.encode(p.astype(np.float16), positions=q, image_size=t.image_size)
        e2 = m.encode(p.astype('>f2'), positions=q, image_size=t.image_size)
        result = float(np.nanmax(np.abs(e1 - e2)))
        assert np.allclose(e1, e2), 'SILENT: big-endian float16 patches were read as little-endian (max diff %r)' % result""", None)
    case("encode/full_from_arrays_save", enc_setup + "e = m.encode_full(p, positions=q, image_size=t.image_size); result = touch_encoding(e); e.save(W + '/e.safetensors')", "exc")
    case("encode/full_accessors", enc_setup + "e = m.encode_full(t); result = touch_encoding(e)", "ok")
    case("encode/views_outlive", enc_setup + """
        e = m.encode_full(t); v = e.embeddings; c = e.class_token; del e, t; gc.collect(); [np.zeros(1 << 16) for _ in range(50)]
        x = m.encode(T(model=m)); del m; gc.collect()
        result = (float(v.sum()), None if c is None else float(c.sum()), float(x.sum()))""", "ok")
    case("encode/input_modified_in_thread", enc_setup + """
        stop = False
        def scribble():
            while not stop: p[:] = np.random.rand(*p.shape)
        th = threading.Thread(target=scribble); th.start()
        try:
            result = [m.encode(p, positions=q, image_size=t.image_size).shape for _ in range(20)]
        finally:
            stop = True; th.join()""", "ok")
    case("encode/concurrent_same_model", enc_setup + """
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(4) as ex:
            result = [x.shape for x in ex.map(lambda i: m.encode(t, attention='hierarchical' if i % 2 else 'exact', threads=1 + i % 3), range(24))]""", "ok")
    case("encode/tokens_subclass_obj", enc_setup + "result = m.encode(type('X', (), {})())", "exc")

    # ---- load / save --------------------------------------------------------------------------------
    for k in sorted(x for x in fx if x.startswith("st_") or x.startswith("ckpt_")):
        ex = "ok" if k in ("st_ok.safetensors", "st_bf16.safetensors", "st_scalar.safetensors", "st_zero_size.safetensors",
                           "st_padded.safetensors", "st_empty_obj.safetensors") else None
        case(f"load/{k}", f"result = touch_file(fovea.load({fp(k)}))", ex)
    for k in ["junk.bin", "empty.bin", "text.txt", "gguf_cut2000.gguf", "zip_junk.bin", "png_1x1.png"]:
        case(f"load/{k}", f"result = touch_file(fovea.load({fp(k)}))", "exc")
    for name, (expr, ex) in {**paths, "fixture_ckpt": ("MODEL", "ok"), "fixture_cases": ("ENC + '/clip/cases.safetensors'", "ok")}.items():
        if name in ("fspath_bytes", "fifo_png"):
            continue
        case(f"load/path_{name}", f"result = touch_file(fovea.load({expr}))", "ok" if name.startswith("fixture") else "exc",
             timeout=8 if "fifo" in name else 60)
    case("load/bytes_path", "result = touch_file(fovea.load(MODEL.encode()))", None)
    case("load/keys_wrong_type", "f = fovea.load(MODEL); result = f[5]", "exc")
    case("load/missing_key", "f = fovea.load(MODEL); result = f['nope']", "exc")
    case("load/contains_wrong_type", "f = fovea.load(MODEL); result = 5 in f", None)
    case("load/key_nul", "f = fovea.load(MODEL); result = f[list(f)[0] + '\\x00']", "exc")
    case("load/views_outlive_file", """
        f = fovea.load(MODEL); arrs = [f[k] for k in f.keys()]; del f; gc.collect(); [np.zeros(1 << 16) for _ in range(50)]
        result = sum(float(np.asarray(a, np.float64).sum()) for a in arrs)""", "ok")
    case("load/view_readonly", "f = fovea.load(MODEL); a = f[f.keys()[0]]; a[...] = 0", "exc")
    case("load/file_rewritten_while_mapped", """
        import shutil
        shutil.copy(MODEL, W + '/m.safetensors'); f = fovea.load(W + '/m.safetensors'); a = f[f.keys()[-1]]
        with open(W + '/m.safetensors', 'r+b') as g: g.write(b'\\xff' * 64)
        result = (float(np.asarray(a, np.float64).sum()), touch_file(f)[:3])""", None)
    # Not a case: truncating a file while a fovea.load view of it is alive is SIGBUS by design (the
    # file is mapped; fovea.save never truncates in place; docs/explanation/reliability.md).
    save_setup = "p = W + '/s.safetensors'\n"
    sv = {
        "empty": ("{}", "ok"), "one": ("{'a': np.arange(6, dtype=np.float32).reshape(2, 3)}", "ok"),
        "list_value": ("{'a': [1, 2, 3]}", "ok"), "str_value": ("{'a': 'str'}", "exc"), "none_value": ("{'a': None}", "exc"),
        "obj_value": ("{'a': object()}", "exc"), "int_key": ("{5: np.zeros(3)}", "ok"), "empty_key": ("{'': np.zeros(3)}", None),
        "metadata_key": ("{'__metadata__': np.zeros(3)}", "exc"), "tuple_key": ("{(1, 2): np.zeros(3)}", None),
        "bool": ("{'a': np.zeros(3, bool)}", "exc"), "complex": ("{'a': np.zeros(3, complex)}", "exc"),
        "object": ("{'a': np.array([None])}", "exc"), "u32": ("{'a': np.zeros(3, np.uint32)}", "exc"),
        "u64": ("{'a': np.zeros(3, np.uint64)}", "exc"), "f128": ("{'a': np.zeros(3, np.longdouble)}", "exc"),
        "datetime": ("{'a': np.zeros(3, 'M8[s]')}", "exc"), "structured": ("{'a': np.zeros(3, [('x', 'f4')])}", "exc"),
        "unicode_arr": ("{'a': np.array(['x'])}", "exc"), "scalar0d": ("{'a': np.float32(3)}", "ok"),
        "zero_size": ("{'a': np.zeros((0, 5), np.float32)}", "ok"), "noncontig": ("{'a': np.arange(20, dtype=np.float32)[::3]}", "ok"),
        "fortran": ("{'a': np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))}", "ok"),
        "negative_strides": ("{'a': np.arange(12, dtype=np.int64)[::-1]}", "ok"), "broadcast": ("{'a': np.broadcast_to(np.float32(1), (1000, 1000))}", "ok"),
        "readonly": ("{'a': np.frombuffer(b'abcdefgh', np.uint8)}", "ok"), "many": ("{str(i): np.zeros(1, np.int8) for i in range(100000)}", None),
        "f16": ("{'a': np.ones(5, np.float16)}", "ok"), "all_types": ("{d: np.ones(3, d) for d in ['u1', 'i1', 'u2', 'i2', 'i4', 'i8', 'f2', 'f4', 'f8']}", "ok"),
        "tensors_list": ("[('a', np.zeros(3))]", "ok"), "tensors_array": ("np.zeros(3)", "exc"), "tensors_none": ("None", "exc"),
        "tensors_str": ("'abc'", "exc"), "mixed_keys_clash": ("{5: np.zeros(3), '5': np.ones(3)}", None),
        "huge_dim_zero": ("{'a': np.zeros((0, 2**40), np.float32)}", None),
    }
    for name, (expr, ex) in sv.items():
        slow = dict(quick=False, timeout=30) if name == "many" else {}
        case(f"save/{name}", save_setup + f"""
            fovea.save(p, {expr})
            f = fovea.load(p); result = touch_file(f)[:4]
            src = dict({expr}) if not isinstance({expr}, dict) else {expr}
            for k, v in src.items():
                a = np.asarray(v)
                assert str(k) in f, 'SILENT: %r missing after the round trip (keys %r)' % (k, f.keys()[:5])
                assert f[str(k)].shape == a.shape and np.array_equal(f[str(k)], a), 'SILENT: %r changed in the round trip' % (k,)
            assert len(f) == len(src), 'SILENT: %d tensors saved, %d read back' % (len(src), len(f))""", ex, **slow)
    for dt in ["'>f4'", "'>i8'", "'>u2'", "'>f2'", "'>f8'", "'>i2'"]:
        case(f"save/bigendian_{dt}", save_setup + f"""
            a = np.arange(6).astype({dt}); fovea.save(p, {{'a': a}}); b = fovea.load(p)['a']
            result = (b.dtype.str, b.tolist())
            assert np.array_equal(a, b), 'SILENT: big-endian %s saved byte-swapped: %r -> %r' % (a.dtype.str, a.tolist(), b.tolist())""", None)
    for name in ["quote", "backslash", "newline", "nul", "unicode", "control", "long", "json_like", "bidi"]:
        key = {"quote": 'a"b', "backslash": "a\\b", "newline": "a\nb", "nul": "a\0b", "unicode": "é漢字🙂", "control": "\x01\x1f\x7f",
               "long": "k" * 100000, "json_like": '{"dtype": "F32"}', "bidi": "\u202e"}[name]
        case(f"save/key_{name}", save_setup + f"""
            k = {key!r}; fovea.save(p, {{k: np.arange(3, dtype=np.float32)}})
            f = fovea.load(p); result = [x[:20] for x in f.keys()]
            assert f.keys() == [k], 'SILENT: key %r read back as %r' % (k[:20], f.keys())""", None)
        case(f"save/meta_{name}", save_setup + f"""
            k = {key!r}; fovea.save(p, {{'a': np.zeros(1)}}, {{k: k, 'x': k}})
            f = fovea.load(p); result = {{a[:20]: b[:20] for a, b in f.metadata.items()}}
            assert f.metadata == {{k: k, 'x': k}}, 'SILENT: metadata changed in the round trip'""", None)
    case("save/key_surrogate", save_setup + "fovea.save(p, {'\\udc80': np.zeros(1)})", "exc")
    case("save/meta_surrogate", save_setup + "fovea.save(p, {'a': np.zeros(1)}, {'k': '\\udc80'})", "exc")
    for name, (meta, ex) in {"none": ("None", "ok"), "empty": ("{}", "ok"), "nonstr": ("{1: 2, None: 3.5}", "ok"),
                             "list": ("[('a', 'b')]", "ok"), "str": ("'abc'", "exc"), "big_50mb": ("{'k': 'x' * (50 << 20)}", None),
                             "big_120mb": ("{'k': 'x' * (120 << 20)}", None), "many": ("{str(i): 'v' for i in range(300000)}", None),
                             "metadata_key": ("{'__metadata__': 'x'}", None)}.items():
        case(f"save/metadata_{name}", save_setup + f"""
            fovea.save(p, {{'a': np.zeros(2)}}, {meta})
            try:
                f = fovea.load(p)
            except Exception as e:
                raise AssertionError('SILENT: fovea.save wrote a file fovea.load refuses: %s' % str(e)[-120:])
            result = (len(f.metadata), touch_file(f)[:2])
            assert len(f.metadata) == len({meta} or {{}}), 'SILENT: %d metadata entries read back' % len(f.metadata)""", ex,
             quick="big" not in name and "many" not in name, timeout=30 if name == "many" else 60)
    for name, (expr, ex) in saves.items():
        if name in ("ok", "pathlib", "long_name", "fspath_bytes", "fifo", "symlink_dangling"):
            continue
        case(f"save/path_{name}", f"fovea.save({expr}, {{'a': np.zeros(3)}})", ex)
    case("save/dev_full", "fovea.save('/dev/full', {'a': np.zeros(3)})", "exc")
    case("save/raw_metadata_nonstr", "_fovea.save(W + '/x.safetensors', {'a': np.zeros(2)}, {1: 2})", "exc")
    case("save/raw_tensors_list", "_fovea.save(W + '/x.safetensors', [('a', np.zeros(2))], {})", "exc")
    case("save/big_2gb", save_setup + "a = np.zeros(2**31 + 8, np.uint8); fovea.save(p, {'a': a}); result = os.path.getsize(p)", None,
         quick=False, mem_limit=4 * GiB, rss_budget=4 * GiB, timeout=180)
    case("save/concurrent_same_path", save_setup + """
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda i: fovea.save(p, {'a': np.full(100000, i, np.float32)}), range(40)))
        result = touch_file(fovea.load(p))[:3]""", "ok")

    # ---- VideoReader ------------------------------------------------------------------------------
    vq = False  # video cases are not in --quick
    for name, (expr, ex) in {**paths, "video": ("VIDEO", "ok")}.items():
        if name == "pathlib":
            expr, ex = "pathlib.Path(VIDEO)", "ok"
        if name in ("fifo_png",):
            expr, ex = "fifo_with(rb(VIDEO))", None
        if name == "symlink_dev_zero":  # FFmpeg's image2 demuxer: a 0x0 "video" without frames, no error
            ex = None
        case(f"videoreader/path_{name}", f"result = touch_reader(fovea.VideoReader({expr}))", ex, quick=vq,
             timeout=8 if "fifo" in name else 60)
    case("videoreader/fifo_no_writer", "p = W + '/fifo0'; os.mkfifo(p); result = touch_reader(fovea.VideoReader(p))", "exc", quick=vq, timeout=8)
    vfiles = sorted([k for k in fx if k.startswith("video/")]) + ["/tests/data/video/" + v for v in sorted(os.listdir(os.path.join(REPO, "tests/data/video")))]
    vfiles += [k for k in fx if k.endswith((".y4m",))] + ["png_1x1.png", "junk.bin", "empty.bin", "gif_huge.gif", "ok.jpg"]
    vfiles += ["/tests/data/images/anim.webp", "/tests/data/images/palette.gif", "/tests/data/images/hang_ffmpeg51.jxl"]
    if os.path.isdir("/tmp/fovea-clips"):
        vfiles += ["clip:" + c for c in sorted(os.listdir("/tmp/fovea-clips"))[:2]]

    def vpath(k):
        if k.startswith("/tests/"):
            return f"R + {k!r}"
        if k.startswith("clip:"):
            return repr("/tmp/fovea-clips/" + k[5:])
        return fp(k)

    for k in vfiles:
        case(f"videoreader/file_{k}", f"result = touch_reader(fovea.VideoReader({vpath(k)}, quiet=True))", None, quick=vq, timeout=60)
    for kw, vals in {"every": [0, -1, 1, 2, 2**31 - 1, 2**31, None, 1.5], "fps": [0, -1, "nan", "inf", 1e-300, 1e300, 1e-9, "'x'", None],
                     "max_frames": [0, -1, 1, 2**63 - 1, 2**63, None], "threads": [-1, 0, 1, 64, 100000, 2**31 - 1, 2**31, None],
                     "max_pixels": [0, 1, 15360, 2**64 - 1, -1, None], "quiet": [False, None, "'x'"], "autorotate": [False, None, "'x'"]}.items():
        for v in vals:
            case(f"videoreader/{kw}={v}", f"result = touch_reader(fovea.VideoReader(VIDEO, {kw}={v}))", None, quick=vq)
    case("videoreader/every_and_fps", "result = fovea.VideoReader(VIDEO, every=2, fps=5)", "exc", quick=vq)
    case("videoreader/raw_every0", "result = _fovea.VideoReader(VIDEO, 0, None, None, 0, 10**8, True, True)", "exc", quick=vq)
    case("videoreader/next_after_end", """
        vr = fovea.VideoReader(VIDEO); n = len(list(vr))
        got = []
        for _ in range(3):
            try: next(vr); got.append('frame')
            except StopIteration: got.append('stop')
        result = (n, got, vr.frames_decoded)""", "ok", quick=vq)
    case("videoreader/frames_outlive_reader", """
        vr = fovea.VideoReader(VIDEO); frames = [f.image for f in vr]; del vr; gc.collect()
        result = [int(f.sum()) for f in frames]""", "ok", quick=vq)
    case("videoreader/frame_views_recycled", """
        vr = fovea.VideoReader(VIDEO); sub = []
        for f in vr:
            sub.append(f.image[10:20, 10:20])   # a view keeps its frame's buffer
        c = [s.copy() for s in sub]; gc.collect()
        result = all(np.array_equal(a, b) for a, b in zip(sub, c))
        assert result, 'SILENT: a frame view changed after later frames were decoded'""", "ok", quick=vq)
    case("videoreader/frame_tokenize", "vr = fovea.VideoReader(VIDEO); result = [touch_tokens(fovea.tokenize(f.image, budget=30))[0] for f in vr]", "ok", quick=vq)
    case("videoreader/two_threads", """
        vr = fovea.VideoReader(VIDEO); out = []
        def eat():
            for f in vr: out.append(f.index)
        ts = [threading.Thread(target=eat) for _ in range(3)]; [t.start() for t in ts]; [t.join() for t in ts]
        result = sorted(out)""", "ok", quick=vq)
    case("videoreader/wrapper_attrs", "vr = fovea.VideoReader(VIDEO); result = (vr.info, vr.warnings, vr.timestamps_repaired, next(iter(vr)).index)", "ok", quick=vq)

    # ---- video --------------------------------------------------------------------------------------
    vsetup = "m = M()\n"
    vkw = {
        "model": ["None", "'x'", "5", "M()"], "budget": [0, -1, 1, 2**31 - 1, 2**31, None],
        "fixations": ["[]", "[(1, 2)]", "[(1,)]", "[(nan, 1)]", "'abc'", "lambda i, pts: [(i, i)]", "lambda i, pts: None",
                      "lambda i, pts: 5", "lambda i, pts: [(1,)]", "lambda i, pts: [(nan, 1)]", "lambda i, pts: 1 / 0",
                      "lambda: []", "lambda i, pts: [('a', 'b')]", "lambda i, pts: (x for x in [(1, 2)])",
                      "lambda i, pts: [(1, 2, -1)]", "lambda i, pts: sys.exit(3)", "lambda i, pts: [(1e30, 1e30, 1e30)]",
                      "lambda i, pts: fovea.tokenize(A) and []"],
        "regions": ["[(0, 0, 10, 10)]", "[(10, 10, 0, 0)]", "[(0, 0, 1)]", "'abcd'"],
        "every": [-1, 0, 1, 2, 2**31], "fps": [-1, "nan", "inf", 1e-9, 1e300], "max_frames": [-1, 0, 1, 2**63 - 1, 2**63],
        "reuse": ["'off'", "'exact'", "'incremental'", "'bogus'", "''", "5"], "keyframe": [-1, 0, 1, 2**31 - 1, 2**31],
        "group": [0, 1, 1024, 1025, -1], "threshold": [-1, 0, "nan", "inf", 1e38], "token_threshold": [-1, 0, "nan", "inf", 1e38],
        "hysteresis": [-1, 0, "nan", "inf"], "refresh_fraction": [0, 1e-30, 1, 1.5, "nan"], "precision": ["'fp32'", "'bf16'", "'x'", "None"],
        "threads": [-1, 0, 1025], "patch": [16, 8, 0, 2], "dtype": ["'u8'", "'f16'", "'x'"], "max_level": [25],
        "weights": ["{'detail': nan}"], "e0": ["nan"], "sharpness": [0], "mean": ["[nan] * 3"],
        "std": ["[0, 0, 0]"], "normalize": [False], "fine_bias": ["nan"], "detail_focus": [5], "fixation_spread": [0],
        "lookahead": [9], "max_pixels": [0, 1, 2**64 - 1, -1], "quiet": [False], "autorotate": [False],
        "output": ["W + '/o.safetensors'", "W", "'/proc/x'", "W + '/nope/o.safetensors'", "W + '/o\\x00.safetensors'", "5", "''"],
        "overlay": ["W + '/o.png'", "W", "'/proc/x.png'", "W + '/nope/o.png'", "5", "''"],
    }
    for kw, vals in vkw.items():
        for v in vals:
            nomodel_too = kw in ("fixations", "reuse", "dtype", "output", "overlay")
            for with_model in ((True, False) if nomodel_too else (True,)):
                if not with_model and kw in ("model", "precision", "threads", "group", "token_threshold"):
                    continue
                mexpr = "m" if with_model else "None"
                if kw == "model":
                    mexpr = v
                args = "" if kw in ("model", "budget") else f", {kw}={v}"
                ex = None
                case(f"video/{kw}={v}{'' if with_model else '_nomodel'}", vsetup + f"""
                    out = fovea.video(VIDEO, {mexpr}, {v if kw == "budget" else 40}{args})
                    if isinstance(out, dict):
                        result = sorted(out)
                    else:
                        result = [touch_frame(fr) for fr in out][:2]""", ex, quick=vq)
    case("video/output_and_overlay_ok", vsetup + """
        out = fovea.video(VIDEO, m, 40, output=W + '/o.safetensors', overlay=W + '/o.png')
        result = (out['frames'], out['mean_ms'] >= 0, touch_file(fovea.load(W + '/o.safetensors'))[:3], os.path.getsize(W + '/o.png'))""", "ok", quick=vq)
    case("video/frames_outlive_list", vsetup + """
        out = fovea.video(VIDEO, m, 40); views = [(fr.embeddings, fr.patches, fr.positions, fr.recomputed, fr.previous_row) for fr in out]
        del out; gc.collect(); [np.zeros(1 << 16) for _ in range(50)]
        result = [float(np.nansum(v[0])) + float(np.nansum(np.asarray(v[1], np.float64))) for v in views]""", "ok", quick=vq)
    case("video/callable_reenters_video", vsetup + """
        def fx_(i, pts):
            fovea.video(VIDEO, None, 20, max_frames=1)
            return [(i, i)]
        result = len(fovea.video(VIDEO, m, 30, fixations=fx_, max_frames=3))""", None, quick=vq)
    case("video/callable_raises_keyboardinterrupt", vsetup + """
        def fx_(i, pts):
            if i == 2: raise KeyboardInterrupt
            return []
        result = fovea.video(VIDEO, m, 30, fixations=fx_)""", "exc", quick=vq)
    case("video/callable_raises_with_output", vsetup + """
        def fx_(i, pts):
            if i == 3: raise ValueError('stop here')
            return []
        try:
            result = fovea.video(VIDEO, m, 30, fixations=fx_, output=W + '/o.safetensors', overlay=W + '/o.png')
        finally:
            left = sorted(os.listdir(W))
            assert left == [], 'SILENT: a failed run left %r' % left""", "exc", quick=vq)
    for k in vfiles:
        case(f"video/file_{k}", vsetup + f"""
            result = []
            for reuse in ('incremental', 'exact', 'off'):
                out = fovea.video({vpath(k)}, m, 40, reuse=reuse, fixations=[(5, 5)], max_frames=30)
                result.append([touch_frame(fr) for fr in out][:2])
            out = fovea.video({vpath(k)}, None, 40, max_frames=30, dtype='u8')
            result.append([touch_frame(fr) for fr in out][:1])""", None, quick=vq, timeout=120)
        case(f"video/file_{k}_output", vsetup + f"""
            out = fovea.video({vpath(k)}, m, 40, output=W + '/o.safetensors', max_frames=30)
            result = out
            import math
            assert not (isinstance(out.get('mean_ms'), float) and math.isnan(out['mean_ms'])), 'SILENT: mean_ms is NaN (0 frames)'""",
             None, quick=vq, timeout=90)
    case("video/reschange_nomodel_patches", """
        out = fovea.video(F + '/video/reschange.ts', None, 40, reuse='exact')
        result = [(fr.index, fr.positions.max(0).tolist()) for fr in out]""", None, quick=vq)


# ---------------------------------------------------------------------------------------------
# running


def classify(c: Case, rc: Optional[int], rep: Optional[dict], stderr: str, timed_out: bool, rss_kb: int):
    c.rss_mb = rss_kb / 1024
    if timed_out:
        c.outcome, c.detail = "HANG", f"still running after {c.timeout:.0f} s; stderr: {stderr[-300:]!r}"
        return
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = str(-rc)
        when = "at interpreter exit (after the case reported)" if rep else "during the case"
        c.outcome, c.detail = "CRASH", f"killed by {sig} {when}; stderr: {stderr[-600:]!r}"
        return
    if rep is None:
        c.outcome, c.detail = "CRASH", f"exit code {rc} without a report; stderr: {stderr[-600:]!r}"
        return
    c.report = rep
    c.secs = rep.get("secs", 0.0)
    if rep["status"] == "setup":
        c.outcome, c.detail = "HARNESS", f"prelude failed: {rep.get('type')}: {rep.get('msg')}"
        return
    if rc not in (0, None) and not (rep["status"] == "exc" and rep.get("type") == "SystemExit"):
        c.outcome, c.detail = "CRASH", f"exit code {rc} at interpreter exit; stderr: {stderr[-600:]!r}"
        return
    if c.rss_mb * MiB > c.rss_budget:
        c.outcome, c.detail = "MEMORY", f"peak RSS {c.rss_mb:.0f} MB (budget {c.rss_budget / MiB:.0f} MB)"
        return
    if rep["status"] == "ok":
        if c.expect == "exc":
            c.outcome, c.detail = "UNEXPECTED", f"returned normally where an exception was due: {rep.get('result', '')[:300]}"
        else:
            c.outcome, c.detail = "ok", rep.get("result", "")[:200]
        return
    typ, msg, mro = rep.get("type", ""), rep.get("msg", ""), set(rep.get("mro", []))
    if typ == "AssertionError" and "SILENT" in msg:
        c.outcome, c.detail = "SILENT", msg[:400]
        return
    if typ == "AssertionError" and "UNHELPFUL" in msg:  # the case judged the message
        c.outcome, c.detail = "UNHELPFUL", msg[:400]
        return
    if typ == "SystemError" or "SystemError" in mro:
        c.outcome, c.detail = "UNHELPFUL", f"SystemError: {msg[:300]}"
        return
    if not msg.strip() and typ not in ("KeyboardInterrupt", "StopIteration", "SystemExit", "ZeroDivisionError"):
        c.outcome, c.detail = "UNHELPFUL", f"{typ} with an empty message"
        return
    if CXX_RE.search(msg):
        c.outcome, c.detail = "UNHELPFUL", f"{typ}: {msg[:400]}"
        return
    raised_by_case = typ in ("ZeroDivisionError", "KeyboardInterrupt", "SystemExit") or "stop here" in msg or "convert failed" in msg
    if not (mro & NORMAL_EXC) and not raised_by_case:
        c.outcome, c.detail = "UNHELPFUL", f"odd exception class {typ}: {msg[:300]}"
        return
    if c.expect == "ok":
        c.outcome, c.detail = "UNEXPECTED", f"raised on valid input: {typ}: {msg[:300]}"
        return
    c.outcome, c.detail = "raised", f"{typ}: {msg[:200]}"


def run_case(c: Case, fixdir: str, workroot: str, idx: int) -> Case:
    work = os.path.join(workroot, f"w{idx}")
    os.makedirs(work, exist_ok=True)
    outp = os.path.join(workroot, f"r{idx}.json")
    errp = os.path.join(workroot, f"e{idx}.txt")
    env = dict(os.environ, SWEEP_REPO=REPO, SWEEP_FIX=fixdir, SWEEP_WORK=work, SWEEP_OUT=outp, SWEEP_CODE=c.code,
               SWEEP_PRELUDE=PRELUDE, PYTHONFAULTHANDLER="1", OMP_WAIT_POLICY="passive")
    pp = os.environ.get("PYTHONPATH") or os.path.join(REPO, "build/python")
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(x) for x in pp.split(os.pathsep) if x)  # the child runs elsewhere

    def limits():
        os.setsid()
        try:
            os.nice(5)
        except OSError:
            pass
        resource.setrlimit(resource.RLIMIT_AS, (c.mem_limit, c.mem_limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    t0 = time.time()
    with open(errp, "wb") as err:
        p = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=err, preexec_fn=limits, cwd=work)
        timed_out, rc, rss = False, None, 0
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                rss = ru.ru_maxrss
                p.returncode = rc
                break
            if time.time() - t0 > c.timeout:
                timed_out = True
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _, status, ru = os.wait4(p.pid, 0)
                rss = ru.ru_maxrss
                p.returncode = -9
                break
            time.sleep(0.02)
    wall = time.time() - t0
    rep = None
    if os.path.exists(outp):
        try:
            rep = json.load(open(outp))
        except ValueError:
            rep = None
    stderr = open(errp, "rb").read().decode("utf-8", "replace")
    classify(c, rc, rep, stderr, timed_out, rss)
    c.secs = c.secs or wall
    shutil.rmtree(work, ignore_errors=True)
    for f in (outp, errp):
        try:
            os.remove(f)
        except OSError:
            pass
    return c


FINDING = ("CRASH", "HANG", "MEMORY", "UNHELPFUL", "UNEXPECTED", "SILENT")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip the video, big-memory and slow cases")
    ap.add_argument("--only", help="run only the cases whose name matches this regular expression")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--json", help="write every case's outcome here")
    ap.add_argument("--keep", action="store_true", help="keep the fixtures directory")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--verbose", action="store_true", help="print every case, not only findings")
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="fovea-sweep-")
    fixdir = os.path.join(root, "fix")
    workroot = os.path.join(root, "work")
    os.makedirs(workroot)
    t0 = time.time()
    try:
        fx = build_fixtures(fixdir, args.quick)
        define_cases(fx)
        cases = [c for c in CASES if (not args.quick or c.quick) and (not args.only or re.search(args.only, c.name))]
        names = [c.name for c in cases]
        assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1][:5]
        if args.list:
            for c in cases:
                print(c.name)
            return 0
        print(f"{len(cases)} cases, {args.jobs} at a time (fixtures in {fixdir}, built in {time.time() - t0:.1f} s)", flush=True)
        done = 0
        with ThreadPoolExecutor(max(1, args.jobs)) as ex:
            futs = [ex.submit(run_case, c, fixdir, workroot, i) for i, c in enumerate(cases)]
            for f in futs:
                c = f.result()
                done += 1
                if c.outcome in FINDING or c.outcome == "HARNESS" or args.verbose:
                    print(f"[{done}/{len(cases)}] {c.outcome:10s} {c.name} ({c.secs:.1f} s, {c.rss_mb:.0f} MB): {c.detail[:500]}", flush=True)
                elif done % 50 == 0:
                    print(f"[{done}/{len(cases)}] ...", flush=True)
        counts = {}
        for c in cases:
            counts[c.outcome] = counts.get(c.outcome, 0) + 1
        findings = [c for c in cases if c.outcome in FINDING]
        if findings:
            print("\nFindings:")
            for c in findings:
                print(f"\n--- {c.outcome}: {c.name} ({c.secs:.1f} s, peak {c.rss_mb:.0f} MB)\n{c.detail[:700]}\n{textwrap.indent(c.code, '    ')}")
        slow = sorted(cases, key=lambda c: -c.secs)[:5]
        print("\nslowest: " + ", ".join(f"{c.name} {c.secs:.1f} s" for c in slow))
        order = ["ok", "raised"] + list(FINDING) + ["HARNESS"]
        summary = ", ".join(f"{k} {counts[k]}" for k in order if k in counts)
        print(f"\nsweep: {len(cases)} cases in {time.time() - t0:.0f} s: {summary}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump([{"name": c.name, "outcome": c.outcome, "detail": c.detail, "secs": c.secs, "rss_mb": c.rss_mb,
                            "code": c.code, "report": c.report} for c in cases], f, indent=1, default=str)
        return 1 if findings else 0
    finally:
        if args.keep:
            print(f"(fixtures kept in {root})")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
