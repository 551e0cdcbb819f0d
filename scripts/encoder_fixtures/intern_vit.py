"""InternViT, InternVL's vision tower (InternVisionEncoderLayer, norm_type layer_norm)."""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from fovea_testio.safetensors import save_torch as save_safetensors
from .common import (
    C, ClassTokenTowerRows, D, G, HEADS, IMAGENET_MEAN, IMAGENET_STD, LAYERS, MLP, Mlp, P,
    class_token_cases, interpolate_grid, randomize, raw_image, round_to)
from .timm_vit import TimmAttention


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
