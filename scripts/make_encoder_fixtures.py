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

The HF-named modules follow transformers' modeling_clip.py / modeling_siglip.py: CLIP has a
class token, pre_layrnorm, quick_gelu (x * sigmoid(1.702 x)), layer-norm eps 1e-5, and applies
post_layernorm to the class token only (pooler_output); SigLIP has no class token, a
patch-embedding bias, tanh-GELU, eps 1e-6, post_layernorm on every token and an optional
attention-pooling head (nn.MultiheadAttention over a learned probe).
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

C, P = 3, 8          # channels, patch size
D, HEADS, LAYERS, MLP = 32, 4, 2, 64
G = 4                # position grid: native image 32 x 32


# ---- HF-named reference modules (plain torch) ---------------------------------------------------

class Attention(nn.Module):  # CLIPAttention / SiglipAttention (eager)
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.scale = self.hd ** -0.5
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.q_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        w = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        w = F.softmax(w, dim=-1)
        o = torch.matmul(w, v).transpose(1, 2).reshape(b, t, d)
        return self.out_proj(o)


def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


class Mlp(nn.Module):
    def __init__(self, d, m, act):
        super().__init__()
        self.act = act
        self.fc1 = nn.Linear(d, m)
        self.fc2 = nn.Linear(m, d)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, m, act, eps):
        super().__init__()
        self.self_attn = Attention(d, heads)
        self.layer_norm1 = nn.LayerNorm(d, eps=eps)
        self.mlp = Mlp(d, m, act)
        self.layer_norm2 = nn.LayerNorm(d, eps=eps)

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class Encoder(nn.Module):
    def __init__(self, d, heads, m, layers, act, eps):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(d, heads, m, act, eps) for _ in range(layers)])

    def forward(self, x):
        for l in self.layers:
            x = l(x)
        return x


