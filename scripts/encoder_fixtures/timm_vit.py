"""timm's VisionTransformer (timm/models/vision_transformer.py: VisionTransformer, Block, Attention
with fused qkv) under the real names: ViT, CLIP, registers, SigLIP, DINOv2 with SwiGLU."""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from fovea_testio.safetensors import save_torch as save_safetensors
from .common import (
    C, CLIP_MEAN, CLIP_STD, D, G, GluMlp, HEADS, IMAGENET_MEAN, IMAGENET_STD, LAYERS, MLP, Mlp, P,
    class_token_cases, gelu_tanh, interpolate_grid, quick_gelu, randomize, raw_image, round_to)


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
