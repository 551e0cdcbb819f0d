#!/usr/bin/python3
"""The foveated token count of a 2592x1944 photo on the native-resolution towers: the merged tokens
the native encode gives (smart_resize at the family's default max_pixels, and with no cap), against
the windows foveation with a fixation at several budgets (a base view plus a full-resolution window,
each a native image, in one call), with the window's rows compared to its crop encoded alone.

    PYTHONPATH=build/python /usr/bin/python3 bench/native_foveated.py [--budgets 1024,640,512] [--save]

Token counts do not depend on the weights or the width, so the towers are the test fixtures
(tests/data/encoder/qwen2_5_vl and qwen3_vl: the real naming, random weights, reduced width).
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import make_qwen_fixtures as ref  # noqa: E402
import provenance  # noqa: E402
from _native import cosine, photo  # noqa: E402

import fovea  # noqa: E402
from fovea import _fovea  # noqa: E402

# family -> (fixture, factor, default min_pixels, default max_pixels)
FAMILIES = {"qwen2_5_vl": ("qwen2_5_vl", 28, 3136, 12845056), "qwen3_vl": ("qwen3_vl", 32, 65536, 16777216)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budgets", default="1024,640,512")
    ap.add_argument("--fixation", default="1800,700")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    provenance.add_arguments(ap)
    a = ap.parse_args()
    W, H = 2592, 1944
    fx, fy = (float(v) for v in a.fixation.split(","))
    big = photo(W, H)
    rows = []
    for family, (fixture, factor, mn, mx) in FAMILIES.items():
        m = fovea.Model(os.path.join(ROOT, "tests", "data", "encoder", fixture))
        nh, nw = ref.smart_resize(H, W, factor, mn, mx)
        native = (nh // factor) * (nw // factor)
        uh, uw = ref.smart_resize(H, W, factor, mn, 1 << 40)
        uncapped = (uh // factor) * (uw // factor)
        print(f"{family}: native {nw}x{nh} = {native} merged tokens ({native * 4} patches) at max_pixels {mx}; "
              f"uncapped {uw}x{uh} = {uncapped}", flush=True)
        for budget in (int(b) for b in a.budgets.split(",")):
            for prec in ("fp32", "bf16"):
                t0 = time.perf_counter()
                fv = _fovea.encode_native_windows(m, big, fixations=[(fx, fy)], budget_tokens=budget, precision=prec,
                                                  threads=a.threads)
                dt = time.perf_counter() - t0
                n = fv["projected"].shape[0]
                x0, y0, x1, y1 = fv["window_boxes"][1]
                alone = _fovea.encode_native(m, [np.ascontiguousarray(big[y0:y1, x0:x1])], precision=prec,
                                             threads=a.threads)
                r0, r1 = fv["image_rows"][1], fv["image_rows"][2]
                win = fv["projected"][r0:r1]
                rc = min(cosine(win[i], alone["projected"][i]) for i in range(len(win)))
                row = {"family": family, "image": f"{W}x{H}", "fixation": f"{fx:g},{fy:g}", "budget": budget,
                       "precision": fv.get("precision", prec), "native_max_pixels": mx, "native_size": f"{nw}x{nh}",
                       "native_merged_tokens": native, "native_patches": native * 4,
                       "uncapped_native_merged_tokens": uncapped, "foveated_merged_tokens": n,
                       "ratio_to_native": round(n / native, 4), "one_in": round(native / n, 2),
                       "target_one_in_10_met": n * 10 <= native,
                       "windows": str(fv["window_boxes"]), "grids": str(fv["image_grid_thw"].tolist()),
                       "window_vs_crop_min_row_cosine": round(rc, 6), "seconds": round(dt, 3)}
                rows.append(row)
                print(f"  budget {budget} {prec}: {n} merged tokens = {n / native:.3f} of native (1/{native / n:.1f}), "
                      f"target <= 1/10 {'met' if n * 10 <= native else 'NOT met'}; windows {fv['window_boxes']}; "
                      f"window vs crop min row cosine {rc:.6f}; {dt:.2f} s", flush=True)
    provenance.output(a, "native", {"rows": rows}, rows=rows, threads=a.threads)


if __name__ == "__main__":
    main()