def interpolate_grid(pos, height, width, antialias=False, mode="bicubic"):
    """HF interpolate_pos_encoding for the G x G patch part: [G*G, D] -> [h*w, D] (antialias=True:
    Dinov2WithRegisters' and timm's resample_abs_pos_embed; bilinear: SigLIP 2)."""
    g = int(round(math.sqrt(pos.shape[0])))
    grid = pos.reshape(1, g, g, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(height // P, width // P), mode=mode, align_corners=False, antialias=antialias)
    return grid.permute(0, 2, 3, 1).reshape(-1, pos.shape[1])


class ClipEmbeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.class_embedding = nn.Parameter(torch.randn(D))
        self.patch_embedding = nn.Conv2d(C, D, kernel_size=P, stride=P, bias=False)
        self.position_embedding = nn.Embedding(G * G + 1, D)
        self.register_buffer("position_ids", torch.arange(G * G + 1).expand((1, -1)), persistent=False)

    def forward(self, pixels, interpolate=False):
        b, _, h, w = pixels.shape
        x = self.patch_embedding(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_embedding.expand(b, 1, -1), x], dim=1)
        pw = self.position_embedding.weight
        if interpolate and not (h == w == G * P):
            pos = torch.cat([pw[:1], interpolate_grid(pw[1:], h, w)], dim=0)
        else:
            pos = self.position_embedding(self.position_ids)[0]
        return x + pos.unsqueeze(0)


class ClipVisionTransformer(nn.Module):
    def __init__(self, layers=LAYERS):
        super().__init__()
        self.embeddings = ClipEmbeddings()
        self.pre_layrnorm = nn.LayerNorm(D, eps=1e-5)
        self.encoder = Encoder(D, HEADS, MLP, layers, quick_gelu, 1e-5)
        self.post_layernorm = nn.LayerNorm(D, eps=1e-5)

    def run(self, x):  # from the embeddings on: (last_hidden_state, pooler_output)
        h = self.encoder(self.pre_layrnorm(x))
        return h, self.post_layernorm(h[:, 0, :])

    def forward(self, pixels, interpolate=False):
        return self.run(self.embeddings(pixels, interpolate))


class ClipVisionModel(nn.Module):  # CLIPVisionModel
    def __init__(self, layers=LAYERS):
        super().__init__()
        self.vision_model = ClipVisionTransformer(layers)


class ClipTextStub(nn.Module):  # a few text-tower tensors the loader must ignore
    def __init__(self):
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.token_embedding = nn.Embedding(16, D)
        self.final_layer_norm = nn.LayerNorm(D)


class ClipModel(nn.Module):  # CLIPModel: vision tower + visual_projection (+ text tower)
    def __init__(self, proj):
        super().__init__()
        self.text_model = ClipTextStub()
        self.vision_model = ClipVisionTransformer()
        self.visual_projection = nn.Linear(D, proj, bias=False)
        self.text_projection = nn.Linear(D, proj, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(2.6592))


class SiglipEmbeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embedding = nn.Conv2d(C, D, kernel_size=P, stride=P, padding="valid")
        self.position_embedding = nn.Embedding(G * G, D)
        self.register_buffer("position_ids", torch.arange(G * G).expand((1, -1)), persistent=False)

    def forward(self, pixels, interpolate=False):
        _, _, h, w = pixels.shape
        x = self.patch_embedding(pixels).flatten(2).transpose(1, 2)
        if interpolate and not (h == w == G * P):
            pos = interpolate_grid(self.position_embedding.weight, h, w)
        else:
            pos = self.position_embedding(self.position_ids)[0]
        return x + pos.unsqueeze(0)


class Siglip2Embeddings(nn.Module):  # Siglip2VisionEmbeddings
    """A linear patch embedding over (row, column, channel)-ordered patch pixels and a G x G table
    resized bilinearly (antialias=True) to the patch grid, as transformers' modeling_siglip2.py."""
    pos_mode = "bilinear_aa"

    def __init__(self):
        super().__init__()
        self.patch_embedding = nn.Linear(C * P * P, D)
        self.position_embedding = nn.Embedding(G * G, D)

    def embed_patches(self, patches):  # [N, C, P, P] (the conv layout fovea's tokens have)
        return self.patch_embedding(patches.permute(0, 2, 3, 1).reshape(patches.shape[0], -1))

    def forward(self, pixels, interpolate=False):
        _, _, h, w = pixels.shape
        x = pixels[0].reshape(C, h // P, P, w // P, P).permute(1, 3, 2, 4, 0).reshape((h // P) * (w // P), -1)
        pos = self.position_embedding.weight.reshape(G, G, D).permute(2, 0, 1).unsqueeze(0)
        pos = F.interpolate(pos, size=(h // P, w // P), mode="bilinear", align_corners=False, antialias=True)
        return (self.patch_embedding(x) + pos.reshape(D, -1).t()).unsqueeze(0)


def idefics3_buckets(n, g):
    """Idefics2VisionEmbeddings (which Idefics3's and SmolVLM's copy), as the models were trained
    with it: the table cell of each of n patches along an axis, for a g x g table. (transformers'
    later rewrite, arange(n) / n * (1 - 1e-6) in pixel_values.dtype, gives the same cells in bf16
    and fp16, where the factor rounds to 1, and one cell lower on every patch edge that falls on
    a boundary in float32, the native grid included; docs/explanation/encoder.md.)"""
    boundaries = torch.arange(1 / g, 1.0, 1 / g)
    frac = torch.arange(0, 1 - 1e-6, 1 / torch.tensor(n))
    return torch.bucketize(frac, boundaries, right=True)


class Idefics3Embeddings(nn.Module):  # Idefics3VisionEmbeddings (a full patch_attention_mask)
    """SigLIP's conv patch embedding and G*G table, positions by bucketized fractional
    coordinates: no interpolation at any size."""
    pos_mode = "bucket"

    def __init__(self):
        super().__init__()
        self.patch_embedding = nn.Conv2d(C, D, kernel_size=P, stride=P)
        self.position_embedding = nn.Embedding(G * G, D)

    def forward(self, pixels, interpolate=False):
        _, _, h, w = pixels.shape
        x = self.patch_embedding(pixels).flatten(2).transpose(1, 2)
        bh, bw = idefics3_buckets(h // P, G), idefics3_buckets(w // P, G)
        ids = (bh[:, None] * G + bw).flatten()
        return x + self.position_embedding(ids).unsqueeze(0)


class SiglipPoolingHead(nn.Module):  # SiglipMultiheadAttentionPoolingHead
    def __init__(self):
        super().__init__()
        self.probe = nn.Parameter(torch.randn(1, 1, D))
        self.attention = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.layernorm = nn.LayerNorm(D, eps=1e-6)
        self.mlp = Mlp(D, MLP, gelu_tanh)

    def forward(self, h):
        probe = self.probe.repeat(h.shape[0], 1, 1)
        h = self.attention(probe, h, h)[0]
        r = h
        h = self.layernorm(h)
        h = r + self.mlp(h)
        return h[:, 0]


class SiglipVisionTransformer(nn.Module):
    def __init__(self, embeddings=SiglipEmbeddings, head=True):
        super().__init__()
        self.embeddings = embeddings()
        self.encoder = Encoder(D, HEADS, MLP, LAYERS, gelu_tanh, 1e-6)
        self.post_layernorm = nn.LayerNorm(D, eps=1e-6)
        if head:
            self.head = SiglipPoolingHead()

    def run(self, x):
        h = self.post_layernorm(self.encoder(x))
        return h, (self.head(h) if hasattr(self, "head") else None)

    def forward(self, pixels, interpolate=False):
        return self.run(self.embeddings(pixels, interpolate))


class SiglipVisionModel(nn.Module):
    def __init__(self, embeddings=SiglipEmbeddings, head=True):
        super().__init__()
        self.vision_model = SiglipVisionTransformer(embeddings, head)


# ---- utilities ------------------------------------------------------------------------------------

def randomize(model, gen):
    """Weights with real variation (the libraries' inits leave LayerNorms at identity and heads at
    zero, which would hide mistakes)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if p.dim() >= 2:
                fan_in = int(np.prod(p.shape[1:])) if p.dim() != 3 else p.shape[-1]
                std = 0.5 if "position" in name or "pos_embed" in name else 1.0 / math.sqrt(fan_in)
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * std)
            elif leaf == "weight":  # LayerNorm
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))


def round_to(model, dtype):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).to(p.dtype))


def patches_of(pixels):
    """[1, C, H, W] -> [N, C, P, P] raster order, and centre positions [N, 4]."""
    _, c, h, w = pixels.shape
    t = pixels[0].unfold(1, P, P).unfold(2, P, P)  # C, gh, gw, P, P
    gh, gw = t.shape[1], t.shape[2]
    patches = t.permute(1, 2, 0, 3, 4).reshape(gh * gw, c, P, P)
    ys, xs = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    pos = torch.stack([(xs.flatten() + 0.5) * P, (ys.flatten() + 0.5) * P,
                       torch.full((gh * gw,), float(P)), torch.zeros(gh * gw)], dim=1)
    return patches, pos.to(torch.float64)


def aa_taps(cubic, center, scale, n):
    """One axis of F.interpolate(antialias=True, align_corners=False) (PyTorch's
    _compute_weights_aa) for an output cell centred at `center` table cells and `scale` cells
    wide: (first tap, normalised weights). Support 2 cells (cubic, Keys a = -0.5) or 1 (triangle),
    times the scale when shrinking; taps outside the table dropped."""
    center = min(max(center, 0.0), float(n))
    support = (2.0 if cubic else 1.0) * max(scale, 1.0)
    invscale = 1.0 / scale if scale >= 1.0 else 1.0

    def filt(x):
        x = abs(x)
        if not cubic:
            return 1.0 - x if x < 1.0 else 0.0
        a = -0.5
        if x < 1.0:
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        if x < 2.0:
            return (((x - 5.0) * x + 8.0) * x - 4.0) * a
        return 0.0

    first = max(int(center - support + 0.5), 0)  # int() truncates toward zero, as static_cast
    last = min(int(center + support + 0.5), n)
    w = [filt((j - center + 0.5) * invscale) for j in range(first, last)]
    total = sum(w)
    return first, [v / total if total != 0.0 else v for v in w]


def sample_positions_aa(grid_rows, positions, width, height, cubic):
    """The antialiased resize for each token on its own: the G x G table resized (as F.interpolate
    with antialias=True) to a uniform grid of tokens of this token's side, read at its centre."""
    g = int(round(math.sqrt(grid_rows.shape[0])))
    grid = grid_rows.reshape(g, g, -1)
    out = []
    for cx, cy, side, _ in positions.tolist():
        x0, wx = aa_taps(cubic, cx * g / width, side * g / width, g)
        y0, wy = aa_taps(cubic, cy * g / height, side * g / height, g)
        acc = torch.zeros(grid.shape[2], dtype=grid.dtype)
        for j, vy in enumerate(wy):
            row = torch.zeros(grid.shape[2], dtype=grid.dtype)
            for i, vx in enumerate(wx):
                row = row + vx * grid[y0 + j, x0 + i]
            acc = acc + vy * row
        out.append(acc)
    return torch.stack(out)


def check_aa_sampling():
    """The per-token antialiased sampler against F.interpolate(antialias=True) on uniform grids
    that grow, shrink, both, and keep the table's size, for both kernels (float64)."""
    gen = torch.Generator().manual_seed(7)
    for g in (4, 5, 37):
        table = torch.randn((g * g, 6), generator=gen, dtype=torch.float64)
        for gw, gh in ((6, 5), (3, 2), (6, 3), (g, g), (1, 1), (2, 7), (16, 16), (23, 11)):
            patches, pos = patches_of(torch.zeros((1, 1, gh * P, gw * P), dtype=torch.float64))
            for cubic, mode in ((True, "bicubic"), (False, "bilinear")):
                want = interpolate_grid(table, gh * P, gw * P, antialias=True, mode=mode)
                got = sample_positions_aa(table, pos, gw * P, gh * P, cubic)
                close(got, want, f"antialiased sampler vs F.interpolate ({mode}, {g}x{g} -> {gw}x{gh})", 1e-12)


def sample_positions(grid_rows, positions, width, height, mode="bicubic"):
    """The G x G position grid [G*G, D] read for each token: bicubic / bilinear point samples at
    the centres, or bicubic_aa / bilinear_aa (sample_positions_aa) -> [N, D]."""
    if mode.endswith("_aa"):
        return sample_positions_aa(grid_rows, positions, width, height, mode == "bicubic_aa")
    if mode == "bucket":
        return sample_positions_bucket(grid_rows, positions, width, height)
    g = int(round(math.sqrt(grid_rows.shape[0])))
    grid = grid_rows.reshape(1, g, g, -1).permute(0, 3, 1, 2)
    nx = 2.0 * positions[:, 0] / width - 1.0
    ny = 2.0 * positions[:, 1] / height - 1.0
    coords = torch.stack([nx, ny], dim=1).reshape(1, 1, -1, 2).to(grid.dtype)
    s = F.grid_sample(grid, coords, mode=mode, padding_mode="border", align_corners=False)
    return s[0, :, 0, :].t()


def sample_positions_bucket(grid_rows, positions, width, height):
    """Idefics3's lookup for a token of any size, in exact arithmetic: the cell its top-left
    corner's fractional coordinate falls in, floor(G * i / n) for token i of a whole grid of n
    tokens of its size (in integers), else floor(G * edge / extent), clamped to the table."""
    g = int(round(math.sqrt(grid_rows.shape[0])))

    def axis(centre, side, extent):
        edge = centre - side / 2
        n, i = extent / side, edge / side
        N, I = torch.round(n), torch.round(i)
        whole = (N >= 1) & ((n - N).abs() < 1e-6) & ((i - I).abs() < 1e-6) & (I >= 0) & (I < N)
        exact = torch.div(I.long() * g, N.long().clamp(min=1), rounding_mode="floor")
        other = torch.floor(edge / extent * g + 1e-9).long()
        return torch.where(whole, exact, other).clamp(0, g - 1)

    bx = axis(positions[:, 0], positions[:, 2], width)
    by = axis(positions[:, 1], positions[:, 2], height)
    return grid_rows[by * g + bx]


def check_bucket_sampling():
    """The per-token lookup against idefics3_buckets (torch's own bucketize of its float32
    arange) on uniform grids: every n in 1..G+3 and around 2G and 3G, for the tables of Idefics3
    (26), SmolVLM (32), Idefics2 (70) and the fixtures (4). They agree everywhere except where
    i/n = k/G exactly and torch's float32 coordinate lands just below the boundary (one cell
    lower); those are counted and printed. Returns the exact cells for the C++ test
    ([G, n, cells...] rows, flattened)."""
    rows, coincidences, torch_lower = [], 0, 0
    for g in (4, 26, 32, 70):
        assert torch.equal(idefics3_buckets(g, g), torch.arange(g)), g  # the native grid reads the table itself
        table = torch.arange(g * g, dtype=torch.float64).unsqueeze(1)
        for n in sorted(set(range(1, g + 4)) | {2 * g - 1, 2 * g, 2 * g + 1, 3 * g}):
            want = idefics3_buckets(n, g)
            side = 7.0
            centres = (torch.arange(n, dtype=torch.float64) + 0.5) * side
            pos = torch.stack([centres, centres, torch.full((n,), side), torch.zeros(n)], dim=1)
            got = sample_positions_bucket(table, pos, n * side, n * side)[:, 0]
            exact = torch.div(torch.arange(n) * g, n, rounding_mode="floor")
            assert torch.equal(got, (exact * g + exact).to(torch.float64)), (g, n)
            on_boundary = (torch.arange(n) * g) % n == 0
            coincidences += int(on_boundary.sum())
            differ = want != exact
            assert bool((on_boundary[differ]).all()) and bool((want[differ] == exact[differ] - 1).all()), (g, n)
            torch_lower += int(differ.sum())
            rows.append(torch.cat([torch.tensor([g, n]), exact]))
    print(f"bucketize: torch's float32 coordinates land one cell lower at {torch_lower} of {coincidences} "
          f"exact coincidences i/n = k/G (elsewhere they agree)")
    return torch.cat(rows).to(torch.int32)


def foveated_tokens(gen, width, height, n):
    """n tokens at arbitrary centres (some on the border) with sides P * 2^level."""
    levels = torch.randint(0, 3, (n,), generator=gen)
    cx = torch.rand(n, generator=gen, dtype=torch.float64) * width
    cy = torch.rand(n, generator=gen, dtype=torch.float64) * height
    cx[0], cy[0] = 0.5, 0.5
    cx[1], cy[1] = width - 0.25, height - 3.0
    cx[2], cy[2] = width / 2, 0.0
    side = P * (2.0 ** levels.to(torch.float64))
    pos = torch.stack([cx, cy, side, levels.to(torch.float64)], dim=1)
    patches = torch.randn((n, C, P, P), generator=gen, dtype=torch.float64)
    return patches, pos


def raw_image(gen, out):
    """A native-size RGB image (smooth gradients plus noise, every value 0..255), saved as PNG."""
    ys, xs = torch.meshgrid(torch.arange(G * P), torch.arange(G * P), indexing="ij")
    base = torch.stack([xs * 255.0 / (G * P - 1), ys * 255.0 / (G * P - 1), (xs + ys) * 127.0 / (G * P - 1)], dim=2)
    noise = torch.randint(-60, 61, (G * P, G * P, 3), generator=gen).to(torch.float64)
    img = (base + noise).clamp(0, 255).round().to(torch.uint8).numpy()
    from PIL import Image
    Image.fromarray(img, "RGB").save(os.path.join(out, "image.png"))
    return img


def preprocess(img, mean, std, rescale=1.0 / 255.0):
    """HF's image processors at native size (resize and centre crop are the identity there):
    pixel * rescale_factor, then (x - image_mean) / image_std, in float64 -> [1, C, H, W]."""
    x = torch.from_numpy(np.asarray(img)).to(torch.float64).permute(2, 0, 1).unsqueeze(0) * rescale
    m = torch.tensor(mean, dtype=torch.float64).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).view(1, 3, 1, 1)
    return (x - m) / s


CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def preprocessor_config(out, mean, std, processor, **extra):
    cfg = {"image_processor_type": processor, "do_resize": True, "size": {"shortest_edge": G * P},
           "do_center_crop": True, "crop_size": {"height": G * P, "width": G * P}, "do_rescale": True,
           "rescale_factor": 1.0 / 255.0, "do_normalize": True, "image_mean": mean, "image_std": std,
           "resample": 3, **extra}
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def close(a, b, what, tol=1e-9):
    err = (a - b).abs().max().item()
    if err > tol:
        raise SystemExit(f"self-check failed: {what}: max abs error {err}")


# ---- safetensors --------------------------------------------------------------------------------

DTYPES = {torch.float32: ("F32", np.float32), torch.float16: ("F16", np.float16)}


def tensor_bytes(t, dtype):
    t = t.detach().contiguous()
    if dtype == "BF16":  # round to nearest even, as torch's .to(bfloat16)
        u = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2")
        return u.tobytes()
    np_dt = {"F32": "<f4", "F16": "<f2", "I32": "<i4"}[dtype]
    return t.numpy().astype(np_dt).tobytes()


def save_safetensors(path, tensors, metadata=None, dtype="F32"):
    """tensors: {name: torch tensor}; floats are stored as `dtype`, ints as I32."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        dt = "I32" if not t.is_floating_point() else dtype
        b = tensor_bytes(t.to(torch.int32) if dt == "I32" else t.to(torch.float32), dt)
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def f32(t):
    return t.detach().to(torch.float32)


# ---- the models ---------------------------------------------------------------------------------

def hf_cases(vt, has_class, gen, out, proj=None, raw=None, shrink=False, token_proj=None):
    """native / interp / (shrink: a 3x2 grid) / foveated cases for an HF-named vision transformer
    `vt` (float64), and `raw`: (uint8 image, mean, std, rescale) through the family's own
    preprocessing. token_proj: a per-token projector of last_hidden_state (-> `projected`)."""
    cases, meta = {}, {}

    def token_forward(patches, pos, width, height):
        e = vt.embeddings
        x = e.embed_patches(patches) if hasattr(e, "embed_patches") else e.patch_embedding(patches).flatten(1)  # [N, D]
        pw = e.position_embedding.weight
        grid_rows = pw[1:] if has_class else pw
        x = x + sample_positions(grid_rows, pos, width, height, getattr(e, "pos_mode", "bicubic"))
        if has_class:
            x = torch.cat([(e.class_embedding + pw[0]).unsqueeze(0), x], dim=0)
        return vt.run(x.unsqueeze(0))

    def record(name, patches, pos, width, height, hidden, pooled):
        cases[f"{name}.patches"] = f32(patches)
        cases[f"{name}.positions"] = f32(pos)
        k = 1 if has_class else 0
        cases[f"{name}.last_hidden"] = f32(hidden[0, k:])
        if has_class:
            cases[f"{name}.class_token"] = f32(hidden[0, :1])
        if pooled is not None:
            cases[f"{name}.pooled"] = f32(pooled)
        if proj is not None:
            cases[f"{name}.image_embeds"] = f32(proj(pooled))
        if token_proj is not None:
            cases[f"{name}.projected"] = f32(token_proj(hidden[0, k:]))
        meta[f"{name}.image_width"], meta[f"{name}.image_height"] = width, height

    with torch.no_grad():
        px = torch.randn((1, C, G * P, G * P), generator=gen, dtype=torch.float64)
        hidden, pooled = vt(px)
        patches, pos = patches_of(px)
        h2, p2 = token_forward(patches, pos, G * P, G * P)
        close(h2, hidden, "token-level forward vs module forward (native grid)")
        record("native", patches, pos, G * P, G * P, hidden, pooled)

        W, H = 6 * P, 5 * P
        px = torch.randn((1, C, H, W), generator=gen, dtype=torch.float64)
        hidden, pooled = vt(px, interpolate=True)
        patches, pos = patches_of(px)
        h2, _ = token_forward(patches, pos, W, H)
        close(h2, hidden, "token sampling vs HF interpolate_pos_encoding (6x5 grid)")
        record("interp", patches, pos, W, H, hidden, pooled)
        names = "native,interp"
        if shrink:
            W, H = 3 * P, 2 * P
            px = torch.randn((1, C, H, W), generator=gen, dtype=torch.float64)
            hidden, pooled = vt(px, interpolate=True)
            patches, pos = patches_of(px)
            h2, _ = token_forward(patches, pos, W, H)
            close(h2, hidden, "token sampling vs HF's position resize (3x2 grid)")
            record("shrink", patches, pos, W, H, hidden, pooled)
            names += ",shrink"

        W, H = 77, 53
        patches, pos = foveated_tokens(gen, W, H, 23)
        hidden, pooled = token_forward(patches, pos, W, H)
        record("foveated", patches, pos, W, H, hidden, pooled)
        names += ",foveated"
        if raw is not None:
            px = preprocess(*raw)
            hidden, pooled = vt(px)
            patches, pos = patches_of(px)
            record("raw", patches, pos, G * P, G * P, hidden, pooled)
            meta["raw.image"] = "image.png"
            names += ",raw"
    meta["cases"] = names
    save_safetensors(os.path.join(out, "cases.safetensors"), cases, meta)


def make_clip(out, gen, full, raw_gen):
    os.makedirs(out, exist_ok=True)
    model = ClipModel(24) if full else ClipVisionModel()
    model = model.double()
    randomize(model, gen)
    dtype = "F16" if full else "F32"
    if full:
        round_to(model, torch.float16)
    vision = {"hidden_size": D, "intermediate_size": MLP, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "image_size": G * P, "patch_size": P, "num_channels": C,
              "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5, "model_type": "clip_vision_model"}
    if full:
        cfg = {"model_type": "clip", "architectures": ["CLIPModel"], "projection_dim": 24,
               "text_config": {"hidden_size": D}, "vision_config": vision}
    else:
        cfg = dict(vision, architectures=["CLIPVisionModel"])
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt"}, dtype)
    # clip_full's preprocessing deliberately differs from CLIP's defaults, so its raw case can
    # only pass when preprocessor_config.json is read.
    mean, std = ([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]) if full else (CLIP_MEAN, CLIP_STD)
    preprocessor_config(out, mean, std, "CLIPImageProcessor")
    img = raw_image(raw_gen, out)
    hf_cases(model.vision_model, True, gen, out, model.visual_projection if full else None, (img, mean, std))


def make_siglip(out, gen, raw_gen):
    os.makedirs(out, exist_ok=True)
    model = SiglipVisionModel().double()
    randomize(model, gen)
    round_to(model, torch.bfloat16)
    cfg = {"model_type": "siglip_vision_model", "architectures": ["SiglipVisionModel"], "hidden_size": D,
           "intermediate_size": MLP, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
           "image_size": G * P, "patch_size": P, "num_channels": C, "hidden_act": "gelu_pytorch_tanh",
           "layer_norm_eps": 1e-6}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt"}, "BF16")
    preprocessor_config(out, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], "SiglipImageProcessor")
    img = raw_image(raw_gen, out)
    hf_cases(model.vision_model, False, gen, out, None, (img, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]))


def make_siglip2(out, gen):
    """HF Siglip2VisionModel (NaFlex): linear patch embedding, bilinear position resize with
    antialias=True, F32. The interp case upsamples the table (6x5 from 4x4), the shrink case
    shrinks it (3x2), where antialias=True widens the kernel."""
    os.makedirs(out, exist_ok=True)
    model = SiglipVisionModel(Siglip2Embeddings).double()
    randomize(model, gen)
    cfg = {"model_type": "siglip2_vision_model", "architectures": ["Siglip2VisionModel"], "hidden_size": D,
           "intermediate_size": MLP, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
           "num_patches": G * G, "patch_size": P, "num_channels": C, "hidden_act": "gelu_pytorch_tanh",
           "layer_norm_eps": 1e-6}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt"}, "F32")
    # max_num_patches = the table's patches: the NaFlex processor keeps the G·P-square image at its
    # size, so the raw case (the image at native size) is what `fovea encode --uniform` runs.
    preprocessor_config(out, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], "Siglip2ImageProcessor", max_num_patches=G * G)
    img = raw_image(gen, out)
    hf_cases(model.vision_model, False, gen, out, None, (img, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]), shrink=True)


def make_paligemma(out, gen):
    """PaliGemmaForConditionalGeneration's layout: the SigLIP tower without a pooling head under
    `vision_tower.vision_model.`, `multi_modal_projector.linear` (D -> E = 24, with bias) and a
    language-model tensor, BF16, with the nested config.json; `projected` is get_image_features:
    linear(last_hidden_state) / sqrt(text_config.hidden_size)."""
    os.makedirs(out, exist_ok=True)
    E = 24
    tower = SiglipVisionModel(head=False).double()
    lin = nn.Linear(D, E).double()
    randomize(tower, gen)
    randomize(lin, gen)
    round_to(tower, torch.bfloat16)
    round_to(lin, torch.bfloat16)
    vc = {"model_type": "siglip_vision_model", "hidden_size": D, "intermediate_size": MLP, "num_hidden_layers": LAYERS,
          "num_attention_heads": HEADS, "image_size": G * P, "patch_size": P, "num_channels": C,
          "projection_dim": E, "vision_use_head": False}
    cfg = {"architectures": ["PaliGemmaForConditionalGeneration"], "model_type": "paligemma", "projection_dim": E,
           "hidden_size": E, "vision_config": vc, "text_config": {"model_type": "gemma", "hidden_size": E}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    state = {"vision_tower." + k: v for k, v in tower.state_dict().items()}
    state.update({"multi_modal_projector.linear." + k: v for k, v in lin.state_dict().items()})
    state["language_model.model.embed_tokens.weight"] = torch.randn((32, E), generator=gen, dtype=torch.float64)
    save_safetensors(os.path.join(out, "model.safetensors"), state, {"format": "pt"}, "BF16")
    preprocessor_config(out, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], "SiglipImageProcessor")
    img = raw_image(gen, out)
    hf_cases(tower.vision_model, False, gen, out, None, (img, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
             token_proj=lambda h: lin(h) / math.sqrt(E))


def make_idefics3(out, gen):
    """An Idefics3ForConditionalGeneration checkpoint's layout (SmolVLM's too): the SigLIP-named
    tower under `model.vision_model.` with bucketized positions, the connector
    (`model.connector.modality_projection.proj`, pixel shuffle + linear) and language-model
    tensors to ignore, F32, with the nested config.json transformers writes. The interp case's
    6x5 grid puts column 3 of 6 exactly on a table boundary (3/6 = 2/4); the shrink case (3x2)
    reads 6 of the 16 cells."""
    os.makedirs(out, exist_ok=True)
    model = SiglipVisionModel(Idefics3Embeddings, head=False).double()
    randomize(model, gen)
    vc = {"model_type": "idefics3_vision", "hidden_size": D, "intermediate_size": MLP, "num_hidden_layers": LAYERS,
          "num_attention_heads": HEADS, "image_size": G * P, "patch_size": P, "num_channels": C,
          "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6}
    cfg = {"architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3", "scale_factor": 2,
           "vision_config": vc, "text_config": {"model_type": "llama", "hidden_size": 16}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    state = {"model." + k: v for k, v in model.state_dict().items()}
    tg = torch.Generator().manual_seed(7)
    for name, shape in (("model.connector.modality_projection.proj.weight", (16, 4 * D)),
                        ("model.text_model.embed_tokens.weight", (32, 16)), ("lm_head.weight", (32, 16))):
        state[name] = torch.randn(shape, generator=tg, dtype=torch.float64)
    save_safetensors(os.path.join(out, "model.safetensors"), state, {"format": "pt"}, "F32")
    preprocessor_config(out, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], "Idefics3ImageProcessor")
    img = raw_image(gen, out)
    hf_cases(model.vision_model, False, gen, out, None, (img, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]), shrink=True)
    save_safetensors(os.path.join(out, "buckets.safetensors"), {"buckets": check_bucket_sampling()},
                     {"layout": "rows of [G, n, cell of patch 0 .. n-1]: Idefics3VisionEmbeddings' bucketize"})


def make_torchvision(out, gen, raw_gen):
    os.makedirs(out, exist_ok=True)
    model = torchvision.models.VisionTransformer(image_size=G * P, patch_size=P, num_layers=LAYERS,
                                                 num_heads=HEADS, hidden_dim=D, mlp_dim=MLP, num_classes=10)
    model = model.double().eval()
    randomize(model, gen)
    # torchvision checkpoints carry no config; fovea reads the head count from config.json when
    # present (else it guesses from the width), so the fixture states it.
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"architectures": ["torchvision.models.VisionTransformer"], "num_heads": HEADS}, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt"}, "F32")

    cases, meta = {}, {}

    def module_forward(px):  # VisionTransformer.forward up to the classifier, in its own code
        x = model._process_input(px)
        x = torch.cat([model.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = model.encoder(x)
        return x, model.heads(x[:, 0])

    def token_forward(patches, pos, width, height):
        x = model.conv_proj(patches).flatten(1)
        pe = model.encoder.pos_embedding[0]
        x = x + sample_positions(pe[1:], pos, width, height)
        x = torch.cat([model.class_token[0] + pe[:1], x], dim=0).unsqueeze(0)
        x = model.encoder.ln(model.encoder.layers(x))
        return x, model.heads(x[:, 0])

    def record(name, patches, pos, width, height, hidden, logits):
        cases[f"{name}.patches"] = f32(patches)
        cases[f"{name}.positions"] = f32(pos)
        cases[f"{name}.last_hidden"] = f32(hidden[0, 1:])
        cases[f"{name}.class_token"] = f32(hidden[0, :1])
        cases[f"{name}.pooled"] = f32(hidden[0, :1])
        cases[f"{name}.logits"] = f32(logits)
        meta[f"{name}.image_width"], meta[f"{name}.image_height"] = width, height

    with torch.no_grad():
        px = torch.randn((1, C, G * P, G * P), generator=gen, dtype=torch.float64)
        hidden, logits = module_forward(px)
        patches, pos = patches_of(px)
        h2, _ = token_forward(patches, pos, G * P, G * P)
        close(h2, hidden, "torchvision token-level forward vs VisionTransformer (native grid)")
        record("native", patches, pos, G * P, G * P, hidden, logits)
        W, H = 77, 53
        patches, pos = foveated_tokens(gen, W, H, 23)
        hidden, logits = token_forward(patches, pos, W, H)
        record("foveated", patches, pos, W, H, hidden, logits)
        # From raw pixels through torchvision's own transforms (ToTensor + Normalize with
        # ImageNet's mean and std, as every torchvision ViT weight set's transforms()); no
        # preprocessor_config.json: fovea must know the ImageNet defaults itself.
        img = raw_image(raw_gen, out)
        import torchvision.transforms.functional as TF
        px = torch.from_numpy(img).permute(2, 0, 1).to(torch.float64) / 255.0
        px = TF.normalize(px, IMAGENET_MEAN, IMAGENET_STD).unsqueeze(0)
        hidden, logits = module_forward(px)
        patches, pos = patches_of(px)
        record("raw", patches, pos, G * P, G * P, hidden, logits)
        meta["raw.image"] = "image.png"
    meta["cases"] = "native,foveated,raw"
    save_safetensors(os.path.join(out, "cases.safetensors"), cases, meta)


# ---- GGUF (llama.cpp mmproj files), written by hand after the spec ------------------------------
# https://github.com/ggml-org/ggml/blob/master/docs/gguf.md: "GGUF", u32 version 3, u64 tensor
# count, u64 key/value count, the key/values, the tensor infos (name, u32 n_dims, u64 ne[] in
# ggml order = row-major dims reversed, u32 ggml type, u64 offset into the data), padding to the
# alignment, the data (each tensor padded to the alignment). No `gguf` package is used.

GGUF_U32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 6, 7, 8, 9
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, v):
    if kind == GGUF_U32:
        return struct.pack("<I", v)
    if kind == GGUF_F32:
        return struct.pack("<f", v)
    if kind == GGUF_BOOL:
        return struct.pack("<B", 1 if v else 0)
    if kind == GGUF_STRING:
        return gguf_str(v)
    elem, items = v
    return struct.pack("<IQ", elem, len(items)) + b"".join(gguf_value(elem, x) for x in items)


def f16_round(x):
    return torch.from_numpy(np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64))


def ggml_encode(t, kind):
    """(bytes, the values as stored, float64) of a tensor stored as ggml type `kind`."""
    t = t.detach().to(torch.float64).contiguous()
    if kind == GGML_F32:
        a = t.numpy().astype("<f4")
        return a.tobytes(), torch.from_numpy(a.astype(np.float64)).view(t.shape)
    if kind == GGML_F16:
        a = t.numpy().astype("<f2")
        return a.tobytes(), torch.from_numpy(a.astype(np.float64)).view(t.shape)
    if kind == GGML_BF16:
        b = t.to(torch.float32).to(torch.bfloat16)
        return b.view(torch.int16).numpy().astype("<i2").tobytes(), b.to(torch.float64).view(t.shape)
    assert kind == GGML_Q8_0 and t.shape[-1] % 32 == 0
    # ggml's quantize_row_q8_0_ref: per block of 32, d = max|x| / 127, q = roundf(x / d), d as f16.
    x = t.reshape(-1, 32).numpy()
    d = np.abs(x).max(axis=1) / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    v = x * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)
    d16 = d.astype("<f2")
    out = b"".join(d16[i].tobytes() + q[i].tobytes() for i in range(len(q)))
    deq = d16.astype(np.float64)[:, None] * q.astype(np.float64)
    return out, torch.from_numpy(deq).view(t.shape)


def save_gguf(path, kvs, tensors, alignment=32):
    """kvs: [(key, gguf type, value)]; tensors: [(name, data bytes, row-major shape, ggml type)]."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, kind, v in kvs:
        head += gguf_str(k) + struct.pack("<I", kind) + gguf_value(kind, v)
    offset, infos, blobs = 0, b"", []
    for name, data, shape, kind in tensors:
        ne = list(reversed(shape))
        infos += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", kind, offset)
        pad = (-len(data)) % alignment
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    body = head + infos
    body += b"\0" * ((-len(body)) % alignment)
    with open(path, "wb") as f:
        f.write(body + b"".join(blobs))


def read_gguf_tensor_names(path):
    """The tensor names of a GGUF file, read back (a self-check of the writer)."""
    with open(path, "rb") as f:
        b = f.read()
    assert b[:4] == b"GGUF"
    _, nt, nkv = struct.unpack_from("<IQQ", b, 4)
    pos = 24

    def string(pos):
        n = struct.unpack_from("<Q", b, pos)[0]
        return b[pos + 8:pos + 8 + n].decode(), pos + 8 + n

    def skip(kind, pos):
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        if kind == GGUF_STRING:
            return string(pos)[1]
        if kind == GGUF_ARRAY:
            elem, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            for _ in range(n):
                pos = skip(elem, pos)
            return pos
        return pos + sizes[kind]

    for _ in range(nkv):
        _, pos = string(pos)
        kind = struct.unpack_from("<I", b, pos)[0]
        pos = skip(kind, pos + 4)
    names = []
    for _ in range(nt):
        name, pos = string(pos)
        nd = struct.unpack_from("<I", b, pos)[0]
        pos += 4 + 8 * nd + 12
        names.append(name)
    return names


def vision_keys(image_mean, image_std, blocks, eps, use_gelu, extra=()):
    return [("general.architecture", GGUF_STRING, "clip"),
            ("clip.has_text_encoder", GGUF_BOOL, False),
            ("clip.has_vision_encoder", GGUF_BOOL, True),
            ("general.file_type", GGUF_U32, 1),
            ("clip.vision.image_size", GGUF_U32, G * P),
            ("clip.vision.patch_size", GGUF_U32, P),
            ("clip.vision.embedding_length", GGUF_U32, D),
            ("clip.vision.feed_forward_length", GGUF_U32, MLP),
            ("clip.vision.projection_dim", GGUF_U32, 0),
            ("clip.vision.attention.head_count", GGUF_U32, HEADS),
            ("clip.vision.attention.layer_norm_epsilon", GGUF_F32, eps),
            ("clip.vision.block_count", GGUF_U32, blocks),
            ("clip.vision.image_mean", GGUF_ARRAY, (GGUF_F32, image_mean)),
            ("clip.vision.image_std", GGUF_ARRAY, (GGUF_F32, image_std)),
            ("clip.use_gelu", GGUF_BOOL, use_gelu)] + list(extra)


def gguf_tower_tensors(vt, blocks, legacy_ffn, kind2d, pre_ln, post_ln):
    """The vision tower's tensors under llama.cpp's names; weights replaced in `vt` by the values
    as stored. legacy_ffn: the legacy converter's names (HF fc1 -> ffn_down, fc2 -> ffn_up)."""
    out = []

    def add(name, param, kind):
        data, stored = ggml_encode(param, kind)
        with torch.no_grad():
            param.copy_(stored.view(param.shape))
        out.append((name, data, list(param.shape), kind))

    e = vt.embeddings
    add("v.patch_embd.weight", e.patch_embedding.weight, GGML_F16)  # 4-D: always F16 (the converter)
    if e.patch_embedding.bias is not None:
        add("v.patch_embd.bias", e.patch_embedding.bias, GGML_F32)
    if hasattr(e, "class_embedding"):
        add("v.class_embd", e.class_embedding, GGML_F32)
    add("v.position_embd.weight", e.position_embedding.weight, GGML_F32)
    if pre_ln:
        add("v.pre_ln.weight", vt.pre_layrnorm.weight, GGML_F32)
        add("v.pre_ln.bias", vt.pre_layrnorm.bias, GGML_F32)
    up, down = ("ffn_down", "ffn_up") if legacy_ffn else ("ffn_up", "ffn_down")
    for i in range(blocks):
        l = vt.encoder.layers[i]
        b = f"v.blk.{i}."
        for n, lin in (("attn_q", l.self_attn.q_proj), ("attn_k", l.self_attn.k_proj),
                       ("attn_v", l.self_attn.v_proj), ("attn_out", l.self_attn.out_proj),
                       (up, l.mlp.fc1), (down, l.mlp.fc2)):
            add(b + n + ".weight", lin.weight, kind2d)
            add(b + n + ".bias", lin.bias, GGML_F32)
        for n, ln in (("ln1", l.layer_norm1), ("ln2", l.layer_norm2)):
            add(b + n + ".weight", ln.weight, GGML_F32)
            add(b + n + ".bias", ln.bias, GGML_F32)
    if post_ln:
        add("v.post_ln.weight", vt.post_layernorm.weight, GGML_F32)
        add("v.post_ln.bias", vt.post_layernorm.bias, GGML_F32)
    return out, add


def gguf_cases(out, img, mean, std, forward, tokens, has_class, proj=None):  # also HF LLaVA's
    """raw: the native image through the GGUF's mean/std and `forward` (the reference);
    foveated: mixed-size tokens through `tokens` (token-level forward)."""
    cases, meta = {}, {}
    gen = torch.Generator().manual_seed(7)
    k = 1 if has_class else 0

    def record(name, patches, pos, width, height, hidden):
        cases[f"{name}.patches"] = f32(patches)
        cases[f"{name}.positions"] = f32(pos)
        cases[f"{name}.last_hidden"] = f32(hidden[0, k:])
        if has_class:
            cases[f"{name}.class_token"] = f32(hidden[0, :1])
        if proj is not None:
            cases[f"{name}.projected"] = f32(proj(hidden[0, k:]))
        meta[f"{name}.image_width"], meta[f"{name}.image_height"] = width, height

    with torch.no_grad():
        px = preprocess(img, mean, std)
        hidden = forward(px)
        patches, pos = patches_of(px)
        close(tokens(patches, pos, G * P, G * P), hidden, "GGUF tower: token-level forward vs module forward")
        record("raw", patches, pos, G * P, G * P, hidden)
        W, H = 77, 53
        patches, pos = foveated_tokens(gen, W, H, 23)
        record("foveated", patches, pos, W, H, tokens(patches, pos, W, H))
    meta["cases"] = "raw,foveated"
    meta["raw.image"] = "image.png"
    save_safetensors(os.path.join(out, "cases.safetensors"), cases, meta)


def make_gguf_llava(out, gen):
    """A LLaVA-1.5-style mmproj as llama.cpp's legacy converter (convert_image_encoder_to_gguf.py
    --llava-projector) writes it: a 3-block CLIP tower of which the last block is dropped
    (block_count = 2: LLaVA reads HF's hidden_states[-2]), no post_layernorm, HF's fc1/fc2 stored
    as ffn_down/ffn_up, the projector multi_modal_projector.linear_1/2 as mm.0/mm.2. Deviation:
    mm.0.weight is stored as Q8_0 (the converter writes F16) so the reader's Q8_0 path is covered.
    Reference: HF LlavaForConditionalGeneration.get_image_features, i.e.
    projector(vision_tower(pixels, output_hidden_states=True).hidden_states[-2][:, 1:])."""
    os.makedirs(out, exist_ok=True)
    L_FULL, E1, E = 3, 48, 40
    tower = ClipVisionModel(L_FULL).double()
    proj = nn.Sequential(nn.Linear(D, E1), nn.GELU(), nn.Linear(E1, E)).double()  # linear_1, act, linear_2
    randomize(tower, gen)
    randomize(proj, gen)
    vt = tower.vision_model
    tensors, add = gguf_tower_tensors(vt, L_FULL - 1, legacy_ffn=True, kind2d=GGML_F16, pre_ln=True, post_ln=False)
    add("mm.0.weight", proj[0].weight, GGML_Q8_0)
    add("mm.0.bias", proj[0].bias, GGML_F32)
    add("mm.2.weight", proj[2].weight, GGML_F16)
    add("mm.2.bias", proj[2].bias, GGML_F32)
    kvs = vision_keys(CLIP_MEAN, CLIP_STD, L_FULL - 1, 1e-5, False, [
        ("clip.has_llava_projector", GGUF_BOOL, True),
        ("clip.projector_type", GGUF_STRING, "mlp"),
        ("general.name", GGUF_STRING, "fovea-test-llava"),
        ("general.description", GGUF_STRING, "image encoder for LLaVA")])
    save_gguf(os.path.join(out, "mmproj.gguf"), kvs, tensors)
    assert read_gguf_tensor_names(os.path.join(out, "mmproj.gguf")) == [t[0] for t in tensors]
    img = raw_image(gen, out)
    forward, tokens = llava_reference(vt, L_FULL - 1)
    gguf_cases(out, img, CLIP_MEAN, CLIP_STD, forward, tokens, True, proj)


def llava_reference(vt, blocks):
    """HF LLaVA's vision features: hidden_states[blocks] of the tower (states[0] is the
    pre_layrnorm output), module-level and token-level."""
    def forward(px):
        h = vt.pre_layrnorm(vt.embeddings(px))
        for l in vt.encoder.layers[:blocks]:
            h = l(h)
        return h

    def tokens(patches, pos, width, height):
        e = vt.embeddings
        x = e.patch_embedding(patches).flatten(1)
        pw = e.position_embedding.weight
        x = x + sample_positions(pw[1:], pos, width, height)
        x = torch.cat([(e.class_embedding + pw[0]).unsqueeze(0), x], dim=0).unsqueeze(0)
        x = vt.pre_layrnorm(x)
        for l in vt.encoder.layers[:blocks]:
            x = l(x)
        return x

    return forward, tokens


def make_hf_llava(out, gen):
    """An HF LlavaForConditionalGeneration checkpoint (transformers' pre-4.52 names, as the
    llava-hf models on the Hub have them): vision_tower.vision_model.* (a 3-block CLIP tower,
    post_layernorm included but unused), multi_modal_projector.linear_1/2, a language-model stub;
    F16; config.json with vision_feature_layer -2 and the default select strategy. Reference:
    get_image_features = projector(hidden_states[-2][:, 1:])."""
    os.makedirs(out, exist_ok=True)
    L_FULL, E1, E = 3, 48, 40
    tower = ClipVisionModel(L_FULL).double()
    proj = nn.Sequential(nn.Linear(D, E1), nn.GELU(), nn.Linear(E1, E)).double()
    randomize(tower, gen)
    randomize(proj, gen)
    round_to(tower, torch.float16)
    round_to(proj, torch.float16)
    vt = tower.vision_model
    state = {f"vision_tower.{k}": v for k, v in tower.state_dict().items()}
    state["multi_modal_projector.linear_1.weight"] = proj[0].weight
    state["multi_modal_projector.linear_1.bias"] = proj[0].bias
    state["multi_modal_projector.linear_2.weight"] = proj[2].weight
    state["multi_modal_projector.linear_2.bias"] = proj[2].bias
    state["language_model.model.embed_tokens.weight"] = torch.randn((16, E), generator=gen, dtype=torch.float64)
    state["language_model.lm_head.weight"] = torch.randn((16, E), generator=gen, dtype=torch.float64)
    save_safetensors(os.path.join(out, "model.safetensors"), state, {"format": "pt"}, "F16")
    vision = {"hidden_size": D, "intermediate_size": MLP, "num_hidden_layers": L_FULL, "num_attention_heads": HEADS,
              "image_size": G * P, "patch_size": P, "num_channels": C, "hidden_act": "quick_gelu",
              "layer_norm_eps": 1e-5, "model_type": "clip_vision_model"}
    cfg = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "vision_feature_layer": -2,
           "vision_feature_select_strategy": "default", "projector_hidden_act": "gelu", "image_token_index": 15,
           "vision_config": vision, "text_config": {"model_type": "llama", "hidden_size": E}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    preprocessor_config(out, CLIP_MEAN, CLIP_STD, "CLIPImageProcessor")
    img = raw_image(gen, out)
    forward, tokens = llava_reference(vt, L_FULL - 1)
    gguf_cases(out, img, CLIP_MEAN, CLIP_STD, forward, tokens, True, proj)


def make_gguf_siglip(out, gen):
    """A SigLIP tower named as convert_hf_to_gguf.py --mmproj names it (fc1 -> ffn_up), with
    post_ln, BF16 matrices, general.alignment 64 and no projector. Reference: HF SigLIP's
    last_hidden_state (after post_layernorm), which is also what clip.cpp computes."""
    os.makedirs(out, exist_ok=True)
    model = SiglipVisionModel().double()
    randomize(model, gen)
    vt = model.vision_model
    tensors, _ = gguf_tower_tensors(vt, LAYERS, legacy_ffn=False, kind2d=GGML_BF16, pre_ln=False, post_ln=True)
    kvs = vision_keys([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], LAYERS, 1e-6, True,
                      [("general.alignment", GGUF_U32, 64), ("general.name", GGUF_STRING, "fovea-test-siglip")])
    save_gguf(os.path.join(out, "mmproj.gguf"), kvs, tensors, alignment=64)
    img = raw_image(gen, out)

    def tokens(patches, pos, width, height):
        e = vt.embeddings
        x = e.patch_embedding(patches).flatten(1) + sample_positions(e.position_embedding.weight, pos, width, height)
        return vt.post_layernorm(vt.encoder(x.unsqueeze(0)))

    gguf_cases(out, img, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], lambda px: vt(px)[0], tokens, False)


# ---- HF ViT, HF DINOv2 and timm ViT (plain torch modules under the real names) -------------------
# HF: transformers' modeling_vit.py (ViTModel) and modeling_dinov2.py (Dinov2Model); timm:
# timm/models/vision_transformer.py (VisionTransformer, Block, Attention with fused qkv).

class HfSelfAttention(nn.Module):  # ViTSelfAttention / Dinov2SelfAttention (eager)
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (f(x).view(b, t, self.heads, self.hd).transpose(1, 2) for f in (self.query, self.key, self.value))
        w = F.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.hd ** -0.5, dim=-1)
        return torch.matmul(w, v).transpose(1, 2).reshape(b, t, d)


class Dense(nn.Module):  # ViTSelfOutput / ViTIntermediate / ViTOutput / ViTPooler: a `dense` Linear
    def __init__(self, i, o):
        super().__init__()
        self.dense = nn.Linear(i, o)


class HfAttention(nn.Module):  # ViTAttention / Dinov2Attention
    def __init__(self, d, heads):
        super().__init__()
        self.attention = HfSelfAttention(d, heads)
        self.output = Dense(d, d)

    def forward(self, x):
        return self.output.dense(self.attention(x))


class HfVitLayer(nn.Module):  # ViTLayer: pre-norm, exact GELU
    def __init__(self, eps):
        super().__init__()
        self.attention = HfAttention(D, HEADS)
        self.intermediate = Dense(D, MLP)
        self.output = Dense(MLP, D)
        self.layernorm_before = nn.LayerNorm(D, eps=eps)
        self.layernorm_after = nn.LayerNorm(D, eps=eps)

    def forward(self, x):
        x = x + self.attention(self.layernorm_before(x))
        return x + self.output.dense(F.gelu(self.intermediate.dense(self.layernorm_after(x))))


class LayerScale(nn.Module):  # Dinov2LayerScale
    def __init__(self):
        super().__init__()
        self.lambda1 = nn.Parameter(torch.ones(D))


SWIGLU_H = (int(MLP * 2 / 3) + 7) // 8 * 8  # Dinov2SwiGLUFFN's hidden width for mlp_ratio = MLP / D: 48


class GluMlp(nn.Module):
    """A SwiGLU MLP: `fc_in` gives [x1 | x2], `fc_out` reads silu(x1) * x2. HF Dinov2SwiGLUFFN
    names them weights_in / weights_out, timm's SwiGLUPacked (GluMlp, gate_last=False) fc1 / fc2."""

    def __init__(self, names):
        super().__init__()
        self.names = names
        setattr(self, names[0], nn.Linear(D, 2 * SWIGLU_H))
        setattr(self, names[1], nn.Linear(SWIGLU_H, D))

    def forward(self, x):
        x1, x2 = getattr(self, self.names[0])(x).chunk(2, dim=-1)
        return getattr(self, self.names[1])(F.silu(x1) * x2)


class Dinov2Layer(nn.Module):
    def __init__(self, eps, swiglu=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attention = HfAttention(D, HEADS)
        self.layer_scale1 = LayerScale()
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = GluMlp(("weights_in", "weights_out")) if swiglu else Mlp(D, MLP, F.gelu)
        self.layer_scale2 = LayerScale()

    def forward(self, x):
        x = x + self.layer_scale1.lambda1 * self.attention(self.norm1(x))
        return x + self.layer_scale2.lambda1 * self.mlp(self.norm2(x))


class HfVitEmbeddings(nn.Module):  # ViTEmbeddings / Dinov2Embeddings / Dinov2WithRegistersEmbeddings
    def __init__(self, mask_token, registers=0):
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 1, D))
        if mask_token:
            self.mask_token = nn.Parameter(torch.zeros(1, D))
        if registers:
            self.register_tokens = nn.Parameter(torch.zeros(1, registers, D))
        self.patch_embeddings = nn.Module()
        self.patch_embeddings.projection = nn.Conv2d(C, D, kernel_size=P, stride=P)
        self.position_embeddings = nn.Parameter(torch.randn(1, G * G + 1, D))

    def forward(self, pixels, interpolate=False):
        _, _, h, w = pixels.shape
        x = self.patch_embeddings.projection(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        pos = self.position_embeddings[0]
        if interpolate and not (h == w == G * P):  # interpolate_pos_encoding (size=, bicubic)
            # Dinov2WithRegisters resizes with antialias=True; ViTModel and Dinov2Model without.
            aa = hasattr(self, "register_tokens")
            pos = torch.cat([pos[:1], interpolate_grid(pos[1:], h, w, antialias=aa)], dim=0)
        x = x + pos.unsqueeze(0)
        if hasattr(self, "register_tokens"):  # after the positions, between class and patch tokens
            x = torch.cat([x[:, :1], self.register_tokens.expand(x.shape[0], -1, -1), x[:, 1:]], dim=1)
        return x


class HfVitModel(nn.Module):
    """ViTModel (dinov2=False; `pooler.dense` + tanh when pooler) or Dinov2Model (dinov2=True:
    norm1/norm2, mlp.fc1/fc2, layer scale, mask_token; pooler_output = the normed class token).
    Outputs (last_hidden_state, pooler_output, logits=None)."""
    def __init__(self, dinov2, pooler=False, registers=0, swiglu=False):
        super().__init__()
        eps = 1e-6 if dinov2 else 1e-12
        self.registers = registers
        self.pos_mode = "bicubic_aa" if registers else "bicubic"  # Dinov2WithRegisters: antialias=True
        self.embeddings = HfVitEmbeddings(dinov2, registers)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList([Dinov2Layer(eps, swiglu) if dinov2 else HfVitLayer(eps) for _ in range(LAYERS)])
        self.layernorm = nn.LayerNorm(D, eps=eps)
        if pooler:
            self.pooler = Dense(D, D)

    def grid(self):
        return self.embeddings.position_embeddings[0, 1:]

    def cls(self):
        return self.embeddings.cls_token[0, 0] + self.embeddings.position_embeddings[0, 0]

    def register_rows(self):
        return self.embeddings.register_tokens[0]

    def patch(self, patches):
        return self.embeddings.patch_embeddings.projection(patches).flatten(1)

    def run(self, x):
        for l in self.encoder.layer:
            x = l(x)
        h = self.layernorm(x)
        pooled = torch.tanh(self.pooler.dense(h[:, 0])) if hasattr(self, "pooler") else h[:, 0]
        return h, pooled, None

    def forward(self, pixels, interpolate=False):
        return self.run(self.embeddings(pixels, interpolate))


class TimmAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads, self.hd = HEADS, D // HEADS
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.hd ** -0.5) @ k.transpose(-2, -1)
        return self.proj((attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c))


class TimmLayerScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(D))

    def forward(self, x):
        return x * self.gamma


class TimmBlock(nn.Module):  # ls1 / ls2 are nn.Identity in vit_* (no layer scale)
    def __init__(self, eps=1e-6, act=F.gelu, swiglu=False):
        """swiglu: vit_giant_patch14_dinov2's block (SwiGLUPacked MLP, layer scale ls1 / ls2)."""
        super().__init__()
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attn = TimmAttention()
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = GluMlp(("fc1", "fc2")) if swiglu else Mlp(D, MLP, act)
        if swiglu:
            self.ls1, self.ls2 = TimmLayerScale(), TimmLayerScale()

    def forward(self, x):
        ls1 = getattr(self, "ls1", lambda y: y)
        ls2 = getattr(self, "ls2", lambda y: y)
        x = x + ls1(self.attn(self.norm1(x)))
        return x + ls2(self.mlp(self.norm2(x)))


class TimmAttnPool(nn.Module):
    """timm's AttentionPoolLatent (global_pool='map', the SigLIP towers): one learned latent
    query attends over every token (q from the latent, k|v from one `kv` linear), then `proj`,
    and x + mlp(norm(x))."""

    def __init__(self, eps, act):
        super().__init__()
        self.heads, self.hd = HEADS, D // HEADS
        self.latent = nn.Parameter(torch.zeros(1, 1, D))
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * D)
        self.proj = nn.Linear(D, D)
        self.norm = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(D, MLP, act)

    def forward(self, x):
        b, n, c = x.shape
        q = self.q(self.latent.expand(b, -1, -1)).reshape(b, 1, self.heads, self.hd).transpose(1, 2)
        k, v = self.kv(x).reshape(b, n, 2, self.heads, self.hd).permute(2, 0, 3, 1, 4).unbind(0)
        attn = ((q * self.hd ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
        y = self.proj((attn @ v).transpose(1, 2).reshape(b, 1, c))
        y = y + self.mlp(self.norm(y))
        return y[:, 0]


class TimmVit(nn.Module):  # VisionTransformer(class_token=True, global_pool="token")
    """clip=True is timm's CLIP image tower (vit_*_clip_*: pre_norm=True, so norm_pre after the
    position embedding and no patch-embedding bias; norm_layer=nn.LayerNorm, eps 1e-5;
    act_layer quick_gelu in the *_clip_quickgelu_* models)."""

    def __init__(self, classes, clip=False, registers=0, siglip=False, swiglu=False):
        """siglip=True: vit_*_siglip_* (class_token=False, global_pool='map': `attn_pool`, and
        act_layer gelu_tanh as model_args may set it)."""
        super().__init__()
        eps, act = (1e-5, quick_gelu) if clip else (1e-6, gelu_tanh if siglip else F.gelu)
        self.registers = registers  # vit_*_reg4_dinov2: reg_token, no_embed_class (no prefix positions)
        self.has_class = not siglip
        self.pos_mode = "bicubic_aa"  # resample_abs_pos_embed: bicubic, antialias=True
        if self.has_class:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        if registers:
            self.reg_token = nn.Parameter(torch.zeros(1, registers, D))
        self.pos_embed = nn.Parameter(torch.zeros(1, G * G + (0 if registers or siglip else 1), D))
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(C, D, kernel_size=P, stride=P, bias=not clip)
        if clip:
            self.norm_pre = nn.LayerNorm(D, eps=eps)
        self.blocks = nn.Sequential(*[TimmBlock(eps, act, swiglu) for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(D, eps=eps)
        if siglip:
            self.attn_pool = TimmAttnPool(eps, act)
        self.head = nn.Linear(D, classes)

    def grid(self):
        return self.pos_embed[0, 0 if self.registers or not self.has_class else 1:]

    def cls(self):
        return self.cls_token[0, 0] + (0 if self.registers else self.pos_embed[0, 0])

    def register_rows(self):
        return self.reg_token[0]

    def patch(self, patches):
        return self.patch_embed.proj(patches).flatten(1)

    def run(self, x):  # norm_pre, blocks, norm (forward_features' end), forward_head on the class token
        if hasattr(self, "norm_pre"):
            x = self.norm_pre(x)
        h = self.norm(self.blocks(x))
        pooled = self.attn_pool(h) if hasattr(self, "attn_pool") else h[:, 0]  # 'map' or 'token'
        return h, pooled, self.head(pooled) if isinstance(self.head, nn.Linear) else None

    def forward(self, pixels, interpolate=False):
        """interpolate: timm's dynamic_img_size, whose _pos_embed resizes pos_embed with
        resample_abs_pos_embed (bicubic, antialias=True; unchanged for a square grid of the
        table's size)."""
        _, _, h, w = pixels.shape
        x = self.patch_embed.proj(pixels).flatten(2).transpose(1, 2)
        pos = self.pos_embed[0]
        if interpolate and not (h == w == G * P):
            k = 0 if self.registers or not self.has_class else 1
            pos = torch.cat([pos[:k], interpolate_grid(pos[k:], h, w, antialias=True)], dim=0)
        pos = pos.unsqueeze(0)
        if not self.has_class:  # the SigLIP towers: no prefix token at all
            x = x + pos
        elif self.registers:  # _pos_embed with no_embed_class: positions first, then the prefix joins
            b = x.shape[0]
            x = torch.cat([self.cls_token.expand(b, -1, -1), self.reg_token.expand(b, -1, -1), x + pos], dim=1)
        else:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + pos
        return self.run(x)


class ClassTokenTowerRows:
    """The token-level pieces class_token_cases reads from an HF tower whose embeddings hold
    class_embedding [1, 1, D], patch_embedding (conv) and position_embedding [1, 1 + G*G, D]
    (InternViT, BLIP)."""
    def grid(self):
        return self.embeddings.position_embedding[0, 1:]

    def cls(self):
        return self.embeddings.class_embedding[0, 0] + self.embeddings.position_embedding[0, 0]

    def patch(self, patches):
        return self.embeddings.patch_embedding(patches).flatten(1)


# ---- HF BLIP / BLIP-2 (transformers' modeling_blip.py, modeling_blip_2.py) ------------------------
class BlipAttention(nn.Module):
    """qkv fused [3D, D]; BLIP: with its own bias; BLIP-2 (split_bias): no bias on the Linear,
    q_bias and v_bias parameters and a zero key bias, as Blip2Attention.forward builds it."""
    def __init__(self, split_bias):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D, bias=not split_bias)
        if split_bias:
            self.q_bias = nn.Parameter(torch.zeros(D))
            self.v_bias = nn.Parameter(torch.zeros(D))
        self.projection = nn.Linear(D, D)

    def forward(self, x):
        b, t, _ = x.shape
        bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias), self.v_bias)) if hasattr(self, "q_bias") \
            else self.qkv.bias
        qkv = F.linear(x, self.qkv.weight, bias).reshape(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = torch.softmax(qkv[0] @ qkv[1].transpose(-1, -2) * (D // HEADS) ** -0.5, dim=-1)
        return self.projection((a @ qkv[2]).permute(0, 2, 1, 3).reshape(b, t, D))


class BlipEncoderLayer(nn.Module):
    def __init__(self, split_bias, eps):
        super().__init__()
        self.self_attn = BlipAttention(split_bias)
        self.layer_norm1 = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(D, MLP, F.gelu)
        self.layer_norm2 = nn.LayerNorm(D, eps=eps)

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class BlipVisionModel(ClassTokenTowerRows, nn.Module):
    """BlipVisionModel / Blip2VisionModel: class token, position_embedding as a [1, 1 + G*G, D]
    parameter resized with plain bicubic (interpolate_pos_encoding), post_layernorm on every token,
    pooler_output = post_layernorm applied again to the normed class token.
    Outputs (last_hidden_state, pooler_output, logits=None)."""
    pos_mode = "bicubic"

    def __init__(self, split_bias, eps):
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.class_embedding = nn.Parameter(torch.randn(1, 1, D))
        self.embeddings.patch_embedding = nn.Conv2d(C, D, kernel_size=P, stride=P)
        self.embeddings.position_embedding = nn.Parameter(torch.randn(1, G * G + 1, D))
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList([BlipEncoderLayer(split_bias, eps) for _ in range(LAYERS)])
        self.post_layernorm = nn.LayerNorm(D, eps=eps)

    def run(self, x):
        for l in self.encoder.layers:
            x = l(x)
        h = self.post_layernorm(x)
        return h, self.post_layernorm(h[:, 0]), None

    def forward(self, pixels, interpolate=False):
        e = self.embeddings
        _, _, h, w = pixels.shape
        x = e.patch_embedding(pixels).flatten(2).transpose(1, 2)
        pos = e.position_embedding[0]
        if interpolate:
            pos = torch.cat([pos[:1], interpolate_grid(pos[1:], h, w)], dim=0)
        x = torch.cat([e.class_embedding.expand(x.shape[0], 1, -1), x], dim=1) + pos.unsqueeze(0)
        return self.run(x)


def class_token_cases(out, gen, m, raw, interp, shrink=False):
    """native / interp (HF interpolate_pos_encoding, timm's dynamic_img_size) / shrink / foveated /
    raw cases of a class-token model `m` (HfVitModel or TimmVit, float64): hidden, class_token,
    pooled and logits (when a head). shrink: a 3x2 grid, smaller than the table on both axes
    (where antialias=True widens the kernel)."""
    cases, meta = {}, {}

    regs = getattr(m, "registers", 0)  # register tokens: after the class token, no position
    has_class = getattr(m, "has_class", True)
    k = (1 if has_class else 0) + regs  # prefix tokens

    def token_forward(patches, pos, width, height):
        x = m.patch(patches) + sample_positions(m.grid(), pos, width, height, m.pos_mode)
        prefix = ([m.cls().unsqueeze(0)] if has_class else []) + ([m.register_rows()] if regs else [])
        return m.run(torch.cat(prefix + [x], dim=0).unsqueeze(0))

    def record(name, patches, pos, width, height, outs):
        hidden, pooled, logits = outs
        cases[f"{name}.patches"] = f32(patches)
        cases[f"{name}.positions"] = f32(pos)
        cases[f"{name}.last_hidden"] = f32(hidden[0, k:])
        if has_class:
            cases[f"{name}.class_token"] = f32(hidden[0, :1])
        cases[f"{name}.pooled"] = f32(pooled)
        if logits is not None:
            cases[f"{name}.logits"] = f32(logits)
        if hasattr(m, "image_embeds"):
            cases[f"{name}.image_embeds"] = f32(m.image_embeds(pooled))
        meta[f"{name}.image_width"], meta[f"{name}.image_height"] = width, height

    names = ["native"]
    with torch.no_grad():
        px = torch.randn((1, C, G * P, G * P), generator=gen, dtype=torch.float64)
        outs = m(px)
        patches, pos = patches_of(px)
        close(token_forward(patches, pos, G * P, G * P)[0], outs[0], "token-level forward vs module forward (native)")
        record("native", patches, pos, G * P, G * P, outs)
        if interp:
            W, H = 6 * P, 5 * P
            px = torch.randn((1, C, H, W), generator=gen, dtype=torch.float64)
            outs = m(px, interpolate=True)
            patches, pos = patches_of(px)
            close(token_forward(patches, pos, W, H)[0], outs[0], "token sampling vs interpolate_pos_encoding (6x5)")
            record("interp", patches, pos, W, H, outs)
            names.append("interp")
        if shrink:
            W, H = 3 * P, 2 * P
            px = torch.randn((1, C, H, W), generator=gen, dtype=torch.float64)
            outs = m(px, interpolate=True)
            patches, pos = patches_of(px)
            close(token_forward(patches, pos, W, H)[0], outs[0], "token sampling vs interpolate_pos_encoding (3x2)")
            record("shrink", patches, pos, W, H, outs)
            names.append("shrink")
        W, H = 77, 53
        patches, pos = foveated_tokens(gen, W, H, 23)
        record("foveated", patches, pos, W, H, token_forward(patches, pos, W, H))
        px = preprocess(*raw)
        patches, pos = patches_of(px)
        record("raw", patches, pos, G * P, G * P, m(px))
        meta["raw.image"] = "image.png"
        names += ["foveated", "raw"]
    meta["cases"] = ",".join(names)
    save_safetensors(os.path.join(out, "cases.safetensors"), cases, meta)


def make_hf_vit(out, gen):
    """A bare HF ViTModel (no `vit.` prefix) with its pooler, as google/vit-base-patch16-224-in21k
    is saved; F32; ViTImageProcessor's 0.5/0.5. The tests derive the ViTForImageClassification
    layout (`vit.` + `classifier`) from it."""
    os.makedirs(out, exist_ok=True)
    model = HfVitModel(dinov2=False, pooler=True).double()
    randomize(model, gen)
    cfg = {"architectures": ["ViTModel"], "model_type": "vit", "hidden_size": D, "num_hidden_layers": LAYERS,
           "num_attention_heads": HEADS, "intermediate_size": MLP, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
           "image_size": G * P, "patch_size": P, "num_channels": C, "qkv_bias": True}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt"}, "F32")
    preprocessor_config(out, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], "ViTImageProcessor")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]), interp=True)


