#!/usr/bin/env python3
"""Hostile-edit sweep of llama.cpp mmproj GGUF files through `fovea model` and `fovea encode`.

The GGUF byte-level reader is fuzzed elsewhere (fuzz/fuzz_gguf.cpp); this sweep tests the layer
above it: src/encoder/loaders/gguf_mmproj.cpp, which maps the GGUF key/values and tensors of an
mmproj file to a ViT, and the encoder that then runs it. Each fixture
(tests/data/encoder/gguf_llava/mmproj.gguf, tests/data/encoder/gguf_siglip/mmproj.gguf, written by
scripts/make_encoder_fixtures.py) is parsed into (key/value list, tensor list with data) by the
small GGUF reader/writer below (stdlib only, no `gguf` package); ONE edit is applied; a valid GGUF
file is written; then

    build/fovea model F
    build/fovea encode tests/data/images/source.png --model F --budget 32 --threads 1 -o OUT

run in a subprocess each (60 s timeout, RLIMIT_AS 4 GiB via resource.setrlimit in preexec_fn,
own process group, peak RSS from wait4).

Edits (one at a time):
  kv      every integer hyper-parameter (image_size, patch_size, embedding_length,
          feed_forward_length, block_count, attention.head_count, projection_dim) set to 0, 1, -1,
          3, 2**31-1, 2**32+1, 2**63-1 (and 2**64-1, -2**63, plausible-but-wrong values: dividing
          head counts, block_count +-1, ...); the same value stored as another GGUF integer type
          (harmless) or as float, string, array, bool; layer_norm_epsilon 0 / negative / NaN / inf /
          1e38 / 1 / denormal and other types; image_mean / image_std elements 0 / negative / NaN /
          inf / 1e38 / 1e-38, wrong lengths, wrong element types, scalar instead of array;
          projector_type unknown / empty / 1 MiB long / with control characters / other llama.cpp
          types / wrong type; architecture, has_vision_encoder, has_llava_projector, use_gelu,
          use_silu, feature_layer; every key removed in turn.
  tensor  every tensor removed, renamed, its shape changed (transposed, first / last / channel dim
          +1 / -1, an extra dim of 1 in front or behind, a zero dim), its type changed (F32, F16,
          BF16, Q8_0 and Q4_0 where the row length allows it, and the unsupported F64) with data of
          the consistent size, its data filled with NaN / inf / 1e38 (and one NaN element).
  block   block_count above / below the blocks present (and 0, 4096), a block duplicated, the
          blocks swapped, a whole block removed, stray tensors for blocks beyond block_count
          (7, 999999, 1000000, -1, 01).
  shape   self-consistent models of other dimensions, regenerated from the fixture's tensors
          (width / heads, MLP width, channels, patch size incl. 1 and 257, position grid, block
          count, projector widths): they must load and encode, or be refused cleanly.

Expected outcome of a refused edit: exit 1 (2 for argument errors), exactly one stderr line
starting `fovea: error:` that names the key or tensor, no output file (nor anything else) left
behind. An accepted edit is compared with the unedited fixture's output (embeddings, projected,
class_token): identical, close (type changes), different, or non-finite. Outcomes are then judged
against what each edit expects:

  FINDING   crash (signal), timeout, peak RSS > 1 GiB or "out of memory", broken error contract
            (exit code, several / missing lines, control characters, message > 2000 chars,
            "internal error", output file left), `model` and `encode` disagreeing in a way that
            lets a broken model through, or a hostile edit accepted with a different result
            (a silently wrong model)
            a valid model refused (a head count that divides the width: another valid model, read as
            the file says), a refused head count whose message does not name the key
  DOUBT     accepted with NaN/inf output, a hostile edit accepted but ignored, an error message
            that does not name the edited key / tensor, a harmless edit refused
  OK        everything else

Run (from the repository root; 10-14 min on 2 shared cores, --quick 2.5-5 min):

    /usr/bin/python3 tests/sweeps/gguf_model_sweep.py [--quick] [--jobs 2] [--json REPORT.json]
    /usr/bin/python3 tests/sweeps/gguf_model_sweep.py --list [--quick]          # case ids only
    /usr/bin/python3 tests/sweeps/gguf_model_sweep.py --only 'siglip:tensor:v.patch_embd.weight:*' -v
    /usr/bin/python3 tests/sweeps/gguf_model_sweep.py --only CASE --keep DIR   # keep DIR/CASE/model.gguf

--only takes fnmatch patterns (comma-separated). --keep writes each selected case's mutated file
(and the output, if any) to DIR/<case id with ':' and '/' replaced by '_'>/ and does not delete
it; with --write-only the file is written without running fovea. Exit status: 0 when no FINDING,
1 otherwise.
"""
import argparse
import array
import fnmatch
import json
import math
import multiprocessing
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOVEA = os.path.join(ROOT, "build", "fovea")  # --fovea
IMAGE = os.path.join("tests", "data", "images", "source.png")  # 48 x 32 RGB
FIXTURES = {
    "llava": os.path.join("tests", "data", "encoder", "gguf_llava", "mmproj.gguf"),
    "siglip": os.path.join("tests", "data", "encoder", "gguf_siglip", "mmproj.gguf"),
}
TIMEOUT_S = 60
AS_LIMIT = 4 << 30
RSS_LIMIT_KB = 1 << 20  # 1 GiB peak RSS is a blow-up for these ~60 KB models
MAX_MESSAGE = 2000

# ---- GGUF: scripts/fovea_testio/gguf.py ---------------------------------------------------------
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from fovea_testio.gguf import (  # noqa: E402
    ARRAY, BOOL, F32, F64, GGML, GGML_BF16, GGML_F16, GGML_F32, GGML_F64, GGML_Q4_0, GGML_Q8_0, I8, I16, I32, I64,
    STRING, TYPE_NAMES, U8, U16, U32, U64, numel)
from fovea_testio.gguf import encode as write_gguf, parse as parse_gguf  # noqa: E402
from fovea_testio.safetensors import read as st_read  # noqa: E402


# ---- tensor data: decode to floats, encode from floats -----------------------------------------------
def f16_bytes(x):
    try:
        return struct.pack("<e", x)
    except (OverflowError, struct.error):
        return struct.pack("<e", math.copysign(math.inf, x))


