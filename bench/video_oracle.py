#!/usr/bin/python3
"""How little of a trained tower's work can any token-reuse scheme do on a clip? An oracle.

    PYTHONPATH=build/python /usr/bin/python3 bench/video_oracle.py --model CKPT \\
        [--clips /tmp/fovea-clips] [--only static_away,static_through] [--frames 48] [--budget 273] \\
        [--taus 0.05,0.065,0.08,0.065:-0.5,0.065:0.5] [--save]

`fovea video --reuse incremental` keeps a token's layer output (its input plus the update it
had when last computed) unless something says the output would move: its own input changed, or
the attention bound says the keys and values it attends to moved it. Whatever the criterion, a
scheme of that family decides per token and layer "recompute" or "keep", and pays for every
recomputed row. This script asks what the best such decision costs: at every layer it computes
every token's true output (from the layer's current, already approximate, inputs; free for the
oracle) and recomputes exactly the tokens whose kept output is off by more than tau (relative
L2), keeping the rest, frame after frame, errors carried as a real scheme carries them. The
tokens come from fovea's own video session (the same layouts, hysteresis and token rows as
`fovea video`, fixation at (0.8 W, 0.2 H) as bench/video_bench.py), the tower is the checkpoint
run in float64 torch (HF ViT naming; checked against fovea's own encode of frame 0).

Per tau: the work (multiply-adds of the recomputed rows over a full encode's, counted as
video_bench's encoder_work counts them: a row whose own input moved pays its whole layer, one
that only needs its attention brought up to date pays attention + output projection + MLP; the
oracle's selection itself is free, so a real scheme pays more), and the fidelity as
`fovea video --check` measures it (per frame the mean per-token cosine to the same tokens
encoded in full; the mean over frames after the first, and the worst frame). The smallest work
that holds mean >= 0.99 and worst frame >= 0.98 is a lower bound on what any keep-or-recompute
scheme of this granularity spends; with the measured cost of a frame outside the linear layers
and attention (--off-ms, --gemm-ms: from a profile of `fovea video`), it bounds the speed-up.
Also per clip: how far the full encodes themselves move from frame to frame (the share of
tokens whose final embedding's cosine to the frame before is below 0.99), which no reuse can
skip; and with --screens N, whether the tokens kept whole (own input unchanged) that need
recomputing because the keys and values they attend to changed could be found more cheaply than
by the attention bound's exact update: two screens (their old attention mass on the changed
keys; a Cauchy-Schwarz bound on their update), the share of kept tokens each lets through
against the share of the needed ones it catches.
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np
import torch

import provenance  # bench/provenance.py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import fovea  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="an HF ViT checkpoint (model.safetensors, config.json beside it)")
    ap.add_argument("--clips", default="/tmp/fovea-clips")
    ap.add_argument("--only", default="static_away,static_through")
    ap.add_argument("--frames", type=int, default=48)
    ap.add_argument("--budget", type=int, default=273)
    ap.add_argument("--taus", default="0.05,0.065,0.08,0.065:-0.5,0.065:0.5",
                    help="thresholds, ',' between; TAU:S gives layer l of L the threshold TAU * (1 + S * (2 l / (L - 1) - 1)) "
                         "(S > 0 keeps more in the late layers, S < 0 in the early ones)")
    ap.add_argument("--off-ms", type=float, default=None,
                    help="CPU ms of a full (--reuse off) frame, to turn work into a speed-up bound")
    ap.add_argument("--gemm-ms", type=float, default=None,
                    help="of which the linear layers and attention (the part that scales with the work)")
    ap.add_argument("--screens", type=int, default=0,
                    help="also, over this many frames with the oracle at --screen-tau: how well two cheap screens "
                         "find the kept tokens that need recomputing for their attention (0: skip)")
    ap.add_argument("--screen-tau", type=float, default=0.065)
    ap.add_argument("--json", default=None)
    provenance.add_arguments(ap)
    return ap.parse_args()


class Tower:
    """An HF ViT (ViTModel / ViTForImageClassification naming) in float64 torch, on fovea tokens."""

    def __init__(self, path):
        cfg = json.load(open(os.path.join(os.path.dirname(path), "config.json")))
        self.D, self.heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.eps = cfg.get("layer_norm_eps", 1e-12)
        self.Mh = cfg["intermediate_size"]
        tf = fovea.load(path)
        pre = "vit." if any(k.startswith("vit.") for k in tf.keys()) else ""

        def t(name):
            return torch.from_numpy(np.array(tf[pre + name], dtype=np.float64))

        self.patch_w = t("embeddings.patch_embeddings.projection.weight").reshape(self.D, -1)
        self.patch_b = t("embeddings.patch_embeddings.projection.bias")
        self.cls = t("embeddings.cls_token").reshape(1, self.D)
        pos = t("embeddings.position_embeddings").reshape(-1, self.D)
        self.cls_pos = pos[:1]
        self.G = int(round((pos.shape[0] - 1) ** 0.5))
        self.grid = pos[1:].reshape(self.G, self.G, self.D)
        self.layers = []
        for i in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            a = p + "attention.attention."
            self.layers.append(dict(
                ln1=(t(p + "layernorm_before.weight"), t(p + "layernorm_before.bias")),
                qkv_w=torch.cat([t(a + n + ".weight") for n in ("query", "key", "value")]),
                qkv_b=torch.cat([t(a + n + ".bias") for n in ("query", "key", "value")]),
                out=(t(p + "attention.output.dense.weight"), t(p + "attention.output.dense.bias")),
                ln2=(t(p + "layernorm_after.weight"), t(p + "layernorm_after.bias")),
                fc1=(t(p + "intermediate.dense.weight"), t(p + "intermediate.dense.bias")),
                fc2=(t(p + "output.dense.weight"), t(p + "output.dense.bias"))))
        self.post = (t("layernorm.weight"), t("layernorm.bias"))
        # Multiply-adds of a row's linear layers; of its output projection and MLP only.
        self.per_token = 4 * self.D * self.D + 2 * self.D * self.Mh
        self.per_token_att = self.D * self.D + 2 * self.D * self.Mh

    def _bicubic(self, u, v):
        """The G×G table sampled at table coordinates (u, v) per token: upsample_bicubic2d's
        cubic convolution (A = −0.75), taps clamped, rows first (src/encoder/positions.cpp)."""
        A = -0.75

        def w(t):
            c1 = lambda x: ((A + 2) * x - (A + 3)) * x * x + 1  # noqa: E731
            c2 = lambda x: ((A * x - 5 * A) * x + 8 * A) * x - 4 * A  # noqa: E731
            return torch.stack([c2(t + 1), c1(t), c1(1 - t), c2(2 - t)], 1)

        fu, fv = torch.floor(u), torch.floor(v)
        wx, wy = w(u - fu), w(v - fv)
        ix, iy = fu.long(), fv.long()
        out = torch.zeros(len(u), self.D, dtype=torch.float64)
        for j in range(4):
            y = (iy - 1 + j).clamp(0, self.G - 1)
            for i in range(4):
                x = (ix - 1 + i).clamp(0, self.G - 1)
                out += (wy[:, j] * wx[:, i])[:, None] * self.grid[y, x]
        return out

    def embed(self, patches, positions, W, H):
        """Layer 0's input rows: the class token, then the tokens (patch embedding + position)."""
        p = torch.from_numpy(np.asarray(patches, dtype=np.float64).reshape(len(patches), -1))
        pos = torch.from_numpy(np.asarray(positions, dtype=np.float64))
        x = p @ self.patch_w.T + self.patch_b
        x = x + self._bicubic(pos[:, 0] * self.G / W - 0.5, pos[:, 1] * self.G / H - 0.5)
        return torch.cat([self.cls + self.cls_pos, x])

    def ln(self, x, wb):
        return torch.nn.functional.layer_norm(x, (self.D,), wb[0], wb[1], self.eps)

    def qkv(self, L, x):
        return self.ln(x, L["ln1"]) @ L["qkv_w"].T + L["qkv_b"]

    def finish(self, L, x, q, k, v):
        """Rows x (their queries q) attending to every key k and value v: the layer's outputs."""
        hd = self.D // self.heads
        qh = q.reshape(len(q), self.heads, hd).transpose(0, 1)
        kh = k.reshape(len(k), self.heads, hd).transpose(0, 1)
        vh = v.reshape(len(v), self.heads, hd).transpose(0, 1)
        a = torch.softmax(qh @ kh.transpose(1, 2) / hd ** 0.5, -1) @ vh
        h = x + a.transpose(0, 1).reshape(len(q), self.D) @ L["out"][0].T + L["out"][1]
        m = torch.nn.functional.gelu(self.ln(h, L["ln2"]) @ L["fc1"][0].T + L["fc1"][1])
        return h + m @ L["fc2"][0].T + L["fc2"][1]

    def full(self, x0):
        x = x0
        for L in self.layers:
            q, k, v = self.qkv(L, x).split(self.D, 1)
            x = self.finish(L, x, q, k, v)
        return self.ln(x, self.post)