def make_hf_dinov2(out, gen):
    """A bare HF Dinov2Model: layer scale (random, not 1), mask_token, BF16 (the layer-scale fold
    of a BF16 matrix is covered); BitImageProcessor's ImageNet mean/std."""
    os.makedirs(out, exist_ok=True)
    model = HfVitModel(dinov2=True).double()
    randomize(model, gen)
    round_to(model, torch.bfloat16)
    cfg = {"architectures": ["Dinov2Model"], "model_type": "dinov2", "hidden_size": D, "num_hidden_layers": LAYERS,
           "num_attention_heads": HEADS, "mlp_ratio": MLP // D, "hidden_act": "gelu", "layer_norm_eps": 1e-6,
           "image_size": G * P, "patch_size": P, "num_channels": C, "layerscale_value": 1.0,
           "use_swiglu_ffn": False, "qkv_bias": True}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt"}, "BF16")
    preprocessor_config(out, IMAGENET_MEAN, IMAGENET_STD, "BitImageProcessor")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, IMAGENET_MEAN, IMAGENET_STD), interp=True)


def make_timm_vit(out, gen):
    """A timm VisionTransformer state dict (vit_* names, fused qkv, 10-class head), F32, with the
    config.json timm's push_to_hub writes (pretrained_cfg mean/std 0.5 as the augreg weights have,
    so the raw case passes only when it is read; model_args.num_heads)."""
    os.makedirs(out, exist_ok=True)
    model = TimmVit(10).double()
    randomize(model, gen)
    cfg = {"architecture": "vit_fovea_test_patch8_32", "num_classes": 10, "num_features": D, "global_pool": "token",
           "model_args": {"num_heads": HEADS},
           "pretrained_cfg": {"tag": "test", "input_size": [C, G * P, G * P], "interpolation": "bicubic",
                              "crop_pct": 1.0, "crop_mode": "center", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
                              "num_classes": 10, "pool_size": None, "first_conv": "patch_embed.proj",
                              "classifier": "head"}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), None, "F32")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]), interp=True, shrink=True)


