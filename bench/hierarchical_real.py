#!/usr/bin/python3
"""Hierarchical attention on a real pretrained tower: mean cosine to exact, and speed.

    /usr/bin/python3 bench/hierarchical_real.py --model CKPT --images a.png,b.png,c.png
        [--size 1024] [--modes hierarchical:8:64,hierarchical:16:64,...] [--precisions fp32,bf16]
        [--reps 3] [--threads 2] [--build-dir build] [--out RESULTS.jsonl]

Each image is upscaled to SIZE x SIZE (ffmpeg, bicubic) and encoded as a uniform grid of
(SIZE/P)^2 tokens (N = 4096 for a 16-px ViT at 1024), as a user runs it:

    fovea encode IMG --model CKPT --uniform --budget N --attention MODE --precision PREC
                 --check-fp32 --json --threads T

cosine = encoder.cosine_vs_fp32, the mean per-token cosine of the embeddings to fp32 with exact
attention; encode and attention = timings_ms.encode / timings_ms.attention. Per image and
precision, every repetition runs exact and then each mode, so the speed-ups compare runs of
the same minute. Every raw line carries the commit, the machine (lscpu), the date, the load
average and the command; the summary per precision and mode gives the range over the images of
the mean cosine and of the speed-ups (per image: the best of the repetitions of exact over the
best of the mode's; on a shared machine a run that lost a core to another process takes about
twice as long, and the best of a few runs is the one that did not).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--model", required=True)
ap.add_argument("--images", required=True, help="comma-separated image paths")
ap.add_argument("--size", type=int, default=1024)
ap.add_argument("--modes", default="hierarchical:8:64,hierarchical:16:64,hierarchical:32:64,hierarchical:4:64")
ap.add_argument("--precisions", default="fp32,bf16")
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
ap.add_argument("--out", help="write the raw lines (JSON, one a run) here")
ap.add_argument("--save", action="store_true",
                help="save the result with its commit and machine as bench/results/<bench>/<date>_<cpu-class>_<commit>.json (bench/provenance.py)")
ARGS = ap.parse_args()


def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def machine():
    info = {}
    for line in sh("lscpu").splitlines():
        k, _, v = line.partition(":")
        info[k.strip()] = v.strip()
    flags = set(info.get("Flags", "").split())
    return {"model_name": info.get("Model name", "?"), "cpus": info.get("CPU(s)", "?"),
            "cpu_family": info.get("CPU family", "?"), "cpu_model": info.get("Model", "?"),
            "hypervisor": info.get("Hypervisor vendor", ""),
            "flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})}


def commit():
    rev = sh("git", "-C", ROOT, "rev-parse", "HEAD").strip()
    dirty = sh("git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no").strip()
    return rev + ("-dirty" if dirty else "")


def main():
    cli = os.path.join(ARGS.build_dir, "fovea")
    if not os.path.exists(cli):
        sys.exit(f"no {cli}: build first (scripts/build.sh)")
    common = {"commit": commit(), "machine": machine(), "threads": ARGS.threads,
              "model": os.path.basename(os.path.dirname(os.path.abspath(ARGS.model))) + "/" +
              os.path.basename(ARGS.model)}
    patch = json.loads(sh(cli, "model", ARGS.model, "--json"))["patch_size"]
    budget = (ARGS.size // patch) ** 2
    modes = ["exact"] + ARGS.modes.split(",")
    rows = []
    out = open(ARGS.out, "w") if ARGS.out else None
    with tempfile.TemporaryDirectory() as tmp:
        for src in ARGS.images.split(","):
            name = os.path.splitext(os.path.basename(src))[0]
            img = os.path.join(tmp, f"{name}_{ARGS.size}.png")
            sh("ffmpeg", "-loglevel", "error", "-y", "-i", src, "-vf",
               f"scale={ARGS.size}:{ARGS.size}:flags=bicubic", img)
            for prec in ARGS.precisions.split(","):
                for rep in range(ARGS.reps):
                    for mode in modes:
                        cmd = [cli, "encode", img, "--model", ARGS.model, "--uniform", "--budget", str(budget),
                               "--attention", mode, "--precision", prec, "--json", "--threads", str(ARGS.threads)]
                        if mode != "exact" or prec != "fp32":
                            cmd.append("--check-fp32")
                        load = os.getloadavg()[0]
                        j = json.loads(sh(*cmd))
                        row = dict(common, date=datetime.datetime.now().isoformat(timespec="seconds"),
                                   image=f"{os.path.basename(src)} upscaled to {ARGS.size}x{ARGS.size}",
                                   precision=j["encoder"]["precision"], kernels=j["encoder"]["kernels"],
                                   attention=mode, rep=rep, tokens=j["tokens"],
                                   encode_ms=j["timings_ms"]["encode"], attention_ms=j["timings_ms"]["attention"],
                                   cosine=j["encoder"].get("cosine_vs_fp32", 1.0), load1=load,
                                   command=" ".join(["fovea"] + cmd[1:]).replace(img, f"{name}_{ARGS.size}.png"))
                        rows.append(row)
                        if out:
                            out.write(json.dumps(row) + "\n")
                            out.flush()
                        print(f"{name:>10} {prec} {mode:>20} rep {rep}: encode {row['encode_ms']:8.1f} ms, "
                              f"attention {row['attention_ms']:8.1f} ms, cosine {row['cosine']:.5f}, "
                              f"load {load:.1f}", file=sys.stderr)

    print(f"commit {common['commit']}, {common['machine']['model_name']} ({common['machine']['cpus']} CPUs, "
          f"{' '.join(common['machine']['flags'])}), threads {ARGS.threads}, {ARGS.reps} reps")
    print(f"{'precision':>9} {'attention':>20} {'cos mean (range over images)':>30} "
          f"{'attention op speed-up':>22} {'encode speed-up':>16} {'encode ms (best)':>17}")
    for prec in ARGS.precisions.split(","):
        for mode in modes:
            cos, att, enc, ms = [], [], [], []
            for src in ARGS.images.split(","):
                img = os.path.basename(src)

                def best(m, key):
                    return min(r[key] for r in rows
                               if r["image"].startswith(img) and r["attention"] == m and r["precision"] == prec)
                cos.append(best(mode, "cosine"))  # the same in every repetition
                att.append(best("exact", "attention_ms") / best(mode, "attention_ms"))
                enc.append(best("exact", "encode_ms") / best(mode, "encode_ms"))
                ms.append(best(mode, "encode_ms"))
            rng = lambda v, f: f"{f.format(min(v))}–{f.format(max(v))}"
            print(f"{prec:>9} {mode:>20} {rng(cos, '{:.4f}'):>30} {rng(att, '{:.2f}×'):>22} {rng(enc, '{:.2f}×'):>16} "
                  f"{rng(ms, '{:.0f}'):>17}")

    import provenance  # bench/provenance.py
    provenance.output(ARGS, "hierarchical", {"rows": rows}, threads=ARGS.threads)


if __name__ == "__main__":
    main()
