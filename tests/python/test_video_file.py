"""`fovea video`'s file, read back by numpy with the safetensors header parsed by hand, and its
frames checked against an independent decode of the same clip by PyAV (Debian's python3-av).

Checks: every tensor's dtype and shape, frame_offsets, pts equal to PyAV's frame times, levels
consistent with positions, recomputed in {0, 1} and all 1 on the first frame, and each frame's
level-0 patches close to PyAV's RGB pixels (libswscale on both sides, different code paths:
within a few levels on average).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from fovea_testio.safetensors import read  # noqa: E402


def parse(path):
    # A reader fovea did not write (numpy alone), checking the layout strictly.
    return read(path, strict=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    clip = os.path.join(a.source, "tests", "data", "video", "small.mp4")
    out = os.path.join(a.work, "video.safetensors")
    r = subprocess.run([a.cli, "video", clip, "--budget", "16", "--fixation", "40,40", "--dtype", "u8", "-o", out,
                        "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"fovea video failed ({r.returncode}): {r.stderr}")
    summary = json.loads(r.stdout)
    t, meta = parse(out)
    F = summary["frames"]
    off, pts, patches, pos, lev, rec = (t[k] for k in ("frame_offsets", "pts", "patches", "positions", "levels",
                                                       "recomputed"))
    assert off.shape == (F + 1,) and off[0] == 0 and np.all(np.diff(off) > 0), off
    T = int(off[-1])
    assert patches.shape == (T, 3, 16, 16) and pos.shape == (T, 4) and lev.shape == (T,) and rec.shape == (T,)
    assert set(np.unique(rec)) <= {0, 1} and np.all(rec[off[0]:off[1]] == 1)
    assert np.all(pos[:, 3] == lev) and np.all(pos[:, 2] == 16 * 2.0 ** lev)
    assert meta["reuse"] == "exact" and meta["format"] == "fovea.video.tokens"

    import av
    with av.open(clip) as c:
        frames = [(f.time, f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
    assert len(frames) == F, (len(frames), F)
    assert np.allclose(pts, [ft for ft, _ in frames], atol=1e-6), (pts, [ft for ft, _ in frames])
    worst = 0.0
    for f in range(F):
        img = frames[f][1].astype(np.float32)
        for i in range(off[f], off[f + 1]):
            if lev[i] != 0:
                continue
            x0, y0 = int(pos[i, 0] - 8), int(pos[i, 1] - 8)
            ref = img[y0:y0 + 16, x0:x0 + 16].transpose(2, 0, 1)
            got = patches[i, :, :ref.shape[1], :ref.shape[2]].astype(np.float32)
            worst = max(worst, float(np.abs(got - ref).mean()))
    # The session's reference frame keeps tiles that changed less than the threshold (8 levels
    # per 4x4 block), so a kept patch may lag the decoded frame by that much.
    assert worst < 8.0, f"level-0 patches differ from PyAV's frames by {worst:.2f} levels on average"
    print(f"ok: {F} frames, {T} tokens, worst mean |patch - PyAV frame| {worst:.2f} levels")


if __name__ == "__main__":
    main()
