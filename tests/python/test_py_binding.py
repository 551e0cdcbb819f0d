"""The fovea Python module: results equal the CLI's files, zero copy, the GIL, bad inputs."""
import gc
import os
import threading

import numpy as np
import pytest

import fovea
from pyhelpers import cli, photo, save_png


@pytest.fixture(scope="module")
def png(tmp_path_factory):
    d = tmp_path_factory.mktemp("png")
    arr = photo(3, 240, 320)
    return arr, save_png(arr, str(d / "photo.png"))


def assert_same_file(a: str, b: str, skip_meta=("source",)):
    fa, fb = fovea.load(a), fovea.load(b)
    assert sorted(fa.keys()) == sorted(fb.keys())
    for k in fa.keys():
        x, y = fa[k], fb[k]
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert np.array_equal(x, y), k
    ma = {k: v for k, v in fa.metadata.items() if k not in skip_meta}
    mb = {k: v for k, v in fb.metadata.items() if k not in skip_meta}
    assert ma == mb


def test_tokenize_array_and_path_equal_cli_file(png, tmp_path):
    arr, path = png
    out = tmp_path / "cli.safetensors"
    cli("tokenize", path, "--budget", 120, "--fixation", "100,80", "--region", "150,100,300,200", "-o", out)
    for image in (arr, path, open(path, "rb").read()):
        t = fovea.tokenize(image, budget=120, fixations=[(100, 80)], regions=[(150, 100, 300, 200)], source=path)
        mine = tmp_path / "py.safetensors"
        t.save(mine)
        assert open(mine, "rb").read() == open(out, "rb").read()  # byte for byte, metadata included
        f = fovea.load(out)
        for k in ("patches", "positions", "levels", "rate_map", "relevance"):
            assert np.array_equal(getattr(t, k), f[k]), k
    assert t.image_size == (320, 240) and len(t) <= 120 and t.mode == "foveated"


def test_pil_images_are_read_as_hf_processors_read_them(png):
    """A PIL image (Image.open, HF datasets) is taken as np.asarray(im.convert("RGB")) is;
    "RGB" and "L" without a conversion."""
    from PIL import Image
    arr, path = png
    ref = fovea.tokenize(arr, budget=64)
    for im in (Image.open(path), Image.fromarray(arr), Image.fromarray(arr).convert("RGBA")):
        t = fovea.tokenize(im, budget=64)
        assert np.array_equal(t.patches, ref.patches) and np.array_equal(t.positions, ref.positions), im.mode
    pal = Image.fromarray(arr).convert("P", palette=Image.ADAPTIVE, colors=32)
    t = fovea.tokenize(pal, budget=64)
    assert np.array_equal(t.patches, fovea.tokenize(np.asarray(pal.convert("RGB")), budget=64).patches)
    gray = Image.fromarray(arr).convert("L")
    assert np.array_equal(fovea.tokenize(gray, budget=64).patches, fovea.tokenize(np.asarray(gray), budget=64).patches)
    with pytest.raises(TypeError, match="16-bit"):
        fovea.tokenize(arr.astype(np.uint16))
    with pytest.raises(TypeError, match="PIL image"):
        fovea.tokenize([[1, 2], [3, 4]])


def test_query_outside_the_image_warns(png):
    arr, _ = png  # 320 x 240
    with pytest.warns(UserWarning, match=r"fixation\(500,10\) lies outside the 320x240 image"):
        t = fovea.tokenize(arr, budget=32, fixations=[(500, 10), (100, 100)])
    assert t.query_outside == ["fixation(500,10)"]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fovea.tokenize(arr, budget=32, fixations=[(319, 239)], regions=[(300, 200, 400, 300)]).query_outside == []


