"""The windows foveation from Python: tokenize, encode, save, the batch CLI and Dask agree."""
import os

import numpy as np
import pytest

import fovea
import fovea.distributed as fd
from pyhelpers import cli, photo, save_png

SRC = os.environ.get("FOVEA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
VIT = os.path.join(SRC, "tests", "data", "encoder", "hf_vit", "model.safetensors")  # 32-px native, 4x4 grid of 8 px


@pytest.fixture(scope="module")
def model():
    return fovea.Model(VIT)


@pytest.fixture(scope="module")
def img():
    return photo(5, 128, 160)


def test_default_foveation_follows_the_model(model, img):
    t = fovea.tokenize(img, fixations=[(40, 40)], model=model)
    assert t.mode == "windows" and t.foveation == "windows"
    assert t.budget == 2 * 4 * 4  # two native views
    assert [w["kind"] for w in t.windows] == ["base", "query"]
    assert t.windows[1]["box"] == (24.0, 24.0, 56.0, 56.0)  # centred on the fixation, 32 px
    assert len(t) == 32 and t.tokens_kept <= t.budget
    assert t.window.shape == (32,) and t.covered.shape == (32,)
    assert int((t.covered == 0).sum()) == t.tokens_kept
    # Without a model, and with a random one, the default is mixed.
    assert fovea.tokenize(img, fixations=[(40, 40)]).mode == "foveated"
    assert fovea.tokenize(img, model=fovea.Model("random:vit-s16")).mode == "foveated"
    assert fovea.tokenize(img, foveation="mixed", model=model).window is None


def test_encode_returns_the_kept_tokens(model, img):
    t = fovea.tokenize(img, budget=64, fixations=[(40, 40)], model=model)
    e = model.encode_full(t)
    kept = np.flatnonzero(np.asarray(t.covered) == 0)
    assert np.array_equal(e.rows, kept)
    assert e.embeddings.shape == (len(kept), model.config["hidden_size"])
    assert np.array_equal(e.positions, np.asarray(t.positions)[kept])
    assert np.array_equal(e.window, np.asarray(t.window)[kept])
    assert e.window_class_tokens.shape == (len(t.windows), model.config["hidden_size"])
    assert np.array_equal(e.class_token[0], e.window_class_tokens[0])  # the base view's
    assert np.array_equal(model.encode(t), e.embeddings)
    # keep_covered: every encoded token, the same values for the kept ones.
    k = fovea.tokenize(img, budget=200, fixations=[(40, 40)], model=model, keep_covered=True)
    ek = model.encode_full(k)
    assert len(ek) == len(k) and int(np.asarray(k.covered).sum()) == 0


def test_save_equals_the_cli_file(model, img, tmp_path):
    path = save_png(img, str(tmp_path / "in.png"))
    out = str(tmp_path / "cli.safetensors")
    cli("encode", path, "--model", VIT, "--fixation", "40,40", "-o", out)
    t = fovea.tokenize(path, fixations=[(40, 40)], model=model, source=path)
    mine = str(tmp_path / "py.safetensors")
    model.encode_full(t).save(mine)
    a, b = fovea.load(out), fovea.load(mine)
    assert sorted(a.keys()) == sorted(b.keys())
    assert {"window", "window_boxes", "window_grids", "window_levels", "window_class_tokens"} <= set(a.keys())
    for key in a.keys():
        assert np.array_equal(a[key], b[key]), key
    assert a.metadata["mode"] == "windows" and a.metadata["tokens_kept"] == str(len(a["embeddings"]))


def test_bad_arguments_raise(model, img):
    with pytest.raises(ValueError, match="foveation"):
        fovea.tokenize(img, foveation="tiles", model=model)
    with pytest.raises(ValueError, match="exclude"):
        fovea.tokenize(img, foveation="windows", uniform=True)
    with pytest.raises(ValueError, match="window_grid"):
        fovea.tokenize(img, window_grid=7)
    with pytest.raises(ValueError, match="window_grid"):
        fovea.tokenize(img, foveation="windows", window_grid=0)
    with pytest.raises(ValueError, match="max_level"):
        fovea.tokenize(img, foveation="windows", max_level=2)


def test_dask_serial_run_equals_the_batch_cli(img, tmp_path):
    os.makedirs(tmp_path / "imgs")
    for s in range(3):
        save_png(photo(s, 96, 128), str(tmp_path / "imgs" / f"i{s}.png"))
    out_py, out_cli = str(tmp_path / "py"), str(tmp_path / "cli")
    s = fd.run([str(tmp_path / "imgs")], out_py, model=VIT, threads=1, fixations=[(50, 40)])
    assert s["ok"] == 3 and s["failed"] == 0
    cli("encode", str(tmp_path / "imgs"), "--model", VIT, "--fixation", "50,40", "-o", out_cli, "--threads", "1")
    for n in sorted(os.listdir(out_cli)):
        a, b = fovea.load(os.path.join(out_cli, n)), fovea.load(os.path.join(out_py, n))
        assert a.metadata["mode"] == "windows"
        for key in a.keys():
            assert np.array_equal(a[key], b[key]), (n, key)