def make_timm_clip(out, gen):
    """timm's CLIP image tower (vit_base_patch16_clip_quickgelu_224-like: norm_pre, no patch bias,
    eps 1e-5, quick_gelu, the image projection as `head`), F16 as open_clip-converted weights are
    often shipped, with the config.json timm writes (the architecture name is what says
    quick_gelu: timm's plain *_clip_* models use exact GELU on the same tensor names)."""
    os.makedirs(out, exist_ok=True)
    model = TimmVit(12, clip=True).double()
    randomize(model, gen)
    round_to(model, torch.float16)
    cfg = {"architecture": "vit_fovea_test_patch8_clip_quickgelu_32", "num_classes": 12, "num_features": D,
           "global_pool": "token", "model_args": {"num_heads": HEADS},
           "pretrained_cfg": {"tag": "test", "input_size": [C, G * P, G * P], "interpolation": "bicubic",
                              "crop_pct": 1.0, "crop_mode": "center", "mean": CLIP_MEAN,
                              "std": CLIP_STD, "num_classes": 12, "first_conv": "patch_embed.proj",
                              "classifier": "head"}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), None, "F16")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, CLIP_MEAN, CLIP_STD), interp=True, shrink=True)


def make_hf_dinov2_registers(out, gen):
    """HF Dinov2WithRegistersModel (facebook/dinov2-with-registers-*): Dinov2Model's names plus
    `embeddings.register_tokens` [1, 4, D], F32; BitImageProcessor's ImageNet mean/std. Its
    interpolate_pos_encoding resizes with antialias=True: interp (6x5) and shrink (3x2) cases."""
    os.makedirs(out, exist_ok=True)
    model = HfVitModel(dinov2=True, registers=4).double()
    randomize(model, gen)
    cfg = {"architectures": ["Dinov2WithRegistersModel"], "model_type": "dinov2_with_registers", "hidden_size": D,
           "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "mlp_ratio": MLP // D, "hidden_act": "gelu",
           "layer_norm_eps": 1e-6, "image_size": G * P, "patch_size": P, "num_channels": C, "layerscale_value": 1.0,
           "num_register_tokens": 4, "qkv_bias": True}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt"}, "F32")
    preprocessor_config(out, IMAGENET_MEAN, IMAGENET_STD, "BitImageProcessor")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, IMAGENET_MEAN, IMAGENET_STD), interp=True, shrink=True)


