"""HF BLIP and BLIP-2 vision towers (transformers' modeling_blip.py, modeling_blip_2.py)."""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from fovea_testio.safetensors import save_torch as save_safetensors
from .common import (
    C, CLIP_MEAN, CLIP_STD, ClassTokenTowerRows, D, G, HEADS, LAYERS, MLP, Mlp, P, class_token_cases,
    interpolate_grid, preprocessor_config, randomize, raw_image, round_to)


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
