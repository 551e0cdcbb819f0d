"""fovea computes HF's LLaVA features from a legacy-LLaVA mmproj file, not llama.cpp's graph.

tests/data/encoder/gguf_llava/mmproj.gguf is laid out as llama.cpp's legacy converter
(convert_image_encoder_to_gguf.py --llava-projector) writes LLaVA-1.5's projector file: a 3-block
CLIP tower stored with block_count 2 (the last block dropped: LLaVA reads HF's
hidden_states[-2]), pre_ln, no post_ln, HF's fc1/fc2 stored as ffn_down/ffn_up, the MLP projector
as mm.0 (Q8_0) / mm.2. Its cases.safetensors holds HF's answer for the fixture image
(LlavaForConditionalGeneration.get_image_features, made by scripts/make_encoder_fixtures.py).

This test reads the file's tensors itself (numpy, float64) and computes two graphs on them:
- HF's: the class token first at position 0, every patch at its own position, every stored block,
  the projector's exact (erf) GELU;
- llama.cpp's LLaVA graph (tools/mtmd/models/llava.cpp): the class token appended after the
  patches and positions added in order (patch i gets row i of the table, which HF gives the
  token before it), one stored block fewer (il_last = n_layer - 1 when the file has no
  clip.vision.feature_layer key), ggml_gelu's tanh approximation.
It asserts that the HF graph reproduces the HF reference (so the reading is right), that
`fovea encode` gives the HF graph's `projected`, and that it does not give llama.cpp's: each of
llama.cpp's two differences alone moves `projected` measurably.
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from fovea_testio import gguf as gguf_io, safetensors  # noqa: E402


def read_gguf(path):
    """({key: value}, {name: float64 array}) of a GGUF file."""
    g = gguf_io.read(path)
    return ({k: g.value(k) for k, _, _ in g.kvs},
            {t["name"]: gguf_io.dequantize(t).astype(np.float64) for t in g.tensors})


def read_safetensors(path):
    """The F32 tensors of a safetensors file as float64 (only those are compared here)."""
    tensors, _ = safetensors.read(path)
    return {k: v.astype(np.float64) for k, v in tensors.items() if v.dtype == np.float32}


def layer_norm(x, w, bias, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + bias


ERF = np.vectorize(math.erf)


def gelu_erf(x):
    return 0.5 * x * (1.0 + ERF(x / math.sqrt(2.0)))


def gelu_tanh(x):  # ggml_gelu
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def tower(kv, t, patches, class_last, blocks, gelu):
    """The projected features of `patches` ([N, C·P·P], normalised) through the file's tower."""
    D = kv["clip.vision.embedding_length"]
    heads = kv["clip.vision.attention.head_count"]
    eps = kv["clip.vision.attention.layer_norm_epsilon"]
    x = patches @ t["v.patch_embd.weight"].reshape(D, -1).T
    if "v.patch_embd.bias" in t:
        x = x + t["v.patch_embd.bias"]
    cls = t["v.class_embd"].reshape(1, D)
    pos = t["v.position_embd.weight"]
    n = len(x)
    if class_last:  # llama.cpp: concat(patches, class), positions 0..n in that order
        h = np.concatenate([x, cls]) + pos[: n + 1]
    else:  # HF: class first at position 0, patch i at position 1 + i
        h = np.concatenate([cls, x]) + pos[: n + 1]
    h = layer_norm(h, t["v.pre_ln.weight"], t["v.pre_ln.bias"], eps)
    for i in range(blocks):
        p = f"v.blk.{i}."
        w = lambda k: t[p + k + ".weight"]
        bb = lambda k: t[p + k + ".bias"]
        a = layer_norm(h, w("ln1"), bb("ln1"), eps)
        q, k, v = (a @ w(n_).T + bb(n_) for n_ in ("attn_q", "attn_k", "attn_v"))
        dh = D // heads
        split = lambda m: m.reshape(len(h), heads, dh).transpose(1, 0, 2)
        q, k, v = split(q), split(k), split(v)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(len(h), D)
        h = h + o @ w("attn_out").T + bb("attn_out")
        a = layer_norm(h, w("ln2"), bb("ln2"), eps)
        # The legacy converter stores HF's fc1 as ffn_down: the matrix whose input width is D.
        fc1, fc2 = ("ffn_down", "ffn_up") if w("ffn_down").shape[1] == D else ("ffn_up", "ffn_down")
        m = a @ w(fc1).T + bb(fc1)
        m = gelu(m) if kv.get("clip.use_gelu") else m / (1.0 + np.exp(-1.702 * m))  # else quick_gelu
        h = h + m @ w(fc2).T + bb(fc2)
    feats = h[:n] if class_last else h[1:]
    y = gelu(feats @ t["mm.0.weight"].T + t["mm.0.bias"])
    return y @ t["mm.2.weight"].T + t["mm.2.bias"]


