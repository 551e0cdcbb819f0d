"""The fidelity harness (bench/fidelity.py) on a tiny fixture tower (tests/data/encoder/timm_vit:
32 px native, 8 px patches, a 4 x 4 grid, a 10-class head): that its references and metrics mean
what docs/explanation/fidelity.md says, not a score. No torch, no downloaded checkpoint."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fovea
from pyhelpers import SOURCE, photo

SCRIPT = os.path.join(SOURCE, "bench", "fidelity.py")
CKPT = os.path.join(SOURCE, "tests", "data", "encoder", "timm_vit", "model.safetensors")


def _load():
    spec = importlib.util.spec_from_file_location("fidelity", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fidelity"] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def fid():
    return _load()


@pytest.fixture(scope="module")
def tower(fid):
    return fid.Tower(fovea, fovea.Model(CKPT), threads=1)


def test_references_and_definitions(fid, tower):
    torch_before = "torch" in sys.modules
    S, G = tower.S, tower.G
    assert (S, tower.P, G) == (32, 8, 4)
    img = photo(3, 64, 64)
    # The ROI window of a fixation at (16, 16) is the image's first S x S tile: AnyRes holds the
    # ROI reference itself, so its ROI fidelity is 1.
    scene = fid.Scene("t", img, (16.0, 16.0, 12.0))
    ctx = fid.Ctx(tower, budget=2 * G * G, repeats=1)
    rec = fid.evaluate_scene(ctx, scene, fid.METHODS)
    m = rec["methods"]
    assert rec["roi_origin"] == [0, 0] and rec["roi_cells"] >= 1
    assert m["anyres"]["roi_fidelity"] == pytest.approx(1.0, abs=1e-5)
    # base is the global reference: every global measure is 1, the head agrees.
    for k in ("global_fidelity", "cls_cosine"):
        assert m["base"][k] == pytest.approx(1.0, abs=1e-5), k
        assert m["anyres"][k] == pytest.approx(1.0, abs=1e-5), k  # AnyRes's base view is the reference
    assert m["base"]["top1_agree"] and m["base"]["top5_agree"] and m["anyres"]["top1_agree"]
    # Token counts by definition.
    assert m["base"]["tokens"] == G * G and m["warp"]["tokens"] == G * G
    assert m["anyres"]["tokens"] == (1 + 4) * G * G
    assert 0 < m["uniform"]["tokens"] <= 2 * G * G
    assert 0 < m["mixed"]["tokens"] <= 2 * G * G + 2
    # The noise floor: other context, same pixels: below 1. The fixation sits in the top-left
    # corner, so only the +x and +y shifts (one patch: S / 4) stay in the image.
    fl = rec["noise_floor"]
    assert [s["shift"] for s in fl["shifts"]] == [[8, 0], [0, 8]]
    assert -1.0 < fl["mean"] < 0.9999
    off = rec["noise_floor_offgrid"]  # half a patch longer: 12 px
    assert [s["shift"] for s in off["shifts"]] == [[12, 0], [0, 12]] and -1.0 < off["mean"] < 0.9999
    assert m["anyres"]["roi_offset_px"] == 0.0 and m["anyres"]["roi_token_side_px"] == 8.0
    for name, r in m.items():
        if name == "windows" and not fid.windows_available(fovea):
            assert "skipped" in r["note"] and "global_fidelity" not in r
            continue
        assert -1.0 <= r["roi_fidelity"] <= 1.0 + 1e-6 and -1.0 <= r["global_fidelity"] <= 1.0 + 1e-6, name
        assert r["coverage"] == pytest.approx(1.0), name  # every pixel has a token
        assert r["encode_ms"] > 0, name
    # Without a query: the query-dependent methods again, no ROI; the warp has nothing to magnify.
    nq = rec["no_query"]
    assert "roi_fidelity" not in nq["mixed"] and -1 <= nq["mixed"]["global_fidelity"] <= 1 + 1e-6
    assert "global_fidelity" not in nq["warp"] and "n/a" in nq["warp"]["note"]
    if not torch_before:
        assert "torch" not in sys.modules


def test_roi_cells_and_finest_token(fid, tower):
    scene = fid.Scene("t", photo(4, 96, 80), (50.0, 40.0, 9.0))
    origin = fid.roi_origin(tower, scene)
    assert origin == (34, 24)  # centred (fixation - S/2), whole pixels
    cells, pts = fid.roi_cells(tower, scene, origin)
    assert np.all(np.hypot(pts[:, 0] - 50, pts[:, 1] - 40) <= 9)
    # cell centres are the ROI window's patch centres
    assert set(np.unique((pts[:, 0] - origin[0]) % 8)) == {4.0}
    # The finest covering token wins; a coarse token covers what fine ones leave.
    r = fid.Result("x", 3, None, boxes=np.array([[0, 0, 96, 80], [32, 32, 48, 48], [40, 32, 48, 40]], np.float32))
    idx = r.finest_at(np.array([[41.0, 33.0], [33.0, 47.0], [10.0, 70.0]]))
    assert idx.tolist() == [2, 1, 0]
    r.features = np.eye(3, dtype=np.float32)
    w, cov = r.coarsest_weights(96, 80)
    assert cov == 1.0 and w.tolist() == [96 * 80, 0, 0]  # the coarsest token owns every pixel


def test_warp_keeps_the_fovea_and_the_whole_image(fid, tower):
    img = photo(5, 128, 128)
    scene = fid.Scene("t", img, (70.0, 52.0, 10.0))
    origin = fid.roi_origin(tower, scene)
    w = fid.RadialWarp(tower, 128, 128, scene.fixation, origin)
    o = np.random.default_rng(0).uniform(0, tower.S, (5000, 2))
    q = w.forward(o)
    assert np.abs(w.inverse(q) - o).max() < 1e-6
    # border to border: the output's border lands on the image's, and every image point (its
    # corners too) has a place in the output: the whole image stays in view
    t = np.linspace(0, 32, 33)
    edge = np.concatenate([np.stack([t, 0 * t], 1), np.stack([t, 0 * t + 32], 1), np.stack([0 * t, t], 1),
                           np.stack([0 * t + 32, t], 1)])
    b = w.forward(edge)
    assert np.allclose(np.minimum.reduce([b[:, 0], b[:, 1], 128 - b[:, 0], 128 - b[:, 1]]), 0, atol=1e-6)
    back = w.inverse(np.array([[0, 0], [128, 0], [0, 128], [128, 128], [3, 90]], np.float64))
    assert np.all((back >= -1e-6) & (back <= 32 + 1e-6))
    # inside the fovea the output's pixels are the image's own, on the ROI reference's cell grid
    out = w.render(img)
    seen = w.unwarp(out)
    ys, xs = np.mgrid[0:128, 0:128]
    inner = np.hypot(xs + 0.5 - 70, ys + 0.5 - 52) < 6
    assert np.array_equal(seen[inner], img[inner])
    cells, pts = fid.roi_cells(tower, scene, origin)
    assert np.allclose(w.inverse(pts[np.hypot(pts[:, 0] - 70, pts[:, 1] - 52) < 6]) % 8, 4)


def _run(*args):
    env = dict(os.environ)
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120)


def test_cli_quick(tmp_path):
    out, png = tmp_path / "f.json", tmp_path / "f.png"
    r = _run("--model", CKPT, "--quick", "--sizes", "64,96", "--threads", "1", "--json", out, "--plot", png)
    assert r.returncode == 0, r.stderr
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in r.stdout.splitlines() if line.startswith("| ")]
    assert ["64²", "anyres", "80"] == rows[[r[:2] for r in rows].index(["64²", "anyres"])][:3]
    assert any(r[1] == "noise floor" for r in rows)
    res = json.loads(out.read_text())
    assert res["native_size"] == 32 and res["budget"] == 32 and res["sizes"] == [64, 96]
    assert res["commit"] and res["machine"] and len(res["scenes"]) == 4
    for z, tiles in (("64", 4), ("96", 9)):
        s = res["summary"][z]
        assert s["methods"]["anyres"]["tokens"] == (1 + tiles) * 16
        assert s["methods"]["base"]["global_fidelity"] == pytest.approx(1.0, abs=1e-5)
        assert s["methods"]["base"]["top1_agree"] == [2, 2]
        assert s["noise_floor"] is not None and s["noise_floor"] < 1.0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, says", [
    (["--model", "/nonexistent/model.safetensors"], "no such file"),
    (["--model", CKPT, "--sizes", "16"], "smaller than the tower's native 32 px"),
    (["--model", CKPT, "--methods", "uniform,bogus"], "unknown method bogus"),
    (["--model", CKPT, "--sizes", "a,b"], "--sizes"),
    ([], "--model"),
])
def test_bad_input_is_one_error_line(args, says):
    r = _run(*args)
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fidelity: error: ") and says in lines[0], r.stderr


def test_windows_plumbing(fid, tower):
    """The windows method with a stand-in module whose tokenize takes foveation= (and ignores
    it: the mixed tokens): the harness calls it, adapts the encoding and scores it as mixed."""
    import types

    assert not fid.windows_available(types.SimpleNamespace(tokenize=lambda image, budget=1: None))
    stand_in = types.SimpleNamespace(tokenize=lambda image, foveation=None, **kw: fovea.tokenize(image, **kw))
    assert fid.windows_available(stand_in)
    tw = fid.Tower(stand_in, tower.model, threads=1)
    scene = fid.Scene("t", photo(6, 96, 96), (40.0, 50.0, 10.0))
    rec = fid.evaluate_scene(fid.Ctx(tw, budget=32, repeats=1), scene, ["mixed", "windows"], no_query=False)
    m, w = rec["methods"]["mixed"], rec["methods"]["windows"]
    for k in ("tokens", "roi_fidelity", "global_fidelity", "cls_cosine", "top1"):
        assert w[k] == pytest.approx(m[k], abs=1e-6), k
