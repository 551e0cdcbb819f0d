#!/usr/bin/python3
"""fovea video: incremental vs exact vs off, fidelity and speed per frame, same run.

    scripts/make_test_clips.sh /tmp/fovea-clips            # the four clips (real photos, ffmpeg)
    /usr/bin/python3 bench/video_bench.py [--clips /tmp/fovea-clips] [--frames 25] [--threads 2]
                                          [--model random:vit-b16 | CKPT] [--random random:vit-ti16 | none]
                                          [--settings 'FLAGS;FLAGS...'] [--rounds 3]
                                          [--precision fp32,bf16] [--group 8] [--torch-frames 2] [--json OUT]
                                          [--foveation mixed | windows]

Per model (--model, and --random: random weights of the checkpoint's shape, measured beside it
in the same run, because random weights make every approximation look free) and clip (fixation
at (0.8 W, 0.2 H), budget 273), per incremental setting (--settings: extra `fovea video` flags,
';' between settings; '' is the defaults):
  * fidelity, frame by frame: `fovea video --reuse incremental --check` re-encodes each frame's
    tokens in full in the same process; per frame the mean and the worst per-token cosine of the
    incremental embeddings to it (and the incremental encoder's own drift estimate, when it makes
    one). The same run's output file is also compared with the `--reuse off` run's, frame by
    frame, wherever both runs kept the same tokens (the layout can differ: hysteresis);
  * speed, frame by frame: `--reuse incremental` and `--reuse off` runs alternated --rounds
    times, the median of each frame's time over the rounds; the per-frame speed-up is off / incr
    of those medians; also the full re-encode interleaved in the --check run;
  * CPU time per frame (user + system of the run, less a one-frame run's, over the frames after the
    first) of the same runs, and its ratio off / incr: on a shared machine the wall-clock times grow
    with the load (more so for the run with more threads waiting on each other), the CPU time does not;
  * `--reuse exact` and decode alone (fovea's reader against `ffmpeg -f null` and
    `ffmpeg -pix_fmt gbrp -f null`), once.
Once, for random:vit-b16 only (its layers are torchvision's ViT-B/16): torch's uniform per-frame
encode of a decoded frame (CLIP normalisation, 16x16 patches, fp32) at the frame's native grid
(W/16 x H/16 tokens, what a native-resolution VLM encodes) and at 224x224 (196 tokens).
Then `bench_video_group` on the first clip: the incremental encoder alone with G = 1, 8, 16 and
full encodes, interleaved in one process (and whether every G gives the G = 1 embeddings).
With --foveation windows, every run is `fovea video --foveation windows` (a base view and native
windows, each its own sequence): the reused runs are `--reuse exact` (a window whose pixels did not
change hands on its previous outputs; a setting may say `--reuse incremental` instead), their
competitor `--reuse off` re-encodes every window of every frame, and --check compares with every
window of the frame's plan encoded from scratch. No --group, no exact run, no group benchmark.
Frame 0 (the full first encode) is left out of the means; `incremental_steady_ms` also leaves out
the first group (frames 1..G, which pay oneDNN's one-time costs: primitives for new row counts,
weights packed on their second use);
so are refreshes in the per-stage breakdown.
Ratios are computed from numbers of the same run; the machine is shared, so absolute times are noisy.
"""
import argparse
import copy
import datetime
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import _build  # bench/_build.py: builds the bench_* executable a script runs
import provenance  # bench/provenance.py: --save keeps the result with its commit and machine

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLIPS = ["static_away", "static_through", "pan", "cut"]
TORCH_MODEL = "random:vit-b16"  # the model torch's baseline builds (torchvision's ViT-B/16 layers)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--clips", default="/tmp/fovea-clips")
    ap.add_argument("--only", default=",".join(CLIPS))
    ap.add_argument("--frames", type=int, default=25)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=int, default=273)
    ap.add_argument("--model", default=TORCH_MODEL, help="checkpoint (file or folder) or random:NAME")
    ap.add_argument("--random", default=None,
                    help="random weights measured beside --model in the same run (default: random:vit-ti16 "
                         "for a checkpoint, none for a random model); 'none' to skip")
    ap.add_argument("--settings", default="",
                    help="incremental settings, ';' between them, each extra `fovea video` flags ('' = defaults)")
    ap.add_argument("--rounds", type=int, default=3, help="incremental and off runs alternated this many times")
    ap.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32, bf16")
    ap.add_argument("--group", type=int, default=8, help="--group G of the incremental runs")
    ap.add_argument("--no-group-bench", action="store_true")
    ap.add_argument("--no-exact", action="store_true", help="skip the --reuse exact run")
    ap.add_argument("--no-decode", action="store_true", help="skip the decode-alone measurements")
    ap.add_argument("--torch-frames", type=int, default=2)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--foveation", default="mixed", choices=["mixed", "windows"],
                    help="windows: every run in the windows foveation, reuse per window (see above)")
    provenance.add_arguments(ap)
    a = ap.parse_args()
    if a.random is None:
        a.random = "none" if a.model.startswith("random:") else "random:vit-ti16"
    return a