def test_other_still_formats_decode_like_png():
    """With FFmpeg, WebP / TIFF / GIF... paths and bytes decode to the same pixels as the PNG."""
    formats = fovea.image_formats()
    assert formats.startswith("PNG, JPEG")
    assert ".png" in fovea.image_extensions()
    images = os.path.join(os.environ["FOVEA_SOURCE_DIR"], "tests", "data", "images")
    webp = os.path.join(images, "lossless.webp")
    if "WebP" not in formats:
        with pytest.raises(Exception, match="FFmpeg"):
            fovea.tokenize(webp, budget=6)
        pytest.skip("built without FFmpeg")
    assert ".webp" in fovea.image_extensions()
    ref = fovea.tokenize(os.path.join(images, "source.png"), budget=6, dtype="u8")
    for image in (webp, open(webp, "rb").read(), os.path.join(images, "rgb.tiff")):
        t = fovea.tokenize(image, budget=6, dtype="u8")
        assert np.array_equal(t.patches, ref.patches) and np.array_equal(t.positions, ref.positions)


@pytest.mark.parametrize("flag, fix", [("100,80,30", fovea.Fixation(100, 80, radius=30)),
                                       ("100,80,30", (100, 80, 30)),
                                       ("100,80,0,0.5", fovea.Fixation(100, 80, weight=0.5)),
                                       ("100,80,12,2", (100, 80, 12, 2))])
def test_fixation_means_what_the_cli_flag_means(png, tmp_path, flag, fix):
    """A fixation's third value is the radius and the fourth the weight, as --fixation X,Y,R,W."""
    arr, path = png
    out = tmp_path / "cli.safetensors"
    cli("tokenize", path, "--budget", 120, "--fixation", flag, "-o", out)
    t = fovea.tokenize(arr, budget=120, fixations=[fix], source=path)
    t.save(tmp_path / "py.safetensors")
    assert open(tmp_path / "py.safetensors", "rb").read() == open(out, "rb").read()


def test_relevance_options_match_the_cli(png, tmp_path):
    arr, path = png
    out = tmp_path / "cli.safetensors"
    cli("tokenize", path, "--budget", 100, "--fixation", "60,50", "--weights", "detail=2,query=4", "--fine-bias", "1",
        "--detail-focus", "2", "--fixation-spread", "0.5", "--lookahead", "2", "-o", out)
    t = fovea.tokenize(arr, budget=100, fixations=[(60, 50)], weights={"detail": 2, "query": 4}, fine_bias=1,
                       detail_focus=2, fixation_spread=0.5, lookahead=2, source=path)
    t.save(tmp_path / "py.safetensors")
    assert open(tmp_path / "py.safetensors", "rb").read() == open(out, "rb").read()


