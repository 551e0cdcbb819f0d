"""fovea's token file, read back by numpy with the safetensors header parsed by hand.

Runs the CLI on the built-in sample, then checks every tensor's dtype and shape, the
metadata, and invariants a reader relies on: tokens within budget, positions consistent
with levels, every finest tile covered exactly once, level-0 patches equal to the image.
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


def run(cli, *args):
    r = subprocess.run([cli, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"fovea failed ({r.returncode}): {r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    image = os.path.join(a.source, "data", "astronaut.jpg")

    # Foveated, float32.
    out = os.path.join(a.work, "fov.safetensors")
    summary = json.loads(run(a.cli, "tokenize", image, "--budget", "200", "--fixation", "250,120",
                             "-o", out, "--json"))
    t, meta = parse(out)
    n = summary["tokens"]
    assert set(t) == {"patches", "positions", "levels", "rate_map", "relevance"}, t.keys()
    assert t["patches"].dtype == np.float32 and t["patches"].shape == (n, 3, 16, 16)
    assert t["positions"].dtype == np.float32 and t["positions"].shape == (n, 4)
    assert t["levels"].dtype == np.int32 and t["levels"].shape == (n,)
    assert t["rate_map"].dtype == np.uint8 and t["rate_map"].shape == (32, 32)
    assert t["relevance"].dtype == np.float32 and t["relevance"].shape == (32, 32)
    assert meta["image_width"] == "512" and meta["image_height"] == "512"
    assert meta["budget"] == "200" and meta["patch_size"] == "16" and meta["mode"] == "foveated"
    assert meta["query"] == "fixation(250,120)" and meta["fovea_version"]
    assert n <= 200
    lv = t["levels"]
    assert np.all(np.diff(lv) >= 0), "tokens sorted by level"
    pos = t["positions"]
    assert np.array_equal(pos[:, 3], lv.astype(np.float32))
    assert np.array_equal(pos[:, 2], (16 * 2.0 ** lv).astype(np.float32))
    # Every finest tile covered by exactly one token, and the rate map agrees.
    hits = np.zeros((32, 32), np.int32)
    for (cx, cy, side, level) in pos:
        x0, y0, s = int((cx - side / 2) // 16), int((cy - side / 2) // 16), int(side // 16)
        hits[y0:y0 + s, x0:x0 + s] += 1
        assert np.all(t["rate_map"][y0:y0 + s, x0:x0 + s] == level)
    assert np.all(hits == 1), "tiles not covered exactly once"
    # The fixation's tile is at full resolution.
    assert t["rate_map"][120 // 16, 250 // 16] == 0

    # Full resolution, uint8: patches are the image's pixels, in [N, 3, P, P] raster order.
    out8 = os.path.join(a.work, "full.safetensors")
    run(a.cli, "tokenize", image, "--budget", "1024", "--dtype", "u8", "-o", out8)
    u, _ = parse(out8)
    assert u["patches"].shape == (1024, 3, 16, 16) and np.all(u["levels"] == 0)
    img = np.zeros((3, 512, 512), np.uint8)
    for p, (cx, cy, side, _) in zip(u["patches"], u["positions"]):
        x0, y0 = int(cx - 8), int(cy - 8)
        img[:, y0:y0 + 16, x0:x0 + 16] = p
    # The same pixels in float32, CLIP-normalised: (x/255 - mean) / std.
    f32 = t["patches"][lv == 0]
    mean = np.array([0.48145466, 0.4578275, 0.40821073], np.float32)[:, None, None]
    std = np.array([0.26862954, 0.26130258, 0.27577711], np.float32)[:, None, None]
    for p, (cx, cy, _, _) in zip(f32, pos[lv == 0]):
        x0, y0 = int(cx - 8), int(cy - 8)
        want = (img[:, y0:y0 + 16, x0:x0 + 16].astype(np.float32) / 255 - mean) / std
        assert np.allclose(p, want, atol=1e-5), "float patch is not the normalised image"

    # torch reads the same buffers, when it is installed (not a test dependency).
    try:
        import torch
        assert torch.from_numpy(t["patches"].copy()).shape == (n, 3, 16, 16)
    except ImportError:
        pass
    print(f"ok: {n} foveated tokens and 1024 full-resolution tokens read back with numpy")


if __name__ == "__main__":
    main()
