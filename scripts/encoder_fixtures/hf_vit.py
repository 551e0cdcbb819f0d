"""HF ViT and DINOv2 (transformers' modeling_vit.py ViTModel, modeling_dinov2.py Dinov2Model) as
plain torch modules under the real names: plain, with registers, with SwiGLU."""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from fovea_testio.safetensors import save_torch as save_safetensors
from .common import (
    C, D, G, GluMlp, HEADS, IMAGENET_MEAN, IMAGENET_STD, LAYERS, MLP, Mlp, P, class_token_cases,
    interpolate_grid, preprocessor_config, randomize, raw_image, round_to)


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