def test_planar_array_read_in_place(png):
    """A CHW buffer seen as [H, W, 3] (strides row, 1, plane) is read without a copy and gives
    the interleaved array's tokens."""
    arr, _ = png
    chw = np.ascontiguousarray(arr.transpose(2, 0, 1))
    hwc_view = chw.transpose(1, 2, 0)
    assert not hwc_view.flags.c_contiguous
    a, b = fovea.tokenize(hwc_view, budget=150), fovea.tokenize(arr, budget=150)
    for k in ("patches", "positions", "levels", "rate_map", "relevance"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    chw[:, :8, :8] = 255  # the pyramid borrows the caller's buffer: the overlay shows the write
    assert not np.array_equal(a.overlay()[:8, :8], b.overlay()[:8, :8])


@pytest.mark.parametrize("kw", [dict(uniform=True), dict(dtype="f16"), dict(dtype="u8"), dict(budget=2000)])
def test_view_input_equals_decoded_input(png, kw):
    """Every mode reads the array in place and matches fovea's own decode of the PNG."""
    arr, path = png
    a, b = fovea.tokenize(arr, **kw), fovea.tokenize(path, **kw)
    for k in ("patches", "positions", "levels", "rate_map", "relevance"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert np.array_equal(a.seen(), b.seen()) and np.array_equal(a.overlay(), b.overlay())


def test_strided_views_read_in_place(png):
    arr, _ = png
    big = np.zeros((300, 400, 4), np.uint8)
    big[20:260, 30:350, :3] = arr  # a crop with padded rows and 4-byte pixels (RGBA[..., :3])
    view = big[20:260, 30:350, :3]
    assert not view.flags["C_CONTIGUOUS"]
    a, b = fovea.tokenize(view, budget=200), fovea.tokenize(arr, budget=200)
    assert np.array_equal(a.patches, b.patches) and np.array_equal(a.relevance, b.relevance)
    gray = np.ascontiguousarray(arr[..., 1])
    g = fovea.tokenize(gray, budget=100, dtype="u8")  # u8: no per-channel normalisation
    assert g.patches.shape[1] == 3 and np.array_equal(g.patches[:, 0], g.patches[:, 2])


def test_encode_equals_cli_file(png, tmp_path):
    arr, path = png
    out = tmp_path / "cli.safetensors"
    cli("encode", path, "--model", "random:vit-s16", "--budget", 64, "--threads", 1, "-o", out)
    m = fovea.Model("random:vit-s16")
    assert m.is_random and m.config["hidden_size"] == 384 and m.config["patch_size"] == 16
    t = fovea.tokenize(arr, budget=64, threads=1, source=path, model=m)  # the model's preprocessing
    e = m.encode_full(t, threads=1)
    assert e.projected is None and m.config["projector"] == "none"
    mine = tmp_path / "py.safetensors"
    e.save(mine)
    assert_same_file(str(mine), str(out), skip_meta=())
    emb = m.encode(t, threads=1)
    assert emb.shape == (len(t), 384) and emb.dtype == np.float32
    assert np.array_equal(emb, fovea.load(out)["embeddings"])
    # The raw-array form of encode reads the caller's patches in place.
    raw = m.encode(np.ascontiguousarray(t.patches), threads=1, positions=t.positions, image_size=t.image_size)
    assert np.array_equal(raw, emb)


def test_kernels_enabled_is_what_the_cli_reports(png):
    _, path = png
    import json

    def kernels(precision):
        r = cli("encode", path, "--model", "random:vit-s16", "--budget", 32, "--threads", 1, "--precision",
                precision, "--json")
        return json.loads(r.stdout)["encoder"]["kernels"]

    assert isinstance(fovea.amx_kernels_enabled(), bool)
    assert isinstance(fovea.avx2_kernels_enabled(), bool)
    assert isinstance(fovea.avx512bf16_kernels_enabled(), bool)
    fp32 = "avx2+onednn" if fovea.avx2_kernels_enabled() else "onednn"
    assert kernels("fp32") == fp32
    if fovea.bf16_supported():
        want = ("amx+onednn" if fovea.amx_kernels_enabled()
                else "avx512bf16+onednn" if fovea.avx512bf16_kernels_enabled() else "onednn")
        assert kernels("bf16") == want
    else:  # bf16 runs fp32 here
        assert kernels("bf16") == fp32


def test_bf16_runs_where_supported_and_fp32_with_a_warning_elsewhere(png, tmp_path):
    arr, path = png
    m = fovea.Model("random:vit-s16")
    t = fovea.tokenize(arr, budget=32, threads=1, source=path, model=m)
    if fovea.bf16_supported():
        e = m.encode_full(t, precision="bf16", threads=1)
        assert e.precision == "bf16"
        return
    with pytest.warns(RuntimeWarning, match="no native bf16 matrix kernels"):
        e = m.encode_full(t, precision="bf16", threads=1)
    assert e.precision == "fp32"
    assert np.array_equal(e.embeddings, m.encode(t, threads=1))
    # The file says what ran, and what was asked for, as the CLI's does.
    e.save(tmp_path / "py.safetensors")
    meta = fovea.load(tmp_path / "py.safetensors").metadata
    assert meta["precision"] == "fp32" and meta["precision_requested"] == "bf16"
    out = tmp_path / "cli.safetensors"
    cli("encode", path, "--model", "random:vit-s16", "--budget", 32, "--threads", 1, "--precision", "bf16", "-o", out)
    assert_same_file(str(tmp_path / "py.safetensors"), str(out), skip_meta=())


def test_nonfinite_embeddings_warn(png, tmp_path):
    """A checkpoint with NaN weights loads and encodes; the NaN embeddings come with a RuntimeWarning."""
    import shutil
    import warnings
    src = os.path.join(os.environ["FOVEA_SOURCE_DIR"], "tests", "data", "encoder", "clip")
    f = fovea.load(os.path.join(src, "model.safetensors"))
    tensors = {k: np.array(f[k]) for k in f.keys()}
    tensors["vision_model.encoder.layers.1.mlp.fc2.bias"][:] = np.nan
    fovea.save(tmp_path / "model.safetensors", tensors, f.metadata)
    shutil.copy(os.path.join(src, "config.json"), tmp_path / "config.json")
    arr, _ = png
    good = fovea.Model(os.path.join(src, "model.safetensors"))
    t = fovea.tokenize(arr, budget=16, threads=1, model=good)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a healthy model: no warning
        assert np.isfinite(good.encode(t, threads=1)).all()
    bad = fovea.Model(tmp_path / "model.safetensors")
    with pytest.warns(RuntimeWarning, match=r"the embeddings: \d+ of \d+ values are NaN or infinite"):
        e = bad.encode(t, threads=1)
    assert np.isnan(e).any()
    with pytest.warns(RuntimeWarning, match="NaN or infinite"):
        bad.encode_full(t, threads=1)


def test_paths_that_are_not_utf8(png, tmp_path):
    """A file name in a legacy encoding (a str from os.listdir, surrogate-escaped) is opened as
    its bytes; messages and metadata that quote it stay valid UTF-8."""
    import shutil
    _, path = png
    name = os.fsdecode(os.fsencode(str(tmp_path)) + b"/caf\xe9.png")
    shutil.copy(path, name)
    t = fovea.tokenize(name, budget=16, threads=1)
    assert t.source == name  # surrogate-escaped back, as os.listdir gives it
    t.save(name + ".safetensors")
    assert os.path.exists(os.fsencode(name) + b".safetensors")
    assert fovea.load(name + ".safetensors").metadata["source"].endswith("/caf\ufffd.png")
    with pytest.raises(OSError, match=r"caf\\xe9\.png\.missing"):
        fovea.tokenize(name + ".missing")


def test_encode_hierarchical_attention_equals_cli_file(png, tmp_path):
    """attention= is `fovea encode --attention`: same embeddings, same metadata, labelled."""
    arr, path = png
    out = tmp_path / "cli.safetensors"
    cli("encode", path, "--model", "random:vit-s16", "--budget", 64, "--threads", 1, "--attention", "hierarchical:2:8",
        "-o", out)
    m = fovea.Model("random:vit-s16")
    t = fovea.tokenize(arr, budget=64, threads=1, source=path, model=m)
    e = m.encode_full(t, threads=1, attention="hierarchical:2:8")
    assert e.attention == "hierarchical:2:8"
    assert 0 < e.attention_ms < e.encode_ms
    mine = tmp_path / "py.safetensors"
    e.save(mine)
    assert_same_file(str(mine), str(out), skip_meta=())
    assert fovea.load(out).metadata["attention"].startswith(
        "hierarchical:2:8 (approximate, experimental: mean per-token cosine to exact attention ")
    exact = m.encode(t, threads=1)
    assert not np.array_equal(exact, e.embeddings)  # 64 tokens in 8 blocks, 2 exact: an approximation
    with pytest.raises(ValueError, match="hierarchical:K"):
        m.encode(t, attention="hierarchical:0")


def test_outputs_are_views_without_copies(png):
    arr, _ = png
    t = fovea.tokenize(arr, budget=100)
    for k in ("patches", "positions", "levels", "rate_map", "relevance"):
        a, b = getattr(t, k), getattr(t, k)
        assert not a.flags["OWNDATA"], k  # memory C++ owns
        assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0], k  # same memory each access
        assert a.flags["C_CONTIGUOUS"], k
    p = t.patches
    del t
    gc.collect()
    assert np.isfinite(p).all()  # the array keeps the Tokens (and its memory) alive
    emb = fovea.Model("random:vit-s16").encode(fovea.tokenize(arr, budget=64), threads=1)
    assert not emb.flags["OWNDATA"] and emb.flags["WRITEABLE"]  # torch.from_numpy shares it


def test_input_array_is_borrowed_not_copied(png):
    """The pyramid's level 0 is the caller's array: the overlay (which reads level 0) sees a
    later write to it, and the Tokens keep the array alive."""
    arr, _ = png
    mine = arr.copy()
    t = fovea.tokenize(mine, budget=100)
    before = t.overlay()
    mine[:] = 0
    after = t.overlay()
    assert not np.array_equal(before, after)
    del mine
    gc.collect()
    assert t.overlay().shape == before.shape


def test_gil_released_during_encode(png):
    arr, _ = png
    m = fovea.Model("random:vit-b16")
    t = fovea.tokenize(arr, budget=273)
    m.encode(t, threads=1, precision="bf16")  # warm up (bf16 weights)
    started = threading.Event()
    result = {}

    def work():
        started.set()
        result["emb"] = m.encode(t, threads=1)

    th = threading.Thread(target=work)
    th.start()
    started.wait()
    ticks = 0
    while th.is_alive():
        ticks += 1
    th.join()
    # With the GIL held for the whole encode this thread could not run until it returned.
    assert ticks > 1000, ticks
    assert result["emb"].shape[0] == len(t)


def test_two_threads_encode_at_once(png):
    arr, _ = png
    toks = [fovea.tokenize(photo(s), budget=64) for s in (1, 2)]
    models = [fovea.Model("random:vit-s16"), fovea.Model("random:vit-s16")]
    serial = [models[0].encode(t, threads=1) for t in toks]
    out = [None, None]

    def work(i):
        out[i] = models[i].encode(toks[i], threads=1)

    ths = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert all(np.array_equal(a, b) for a, b in zip(out, serial))


def test_two_threads_on_one_model_equal_serial():
    """Two Python threads encoding on ONE Model (the GIL released, each call on its own pooled
    context): different images and the same image, encode and encode_full, fp32 and bf16 where
    the CPU has it; every result equals the serial one. The model is fresh, so the threads also
    race to pack its weights."""
    toks = [fovea.tokenize(photo(s), budget=64) for s in (1, 2)]
    precisions = ["fp32", "bf16"] if fovea.bf16_supported() else ["fp32"]
    reference = fovea.Model("random:vit-s16")
    for precision in precisions:
        serial = [reference.encode_full(t, threads=1, precision=precision) for t in toks]
        for pair in ((0, 1), (0, 0)):
            m = fovea.Model("random:vit-s16")
            out = [[], []]
            errors = []

            def work(i):
                try:
                    for _ in range(3):
                        e = m.encode_full(toks[pair[i]], threads=1, precision=precision)
                        out[i].append((e.embeddings, e.class_token, m.encode(toks[pair[i]], threads=1,
                                                                             precision=precision)))
                except Exception as exc:  # reported below, with the thread it came from
                    errors.append((i, exc))

            ths = [threading.Thread(target=work, args=(i,)) for i in range(2)]
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            assert not errors, errors
            for i in range(2):
                want = serial[pair[i]]
                for emb, cls, plain in out[i]:
                    assert np.array_equal(emb, want.embeddings), (precision, pair, i)
                    assert np.array_equal(cls, want.class_token), (precision, pair, i)
                    assert np.array_equal(plain, want.embeddings), (precision, pair, i)


def test_bad_inputs_raise(png, tmp_path):
    arr, path = png
    with pytest.raises(TypeError, match="uint8"):
        fovea.tokenize(arr.astype(np.float32))
    with pytest.raises(TypeError):
        fovea.tokenize(42)
    with pytest.raises(ValueError, match="ascontiguousarray"):
        fovea.tokenize(arr[::-1])
    with pytest.raises(ValueError, match="channels"):
        fovea.tokenize(np.zeros((10, 10, 4), np.uint8))
    with pytest.raises(ValueError, match="channels"):
        fovea.tokenize(arr.transpose(2, 0, 1).copy())
    with pytest.raises(ValueError):
        fovea.tokenize(np.zeros((0, 10, 3), np.uint8))
    with pytest.raises(ValueError, match="budget"):
        fovea.tokenize(arr, budget=0)
    for big in ((1 << 24) + 1, 1 << 40, np.int64(1 << 33)):  # the CLI's range; beyond C's int (was: TypeError)
        with pytest.raises(ValueError, match=r"budget must be in \[1, 16777216\] tokens"):
            fovea.tokenize(arr, budget=big)
    with pytest.raises(ValueError, match="sharpness"):
        fovea.tokenize(arr, sharpness=9)
    with pytest.raises(ValueError, match="fixation"):
        fovea.tokenize(arr, fixations=[(1, 2, 3, 4, 5)])
    # Not numbers: a TypeError naming the argument (was: pybind11's "incompatible function
    # arguments", or "'NoneType' object is not iterable").
    with pytest.raises(TypeError, match=r"fixations must be a list of \(x, y"):
        fovea.tokenize(arr, fixations="10,20")
    with pytest.raises(TypeError, match="fixations must hold .* one is None"):
        fovea.tokenize(arr, fixations=[None])
    with pytest.raises(TypeError, match=r"regions must hold \(x0, y0, x1, y1"):
        fovea.tokenize(arr, regions=[("a", "b", "c", "d")])
    assert fovea.tokenize(arr, budget=20, fixations=np.array([[3, 4]])).budget == 20  # any number sequences
    with pytest.raises(ValueError, match="radius"):
        fovea.tokenize(arr, fixations=[fovea.Fixation(1, 2, radius=-3)])
    with pytest.raises(ValueError, match="fixation_spread"):
        fovea.tokenize(arr, fixation_spread=0)
    with pytest.raises(ValueError, match="dtype"):
        fovea.tokenize(arr, dtype="f64")
    with pytest.raises(ValueError, match="weights"):
        fovea.tokenize(arr, weights={"nope": 1})
    corrupt = tmp_path / "bad.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(RuntimeError):
        fovea.tokenize(str(corrupt))
    with pytest.raises(RuntimeError):
        fovea.tokenize(b"garbage bytes")
    m = fovea.Model("random:vit-s16")
    with pytest.raises(ValueError, match="precision"):
        m.encode(fovea.tokenize(arr, budget=64), precision="fp8")
    with pytest.raises(ValueError, match="u8"):
        m.encode(fovea.tokenize(arr, budget=64, dtype="u8"))
    with pytest.raises(ValueError):
        m.encode(np.zeros((4, 3, 14, 14), np.float32), positions=np.zeros((4, 4), np.float32), image_size=(64, 64))
    with pytest.raises(TypeError):
        m.encode(np.zeros((4, 3, 16, 16), np.float64), positions=np.zeros((4, 4), np.float32), image_size=(64, 64))
    with pytest.raises(OSError):
        fovea.Model(str(tmp_path / "missing.safetensors"))
    with pytest.raises(OSError):
        fovea.load(tmp_path / "missing.safetensors")
    with pytest.raises(RuntimeError):
        fovea.load(corrupt)


def test_error_message_is_the_clis(tmp_path):
    missing = str(tmp_path / "nope.png")
    r = cli("tokenize", missing, "-o", tmp_path / "x.safetensors", check=False)
    assert r.returncode == 1
    with pytest.raises(OSError) as e:
        fovea.tokenize(missing)
    assert r.stderr.strip() == "fovea: error: " + str(e.value)


def test_load_save_roundtrip(tmp_path):
    tensors = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.arange(5, dtype=np.int32),
               "c": np.ones((2, 2), np.float16), "d": np.arange(6, dtype=np.uint8)[::2]}
    p = tmp_path / "t.safetensors"
    fovea.save(p, tensors, {"k": "v"})
    f = fovea.load(p)
    assert set(f.keys()) == set(tensors) and f.metadata == {"k": "v"} and "a" in f and len(f) == 4
    for k, v in tensors.items():
        assert np.array_equal(f[k], v) and f[k].dtype == v.dtype
    assert not f["a"].flags["WRITEABLE"]  # a view on the mapped file
    with pytest.raises(KeyError):
        f["zzz"]
    with pytest.raises(TypeError):
        fovea.save(p, {"x": np.zeros(3, np.complex64)})
    assert os.listdir(tmp_path) == ["t.safetensors"]  # no temporary left behind