def make_timm_registers(out, gen):
    """timm's DINOv2 with registers layout (vit_*_reg4_dinov2: reg_token [1, 4, D], no_embed_class so
    pos_embed is [1, G·G, D] and neither prefix token gets a position), F32, 10-class head."""
    os.makedirs(out, exist_ok=True)
    model = TimmVit(10, registers=4).double()
    randomize(model, gen)
    cfg = {"architecture": "vit_fovea_test_patch8_reg4_dinov2", "num_classes": 10, "num_features": D,
           "global_pool": "token", "model_args": {"num_heads": HEADS},
           "pretrained_cfg": {"tag": "test", "input_size": [C, G * P, G * P], "mean": IMAGENET_MEAN,
                              "std": IMAGENET_STD, "num_classes": 10, "first_conv": "patch_embed.proj",
                              "classifier": "head"}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), None, "F32")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, IMAGENET_MEAN, IMAGENET_STD), interp=True, shrink=True)


class OpenClipBlock(nn.Module):  # open_clip's ResidualAttentionBlock (ls_1 / ls_2: ls_init_value set)
    def __init__(self, act):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ls_1 = TimmLayerScale()
        self.ln_2 = nn.LayerNorm(D)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(D, MLP)
        self.mlp.c_proj = nn.Linear(MLP, D)
        self.act = act
        self.ls_2 = TimmLayerScale()

    def forward(self, x):
        h = self.ln_1(x)
        x = x + self.ls_1(self.attn(h, h, h, need_weights=False)[0])
        return x + self.ls_2(self.mlp.c_proj(self.act(self.mlp.c_fc(self.ln_2(x)))))


