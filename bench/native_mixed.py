#!/usr/bin/python3
"""The mixed foveation of a Qwen2-VL tower (for experiment) against the windows foveation, on the
tokens of a fixated crop: how close each mode's rows for the crop are to that crop encoded as a
native image of its own, and to the whole image's native encode at the same places.

    PYTHONPATH=build/python /usr/bin/python3 bench/native_mixed.py [--budgets 300,600] [--save]

The tower is a random Qwen2-VL checkpoint in the real naming (scripts/make_qwen_fixtures.py's
shapes; 320 wide, 4 heads of 80, 8 blocks, MLP 1280, merger to 512; weights ~ N(0, 1/fan_in)),
written to a temporary directory: random weights say how far the layout moves the features of
an untrained tower, not what a trained one makes of it. The photo is skimage's coffee at
1120 x 840 (40 x 30 merge units of 28 px), fixation on the cup.

Per budget (merged tokens, the same for both modes):
  * windows: the query window's rows against its crop encoded alone (equal by construction);
  * mixed: the merge units at level 0 inside that crop (the quadtree puts the fixation at full
    resolution) against the crop encoded alone at the same merged row and column, and against
    the whole image's native encode there; how much of the crop the mixed layout holds at level 0;
  * the mixed layout with every unit at level 0 (a budget of every tile): the native encode.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import make_qwen_fixtures as ref  # noqa: E402
import provenance  # noqa: E402
from _native import cosine, photo, random_weights  # noqa: E402

import fovea  # noqa: E402
from fovea import _fovea  # noqa: E402

CFG = {"hidden": 320, "heads": 4, "layers": 8, "mlp": 1280, "out": 512, "patch": 14, "tps": 2, "merge": 2,
       "gated": False, "window_px": 0, "fullatt": []}


def write_checkpoint(d, seed):
    weights = random_weights(ref.tower_shapes(CFG), torch.Generator().manual_seed(seed))
    sd = {"visual." + name: t for name, t in weights.items()}
    ref.save_safetensors(os.path.join(d, "model.safetensors"), sd)
    cfg = {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl", "hidden_size": CFG["out"],
           "vision_config": {"depth": CFG["layers"], "embed_dim": CFG["hidden"], "hidden_size": CFG["out"],
                             "mlp_ratio": CFG["mlp"] / CFG["hidden"], "num_heads": CFG["heads"], "in_chans": 3,
                             "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
                             "hidden_act": "quick_gelu"}}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    pre = {"image_mean": ref.CLIP_MEAN, "image_std": ref.CLIP_STD, "min_pixels": 3136, "max_pixels": 12845056,
           "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2}
    json.dump(pre, open(os.path.join(d, "preprocessor_config.json"), "w"))


def row_cosines(a, b):
    return [cosine(x, y) for x, y in zip(a, b)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budgets", default="300,600")
    ap.add_argument("--fixation", default="620,330")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    provenance.add_arguments(ap)
    a = ap.parse_args()
    W, H, U = 1120, 840, 28
    fx, fy = (float(v) for v in a.fixation.split(","))
    img = photo(W, H)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        write_checkpoint(d, a.seed)
        m = fovea.Model(d)
        full = _fovea.encode_native(m, [img], threads=a.threads)
        gw = W // U  # merged columns of the whole image
        # The mixed layout with every unit at level 0 is the native encode.
        every = fovea.encode(img, m, budget=(W // U) * (H // U), foveation="mixed", threads=a.threads)
        c = row_cosines(every["projected"], full["projected"])
        err = float(np.abs(every["projected"] - full["projected"]).max() / np.abs(full["projected"]).max())
        rows.append({"case": "mixed, every unit at level 0, vs native encode", "budget": int(every["projected"].shape[0]),
                     "rows_compared": len(c), "mean_row_cosine": round(float(np.mean(c)), 6),
                     "min_row_cosine": round(float(np.min(c)), 6), "max_abs_err_rel": err})
        print(f"mixed at level 0 everywhere vs native: {len(c)} rows, min row cosine {min(c):.6f}, "
              f"max abs err / max |ref| {err:.2e}", flush=True)
        for budget in (int(b) for b in a.budgets.split(",")):
            win = _fovea.encode_native_windows(m, img, fixations=[(fx, fy)], budget_tokens=budget, threads=a.threads)
            x0, y0, x1, y1 = win["window_boxes"][1]
            crop = np.ascontiguousarray(img[y0:y1, x0:x1])
            alone = _fovea.encode_native(m, [crop], threads=a.threads)
            cw = (x1 - x0) // U
            r0, r1 = win["image_rows"][1], win["image_rows"][2]
            cw_rows = row_cosines(win["projected"][r0:r1], alone["projected"])
            # The whole image's native rows at the crop's merged cells.
            full_at = [full["projected"][(y0 // U + i // cw) * gw + x0 // U + i % cw] for i in range(r1 - r0)]
            cwf = row_cosines(win["projected"][r0:r1], full_at)
            rows.append({"case": "windows: query window vs crop alone", "budget": budget,
                         "handed_on": int(win["projected"].shape[0]), "crop": f"{x0},{y0},{x1},{y1}",
                         "rows_compared": len(cw_rows), "mean_row_cosine": round(float(np.mean(cw_rows)), 6),
                         "min_row_cosine": round(float(np.min(cw_rows)), 6),
                         "mean_row_cosine_vs_full_native": round(float(np.mean(cwf)), 6)})
            mix = fovea.encode(img, m, budget=budget, fixations=[(fx, fy)], foveation="mixed", threads=a.threads)
            got, want, wantf = [], [], []
            crop_units = ((x1 - x0) // U) * ((y1 - y0) // U)
            for i, (lv, b) in enumerate(zip(mix["levels"], mix["boxes"])):
                bx0, by0 = int(b[0]), int(b[1])
                if lv == 0 and x0 <= bx0 < x1 and y0 <= by0 < y1:
                    cy, cx = (by0 - y0) // U, (bx0 - x0) // U
                    got.append(mix["projected"][i])
                    want.append(alone["projected"][cy * cw + cx])
                    wantf.append(full["projected"][(by0 // U) * gw + bx0 // U])
            mc = row_cosines(got, want)
            mf = row_cosines(got, wantf)
            levels = np.bincount(mix["levels"]).tolist()
            rows.append({"case": "mixed: level-0 units in the crop vs crop alone", "budget": budget,
                         "handed_on": int(mix["projected"].shape[0]), "crop": f"{x0},{y0},{x1},{y1}",
                         "units_per_level": str(levels), "crop_share_at_level_0": round(len(got) / crop_units, 4),
                         "rows_compared": len(mc),
                         "mean_row_cosine": round(float(np.mean(mc)), 6) if mc else None,
                         "min_row_cosine": round(float(np.min(mc)), 6) if mc else None,
                         "mean_row_cosine_vs_full_native": round(float(np.mean(mf)), 6) if mf else None})
            print(f"budget {budget}: windows {win['projected'].shape[0]} rows, window vs crop mean row cosine "
                  f"{np.mean(cw_rows):.6f} (vs full native {np.mean(cwf):.6f}); mixed {mix['projected'].shape[0]} rows, "
                  f"levels {levels}, {len(got)}/{crop_units} crop units at level 0, their mean row cosine vs crop "
                  f"{np.mean(mc) if mc else float('nan'):.6f} (min {np.min(mc) if mc else float('nan'):.6f}), "
                  f"vs full native {np.mean(mf) if mf else float('nan'):.6f}", flush=True)
    provenance.output(a, "native", {"rows": rows}, rows=rows, threads=a.threads)


if __name__ == "__main__":
    main()