def test_docstrings_and_stubs():
    assert "budget" in fovea.tokenize.__doc__ and "GIL" in fovea.Model.encode.__doc__
    import pathlib
    assert (pathlib.Path(fovea.__file__).parent / "_fovea.pyi").exists()


def test_open_clip_bin_and_position_sampling():
    """open_clip's torch.save'd .bin gives the same embeddings as its safetensors twin, and each
    model's config names how it reads its position table (antialiased where its reference
    resizes with antialias=True)."""
    root = os.path.join(os.path.dirname(__file__), "..", "data", "encoder")
    st = fovea.Model(os.path.join(root, "open_clip", "model.safetensors"))
    bin_ = fovea.Model(os.path.join(root, "open_clip", "open_clip_pytorch_model.bin"))
    assert st.config["naming"] == bin_.config["naming"] == "open_clip"
    assert st.config["activation"] == "quick_gelu"
    toks = fovea.tokenize(photo(6, 48, 40), budget=12, patch=st.config["patch_size"], mean=st.config["mean"],
                          std=st.config["std"])
    assert np.array_equal(np.asarray(st.encode(toks, threads=1)), np.asarray(bin_.encode(toks, threads=1)))
    assert st.config["position_sampling"] == "bicubic_antialias"
    assert fovea.Model(os.path.join(root, "clip", "model.safetensors")).config["position_sampling"] == "bicubic"
    idefics3 = fovea.Model(os.path.join(root, "idefics3", "model.safetensors")).config
    assert idefics3["position_sampling"] == "bucketized"
    assert idefics3["ignored_projector"].startswith("Idefics3's connector")
    assert "not applied" in idefics3["embeddings_output"]
    assert fovea.Model(os.path.join(root, "clip", "model.safetensors")).config["ignored_projector"] == ""
    assert fovea.Model(os.path.join(root, "siglip2", "model.safetensors")).config["position_sampling"] == \
        "bilinear_antialias"
    assert fovea.Model(os.path.join(root, "hf_dinov2_swiglu", "model.safetensors")).config["activation"] == "swiglu"