ARGS = parse_args()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def fovea_video(clip, *extra, out=None):
    """`fovea video CLIP --json ...`; the output file goes to `out` when given (else a temp file)."""
    exe = os.path.join(ARGS.build_dir, "fovea")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [exe, "video", clip, "--json", "--threads", str(ARGS.threads), *extra]
        if "--decode-only" not in extra:
            cmd += ["-o", out or os.path.join(tmp, "out.safetensors")]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run(cmd, capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"fovea video failed ({' '.join(cmd)}): {r.stderr.strip()}")
    out = json.loads(r.stdout)
    # The run's CPU time (user + system, every thread): unlike the wall-clock times it does not
    # grow when other processes take the cores, so its ratio shows the work saved on a loaded machine.
    out["cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return out


def read_safetensors(path, names):
    """The named tensors of a safetensors file as numpy arrays (no safetensors package needed)."""
    import numpy as np
    dtypes = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8,
              "F16": np.float16}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name in names:
            h = header[name]
            a, b = h["data_offsets"]
            f.seek(base + a)
            out[name] = np.frombuffer(f.read(b - a), dtype=dtypes[h["dtype"]]).reshape(h["shape"])
    return out


def cosines_vs_file(inc_path, ref_path):
    """Per frame: (mean, worst) per-token cosine of inc's embeddings to ref's, or None where the
    two runs kept different tokens."""
    import numpy as np
    a = read_safetensors(inc_path, ["frame_offsets", "positions", "embeddings"])
    b = read_safetensors(ref_path, ["frame_offsets", "positions", "embeddings"])
    out = []
    for f in range(min(len(a["frame_offsets"]), len(b["frame_offsets"])) - 1):
        a0, a1 = a["frame_offsets"][f], a["frame_offsets"][f + 1]
        b0, b1 = b["frame_offsets"][f], b["frame_offsets"][f + 1]
        if a1 - a0 != b1 - b0 or not np.array_equal(a["positions"][a0:a1], b["positions"][b0:b1]):
            out.append(None)
            continue
        x = a["embeddings"][a0:a1].astype(np.float64)
        y = b["embeddings"][b0:b1].astype(np.float64)
        c = (x * y).sum(1) / np.sqrt((x * x).sum(1) * (y * y).sum(1))
        out.append((float(c.mean()), float(c.min())))
    return out


def probe(clip):
    r = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries", "stream=width,height",
                        "-of", "json", clip], capture_output=True, text=True, check=True)
    s = json.loads(r.stdout)["streams"][0]
    return s["width"], s["height"]


def ffmpeg_ms(*args):
    """ffmpeg's own -benchmark real time (decode + filters, process start-up excluded)."""
    r = subprocess.run(["ffmpeg", "-hide_banner", "-nostats", "-benchmark", *args], check=True, capture_output=True,
                       text=True)
    for line in r.stderr.splitlines():
        if "rtime=" in line:
            return float(line.split("rtime=")[1].split("s")[0]) * 1e3
    sys.exit("ffmpeg -benchmark printed no rtime")


def mean_after_first(xs):
    xs = xs[1:] if len(xs) > 1 else xs
    return statistics.fmean(xs)


