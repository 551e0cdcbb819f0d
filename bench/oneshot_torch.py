#!/usr/bin/python3
"""Torch's one-shot encode: what a user's script does for one photo in a fresh process.

    /usr/bin/python3 bench/oneshot_torch.py PHOTO CKPT.pt [--tokens 272] [--threads 2]

Imports torch and torchvision, builds torchvision's vit_b_16, loads the state dict saved with
torch.save (scripts/make_vit_b16_checkpoint.py), reads the photo, resizes it uniformly to a
grid of about --tokens 16x16 patches with the photo's aspect ratio (272 = 16 rows x 17 columns
for a square photo), normalises with ImageNet's mean and std, and encodes fp32: conv_proj, the
class token, the position embedding interpolated bicubically to the grid (as HF's
interpolate_pos_encoding), the 12 encoder layers and encoder.ln. Prints one JSON line with its
own phase times; bench/oneshot_bench.py times the whole process from outside.
"""
import time

T0 = time.perf_counter()
import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402

import torch  # noqa: E402
import torchvision  # noqa: E402
from PIL import Image  # noqa: E402

T_IMPORT = time.perf_counter()


def grid_for(tokens, w, h):
    """rows x cols: the most patches (at most `tokens`) whose aspect is within 10% of the
    photo's; if none is, the closest aspect."""
    grids = [(rows, tokens // rows) for rows in range(1, tokens + 1)]
    aspect_err = {g: abs(math.log((g[1] / g[0]) / (w / h))) for g in grids}
    close = [g for g in grids if aspect_err[g] < math.log(1.1)]
    if close:
        return max(close, key=lambda g: (g[0] * g[1], -aspect_err[g]))
    return min(grids, key=lambda g: aspect_err[g])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("photo")
    ap.add_argument("checkpoint")
    ap.add_argument("--tokens", type=int, default=272)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    t = time.perf_counter()
    model = torchvision.models.vit_b_16(weights=None)
    model.load_state_dict(torch.load(args.checkpoint, map_location="cpu"))
    model.eval()
    t_load = time.perf_counter()

    img = Image.open(args.photo).convert("RGB")
    P = model.patch_size
    rows, cols = grid_for(args.tokens, img.width, img.height)
    img = img.resize((cols * P, rows * P), Image.BICUBIC)
    x = torchvision.transforms.functional.to_tensor(img)
    x = torchvision.transforms.functional.normalize(x, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    t_pre = time.perf_counter()

    with torch.inference_mode():
        h = model.conv_proj(x[None])                       # [1, D, rows, cols]
        D = h.shape[1]
        h = h.flatten(2).transpose(1, 2)                   # [1, rows*cols, D]
        pos = model.encoder.pos_embedding                  # [1, 1 + G*G, D]
        G = int(round(math.sqrt(pos.shape[1] - 1)))
        grid = pos[:, 1:].reshape(1, G, G, D).permute(0, 3, 1, 2)
        grid = torch.nn.functional.interpolate(grid, size=(rows, cols), mode="bicubic", align_corners=False)
        grid = grid.permute(0, 2, 3, 1).reshape(1, rows * cols, D)
        cls = model.class_token + pos[:, :1]
        h = torch.cat([cls, h + grid], dim=1)
        for layer in model.encoder.layers:
            h = layer(h)
        h = model.encoder.ln(h)
    t_enc = time.perf_counter()
    print(json.dumps({"tokens": rows * cols, "grid": [rows, cols], "import_ms": (T_IMPORT - T0) * 1e3,
                      "model_load_ms": (t_load - t) * 1e3, "preprocess_ms": (t_pre - t_load) * 1e3,
                      "encode_ms": (t_enc - t_pre) * 1e3, "checksum": float(h.double().abs().sum())}))


if __name__ == "__main__":
    main()