def test_pooled_output_and_heads_say_what_they_are(tmp_path):
    """Model.pooled_output names what Encoding.pooled is (and saved files carry it): the class
    token itself for torchvision, HF CLIP's post_layernorm(class token) otherwise; Model.heads
    names the classifier and the projection."""
    root = os.path.join(os.path.dirname(__file__), "..", "data", "encoder")
    tv = fovea.Model(os.path.join(root, "torchvision", "model.safetensors"))
    assert tv.pooled_output == "class_token (identical: the final LayerNorm applies to every token)"
    assert tv.heads == ["classifier, 10 classes (logits from the normed class token)"]
    t = fovea.tokenize(photo(7, 48, 40), budget=12, model=tv)
    e = tv.encode_full(t, threads=1)
    assert np.array_equal(e.pooled, e.class_token)
    e.save(tmp_path / "tv.safetensors")
    assert fovea.load(tmp_path / "tv.safetensors").metadata["pooled_output"] == tv.pooled_output
    clip = fovea.Model(os.path.join(root, "clip_full", "model.safetensors"))
    assert clip.pooled_output == "post_layernorm(class token)"
    assert clip.heads == ["projection, 24 wide (image_embeds from pooled: post_layernorm(class token))"]
    e = clip.encode_full(fovea.tokenize(photo(7, 48, 40), budget=12, model=clip), threads=1)
    assert not np.array_equal(e.pooled, e.class_token)
    llava = fovea.Model(os.path.join(root, "hf_llava", "model.safetensors"))
    assert llava.pooled_output is None and llava.heads == []


