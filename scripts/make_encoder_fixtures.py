#!/usr/bin/python3
"""Builds the encoder test fixtures: small random ViTs in every naming fovea reads, with PyTorch's outputs.

Run with Debian's python3 (torch 1.13 + torchvision; `transformers` is not needed):

    /usr/bin/python3 scripts/make_encoder_fixtures.py [--out tests/data/encoder]

For every model it writes DIR/model.safetensors (+ config.json as the real checkpoints have
it) and DIR/cases.safetensors holding inputs and PyTorch's outputs for:

  native    the full uniform grid of a native-size image: the reference is the model's own
            forward (torchvision's VisionTransformer modules, the HF-named modules below);
  interp    (HF models) a uniform grid of a non-native, non-square image through HF's
            interpolate_pos_encoding (F.interpolate bicubic, align_corners=False);
  foveated  tokens of mixed sizes at arbitrary centres in a non-square image: each patch
            goes through the patch embedding, the position embedding is sampled at the token
            centre with F.grid_sample(mode="bicubic", padding_mode="border",
            align_corners=False), i.e. grid coordinate u = cx * G / W - 0.5.

The script checks its own pieces against each other before writing anything: the token-level
forward reproduces the module forward on the native grid, and grid_sample reproduces HF's
F.interpolate on the interp grid. References are computed in float64 from the weights as
stored (F16 / BF16 checkpoints are rounded first) and saved as float32.

One module per model family in scripts/encoder_fixtures/ (common.py holds what they share); the
files are written with scripts/fovea_testio/.
"""
import argparse
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from encoder_fixtures.blip import make_blip  # noqa: E402
from encoder_fixtures.clip_siglip import make_clip, make_idefics3, make_paligemma, make_siglip, make_siglip2  # noqa: E402
from encoder_fixtures.common import check_aa_sampling, check_bucket_sampling  # noqa: E402
from encoder_fixtures.gguf_mmproj import make_gguf_llava, make_gguf_siglip, make_hf_llava  # noqa: E402
from encoder_fixtures.hf_vit import (  # noqa: E402
    make_hf_dinov2, make_hf_dinov2_registers, make_hf_dinov2_swiglu, make_hf_vit)
from encoder_fixtures.intern_vit import make_intern_vit  # noqa: E402
from encoder_fixtures.open_clip import make_open_clip  # noqa: E402
from encoder_fixtures.timm_vit import (  # noqa: E402
    make_timm_clip, make_timm_dinov2_swiglu, make_timm_registers, make_timm_siglip, make_timm_vit)
from encoder_fixtures.torchvision_vit import make_torchvision  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "encoder"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    check_aa_sampling()
    check_bucket_sampling()
    gen = torch.Generator().manual_seed(20261124)
    # The raw-pixel images and the GGUF models draw from their own generator, so the models and
    # cases above stay what they were.
    raw_gen = torch.Generator().manual_seed(20261125)
    make_clip(os.path.join(a.out, "clip"), gen, False, raw_gen)
    make_clip(os.path.join(a.out, "clip_full"), gen, True, raw_gen)
    make_siglip(os.path.join(a.out, "siglip"), gen, raw_gen)
    make_torchvision(os.path.join(a.out, "torchvision"), gen, raw_gen)
    make_gguf_llava(os.path.join(a.out, "gguf_llava"), raw_gen)
    make_gguf_siglip(os.path.join(a.out, "gguf_siglip"), raw_gen)
    make_hf_llava(os.path.join(a.out, "hf_llava"), raw_gen)
    # Added later, each with its own generator: the fixtures above stay byte for byte what they were.
    make_hf_vit(os.path.join(a.out, "hf_vit"), torch.Generator().manual_seed(20261127))
    make_hf_dinov2(os.path.join(a.out, "hf_dinov2"), torch.Generator().manual_seed(20261128))
    make_timm_vit(os.path.join(a.out, "timm_vit"), torch.Generator().manual_seed(20261129))
    make_timm_clip(os.path.join(a.out, "timm_clip"), torch.Generator().manual_seed(20261130))
    make_hf_dinov2_registers(os.path.join(a.out, "hf_dinov2_reg"), torch.Generator().manual_seed(20261131))
    make_timm_registers(os.path.join(a.out, "timm_reg"), torch.Generator().manual_seed(20261132))
    make_siglip2(os.path.join(a.out, "siglip2"), torch.Generator().manual_seed(20261133))
    make_timm_siglip(os.path.join(a.out, "timm_siglip"), torch.Generator().manual_seed(20261134))
    make_hf_dinov2_swiglu(os.path.join(a.out, "hf_dinov2_swiglu"), torch.Generator().manual_seed(20261135))
    make_timm_dinov2_swiglu(os.path.join(a.out, "timm_dinov2_swiglu"), torch.Generator().manual_seed(20261136))
    make_open_clip(os.path.join(a.out, "open_clip"), torch.Generator().manual_seed(20261137))
    make_intern_vit(os.path.join(a.out, "intern_vit"), torch.Generator().manual_seed(20261138))
    make_idefics3(os.path.join(a.out, "idefics3"), torch.Generator().manual_seed(20261139))
    make_blip(os.path.join(a.out, "blip2"), torch.Generator().manual_seed(20261140), True)
    make_blip(os.path.join(a.out, "blip"), torch.Generator().manual_seed(20261141), False)
    make_paligemma(os.path.join(a.out, "paligemma"), torch.Generator().manual_seed(20261142))
    total = 0
    for root, _, files in os.walk(a.out):
        for f in sorted(files):
            p = os.path.join(root, f)
            total += os.path.getsize(p)
            print(f"{os.path.relpath(p, a.out):34s} {os.path.getsize(p):8d} bytes")
    print(f"total {total} bytes (torch {torch.__version__}, torchvision {torchvision.__version__})")


if __name__ == "__main__":
    main()