def cosines(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    d = os.path.join(a.source, "tests", "data", "encoder", "gguf_llava")
    gguf = os.path.join(d, "mmproj.gguf")
    kv, t = read_gguf(gguf)
    assert kv["clip.projector_type"] == "mlp" and "clip.vision.feature_layer" not in kv, "a legacy LLaVA file"
    stored = kv["clip.vision.block_count"]
    cases = read_safetensors(os.path.join(d, "cases.safetensors"))
    patches = cases["raw.patches"].reshape(len(cases["raw.patches"]), -1)
    hf_reference = cases["raw.projected"]  # HF's get_image_features

    hf = tower(kv, t, patches, class_last=False, blocks=stored, gelu=gelu_erf)
    err = np.abs(hf - hf_reference).max()
    assert err < 1e-4, f"this test's HF graph does not reproduce HF's reference ({err:.2e}): the file is misread"

    if a.work:
        os.makedirs(a.work, exist_ok=True)
    work = tempfile.mkdtemp(dir=a.work)
    out = os.path.join(work, "llava.safetensors")
    r = subprocess.run([a.cli, "encode", os.path.join(d, "image.png"), "--uniform", "--model", gguf, "-o", out],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    fovea = read_safetensors(out)["projected"]
    assert fovea.shape == hf.shape, (fovea.shape, hf.shape)
    err = np.abs(fovea - hf).max()
    assert err < 1e-4, f"fovea's projected is {err:.2e} from HF's LLaVA features"

    llama = tower(kv, t, patches, class_last=True, blocks=stored - 1, gelu=gelu_tanh)
    order_only = tower(kv, t, patches, class_last=True, blocks=stored, gelu=gelu_erf)
    depth_only = tower(kv, t, patches, class_last=False, blocks=stored - 1, gelu=gelu_erf)
    gelu_only = tower(kv, t, patches, class_last=False, blocks=stored, gelu=gelu_tanh)
    report = {}
    for name, other in (("llama.cpp's graph", llama), ("class token last, positions in order", order_only),
                        ("one block fewer", depth_only), ("tanh GELU", gelu_only)):
        c = cosines(fovea, other)
        report[name] = (float(c.mean()), float(np.abs(fovea - other).max()))
    print("fovea's projected against (mean cosine, max abs difference):")
    for k, (c, e) in report.items():
        print(f"  {k:38s} {c:.6f}  {e:.3e}")
    # llama.cpp's two differences each move the features far beyond fp32 noise; the tanh GELU is
    # a small difference of its own (order 1e-3 relative).
    assert report["llama.cpp's graph"][1] > 1e-2, report
    assert report["class token last, positions in order"][1] > 1e-2, report
    assert report["one block fewer"][1] > 1e-2, report
    assert 1e-6 < report["tanh GELU"][1] < report["one block fewer"][1], report
    print("fovea computes HF's LLaVA features on a legacy-LLaVA mmproj file, not llama.cpp's graph")
    return 0


if __name__ == "__main__":
    sys.exit(main())
