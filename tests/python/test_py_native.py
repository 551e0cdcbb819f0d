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