class OpenClipVisual(nn.Module):
    """open_clip's VisionTransformer (pool_type 'tok', final_ln_after_pool=False): conv1 without
    bias, class_embedding, positional_embedding [1 + G·G, D], ln_pre, resblocks, ln_post on every
    token, proj [D, E] (pooled @ proj). Positions at other sizes: resize_pos_embed (bicubic,
    antialias=True)."""
    pos_mode = "bicubic_aa"

    def __init__(self, act, embed):
        super().__init__()
        self.conv1 = nn.Conv2d(C, D, kernel_size=P, stride=P, bias=False)
        self.class_embedding = nn.Parameter(torch.zeros(D))
        self.positional_embedding = nn.Parameter(torch.zeros(G * G + 1, D))
        self.ln_pre = nn.LayerNorm(D)
        self.transformer = nn.Module()
        self.transformer.resblocks = nn.ModuleList([OpenClipBlock(act) for _ in range(LAYERS)])
        self.ln_post = nn.LayerNorm(D)
        self.proj = nn.Parameter(torch.zeros(D, embed))

    def grid(self):
        return self.positional_embedding[1:]

    def cls(self):
        return self.class_embedding + self.positional_embedding[0]

    def patch(self, patches):
        return self.conv1(patches).flatten(1)

    def run(self, x):
        x = self.ln_pre(x)
        for b in self.transformer.resblocks:
            x = b(x)
        h = self.ln_post(x)
        return h, h[:, 0], None

    def image_embeds(self, pooled):
        return pooled @ self.proj

    def forward(self, pixels, interpolate=False):
        _, _, h, w = pixels.shape
        x = self.conv1(pixels).flatten(2).transpose(1, 2)
        pos = self.positional_embedding
        if interpolate and not (h == w == G * P):
            pos = torch.cat([pos[:1], interpolate_grid(pos[1:], h, w, antialias=True)], dim=0)
        x = torch.cat([self.class_embedding.reshape(1, 1, D).expand(x.shape[0], -1, -1), x], dim=1) + pos
        return self.run(x)


