#!/usr/bin/python3
"""A full-size ViT-B/16 checkpoint for the one-shot benchmark (bench/oneshot_bench.py).

    /usr/bin/python3 scripts/make_vit_b16_checkpoint.py [--out /tmp/fovea-vit-b16] [--seed 0]

torchvision's `vit_b_16` (86.6 M parameters, 12 layers, D=768, 1000-class head) with its own
random initialisation, written three ways with the same weights:
  vit_b16.safetensors  float32, torchvision's names (what `fovea encode --model` reads), 346 MB
  vit_b16.pt           torch.save(state_dict), what torch's one-shot script loads, 346 MB
  vit_b16_bf16.safetensors  the same weights stored as BF16 (173 MB), as many HF checkpoints are
Never commit these: they are large, and regenerated in under a minute (50 s on the shared
2-core machine). Existing files are kept unless --force. Needs Debian's torch and torchvision
(python3-torch, python3-torchvision).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fovea_testio import safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/fovea-vit-b16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="rewrite existing files")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    paths = {k: os.path.join(args.out, f) for k, f in
             (("st", "vit_b16.safetensors"), ("pt", "vit_b16.pt"), ("bf16", "vit_b16_bf16.safetensors"))}
    if not args.force and all(os.path.exists(p) for p in paths.values()):
        print("exists: " + ", ".join(paths.values()))
        return
    import torch
    import torchvision
    torch.manual_seed(args.seed)
    model = torchvision.models.vit_b_16(weights=None)
    # torchvision zero-initialises the classification head; give it values so the logits mean something.
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    meta = {"format": "pt", "source": "torchvision.models.vit_b_16(weights=None), seed %d" % args.seed}
    arrays = {k: v.numpy().astype(np.float32) for k, v in sd.items()}
    safetensors.write(paths["st"], arrays, meta)
    bf16 = {k: ("BF16", v.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)) for k, v in sd.items()}
    safetensors.write(paths["bf16"], bf16, meta)
    tmp = paths["pt"] + ".tmp"
    torch.save(sd, tmp)
    os.replace(tmp, paths["pt"])
    n = sum(v.numel() for v in sd.values())
    print("%d tensors, %.1f M parameters -> %s" % (len(sd), n / 1e6, ", ".join(
        "%s (%.0f MB)" % (p, os.path.getsize(p) / 1e6) for p in paths.values())))


if __name__ == "__main__":
    main()
