"""open_clip's VisionTransformer beside a text tower (ResidualAttentionBlock with layer scale,
quick_gelu), as open_clip_model.safetensors stores it."""
import json
import os

import torch
import torch.nn as nn

from fovea_testio.safetensors import save_torch as save_safetensors
from .common import (
    C, D, G, HEADS, LAYERS, MLP, P, class_token_cases, interpolate_grid, quick_gelu, randomize, raw_image,
    round_to)
from .timm_vit import TimmLayerScale


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