def make_open_clip(out, gen):
    """An open_clip CLIP checkpoint as the hub holds it: `visual.*` (open_clip's VisionTransformer,
    layer scale, quick_gelu) beside a text tower, F16 safetensors (open_clip_model.safetensors is
    the same tensors) and the same state dict as open_clip_pytorch_model.bin (torch.save), with
    open_clip_config.json (model_cfg.quick_gelu, vision_cfg.head_width, preprocess_cfg mean / std
    other than OpenAI's, so the raw case passes only when it is read)."""
    os.makedirs(out, exist_ok=True)
    model = OpenClipVisual(quick_gelu, 24).double()
    randomize(model, gen)
    round_to(model, torch.float16)
    mean, std = [0.5, 0.4, 0.3], [0.25, 0.3, 0.35]
    cfg = {"model_cfg": {"embed_dim": 24, "quick_gelu": True,
                         "vision_cfg": {"image_size": G * P, "layers": LAYERS, "width": D, "head_width": D // HEADS,
                                        "patch_size": P, "mlp_ratio": MLP / D, "ls_init_value": 0.1},
                         "text_cfg": {"context_length": 8, "vocab_size": 16, "width": 16, "heads": 2, "layers": 1}},
           "preprocess_cfg": {"mean": mean, "std": std}}
    with open(os.path.join(out, "open_clip_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    state = {"visual." + k: v for k, v in model.state_dict().items()}
    tg = torch.Generator().manual_seed(5)
    for name, shape in (("positional_embedding", (8, 16)), ("token_embedding.weight", (16, 16)),
                        ("transformer.resblocks.0.attn.in_proj_weight", (48, 16)), ("ln_final.weight", (16,)),
                        ("text_projection", (16, 24)), ("logit_scale", ())):
        state[name] = torch.randn(shape, generator=tg, dtype=torch.float64)
    save_safetensors(os.path.join(out, "model.safetensors"), state, None, "F16")
    torch.save({k: v.to(torch.float16) for k, v in state.items()}, os.path.join(out, "open_clip_pytorch_model.bin"))
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, mean, std), interp=True, shrink=True)


class InternLayer(nn.Module):  # InternVisionEncoderLayer (norm_type layer_norm)
    def __init__(self, eps):
        super().__init__()
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attn = TimmAttention()  # attn.qkv [3D, D] as (3, heads, hd), attn.proj
        self.ls1 = nn.Parameter(torch.ones(D))
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(D, MLP, F.gelu)
        self.ls2 = nn.Parameter(torch.ones(D))

    def forward(self, x):
        x = x + self.attn(self.norm1(x)) * self.ls1
        return x + self.mlp(self.norm2(x)) * self.ls2


class InternVisionModel(ClassTokenTowerRows, nn.Module):
    """InternViT (modeling_intern_vit.py): class_embedding [1, 1, D], patch_embedding with bias,
    position_embedding [1, 1 + G·G, D] always resized with plain bicubic to the patch grid,
    layers with ls1 / ls2, no final norm (pooler_output = the class token)."""
    pos_mode = "bicubic"

    def __init__(self, eps=1e-6):
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.class_embedding = nn.Parameter(torch.zeros(1, 1, D))
        self.embeddings.patch_embedding = nn.Conv2d(C, D, kernel_size=P, stride=P)
        self.embeddings.position_embedding = nn.Parameter(torch.zeros(1, G * G + 1, D))
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList([InternLayer(eps) for _ in range(LAYERS)])

    def run(self, x):
        for l in self.encoder.layers:
            x = l(x)
        return x, x[:, 0], None

    def forward(self, pixels, interpolate=False):
        _, _, h, w = pixels.shape
        x = self.embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)
        pos = self.embeddings.position_embedding[0]
        pos = torch.cat([pos[:1], interpolate_grid(pos[1:], h, w)], dim=0)  # _get_pos_embed: always
        x = torch.cat([self.embeddings.class_embedding.expand(x.shape[0], -1, -1), x], dim=1) + pos
        return self.run(x)


def make_intern_vit(out, gen):
    """An InternVL chat checkpoint's layout (InternVLChatModel): `vision_model.*` (InternViT-300M's
    names), the pixel-shuffle projector `mlp1.*` and a language-model tensor, BF16, with the
    config.json InternVL writes (vision_config: norm_type layer_norm, hidden_act gelu)."""
    os.makedirs(out, exist_ok=True)
    model = InternVisionModel().double()
    randomize(model, gen)
    round_to(model, torch.bfloat16)
    vc = {"architectures": ["InternVisionModel"], "model_type": "intern_vit_6b", "hidden_size": D,
          "num_attention_heads": HEADS, "intermediate_size": MLP, "num_hidden_layers": LAYERS, "image_size": G * P,
          "patch_size": P, "num_channels": C, "norm_type": "layer_norm", "layer_norm_eps": 1e-6, "hidden_act": "gelu",
          "qk_normalization": False, "qkv_bias": True, "initializer_factor": 0.1}
    cfg = {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat", "downsample_ratio": 0.5,
           "select_layer": -1, "vision_config": vc, "llm_config": {"model_type": "qwen2", "hidden_size": 16}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    state = {"vision_model." + k: v for k, v in model.state_dict().items()}
    tg = torch.Generator().manual_seed(6)
    for name, shape in (("mlp1.0.weight", (4 * D,)), ("mlp1.0.bias", (4 * D,)), ("mlp1.1.weight", (16, 4 * D)),
                        ("mlp1.1.bias", (16,)), ("mlp1.3.weight", (16, 16)), ("mlp1.3.bias", (16,)),
                        ("language_model.model.embed_tokens.weight", (32, 16))):
        state[name] = torch.randn(shape, generator=tg, dtype=torch.float64)
    save_safetensors(os.path.join(out, "model.safetensors"), state, None, "BF16")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, IMAGENET_MEAN, IMAGENET_STD), interp=True, shrink=True)


def make_blip(out, gen, v2):
    """HF Blip2ForConditionalGeneration's layout (v2: `vision_model.*` with q_bias / v_bias, EVA
    ViT-g's, eps 1e-6, beside a Q-Former and language-projection tensors; F16) or
    BlipForConditionalGeneration's (qkv.bias, eps 1e-5, beside a text decoder tensor; F32), with
    the nested config.json transformers writes and BlipImageProcessor's preprocessor_config.json
    (OpenAI CLIP's mean / std)."""
    os.makedirs(out, exist_ok=True)
    eps = 1e-6 if v2 else 1e-5
    model = BlipVisionModel(split_bias=v2, eps=eps).double()
    randomize(model, gen)
    if v2:
        round_to(model, torch.float16)
    vc = {"model_type": "blip_2_vision_model" if v2 else "blip_vision_model", "hidden_size": D,
          "intermediate_size": MLP, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "image_size": G * P,
          "patch_size": P, "hidden_act": "gelu", "layer_norm_eps": eps, "qkv_bias": True}
    cfg = {"architectures": ["Blip2ForConditionalGeneration" if v2 else "BlipForConditionalGeneration"],
           "model_type": "blip-2" if v2 else "blip", "vision_config": vc, "text_config": {"hidden_size": 16}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    state = {"vision_model." + k: v for k, v in model.state_dict().items()}
    tg = torch.Generator().manual_seed(8)
    extra = ((("query_tokens", (1, 4, 16)), ("qformer.layernorm.weight", (16,)), ("language_projection.weight", (16, 16)))
             if v2 else (("text_decoder.bert.embeddings.word_embeddings.weight", (32, 16)),))
    for name, shape in extra:
        state[name] = torch.randn(shape, generator=tg, dtype=torch.float64)
    save_safetensors(os.path.join(out, "model.safetensors"), state, {"format": "pt"}, "F16" if v2 else "F32")
    preprocessor_config(out, CLIP_MEAN, CLIP_STD, "BlipImageProcessor")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, CLIP_MEAN, CLIP_STD), interp=True, shrink=True)


def make_timm_siglip(out, gen):
    """timm's SigLIP tower layout (vit_*_siglip_*: class_token=False, global_pool='map', so
    pos_embed is [1, G·G, D] and `attn_pool` is AttentionPoolLatent), BF16, 7-class head on the
    pooled output, act_layer gelu_tanh in config.json's model_args, pretrained_cfg mean/std 0.5."""
    os.makedirs(out, exist_ok=True)
    model = TimmVit(7, siglip=True).double()
    randomize(model, gen)
    round_to(model, torch.bfloat16)
    cfg = {"architecture": "vit_fovea_test_patch8_siglip_32", "num_classes": 7, "num_features": D,
           "global_pool": "map", "model_args": {"num_heads": HEADS, "act_layer": "gelu_tanh"},
           "pretrained_cfg": {"tag": "test", "input_size": [C, G * P, G * P], "mean": [0.5, 0.5, 0.5],
                              "std": [0.5, 0.5, 0.5], "num_classes": 7, "first_conv": "patch_embed.proj",
                              "classifier": "head"}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), None, "BF16")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]), interp=True, shrink=True)


def make_hf_dinov2_swiglu(out, gen):
    """HF Dinov2WithRegistersModel as dinov2-giant is built (use_swiglu_ffn: mlp.weights_in /
    weights_out, Dinov2SwiGLUFFN's hidden width), 4 registers, layer scale, F16."""
    os.makedirs(out, exist_ok=True)
    model = HfVitModel(dinov2=True, registers=4, swiglu=True).double()
    randomize(model, gen)
    round_to(model, torch.float16)
    cfg = {"architectures": ["Dinov2WithRegistersModel"], "model_type": "dinov2_with_registers", "hidden_size": D,
           "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "mlp_ratio": MLP // D, "hidden_act": "gelu",
           "layer_norm_eps": 1e-6, "image_size": G * P, "patch_size": P, "num_channels": C, "layerscale_value": 1.0,
           "num_register_tokens": 4, "use_swiglu_ffn": True, "qkv_bias": True}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), {"format": "pt"}, "F16")
    preprocessor_config(out, IMAGENET_MEAN, IMAGENET_STD, "BitImageProcessor")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, IMAGENET_MEAN, IMAGENET_STD), interp=True, shrink=True)


def make_timm_dinov2_swiglu(out, gen):
    """timm's vit_giant_patch14_reg4_dinov2 layout: SwiGLUPacked MLP (mlp.fc1 [2H, D], mlp.fc2
    [D, H]), layer scale ls1 / ls2, reg_token with no_embed_class, F32, no head (num_classes 0)."""
    os.makedirs(out, exist_ok=True)
    model = TimmVit(10, registers=4, swiglu=True).double()
    del model.head
    model.head = nn.Identity()
    randomize(model, gen)
    cfg = {"architecture": "vit_fovea_test_patch8_reg4_dinov2_swiglu", "num_classes": 0, "num_features": D,
           "global_pool": "token", "model_args": {"num_heads": HEADS},
           "pretrained_cfg": {"tag": "test", "input_size": [C, G * P, G * P], "mean": IMAGENET_MEAN,
                              "std": IMAGENET_STD, "num_classes": 0, "first_conv": "patch_embed.proj"}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), model.state_dict(), None, "F32")
    img = raw_image(gen, out)
    class_token_cases(out, gen, model, (img, IMAGENET_MEAN, IMAGENET_STD), interp=True, shrink=True)


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