def cosines(a, b):
    """Per row cosine of a to b (the class token left out, as fovea's embeddings do)."""
    a, b = a[1:], b[1:]
    return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1)).clamp_min(1e-30)


def oracle_pass(tower, frames, taus, look=None):
    """The keep-or-recompute oracle over the frames (taus: a threshold per layer). For every frame
    after the first (computed in full) yields its last hidden state and, per layer, the rows it
    recomputed and the rows whose own input moved. look(L, x, ref, K, V, q, k, v, err, moved, old),
    when given, sees each layer's state before the selection: the layer's inputs, the kept rows'
    references, keys and values, the fresh q|k|v, each kept output's error, the rows that moved."""
    D = tower.D
    cache = None  # per layer: (input the row was computed from, K, V, update), rows of the frame before
    for fr in frames:
        x = fr["x0"]
        T = len(x)
        if cache is None:
            cache = []
            for L in tower.layers:
                q, k, v = tower.qkv(L, x).split(D, 1)
                y = tower.finish(L, x, q, k, v)
                cache.append([x.clone(), k, v, y - x])
                x = y
            continue
        prev = fr["prev_t"]  # [T]: row of the frame before, -1 new
        old = prev >= 0
        layers = []
        for li, L in enumerate(tower.layers):
            z = torch.zeros(T, D, dtype=torch.float64)
            ref, K, V, U = z.clone(), z.clone(), z.clone(), z.clone()
            ref[old], K[old], V[old], U[old] = (c[prev[old]] for c in cache[li])
            q, k, v = tower.qkv(L, x).split(D, 1)
            kept = x + U
            # Every row recomputed (the oracle's view) against its kept output.
            err = (tower.finish(L, x, q, k, v) - kept).norm(dim=1) / kept.norm(dim=1).clamp_min(1e-30)
            moved = ((x - ref).norm(dim=1) > 1e-9 * ref.norm(dim=1)) | ~old
            if look:
                look(L, x, ref, K, V, q, k, v, err, moved, old)
            sel = (~old) | (err > taus[li])
            # The recomputed rows' keys and values replace theirs; the kept rows' stay as computed.
            K[sel], V[sel] = k[sel], v[sel]
            y = kept.clone()
            if sel.any():
                y[sel] = tower.finish(L, x[sel], q[sel], K, V)
            ref[sel], U[sel] = x[sel], y[sel] - x[sel]
            cache[li] = [ref, K, V, U]
            layers.append((sel, moved))
            x = y
        yield x, layers


