#!/usr/bin/python3
"""Per-token fidelity of fovea's int8 encodes against fp32, on real photos.

    PYTHONPATH=build/python /usr/bin/python3 bench/int8_fidelity.py [--model CKPT ...]
        [--outlier-vit-b] [--budget 273] [--threads 2] [--json OUT.json]

For each model and photo (python3-skimage's astronaut, coffee, chelsea, rocket; opencv-data's
fruits and baboon when installed): fovea.tokenize(photo, budget, fixation at the centre,
model=m), then the same tokens encoded at fp32, bf16 and int8 (Model.encode_full, same thread
count). Reported against fp32: the mean per-token cosine of the last hidden state, the worst
token's cosine, the class token's cosine, and (models with a classifier) whether the top-1 class
agrees.

--outlier-vit-b adds a ViT-B/16 with random weights (torchvision's vit_b_16 initialisation, seed
0) whose LayerNorms carry outlier channels as trained transformers' do: in every block, 6 fixed
channels of ln_1 and ln_2 get a gain of 20 (and their input columns of the next linear layer
stay as they are), so the rows the int8 kernels quantize per token have a few entries ~20x the
rest. Written to a temporary directory with torch (python3-torch).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def photos():
    out = []
    try:
        from skimage import data
        for name in ("astronaut", "coffee", "chelsea", "rocket"):
            out.append((name, np.ascontiguousarray(getattr(data, name)()[..., :3])))
    except Exception as e:  # noqa: BLE001
        print(f"skimage photos unavailable: {e}", file=sys.stderr)
    for p in ("/usr/share/opencv4/samples/data/fruits.jpg", "/usr/share/opencv4/samples/data/baboon.jpg"):
        if os.path.exists(p):
            import fovea
            with open(p, "rb") as f:
                out.append((os.path.basename(p), fovea.decode_image(f.read())))
    return out


def outlier_vit_b(tmp: str) -> str:
    import torch
    import torchvision
    from fovea_testio import safetensors as fovea_safetensors
    torch.manual_seed(0)
    m = torchvision.models.vit_b_16(weights=None).eval()
    g = torch.Generator().manual_seed(1)
    chans = torch.randperm(768, generator=g)[:6]
    with torch.no_grad():
        for blk in m.encoder.layers:
            blk.ln_1.weight[chans] *= 20
            blk.ln_2.weight[chans] *= 20
    path = os.path.join(tmp, "vit_b16_outliers.safetensors")
    fovea_safetensors.write(path, {k: v.float().numpy() for k, v in m.state_dict().items()})
    return path


def cos_rows(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    num = (a * b).sum(-1)
    den = np.sqrt((a * a).sum(-1) * (b * b).sum(-1))
    return num / np.maximum(den, 1e-30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], help="checkpoint (repeatable)")
    ap.add_argument("--outlier-vit-b", action="store_true")
    ap.add_argument("--budget", type=int, default=273)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    import fovea
    tmp = tempfile.TemporaryDirectory()
    models = [(p, p) for p in a.model]
    if a.outlier_vit_b:
        models.append(("random ViT-B/16 with outlier channels", outlier_vit_b(tmp.name)))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    head = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu, "commit": commit,
            "machine": platform.node(), "load_average": os.getloadavg()[0], "command": " ".join(sys.argv),
            "int8_kernels": fovea._fovea.matrix_kernels("int8")}
    print(json.dumps(head))
    results = {"meta": head, "rows": []}
    pics = photos()
    print(f"{'model':<40} {'photo':<12} {'N':>5} {'prec':>5} {'mean cos':>9} {'worst':>8} {'class':>8} {'top1':>5}")
    for label, path in models:
        m = fovea.Model(path)
        summary = {}
        for name, img in pics:
            h, w = img.shape[:2]
            t = fovea.tokenize(img, budget=a.budget, fixations=[(w / 2, h / 2)], model=m)
            ref = m.encode_full(t, precision="fp32", threads=a.threads)
            for prec in ("bf16", "int8"):
                e = m.encode_full(t, precision=prec, threads=a.threads)
                c = cos_rows(ref.embeddings, e.embeddings)
                cls = (float(cos_rows(np.asarray(ref.class_token).reshape(1, -1), np.asarray(e.class_token).reshape(1, -1))[0])
                       if ref.class_token is not None else None)
                top = (int(np.argmax(ref.logits)) == int(np.argmax(e.logits))) if ref.logits is not None else None
                row = {"model": label, "photo": name, "n": int(c.size), "precision": e.precision, "asked": prec,
                       "mean_cos": float(c.mean()), "worst_cos": float(c.min()), "class_cos": cls, "top1_agrees": top}
                results["rows"].append(row)
                summary.setdefault(prec, []).append(row)
                print(f"{label[-40:]:<40} {name[:12]:<12} {c.size:>5} {e.precision:>5} {c.mean():>9.5f} {c.min():>8.5f} "
                      f"{cls if cls is None else round(cls, 5)!s:>8} {top!s:>5}", flush=True)
        for prec, rows in summary.items():
            print(f"{label[-40:]:<40} {'ALL':<12} {'':>5} {prec:>5} {np.mean([r['mean_cos'] for r in rows]):>9.5f} "
                  f"{min(r['worst_cos'] for r in rows):>8.5f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
