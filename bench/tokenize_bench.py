#!/usr/bin/python3
"""Full tokenize of a 1024x1024 photo (decode excluded) at B=273 and B=1024: fovea's foveated
and uniform pipelines against what VLM preprocessing does in torch and OpenCV, same run.

    /usr/bin/python3 bench/tokenize_bench.py [--build-dir build] [--threads 2] [--reps 7] [--save]

The competitors do the *uniform* job (resize so a 16-px grid holds <= B tokens, CLIP-normalise,
cut into [N, 3, 16, 16] patches); neither has a foveated pipeline to compare with. Medians of
--reps runs; ratios are competitor time / fovea time (higher = fovea faster). The target
is foveated tokenize at B=273 no slower than OpenCV's uniform preprocessing, same run. --save
keeps the run as bench/results/tokenize/<date>_<cpu-class>_<commit>.json (bench/provenance.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import _build  # bench/_build.py: builds the bench_* executable a script runs
import provenance  # bench/provenance.py: the result format and --save

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], np.float32)


def median_ms(fn, reps):
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def photo_1024():
    import cv2
    img = cv2.imread(os.path.join(ROOT, "data", "astronaut.jpg"))[:, :, ::-1]
    return np.ascontiguousarray(cv2.resize(img, (1024, 1024), interpolation=cv2.INTER_LINEAR))


def grid_side(budget):
    return int(np.floor(np.sqrt(budget)))  # square image: g x g tokens, g*g <= budget


def opencv_uniform(img, budget, threads):
    import cv2
    cv2.setNumThreads(threads)
    g = grid_side(budget)

    def run():
        small = cv2.resize(img, (g * 16, g * 16), interpolation=cv2.INTER_AREA)
        x = (small.astype(np.float32) / 255.0 - MEAN) / STD
        return np.ascontiguousarray(x.reshape(g, 16, g, 16, 3).transpose(0, 2, 4, 1, 3).reshape(-1, 3, 16, 16))

    return run


def torch_uniform(img, budget, threads):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    g = grid_side(budget)
    t = torch.from_numpy(img).permute(2, 0, 1).unsqueeze(0).contiguous()
    mean = torch.from_numpy(MEAN).view(1, 3, 1, 1)
    std = torch.from_numpy(STD).view(1, 3, 1, 1)

    def run():
        x = t.float().div_(255.0)
        x = F.interpolate(x, size=(g * 16, g * 16), mode="bilinear", antialias=True, align_corners=False)
        x = (x - mean) / std
        return x.unfold(2, 16, 16).unfold(3, 16, 16).permute(0, 2, 3, 1, 4, 5).reshape(-1, 3, 16, 16).contiguous()

    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    provenance.add_arguments(ap)
    a = ap.parse_args()

    exe = _build.ensure(a.build_dir, "bench_tokenize")
    r = subprocess.run([exe, "--benchmark_format=json", f"--benchmark_repetitions={a.reps}",
                        "--benchmark_report_aggregates_only=true", "--benchmark_min_time=0.2"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{exe} failed: {r.stderr}")
    fovea = {}
    for b in json.loads(r.stdout)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"]  # BM_Tokenize/budget:273/uniform:0/threads:2/real_time
        parts = dict(p.split(":") for p in name.split("/")[1:] if ":" in p)
        key = (int(parts["budget"]), int(parts["uniform"]), int(parts["threads"]))
        fovea[key] = b

    img = photo_1024()
    import cv2
    import torch
    print(f"# tokenize 1024x1024 (decode excluded), {a.threads} threads, median of {a.reps}")
    print(f"# torch {torch.__version__}, OpenCV {cv2.__version__}")
    print(f"{'budget':>6}  {'pipeline':<34} {'ms':>8}  {'vs fovea foveated':>18}")
    ok = True
    results = {"threads": a.threads, "reps": a.reps, "image": "data/astronaut.jpg resized to 1024x1024",
               "rows": [], "stages": {}}
    for budget in (273, 1024):
        fov = fovea[(budget, 0, a.threads)]["real_time"]
        rows = [("fovea foveated (fixation)", fov),
                ("fovea uniform", fovea[(budget, 1, a.threads)]["real_time"]),
                ("OpenCV uniform (INTER_AREA)", median_ms(opencv_uniform(img, budget, a.threads), a.reps)),
                ("torch uniform (bilinear+antialias)", median_ms(torch_uniform(img, budget, a.threads), a.reps))]
        if (budget, 0, 1) in fovea:
            rows.insert(1, ("fovea foveated, 1 thread", fovea[(budget, 0, 1)]["real_time"]))
        for name, ms in rows:
            print(f"{budget:>6}  {name:<34} {ms:8.3f}  {ms / fov:17.2f}x")
            results["rows"].append({"budget": budget, "pipeline": name, "median_ms": ms, "vs_fovea_foveated": ms / fov})
        b = fovea[(budget, 0, a.threads)]
        results["stages"][str(budget)] = {k: b[k] for k in ("pyramid_ms", "relevance_ms", "allocate_ms", "extract_ms",
                                                             "tokens") if k in b}
        print(f"{'':>6}  fovea stages: pyramid {b['pyramid_ms']:.3f} ms, relevance {b['relevance_ms']:.3f} ms, "
              f"allocate {b['allocate_ms']:.3f} ms, extract {b['extract_ms']:.3f} ms; {int(b['tokens'])} tokens")
        if budget == 273:
            # The target: no slower than OpenCV's uniform preprocessing of the same image,
            # in the same run (absolute times differ between machines; the ratio does not).
            cv_ms = rows[[r[0] for r in rows].index("OpenCV uniform (INTER_AREA)")][1]
            ratio = fov / cv_ms
            ok = ratio <= 1.0
            print(f"{'':>6}  target: foveated B=273 / OpenCV uniform <= 1.0 -> {'met' if ok else 'NOT met'} "
                  f"({ratio:.2f}: {fov:.3f} ms vs {cv_ms:.3f} ms)")
            results["target_ratio_foveated_over_opencv"] = ratio
    provenance.output(a, "tokenize", results, threads=a.threads,
                      versions={"torch": torch.__version__, "opencv": cv2.__version__})
    return 0


if __name__ == "__main__":
    sys.exit(main())
