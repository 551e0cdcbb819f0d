#!/usr/bin/python3
"""Qwen2.5-VL-7B's vision tower (1280 wide, 32 blocks, 16 heads, MLP 3420, merger to 3584; random
weights) on a 1024x768 photo: fovea's encode_native in bf16 and fp32 against a PyTorch fp32
reference of the same forward (scripts/make_qwen_fixtures.py's tower(): the published modeling
code's arithmetic, per-window eager attention as transformers runs it without flash-attention),
interleaved in one run, with the cosine of fovea's merger output to the reference's. Then the
windows foveation of a 2592x1944 photo with a fixation at a budget of 1,024 merged tokens: its
tokens and time beside the native encode's token count.

    PYTHONPATH=build/python /usr/bin/python3 bench/native_speed.py [--rounds 2] [--layers 32] [--no-foveated] [--fp32]
        [--out FILE.txt]

The checkpoint (BF16, ~1.3 GB) is written to a temporary directory and removed afterwards.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import make_qwen_fixtures as ref  # noqa: E402
from _native import cosine, photo, random_weights  # noqa: E402

import fovea  # noqa: E402
from fovea import _fovea  # noqa: E402

CFG = {"hidden": 1280, "heads": 16, "layers": 32, "mlp": 3420, "out": 3584, "patch": 14, "tps": 2, "merge": 2,
       "gated": True, "window_px": 112, "fullatt": [7, 15, 23, 31]}


def write_checkpoint(d, gen):
    sd = {name: t.to(torch.bfloat16) for name, t in random_weights(ref.tower_shapes(CFG), gen).items()}
    header, blobs, off = {}, [], 0
    for name, t in sd.items():
        b = t.contiguous().view(torch.int16).numpy().tobytes()
        header["visual." + name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    cfg = {"model_type": "qwen2_5_vl", "vision_config": {
        "depth": CFG["layers"], "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 3584,
        "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
        "fullatt_block_indexes": CFG["fullatt"], "hidden_act": "silu", "in_channels": 3, "tokens_per_second": 2}}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    pre = {"image_mean": ref.CLIP_MEAN, "image_std": ref.CLIP_STD, "min_pixels": 3136, "max_pixels": 12845056,
           "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2}
    json.dump(pre, open(os.path.join(d, "preprocessor_config.json"), "w"))
    return {k: v.to(torch.float32) for k, v in sd.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--fp32", action="store_true", help="time fovea's fp32 encode too (and its error at this size)")
    ap.add_argument("--layers", type=int, default=32, help="blocks (full attention in every 8th, as the 7B's)")
    ap.add_argument("--no-foveated", action="store_true", help="skip the 2592x1944 foveated part")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "native", "qwen2_5_vl_7b.txt"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    CFG["layers"] = a.layers
    CFG["fullatt"] = [i for i in range(7, a.layers, 8)]
    lines = []

    def say(s):
        print(s, flush=True)
        lines.append(s)

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    say(f"date: {datetime.datetime.utcnow().isoformat(timespec='seconds')}Z  commit: {commit}  machine: {cpu}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}  bf16 kernels: {_fovea.bf16_supported() if hasattr(_fovea, 'bf16_supported') else '?'}")
    say("command: PYTHONPATH=build/python /usr/bin/python3 bench/native_speed.py " + " ".join(sys.argv[1:]))
    say(f"torch {torch.__version__}, {a.threads} threads; fovea {a.threads} threads; {a.layers} blocks, full "
        f"attention in {CFG['fullatt']}")
    d = tempfile.mkdtemp(prefix="fovea-qwen25-7b-")
    try:
        sd = write_checkpoint(d, torch.Generator().manual_seed(7))
        m = fovea.Model(d)
        img = photo(1024, 768)
        h, w = ref.smart_resize(768, 1024, 28, 3136, 12845056)
        flat, grid = ref.patchify([np.asarray(Image.fromarray(img).resize((w, h), Image.BICUBIC))], ref.CLIP_MEAN,
                                  ref.CLIP_STD, 14, 2, 2)
        flat = flat.to(torch.float32)
        say(f"photo 1024x768 -> {w}x{h}: grid {grid}, {grid[1] * grid[2]} patches, {grid[1] * grid[2] // 4} merged tokens")
        times = {"fovea bf16": [], "fovea fp32": [], "torch fp32": []}
        outs = {}
        for r in range(a.rounds):
            for prec in ("bf16", "fp32") if a.fp32 else ("bf16",):
                t0 = time.perf_counter()
                res = _fovea.encode_native(m, [img], precision=prec, threads=a.threads)
                times[f"fovea {prec}"].append(time.perf_counter() - t0)
                outs[prec] = res["projected"]
                say(f"round {r}: fovea {prec} (ran {res['precision']}) {times[f'fovea {prec}'][-1]:.2f} s "
                    f"(encode {res['encode_ms'] / 1000:.2f} s)")
            with torch.no_grad():
                t0 = time.perf_counter()
                _, y = ref.tower(sd, CFG, flat, [grid])
                times["torch fp32"].append(time.perf_counter() - t0)
            say(f"round {r}: torch fp32 {times['torch fp32'][-1]:.2f} s")
        # fovea bf16 once more after the last torch run: torch is timed between two fovea runs.
        t0 = time.perf_counter()
        _fovea.encode_native(m, [img], precision="bf16", threads=a.threads)
        times["fovea bf16"].append(time.perf_counter() - t0)
        say(f"fovea bf16 again {times['fovea bf16'][-1]:.2f} s")
        best = {k: min(v) for k, v in times.items() if v}
        say("best: " + ", ".join(f"{k} {v:.2f} s" for k, v in best.items()))
        say(f"speed-up of fovea bf16 over torch fp32: {best['torch fp32'] / best['fovea bf16']:.2f}x" +
            (f"; fovea fp32 {best['torch fp32'] / best['fovea fp32']:.2f}x" if a.fp32 else ""))
        yn = y.numpy()
        say(f"cosine to torch fp32 (projected): fovea bf16 {cosine(outs['bf16'], yn):.6f}" +
            (f", fovea fp32 {cosine(outs['fp32'], yn):.6f} (max abs err / max |ref| "
             f"{np.abs(outs['fp32'] - yn).max() / np.abs(yn).max():.2e})" if a.fp32 else ""))
        if a.no_foveated:
            return
        # Foveated: 2592x1944 with a fixation, 1,024 merged tokens.
        big = photo(2592, 1944)
        nh, nw = ref.smart_resize(1944, 2592, 28, 3136, 12845056)
        native_tokens = (nh // 28) * (nw // 28)
        t0 = time.perf_counter()
        fv = _fovea.encode_native_windows(m, big, fixations=[(1800, 700)], budget_tokens=1024, precision="bf16",
                                          threads=a.threads)
        tf = time.perf_counter() - t0
        n = fv["projected"].shape[0]
        say(f"2592x1944 native encode: {nw}x{nh}, {native_tokens} merged tokens ({native_tokens * 4} patches)")
        say(f"foveated (budget 1024, fixation (1800, 700)): {n} merged tokens = {n / native_tokens:.3f} of native "
            f"(1/{native_tokens / n:.1f}); windows {fv['window_boxes']} grids {fv['image_grid_thw'].tolist()}; "
            f"bf16 {tf:.2f} s")
        # The window's rows against the crop encoded alone.
        x0, y0, x1, y1 = fv["window_boxes"][1]
        alone = _fovea.encode_native(m, [np.ascontiguousarray(big[y0:y1, x0:x1])], precision="bf16", threads=a.threads)
        r0, r1 = fv["image_rows"][1], fv["image_rows"][2]
        win = fv["projected"][r0:r1]
        rc = np.mean([cosine(win[i], alone["projected"][i]) for i in range(len(win))])
        say(f"window rows vs the crop encoded alone: mean row cosine {rc:.6f}")
    finally:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
