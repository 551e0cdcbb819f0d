#!/usr/bin/python3
"""fovea video: incremental vs exact vs off, against a full foveated re-encode and torch, same run.

    scripts/make_test_clips.sh /tmp/fovea-clips            # the four clips (real photos, ffmpeg)
    /usr/bin/python3 bench/video_bench.py [--clips /tmp/fovea-clips] [--frames 25] [--threads 2]
                                          [--precision fp32,bf16] [--group 8] [--torch-frames 2] [--json OUT]

Per clip (fixation at (0.8 W, 0.2 H), budget 273, ViT-B/16 with RANDOM weights: no pretrained
ViT is available on this machine, and the timing does not depend on the weights):
  * `fovea video --reuse incremental --group G --check`: per frame, the incremental time (a group's
    encoder time shared evenly over its frames) and, in the same
    process, the full foveated pipeline from scratch (tokenize + encode) and the cosine of the
    incremental embeddings to a full encode of the same tokens from the decoded frame;
  * `--reuse exact` and `--reuse off` (separate runs of the same clip);
  * decode alone: fovea's reader (libav* + swscale to RGB planes) against
    `ffmpeg -i clip -f null -` (decode only, the floor) and `ffmpeg -i clip -pix_fmt gbrp -f null -`.
Once: torch's uniform per-frame encode of a decoded frame (CLIP normalisation, 16x16 patches,
torchvision ViT-B/16 layers fp32) at the frame's native grid (W/16 x H/16 tokens, what a
native-resolution VLM encodes) and at 224x224 (196 tokens, a CLIP-style resize).
Then `bench_video_group` on the first clip: the incremental encoder alone with G = 1, 8, 16 and
full encodes, interleaved in one process (and whether every G gives the G = 1 embeddings).
Frame 0 (the full first encode) is left out of the means; `incremental_steady_ms` also leaves out
the first group (frames 1..G, which pay oneDNN's one-time costs: primitives for new row counts,
weights packed on their second use);
so are refreshes in the per-stage breakdown. Each precision's ratio to torch uses the same torch
run (fp32: the baseline a VLM runs today).
Ratios are computed from numbers of the same run; the machine is shared, so absolute times are noisy.
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import _build  # bench/_build.py: builds the bench_* executable a script runs
import provenance  # bench/provenance.py: --save keeps the result with its commit and machine

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLIPS = ["static_away", "static_through", "pan", "cut"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--clips", default="/tmp/fovea-clips")
    ap.add_argument("--only", default=",".join(CLIPS))
    ap.add_argument("--frames", type=int, default=25)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=int, default=273)
    ap.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32, bf16")
    ap.add_argument("--group", type=int, default=8, help="--group G of the incremental runs")
    ap.add_argument("--no-group-bench", action="store_true")
    ap.add_argument("--torch-frames", type=int, default=2)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", help="also write the results here")
    provenance.add_arguments(ap)
    return ap.parse_args()


ARGS = parse_args()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def fovea_video(clip, *extra):
    exe = os.path.join(ARGS.build_dir, "fovea")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [exe, "video", clip, "--json", "--threads", str(ARGS.threads), *extra]
        if "--decode-only" not in extra:
            cmd += ["-o", os.path.join(tmp, "out.safetensors")]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"fovea video failed ({' '.join(cmd)}): {r.stderr.strip()}")
    return json.loads(r.stdout)


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


def run_precision(prec, clips, torch):
    common = ["--model", "random:vit-b16", "--budget", str(ARGS.budget), "--max-frames", str(ARGS.frames),
              "--precision", prec, "--group", str(ARGS.group)]
    out = {}
    print(f"\n{prec}:")
    print(f"\n{'clip':<15} {'incr ms':>8} {'exact ms':>9} {'off ms':>8} {'off/incr':>8} | check run: {'incr ms':>8} "
          f"{'full ms':>8} {'full/incr':>9} "
          f"{'cos mean':>9} {'cos min':>8} {'reuse':>6} {'refresh':>7}")
    for c in clips:
        clip = os.path.join(ARGS.clips, c + ".mp4")
        w, h = probe(clip)
        fix = f"{0.8 * w:.0f},{0.2 * h:.0f}"
        n = str(max(ARGS.frames, 40)) if c == "cut" else str(ARGS.frames)  # the cut is at frame 25
        common[common.index("--max-frames") + 1] = n
        inc = fovea_video(clip, *common, "--fixation", fix, "--reuse", "incremental", "--check")
        # The incremental time alone: in the --check run each incremental frame follows a full
        # encode, and on a loaded machine the scheduler then gives the process less CPU (CFS
        # charges it for the full encode), which slows the small incremental regions most.
        plain = fovea_video(clip, *common, "--fixation", fix, "--reuse", "incremental")
        exa = fovea_video(clip, *common, "--fixation", fix, "--reuse", "exact")
        off = fovea_video(clip, *common, "--fixation", fix, "--reuse", "off")
        dec = fovea_video(clip, "--decode-only")
        ff = ffmpeg_ms("-i", clip, "-f", "null", "-")
        ffrgb = ffmpeg_ms("-i", clip, "-pix_fmt", "gbrp", "-f", "null", "-")
        pf = inc["per_frame"]
        row = {
            "size": [w, h], "fixation": fix,
            "incremental_ms": mean_after_first([f["ms"] for f in plain["per_frame"]]),
            # After the first group too: its frames also pay oneDNN's one-time costs (primitives
            # made for new row counts, weights packed on their second use).
            "incremental_steady_ms": statistics.fmean([f["ms"] for f in plain["per_frame"][1 + ARGS.group:]]
                                                      or [f["ms"] for f in plain["per_frame"]]),
            "incremental_check_run_ms": mean_after_first([f["ms"] for f in pf]),
            "exact_ms": mean_after_first([f["ms"] for f in exa["per_frame"]]),
            "off_ms": mean_after_first([f["ms"] for f in off["per_frame"]]),
            "full_ms": mean_after_first([f["full_ms"] for f in pf]),
            "cosine_mean": mean_after_first([f["cosine"] for f in pf]),
            "cosine_min": min(f["cosine"] for f in pf),
            "reuse_rate": inc["reuse_rate"],
            "refreshes": sum(1 for f in pf if f["refresh"]),
            "dirty_fraction": mean_after_first([f["dirty_tiles"] / max(1, f.get("tiles", 1)) for f in pf]),
            "recomputed_tokens": mean_after_first([f["recomputed_tokens"] for f in pf]),
            "stages_ms": {k: statistics.fmean(f["timings_ms"][k] for f in plain["per_frame"] if not f["refresh"])
                          for k in plain["per_frame"][0]["timings_ms"]}
                         if any(not f["refresh"] for f in plain["per_frame"]) else {},
            "tokens": mean_after_first([f["tokens"] for f in pf]),
            "decode": {"fovea_ms": dec["decode_ms"], "frames": dec["frames"], "ffmpeg_null_ms": ff,
                       "ffmpeg_gbrp_ms": ffrgb},
            "per_frame": [{k: f[k] for k in ("index", "ms", "full_ms", "cosine", "recomputed_tokens", "dirty_tiles",
                                             "refresh")} for f in pf],
        }
        out[c] = row
        print(f"{c:<15} {row['incremental_ms']:>8.1f} {row['exact_ms']:>9.1f} {row['off_ms']:>8.1f} "
              f"{row['off_ms'] / row['incremental_ms']:>7.1f}x |            {row['incremental_check_run_ms']:>8.1f} "
              f"{row['full_ms']:>8.1f} {row['full_ms'] / row['incremental_check_run_ms']:>8.1f}x {row['cosine_mean']:>9.5f} "
              f"{row['cosine_min']:>8.5f} {100 * row['reuse_rate']:>5.1f}% {row['refreshes']:>7}", flush=True)

    print(f"ratios ({prec}, same run):")
    for c, row in out.items():
        line = (f"  {c}: incremental vs full foveated re-encode: {row['off_ms'] / row['incremental_ms']:.1f}x (--reuse off "
                f"run), {row['full_ms'] / row['incremental_check_run_ms']:.1f}x (interleaved in the --check run); "
                f"vs exact {row['exact_ms'] / row['incremental_ms']:.1f}x")
        if torch:
            t = torch
            line += (f"; vs torch uniform native ({t['native']['tokens']} tok) {t['native']['ms'] / row['incremental_ms']:.0f}x, "
                     f"224 ({t['224']['tokens']} tok) {t['224']['ms'] / row['incremental_ms']:.1f}x; after the first "
                     f"group ({row['incremental_steady_ms']:.1f} ms): native {t['native']['ms'] / row['incremental_steady_ms']:.0f}x, "
                     f"224 {t['224']['ms'] / row['incremental_steady_ms']:.1f}x")
            if prec == "bf16" and "native_bf16" in t:
                line += (f"; vs torch bf16 native {t['native_bf16']['ms'] / row['incremental_ms']:.0f}x, "
                         f"224 {t['224_bf16']['ms'] / row['incremental_ms']:.1f}x")
        print(line)
        d = row["decode"]
        print("     stages (ms per non-refresh frame, incremental run): " +
              ", ".join(f"{k} {v:.2f}" for k, v in row["stages_ms"].items()))
        print(f"     decode {d['frames']} frames (ffmpeg's -benchmark rtime): fovea {d['fovea_ms']:.1f} ms (incl. RGB planes), ffmpeg -f null "
              f"{d['ffmpeg_null_ms']:.1f} ms, ffmpeg -pix_fmt gbrp {d['ffmpeg_gbrp_ms']:.1f} ms")
    return out


def main():
    clips = [c for c in ARGS.only.split(",") if c]
    for c in clips:
        if not os.path.exists(os.path.join(ARGS.clips, c + ".mp4")):
            sys.exit(f"{ARGS.clips}/{c}.mp4 missing: run scripts/make_test_clips.sh {ARGS.clips}")
    precisions = [p for p in ARGS.precision.split(",") if p]
    for p in precisions:
        if p not in ("fp32", "bf16"):
            sys.exit(f"--precision {p}: fp32 or bf16")
    results = {"threads": ARGS.threads, "frames": ARGS.frames, "budget": ARGS.budget, "group": ARGS.group,
               "model": "random:vit-b16 (RANDOM weights: no pretrained ViT here)", "precisions": {},
               "load_start": open("/proc/loadavg").read().split()[:3]}
    with open("/proc/cpuinfo") as f:
        results["cpu"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print(f"cpu {results['cpu']}; threads {ARGS.threads}; {ARGS.frames} frames per clip; budget {ARGS.budget}; "
          f"ViT-B/16 {'/'.join(precisions)}, random weights; --group {ARGS.group}; load {' '.join(results['load_start'])}")

    first = os.path.join(ARGS.clips, clips[0] + ".mp4")
    if not ARGS.no_torch:
        results["torch"] = torch_baseline(first, ARGS.torch_frames)
        for k, v in results["torch"].items():
            print(f"torch uniform per-frame encode ({k}, {v['tokens']} tokens, "
                  f"{'bf16 weights and activations' if k.endswith('_bf16') else 'fp32'}): {v['ms']:.1f} ms")

    for prec in precisions:
        results["precisions"][prec] = run_precision(prec, clips, results.get("torch"))
    if not ARGS.no_group_bench:
        exe = _build.ensure(ARGS.build_dir, "bench_video_group")
        if os.path.exists(exe):
            c = clips[0]
            clip = os.path.join(ARGS.clips, c + ".mp4")
            w, h = probe(clip)
            results["group_bench"] = {}
            print(f"\nincremental encoder alone on {c}, groups interleaved in one process (bench_video_group):")
            for prec in precisions:
                r = subprocess.run([exe, clip, "--fixation", f"{0.8 * w:.0f},{0.2 * h:.0f}", "--frames",
                                    str(ARGS.frames), "--groups", f"1,{ARGS.group},16", "--precision", prec,
                                    "--threads", str(ARGS.threads), "--reps", "2", "--budget", str(ARGS.budget)],
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
    provenance.output(ARGS, "video", results, threads=ARGS.threads, versions=provenance.module_versions("torch"))


if __name__ == "__main__":
    main()
