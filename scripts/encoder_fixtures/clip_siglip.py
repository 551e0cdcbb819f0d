"""HF CLIP and SigLIP, SigLIP2, PaliGemma's and Idefics3's SigLIP towers, after transformers'
modeling_clip.py / modeling_siglip.py: CLIP has a class token, pre_layrnorm, quick_gelu
(x * sigmoid(1.702 x)), layer-norm eps 1e-5, and applies post_layernorm to the class token only
(pooler_output); SigLIP has no class token, a patch-embedding bias, tanh-GELU, eps 1e-6,
post_layernorm on every token and an optional attention-pooling head (nn.MultiheadAttention over
a learned probe)."""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from fovea_testio.safetensors import save_torch as save_safetensors
from .common import (
    C, CLIP_MEAN, CLIP_STD, D, Encoder, G, HEADS, LAYERS, MLP, Mlp, P, check_bucket_sampling, close, f32,
    foveated_tokens, gelu_tanh, idefics3_buckets, interpolate_grid, patches_of, preprocess,
    preprocessor_config, quick_gelu, randomize, raw_image, round_to, sample_positions)


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