def oracle_run(tower, frames, tau, slope=0.0):
    """The keep-or-recompute oracle over the frames: per frame (work, mean cosine, worst token)."""
    D, nl = tower.D, len(tower.layers)
    taus = [tau * (1 + slope * (2 * li / max(nl - 1, 1) - 1)) for li in range(nl)]
    out = [(1.0, 1.0, 1.0)]  # the first frame: computed in full
    for fr, (x, layers) in zip(frames[1:], oracle_pass(tower, frames, taus)):
        T = len(x)
        work = 0.0
        for sel, moved in layers:
            n_in, n_att = int((sel & moved).sum()), int((sel & ~moved).sum())
            work += n_in * tower.per_token + n_att * tower.per_token_att + (n_in + n_att) * 2 * T * D
        full_work = nl * (T * tower.per_token + 2 * T * T * D)
        c = cosines(tower.ln(x, tower.post), fr["full"])
        out.append((work / full_work, float(c.mean()), float(c.min())))
    return out


def screen_study(tower, frames, tau):
    """The oracle at tau over the frames, and per layer and kept token (own input unchanged) two
    cheap screens of whether the keys and values that changed moved its output: its old attention
    mass on the changed keys (largest over the heads), and a Cauchy-Schwarz bound on its update,
    sum over changed keys j of p_ij (|dv_j| + (e^(|q_i| |dk_j| / sqrt d) - 1)(|v_j - att_i| + |dv_j|)),
    per head, their root sum of squares over the reference's norm. Returns (mass, bound, error)
    arrays over every kept token of every layer and frame after the first."""
    D, H = tower.D, tower.heads
    hd = D // H
    rec = []

    def look(L, x, ref, K, V, q, k, v, err, moved, old):
        T = len(x)
        # What the kept tokens attended with: their reference's queries, the cached keys.
        qh = tower.qkv(L, ref)[:, :D].reshape(T, H, hd).transpose(0, 1)
        kh, vh = K.reshape(T, H, hd).transpose(0, 1), V.reshape(T, H, hd).transpose(0, 1)
        p = torch.softmax(qh @ kh.transpose(1, 2) / hd ** 0.5, -1)
        att = p @ vh
        pc = p[:, :, moved]
        mass = pc.sum(-1).max(0).values
        dk = (k.reshape(T, H, hd).transpose(0, 1) - kh).norm(dim=-1)[:, moved]
        dv = (v.reshape(T, H, hd).transpose(0, 1) - vh).norm(dim=-1)[:, moved]
        dist = (vh[:, None, moved, :] - att[:, :, None, :]).norm(dim=-1)
        grow = torch.exp(qh.norm(dim=-1)[:, :, None] * dk[:, None, :] / hd ** 0.5) - 1
        b = (pc * (dv[:, None, :] + grow * (dist + dv[:, None, :]))).sum(-1)
        bound = (b ** 2).sum(0).sqrt() / ref.norm(dim=1).clamp_min(1e-30)
        keep = old & ~moved
        rec.append(torch.stack([mass[keep], bound[keep], err[keep]], 1))

    for _ in oracle_pass(tower, frames, [tau] * len(tower.layers), look):
        pass
    r = torch.cat(rec).numpy()
    return r[:, 0], r[:, 1], r[:, 2]


