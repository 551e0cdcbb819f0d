#!/usr/bin/python3
"""Builds the encoder test fixtures: small random ViTs in three namings, with PyTorch's outputs.

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


def interpolate_grid(pos, height, width):
    """HF interpolate_pos_encoding for the G x G patch part: [G*G, D] -> [h*w, D]."""
    g = int(round(math.sqrt(pos.shape[0])))
    grid = pos.reshape(1, g, g, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(height // P, width // P), mode="bicubic", align_corners=False)
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
    def __init__(self):
        super().__init__()
        self.embeddings = ClipEmbeddings()
        self.pre_layrnorm = nn.LayerNorm(D, eps=1e-5)
        self.encoder = Encoder(D, HEADS, MLP, LAYERS, quick_gelu, 1e-5)
        self.post_layernorm = nn.LayerNorm(D, eps=1e-5)

    def run(self, x):  # from the embeddings on: (last_hidden_state, pooler_output)
        h = self.encoder(self.pre_layrnorm(x))
        return h, self.post_layernorm(h[:, 0, :])

    def forward(self, pixels, interpolate=False):
        return self.run(self.embeddings(pixels, interpolate))


class ClipVisionModel(nn.Module):  # CLIPVisionModel
    def __init__(self):
        super().__init__()
        self.vision_model = ClipVisionTransformer()


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
    def __init__(self):
        super().__init__()
        self.embeddings = SiglipEmbeddings()
        self.encoder = Encoder(D, HEADS, MLP, LAYERS, gelu_tanh, 1e-6)
        self.post_layernorm = nn.LayerNorm(D, eps=1e-6)
        self.head = SiglipPoolingHead()

    def run(self, x):
        h = self.post_layernorm(self.encoder(x))
        return h, self.head(h)

    def forward(self, pixels, interpolate=False):
        return self.run(self.embeddings(pixels, interpolate))


class SiglipVisionModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.vision_model = SiglipVisionTransformer()


# ---- helpers ------------------------------------------------------------------------------------

def randomize(model, gen):
    """Weights with real variation (the libraries' inits leave LayerNorms at identity and heads at
    zero, which would hide mistakes)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if p.dim() >= 2:
                fan_in = int(np.prod(p.shape[1:])) if p.dim() != 3 else p.shape[-1]
                std = 0.5 if "position" in name or "pos_embedding" in name else 1.0 / math.sqrt(fan_in)
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


def sample_positions(grid_rows, positions, width, height):
    """The G x G position grid [G*G, D] sampled bicubically at token centres -> [N, D]."""
    g = int(round(math.sqrt(grid_rows.shape[0])))
    grid = grid_rows.reshape(1, g, g, -1).permute(0, 3, 1, 2)
    nx = 2.0 * positions[:, 0] / width - 1.0
    ny = 2.0 * positions[:, 1] / height - 1.0
    coords = torch.stack([nx, ny], dim=1).reshape(1, 1, -1, 2).to(grid.dtype)
    s = F.grid_sample(grid, coords, mode="bicubic", padding_mode="border", align_corners=False)
    return s[0, :, 0, :].t()


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

def hf_cases(vt, has_class, gen, out, proj=None):
    """native / interp / foveated cases for an HF-named vision transformer `vt` (float64)."""
    cases, meta = {}, {}

    def token_forward(patches, pos, width, height):
        e = vt.embeddings
        x = e.patch_embedding(patches).flatten(1)  # [N, D]
        pw = e.position_embedding.weight
        grid_rows = pw[1:] if has_class else pw
        x = x + sample_positions(grid_rows, pos, width, height)
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
        cases[f"{name}.pooled"] = f32(pooled)
        if proj is not None:
            cases[f"{name}.image_embeds"] = f32(proj(pooled))
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
        close(h2, hidden, "grid_sample vs HF interpolate_pos_encoding (6x5 grid)")
        record("interp", patches, pos, W, H, hidden, pooled)

        W, H = 77, 53
        patches, pos = foveated_tokens(gen, W, H, 23)
        hidden, pooled = token_forward(patches, pos, W, H)
        record("foveated", patches, pos, W, H, hidden, pooled)
    meta["cases"] = "native,interp,foveated"
    save_safetensors(os.path.join(out, "cases.safetensors"), cases, meta)


def make_clip(out, gen, full):
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
    hf_cases(model.vision_model, True, gen, out, model.visual_projection if full else None)


def make_siglip(out, gen):
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
    hf_cases(model.vision_model, False, gen, out)


def make_torchvision(out, gen):
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
    meta["cases"] = "native,foveated"
    save_safetensors(os.path.join(out, "cases.safetensors"), cases, meta)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "encoder"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20261124)
    make_clip(os.path.join(a.out, "clip"), gen, full=False)
    make_clip(os.path.join(a.out, "clip_full"), gen, full=True)
    make_siglip(os.path.join(a.out, "siglip"), gen)
    make_torchvision(os.path.join(a.out, "torchvision"), gen)
    total = 0
    for root, _, files in os.walk(a.out):
        for f in sorted(files):
            p = os.path.join(root, f)
            total += os.path.getsize(p)
            print(f"{os.path.relpath(p, a.out):34s} {os.path.getsize(p):8d} bytes")
    print(f"total {total} bytes (torch {torch.__version__}, torchvision {torchvision.__version__})")


if __name__ == "__main__":
    main()