def torch_baseline(clip, frames):
    import numpy as np
    import torch
    import torchvision
    import av
    torch.set_num_threads(ARGS.threads)
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(image_size=224, patch_size=16, num_layers=12, num_heads=12,
                                                 hidden_dim=768, mlp_dim=3072).eval()
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1)
    std = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)
    imgs = []
    with av.open(clip) as c:
        for f in c.decode(video=0):
            imgs.append(f.to_ndarray(format="rgb24"))
            if len(imgs) >= frames:
                break

    def encode(img, size, model=model, dtype=torch.float32):
        x = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).unsqueeze(0).float().div(255)
        x = torch.nn.functional.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
        x = ((x - mean) / std).to(dtype)
        gh, gw = size[0] // 16, size[1] // 16
        t = model.conv_proj(x).flatten(2).transpose(1, 2)  # [1, N, 768]: the patches through the embedding
        t = torch.cat([model.class_token, t], dim=1)
        t = t + torch.zeros(1, gh * gw + 1, 768, dtype=dtype)  # positions (interpolated in a real model; zeros cost the same)
        return model.encoder.ln(model.encoder.layers(t))

    out = {}
    model16 = copy.deepcopy(model).to(torch.bfloat16) if "bf16" in ARGS.precision else None
    with torch.inference_mode():
        h, w = imgs[0].shape[:2]
        for name, size in (("native", (h // 16 * 16 + (16 if h % 16 else 0), w // 16 * 16 + (16 if w % 16 else 0))),
                           ("224", (224, 224))):
            ts = []
            for img in imgs:
                t0 = time.perf_counter()
                encode(img, size)
                ts.append((time.perf_counter() - t0) * 1e3)
            out[name] = {"tokens": (size[0] // 16) * (size[1] // 16), "ms": statistics.median(ts)}
            if "bf16" in ARGS.precision:
                # The same encode with bf16 weights and activations (torch's oneDNN/AMX kernels
                # where it has them; CPU autocast fails in torch 1.13's fused attention): the
                # competitor for fovea's bf16 numbers.
                ts = []
                encode(imgs[0], size, model16, torch.bfloat16)  # warm-up
                for img in imgs:
                    t0 = time.perf_counter()
                    encode(img, size, model16, torch.bfloat16)
                    ts.append((time.perf_counter() - t0) * 1e3)
                out[name + "_bf16"] = {"tokens": out[name]["tokens"], "ms": statistics.median(ts)}
    return out


def per_frame_medians(runs):
    """Per frame index, the median of its `ms` over runs of the same clip."""
    n = min(len(r["per_frame"]) for r in runs)
    return [statistics.median(r["per_frame"][i]["ms"] for r in runs) for i in range(n)]


def run_clip(model, prec, c, settings, tmp):
    """One clip with one model: the off runs and each setting's incremental runs (alternated over
    --rounds), each setting's --check run, the comparison of the outputs with --reuse off."""
    clip = os.path.join(ARGS.clips, c + ".mp4")
    w, h = probe(clip)
    fix = f"{0.8 * w:.0f},{0.2 * h:.0f}"
    n = str(max(ARGS.frames, 40)) if c == "cut" else str(ARGS.frames)  # the cut is at frame 25
    win = ARGS.foveation == "windows"
    common = ["--model", model, "--budget", str(ARGS.budget), "--max-frames", n, "--precision", prec, "--fixation", fix]
    common += ["--foveation", "windows"] if win else ["--group", str(ARGS.group)]

    def reuse(s):  # the reused run's flags for setting s
        return s.split() if "--reuse" in s.split() else ["--reuse", "exact" if win else "incremental", *s.split()]

    off_out = os.path.join(tmp, "off.safetensors")
    plain = {s: [] for s in settings}
    offs = []
    for k in range(ARGS.rounds):  # alternated: a change of load hits both alike
        for s in settings:
            plain[s].append(fovea_video(clip, *common, *reuse(s)))
        offs.append(fovea_video(clip, *common, "--reuse", "off", out=off_out if k == 0 else None))
    off_ms = per_frame_medians(offs)
    # CPU time per frame after the first: each run's CPU time less a one-frame run's (start-up,
    # model load, the first frame's full encode), over the frames after the first.
    one = list(common)
    one[one.index("--max-frames") + 1] = "1"
    startup = fovea_video(clip, *one, "--reuse", "off")["cpu_s"]
    frames_after_first = max(1, len(offs[0]["per_frame"]) - 1)

    def cpu_ms(runs):
        return 1000 * max(0.0, statistics.median(r["cpu_s"] for r in runs) - startup) / frames_after_first

    row_common = {"size": [w, h], "fixation": fix, "off_ms": mean_after_first(off_ms), "off_ms_per_frame": off_ms,
                  "off_cpu_ms": cpu_ms(offs)}
    if not ARGS.no_exact and not win:
        exa = fovea_video(clip, *common, "--reuse", "exact")
        row_common["exact_ms"] = mean_after_first([f["ms"] for f in exa["per_frame"]])
    if not ARGS.no_decode:
        dec = fovea_video(clip, "--decode-only")
        row_common["decode"] = {"fovea_ms": dec["decode_ms"], "frames": dec["frames"],
                                "ffmpeg_null_ms": ffmpeg_ms("-i", clip, "-f", "null", "-"),
                                "ffmpeg_gbrp_ms": ffmpeg_ms("-i", clip, "-pix_fmt", "gbrp", "-f", "null", "-")}
    rows = {}
    for s in settings:
        inc_out = os.path.join(tmp, "inc.safetensors")
        inc = fovea_video(clip, *common, "--check", *reuse(s), out=inc_out)
        vs_off = cosines_vs_file(inc_out, off_out)
        pf = inc["per_frame"]
        inc_ms = per_frame_medians(plain[s])
        speedups = [o / i for o, i in zip(off_ms[1:], inc_ms[1:]) if i > 0]
        frames = []
        for i, f in enumerate(pf):
            e = {k: f[k] for k in ("index", "ms", "full_ms", "cosine", "cosine_min_token", "recomputed_tokens",
                                   "tokens", "resampled_tokens", "dirty_tiles", "refresh", "refresh_reason") if k in f}
            e["incremental_ms"] = inc_ms[i] if i < len(inc_ms) else None
            e["off_ms"] = off_ms[i] if i < len(off_ms) else None
            for k in ("drift_estimate", "drift_estimate_max", "error_mean", "error_max", "encoder_work"):
                if k in f:
                    e[k] = f[k]
            if i < len(vs_off) and vs_off[i] is not None:
                e["cosine_vs_off"], e["cosine_min_token_vs_off"] = vs_off[i]
            frames.append(e)
        cos = [f["cosine"] for f in pf[1:]] or [1.0]
        row = dict(row_common)
        row.update({
            "setting": s,
            "incremental_ms": mean_after_first(inc_ms),
            "incremental_cpu_ms": cpu_ms(plain[s]),
            "speedup_cpu": row_common["off_cpu_ms"] / max(cpu_ms(plain[s]), 1e-9),
            # After the first group too: its frames also pay oneDNN's one-time costs (primitives
            # made for new row counts, weights packed on their second use).
            "incremental_steady_ms": statistics.fmean(inc_ms[1 + ARGS.group:] or inc_ms),
            "speedup_mean_time": mean_after_first(off_ms) / mean_after_first(inc_ms),
            "speedup_per_frame_median": statistics.median(speedups) if speedups else 0.0,
            "speedup_per_frame_min": min(speedups) if speedups else 0.0,
            "incremental_check_run_ms": mean_after_first([f["ms"] for f in pf]),
            "full_ms": mean_after_first([f["full_ms"] for f in pf]),
            "cosine_mean": statistics.fmean(cos),
            "cosine_worst_frame": min(cos),
            "cosine_worst_token": min(f["cosine_min_token"] for f in pf),
            "frames_compared_with_off": sum(1 for v in vs_off[1:] if v is not None),
            "cosine_vs_off_mean": statistics.fmean([v[0] for v in vs_off[1:] if v is not None] or [float("nan")]),
            "cosine_vs_off_worst_frame": min([v[0] for v in vs_off[1:] if v is not None] or [float("nan")]),
            "cosine_vs_off_worst_token": min([v[1] for v in vs_off[1:] if v is not None] or [float("nan")]),
            "reuse_rate": inc["reuse_rate"],
            "refreshes": sum(1 for f in pf if f["refresh"]),
            # Camera shifts by whole patches (a refresh whose shifted patches keep their patch
            # embeddings), and the share of tokens whose patch embedding was reused (frames 1..:
            # the tokens whose patch was not sampled again; with --reuse exact that is all a frame reuses).
            "shift_frames": sum(1 for f in pf if f.get("refresh_reason") == "shift"),
            "patch_embeddings_reused": mean_after_first([1 - f["resampled_tokens"] / max(f["tokens"], 1) for f in pf]),
            "recomputed_tokens": mean_after_first([f["recomputed_tokens"] for f in pf]),
            # The share of a full encode's multiply-adds the encoder did (frames 1..).
            "encoder_work": mean_after_first([f.get("encoder_work", 1.0) for f in pf]),
            "tokens": mean_after_first([f["tokens"] for f in pf]),
            "stages_ms": {k: statistics.fmean(f["timings_ms"][k] for f in plain[s][0]["per_frame"] if not f["refresh"])
                          for k in plain[s][0]["per_frame"][0]["timings_ms"]}
                         if any(not f["refresh"] for f in plain[s][0]["per_frame"]) else {},
            "per_frame": frames,
        })
        rows[s] = row
    return rows


HEADER = (f"{'clip':<15} {'setting':<28} {'incr ms':>8} {'off ms':>8} {'off/incr':>8} {'per-frame':>9} "
          f"{'worst':>6} | {'cos mean':>8} {'worst fr':>8} {'worst tok':>9} {'vs off':>8} {'off wfr':>8} {'reuse':>6} {'work':>5} {'refr':>4}")


def print_row(c, row):
    print(f"{c:<15} {(row['setting'] or 'defaults')[:28]:<28} {row['incremental_ms']:>8.1f} {row['off_ms']:>8.1f} "
          f"{row['speedup_mean_time']:>7.1f}x {row['speedup_per_frame_median']:>8.1f}x {row['speedup_per_frame_min']:>5.1f}x"
          f" | {row['cosine_mean']:>8.5f} {row['cosine_worst_frame']:>8.5f} {row['cosine_worst_token']:>9.5f} "
          f"{row['cosine_vs_off_mean']:>8.5f} {row['cosine_vs_off_worst_frame']:>8.5f} {100 * row['reuse_rate']:>5.1f}% {row['encoder_work']:>5.2f} {row['refreshes']:>4}", flush=True)


def run_model(model, prec, clips, settings, torch):
    out = {}
    print(f"\n{model}, {prec} (ms: medians over {ARGS.rounds} alternated rounds, frames 1..; per-frame: the median "
          f"and the smallest of off/incr frame by frame; cosines: --check's full re-encode of the same tokens, frames "
          f"1..; vs off: the --reuse off run's file where the tokens agree, mean and worst frame):")
    print(HEADER)
    with tempfile.TemporaryDirectory() as tmp:
        for c in clips:
            rows = run_clip(model, prec, c, settings, tmp)
            out[c] = rows
            for row in rows.values():
                print_row(c, row)
    for c, rows in out.items():
        for s, row in rows.items():
            line = (f"  {c} [{s or 'defaults'}]: full re-encode interleaved in the --check run "
                    f"{row['full_ms'] / row['incremental_check_run_ms']:.1f}x; CPU time per frame off "
                    f"{row['off_cpu_ms']:.1f} ms / incr {row['incremental_cpu_ms']:.1f} ms = {row['speedup_cpu']:.1f}x")
            if "exact_ms" in row:
                line += f"; vs exact {row['exact_ms'] / row['incremental_ms']:.1f}x"
            if torch and model == TORCH_MODEL:
                t = torch
                line += (f"; vs torch uniform native ({t['native']['tokens']} tok) {t['native']['ms'] / row['incremental_ms']:.0f}x, "
                         f"224 ({t['224']['tokens']} tok) {t['224']['ms'] / row['incremental_ms']:.1f}x; after the first "
                         f"group ({row['incremental_steady_ms']:.1f} ms): native {t['native']['ms'] / row['incremental_steady_ms']:.0f}x, "
                         f"224 {t['224']['ms'] / row['incremental_steady_ms']:.1f}x")
                if prec == "bf16" and "native_bf16" in t:
                    line += (f"; vs torch bf16 native {t['native_bf16']['ms'] / row['incremental_ms']:.0f}x, "
                             f"224 {t['224_bf16']['ms'] / row['incremental_ms']:.1f}x")
            print(line)
            if row["stages_ms"]:
                print("     stages (ms per non-refresh frame, incremental run): " +
                      ", ".join(f"{k} {v:.2f}" for k, v in row["stages_ms"].items()))
        d = next(iter(rows.values())).get("decode")
        if d:
            print(f"     decode {d['frames']} frames (ffmpeg's -benchmark rtime): fovea {d['fovea_ms']:.1f} ms (incl. "
                  f"RGB planes), ffmpeg -f null {d['ffmpeg_null_ms']:.1f} ms, ffmpeg -pix_fmt gbrp "
                  f"{d['ffmpeg_gbrp_ms']:.1f} ms")
    return out


def git_commit():
    r = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def main():
    clips = [c for c in ARGS.only.split(",") if c]
    for c in clips:
        if not os.path.exists(os.path.join(ARGS.clips, c + ".mp4")):
            sys.exit(f"{ARGS.clips}/{c}.mp4 missing: run scripts/make_test_clips.sh {ARGS.clips}")
    precisions = [p for p in ARGS.precision.split(",") if p]
    for p in precisions:
        if p not in ("fp32", "bf16"):
            sys.exit(f"--precision {p}: fp32 or bf16")
    settings = [s.strip() for s in ARGS.settings.split(";")] if ARGS.settings else [""]
    models = [ARGS.model] + ([ARGS.random] if ARGS.random != "none" else [])
    results = {"foveation": ARGS.foveation, "threads": ARGS.threads, "frames": ARGS.frames, "budget": ARGS.budget, "group": ARGS.group,
               "rounds": ARGS.rounds, "models": models, "settings": settings, "precisions": {},
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "commit": git_commit(), "command": " ".join(sys.argv),
               "load_start": open("/proc/loadavg").read().split()[:3]}
    with open("/proc/cpuinfo") as f:
        results["cpu"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print(f"cpu {results['cpu']}; foveation {ARGS.foveation}; threads {ARGS.threads}; {ARGS.frames} frames per clip; budget {ARGS.budget}; "
          f"{', '.join(models)}; {'/'.join(precisions)}; --group {ARGS.group}; commit {results['commit']}; "
          f"{results['date']}; load {' '.join(results['load_start'])}")
    print("command: " + results["command"])

    first = os.path.join(ARGS.clips, clips[0] + ".mp4")
    if not ARGS.no_torch and TORCH_MODEL in models:
        results["torch"] = torch_baseline(first, ARGS.torch_frames)
        for k, v in results["torch"].items():
            print(f"torch uniform per-frame encode ({k}, {v['tokens']} tokens, "
                  f"{'bf16 weights and activations' if k.endswith('_bf16') else 'fp32'}): {v['ms']:.1f} ms")

    for prec in precisions:
        results["precisions"][prec] = {m: run_model(m, prec, clips, settings, results.get("torch")) for m in models}
    if not ARGS.no_group_bench and ARGS.foveation == "mixed":
        exe = _build.ensure(ARGS.build_dir, "bench_video_group")
        if os.path.exists(exe):
            c = clips[0]
            clip = os.path.join(ARGS.clips, c + ".mp4")
            w, h = probe(clip)
            results["group_bench"] = {}
            print(f"\nincremental encoder alone on {c} with {ARGS.model}, groups interleaved in one process "
                  f"(bench_video_group):")
            for prec in precisions:
                r = subprocess.run([exe, clip, "--fixation", f"{0.8 * w:.0f},{0.2 * h:.0f}", "--frames",
                                    str(ARGS.frames), "--groups", f"1,{ARGS.group},16", "--precision", prec,
                                    "--threads", str(ARGS.threads), "--reps", "2", "--budget", str(ARGS.budget),
                                    "--model", ARGS.model],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"bench_video_group failed: {r.stderr.strip()}")
                rows = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
                results["group_bench"][prec] = rows
                for g in rows:
                    print(f"  {prec} G={g['group']:<3} encoder {g['encode_ms_median']:7.1f} ms/frame (min "
                          f"{g['encode_ms_min']:.1f}); full encode {g['full_encode_ms_median']:.1f} ms: "
                          f"{g['speedup_vs_full_median']:.1f}x; vs G=1 {g['speedup_vs_group1_median']:.2f}x; "
                          f"max |diff| to G=1 {g['max_abs_diff_vs_first_group']:.3g}; load {g['load']}")
        else:
            print(f"(no {exe}: the group benchmark is skipped)")
    results["load_end"] = open("/proc/loadavg").read().split()[:3]
    print(f"load average at the end: {' '.join(results['load_end'])}")
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump(results, f, indent=2)
    # One row per precision, model, clip and setting (the per-frame data stays in "extra").
    rows = []
    for prec, per_model in results["precisions"].items():
        for model, per_clip in per_model.items():
            tower = "random" if model.startswith("random:") else "pretrained"
            for clip, per_setting in per_clip.items():
                for s, row in per_setting.items():
                    rows.append({**provenance.scalars({k: v for k, v in row.items()
                                                       if k not in ("per_frame", "off_ms_per_frame")}),
                                 "precision": prec, "model": model, "tower": tower, "clip": clip,
                                 "foveation": ARGS.foveation,
                                 "setting": s or "defaults"})
    provenance.output(ARGS, "video", results, rows=rows, threads=ARGS.threads,
                      versions=provenance.module_versions("torch"))


if __name__ == "__main__":
    main()
