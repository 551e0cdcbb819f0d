"""Native-resolution towers from Python (fovea._fovea.encode_native, encode_native_windows) and their
hand-off (fovea.handoff.qwen_*), on the Qwen2-VL / Qwen2.5-VL fixtures of scripts/make_qwen_fixtures.py."""
import os

import numpy as np
import pytest

fovea = pytest.importorskip("fovea")
from fovea import _fovea, handoff  # noqa: E402

SRC = os.environ.get("FOVEA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(SRC, "tests", "data", "encoder")


def png(name):
    Image = pytest.importorskip("PIL.Image")
    return np.ascontiguousarray(np.asarray(Image.open(os.path.join(DATA, "qwen_images", name)).convert("RGB")))


def cases(kind):
    data = open(os.path.join(DATA, kind, "cases.safetensors"), "rb").read()
    return handoff.parse_safetensors(data)[0]


@pytest.mark.parametrize("kind,path", [("qwen2_vl", "qwen2_vl/model.safetensors"), ("qwen2_5_vl", "qwen2_5_vl")])
def test_encode_native_matches_the_reference(kind, path):
    m = fovea.Model(os.path.join(DATA, path))
    ref = cases(kind)
    img = png("image_644x420.png")
    r = _fovea.encode_native(m, [img])
    want = ref["image_644x420.projected"]
    assert r["projected"].shape == want.shape
    assert np.abs(r["projected"] - want).max() <= 1e-4 * np.abs(want).max()
    assert r["image_grid_thw"].tolist() == ref["image_644x420.grid_thw"].tolist()
    assert r["mrope_positions"].tolist() == ref["image_644x420.mrope"].tolist()


def test_handoff_forms_and_position_ids():
    m = fovea.Model(os.path.join(DATA, "qwen2_5_vl"))
    a, b = png("image_224x336.png"), png("image_448x448.png")
    r = _fovea.encode_native(m, [a, b])
    v = handoff.qwen_vllm(r)
    assert v["image_embeds"].shape == (8 * 12 + 16 * 16, 24)
    assert v["image_grid_thw"].tolist() == [[1, 24, 16], [1, 32, 32]]
    assert v["image_grid_thw"].dtype == np.int64
    # A prompt: 3 text tokens, image 0, 2 text tokens, image 1, 1 text token.
    IMG = 99
    ids = [1, 2, 3] + [IMG] * 96 + [4, 5] + [IMG] * 256 + [6]
    pos, delta = handoff.qwen_position_ids(ids, IMG, r)
    assert pos.shape == (3, len(ids))
    assert pos[:, :3].tolist() == [[0, 1, 2]] * 3
    # image 0: 12 rows x 8 columns of merged tokens from position 3
    assert pos[:, 3].tolist() == [3, 3, 3] and pos[:, 3 + 95].tolist() == [3, 3 + 11, 3 + 7]
    assert pos[:, 99].tolist() == [15, 15, 15]  # after the image: its largest id (14) + 1
    assert pos[:, 101].tolist() == [17, 17, 17] and pos[:, 101 + 255].tolist() == [17, 17 + 15, 17 + 15]
    assert pos[:, -1].tolist() == [33, 33, 33]
    assert delta == 34 - len(ids)
    # Images back to back, no text: fovea's own mrope_positions.
    pos2, _ = handoff.qwen_position_ids([IMG] * 352, IMG, r)
    assert pos2.T.tolist() == r["mrope_positions"].tolist()
    with pytest.raises(ValueError):
        handoff.qwen_position_ids([1, IMG, 2], IMG, r)
    text = np.zeros((len(ids), 24), np.float32)
    hf = handoff.qwen_hf_inputs(text, ids, IMG, r)
    assert hf["inputs_embeds"].shape == (len(ids), 24) and hf["position_ids"].shape == (3, 1, len(ids))


def test_windows_and_errors():
    m = fovea.Model(os.path.join(DATA, "qwen2_vl", "model.safetensors"))
    img = png("image_644x420.png")
    r = _fovea.encode_native_windows(m, img, fixations=[(500, 100)], budget_tokens=200)
    assert r["projected"].shape[0] <= 200
    assert r["window_kinds"] == ["base", "query"]
    assert len(r["image_rows"]) == 3
    with pytest.raises(Exception):
        _fovea.encode_native(m, [np.zeros((10, 10), np.uint8)])
    with pytest.raises(Exception):
        _fovea.encode_native(m, [img], precision="fp8")
    plain = fovea.Model("random:vit-tiny")
    with pytest.raises(Exception):
        _fovea.encode_native(plain, [img])
    assert _fovea.smart_resize(1944, 2592, max_pixels=12845056) == (1932, 2604)


def test_qwen3_deepstack():
    m = fovea.Model(os.path.join(DATA, "qwen3_vl"))
    ref = cases("qwen3_vl")
    r = _fovea.encode_native(m, [png("image_640x416.png")])
    assert len(r["deepstack"]) == 2
    for k in range(2):
        want = ref[f"image_640x416.deepstack_{k}"]
        assert r["deepstack"][k].shape == want.shape
        assert np.abs(r["deepstack"][k] - want).max() <= 1e-4 * np.abs(want).max()
    assert handoff.qwen_vllm(r)["image_grid_thw"].tolist() == [[1, 26, 40]]


def naflex_png(name):
    Image = pytest.importorskip("PIL.Image")
    path = os.path.join(DATA, "siglip2_naflex", name)
    return np.ascontiguousarray(np.asarray(Image.open(path).convert("RGB")))


def test_encode_naflex_matches_the_reference():
    """SigLIP 2 NaFlex from raw pixels (scripts/make_siglip2_fixtures.py): the reference's padded,
    masked batch against fovea's images in one call."""
    m = fovea.Model(os.path.join(DATA, "siglip2_naflex"))
    ref = cases("siglip2_naflex")
    names = ["200x120", "97x211", "640x96", "40x40"]
    r = _fovea.encode_naflex(m, [naflex_png(f"image_{n}.png") for n in names])
    for i, n in enumerate(names):
        want = ref[f"image_{n}.hidden"]
        assert list(r["spatial_shapes"][i]) == list(ref[f"image_{n}.spatial"])
        assert np.abs(r["embeddings"][i] - want).max() <= 1e-4 * np.abs(want).max()
        pw = ref[f"image_{n}.pooled"]
        assert np.abs(r["pooled"][i] - pw).max() <= 1e-4 * np.abs(pw).max()
    assert _fovea.naflex_size(120, 200, 16, 24) == (64, 96)
    with pytest.raises(Exception, match="NaFlex"):
        _fovea.encode_naflex(fovea.Model(os.path.join(DATA, "qwen2_vl", "model.safetensors")), [naflex_png("image_40x40.png")])


def test_encode_native_video_matches_the_reference():
    """Five frames (A, B, A, B, C) as one Qwen2.5-VL video grid: tower, merger and the video's
    M-RoPE ids as the reference gives them; the repeated frame pair encoded once."""
    m = fovea.Model(os.path.join(DATA, "qwen2_5_vl"))
    ref = cases("qwen2_5_vl")
    a, b, c = png("image_224x336.png"), png("video_b_224x336.png"), png("video_c_224x336.png")
    r = _fovea.encode_native_video(m, [a, b, a, b, c], fps=2.0)
    assert r["image_grid_thw"].tolist() == ref["video.grid_thw"].tolist()
    assert np.array_equal(r["mrope_positions"], ref["video.mrope"])
    want = ref["video.projected"]
    assert np.abs(r["projected"] - want).max() <= 1e-4 * np.abs(want).max()
    assert r["frames_reused"] == 1
    v = handoff.qwen_vllm(r, video=True)
    assert v["video_grid_thw"].tolist() == [[3, 24, 16]] and v["video_embeds"].shape == r["projected"].shape


def test_encode_naflex_windows():
    """NaFlex windows: a base view and a full-resolution window on the fixation within the budget
    (patches); the window's rows equal its crop encoded alone."""
    m = fovea.Model(os.path.join(DATA, "siglip2_naflex"))
    img = naflex_png("image_300x300.png")
    r = _fovea.encode_naflex_windows(m, img, fixations=[(220, 80)], budget_tokens=40)
    assert r["window_kinds"][0] == "base" and len(r["embeddings"]) == 2
    assert sum(e.shape[0] for e in r["embeddings"]) <= 40
    x0, y0, x1, y1 = r["window_boxes"][1]
    assert x0 <= 220 < x1 and y0 <= 80 < y1
    # the crop at its own size: max_num_patches = its patch count keeps it
    alone = _fovea.encode_naflex(m, [np.ascontiguousarray(img[y0:y1, x0:x1])],
                                 max_num_patches=(y1 - y0) * (x1 - x0) // 256)
    assert np.abs(alone["embeddings"][0] - r["embeddings"][1]).max() <= 1e-5 * np.abs(alone["embeddings"][0]).max()


def test_tokenize_with_a_tower_without_a_position_grid():
    # Qwen2-VL has rotary positions, no learned grid (config position_grid 0): tokenize(model=)
    # windows as without a model (was: "the windows' grid must be 1..256 tokens a side, got 0"),
    # and Model.encode_full says the tower encodes native images.
    m = fovea.Model(os.path.join(DATA, "qwen2_vl", "model.safetensors"))
    assert m.config["position_grid"] == 0
    t = fovea.tokenize(png("image_224x320.png"), model=m, budget=30, fixations=[(3, 3)])
    assert 0 < len(t) <= 30 and t.foveation == "windows"
    with pytest.raises(ValueError, match="native-resolution tower"):
        m.encode_full(t)


def test_fovea_encode_routes_a_naflex_tower():
    """fovea.encode on a SigLIP 2 NaFlex tower takes the NaFlex path, as `fovea encode` does:
    uniform=True the processor's (the reference's rows), by default the windows foveation with
    the budget in patches."""
    m = fovea.Model(os.path.join(DATA, "siglip2_naflex"))
    assert m.config["naflex"] and not m.config["native_resolution"] and m.config["max_num_patches"] > 0
    ref = cases("siglip2_naflex")
    img = naflex_png("image_200x120.png")
    u = fovea.encode(img, m, uniform=True)
    assert u["foveation"] == "naflex"
    want = ref["image_200x120.hidden"]
    assert list(u["spatial_shapes"][0]) == list(ref["image_200x120.spatial"])
    assert np.abs(u["embeddings"][0] - want).max() <= 1e-4 * np.abs(want).max()
    # max_num_patches (or budget, with uniform) sizes the processor's resize
    small = fovea.encode(img, m, uniform=True, max_num_patches=6)
    assert small["embeddings"][0].shape[0] <= 6
    assert fovea.encode(img, m, uniform=True, budget=6)["spatial_shapes"].tolist() == small["spatial_shapes"].tolist()
    big = naflex_png("image_300x300.png")
    w = fovea.encode(big, m, budget=40, fixations=[(220, 80)])
    assert w["foveation"] == "naflex_windows" and w["window_kinds"] == ["base", "query"]
    direct = _fovea.encode_naflex_windows(m, big, fixations=[(220, 80)], budget_tokens=40)
    assert w["window_boxes"] == direct["window_boxes"]
    for a, b in zip(w["embeddings"], direct["embeddings"]):
        assert np.array_equal(a, b)
    # a region steers a window as a fixation does
    r = fovea.encode(big, m, budget=40, regions=[(200, 40, 260, 100)])
    x0, y0, x1, y1 = r["window_boxes"][1]
    assert r["window_kinds"][1] == "query" and x0 < 260 and x1 > 200 and y0 < 100 and y1 > 40
    with pytest.raises(ValueError, match="max_num_patches"):
        fovea.encode(img, m, max_num_patches=6)  # windows count patches with budget
    with pytest.raises(ValueError, match="give one"):
        fovea.encode(img, m, uniform=True, budget=6, max_num_patches=6)
    with pytest.raises(TypeError, match="fixed-size towers"):
        fovea.encode(img, m, patch=16)


def test_fovea_encode_routes_qwen_towers_and_fixed_size_towers(tmp_path):
    m = fovea.Model(os.path.join(DATA, "qwen2_5_vl"))
    assert m.config["native_resolution"] and m.config["merge_size"] == 2
    ref = cases("qwen2_5_vl")
    img = png("image_644x420.png")
    u = fovea.encode(img, m, uniform=True)
    assert u["foveation"] == "native"
    assert u["image_grid_thw"].tolist() == ref["image_644x420.grid_thw"].tolist()
    want = ref["image_644x420.projected"]
    assert np.abs(u["projected"] - want).max() <= 1e-4 * np.abs(want).max()
    # a path and a gray image go through the same processor
    Image = pytest.importorskip("PIL.Image")
    path = tmp_path / "photo.png"
    Image.fromarray(img).save(path)
    assert np.array_equal(fovea.encode(str(path), m, uniform=True)["projected"], u["projected"])
    gray = fovea.encode(img[:, :, 0], m, uniform=True)
    rgb = fovea.encode(np.ascontiguousarray(np.repeat(img[:, :, :1], 3, axis=2)), m, uniform=True)
    assert np.array_equal(gray["projected"], rgb["projected"])
    w = fovea.encode(img, m, budget=200, fixations=[(500, 100)])
    assert w["foveation"] == "native_windows" and w["projected"].shape[0] <= 200
    assert w["window_kinds"] == ["base", "query"]
    assert handoff.qwen_vllm(w)["image_grid_thw"].shape == (2, 3)
    with pytest.raises(ValueError, match="NaFlex"):
        fovea.encode(img, m, max_num_patches=10)
    # a fixed-size tower: tokenize + encode_full, as before
    vit = fovea.Model("random:vit-tiny")
    e = fovea.encode(img, vit, budget=40, fixations=[(500, 100)], precision="fp32")
    assert isinstance(e, fovea.Encoding) and e.embeddings.shape[0] <= 40
    with pytest.raises(ValueError, match="NaFlex"):
        fovea.encode(img, vit, max_num_patches=10)


def test_native_video_size_is_the_video_processors_rule():
    """_fovea.native_video_size against the reference's rules (scripts/make_qwen_video_resize.py):
    Qwen2-VL per frame within the video limits, Qwen3-VL over every frame's pixels."""
    import json
    rows = json.load(open(os.path.join(DATA, "qwen_video_resize.json")))["rows"]
    models = {"qwen2_vl": fovea.Model(os.path.join(DATA, "qwen2_vl", "model.safetensors")),
              "qwen3_vl": fovea.Model(os.path.join(DATA, "qwen3_vl"))}
    assert models["qwen3_vl"].config["video_pixels_over_frames"]
    assert not models["qwen2_vl"].config["video_pixels_over_frames"]
    for family, frames, h, w, mn, mx, cap, rh, rw, _ in rows[::7]:
        if rh == 0:
            with pytest.raises(ValueError):
                _fovea.native_video_size(models[family], frames, h, w, mn, mx, cap)
        else:
            assert _fovea.native_video_size(models[family], frames, h, w, mn, mx, cap) == (rh, rw), (family, frames, h, w)


def test_fovea_encode_mixed_on_a_qwen_tower(tmp_path):
    """foveation="mixed" (for experiment): merge units of mixed levels in one sequence; every unit at
    level 0 is the native encode; the hand-off places the units' own ids, vLLM's grid route refuses."""
    m = fovea.Model(os.path.join(DATA, "qwen2_5_vl"))
    img = png("image_448x448.png")
    full = fovea.encode(img, m, budget=16 * 16, foveation="mixed")  # every 28-px tile: all level 0
    assert full["foveation"] == "native_mixed" and full["unit_level"] == 0
    assert full["levels"].tolist() == [0] * 256 and full["image_grid_thw"].shape == (0, 3)
    native = _fovea.encode_native(m, [img])
    assert np.abs(full["projected"] - native["projected"]).max() <= 1e-4 * np.abs(native["projected"]).max()
    assert full["mrope_positions"].tolist() == native["mrope_positions"].tolist()

    r = fovea.encode(png("image_644x420.png"), m, budget=60, fixations=[(500, 100)], foveation="mixed")
    n = r["projected"].shape[0]
    assert 58 <= n <= 60 and len(set(r["levels"].tolist())) >= 2
    assert r["positions"].shape == (n, 4) and r["boxes"].shape == (n, 4)
    assert len({tuple(x) for x in r["mrope_positions"].tolist()}) == n  # distinct ids
    IMG = 99
    ids = [1, 2] + [IMG] * n + [3]
    pos, delta = handoff.qwen_position_ids(ids, IMG, r)
    assert pos[:, 2:2 + n].T.tolist() == (r["mrope_positions"] + 2).tolist()
    assert pos[:, -1].tolist() == [int(r["mrope_positions"].max()) + 3] * 3
    hf = handoff.qwen_hf_inputs(np.zeros((len(ids), 24), np.float32), ids, IMG, r)
    assert hf["position_ids"].shape == (3, 1, len(ids))
    with pytest.raises(ValueError, match="not a grid"):
        handoff.qwen_vllm(r)
    # the file form (as fovea encode --foveation mixed writes it: no image_grid_thw, levels beside)
    path = str(tmp_path / "mixed.safetensors")
    fovea.save(path, {k: r[k] for k in ("projected", "mrope_positions", "levels", "boxes")})
    f = fovea.load(path)
    pos_file, delta_file = handoff.qwen_position_ids(ids, IMG, {k: f[k] for k in f.keys()})
    assert np.array_equal(pos_file, pos) and delta_file == delta
    with pytest.raises(ValueError, match="excludes"):
        fovea.encode(img, m, foveation="mixed", uniform=True)
    with pytest.raises(ValueError, match="foveation must be"):
        fovea.encode(img, m, foveation="grid")
    with pytest.raises(TypeError, match="max_level"):
        fovea.encode(img, m, max_level=1)
    with pytest.raises(Exception, match="budget"):
        fovea.encode(png("image_644x420.png"), m, budget=1, foveation="mixed")  # below the 6 coarsest units


@pytest.mark.parametrize("kind, path", [("qwen2_vl", "qwen2_vl/model.safetensors"), ("qwen3_vl", "qwen3_vl")])
def test_mixed_layout_matches_the_reference_at_fractional_positions(kind, path):
    """A foveated mixed layout (units of three levels) against scripts/make_qwen_fixtures.py's float64
    tower fed the same patches, with its rotary angles taken at the patches' fractional centres and
    (Qwen3-VL) its learned table sampled there: the rules of encode_native_mixed, written apart."""
    torch = pytest.importorskip("torch")
    import sys
    sys.path.insert(0, os.path.join(SRC, "scripts"))
    import make_qwen_fixtures as ref
    m = fovea.Model(os.path.join(DATA, path))
    img = png("image_640x416.png" if kind == "qwen3_vl" else "image_644x420.png")
    r = _fovea.encode_native_mixed(m, img, fixations=[(500, 100)], budget_tokens=60, return_input=True)
    assert len(set(r["levels"].tolist())) >= 3
    f = fovea.load(os.path.join(DATA, path) if path.endswith(".safetensors") else
                   os.path.join(DATA, path, "model.safetensors"))
    prefix = next(p for p in ("model.visual.", "visual.") if any(k.startswith(p) for k in f.keys()))
    sd = {k[len(prefix):]: torch.from_numpy(np.array(f[k], dtype=np.float64)) for k in f.keys() if k.startswith(prefix)}
    qwen3 = kind == "qwen3_vl"
    hidden = sd["patch_embed.proj.weight"].shape[0]
    cfg = {"hidden": hidden, "heads": 2, "layers": 3 if qwen3 else 2, "merge": 2, "patch": 16 if qwen3 else 14,
           "window_px": 0, "fullatt": [], "gated": False, "qwen3": qwen3, "deepstack": [0, 1] if qwen3 else []}
    pos = torch.from_numpy(r["patch_positions"].astype(np.float64))  # [N, 2] rows, columns
    n = pos.shape[0]

    def angles(grids, head_dim, merge, theta=10000.0):
        dim = head_dim // 2
        inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        return torch.cat([pos[:, :1] * inv, pos[:, 1:] * inv], dim=1)

    def table_at(table, grids, merge):  # bilinear at position * (G - 1) / (n - 1), clamped
        g = int(round(table.shape[0] ** 0.5))
        grid = table.reshape(g, g, -1)
        tile = 32 << int(r["unit_level"])
        nh, nw = -(-img.shape[0] // tile) * 2, -(-img.shape[1] // tile) * 2
        v = torch.stack([pos[:, 0] * (g - 1) / (nh - 1), pos[:, 1] * (g - 1) / (nw - 1)], 1).clamp(0, g - 1)
        lo = v.floor().long().clamp(max=g - 1)
        hi = (lo + 1).clamp(max=g - 1)
        fr = v - lo
        fy, fx = fr[:, :1], fr[:, 1:]
        return (grid[lo[:, 0], lo[:, 1]] * (1 - fy) * (1 - fx) + grid[lo[:, 0], hi[:, 1]] * (1 - fy) * fx +
                grid[hi[:, 0], lo[:, 1]] * fy * (1 - fx) + grid[hi[:, 0], hi[:, 1]] * fy * fx)

    saved = ref.rotary_angles, ref.learned_positions
    ref.rotary_angles, ref.learned_positions = angles, table_at
    try:
        out = ref.tower(sd, cfg, torch.from_numpy(r["patches"].astype(np.float64)), [(1, 2, n // 2)])
    finally:
        ref.rotary_angles, ref.learned_positions = saved
    want = out[1].numpy()
    assert np.abs(r["projected"] - want).max() <= 1e-4 * np.abs(want).max()
    assert np.abs(r["embeddings"] - out[0].numpy()).max() <= 1e-4 * np.abs(out[0].numpy()).max()
    for k, d in enumerate(out[2] if qwen3 else []):
        assert np.abs(r["deepstack"][k] - d.numpy()).max() <= 1e-4 * np.abs(d.numpy()).max()
