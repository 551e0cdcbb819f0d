#!/usr/bin/python3
"""Mip pyramid of a 4096x4096 RGB image: fovea against OpenCV and torch, in one run.

    /usr/bin/python3 bench/pyramid.py --build-dir build [--rounds 5]

Debian's python3 (/usr/bin/python3) has cv2, torch and numpy; a pyenv python3 on PATH may not.

Each round runs build/bench/bench_pyramid once (Google Benchmark averages its iterations),
runs `bench_pyramid --first-call` in fresh processes, and then times each competitor
`--calls` times (median). The table shows the median over rounds, so the competitors are
measured interleaved with fovea, under the same load from the rest of the machine. All
chains have 13 levels (4096 ... 1, each extent halved with floor).

  fovea      planar [3][H][W] images.
               first call   the first build_pyramid of a fresh process (2 threads): levels
                            allocated and touched for the first time (page faults) plus work.
               alloc        build_pyramid in a loop: 12 new levels allocated per call (glibc
                            may hand freed blocks back, so fewer faults than a first call).
               steady       rebuild_pyramid into the same pyramid: no allocation, no fault.
             "SIMD" is the Highway kernels (best target of this CPU); "scalar reference" is
             downsample_ref.cpp, plain C++ loops built -O3 for the baseline x86-64 ISA (the
             compiler may auto-vectorize them with SSE2), with the same fused schedule.
  OpenCV     cv2.resize(prev, (w // 2, h // 2), interpolation=cv2.INTER_AREA), repeated,
             on an HxWx3 array (OpenCV's own interleaved layout), cv2.setNumThreads(threads):
               alloc        new output arrays every call (what cv2.resize does by default);
               steady       into preallocated outputs (cv2.resize(..., dst=out)).
  torch      F.avg_pool2d(prev, 2), repeated, on a contiguous [1, 3, H, W] float32 tensor,
             torch.set_num_threads(threads). avg_pool2d has no uint8 CPU kernel, so the uint8
             comparison uses this same float32 chain (no conversion: the cheapest torch can
             do); the row "torch u8->f32" adds the .float() conversion of the uint8 tensor.
  floor      MemcpyFloor from bench_pyramid: the time memcpy takes to move what a pyramid must
             move at least, read level 0 once (R) and write levels 1.. once (W): one memcpy of
             (R + W) / 2 bytes into a pre-touched buffer, split over 1 or 2 threads; the
             faster of the two is the floor.

Targets: fovea f32 steady state (2 threads) at least as fast as OpenCV's INTER_AREA
chain; fovea u8 steady state (2 threads) no slower than the memcpy floor. Exit status 1 when a
target is missed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import _build  # bench/_build.py: builds the bench_* executable a script runs
import provenance  # bench/provenance.py: --save keeps the result with its commit and machine

SIZE = 4096
LEVELS = 13


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default="build", help="CMake build directory (default: build)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    p.add_argument("--calls", type=int, default=7, help="competitor calls per round (default: 7)")
    p.add_argument("--threads", type=int, default=2, help="threads for OpenCV and torch (default: 2)")
    p.add_argument("--min-time", type=float, default=0.3,
                   help="Google Benchmark --benchmark_min_time per benchmark (default: 0.3)")
    p.add_argument("--json", help="also write the medians to this file")
    p.add_argument("--no-torch", action="store_true", help="skip the (slow) torch chains")
    provenance.add_arguments(p)
    return p.parse_args()


def run_fovea(binary, min_time):
    out = subprocess.run([binary, "--benchmark_format=json", f"--benchmark_min_time={min_time}"],
                         check=True, capture_output=True, text=True).stdout
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    times = {}
    for b in json.loads(out)["benchmarks"]:
        name = b["name"].removesuffix("/real_time")
        times[name] = b["real_time"] * scale[b["time_unit"]]
    return times


def run_first_call(binary, dtype):
    out = subprocess.run([binary, "--first-call", dtype], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ms"]


def median_ms(fn, arg, calls):
    fn(arg)  # warm-up: first-touch allocations, thread pools
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(arg)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    args = parse_args()
    binary = _build.ensure(args.build_dir, "bench_pyramid")
    try:
        import cv2
        import numpy as np
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        sys.exit(f"pyramid.py: {e}; run it with Debian's /usr/bin/python3")

    cv2.setNumThreads(args.threads)
    torch.set_num_threads(args.threads)

    def cv_chain(a):
        out = [a]
        while a.shape[0] > 1 or a.shape[1] > 1:
            h, w = a.shape[:2]
            a = cv2.resize(a, (max(1, w // 2), max(1, h // 2)), interpolation=cv2.INTER_AREA)
            out.append(a)
        return out

    def cv_outputs(a):
        """Preallocated, touched outputs for cv_chain_into: OpenCV's steady state."""
        outs = []
        h, w = a.shape[:2]
        while h > 1 or w > 1:
            h, w = max(1, h // 2), max(1, w // 2)
            outs.append(np.ones((h, w) + a.shape[2:], dtype=a.dtype))
        return outs

    def cv_chain_into(arg):
        a, outs = arg
        for o in outs:
            h, w = o.shape[:2]
            cv2.resize(a, (w, h), dst=o, interpolation=cv2.INTER_AREA)
            a = o
        return outs

    def torch_chain(t):
        out = [t]
        with torch.no_grad():
            while t.shape[-1] > 1 or t.shape[-2] > 1:
                t = F.avg_pool2d(t, 2) if min(t.shape[-2:]) >= 2 else \
                    F.avg_pool2d(t, (min(2, t.shape[-2]), min(2, t.shape[-1])))
                out.append(t)
        return out

    def torch_u8_chain(t):
        return torch_chain(t.float())

    rng = np.random.default_rng(1)
    img_u8 = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    img_f32 = img_u8.astype(np.float32) / 255.0
    t_u8 = torch.from_numpy(np.ascontiguousarray(img_u8.transpose(2, 0, 1)))[None]
    t_f32 = t_u8.float() / 255.0
    assert len(cv_chain(img_u8)) == LEVELS and len(torch_chain(t_f32)) == LEVELS

    outs_u8, outs_f32 = cv_outputs(img_u8), cv_outputs(img_f32)
    # dst= is honoured only when the array fits exactly: check it is written in place.
    cv_chain_into((img_u8, outs_u8))
    assert np.array_equal(outs_u8[0], cv_chain(img_u8)[1]), "cv2.resize(dst=) did not write in place"
    competitors = {
        "opencv/u8": (cv_chain, img_u8),
        "opencv/f32": (cv_chain, img_f32),
        "opencv-into/u8": (cv_chain_into, (img_u8, outs_u8)),
        "opencv-into/f32": (cv_chain_into, (img_f32, outs_f32)),
    }
    if not args.no_torch:
        competitors["torch/f32"] = (torch_chain, t_f32)
        competitors["torch/u8->f32"] = (torch_u8_chain, t_u8)
    samples = {}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        for name, ms in run_fovea(binary, args.min_time).items():
            samples.setdefault(name, []).append(ms)
        for dtype in ("u8", "f32"):
            samples.setdefault(f"first/{dtype}", []).append(run_first_call(binary, dtype))
        for name, (fn, arg) in competitors.items():
            samples.setdefault(name, []).append(median_ms(fn, arg, args.calls))
    med = {k: statistics.median(v) for k, v in samples.items()}
    spread = {k: (min(v), max(v)) for k, v in samples.items()}

    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"\nMip pyramid, {SIZE}x{SIZE} RGB, full chain of {LEVELS} levels; "
          f"median of {args.rounds} rounds (min..max over rounds)")
    print(f"machine: {cpu}, {os.cpu_count()} logical CPUs")
    print(f"OpenCV {cv2.__version__} (cv2.getNumThreads() = {cv2.getNumThreads()}), "
          f"torch {torch.__version__} (torch.get_num_threads() = {torch.get_num_threads()}), "
          f"numpy {np.__version__}; no BLAS involved")

    results = {}
    for dtype in ("u8", "f32"):
        floor_ms = min(med[f"MemcpyFloor/{dtype}/threads:1"], med[f"MemcpyFloor/{dtype}/threads:2"])
        ref = med[f"Pyramid/{dtype}/simd/reuse/threads:2"]
        rows = [
            (f"fovea {dtype} SIMD, first call", 2, f"first/{dtype}"),
            (f"fovea {dtype} SIMD, alloc per call", 2, f"Pyramid/{dtype}/simd/alloc/threads:2"),
            (f"fovea {dtype} SIMD, steady", 1, f"Pyramid/{dtype}/simd/reuse/threads:1"),
            (f"fovea {dtype} SIMD, steady", 2, f"Pyramid/{dtype}/simd/reuse/threads:2"),
            (f"fovea {dtype} scalar ref, steady", 1, f"Pyramid/{dtype}/reference/reuse/threads:1"),
            (f"fovea {dtype} scalar ref, steady", 2, f"Pyramid/{dtype}/reference/reuse/threads:2"),
            (f"fovea {dtype} scalar ref, alloc", 2, f"Pyramid/{dtype}/reference/alloc/threads:2"),
            (f"OpenCV INTER_AREA {dtype}, alloc", args.threads, f"opencv/{dtype}"),
            (f"OpenCV INTER_AREA {dtype}, into dst", args.threads, f"opencv-into/{dtype}"),
        ]
        if not args.no_torch:
            rows.append(("torch avg_pool2d f32", args.threads, "torch/f32"))
            if dtype == "u8":
                rows.append(("torch avg_pool2d u8->f32", args.threads, "torch/u8->f32"))
        rows += [
            (f"memcpy floor {dtype}", 1, f"MemcpyFloor/{dtype}/threads:1"),
            (f"memcpy floor {dtype}", 2, f"MemcpyFloor/{dtype}/threads:2"),
        ]
        print(f"\n{'':-<98}\n{dtype:<37} {'threads':>7} {'ms':>8} {'(min..max)':>17} "
              f"{'x steady 2t':>12} {'x floor':>9}\n{'':-<98}")
        for label, threads, key in rows:
            lo, hi = spread[key]
            print(f"{label:<37} {threads:>7} {med[key]:>8.2f} {f'({lo:.2f}..{hi:.2f})':>17} "
                  f"{med[key] / ref:>11.2f}x {med[key] / floor_ms:>8.2f}x")
        results[dtype] = {"floor_ms": floor_ms, "fovea_steady_2t_ms": ref}

    f32 = med["Pyramid/f32/simd/reuse/threads:2"]
    u8 = med["Pyramid/u8/simd/reuse/threads:2"]
    floor_u8 = results["u8"]["floor_ms"]
    checks = [
        ("OpenCV INTER_AREA f32 (alloc) / fovea f32 steady", med["opencv/f32"] / f32, ">= 1x",
         med["opencv/f32"] / f32 >= 1),
        ("memcpy floor u8 / fovea u8 steady", floor_u8 / u8, ">= 1x", floor_u8 / u8 >= 1),
    ]
    info = [
        ("OpenCV INTER_AREA f32 (into dst) / fovea f32 steady", med["opencv-into/f32"] / f32),
        ("OpenCV INTER_AREA u8 (alloc) / fovea u8 steady", med["opencv/u8"] / u8),
        ("OpenCV INTER_AREA u8 (into dst) / fovea u8 steady", med["opencv-into/u8"] / u8),
        ("fovea f32 first call / steady", med["first/f32"] / f32),
        ("fovea u8 first call / steady", med["first/u8"] / u8),
        ("fovea f32 steady / memcpy floor", f32 / results["f32"]["floor_ms"]),
    ]
    if not args.no_torch:
        info.append(("torch avg_pool2d f32 / fovea f32 steady", med["torch/f32"] / f32))
    print("\nTargets (2 threads, steady state):")
    for label, ratio, target, ok in checks:
        print(f"  {label:<52} = {ratio:6.2f}x  target {target:<6} {'MET' if ok else 'MISSED'}")
    print("Other ratios (no target):")
    for label, ratio in info:
        print(f"  {label:<52} = {ratio:6.2f}x")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"median_ms": med, "samples_ms": samples}, f, indent=1)
    provenance.output(args, "pyramid", {"median_ms": med}, rows=[{"case": k, "median_ms": v} for k, v in med.items()], threads=args.threads,
                      versions=provenance.module_versions("torch", "cv2"))
    return 0 if all(ok for *_, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