def test_pytorch_checkpoints_load_like_their_safetensors():
    """fovea.Model reads torch.save files (here written by scripts/make_torch_checkpoints.py
    from the torchvision fixture's weights) without torch: the same embeddings, bit for bit."""
    root = os.path.join(os.path.dirname(__file__), "..", "data")
    st = fovea.Model(os.path.join(root, "encoder", "torchvision", "model.safetensors"))
    arr = photo(5, 64, 64)
    toks = fovea.tokenize(arr, budget=16, patch=st.config["patch_size"], mean=st.config["mean"], std=st.config["std"])
    want = st.encode(toks, threads=1)
    for name in ("vit.pth", "checkpoint.pth", "module.pt", "vit_legacy.pth"):
        m = fovea.Model(os.path.join(root, "torch", "torchvision", name))
        assert m.config["naming"] == "torchvision"
        got = m.encode(toks, threads=1)
        assert np.array_equal(np.asarray(got), np.asarray(want)), name
    with pytest.raises(RuntimeError, match="TorchScript"):
        fovea.Model(os.path.join(root, "torch", "script.pt"))


def test_hostile_arguments_are_python_errors(tmp_path):
    """Findings of tests/sweeps/python_api_sweep.py (2026-11-28): each was a crash, a silently wrong
    file or a pybind11 message naming C++ types before."""
    model = fovea.Model(os.path.join(os.environ["FOVEA_SOURCE_DIR"], "tests", "data", "encoder", "timm_vit", "model.safetensors"))
    p = model.config["patch_size"] if "patch_size" in model.config else 8
    patches = np.zeros((1, 3, p, p), np.float32)
    positions = np.zeros((1, 4), np.float32)
    # An Encoding made from raw arrays has no Tokens: save said so only after a NULL dereference.
    enc = model.encode_full(patches, positions=positions, image_size=(p, p))
    with pytest.raises(ValueError, match="save needs the Tokens"):
        enc.save(tmp_path / "e.safetensors")
    # The other byte order was read as native (">f4" 1.0 became 4.6e-41).
    with pytest.raises(ValueError, match="byte order"):
        fovea.save(tmp_path / "b.safetensors", {"a": np.arange(3, dtype=">f4")})
    with pytest.raises(ValueError, match="byte order"):
        model.encode(patches.astype(">f4"), positions=positions, image_size=(p, p))
    # A bytes path is a path (it was written as a file named "b'...'"); a NUL is refused, not cut.
    fovea.save(os.fsencode(str(tmp_path / "bytes.safetensors")), {"a": np.zeros(2, np.float32)})
    assert (tmp_path / "bytes.safetensors").exists()
    with pytest.raises(ValueError, match="null byte"):
        fovea.save(str(tmp_path / "nul.safetensors") + "\0x", {"a": np.zeros(2, np.float32)})
    assert not (tmp_path / "nul.safetensors").exists()
    # TypeErrors that say what was expected, not which C++ type pybind11 could not make.
    image = np.zeros((32, 32, 3), np.uint8)
    with pytest.raises(TypeError, match="model must be a fovea.Model or None, got str"):
        fovea.tokenize(image, model="x")
    with pytest.raises(TypeError, match="image_size must be"):
        model.encode(patches, positions=positions, image_size=(2**31, 1))
    with pytest.raises(TypeError, match="metadata must be a mapping"):
        fovea.save(tmp_path / "m.safetensors", {"a": np.zeros(2)}, "abc")
    fovea.save(tmp_path / "m.safetensors", [("a", np.zeros(2))], [("k", "v")])  # pairs, as dict() takes
    assert fovea.load(tmp_path / "m.safetensors").metadata == {"k": "v"}
    # An empty [1, 0] query embedding meant "no query" without a word.
    with pytest.raises(ValueError, match="D >= 1"):
        fovea.tokenize(image, model=model, query_embedding=np.ones((1, 0)))
    # A denormal std passed "> 0 and finite", and the patches were inf.
    with pytest.raises(ValueError, match="representable"):
        fovea.tokenize(image, std=[1e-45] * 3)
    # A FIFO with no writer blocked open(2) forever; now refused at once.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for call in (lambda: fovea.tokenize(str(fifo)), lambda: fovea.load(fifo), lambda: fovea.Model(str(fifo))):
        with pytest.raises(OSError, match="not a regular file"):
            call()


def test_save_is_linear_and_refuses_headers_readers_refuse(tmp_path):
    many = {str(i): "v" for i in range(50000)}  # 50k entries: ~2 s before (quadratic), now ~0.2 s
    fovea.save(tmp_path / "many.safetensors", {"a": np.zeros(1, np.float32)}, many)
    assert fovea.load(tmp_path / "many.safetensors").metadata == many
    with pytest.raises(Exception, match="over the 104857600-byte limit readers accept"):
        fovea.save(tmp_path / "big.safetensors", {"a": np.zeros(2)}, {"k": "x" * (101 << 20)})
    assert not (tmp_path / "big.safetensors").exists()
