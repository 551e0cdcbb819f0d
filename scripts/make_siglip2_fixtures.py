#!/usr/bin/python3
"""Builds the SigLIP 2 NaFlex fixture: a small random Siglip2Model checkpoint (vision and text
towers) in the real HF naming and config layout, with a float64 PyTorch reference of the NaFlex
processor and the vision tower run on raw images, padding and masks included.

Run with Debian's python3 (torch, PIL; `transformers` is not needed):

    /usr/bin/python3 scripts/make_siglip2_fixtures.py [--out tests/data/encoder]

The reference is written from the published code (transformers' image_processing_siglip2.py and
modeling_siglip2.py):

  * processor: get_image_size_for_max_num_patches (bisection of the scale in [1e-6, 100] to a
    1e-5 interval; each side ceil(s * side / P) * P, at least P; the largest scale whose patch
    count is <= max_num_patches), PIL's BILINEAR resize of the 8-bit image, rescale 1/255,
    normalise with image_mean / image_std, patches in (row, column, channel) order row-major over
    the grid (convert_image_to_patches), the run padded to max_num_patches with zero patches, a
    pixel_attention_mask and spatial_shapes (h, w);
  * embeddings: a Linear patch embedding; the sqrt(n) x sqrt(n) position table resized to each
    image's (h, w) by F.interpolate(bilinear, align_corners=False, antialias=True), flattened
    row-major, the padding rows given the first position;
  * encoder: pre-norm blocks (LayerNorm eps 1e-6, q/k/v/out projections, a tanh-GELU MLP), the
    attention's keys masked where the patch is padding; post_layernorm on every row;
  * head: the attention-pooling head (a probe attends to the rows, padding masked; out_proj,
    LayerNorm, MLP with its residual) -> pooler_output.

DIR siglip2_naflex/ gets model.safetensors (vision_model.*, text_model.*, logit_scale,
logit_bias), config.json (Siglip2Config with its vision_config), preprocessor_config.json
(Siglip2ImageProcessor: max_num_patches 24), the raw PNG images image_WxH.png, resize_WxH.png (image_97x211
through PIL's bilinear), and
cases.safetensors with, per case NAME: NAME.spatial [2] I32 (h, w patches), NAME.hidden [h*w, D]
(last_hidden_state's valid rows), NAME.pooled [1, D]; case "batch" is every image of
`IMAGES` in one padded batch (max_num_patches 24), the other cases with their own
max_num_patches (NAME = image_WxH.mNN). naflex_sizes.json holds a sweep of image sizes, patch
sizes and max_num_patches with the sizes the rule gives.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_qwen_fixtures import image, save_safetensors  # noqa: E402

MEAN, STD = [0.48, 0.46, 0.41], [0.27, 0.26, 0.28]
D, HEADS, LAYERS, MLP, P, SIDE, MAXP = 32, 2, 2, 64, 16, 4, 24
# Raw image sizes (width, height): shrunk, enlarged, wide, tall, square.
IMAGES = [(200, 120), (97, 211), (640, 96), (40, 40), (300, 300), (33, 500)]
# (image, max_num_patches) encoded alone: a grid larger than the table, and a small one.
ALONE = [((200, 120), 64), ((97, 211), 64), ((640, 96), 7)]
# PIL's bilinear of image_97x211 to these sizes: resize_WxH.png.
RESIZES = [(48, 112), (160, 320), (97, 64), (30, 211)]


def naflex_size(height, width, patch, max_num_patches, eps=1e-5):
    def scaled(scale, size):
        return int(max(patch, math.ceil(size * scale / patch) * patch))

    lo, hi = eps / 10, 100.0
    while (hi - lo) >= eps:
        s = (lo + hi) / 2
        if (scaled(s, height) / patch) * (scaled(s, width) / patch) <= max_num_patches:
            lo = s
        else:
            hi = s
    return scaled(lo, height), scaled(lo, width)


def preprocess(img, max_num_patches):
    """uint8 [H, W, 3] -> patches [n, P*P*3] float64, (h, w)."""
    from PIL import Image
    th, tw = naflex_size(img.shape[0], img.shape[1], P, max_num_patches)
    if (th, tw) != img.shape[:2]:
        img = np.asarray(Image.fromarray(img, "RGB").resize((tw, th), Image.BILINEAR))
    x = torch.from_numpy(img.astype(np.float64)) / 255.0
    x = (x - torch.tensor(MEAN, dtype=torch.float64)) / torch.tensor(STD, dtype=torch.float64)
    h, w = th // P, tw // P
    x = x.reshape(h, P, w, P, 3).permute(0, 2, 1, 3, 4).reshape(h * w, P * P * 3)
    return x, (h, w)


def batch(items, max_num_patches):
    """Pads the patch runs to max_num_patches: pixel_values [B, max, P*P*3], mask [B, max], shapes."""
    B = len(items)
    pv = torch.zeros(B, max_num_patches, P * P * 3, dtype=torch.float64)
    mask = torch.zeros(B, max_num_patches, dtype=torch.bool)
    shapes = []
    for i, (x, hw) in enumerate(items):
        pv[i, :x.shape[0]] = x
        mask[i, :x.shape[0]] = True
        shapes.append(hw)
    return pv, mask, shapes


def layer_norm(x, sd, name):
    return F.layer_norm(x, (x.shape[-1],), sd[name + ".weight"], sd[name + ".bias"], 1e-6)


def linear(x, sd, name):
    return x @ sd[name + ".weight"].T + sd[name + ".bias"]


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def attend(q, k, v, key_mask):
    """q [B, Tq, D], k, v [B, T, D], key_mask [B, T] bool: multi-head attention, masked keys."""
    B, Tq, _ = q.shape
    T = k.shape[1]
    hd = D // HEADS
    q = q.reshape(B, Tq, HEADS, hd).transpose(1, 2)
    k = k.reshape(B, T, HEADS, hd).transpose(1, 2)
    v = v.reshape(B, T, HEADS, hd).transpose(1, 2)
    s = q @ k.transpose(-1, -2) / math.sqrt(hd)
    s = s.masked_fill(~key_mask[:, None, None, :], torch.finfo(s.dtype).min)
    return (s.softmax(-1) @ v).transpose(1, 2).reshape(B, Tq, D)


def vision(sd, pv, mask, shapes):
    """last_hidden_state [B, max, D] and pooler_output [B, D]."""
    pre = "vision_model."
    x = linear(pv, sd, pre + "embeddings.patch_embedding")
    table = sd[pre + "embeddings.position_embedding.weight"].reshape(SIDE, SIDE, D).permute(2, 0, 1)
    pos = torch.zeros_like(x)
    for i, (h, w) in enumerate(shapes):
        r = F.interpolate(table[None], size=(h, w), mode="bilinear", align_corners=False, antialias=True)[0]
        r = r.reshape(D, h * w).T
        pos[i, :h * w] = r
        pos[i, h * w:] = r[0]
    x = x + pos
    for l in range(LAYERS):
        b = f"{pre}encoder.layers.{l}."
        y = layer_norm(x, sd, b + "layer_norm1")
        a = attend(linear(y, sd, b + "self_attn.q_proj"), linear(y, sd, b + "self_attn.k_proj"),
                   linear(y, sd, b + "self_attn.v_proj"), mask)
        x = x + linear(a, sd, b + "self_attn.out_proj")
        y = layer_norm(x, sd, b + "layer_norm2")
        x = x + linear(gelu_tanh(linear(y, sd, b + "mlp.fc1")), sd, b + "mlp.fc2")
    x = layer_norm(x, sd, pre + "post_layernorm")
    h = pre + "head."
    wq, wk, wv = sd[h + "attention.in_proj_weight"].chunk(3)
    bq, bk, bv = sd[h + "attention.in_proj_bias"].chunk(3)
    probe = sd[h + "probe"].expand(x.shape[0], 1, D)
    a = attend(probe @ wq.T + bq, x @ wk.T + bk, x @ wv.T + bv, mask)
    a = linear(a, sd, h + "attention.out_proj")
    y = layer_norm(a, sd, h + "layernorm")
    a = a + linear(gelu_tanh(linear(y, sd, h + "mlp.fc1")), sd, h + "mlp.fc2")
    return x, a[:, 0]


def weights(gen):
    shapes = {"vision_model.embeddings.patch_embedding.weight": (D, P * P * 3),
              "vision_model.embeddings.patch_embedding.bias": (D,),
              "vision_model.embeddings.position_embedding.weight": (SIDE * SIDE, D)}
    for l in range(LAYERS):
        b = f"vision_model.encoder.layers.{l}."
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[b + f"self_attn.{n}.weight"] = (D, D)
            shapes[b + f"self_attn.{n}.bias"] = (D,)
        for n in ("layer_norm1", "layer_norm2"):
            shapes[b + n + ".weight"] = (D,)
            shapes[b + n + ".bias"] = (D,)
        shapes[b + "mlp.fc1.weight"], shapes[b + "mlp.fc1.bias"] = (MLP, D), (MLP,)
        shapes[b + "mlp.fc2.weight"], shapes[b + "mlp.fc2.bias"] = (D, MLP), (D,)
    h = "vision_model.head."
    shapes.update({"vision_model.post_layernorm.weight": (D,), "vision_model.post_layernorm.bias": (D,),
                   h + "probe": (1, 1, D), h + "attention.in_proj_weight": (3 * D, D),
                   h + "attention.in_proj_bias": (3 * D,), h + "attention.out_proj.weight": (D, D),
                   h + "attention.out_proj.bias": (D,), h + "layernorm.weight": (D,), h + "layernorm.bias": (D,),
                   h + "mlp.fc1.weight": (MLP, D), h + "mlp.fc1.bias": (MLP,), h + "mlp.fc2.weight": (D, MLP),
                   h + "mlp.fc2.bias": (D,)})
    sd = {}
    for name, shape in shapes.items():
        if name.endswith("position_embedding.weight"):
            sd[name] = torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith("probe"):
            sd[name] = torch.randn(shape, generator=gen, dtype=torch.float64)
        elif len(shape) == 2:
            sd[name] = torch.randn(shape, generator=gen, dtype=torch.float64) / math.sqrt(shape[1])
        elif name.endswith("weight"):
            sd[name] = 1.0 + 0.2 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:
            sd[name] = 0.2 * torch.randn(shape, generator=gen, dtype=torch.float64)
    for l in range(LAYERS):  # attention that is not uniform: larger q and k
        for n in ("q_proj", "k_proj"):
            sd[f"vision_model.encoder.layers.{l}.self_attn.{n}.weight"] *= 3.0
    return {k: v.to(torch.float32).to(torch.float64) for k, v in sd.items()}  # as stored (F32)


def sweep(out):
    rows = []
    sizes = [(1, 1), (16, 16), (40, 40), (120, 200), (211, 97), (96, 640), (500, 33), (1944, 2592), (2592, 1944),
             (768, 1024), (1080, 1920), (5000, 30), (30, 5000), (1, 9999), (333, 777), (224, 224), (384, 384),
             (512, 512), (123, 45), (1001, 1003), (7, 3000)]
    for patch in (14, 16):
        for mnp in (1, 7, 24, 64, 256, 576, 1024, 4096):
            for h, w in sizes:
                rh, rw = naflex_size(h, w, patch, mnp)
                rows.append([h, w, patch, mnp, rh, rw])
    with open(os.path.join(out, "naflex_sizes.json"), "w") as f:
        json.dump({"columns": ["height", "width", "patch_size", "max_num_patches", "resized_height", "resized_width"],
                   "rows": rows}, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                                                  "encoder"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20261208)
    out = os.path.join(a.out, "siglip2_naflex")
    os.makedirs(out, exist_ok=True)
    sd = weights(gen)
    names = {k: v for k, v in sd.items()}
    # The text tower's tensors beside (ignored by fovea), as a Siglip2Model checkpoint has them.
    names["text_model.embeddings.token_embedding.weight"] = torch.randn(50, D, generator=gen)
    names["text_model.final_layer_norm.weight"] = torch.ones(D)
    names["text_model.head.weight"] = torch.randn(D, D, generator=gen)
    names["logit_scale"] = torch.tensor([2.3])
    names["logit_bias"] = torch.tensor([-10.0])
    save_safetensors(os.path.join(out, "model.safetensors"), names)
    config = {"architectures": ["Siglip2Model"], "model_type": "siglip2",
              "text_config": {"model_type": "siglip2_text_model", "hidden_size": D, "vocab_size": 50},
              "vision_config": {"model_type": "siglip2_vision_model", "hidden_size": D, "intermediate_size": MLP,
                                "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_channels": 3,
                                "num_patches": SIDE * SIDE, "patch_size": P, "hidden_act": "gelu_pytorch_tanh",
                                "layer_norm_eps": 1e-6, "attention_dropout": 0.0}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    pre = {"image_processor_type": "Siglip2ImageProcessor", "do_resize": True, "resample": 2, "do_rescale": True,
           "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": MEAN, "image_std": STD,
           "patch_size": P, "max_num_patches": MAXP, "do_convert_rgb": None}
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump(pre, f, indent=1)

    imgs = {}
    for w, h in IMAGES:
        imgs[(w, h)] = image(gen, w, h, out, f"image_{w}x{h}.png")
    # The processor's resampling alone: PIL's bilinear on 8-bit RGB, shrinking (antialiased),
    # enlarging, and one axis only.
    from PIL import Image
    for w, h in RESIZES:
        Image.fromarray(imgs[(97, 211)], "RGB").resize((w, h), Image.BILINEAR).save(
            os.path.join(out, f"resize_{w}x{h}.png"))
    cases = {}
    items = [preprocess(imgs[s], MAXP) for s in IMAGES]
    pv, mask, shapes = batch(items, MAXP)
    hidden, pooled = vision(sd, pv, mask, shapes)
    rows = []
    for i, (w, h) in enumerate(IMAGES):
        n = shapes[i][0] * shapes[i][1]
        name = f"image_{w}x{h}"
        cases[name + ".spatial"] = torch.tensor(shapes[i], dtype=torch.int32)
        cases[name + ".hidden"] = hidden[i, :n].to(torch.float32)
        cases[name + ".pooled"] = pooled[i:i + 1].to(torch.float32)
        rows.append(hidden[i, :n])
    cases["batch.hidden"] = torch.cat(rows).to(torch.float32)
    # Self-check: an image alone (no padding) gives its rows of the padded batch.
    x, hw = items[0]
    pv1, m1, s1 = batch([(x, hw)], x.shape[0])
    h1, p1 = vision(sd, pv1, m1, s1)
    assert (h1[0] - hidden[0, :x.shape[0]]).abs().max().item() < 1e-9
    assert (p1 - pooled[0:1]).abs().max().item() < 1e-9
    for (w, h), mnp in ALONE:
        x, hw = preprocess(imgs[(w, h)], mnp)
        pv1, m1, s1 = batch([(x, hw)], mnp)
        h1, p1 = vision(sd, pv1, m1, s1)
        name = f"image_{w}x{h}.m{mnp}"
        cases[name + ".spatial"] = torch.tensor(hw, dtype=torch.int32)
        cases[name + ".hidden"] = h1[0, :x.shape[0]].to(torch.float32)
        cases[name + ".pooled"] = p1.to(torch.float32)
    save_safetensors(os.path.join(out, "cases.safetensors"), cases)
    sweep(out)
    for k, v in cases.items():
        if k.endswith(".spatial"):
            print(k, v.tolist())


if __name__ == "__main__":
    main()
