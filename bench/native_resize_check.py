#!/usr/bin/python3
"""How far fovea's resampling for Qwen3-VL (PIL's bicubic, which fovea reproduces byte for byte)
lies from the one Qwen3-VL's published processor runs (Qwen2VLImageProcessorFast: torchvision's
resize, bicubic, antialias=True, on uint8 tensors): grey levels of the resized image, and the
relative difference of the tower's `projected` rows when each is encoded (the Qwen3-VL test
fixture: real naming, random weights).

    PYTHONPATH=build/python /usr/bin/python3 bench/native_resize_check.py [--save]
"""
import argparse
import os
import sys

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import make_qwen_fixtures as ref  # noqa: E402
import provenance  # noqa: E402
from _native import cosine, photo  # noqa: E402

import fovea  # noqa: E402
from fovea import _fovea  # noqa: E402

# (source photo size W x H): smart_resize (factor 32) then changes both sides.
SOURCES = [(1000, 700), (333, 500), (1600, 1200), (250, 187), (700, 1000)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    provenance.add_arguments(ap)
    a = ap.parse_args()
    m = fovea.Model(os.path.join(ROOT, "tests", "data", "encoder", "qwen3_vl"))
    rows = []
    for w, h in SOURCES:
        img = photo(w, h, "astronaut")
        rh, rw = ref.smart_resize(h, w, 32, 65536, 16777216)
        pil = np.asarray(Image.fromarray(img).resize((rw, rh), Image.BICUBIC))
        t = torch.from_numpy(img.copy()).permute(2, 0, 1).contiguous()
        tv = TF.resize(t, [rh, rw], interpolation=InterpolationMode.BICUBIC, antialias=True).permute(1, 2, 0).numpy()
        d = np.abs(pil.astype(np.int32) - tv.astype(np.int32))
        ep = _fovea.encode_native(m, [np.ascontiguousarray(pil)], threads=a.threads)["projected"]
        et = _fovea.encode_native(m, [np.ascontiguousarray(tv)], threads=a.threads)["projected"]
        # fovea's own processor on the original photo gives PIL's bytes, so its rows equal ep.
        ef = _fovea.encode_native(m, [img], threads=a.threads)["projected"]
        rel = float(np.abs(ep - et).max() / np.abs(et).max())
        cos = cosine(ep, et)
        row = {"source": f"{w}x{h}", "resized": f"{rw}x{rh}", "max_grey_level_diff": int(d.max()),
               "mean_grey_level_diff": round(float(d.mean()), 4), "pixels_that_differ": round(float((d > 0).mean()), 4),
               "projected_rel_diff": round(rel, 6), "projected_cosine": round(cos, 6),
               "fovea_processor_equals_pil": bool(np.array_equal(ef, ep))}
        rows.append(row)
        print(row, flush=True)
    provenance.output(a, "native", {"rows": rows}, rows=rows, threads=a.threads,
                      versions={"torch": torch.__version__, "torchvision": __import__("torchvision").__version__})


if __name__ == "__main__":
    main()
