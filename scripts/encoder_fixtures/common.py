"""What every family's fixture shares: the sizes (patch 8, width 32, 4 heads, 2 blocks, a 4 x 4
position grid), the HF-named encoder layers, random weights, patches, the position samplers
(bicubic as F.grid_sample, antialiased, Idefics3's buckets) with their self-checks, raw images and
preprocessing, and the class-token towers' cases."""
import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from fovea_testio.safetensors import save_torch as save_safetensors


C, P = 3, 8          # channels, patch size


D, HEADS, LAYERS, MLP = 32, 4, 2, 64


G = 4                # position grid: native image 32 x 32


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


def idefics3_buckets(n, g):
    """Idefics2VisionEmbeddings (which Idefics3's and SmolVLM's copy), as the models were trained
    with it: the table cell of each of n patches along an axis, for a g x g table. (transformers'
    later rewrite, arange(n) / n * (1 - 1e-6) in pixel_values.dtype, gives the same cells in bf16
    and fp16, where the factor rounds to 1, and one cell lower on every patch edge that falls on
    a boundary in float32, the native grid included; docs/explanation/encoder.md.)"""
    boundaries = torch.arange(1 / g, 1.0, 1 / g)
    frac = torch.arange(0, 1 - 1e-6, 1 / torch.tensor(n))
    return torch.bucketize(frac, boundaries, right=True)


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


def f32(t):
    return t.detach().to(torch.float32)


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