def screens_report(tower, frames, tau):
    """Per screen and threshold: the share of kept tokens it lets through, and of those that need
    recomputing (error > tau) the share it catches."""
    mass, bound, err = screen_study(tower, frames, tau)
    need = err > tau
    out = {"kept_tokens": int(len(err)), "need_share": float(need.mean()), "screens": []}
    print(f"  screens ({len(frames)} frames, tau {tau:g}): {100 * need.mean():.1f}% of {len(err)} kept tokens need "
          f"recomputing for their attention", flush=True)
    for screen, val, mus in (("attention mass on changed keys", mass, (0.01, 0.02, 0.05, 0.1, 0.2)),
                             ("Cauchy-Schwarz bound", bound, (0.02, 0.05, 0.12, 0.3))):
        for mu in mus:
            through = val > mu
            caught = float((through & need).sum() / max(need.sum(), 1))
            out["screens"].append({"screen": screen, "threshold": mu, "through": float(through.mean()),
                                   "caught": caught})
            print(f"    {screen} > {mu:g}: lets {100 * through.mean():.1f}% through, catches {100 * caught:.1f}%",
                  flush=True)
    return out


def load_frames(tower, clip, a):
    r = fovea.VideoReader(clip)
    W, H = r.info["width"], r.info["height"]
    # The checkpoint's own normalisation (preprocessor_config.json beside it; HF ViT's 0.5 else).
    pp = os.path.join(os.path.dirname(a.model), "preprocessor_config.json")
    cfg = json.load(open(pp)) if os.path.exists(pp) else {}
    res = fovea.video(clip, None, a.budget, [(0.8 * W, 0.2 * H)], max_frames=a.frames,
                      mean=cfg.get("image_mean", [0.5] * 3), std=cfg.get("image_std", [0.5] * 3))
    frames = []
    for f in res:
        x0 = tower.embed(f.patches, f.positions, W, H)
        pr = np.asarray(f.previous_row) if f.previous_row is not None and len(f.previous_row) else None
        prev_t = torch.full((len(x0),), -1, dtype=torch.long)
        prev_t[0] = 0 if frames else -1
        if pr is not None and frames:
            prev_t[1:] = torch.from_numpy(np.where(pr >= 0, pr + 1, -1).astype(np.int64))
        frames.append(dict(x0=x0, full=tower.full(x0), prev_t=prev_t, patches=f.patches, positions=f.positions))
    return frames, (W, H)


