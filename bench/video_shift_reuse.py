#!/usr/bin/python3
"""What a camera shift lets an absolute-position ViT reuse exactly, measured on a clip.

    /usr/bin/python3 bench/video_shift_reuse.py /tmp/fovea-clips/pan.mp4 [--frames 48] [--patch 16]
                                                [--max-shift 8] [--window 16] [--json OUT]

A ViT with absolute position embeddings adds each token's position embedding to its patch
embedding before the first layer, so from the first layer on a token's value depends on where it
sits in the frame: after a shift, only what comes before the position embedding can be reused
(the patch's pixels and its patch embedding, a linear map of them), and only for a patch whose
pixels are the same as some patch of an earlier frame. This script decodes the clip (ffmpeg, RGB),
finds each frame's shift against the previous frame (the integer (dx, dy) within --max-shift that
minimises the mean absolute difference of the overlap), and counts, per frame, the patches of the
frame's full-resolution grid (--patch px cells) whose pixels equal, bit for bit or within 2 levels
per channel, the pixels under the same scene point in any of the last --window frames (the
shifted cell must lie on that frame's patch grid: the accumulated shift a multiple of the patch).
"""
import argparse
import datetime
import json
import subprocess
import sys

import numpy as np


def decode(path, frames):
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                            "stream=width,height", "-of", "csv=p=0", path], capture_output=True, text=True, check=True)
    w, h = (int(v) for v in probe.stdout.strip().split(",")[:2])
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-frames:v", str(frames), "-f", "rawvideo",
                          "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    n = len(raw) // (w * h * 3)
    return np.frombuffer(raw[: n * w * h * 3], np.uint8).reshape(n, h, w, 3)


def shift(a, b, m):
    """The integer (dx, dy), |dx|, |dy| <= m, with b[y, x] ~ a[y + dy, x + dx] (a's content moved by -dx)."""
    ga, gb = a.mean(axis=2), b.mean(axis=2)
    best = (np.inf, 0, 0)
    h, w = ga.shape
    for dy in range(-m, m + 1, 1):
        for dx in range(-m, m + 1, 1):
            ya, yb = max(dy, 0), max(-dy, 0)
            xa, xb = max(dx, 0), max(-dx, 0)
            hh, ww = h - abs(dy), w - abs(dx)
            d = np.abs(ga[ya:ya + hh, xa:xa + ww] - gb[yb:yb + hh, xb:xb + ww]).mean()
            if d < best[0]:
                best = (d, dx, dy)
    return best[1], best[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("clip")
    ap.add_argument("--frames", type=int, default=48)
    ap.add_argument("--patch", type=int, default=16)
    ap.add_argument("--max-shift", type=int, default=8)
    ap.add_argument("--window", type=int, default=16, help="earlier frames searched for the same patch")
    ap.add_argument("--json")
    a = ap.parse_args()
    v = decode(a.clip, a.frames).astype(np.int16)
    n, h, w, _ = v.shape
    p = a.patch
    gh, gw = h // p, w // p
    acc = [(0, 0)]  # frame i's content at (x, y) is frame 0's at (x + ax, y + ay)
    for i in range(1, n):
        dx, dy = shift(v[i - 1], v[i], a.max_shift)
        acc.append((acc[-1][0] + dx, acc[-1][1] + dy))
    rows = []
    for i in range(1, n):
        exact = near = aligned_frames = 0
        for j in range(max(0, i - a.window), i):
            ox, oy = acc[i][0] - acc[j][0], acc[i][1] - acc[j][1]  # frame i (x, y) ~ frame j (x + ox, y + oy)
            if ox % p or oy % p:
                continue
            aligned_frames += 1
        cells_exact = np.zeros((gh, gw), bool)
        cells_near = np.zeros((gh, gw), bool)
        for j in range(max(0, i - a.window), i):
            ox, oy = acc[i][0] - acc[j][0], acc[i][1] - acc[j][1]
            if ox % p or oy % p:
                continue
            for gy in range(gh):
                sy = gy * p + oy
                if sy < 0 or sy + p > h:
                    continue
                for gx in range(gw):
                    sx = gx * p + ox
                    if sx < 0 or sx + p > w:
                        continue
                    d = np.abs(v[i, gy * p:gy * p + p, gx * p:gx * p + p] - v[j, sy:sy + p, sx:sx + p]).max()
                    cells_exact[gy, gx] |= d == 0
                    cells_near[gy, gx] |= d <= 2
        exact, near = int(cells_exact.sum()), int(cells_near.sum())
        rows.append({"frame": i, "shift_from_previous": [acc[i][0] - acc[i - 1][0], acc[i][1] - acc[i - 1][1]],
                     "earlier_frames_on_the_grid": aligned_frames, "patches": gh * gw,
                     "exact": exact, "within_2_levels": near})
    tot = gh * gw * len(rows)
    summary = {"clip": a.clip, "frames": n, "size": [w, h], "patch": p, "window": a.window,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "command": " ".join(sys.argv),
               "shift_per_frame": sorted({tuple(r["shift_from_previous"]) for r in rows}),
               "exact_share": sum(r["exact"] for r in rows) / tot,
               "within_2_levels_share": sum(r["within_2_levels"] for r in rows) / tot,
               "frames_with_an_aligned_earlier_frame": sum(1 for r in rows if r["earlier_frames_on_the_grid"])}
    print(f"{a.clip}: {n} frames {w}x{h}, {gh * gw} patches of {p} px per frame; shifts per frame "
          f"{summary['shift_per_frame']}; frames with an earlier frame on the same patch grid (last {a.window}): "
          f"{summary['frames_with_an_aligned_earlier_frame']}/{len(rows)}")
    print(f"patches reusable before the position embedding: bit-exact {100 * summary['exact_share']:.2f} %, "
          f"within 2 levels {100 * summary['within_2_levels_share']:.2f} %")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary, "per_frame": rows}, f, indent=1)


if __name__ == "__main__":
    main()
