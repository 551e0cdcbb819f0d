# Quantized models from Python: precision="int8" against fp32, and a Q8_0 mmproj written as
# llama.cpp's converter writes one (scripts/gguf_requantize.py) against the file it came from.
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import fovea

SRC = os.environ.get("FOVEA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
ENC = os.path.join(SRC, "tests", "data", "encoder")


def row_cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))


def tokens_for(model):
    with open(os.path.join(ENC, "gguf_llava", "image.png"), "rb") as f:
        img = fovea.decode_image(f.read())
    return fovea.tokenize(img, budget=48, fixations=[(img.shape[1] / 2, img.shape[0] / 2)], model=model)


def test_int8_precision_is_close_to_fp32_and_reported():
    m = fovea.Model(os.path.join(ENC, "clip_full", "model.safetensors"))
    t = tokens_for(m)
    ref = m.encode_full(t, precision="fp32", threads=2)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        q = m.encode_full(t, precision="int8", threads=2)
    if not fovea.int8_supported():
        assert q.precision == "fp32"
        pytest.skip("no int8 kernels on this CPU")
    assert q.precision == "int8"
    assert fovea._fovea.matrix_kernels("int8").startswith("int8-")
    c = row_cos(ref.embeddings, q.embeddings)
    assert c.mean() > 0.99 and c.min() > 0.95
    assert c.mean() < 1.0  # it did run quantized
    with pytest.raises(ValueError, match="int8"):
        m.encode_full(t, precision="int4")


def test_q8_0_mmproj_gives_projected_close_to_its_source(tmp_path):
    src = os.path.join(ENC, "gguf_llava", "mmproj.gguf")
    q8 = str(tmp_path / "mmproj-q8_0.gguf")
    subprocess.run([sys.executable, os.path.join(SRC, "scripts", "gguf_requantize.py"), src, q8], check=True)
    a, b = fovea.Model(src), fovea.Model(q8)
    t = tokens_for(a)
    pa = np.asarray(a.encode_full(t, threads=2).projected)
    pb = np.asarray(b.encode_full(t, threads=2).projected)
    assert pa.shape == pb.shape and pa.shape[0] == t.patches.shape[0]
    c = row_cos(pa, pb)
    assert c.mean() >= 0.999, c.mean()
    assert not np.array_equal(pa, pb)  # the matrices did change
    out = subprocess.run([os.environ.get("FOVEA_CLI", "fovea"), "model", q8], capture_output=True, text=True)
    if out.returncode == 0:
        assert "Q8_0" in out.stdout and "dequantised" in out.stdout