def main():
    a = parse_args()
    torch.set_num_threads(2)
    tower = Tower(a.model)
    model = fovea.Model(a.model)
    taus = [tuple(float(v) for v in (t.split(":") + ["0"])[:2]) for t in a.taus.split(",")]
    result = {"model": a.model, "budget": a.budget, "frames": a.frames, "taus": taus, "clips": []}
    rows = []
    for name in a.only.split(","):
        clip = os.path.join(a.clips, name + ".mp4")
        frames, (W, H) = load_frames(tower, clip, a)
        # The tower in torch is fovea's: frame 0 through fovea's own encoder.
        f0 = frames[0]
        ref = model.encode(np.ascontiguousarray(f0["patches"]), positions=np.ascontiguousarray(f0["positions"]),
                           image_size=(W, H))
        check = float(cosines(torch.cat([torch.zeros(1, tower.D, dtype=torch.float64),
                                         torch.from_numpy(np.asarray(ref, dtype=np.float64))]), f0["full"]).min())
        # How far the full encodes move between frames (matched rows).
        moving = []
        for f in range(1, len(frames)):
            prev_t = frames[f]["prev_t"]
            old = prev_t[1:] >= 0
            cur = frames[f]["full"][1:][old]
            bef = frames[f - 1]["full"][prev_t[1:][old]]
            c = (cur * bef).sum(1) / (cur.norm(dim=1) * bef.norm(dim=1))
            moving.append(float((c < 0.99).sum() + (~old).sum()) / len(prev_t[1:]))
        entry = {"clip": name, "size": [W, H], "tokens": int(np.mean([len(f["x0"]) - 1 for f in frames])),
                 "torch_vs_fovea_worst_token": check, "moving_share_mean": statistics.fmean(moving),
                 "moving_share_max": max(moving), "taus": []}
        print(f"{name}: {W}x{H}, {entry['tokens']} tokens, torch tower vs fovea's encode (frame 0) worst token "
              f"cosine {check:.6f}; tokens whose full-encode embedding moved (cosine < 0.99 to the frame before, "
              f"or new): {100 * entry['moving_share_mean']:.1f}% mean, {100 * entry['moving_share_max']:.1f}% max",
              flush=True)
        for tau, slope in taus:
            pf = oracle_run(tower, frames, tau, slope)[1:]
            work = statistics.fmean(p[0] for p in pf)
            mean = statistics.fmean(p[1] for p in pf)
            worst = min(p[1] for p in pf)
            worst_tok = min(p[2] for p in pf)
            row = {"clip": name, "tau": tau, "slope": slope, "work": work, "cosine_mean": mean, "cosine_worst_frame": worst,
                   "cosine_worst_token": worst_tok, "holds": mean >= 0.99 and worst >= 0.98}
            if a.off_ms and a.gemm_ms:
                row["speedup_bound"] = a.off_ms / (a.off_ms - a.gemm_ms + work * a.gemm_ms)
            rows.append(row)
            entry["taus"].append({**row, "per_frame": pf})
            print(f"  tau {tau:<6g} slope {slope:<5g} work {work:.3f}  cosine mean {mean:.4f} worst frame {worst:.4f} "
                  f"worst token {worst_tok:.3f}" + (f"  speed-up <= {row['speedup_bound']:.2f}x"
                                                    if "speedup_bound" in row else ""), flush=True)
        if a.screens > 0:
            entry["screens"] = screens_report(tower, frames[:a.screens], a.screen_tau)
        result["clips"].append(entry)
    if a.json:
        json.dump(result, open(a.json, "w"), indent=1)
    provenance.output(a, "video-oracle", result, rows=rows, threads=2, versions={"torch": torch.__version__})


if __name__ == "__main__":
    main()
