"""fovea.VideoReader and fovea.video: frames equal PyAV's decode within the colour-conversion
tolerance, zero copy, files equal to `fovea video -o`, the CLI's errors."""
import os
import threading

import numpy as np
import pytest

import fovea
from pyhelpers import SOURCE, cli

CLIP = os.path.join(SOURCE, "tests", "data", "video", "small.mp4")


def pyav_frames(path):
    av = pytest.importorskip("av")
    with av.open(path) as c:
        return [(f.time, f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]


def test_reader_frames_equal_pyav():
    ref = pyav_frames(CLIP)
    r = fovea.VideoReader(CLIP)
    assert r.info["width"] == ref[0][1].shape[1] and r.info["height"] == ref[0][1].shape[0]
    frames = list(r)
    assert len(frames) == len(ref) == r.frames_decoded
    for i, (f, (t, img)) in enumerate(zip(frames, ref)):
        assert f.index == i and abs(f.pts - t) < 1e-6
        assert f.image.shape == img.shape and f.image.dtype == np.uint8
        # libswscale on both sides through different paths (fovea: straight to RGB planes,
        # accurate rounding): the C++ test's tolerance, 2 levels, on the mean per frame.
        diff = np.abs(f.image.astype(np.int16) - img.astype(np.int16))
        assert diff.mean() < 2.0, (i, diff.mean())


def test_reader_every_and_max_frames():
    all_frames = list(fovea.VideoReader(CLIP))
    some = list(fovea.VideoReader(CLIP, every=3, max_frames=4))
    assert [f.index for f in some] == [0, 3, 6, 9][:len(some)] and len(some) == min(4, (len(all_frames) + 2) // 3)
    for f in some:
        assert np.array_equal(f.image, all_frames[f.index].image)


def test_reader_frames_are_views_and_tokenize_reads_them_in_place():
    r = fovea.VideoReader(CLIP, max_frames=2)
    f0, f1 = next(r), next(r)
    img = f0.image
    assert not img.flags.owndata and img.base is not None  # a view on the decoder's buffer
    assert img.strides[1] == 1 and img.strides[2] >= img.shape[0] * img.shape[1]  # planar RGB
    assert not np.shares_memory(f0.image, f1.image)  # a held frame is never overwritten
    t = fovea.tokenize(img, budget=32)
    c = fovea.tokenize(np.ascontiguousarray(img), budget=32)
    assert np.array_equal(t.patches, c.patches) and np.array_equal(t.positions, c.positions)


def test_reader_releases_the_gil():
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1

    th = threading.Thread(target=spin)
    th.start()
    try:
        n = sum(1 for _ in fovea.VideoReader(CLIP))
    finally:
        stop.set()
        th.join()
    assert n > 0 and ticks[0] > 100


@pytest.mark.parametrize("args, kw", [
    (["--budget", "24", "--fixation", "40,40,10", "--dtype", "u8"], dict(budget=24, fixations=[(40, 40, 10)], dtype="u8")),
    (["--budget", "24", "--model", "random:vit-s16", "--every", "2", "--max-frames", "5"],
     dict(budget=24, model="random:vit-s16", every=2, max_frames=5)),
])
def test_video_file_equals_cli(tmp_path, args, kw):
    out_cli, out_py = tmp_path / "cli.safetensors", tmp_path / "py.safetensors"
    cli("video", CLIP, *args, "--threads", 1, "-o", out_cli)
    if "model" in kw:
        kw["model"] = fovea.Model(kw["model"])
    s = fovea.video(CLIP, output=out_py, threads=1, **kw)
    assert open(out_py, "rb").read() == open(out_cli, "rb").read()  # byte for byte, metadata included
    assert s["frames"] == int(fovea.load(out_py).metadata["frames"])
    # The same run returning per-frame results: the file's rows, frame by frame.
    frames = fovea.video(CLIP, threads=1, **kw)
    f = fovea.load(out_py)
    off = f["frame_offsets"]
    rows = f["embeddings"] if "model" in kw else f["patches"]
    assert len(frames) == len(off) - 1
    for i, r in enumerate(frames):
        mine = r.embeddings if "model" in kw else r.patches
        assert np.array_equal(mine, rows[off[i]:off[i + 1]])
        assert np.array_equal(r.positions, f["positions"][off[i]:off[i + 1]])
        assert abs(r.pts - f["pts"][i]) < 1e-9
    assert frames[0].refresh and frames[0].refresh_reason == "first"


def test_video_per_frame_fixations(tmp_path):
    seen = []

    def track(index, pts):
        seen.append(index)
        return [fovea.Fixation(20 + 4 * index, 30)]

    frames = fovea.video(CLIP, budget=24, fixations=track, max_frames=3, dtype="u8")
    assert seen == [0, 1, 2] and len(frames) == 3
    with pytest.raises(TypeError, match="fixations"):
        fovea.video(CLIP, budget=24, fixations=lambda i, t: 42, max_frames=1, dtype="u8")


def test_video_bad_inputs_raise_the_clis_message(tmp_path):
    missing = tmp_path / "missing.mp4"
    r = cli("video", missing, "-o", tmp_path / "x.safetensors", check=False)
    assert r.returncode == 1
    with pytest.raises(OSError) as e:
        fovea.video(missing, output=tmp_path / "y.safetensors")
    assert r.stderr.strip() == f"fovea: error: {e.value}"
    with pytest.raises(OSError):
        fovea.VideoReader(missing)
    notvideo = tmp_path / "notvideo.mp4"
    notvideo.write_bytes(b"this is not a video file at all" * 20)
    r = cli("video", notvideo, "-o", tmp_path / "x.safetensors", check=False)
    with pytest.raises((RuntimeError, OSError)) as e:
        fovea.VideoReader(notvideo)
    assert r.returncode == 1 and r.stderr.strip() == f"fovea: error: {e.value}"
    assert not os.path.exists(tmp_path / "x.safetensors") and not os.path.exists(tmp_path / "y.safetensors")
    with pytest.raises(ValueError, match="reuse"):
        fovea.video(CLIP, reuse="sometimes")
    with pytest.raises(ValueError, match="every"):
        fovea.VideoReader(CLIP, every=0)


def test_dropping_a_reader_mid_stream_with_pyav_loaded():
    """PyAV's libav log callback takes the GIL, from the decoder's frame threads too: freeing
    a decoder (which joins them) while holding the GIL deadlocked. Readers and video() runs
    are freed with the GIL released."""
    pytest.importorskip("av")
    for _ in range(5):
        r = fovea.VideoReader(CLIP, quiet=False)
        next(r)
        del r  # frames still in flight in the decoder's threads
    with pytest.raises(TypeError):
        fovea.video(CLIP, fixations=lambda i, t: 42, max_frames=1, dtype="u8")  # freed on the error path


def test_video_overlay_equals_the_clis_sheet(tmp_path):
    """overlay= writes the CLI's --overlay contact sheet, byte for byte."""
    png_py, png_cli = str(tmp_path / "py.png"), str(tmp_path / "cli.png")
    s = fovea.video(CLIP, budget=24, fixations=[(40, 40)], dtype="u8", output=str(tmp_path / "py.safetensors"),
                    overlay=png_py)
    assert s["overlay"]["path"] == png_py and s["overlay"]["frames"][0] == 0
    r = cli("video", CLIP, "--budget", "24", "--fixation", "40,40", "--dtype", "u8",
            "-o", str(tmp_path / "cli.safetensors"), "--overlay", png_cli)
    assert r.returncode == 0, r.stderr
    with open(png_py, "rb") as a, open(png_cli, "rb") as b:
        data = a.read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data == b.read()
    # Without output= the frames come back and the sheet is still written.
    frames = fovea.video(CLIP, budget=24, max_frames=2, dtype="u8", overlay=str(tmp_path / "two.png"))
    assert len(frames) == 2 and os.path.getsize(tmp_path / "two.png") > 0


def test_reader_turns_rotated_videos_and_video_repairs_timestamps(tmp_path):
    """The inputs of tests/test_video_inputs.cpp through Python: a display matrix turns the
    frames (90 degrees counter-clockwise here, as ffmpeg shows it; autorotate=False: as
    stored), and fovea.video's file has increasing pts over a restarted clock."""
    data = os.path.join(SOURCE, "tests", "data", "video")
    plain = [f.image.copy() for f in fovea.VideoReader(CLIP)]
    r = fovea.VideoReader(os.path.join(data, "small_rot90.mp4"))
    assert r.info["orientation"] == 8 and r.info["rotation_applied"]
    assert (r.info["width"], r.info["height"]) == (plain[0].shape[0], plain[0].shape[1])
    turned = [f.image.copy() for f in r]
    assert len(turned) == len(plain)
    for a, b in zip(plain, turned):
        assert np.array_equal(np.rot90(a, 1), b)
    stored = [f.image.copy() for f in fovea.VideoReader(os.path.join(data, "small_rot90.mp4"), autorotate=False)]
    assert all(np.array_equal(a, b) for a, b in zip(plain, stored))

    out = tmp_path / "restart.safetensors"
    s = fovea.video(os.path.join(data, "restart.ts"), budget=6, output=out)
    assert s["frames"] == 8 and s["timestamps_repaired"] == 1
    import sys
    sys.path.insert(0, os.path.join(SOURCE, "scripts"))
    from fovea_testio.safetensors import read
    t, _ = read(str(out))
    assert (np.diff(t["pts"]) > 0).all()
    assert any("jump back" in w for w in s["warnings"])



# Run in a fresh interpreter: which FFmpeg libraries are mapped after `import fovea`, after a PNG,
# after a video (or the video's error), as JSON.
LAZY_PROBE = r"""
import json, os, sys
import fovea
def mapped():
    with open("/proc/self/maps") as f:
        return sorted({os.path.basename(l.split()[-1]) for l in f if "libavformat" in l})
out = {"import": mapped()}
with open("/proc/self/maps") as f:
    out["shared_stages"] = sorted({os.path.basename(l.split()[-1]) for l in f if "libfovea_" in l})
fovea.tokenize(sys.argv[1], budget=64)  # a PNG: no FFmpeg
out["png"] = mapped()
try:
    out["frames"] = len(list(fovea.VideoReader(sys.argv[2])))
    out["video"] = mapped()
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def test_ffmpeg_is_loaded_on_first_use(tmp_path):
    """The module loads FFmpeg at the first call that needs it (src/image/libav_lazy.cpp): `import
    fovea` and a PNG map no libavformat, a video does. With a file that is not a library first on
    the search path under FFmpeg's name, the PNG still works and the video raises, naming it."""
    import json
    import re
    import subprocess
    import sys

    png = os.path.join(SOURCE, "tests", "data", "images", "source.png")

    def probe(env):
        r = subprocess.run([sys.executable, "-c", LAZY_PROBE, png, CLIP], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    out = probe(dict(os.environ))
    assert out.get("frames", 0) > 0, out
    if out["shared_stages"]:  # BUILD_SHARED_LIBS: the stages' own libraries need FFmpeg at load
        pytest.skip(f"a shared-library build: {out['shared_stages'][:3]}")
    assert out["import"] == [] and out["png"] == [] and out["video"], out
    soname = re.match(r"libavformat\.so\.\d+", out["video"][0]).group(0)

    fake = tmp_path / "libs"
    fake.mkdir()
    (fake / soname).write_text("not a shared library\n")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(fake) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    out = probe(env)
    assert out["png"] == [] and "frames" not in out, out
    assert "FFmpeg could not be loaded" in out["error"] and soname in out["error"], out


def test_session_frames_carry_the_encoders_drift_estimate():
    reader = fovea.VideoReader(CLIP)
    session = fovea.VideoSession(fovea.Model("random:vit-s16"), budget=30)
    got = []
    for frame in reader:
        r = session.process(frame.image, fixations=[(120, 30)])
        got.append((r.refresh, r.approximate, r.drift_estimate, r.drift_estimate_max))
    assert got[0][0] and got[0][2] == 0  # the first frame is a full encode: nothing left unapplied
    later = [g for g in got[1:] if not g[0]]
    assert later and all(g[1] for g in later)
    assert all(0 <= g[2] <= g[3] for g in later)
    assert any(g[2] > 0 for g in later)  # the cat moves: reuse leaves something, and says so


def test_session_encodes_exactly_after_heavy_change_unless_told_not_to(tmp_path):
    # token_threshold 0: every token whose state moved is recomputed, so the first reused frame
    # does most of a full encode's work (exact_above_work, 0.45 by default): the frames after it
    # are encoded exactly (not approximate); exact_above_work=0 keeps reusing.
    model = fovea.Model("random:vit-s16")
    images = [f.image.copy() for f in fovea.VideoReader(CLIP, max_frames=5)]

    def run(**kw):
        s = fovea.VideoSession(model, budget=30, token_threshold=0, **kw)
        return [s.process(im, fixations=[(120, 30)]) for im in images]

    heavy = run()
    assert heavy[1].approximate and not heavy[1].refresh
    assert [r.approximate for r in heavy[2:]] == [False] * 3 and not any(r.refresh for r in heavy[2:])
    kept = run(exact_above_work=0)
    assert all(r.approximate for r in kept[1:])
    with pytest.raises(ValueError, match="exact_above_work"):
        fovea.VideoSession(model, budget=30, exact_above_work=-1)
    r = cli("video", CLIP, "--exact-above-work", "-1", "-o", tmp_path / "x.safetensors", check=False)
    assert r.returncode == 2 and "--exact-above-work must be a number >= 0" in r.stderr


def test_video_windows_file_equals_cli_and_holds_the_windows(tmp_path):
    """--foveation windows: the file is fovea encode's layout per frame (the kept rows, their
    window, the frames' windows and class tokens), the same from Python and the CLI."""
    out_cli, out_py = tmp_path / "cli.safetensors", tmp_path / "py.safetensors"
    args = ["--model", "random:vit-s16", "--foveation", "windows", "--window-grid", "4", "--budget", "32",
            "--fixation", "40,40", "--max-frames", "6"]
    cli("video", CLIP, *args, "--threads", 1, "-o", out_cli)
    m = fovea.Model("random:vit-s16")
    kw = dict(model=m, foveation="windows", window_grid=4, budget=32, fixations=[(40, 40)], max_frames=6, threads=1)
    fovea.video(CLIP, output=out_py, **kw)
    assert open(out_py, "rb").read() == open(out_cli, "rb").read()
    f = fovea.load(out_py)
    assert f.metadata["foveation"] == "windows" and f.metadata["window_grid"] == "4" and f.metadata["reuse"] == "exact"
    off, woff = f["frame_offsets"], f["window_offsets"]
    assert len(woff) == len(off) and f["window"].shape == (off[-1],)
    assert f["window_boxes"].shape == (woff[-1], 4) and f["window_class_tokens"].shape[0] == woff[-1]
    frames = fovea.video(CLIP, **kw)
    assert len(frames) == len(off) - 1
    for i, r in enumerate(frames):
        assert r.embeddings.shape[0] == len(r.rows) == off[i + 1] - off[i] <= 32
        assert np.array_equal(r.embeddings, f["embeddings"][off[i]:off[i + 1]])
        assert np.array_equal(r.window[r.rows], f["window"][off[i]:off[i + 1]])
        assert np.array_equal(r.positions[r.rows], f["positions"][off[i]:off[i + 1]])
        assert not r.covered[r.rows].any()
        assert len(r.window_boxes) == len(r.window_reused) == woff[i + 1] - woff[i]
        assert np.array_equal(r.window_class_tokens, f["window_class_tokens"][woff[i]:woff[i + 1]])
    # A window handed on from the frame before is that frame's, bit for bit.
    for a, b in zip(frames, frames[1:]):
        for w in np.flatnonzero(b.window_reused):
            assert a.window_boxes[w] == b.window_boxes[w]
            assert np.array_equal(a.embeddings[a.window[a.rows] == w], b.embeddings[b.window[b.rows] == w])


def test_video_session_windows_reuses_a_still_frame_bit_for_bit():
    m = fovea.Model("random:vit-s16")
    s = fovea.VideoSession(m, budget=32, foveation="windows", window_grid=4)
    img = (np.arange(96 * 160 * 3, dtype=np.uint32).reshape(96, 160, 3) * 7 % 251).astype(np.uint8)
    first = s.process(img, fixations=[(40, 40)])
    assert s.reuse == "exact" and first.window_reused.sum() == 0 and len(first.window_boxes) >= 2
    for _ in range(2):
        r = s.process(img, fixations=[(40, 40)])
        assert r.window_reused.all() and r.recomputed.sum() == 0
        assert np.array_equal(r.embeddings, first.embeddings)
        assert np.array_equal(r.window_class_tokens, first.window_class_tokens)
    # The fixation leaves its window: the window follows it and is encoded again.
    r = s.process(img, fixations=[(130, 60)])
    moved = [w for w, box in enumerate(r.window_boxes) if box not in first.window_boxes]
    assert moved and all(not r.window_reused[w] for w in moved)
    assert any(b[0] <= 130 < b[2] and b[1] <= 60 < b[3] for b in (r.window_boxes[w] for w in moved))


@pytest.mark.parametrize("args, message", [
    (["--foveation", "windows", "--group", "4"], "--group"),
    (["--foveation", "windows", "--exact-above-work", "0.3"], "--exact-above-work"),
    (["--foveation", "windows", "--max-level", "2"], "--max-level"),
    (["--window-grid", "4"], "--window-grid"),
    (["--uniform", "--foveation", "windows"], "--uniform"),
])
def test_video_windows_bad_options_give_one_error_line(tmp_path, args, message):
    out = tmp_path / "x.safetensors"
    r = cli("video", CLIP, "--model", "random:vit-s16", *args, "-o", out, check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and lines[0].startswith("fovea: error:") and message in lines[0], r.stderr
    assert not out.exists()
    with pytest.raises(ValueError, match="window_grid"):
        fovea.video(CLIP, window_grid=4, max_frames=1)
