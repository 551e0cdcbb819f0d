"""llama.cpp mmproj files (GGUF): a LLaVA-1.5 projector file as the legacy converter writes it, a SigLIP tower as convert_hf_to_gguf.py --mmproj writes it, and HF LLaVA's own safetensors."""
import json
import os

import numpy as np
import torch
import torch.nn as nn

from fovea_testio.safetensors import save_torch as save_safetensors
from fovea_testio import gguf
from fovea_testio.gguf import GGML_BF16, GGML_F16, GGML_F32, GGML_Q8_0, write as save_gguf
from fovea_testio.gguf import (
    ARRAY as GGUF_ARRAY, BOOL as GGUF_BOOL, F32 as GGUF_F32, STRING as GGUF_STRING, U32 as GGUF_U32)
from .clip_siglip import ClipVisionModel, SiglipVisionModel
from .common import (
    C, CLIP_MEAN, CLIP_STD, D, G, HEADS, LAYERS, MLP, P, close, f32, foveated_tokens, patches_of,
    preprocess, preprocessor_config, randomize, raw_image, round_to, sample_positions)


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
    assert [t["name"] for t in gguf.read(os.path.join(out, "mmproj.gguf")).tensors] == [t[0] for t in tensors]
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
