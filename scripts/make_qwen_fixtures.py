#!/usr/bin/python3
"""Builds the native-resolution tower fixtures: small random Qwen2-VL and Qwen2.5-VL vision towers
in the checkpoints' own naming, with a float64 PyTorch reference of their forward passes.

Run with Debian's python3 (torch; `transformers` is not needed):

    /usr/bin/python3 scripts/make_qwen_fixtures.py [--out tests/data/encoder]

The reference below is written from the published modeling code (transformers'
modeling_qwen2_vl.py, modeling_qwen2_5_vl.py, image_processing_qwen2_vl.py):

  * preprocessing: smart_resize to multiples of patch * merge within min_pixels / max_pixels
    (Python's round(), i.e. half to even), rescale 1/255, normalise with image_mean / image_std,
    a still image repeated to temporal_patch_size frames, patches flattened as (C, T, P, P) in
    the order (t, h / m, w / m, m, m): the 2x2 merge units' patches consecutive;
  * the tower: Conv3d patch embedding (no bias), 2-D rotary positions (theta 10000 over head_dim / 2:
    the first half of the rotary frequencies from the patch row, the second from its column,
    rotate_half), pre-norm blocks with a fused qkv, attention within each image's frame
    (cu_seqlens); Qwen2-VL: LayerNorm (eps 1e-6) and a QuickGELU MLP (fc1, fc2); Qwen2.5-VL:
    RMSNorm (eps 1e-6), a SiLU-gated MLP (gate_proj, up_proj, down_proj), window attention over
    window_size px windows (the window reordering of get_window_index and its inverse), full
    attention in fullatt_block_indexes;
  * the merger: ln_q (LayerNorm / RMSNorm) on each token, four consecutive tokens (a 2x2 merge
    unit) concatenated, Linear, exact GELU, Linear to the language model's width;
  * M-RoPE positions: get_rope_index's (t, h, w) ids of the merged tokens of images that follow
    each other with no text between, the first at 0, each next one starting at the previous
    one's largest id + 1.

Every DIR gets model.safetensors (sharded for qwen2_5_vl: an index and two shards, in the
newer `model.visual.*` naming with language-model tensors beside), config.json,
preprocessor_config.json and cases.safetensors (of the PNG images in qwen_images/) with, per case NAME:
NAME.grid_thw [k, 3] I32, NAME.hidden [N, D] (the tower's last hidden state before the merger, in
the processor's patch order), NAME.projected [N / 4, E] (the merger's output, the language
model's rows) and NAME.mrope [N / 4, 3] I32; Qwen2.5-VL's and Qwen3-VL's case `video` is five
frames (A, B, A, B, C: qwen_images/image_*.png, video_b_*.png, video_c_*.png) as one video grid
(t = 3, the last frame repeated), its ids as get_rope_index gives a video (Qwen2.5-VL: 2 fps,
tokens_per_second 2; Qwen3-VL: frame pairs split into t = 1). qwen_smart_resize.json holds a sweep of sizes and
pixel limits with the resized sizes the reference rule gives.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fovea_testio.safetensors import save_torch as save_safetensors  # noqa: E402
# image_processing_qwen2_vl.smart_resize, written once (torch-free) beside the video processors' rules.
from make_qwen_video_resize import image_smart_resize as smart_resize  # noqa: E402

CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


# ---- the processor ------------------------------------------------------------------------------

def patchify(frames, mean, std, p, m, tps):
    """frames: list of [H, W, 3] uint8 (one for a still image) at a size smart_resize keeps ->
    (flat patches [N, 3 * tps * p * p] float64, (t, h, w))."""
    x = np.stack([np.asarray(f, dtype=np.float64) for f in frames]) / 255.0  # T, H, W, C
    x = (x - np.asarray(mean)) / np.asarray(std)
    x = x.transpose(0, 3, 1, 2)  # T, C, H, W
    if x.shape[0] % tps:
        x = np.concatenate([x, np.repeat(x[-1:], tps - x.shape[0] % tps, axis=0)])
    t, c, h, w = x.shape
    gt, gh, gw = t // tps, h // p, w // p
    x = x.reshape(gt, tps, c, gh // m, m, p, gw // m, m, p)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return torch.from_numpy(x.reshape(gt * gh * gw, c * tps * p * p).copy()), (gt, gh, gw)


# ---- the tower ----------------------------------------------------------------------------------

def layer_norm(x, w, b, eps=1e-6):
    if b is None:  # RMSNorm
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def rotary_angles(grids, head_dim, m, theta=10000.0):
    """[N, head_dim / 2] angles of every patch, in the processor's order (rot_pos_emb)."""
    dim = head_dim // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rows = []
    for t, h, w in grids:
        hp = torch.arange(h).unsqueeze(1).expand(-1, w).reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
        wp = torch.arange(w).unsqueeze(0).expand(h, -1).reshape(h // m, m, w // m, m).permute(0, 2, 1, 3).flatten()
        rows.append(torch.stack([hp, wp], dim=-1).repeat(t, 1))
    pos = torch.cat(rows).to(torch.float64)
    return torch.cat([pos[:, :1] * inv_freq, pos[:, 1:] * inv_freq], dim=1)


def rotate(x, ang):  # x [N, heads, hd], ang [N, hd / 2]
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos().unsqueeze(1).to(x.dtype), emb.sin().unsqueeze(1).to(x.dtype)
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


def learned_positions(table, grids, m):
    """Qwen3-VL's fast_pos_embed_interpolate: the G x G table sampled bilinearly at linspace(0, G - 1, h)
    x linspace(0, G - 1, w) (corners aligned), in the processor's merge-unit order, per frame."""
    gside = int(round(math.sqrt(table.shape[0])))
    grid = table.reshape(gside, gside, -1)
    out = []
    for t, h, w in grids:
        hi = torch.linspace(0, gside - 1, h, dtype=torch.float64)
        wi = torch.linspace(0, gside - 1, w, dtype=torch.float64)
        h0, w0 = hi.floor().long(), wi.floor().long()
        h1, w1 = (h0 + 1).clamp(max=gside - 1), (w0 + 1).clamp(max=gside - 1)
        dh, dw = (hi - h0)[:, None, None], (wi - w0)[None, :, None]
        e = (grid[h0][:, w0] * (1 - dh) * (1 - dw) + grid[h0][:, w1] * (1 - dh) * dw +
             grid[h1][:, w0] * dh * (1 - dw) + grid[h1][:, w1] * dh * dw)  # h, w, D
        e = e.reshape(h // m, m, w // m, m, -1).permute(0, 2, 1, 3, 4).reshape(h * w, -1)
        out.append(e.repeat(t, 1))
    return torch.cat(out)


def window_index(grids, window_px, m, p):
    """get_window_index: (merge-unit order, cu_window_seqlens in patches)."""
    out, cu, base = [], [0], 0
    vws = window_px // m // p
    for t, h, w in grids:
        lh, lw = h // m, w // m
        idx = torch.arange(t * lh * lw).reshape(t, lh, lw)
        ph, pw = vws - lh % vws, vws - lw % vws
        nh, nw = (lh + ph) // vws, (lw + pw) // vws
        pad = F.pad(idx, (0, pw, 0, ph), "constant", -100)
        pad = pad.reshape(t, nh, vws, nw, vws).permute(0, 1, 3, 2, 4).reshape(t, nh * nw, vws, vws)
        seqlens = (pad != -100).sum([2, 3]).reshape(-1)
        flat = pad.reshape(-1)
        out.append(flat[flat != -100] + base)
        cu.extend((seqlens.cumsum(0) * m * m + cu[-1]).tolist())
        base += t * lh * lw
    cu_unique = [cu[0]]
    for c in cu[1:]:
        if c != cu_unique[-1]:
            cu_unique.append(c)
    return torch.cat(out), cu_unique


def attention(x, qkv_w, qkv_b, proj_w, proj_b, heads, ang, cu):
    n, d = x.shape
    hd = d // heads
    qkv = (x @ qkv_w.T + qkv_b).reshape(n, 3, heads, hd)
    q, k, v = rotate(qkv[:, 0], ang), rotate(qkv[:, 1], ang), qkv[:, 2]
    out = torch.empty(n, heads, hd, dtype=x.dtype)
    for a, b in zip(cu[:-1], cu[1:]):
        s = torch.einsum("qhd,khd->hqk", q[a:b], k[a:b]) / math.sqrt(hd)
        out[a:b] = torch.einsum("hqk,khd->qhd", s.softmax(-1), v[a:b])
    return out.reshape(n, d) @ proj_w.T + proj_b


def tower(sd, cfg, flat, grids):
    """(hidden before the merger [N, D], merged [N / 4, E]), both in the processor's order."""
    g = lambda n: sd[n]
    o = lambda n: sd.get(n)
    d, heads, m, p = cfg["hidden"], cfg["heads"], cfg["merge"], cfg["patch"]
    w = g("patch_embed.proj.weight")
    x = flat @ w.reshape(w.shape[0], -1).T
    if o("patch_embed.proj.bias") is not None:
        x = x + g("patch_embed.proj.bias")
    if o("pos_embed.weight") is not None:  # Qwen3-VL: the learned table, bilinear to each grid
        x = x + learned_positions(g("pos_embed.weight"), grids, m)
    ang = rotary_angles(grids, d // heads, m)
    cu = [0]
    for t, h, ww in grids:
        for _ in range(t):
            cu.append(cu[-1] + h * ww)
    n = x.shape[0]
    unit = m * m
    if cfg["window_px"]:
        widx, cu_win = window_index(grids, cfg["window_px"], m, p)
        x = x.reshape(n // unit, unit, -1)[widx].reshape(n, -1)
        ang = ang.reshape(n // unit, unit, -1)[widx].reshape(n, -1)
    deep = []
    for i in range(cfg["layers"]):
        b = f"blocks.{i}."
        seg = cu if (not cfg["window_px"] or i in cfg["fullatt"]) else cu_win
        hN = layer_norm(x, g(b + "norm1.weight"), o(b + "norm1.bias"))
        x = x + attention(hN, g(b + "attn.qkv.weight"), g(b + "attn.qkv.bias"), g(b + "attn.proj.weight"),
                          g(b + "attn.proj.bias"), heads, ang, seg)
        hN = layer_norm(x, g(b + "norm2.weight"), o(b + "norm2.bias"))
        if cfg.get("qwen3"):
            f1 = F.gelu(hN @ g(b + "mlp.linear_fc1.weight").T + g(b + "mlp.linear_fc1.bias"), approximate="tanh")
            x = x + f1 @ g(b + "mlp.linear_fc2.weight").T + g(b + "mlp.linear_fc2.bias")
        elif cfg["gated"]:
            gate = hN @ g(b + "mlp.gate_proj.weight").T + g(b + "mlp.gate_proj.bias")
            up = hN @ g(b + "mlp.up_proj.weight").T + g(b + "mlp.up_proj.bias")
            x = x + (F.silu(gate) * up) @ g(b + "mlp.down_proj.weight").T + g(b + "mlp.down_proj.bias")
        else:
            f1 = hN @ g(b + "mlp.fc1.weight").T + g(b + "mlp.fc1.bias")
            f1 = f1 * torch.sigmoid(1.702 * f1)
            x = x + f1 @ g(b + "mlp.fc2.weight").T + g(b + "mlp.fc2.bias")
        if i in cfg.get("deepstack", []):  # Qwen3-VL: norm after the 2x2 shuffle, its own merger
            k = f"deepstack_merger_list.{cfg['deepstack'].index(i)}."
            z = layer_norm(x.reshape(n // unit, -1), g(k + "norm.weight"), g(k + "norm.bias"))
            z = F.gelu(z @ g(k + "linear_fc1.weight").T + g(k + "linear_fc1.bias"))
            deep.append(z @ g(k + "linear_fc2.weight").T + g(k + "linear_fc2.bias"))
    if cfg.get("qwen3"):
        y = layer_norm(x, g("merger.norm.weight"), g("merger.norm.bias")).reshape(n // unit, -1)
        y = F.gelu(y @ g("merger.linear_fc1.weight").T + g("merger.linear_fc1.bias"))
        y = y @ g("merger.linear_fc2.weight").T + g("merger.linear_fc2.bias")
        return x, y, deep
    y = layer_norm(x, g("merger.ln_q.weight"), o("merger.ln_q.bias")).reshape(n // unit, -1)
    y = F.gelu(y @ g("merger.mlp.0.weight").T + g("merger.mlp.0.bias"))
    y = y @ g("merger.mlp.2.weight").T + g("merger.mlp.2.bias")
    if cfg["window_px"]:
        rev = torch.argsort(widx)
        y = y[rev]
        x = x.reshape(n // unit, unit, -1)[rev].reshape(n, -1)
    return x, y


def mrope(grids, m):
    """get_rope_index's (t, h, w) ids of the images' merged tokens, back to back from 0."""
    rows, start = [], 0
    for t, h, w in grids:
        lt, lh, lw = t, h // m, w // m
        ti = torch.arange(lt).view(-1, 1).expand(-1, lh * lw).flatten()
        hi = torch.arange(lh).view(1, -1, 1).expand(lt, -1, lw).flatten()
        wi = torch.arange(lw).view(1, 1, -1).expand(lt, lh, -1).flatten()
        ids = torch.stack([ti, hi, wi], dim=1) + start
        rows.append(ids)
        start = int(ids.max()) + 1
    return torch.cat(rows)


def mrope_video(grids, m, step, split):
    """get_rope_index's ids of videos back to back: the temporal id of frame pair t is
    int(t * step) (Qwen2.5-VL: step = second_per_grid_t * tokens_per_second); split (Qwen3-VL):
    every frame pair is a grid of t = 1 of its own."""
    if split:
        return mrope([(1, h, w) for t, h, w in grids for _ in range(t)], m)
    rows, start = [], 0
    for t, h, w in grids:
        lh, lw = h // m, w // m
        ti = (torch.arange(t, dtype=torch.float64) * step).long().view(-1, 1).expand(-1, lh * lw).flatten()
        hi = torch.arange(lh).view(1, -1, 1).expand(t, -1, lw).flatten()
        wi = torch.arange(lw).view(1, 1, -1).expand(t, lh, -1).flatten()
        ids = torch.stack([ti, hi, wi], dim=1) + start
        rows.append(ids)
        start = int(ids.max()) + 1
    return torch.cat(rows)


def video_frames(images, wpx, hpx):
    """Five frames A, B, A, B, C of one size (B: A shifted, C: A inverted), saved as PNGs beside
    the images: frame pairs (A, B), (A, B), (C, C) once paired by temporal_patch_size 2."""
    from PIL import Image
    a = np.asarray(Image.open(os.path.join(images, f"image_{wpx}x{hpx}.png")).convert("RGB"))
    b = np.roll(a, (5, 11), axis=(0, 1)).copy()
    c = (255 - a).astype(np.uint8)
    Image.fromarray(b, "RGB").save(os.path.join(images, f"video_b_{wpx}x{hpx}.png"))
    Image.fromarray(c, "RGB").save(os.path.join(images, f"video_c_{wpx}x{hpx}.png"))
    return [a, b, a, b, c]


def video_cases(cases, sd, cfg, frames, mean, std, step, split):
    flat, grid = patchify(frames, mean, std, cfg["patch"], 2, 2)
    hidden, merged, *deep = tower(sd, cfg, flat, [grid])
    cases["video.grid_thw"] = torch.tensor([grid], dtype=torch.int32)
    cases["video.hidden"] = hidden.to(torch.float32)
    cases["video.projected"] = merged.to(torch.float32)
    for j, z in enumerate(deep[0] if deep else []):
        cases[f"video.deepstack_{j}"] = z.to(torch.float32)
    cases["video.mrope"] = mrope_video([grid], 2, step, split).to(torch.int32)


# ---- files --------------------------------------------------------------------------------------

def image(gen, width, height, out, name):
    ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    base = torch.stack([xs * 255.0 / (width - 1), ys * 255.0 / (height - 1),
                        127.5 + 100 * torch.sin(xs / 9.0) * torch.cos(ys / 13.0)], dim=2)
    noise = torch.randint(-12, 13, (height, width, 3), generator=gen).to(torch.float64)
    img = (base + noise).clamp(0, 255).round().to(torch.uint8).numpy()
    from PIL import Image
    Image.fromarray(img, "RGB").save(os.path.join(out, name))
    return img


def random_weights(shapes, gen):
    sd = {}
    for name, shape in shapes.items():
        if len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            std = 0.5 if name == "pos_embed.weight" else 1.0 / math.sqrt(fan_in)
            sd[name] = torch.randn(shape, generator=gen, dtype=torch.float64) * std
        elif name.endswith("weight"):
            sd[name] = 1.0 + 0.2 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:
            sd[name] = 0.2 * torch.randn(shape, generator=gen, dtype=torch.float64)
    # attention that is not uniform: larger q and k
    for name in sd:
        if name.endswith("attn.qkv.weight"):
            d = sd[name].shape[1]
            sd[name][: 2 * d] *= 3.0
    return {k: v.to(torch.float32).to(torch.float64) for k, v in sd.items()}  # as stored (F32)


def qwen3_shapes(cfg):
    d, mlp, e, p, tps, m = cfg["hidden"], cfg["mlp"], cfg["out"], cfg["patch"], cfg["tps"], cfg["merge"]
    u = d * m * m
    s = {"patch_embed.proj.weight": (d, 3, tps, p, p), "patch_embed.proj.bias": (d,),
         "pos_embed.weight": (cfg["positions"], d)}
    for i in range(cfg["layers"]):
        b = f"blocks.{i}."
        for n in ("norm1", "norm2"):
            s[b + n + ".weight"], s[b + n + ".bias"] = (d,), (d,)
        s[b + "attn.qkv.weight"], s[b + "attn.qkv.bias"] = (3 * d, d), (3 * d,)
        s[b + "attn.proj.weight"], s[b + "attn.proj.bias"] = (d, d), (d,)
        s[b + "mlp.linear_fc1.weight"], s[b + "mlp.linear_fc1.bias"] = (mlp, d), (mlp,)
        s[b + "mlp.linear_fc2.weight"], s[b + "mlp.linear_fc2.bias"] = (d, mlp), (d,)
    for k, norm in [("merger.", d)] + [(f"deepstack_merger_list.{j}.", u) for j in range(len(cfg["deepstack"]))]:
        s[k + "norm.weight"], s[k + "norm.bias"] = (norm,), (norm,)
        s[k + "linear_fc1.weight"], s[k + "linear_fc1.bias"] = (u, u), (u,)
        s[k + "linear_fc2.weight"], s[k + "linear_fc2.bias"] = (e, u), (e,)
    return s


def tower_shapes(cfg):
    if cfg.get("qwen3"):
        return qwen3_shapes(cfg)
    d, mlp, e, p, tps, m = cfg["hidden"], cfg["mlp"], cfg["out"], cfg["patch"], cfg["tps"], cfg["merge"]
    s = {"patch_embed.proj.weight": (d, 3, tps, p, p)}
    for i in range(cfg["layers"]):
        b = f"blocks.{i}."
        s[b + "norm1.weight"] = (d,)
        if not cfg["gated"]:
            s[b + "norm1.bias"] = (d,)
        s[b + "attn.qkv.weight"] = (3 * d, d)
        s[b + "attn.qkv.bias"] = (3 * d,)
        s[b + "attn.proj.weight"] = (d, d)
        s[b + "attn.proj.bias"] = (d,)
        s[b + "norm2.weight"] = (d,)
        if not cfg["gated"]:
            s[b + "norm2.bias"] = (d,)
        if cfg["gated"]:
            for n, sh in (("gate_proj", (mlp, d)), ("up_proj", (mlp, d)), ("down_proj", (d, mlp))):
                s[b + f"mlp.{n}.weight"] = sh
                s[b + f"mlp.{n}.bias"] = (sh[0],)
        else:
            s[b + "mlp.fc1.weight"] = (mlp, d)
            s[b + "mlp.fc1.bias"] = (mlp,)
            s[b + "mlp.fc2.weight"] = (d, mlp)
            s[b + "mlp.fc2.bias"] = (d,)
    s["merger.ln_q.weight"] = (d,)
    if not cfg["gated"]:
        s["merger.ln_q.bias"] = (d,)
    s["merger.mlp.0.weight"] = (d * m * m, d * m * m)
    s["merger.mlp.0.bias"] = (d * m * m,)
    s["merger.mlp.2.weight"] = (e, d * m * m)
    s["merger.mlp.2.bias"] = (e,)
    return s


SIZES = [(224, 336), (448, 448), (644, 420)]  # width x height


def make(out, gen, kind, images):
    qwen25 = kind == "qwen2_5_vl"
    cfg = {"hidden": 32, "heads": 2, "layers": 4 if qwen25 else 2, "mlp": 48 if qwen25 else 64, "out": 24,
           "patch": 14, "tps": 2, "merge": 2, "gated": qwen25, "window_px": 112 if qwen25 else 0,
           "fullatt": [1, 3] if qwen25 else []}
    os.makedirs(out, exist_ok=True)
    sd = random_weights(tower_shapes(cfg), gen)
    lm = {"lm_head.weight": torch.randn(40, cfg["out"], generator=gen)}
    if qwen25:
        names = {"model.visual." + k: v for k, v in sd.items()}
        names["model.language_model.embed_tokens.weight"] = torch.randn(40, cfg["out"], generator=gen)
        names.update(lm)
        keys = sorted(names)
        half = len(keys) // 2
        shards = {"model-00001-of-00002.safetensors": keys[:half], "model-00002-of-00002.safetensors": keys[half:]}
        weight_map = {}
        for f, ks in shards.items():
            save_safetensors(os.path.join(out, f), {k: names[k] for k in ks})
            weight_map.update({k: f for k in ks})
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)
        config = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
                  "text_config": {"model_type": "qwen2_5_vl_text", "hidden_size": cfg["out"]},
                  "vision_config": {"model_type": "qwen2_5_vl", "depth": cfg["layers"], "hidden_size": cfg["hidden"],
                                    "intermediate_size": cfg["mlp"], "num_heads": cfg["heads"],
                                    "out_hidden_size": cfg["out"], "patch_size": 14, "spatial_merge_size": 2,
                                    "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": [1, 3],
                                    "hidden_act": "silu", "in_channels": 3, "tokens_per_second": 2}}
        pre = {"image_processor_type": "Qwen2VLImageProcessor", "do_resize": True, "do_rescale": True,
               "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": CLIP_MEAN, "image_std": CLIP_STD,
               "size": {"shortest_edge": 3136, "longest_edge": 12845056}, "patch_size": 14,
               "temporal_patch_size": 2, "merge_size": 2}
    else:
        names = {"visual." + k: v for k, v in sd.items()}
        names["model.embed_tokens.weight"] = torch.randn(40, cfg["out"], generator=gen)
        names.update(lm)
        save_safetensors(os.path.join(out, "model.safetensors"), names)
        config = {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
                  "hidden_size": cfg["out"],
                  "vision_config": {"depth": cfg["layers"], "embed_dim": cfg["hidden"], "hidden_size": cfg["out"],
                                    "mlp_ratio": cfg["mlp"] / cfg["hidden"], "num_heads": cfg["heads"],
                                    "in_chans": 3, "patch_size": 14, "spatial_merge_size": 2,
                                    "temporal_patch_size": 2, "hidden_act": "quick_gelu"}}
        pre = {"image_processor_type": "Qwen2VLImageProcessor", "do_resize": True, "do_rescale": True,
               "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": CLIP_MEAN, "image_std": CLIP_STD,
               "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
               "merge_size": 2}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump(pre, f, indent=1)

    cases, flats, grids = {}, [], []
    for wpx, hpx in SIZES:
        from PIL import Image
        img = np.asarray(Image.open(os.path.join(images, f"image_{wpx}x{hpx}.png")).convert("RGB"))
        assert smart_resize(hpx, wpx, 28, 3136, 12845056) == (hpx, wpx)
        flat, grid = patchify([img], CLIP_MEAN, CLIP_STD, 14, 2, 2)
        hidden, merged, *deep = tower(sd, cfg, flat, [grid])
        name = f"image_{wpx}x{hpx}"
        cases[name + ".grid_thw"] = torch.tensor([grid], dtype=torch.int32)
        cases[name + ".hidden"] = hidden.to(torch.float32)
        cases[name + ".projected"] = merged.to(torch.float32)
        cases[name + ".mrope"] = mrope([grid], 2).to(torch.int32)
        flats.append(flat)
        grids.append(grid)
    # The three images in one call: one sequence, attention within each image.
    hidden, merged, *deep = tower(sd, cfg, torch.cat(flats), grids)
    cases["batch.grid_thw"] = torch.tensor(grids, dtype=torch.int32)
    cases["batch.projected"] = merged.to(torch.float32)
    cases["batch.mrope"] = mrope(grids, 2).to(torch.int32)
    # Self-check: the batch's rows are each image's.
    r = 0
    for (wpx, hpx), flat in zip(SIZES, flats):
        k = cases[f"image_{wpx}x{hpx}.projected"].shape[0]
        err = (cases["batch.projected"][r:r + k] - cases[f"image_{wpx}x{hpx}.projected"]).abs().max().item()
        assert err < 1e-5, err
        r += k
    if qwen25:  # a video of five frames at 2 fps: second_per_grid_t 1, tokens_per_second 2
        video_cases(cases, sd, cfg, video_frames(images, 224, 336), CLIP_MEAN, CLIP_STD, 2.0, False)
    save_safetensors(os.path.join(out, "cases.safetensors"), cases)


QWEN3_SIZES = [(224, 320), (448, 448), (640, 416)]  # multiples of 32 (16-px patches, 2x2 merge)


def make_qwen3(out, gen, images):
    """Qwen3-VL: 16-px patches, a Conv3d with bias, a learned 8 x 8 position table, LayerNorm blocks
    with a tanh-GELU MLP (linear_fc1 / linear_fc2), the merger (norm, linear_fc1, GELU,
    linear_fc2) and DeepStack mergers after blocks 0 and 1 (norm after the 2x2 shuffle)."""
    cfg = {"hidden": 32, "heads": 2, "layers": 3, "mlp": 48, "out": 24, "patch": 16, "tps": 2, "merge": 2,
           "gated": False, "window_px": 0, "fullatt": [], "qwen3": True, "positions": 64, "deepstack": [0, 1]}
    os.makedirs(out, exist_ok=True)
    sd = random_weights(tower_shapes(cfg), gen)
    names = {"model.visual." + k: v for k, v in sd.items()}
    names["model.language_model.embed_tokens.weight"] = torch.randn(40, cfg["out"], generator=gen)
    save_safetensors(os.path.join(out, "model.safetensors"), names)
    config = {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
              "text_config": {"model_type": "qwen3_vl_text", "hidden_size": cfg["out"]},
              "vision_config": {"model_type": "qwen3_vl", "depth": 3, "hidden_size": 32, "intermediate_size": 48,
                                "num_heads": 2, "out_hidden_size": 24, "patch_size": 16, "spatial_merge_size": 2,
                                "temporal_patch_size": 2, "hidden_act": "gelu_pytorch_tanh", "in_channels": 3,
                                "num_position_embeddings": 64, "deepstack_visual_indexes": [0, 1]}}
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    pre = {"image_processor_type": "Qwen2VLImageProcessorFast", "do_resize": True, "do_rescale": True,
           "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
           "size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16, "temporal_patch_size": 2,
           "merge_size": 2}
    json.dump(pre, open(os.path.join(out, "preprocessor_config.json"), "w"), indent=1)
    from PIL import Image
    cases, flats, grids = {}, [], []
    for wpx, hpx in QWEN3_SIZES:
        img = np.asarray(Image.open(os.path.join(images, f"image_{wpx}x{hpx}.png")).convert("RGB"))
        assert smart_resize(hpx, wpx, 32, 65536, 16777216) == (hpx, wpx)
        flat, grid = patchify([img], [0.5] * 3, [0.5] * 3, 16, 2, 2)
        hidden, merged, deep = tower(sd, cfg, flat, [grid])
        name = f"image_{wpx}x{hpx}"
        cases[name + ".grid_thw"] = torch.tensor([grid], dtype=torch.int32)
        cases[name + ".hidden"] = hidden.to(torch.float32)
        cases[name + ".projected"] = merged.to(torch.float32)
        for j, z in enumerate(deep):
            cases[name + f".deepstack_{j}"] = z.to(torch.float32)
        cases[name + ".mrope"] = mrope([grid], 2).to(torch.int32)
        flats.append(flat)
        grids.append(grid)
    hidden, merged, deep = tower(sd, cfg, torch.cat(flats), grids)
    cases["batch.grid_thw"] = torch.tensor(grids, dtype=torch.int32)
    cases["batch.projected"] = merged.to(torch.float32)
    for j, z in enumerate(deep):
        cases[f"batch.deepstack_{j}"] = z.to(torch.float32)
    cases["batch.mrope"] = mrope(grids, 2).to(torch.int32)
    video_cases(cases, sd, cfg, video_frames(images, 224, 320), [0.5] * 3, [0.5] * 3, 1.0, True)
    save_safetensors(os.path.join(out, "cases.safetensors"), cases)


def sweep(out):
    rows = []
    limits = [(3136, 12845056), (56 * 56, 28 * 28 * 256), (4 * 28 * 28, 16 * 28 * 28), (256 * 28 * 28, 1024 * 28 * 28)]
    sizes = [(1, 1), (27, 27), (28, 28), (70, 70), (42, 98), (224, 336), (448, 448), (420, 644), (1944, 2592),
             (2592, 1944), (768, 1024), (1080, 1920), (5000, 30), (30, 5000), (100, 19999), (333, 777), (14, 600),
             (3000, 4000), (8192, 8192), (123, 45), (1001, 1003), (59, 59), (57, 85), (99, 43)]
    for factor in (28, 32):
        for mn, mx in limits:
            for h, w in sizes:
                try:
                    rh, rw = smart_resize(h, w, factor, mn, mx)
                except ValueError:
                    rh, rw = 0, 0
                rows.append([h, w, factor, mn, mx, rh, rw])
    with open(os.path.join(out, "qwen_smart_resize.json"), "w") as f:
        json.dump({"columns": ["height", "width", "factor", "min_pixels", "max_pixels", "resized_height",
                               "resized_width"], "rows": rows}, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                                                  "encoder"))
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(20261206)
    torch.set_num_threads(1)
    images = os.path.join(a.out, "qwen_images")
    os.makedirs(images, exist_ok=True)
    for wpx, hpx in SIZES:
        image(gen, wpx, hpx, images, f"image_{wpx}x{hpx}.png")
    # The processor's resampling: PIL's bicubic on 8-bit RGB, shrinking (antialiased), enlarging,
    # and one axis only.
    from PIL import Image
    src = image(gen, 250, 187, images, "resize_src_250x187.png")
    for w, h in ((252, 196), (98, 70), (406, 294), (250, 70)):
        Image.fromarray(src, "RGB").resize((w, h), Image.BICUBIC).save(os.path.join(images, f"resize_{w}x{h}.png"))
    make(os.path.join(a.out, "qwen2_vl"), gen, "qwen2_vl", images)
    make(os.path.join(a.out, "qwen2_5_vl"), gen, "qwen2_5_vl", images)
    gen3 = torch.Generator().manual_seed(20261207)
    for wpx, hpx in QWEN3_SIZES:
        if (wpx, hpx) not in SIZES:  # always drawn, so that the weights after them are the same
            image(gen3, wpx, hpx, images, f"image_{wpx}x{hpx}.png")
    make_qwen3(os.path.join(a.out, "qwen3_vl"), gen3, images)
    sweep(a.out)


if __name__ == "__main__":
    main()