def bf16_bits(x):
    (u,) = struct.unpack("<I", struct.pack("<f", x) if abs(x) < 3.4e38 or not math.isfinite(x) else
                         struct.pack("<f", math.copysign(math.inf, x)))
    if x != x:
        return 0x7FC0
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def decode(t):
    d, kind = t["data"], t["type"]
    if kind == GGML_F32:
        a = array.array("f")
        a.frombytes(d)
        return list(a)
    if kind == GGML_F64:
        a = array.array("d")
        a.frombytes(d)
        return list(a)
    if kind == GGML_F16:
        return list(struct.unpack("<%de" % (len(d) // 2), d))
    if kind == GGML_BF16:
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack("<%dH" % (len(d) // 2), d)]
    if kind == GGML_Q8_0:
        out = []
        for i in range(0, len(d), 34):
            (s,) = struct.unpack_from("<e", d, i)
            out += [s * q for q in struct.unpack_from("<32b", d, i + 2)]
        return out
    if kind == GGML_Q4_0:
        out = []
        for i in range(0, len(d), 18):
            (s,) = struct.unpack_from("<e", d, i)
            qs = d[i + 2:i + 18]
            out += [s * ((q & 15) - 8) for q in qs] + [s * ((q >> 4) - 8) for q in qs]
        return out
    raise ValueError("cannot decode ggml type %d" % kind)


def encode(values, kind):
    if kind == GGML_F32:
        return b"".join(struct.pack("<f", v if not math.isfinite(v) or abs(v) < 3.4e38 else math.copysign(math.inf, v))
                        for v in values)
    if kind == GGML_F64:
        return array.array("d", values).tobytes()
    if kind == GGML_F16:
        return b"".join(f16_bytes(v) for v in values)
    if kind == GGML_BF16:
        return b"".join(struct.pack("<H", bf16_bits(v)) for v in values)
    assert len(values) % 32 == 0
    out = b""
    for i in range(0, len(values), 32):
        blk = values[i:i + 32]
        amax = max((abs(v) for v in blk), default=0.0) if all(v == v for v in blk) else math.nan
        if kind == GGML_Q8_0:
            s = amax / 127.0
            inv = 1.0 / s if s and math.isfinite(s) else 0.0
            qs = [max(-127, min(127, int(round(v * inv)))) if math.isfinite(v * inv) else 0 for v in blk]
            out += f16_bytes(s) + struct.pack("<32b", *qs)
        else:  # Q4_0 (ggml's quantize_row_q4_0_ref: the signed max maps to -8)
            mx = max(blk, key=abs) if amax == amax else math.nan
            s = mx / -8.0 if mx == mx else math.nan
            inv = 1.0 / s if s and math.isfinite(s) else 0.0
            q = [min(15, max(0, int(v * inv + 8.5))) if math.isfinite(v * inv) else 8 for v in blk]
            out += f16_bytes(s) + bytes(q[j] | (q[j + 16] << 4) for j in range(16))
    return out


def type_ok(kind, shape):
    return len(shape) > 0 and shape[-1] % GGML[kind][1] == 0 and all(d >= 0 for d in shape)


def retyped(t, kind, values=None, shape=None):
    shape = t["shape"] if shape is None else shape
    if values is None:
        values = decode(t)
    n = numel(shape)
    if len(values) != n:  # resized: the old values, cycled (or nothing for a zero dim)
        values = [values[i % len(values)] for i in range(n)] if values else [0.0] * n
    return dict(t, shape=list(shape), type=kind, data=encode(values, kind) if n else b"")


# ---- running fovea ----------------------------------------------------------------------------------
def _limit():  # preexec_fn: keep it trivial (the worker is single-threaded)
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run(argv, cwd, tag):
    """(exit status or -signal or 'timeout', stdout, stderr, peak RSS KiB, seconds)."""
    out_path, err_path = os.path.join(cwd, tag + ".stdout"), os.path.join(cwd, tag + ".stderr")
    t0 = time.monotonic()
    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        p = subprocess.Popen(argv, cwd=ROOT, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, preexec_fn=_limit,
                             start_new_session=True)
        status, rss, delay = None, 0, 0.002
        while True:
            pid, st, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                rss = ru.ru_maxrss
                status = -os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st)
                break
            if time.monotonic() - t0 > TIMEOUT_S:
                os.killpg(p.pid, signal.SIGKILL)
                _, st, ru = os.wait4(p.pid, 0)
                status, rss = "timeout", ru.ru_maxrss
                break
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        p.returncode = -1  # reaped here
    with open(out_path, "rb") as f:
        so = f.read().decode(errors="replace")
    with open(err_path, "rb") as f:
        se = f.read().decode(errors="replace")
    os.unlink(out_path)
    os.unlink(err_path)
    return status, so, se, rss, time.monotonic() - t0


def read_safetensors(path):
    """{name: (shape, [floats])} of the F32 tensors, and the metadata."""
    tensors, meta = st_read(path)
    return {k: (list(v.shape), v.reshape(-1).tolist()) for k, v in tensors.items() if v.dtype == np.float32}, meta


def compare(res, base):
    """'same' | 'close' | 'different' | 'nonfinite', and a note."""
    bad = [k for k, (_, a) in res.items() if any(not math.isfinite(x) for x in a)]
    if bad:
        return "nonfinite", "non-finite values in " + ", ".join(sorted(bad))
    if base is None:
        return "different", "no baseline"
    worst, note = 0.0, []
    for k in ("embeddings", "projected", "class_token"):
        if (k in res) != (k in base):
            return "different", k + (" appeared" if k in res else " disappeared")
        if k not in res:
            continue
        if res[k][0] != base[k][0]:
            return "different", "%s shape %s vs %s" % (k, res[k][0], base[k][0])
        a, b = res[k][1], base[k][1]
        scale = max(1e-30, max(abs(x) for x in b))
        d = max(abs(x - y) for x, y in zip(a, b)) / scale
        worst = max(worst, d)
        note.append("%s rel %.2g" % (k, d))
    if worst == 0:
        return "same", ""
    return ("close" if worst < 0.05 else "different"), ", ".join(note)


BAD_CHARS = set(chr(c) for c in range(32)) - {"\n"} | {"\x7f", "\x85", "\u2028", "\u2029"}


def check_error(status, so, se, leftovers):
    """Problems with a refusal's contract (empty: it was clean)."""
    problems = []
    if status == 2:  # the arguments are the unedited fixture's, which encode fine: the file is at fault
        problems.append("exit 2 (bad arguments) for a bad model file")
    elif status != 1:
        problems.append("exit %s" % status)
    lines = se.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != 1:
        problems.append("%d stderr lines" % len(lines))
    if not lines or not lines[0].startswith("fovea: error:"):
        problems.append("stderr does not start with 'fovea: error:'")
    if any(ch in BAD_CHARS for ch in se.rstrip("\n")):
        problems.append("control characters in the message")
    if len(se) > MAX_MESSAGE:
        problems.append("message is %d chars" % len(se))
    if "internal error" in se:
        problems.append("internal error")
    if "out of memory" in se:
        problems.append("out of memory")
    if leftovers:
        problems.append("left behind: " + ", ".join(leftovers))
    return problems


def run_case(case, keep_dir, base_outputs):
    """Writes the case's file, runs model and encode, returns the result record."""
    safe = case["id"].replace(":", "_").replace("/", "_")
    d = os.path.join(keep_dir, safe) if keep_dir else tempfile.mkdtemp(prefix="gsweep_")
    os.makedirs(d, exist_ok=True)
    try:
        return _run_case(case, keep_dir, base_outputs, d)
    finally:
        if not keep_dir:
            shutil.rmtree(d, ignore_errors=True)


def _run_case(case, keep_dir, base_outputs, d):
    cid = case["id"]
    model = os.path.join(d, "model.gguf")
    with open(model, "wb") as f:
        f.write(case["bytes"]())
    rec = {"id": cid, "expect": case["expect"], "what": case["what"], "names": case["names"],
           "must_name": case.get("must_name", False), "size": os.path.getsize(model)}
    out = os.path.join(d, "out.safetensors")
    if os.path.exists(out):
        os.unlink(out)
    before = set(os.listdir(d))
    for tag, argv in (("model", [FOVEA, "model", model]),
                      ("encode", [FOVEA, "encode", IMAGE, "--model", model, "--budget", "32", "--threads", "1", "-o", out])):
        status, so, se, rss, secs = run(argv, d, tag)
        r = {"status": status, "stderr": se[:4000] + ("...[%d chars]" % len(se) if len(se) > 4000 else ""),
             "stderr_len": len(se), "rss_kb": rss, "seconds": round(secs, 3)}
        if tag == "model" and status == 0:
            r["stdout"] = so[:3000]
        after = set(os.listdir(d)) - before
        if status == 0:
            r["problems"] = []
            notes = [ln for ln in se.splitlines() if ln.strip()]
            if notes:
                r["notes"] = [ln[:300] for ln in notes]
            if any(not ln.startswith(("fovea: note:", "fovea: warning:", "note:", "warning:")) for ln in notes):
                r["problems"].append("unexpected stderr on success: " + se.strip()[:300])
            if tag == "encode":
                if not os.path.exists(out):
                    r["problems"].append("exit 0 but no output file")
                else:
                    try:
                        res, meta = read_safetensors(out)
                        r["compare"], r["compare_note"] = compare(res, base_outputs.get(case["fixture"]) if case.get("baseline", True) else None)
                        if not case.get("baseline", True) and r["compare"] == "different":
                            r["compare"] = "ok"
                        if "embeddings" in res:
                            r["embeddings_shape"] = res["embeddings"][0]
                        if "projected" in res:  # the metadata must describe the data
                            r["projected_shape"] = res["projected"][0]
                            if meta.get("projected_dim") != str(res["projected"][0][1]):
                                r["problems"].append("metadata projected_dim %s, but projected is %s" %
                                                     (meta.get("projected_dim"), res["projected"][0]))
                            if 0 in res["projected"][0]:
                                r["problems"].append("projected has an empty dimension %s" % res["projected"][0])
                    except Exception as e:  # noqa: BLE001 -- a corrupt output is a finding
                        r["problems"].append("unreadable output: %r" % e)
        else:
            leftovers = sorted(after)
            r["problems"] = check_error(status, so, se, leftovers)
            msg = se.lower()
            r["named"] = not case["names"] or any(n.lower() in msg for n in case["names"])
        if rss > RSS_LIMIT_KB:
            r["problems"].append("peak RSS %d MiB" % (rss >> 10))
        rec[tag] = r
        if tag == "encode" and status == 0 and not keep_dir:
            os.unlink(out)
        for f in after:  # leftovers of a failed run, once recorded
            if not keep_dir and os.path.exists(os.path.join(d, f)):
                os.unlink(os.path.join(d, f))
    judge(rec)
    return rec


def judge(rec):
    """rec['verdict'] in FINDING / DOUBT / OK and rec['why']."""
    m, e, exp = rec["model"], rec["encode"], rec["expect"]
    finding, doubt = [], []
    for tag, r in (("model", m), ("encode", e)):
        st = r["status"]
        if st == "timeout":
            finding.append("%s: timeout" % tag)
        elif isinstance(st, int) and st < 0:
            finding.append("%s: killed by signal %d (%s)" % (tag, -st, signal.Signals(-st).name))
        for p in r["problems"]:
            finding.append("%s: %s" % (tag, p))
        if st not in (0,) and isinstance(st, int) and st > 0 and not r.get("named", True):
            (finding if rec.get("must_name") else doubt).append("%s: the message does not name %s" % (tag, " / ".join(rec["names"])))
    ok_m, ok_e = m["status"] == 0, e["status"] == 0
    if not ok_m and ok_e:
        finding.append("model refuses what encode accepts")
    if ok_m and not ok_e and isinstance(e["status"], int) and e["status"] > 0:
        (finding if exp in ("success", "valid") else doubt).append(
            "model accepts what encode refuses: " + e["stderr"].strip()[:200])
    cmp_ = e.get("compare")
    if ok_e:
        if cmp_ == "nonfinite":
            (finding if exp in ("same", "close", "success", "valid") else doubt).append(
                "accepted, output has NaN/inf (%s)" % e.get("compare_note"))
        elif exp == "nonfinite" and cmp_ == "different":
            doubt.append("non-finite weights accepted, output finite but absurd (%s)" % e.get("compare_note"))
        elif exp == "error":
            if cmp_ == "ok":  # no baseline to compare with (a reshaped model)
                finding.append("hostile edit accepted (embeddings %s)" % e.get("embeddings_shape"))
            elif cmp_ == "different":
                finding.append("hostile edit accepted, output differs from the fixture's (%s): a silently wrong model" % e.get("compare_note"))
            elif cmp_ in ("same", "close"):
                doubt.append("hostile edit accepted and ignored (output %s)" % cmp_)
        elif exp == "same" and cmp_ != "same":
            finding.append("harmless edit changed the output (%s: %s)" % (cmp_, e.get("compare_note")))
        elif exp == "close" and cmp_ not in ("same", "close"):
            finding.append("type change changed the output beyond tolerance (%s)" % e.get("compare_note"))
    elif exp == "valid" and not ok_m:
        finding.append("a valid model refused: " + m["stderr"].strip()[:200])
    elif exp in ("same", "close", "success") and not ok_m:
        doubt.append("harmless edit refused: " + m["stderr"].strip()[:200])
    rec["verdict"] = "FINDING" if finding else "DOUBT" if doubt else "OK"
    rec["why"] = finding + doubt
    rec["outcome"] = outcome(rec)


def outcome(rec):
    m, e = rec["model"], rec["encode"]
    for r in (m, e):
        if r["status"] == "timeout":
            return "timeout"
        if isinstance(r["status"], int) and r["status"] < 0:
            return "signal"
    if e["status"] == 0:
        return "accepted:" + str(e.get("compare", "?"))
    if m["status"] == 0:
        return "model-ok/encode-refused"
    return "refused(exit %s)" % e["status"]


# ---- the edits --------------------------------------------------------------------------------------
INT_KEYS = ["clip.vision.image_size", "clip.vision.patch_size", "clip.vision.embedding_length",
            "clip.vision.feed_forward_length", "clip.vision.block_count", "clip.vision.attention.head_count",
            "clip.vision.projection_dim"]
INT_TYPES = {U8: (0, 255), I8: (-128, 127), U16: (0, 65535), I16: (-32768, 32767), U32: (0, 2**32 - 1),
             I32: (-2**31, 2**31 - 1), U64: (0, 2**64 - 1), I64: (-2**63, 2**63 - 1)}
EPS = "clip.vision.attention.layer_norm_epsilon"
REQUIRED_KEYS = {"clip.vision.image_size", "clip.vision.patch_size", "clip.vision.embedding_length",
                 "clip.vision.feed_forward_length", "clip.vision.block_count", "clip.vision.attention.head_count",
                 EPS, "clip.vision.image_mean", "clip.vision.image_std"}


def int_type_for(v):
    for t in (U32, I32, U64, I64):
        lo, hi = INT_TYPES[t]
        if lo <= v <= hi:
            return t
    raise ValueError(v)


class Builder:
    def __init__(self, fixture, g, quick):
        self.fixture, self.g, self.quick, self.cases = fixture, g, quick, []
        kv = lambda k: g.kv(k)[2]
        self.D, self.M = kv("clip.vision.embedding_length"), kv("clip.vision.feed_forward_length")
        self.P, self.S = kv("clip.vision.patch_size"), kv("clip.vision.image_size")
        self.H, self.L = kv("clip.vision.attention.head_count"), kv("clip.vision.block_count")
        self.G = self.S // self.P

    def add(self, cid, what, mutate, expect, names=(), baseline=True, must_name=False):
        g = self.g

        def make():
            h = g.copy()
            r = mutate(h)
            return write_gguf(r if r is not None else h)

        self.cases.append({"id": "%s:%s" % (self.fixture, cid), "fixture": self.fixture, "what": what, "bytes": make,
                           "expect": expect, "names": list(names), "baseline": baseline, "must_name": must_name})

    # -- key/values ------------------------------------------------------------------------------
    def int_keys(self):
        D, L = self.D, self.L
        base_vals = [(0, U32), (1, U32), (-1, I32), (3, U32), (2**31 - 1, U32), (2**32 + 1, U64), (2**63 - 1, U64)]
        if not self.quick:
            base_vals += [(-1, I64), (2**31, U32), (2**32 - 1, U32), (2**63 - 1, I64), (2**64 - 1, U64), (-2**63, I64)]
        plausible = {
            "clip.vision.attention.head_count": [1, 2, 8, 16, 32, 64, 2**16, 2**16 + 1],
            "clip.vision.embedding_length": [16, 64, 2**16, 2**16 + 1],
            "clip.vision.block_count": [L - 1, L + 1, 4096, 4097],
            "clip.vision.image_size": [self.S // 2, self.S * 2, self.S + 1, self.P, 2**20, 2**20 + 8],
            "clip.vision.patch_size": [self.P // 2, self.P * 2, 7, 4096, 4097],
            "clip.vision.feed_forward_length": [D, 2 * self.M, 1 << 20, (1 << 20) + 1],
            "clip.vision.projection_dim": [],
        }
        for k in INT_KEYS:
            if not self.g.kv(k):
                continue
            short = k.split(".")[-1] if "head_count" not in k else "heads"
            vals = list(base_vals) + [(v, int_type_for(v)) for v in plausible[k] if not self.quick or v in (1, 8, L + 1)]
            orig = self.g.kv(k)[2]
            seen = set()
            for v, t in vals:
                if v == orig or (v, t) in seen:
                    continue
                seen.add((v, t))
                exp = "same" if k.endswith("projection_dim") else "error"
                if k.endswith("block_count") and 0 < v < L:
                    exp = "any"  # fewer blocks than stored: llama.cpp reads block_count the same way
                # a dimension that contradicts the tensors may be reported by the tensors it contradicts
                names = [k, short] + ([] if k.endswith("projection_dim") else ["v.", "mm."])
                if k.endswith("head_count"):
                    # The tensors do not fix the head count: one that divides the width is another
                    # valid model, read as the file says; one that does not is refused, naming the key.
                    exp = "valid" if t in (U32, I32, U64, I64) and 0 < v <= D and D % v == 0 else "error"
                    names = [k]
                self.add("kv:%s=%d:%s" % (k, v, TYPE_NAMES[t]), "%s set to %d (%s)" % (k, v, TYPE_NAMES[t]),
                         lambda h, k=k, v=v, t=t: h.set_kv(k, t, v), exp, names, must_name=k.endswith("head_count"))
            # the same value, other types
            for t in ([U8, I8, U16, I16, I32, U64, I64] if not self.quick else [I64]):
                lo, hi = INT_TYPES[t]
                if lo <= orig <= hi:
                    self.add("kv:%s=%d:%s" % (k, orig, TYPE_NAMES[t]), "%s stored as %s" % (k, TYPE_NAMES[t]),
                             lambda h, k=k, t=t, o=orig: h.set_kv(k, t, o),
                             "same", [k])
            others = [(F32, float(orig)), (F64, float(orig)), (STRING, str(orig)), (ARRAY, (U32, [orig])), (BOOL, True)]
            if not self.quick:
                others += [(ARRAY, (U32, [])), (BOOL, False), (F32, float("nan"))]
            for t, v in others:
                label = TYPE_NAMES[t] + ("" if t != ARRAY else "[%d]" % len(v[1])) + ("=%s" % v if t in (BOOL, F32) and not (t == F32 and v == orig) else "")
                exp = "any" if t in (F32, F64) and v == orig else ("same" if k.endswith("projection_dim") else "error")
                self.add("kv:%s:type=%s" % (k, label), "%s (value %r) stored as %s" % (k, v, TYPE_NAMES[t]),
                         lambda h, k=k, t=t, v=v: h.set_kv(k, t, v), exp, [k, short] + ([] if k.endswith("projection_dim") else ["v.", "mm."]))

    def eps_key(self):
        orig = self.g.kv(EPS)[2]
        vals = [(0.0, "error"), (-1e-5, "error"), (math.nan, "error"), (math.inf, "error"), (1e38, "error"),
                (-math.inf, "error"), (1.0, "error"), (-0.0, "error")]
        if not self.quick:
            vals += [(1e-45, "any"), (0.999, "any"), (2.0, "error"), (-1e38, "error")]
        for v, exp in vals:
            self.add("kv:%s=%r" % (EPS, v), "%s = %r" % (EPS, v), lambda h, v=v: h.set_kv(EPS, F32, v), exp,
                     ["layer_norm_epsilon", "epsilon"])
        for t, v, exp in [(F64, orig, "close"), (U32, 0, "error"), (I32, 1, "error"), (STRING, repr(orig), "error"),
                          (ARRAY, (F32, [orig]), "error"), (BOOL, True, "error")]:
            self.add("kv:%s:type=%s" % (EPS, TYPE_NAMES[t]), "%s stored as %s %r" % (EPS, TYPE_NAMES[t], v),
                     lambda h, t=t, v=v: h.set_kv(EPS, t, v), exp, ["layer_norm_epsilon", "epsilon"])

    def mean_std(self):
        for key in ("clip.vision.image_mean", "clip.vision.image_std"):
            is_std = key.endswith("std")
            orig = self.g.kv(key)[2][1]
            vals = [0.0, -0.5, math.nan, math.inf, 1e38] + ([] if self.quick else [-math.inf, 1e-38, -0.0])
            for v in vals:
                if is_std:
                    exp = "any" if v in (1e38, 1e-38) else "error"
                else:
                    exp = "any" if math.isfinite(v) and abs(v) < 1e30 else "error"
                for where in ((0,), (0, 1, 2)) if not self.quick else ((0,),):
                    new = [v if i in where else x for i, x in enumerate(orig)]
                    tag = "[0]" if where == (0,) else "[*]"
                    self.add("kv:%s%s=%r" % (key, tag, v), "%s%s = %r" % (key, tag, v),
                             lambda h, key=key, new=new: h.set_kv(key, ARRAY, (F32, new)), exp,
                             [key.split(".")[-1]])
            lengths = [0, 1, 2, 4] + ([] if self.quick else [1000])
            for n in lengths:
                new = [orig[i % 3] for i in range(n)]
                self.add("kv:%s:len=%d" % (key, n), "%s with %d values" % (key, n),
                         lambda h, key=key, new=new: h.set_kv(key, ARRAY, (F32, new)), "error", [key.split(".")[-1]])
            rounded = [int(round(x)) for x in orig]
            elems = [(F64, list(orig), "close"), (I32, rounded, "any"), (U8, [max(0, r) for r in rounded], "any"),
                     (BOOL, [True] * 3, "error"), (STRING, [repr(x) for x in orig], "error")]
            for t, new, exp in elems if not self.quick else elems[::2]:
                if is_std and exp == "any" and not all(x > 0 for x in new):
                    exp = "error"  # int std 0
                self.add("kv:%s:elem=%s" % (key, TYPE_NAMES[t]), "%s as an array of %s %r" % (key, TYPE_NAMES[t], new),
                         lambda h, key=key, t=t, new=new: h.set_kv(key, ARRAY, (t, new)), exp, [key.split(".")[-1]])
            for t, v in [(F32, orig[0]), (STRING, "0.5,0.5,0.5")]:
                self.add("kv:%s:type=%s" % (key, TYPE_NAMES[t]), "%s stored as a %s" % (key, TYPE_NAMES[t]),
                         lambda h, key=key, t=t, v=v: h.set_kv(key, t, v), "error", [key.split(".")[-1]])

    def strings(self):
        llava = self.g.kv("clip.projector_type") is not None
        pkey = "clip.projector_type"
        vals = [("foo", "error"), ("", "same" if llava else "same"), ("x" * (1 << 20), "error"),
                ("mlp", "same" if llava else "error"), ("foo\nbar", "error"), ("gemma3", "any"),
                ("ldp", "error")]
        if not self.quick:
            vals += [("MLP", "error"), (" mlp", "error"), ("mlp\n", "error"), ("foo\rbar", "error"),
                     ("a\x1b[31mred", "error"), ("a\x00b", "error"), (b"\xff\xfe\x80", "error"), ("idefics3", "any"),
                     ("resampler", "error"), ("mlp_norm", "error"), ("x" * 4096, "error"), ("a\tb\x0bc\x0cd", "error")]
        for v, exp in vals:
            label = repr(v)[:40] if len(v) < 100 else "<%d chars>" % len(v)
            # the message must get past the value (a NUL would end a C string early)
            names = ["projector"] if exp != "error" else ["is not supported", "not a vision tower", "mm.0"]
            self.add("kv:%s=%s" % (pkey, label), "%s = %s" % (pkey, label), lambda h, v=v: h.set_kv(pkey, STRING, v), exp,
                     names)
        for t, v in [(U32, 0), (BOOL, True), (ARRAY, (STRING, ["mlp"]))]:
            self.add("kv:%s:type=%s" % (pkey, TYPE_NAMES[t]), "%s stored as %s" % (pkey, TYPE_NAMES[t]),
                     lambda h, t=t, v=v: h.set_kv(pkey, t, v), "error", ["projector_type"])
        # clip.vision.projector_type (read first)
        for v, exp in [("foo", "error"), ("mlp", "same" if llava else "error"), ("", "same")]:
            self.add("kv:clip.vision.projector_type=%r" % v, "clip.vision.projector_type = %r added" % v,
                     lambda h, v=v: h.set_kv("clip.vision.projector_type", STRING, v), exp, ["projector"])
        arch = "general.architecture"
        for v in ["llama", "", "CLIP"] + ([] if self.quick else ["clip\n", "x" * 100000]):
            self.add("kv:%s=%s" % (arch, repr(v)[:30]), "%s = %s" % (arch, repr(v)[:30]),
                     lambda h, v=v: h.set_kv(arch, STRING, v), "error", ["architecture"])
        self.add("kv:%s:type=u32" % arch, "%s stored as u32" % arch, lambda h: h.set_kv(arch, U32, 0), "error",
                 ["architecture"])

    def bools(self):
        llava = self.g.kv("clip.projector_type") is not None
        cases = [("clip.has_vision_encoder", BOOL, False, "error"), ("clip.has_vision_encoder", U8, 1, "any"),
                 ("clip.has_vision_encoder", STRING, "true", "error"), ("clip.has_text_encoder", BOOL, True, "same"),
                 ("clip.has_llava_projector", BOOL, True, "same" if llava else "error"),
                 ("clip.use_gelu", BOOL, not self.g.kv("clip.use_gelu")[2], "any"), ("clip.use_gelu", U32, 1, "any"),
                 ("clip.use_silu", BOOL, True, "error"), ("clip.use_silu", BOOL, False, "same")]
        if llava:
            cases.append(("clip.has_llava_projector", BOOL, False, "same"))
        if not self.quick:
            cases += [("clip.has_vision_encoder", ARRAY, (BOOL, [True]), "error"), ("clip.use_gelu", STRING, "", "error"),
                      ("clip.use_silu", U8, 0, "any")]
        for k, t, v, exp in cases:
            self.add("kv:%s:%s=%r" % (k, TYPE_NAMES[t], v), "%s = %r (%s)" % (k, v, TYPE_NAMES[t]),
                     lambda h, k=k, t=t, v=v: h.set_kv(k, t, v), exp, [k.split(".")[-1]])

    def feature_layer(self):
        L, k = self.L, "clip.vision.feature_layer"
        vals = [((I32, [0]), "any"), ((I32, [L]), "same"), ((I32, [L + 1]), "error"), ((I32, [-1]), "error"),
                ((I32, [0, 1]), "error"), ((I32, []), "error")]
        if not self.quick:
            vals += [((I32, [1]), "any"), ((U64, [2**63 - 1]), "error"), ((U64, [2**64 - 1]), "error"),
                     ((I64, [-2**63]), "error"), ((STRING, ["1"]), "error"), ((F32, [1.0]), "error"),
                     ((I32, [-2]), "error"), ((I32, [L - 1, L]), "error")]
        for v, exp in vals:
            self.add("kv:%s=%s%r" % (k, TYPE_NAMES[v[0]], v[1]), "%s = %s %r added" % (k, TYPE_NAMES[v[0]], v[1]),
                     lambda h, v=v: h.set_kv(k, ARRAY, v), exp, ["feature_layer"])
        self.add("kv:%s:type=i32" % k, "%s = i32 %d (a scalar) added" % (k, L), lambda h: h.set_kv(k, I32, L), "any",
                 ["feature_layer"])

    def missing_keys(self):
        for key, _, _ in self.g.kvs:
            exp = "error" if key in REQUIRED_KEYS else "same"
            if key == "clip.use_gelu" and self.g.kv(key)[2]:
                exp = "any"  # quick_gelu by default (llama.cpp's default too)
            names = [key, key.split(".")[-1]] if exp == "error" else []
            self.add("kv-missing:%s" % key, "key %s removed" % key, lambda h, key=key: h.del_kv(key), exp, names)

    # -- tensors -----------------------------------------------------------------------------------------
    def removal_expect(self, name):
        if name.startswith("v.blk.") and name.endswith(".bias") and (".ln1." not in name and ".ln2." not in name):
            return "any"  # llama.cpp treats the linear biases as optional
        if name == "v.patch_embd.bias":
            return "any"
        return "error"

    def tensors(self, subset=None):
        for t in self.g.tensors:
            n, shape, kind = t["name"], t["shape"], t["type"]
            if subset and n not in subset:
                continue
            tn = GGML[kind][0]
            self.add("tensor:%s:remove" % n, "tensor %s removed" % n, lambda h, n=n: h.del_tensor(n),
                     self.removal_expect(n), [n])
            self.add("tensor:%s:rename" % n, "tensor %s renamed %s.orig" % (n, n),
                     lambda h, n=n: h.tensor(n).__setitem__("name", n + ".orig"), self.removal_expect(n), [n])
            # shapes
            shapes = []
            if len(shape) >= 2 and list(reversed(shape)) != shape:
                shapes.append(("transposed", list(reversed(shape)), True))
            shapes.append(("dim0+1", [shape[0] + 1] + shape[1:], False))
            if shape[0] > 1:
                shapes.append(("dim0-1", [shape[0] - 1] + shape[1:], False))
            if len(shape) >= 2:
                shapes.append(("dimlast+1", shape[:-1] + [shape[-1] + 1], False))
                if shape[-1] > 1:
                    shapes.append(("dimlast-1", shape[:-1] + [shape[-1] - 1], False))
            if len(shape) == 4:
                shapes += [("dim1+1", [shape[0], shape[1] + 1] + shape[2:], False),
                           ("dim1-1", [shape[0], shape[1] - 1] + shape[2:], False)]
            if len(shape) < 4:
                shapes += [("extra-dim-front", [1] + shape, False), ("extra-dim-back", shape + [1], False)]
            shapes.append(("zero-dim", [0] + shape[1:], False))
            if self.quick:
                shapes = [s for s in shapes if s[0] in ("transposed", "dim0+1", "dim1+1", "extra-dim-front", "zero-dim")]
            for label, new, transpose in shapes:
                def mutate(h, n=n, new=new, transpose=transpose):
                    t0 = h.tensor(n)
                    vals = decode(t0)
                    if transpose and len(t0["shape"]) == 2:  # the data transposed too
                        r, c = t0["shape"]
                        vals = [vals[i * c + j] for j in range(c) for i in range(r)]
                    k = t0["type"] if type_ok(t0["type"], new) else GGML_F32
                    i = h.tensors.index(t0)
                    h.tensors[i] = retyped(t0, k, vals, new)
                conv = "" if type_ok(kind, new) else " (stored F32: %s needs rows of %d)" % (tn, GGML[kind][1])
                exp = "error"
                self.add("tensor:%s:shape=%s" % (n, label), "tensor %s %s %s -> %s%s" % (n, tn, shape, new, conv), mutate,
                         exp, [n])
            # types
            types = [GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0, GGML_Q4_0, GGML_F64]
            if self.quick:
                types = [GGML_F32, GGML_Q8_0, GGML_Q4_0]
            for k in types:
                if k == kind or not type_ok(k, shape):
                    continue
                # Q4_0 decodes (4-bit weights: accepted, the output need not stay close).
                exp = "error" if k == GGML_F64 else "success" if k == GGML_Q4_0 else "close"
                self.add("tensor:%s:type=%s" % (n, GGML[k][0]), "tensor %s %s -> %s" % (n, tn, GGML[k][0]),
                         lambda h, n=n, k=k: h.tensors.__setitem__(h.tensors.index(h.tensor(n)), retyped(h.tensor(n), k)),
                         exp, [n, GGML[k][0]])
            # data
            fills = [("nan", math.nan), ("inf", math.inf), ("1e38", 1e38)] + ([] if self.quick else [("nan@0", None)])
            for label, v in fills:
                def mutate(h, n=n, v=v):
                    t0 = h.tensor(n)
                    vals = decode(t0)
                    vals = [math.nan] + vals[1:] if v is None else [v] * len(vals)
                    h.tensors[h.tensors.index(t0)] = retyped(t0, t0["type"], vals)
                note = " (stored %s: 1e38 overflows to inf)" % tn if label == "1e38" and kind in (GGML_F16, GGML_Q8_0) else ""
                self.add("tensor:%s:fill=%s" % (n, label), "tensor %s filled with %s%s" % (n, label, note), mutate,
                         "nonfinite", [n])

    # -- blocks -------------------------------------------------------------------------------------------
    def blocks(self):
        L = self.L
        last = "v.blk.%d." % (L - 1)

        def dup(h, count):
            for t in [t for t in h.tensors if t["name"].startswith(last)]:
                h.tensors.append(dict(t, name=t["name"].replace(last, "v.blk.%d." % L)))
            if count:
                h.set_kv("clip.vision.block_count", U32, L + 1)
        self.add("block:duplicate-last", "block %d copied as block %d, block_count unchanged" % (L - 1, L),
                 lambda h: dup(h, False), "same")
        self.add("block:duplicate-last+count", "block %d copied as block %d, block_count %d" % (L - 1, L, L + 1),
                 lambda h: dup(h, True), "any", baseline=True)

        def swap(h):
            for t in h.tensors:
                if t["name"].startswith("v.blk.0."):
                    t["name"] = t["name"].replace("v.blk.0.", "v.blk.1.")
                elif t["name"].startswith("v.blk.1."):
                    t["name"] = t["name"].replace("v.blk.1.", "v.blk.0.")
        self.add("block:swap-0-1", "blocks 0 and 1 swapped (undetectable)", swap, "any")
        for b in (0, L - 1):
            self.add("block:remove-%d" % b, "every tensor of block %d removed" % b,
                     lambda h, b=b: setattr(h, "tensors", [t for t in h.tensors if not t["name"].startswith("v.blk.%d." % b)]),
                     "error", ["v.blk.%d." % b])
        for b in ("7", "999999", "1000000", "-1", "01", "4096", "x"):
            name = "v.blk.%s.ln1.weight" % b

            def stray(h, name=name):
                h.tensors.append(dict(h.tensor("v.blk.0.ln1.weight"), name=name))
            self.add("block:stray-%s" % b, "extra tensor %s (beyond block_count)" % name, stray, "same")
        def no_blocks(h):
            h.set_kv("clip.vision.block_count", U32, 0)
            h.tensors = [t for t in h.tensors if not t["name"].startswith("v.blk.")]
        self.add("block:count=0+no-blocks", "block_count 0 and every block tensor removed", no_blocks, "any")

    # -- self-consistent models of other dimensions ---------------------------------------------------------
    def reshaped(self, cid, what, D=None, H=None, M=None, C=None, P=None, G=None, E1=None, E=None, L=None,
                 expect="success", patch_type=None):
        """The fixture with its dimensions replaced consistently (tensor values cycled)."""
        src = self.g
        D0, M0, P0, G0, L0 = self.D, self.M, self.P, self.G, self.L
        C0 = src.tensor("v.patch_embd.weight")["shape"][1]
        m0 = src.tensor("mm.0.weight")
        m2 = src.tensor("mm.2.weight")
        E10 = m0["shape"][0] if m0 else None
        E0 = m2["shape"][0] if m2 else None
        D1, M1, C1, P1, G1 = D or D0, M or M0, C or C0, P or P0, G or G0
        E11, E1n = E10 if E1 is None else E1, E0 if E is None else E
        L1 = L0 if L is None else L
        H1 = H or self.H

        def mutate(h):
            new = []
            for t in h.tensors:
                n, s = t["name"], t["shape"]
                if n.startswith("v.blk."):
                    continue
                if n == "v.patch_embd.weight":
                    ns = [D1, C1, P1, P1]
                elif n == "v.position_embd.weight":
                    ns = [G1 * G1 + (s[0] - G0 * G0), D1]
                elif n.startswith("mm.0."):
                    ns = [E11, D1] if n.endswith("weight") else [E11]
                elif n.startswith("mm.2."):
                    ns = [E1n, E11] if n.endswith("weight") else [E1n]
                else:
                    ns = [D1]
                k = patch_type if (patch_type is not None and n == "v.patch_embd.weight") else t["type"]
                new.append(retyped(t, k if type_ok(k, ns) else GGML_F32, None, ns))
            for b in range(L1):
                for t in h.tensors:
                    pre = "v.blk.%d." % (b % L0)
                    if not t["name"].startswith(pre):
                        continue
                    s = t["shape"]
                    ns = [{D0: D1, M0: M1}[x] for x in s]
                    k = t["type"] if type_ok(t["type"], ns) else GGML_F32
                    new.append(retyped(dict(t, name=t["name"].replace(pre, "v.blk.%d." % b)), k, None, ns))
            h.tensors = [t for t in new if numel(t["shape"])] + [t for t in new if not numel(t["shape"])]
            for key, v in (("clip.vision.embedding_length", D1), ("clip.vision.feed_forward_length", M1),
                           ("clip.vision.patch_size", P1), ("clip.vision.image_size", P1 * G1),
                           ("clip.vision.attention.head_count", H1), ("clip.vision.block_count", L1)):
                h.set_kv(key, U32, v)
        self.add("shape:" + cid, what, mutate, expect, baseline=False)

    def shapes(self):
        r = self.reshaped
        if self.quick:
            for D, H in ((1, 1), (33, 3)):
                r("D=%d+H=%d" % (D, H), "width %d, %d heads" % (D, H), D=D, H=H)
            r("P=1", "patch size 1 (the CLI's --patch refuses < 2)", P=1)
            r("C=1", "1-channel patch embedding", C=1, expect="any")
            r("G=1", "a 1x1 position grid", G=1)
            r("L=0", "block_count 0, no blocks", L=0, expect="any")
            return
        for D, H in ((1, 1), (2, 1), (3, 3), (4, 4), (6, 3), (33, 3), (33, 11), (128, 2), (8, 8)):
            r("D=%d+H=%d" % (D, H), "width %d, %d heads (consistent tensors)" % (D, H), D=D, H=H)
        for M in (1, 3, self.D):
            r("M=%d" % M, "MLP width %d%s" % (M, " (= D: the ffn_up/ffn_down swap rule cannot tell)" if M == self.D else ""), M=M)
        for C in (1, 2, 4, 16, 17):
            r("C=%d" % C, "%d-channel patch embedding (the image has 3)" % C, C=C, expect="any")
        for P in (1, 2, 3, 5, 16, 48, 64):
            r("P=%d" % P, "patch size %d%s" % (P, " (the CLI's --patch refuses < 2)" if P < 2 else ""), P=P)
        r("P=257", "patch size 257 (beyond the CLI's --patch range 2..256), F16 patch embedding", P=257,
          patch_type=GGML_F16)
        for G in (1, 2, 3, 64):
            r("G=%d" % G, "a %dx%d position grid" % (G, G), G=G)
        for L in (0, 1, 8):
            r("L=%d" % L, "%d blocks, block_count %d" % (L, L), L=L, expect="any" if L == 0 else "success")
        if self.g.tensor("mm.0.weight"):
            for E1, E in ((1, 1), (1, 64), (64, 1)):
                r("E1=%d+E=%d" % (E1, E), "projector widths %d, %d" % (E1, E), E1=E1, E=E)
            # zero-width projector layers: GGUF allows a 0 dim (llama.cpp's reader does); the
            # empty tensors are put last so that their offset is the end of the data section
            for E1, E in ((0, 40), (48, 0), (0, 0)):
                r("E1=%d+E=%d" % (E1, E), "projector widths %d, %d (empty tensors, placed last)" % (E1, E), E1=E1, E=E,
                  expect="error")


def build_cases(quick):
    cases = []
    for fx, path in FIXTURES.items():
        with open(os.path.join(ROOT, path), "rb") as f:
            g = parse_gguf(f.read())
        b = Builder(fx, g, quick)
        b.add("identity", "the fixture, re-written by this script's writer", lambda h: None, "same")
        b.int_keys()
        b.eps_key()
        b.mean_std()
        b.strings()
        b.bools()
        b.feature_layer()
        b.missing_keys()
        subset = None
        if quick:
            subset = {"v.patch_embd.weight", "v.patch_embd.bias", "v.class_embd", "v.position_embd.weight",
                      "v.pre_ln.weight", "v.post_ln.weight", "v.blk.0.attn_q.weight", "v.blk.0.attn_q.bias",
                      "v.blk.1.ffn_down.weight", "v.blk.0.ln1.bias", "mm.0.weight", "mm.2.weight"}
        b.tensors(subset)
        b.blocks()
        b.shapes()
        cases += b.cases
    ids = [c["id"] for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    assert not dup, dup
    return cases


# ---- driver -----------------------------------------------------------------------------------------
_CASES, _KEEP, _BASE = None, None, None


def _init(cases, keep, base):
    global _CASES, _KEEP, _BASE
    _CASES, _KEEP, _BASE = cases, keep, base


def _work(i):
    try:
        return run_case(_CASES[i], _KEEP, _BASE)
    except Exception:  # noqa: BLE001 -- a harness error is reported, not fatal
        import traceback
        return {"id": _CASES[i]["id"], "verdict": "HARNESS", "why": [traceback.format_exc()], "outcome": "harness-error",
                "what": _CASES[i]["what"]}


def baseline_outputs():
    """The unedited fixtures' outputs (each fixture as written by this script's writer, which must
    reproduce the fixture byte for byte)."""
    out = {}
    d = tempfile.mkdtemp(prefix="gsweep_base_")
    try:
        for fx, path in FIXTURES.items():
            with open(os.path.join(ROOT, path), "rb") as f:
                raw = f.read()
            again = write_gguf(parse_gguf(raw))
            if again != raw:
                sys.exit("self-check failed: the writer does not reproduce %s" % path)
            o = os.path.join(d, fx + ".safetensors")
            status, _, se, _, _ = run([FOVEA, "encode", IMAGE, "--model", os.path.join(ROOT, path), "--budget", "32",
                                       "--threads", "1", "-o", o], d, fx)
            if status != 0:
                sys.exit("baseline encode of %s failed: %s" % (path, se))
            out[fx] = read_safetensors(o)[0]
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


def main():
    global FOVEA
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a representative subset (~1-2 min)")
    ap.add_argument("--only", help="comma-separated fnmatch patterns of case ids")
    ap.add_argument("--keep", help="write each case's mutated file (and outputs) under this directory and keep them")
    ap.add_argument("--write-only", action="store_true", help="with --keep: write the files, run nothing")
    ap.add_argument("--list", action="store_true", help="list the case ids and exit")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--fovea", default=FOVEA, help="the fovea binary (default: %(default)s)")
    ap.add_argument("--json", default=os.path.join(tempfile.gettempdir(), "gguf_model_sweep.json"),
                    help="full per-case report (default: %(default)s)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case, not just findings and doubts")
    a = ap.parse_args()
    FOVEA = os.path.abspath(a.fovea)

    cases = build_cases(a.quick)
    if a.only:
        pats = a.only.split(",")
        cases = [c for c in cases if any(fnmatch.fnmatchcase(c["id"], p) for p in pats)]
    if a.list:
        for c in cases:
            print("%-90s %-9s %s" % (c["id"], c["expect"], c["what"]))
        print("%d cases" % len(cases))
        return 0
    if a.write_only:
        if not a.keep:
            sys.exit("--write-only needs --keep DIR")
        for c in cases:
            d = os.path.join(a.keep, c["id"].replace(":", "_").replace("/", "_"))
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "model.gguf"), "wb") as f:
                f.write(c["bytes"]())
            print(os.path.join(d, "model.gguf"))
        return 0
    if not os.access(FOVEA, os.X_OK):
        sys.exit("no %s (build fovea first)" % FOVEA)
    if a.keep:
        a.keep = os.path.abspath(a.keep)
    t0 = time.monotonic()
    base = baseline_outputs()
    print("gguf_model_sweep: %d cases, %d jobs" % (len(cases), a.jobs), flush=True)
    results = [None] * len(cases)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(a.jobs, initializer=_init, initargs=(cases, a.keep, base)) as pool:
        done = 0
        for i, rec in zip(range(len(cases)), pool.imap(_work, range(len(cases)), chunksize=4)):
            results[i] = rec
            done += 1
            if a.verbose or rec["verdict"] != "OK":
                print("%-8s %-26s %s" % (rec["verdict"], rec["outcome"], rec["id"]), flush=True)
                for w in rec["why"]:
                    print("           - " + w.replace("\n", "\n             "), flush=True)
                if a.verbose and "encode" in rec:
                    for tag in ("model", "encode"):
                        se = rec[tag]["stderr"].strip()
                        if se:
                            print("           %s: %s" % (tag, se[:300]), flush=True)
            elif done % 100 == 0:
                print("  ... %d/%d (%.0f s)" % (done, len(cases), time.monotonic() - t0), flush=True)
    elapsed = time.monotonic() - t0
    by_outcome, by_verdict = {}, {}
    for r in results:
        by_outcome[r["outcome"]] = by_outcome.get(r["outcome"], 0) + 1
        by_verdict[r["verdict"]] = by_verdict.get(r["verdict"], 0) + 1
    print("\n== %d cases in %.0f s" % (len(results), elapsed))
    print("by outcome: " + ", ".join("%s %d" % kv for kv in sorted(by_outcome.items(), key=lambda x: -x[1])))
    print("by verdict: " + ", ".join("%s %d" % kv for kv in sorted(by_verdict.items())))
    with open(a.json, "w") as f:
        json.dump({"elapsed_s": elapsed, "by_outcome": by_outcome, "by_verdict": by_verdict,
                   "cases": [{k: v for k, v in r.items()} for r in results]}, f, indent=1)
    print("report: " + a.json)
    return 1 if by_verdict.get("FINDING") or by_verdict.get("HARNESS") else 0


if __name__ == "__main__":
    sys.exit(main())
