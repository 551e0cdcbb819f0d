#!/usr/bin/python3
"""Time to first embedding: a one-shot `fovea encode` against torch's one-shot script, fresh processes.

    /usr/bin/python3 bench/oneshot_bench.py [--build-dir build] [--ckpt-dir /tmp/fovea-vit-b16]
        [--photo data/astronaut.jpg] [--rounds 5] [--threads 2] [--budget 273]
        [--precisions bf16,fp32] [--bf16-file] [--int8-file] [--baseline-build DIR] [--compare-env VAR=VALUE]
        [--no-torch] [--no-steady] [--json OUT.json]

The checkpoint is a full-size torchvision ViT-B/16 (86.6 M parameters, 346 MB as float32),
made by scripts/make_vit_b16_checkpoint.py when missing: the same weights as
vit_b16.safetensors (what fovea reads) and vit_b16.pt (what torch loads). Both files are read
once first, so the page cache is warm: this measures a user's second run, not the disk.

Each round runs, in a fresh process each and in an order rotated per round:
  fovea encode PHOTO --budget B --model vit_b16.safetensors --precision P --json -o OUT
  (and, with --bf16-file, the same on the BF16-stored copy of the checkpoint; with --int8-file,
  `--precision int8` on vit_b16_int8.safetensors, the checkpoint `fovea convert --dtype int8` writes
  (made when missing); with
  --baseline-build DIR, DIR/fovea too: another commit's build, for before/after in one run; with
  --compare-env VAR=VALUE, the same fovea with that variable set, e.g. FOVEA_AVX2=0 for oneDNN's
  f32 GEMM instead of fovea's AVX2 kernel)
  bench/oneshot_torch.py PHOTO vit_b16.pt --tokens B-1 (import torch, torch.load, encode fp32)
timing the whole process from outside (wall clock, plus user / system CPU, minor page faults
and peak RSS from wait4). Ratios are torch's wall time over fovea's, per round, then the median.
fovea's --json gives its own model_load / encode split; torch's script prints its phases.

Unless --no-steady: build/bench/bench_encode in one process on the same checkpoint, random
patches at N = B: load, the first encode (first touch of weights and kernels) and the median
of later encodes (steady state), to show first touch apart from steady state.

Both sides use --threads threads, the passive OpenMP wait policy and OpenBLAS idle threads that
sleep at once (OPENBLAS_THREAD_TIMEOUT=4), as the `fovea` launcher chooses. Run it on a quiet machine;
the script prints `uptime`'s load average before and after every round.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import _build  # bench/_build.py: builds the bench_* executable a script runs
import provenance  # bench/provenance.py: --save keeps the result with its commit and machine

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ckpt-dir", default="/tmp/fovea-vit-b16")
    ap.add_argument("--photo", default=os.path.join(ROOT, "data", "astronaut.jpg"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=int, default=273)
    ap.add_argument("--precisions", default="bf16,fp32")
    ap.add_argument("--bf16-file", action="store_true", help="also run fovea on the BF16-stored checkpoint")
    ap.add_argument("--int8-file", action="store_true",
                    help="also run fovea --precision int8 on the checkpoint fovea convert --dtype int8 writes")
    ap.add_argument("--baseline-build", help="also run this build's fovea (e.g. an older commit's), same rounds")
    ap.add_argument("--compare-env", action="append", default=[], metavar="VAR=VALUE",
                    help="also run fovea with this environment variable set (repeatable), same rounds")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-steady", action="store_true")
    ap.add_argument("--json", help="also write the results here")
    provenance.add_arguments(ap)
    return ap.parse_args()


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run_timed(cmd, env):
    """Runs cmd; returns (wall_s, rusage, stdout). Wall clock from just before the fork to the reap."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    # communicate() already reaped the child; its rusage is in RUSAGE_CHILDREN deltas (see caller).
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{err.decode(errors='replace')[-2000:]}")
    return wall, out.decode()


def measure(cmd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, out = run_timed(cmd, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall_s": wall,
        "user_s": after.ru_utime - before.ru_utime,
        "sys_s": after.ru_stime - before.ru_stime,
        "minflt": after.ru_minflt - before.ru_minflt,
        "majflt": after.ru_majflt - before.ru_majflt,
        # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: exact only while it grows.
        "maxrss_mb": after.ru_maxrss / 1024.0,
    }, out


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def main():
    a = parse_args()
    fovea = os.path.join(a.build_dir, "fovea")
    bench_encode = "" if a.no_steady else _build.ensure(a.build_dir, "bench_encode")
    st = os.path.join(a.ckpt_dir, "vit_b16.safetensors")
    st16 = os.path.join(a.ckpt_dir, "vit_b16_bf16.safetensors")
    pt = os.path.join(a.ckpt_dir, "vit_b16.pt")
    if not all(os.path.exists(p) for p in (st, st16, pt)):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_vit_b16_checkpoint.py"),
                        "--out", a.ckpt_dir], check=True)
    st8 = os.path.join(a.ckpt_dir, "vit_b16_int8.safetensors")
    if a.int8_file and not os.path.exists(st8):
        subprocess.run([fovea, "convert", st, "-o", st8, "--dtype", "int8"], check=True)
    for p in (st, st16, pt) + ((st8,) if a.int8_file else ()):
        warm(p)
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(a.threads)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # what the fovea launcher sets: torch gets it too
    out_dir = tempfile.mkdtemp(prefix="fovea-oneshot-")
    precisions = [p for p in a.precisions.split(",") if p]

    configs = []
    for prec in precisions:
        configs.append((f"fovea {prec}", [fovea, "encode", a.photo, "--budget", str(a.budget), "--model", st,
                                          "--precision", prec, "--threads", str(a.threads), "--json",
                                          "-o", os.path.join(out_dir, f"e_{prec}.safetensors")]))
        if a.bf16_file:
            configs.append((f"fovea {prec} (BF16 file)",
                            [fovea, "encode", a.photo, "--budget", str(a.budget), "--model", st16, "--precision", prec,
                             "--threads", str(a.threads), "--json",
                             "-o", os.path.join(out_dir, f"e16_{prec}.safetensors")]))
        for kv in a.compare_env:
            var, _, value = kv.partition("=")
            configs.append((f"fovea {prec} {var}={value}",
                            [fovea, "encode", a.photo, "--budget", str(a.budget), "--model", st, "--precision", prec,
                             "--threads", str(a.threads), "--json",
                             "-o", os.path.join(out_dir, f"v_{var}_{prec}.safetensors")], {var: value}))
        if a.baseline_build:
            configs.append((f"baseline {prec}",
                            [os.path.join(a.baseline_build, "fovea"), "encode", a.photo, "--budget", str(a.budget),
                             "--model", st, "--precision", prec, "--threads", str(a.threads), "--json",
                             "-o", os.path.join(out_dir, f"b_{prec}.safetensors")]))
    if a.int8_file:
        configs.append(("fovea int8 (int8 file)",
                        [fovea, "encode", a.photo, "--budget", str(a.budget), "--model", st8, "--precision", "int8",
                         "--threads", str(a.threads), "--json", "-o", os.path.join(out_dir, "e8_int8.safetensors")]))
    if not a.no_torch:
        configs.append(("torch fp32", [sys.executable, os.path.join(HERE, "oneshot_torch.py"), a.photo, pt,
                                       "--tokens", str(a.budget - 1), "--threads", str(a.threads)]))

    with open("/proc/cpuinfo") as f:
        model_name = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print(f"machine: {model_name}, {os.cpu_count()} cpus; threads {a.threads}; photo {a.photo}; "
          f"checkpoint {st} ({os.path.getsize(st) / 1e6:.0f} MB) / {pt}")
    results = {"machine": model_name, "threads": a.threads, "budget": a.budget, "photo": a.photo,
               "rounds": [], "load_average": []}
    runs = {c[0]: [] for c in configs}
    for r in range(a.rounds):
        la_before = load_average()
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for name, cmd, *extra in order:
            m, out = measure(cmd, {**env, **(extra[0] if extra else {})})
            if not name.startswith("torch"):
                j = json.loads(out)
                m["model_load_ms"] = j["timings_ms"]["model_load"]
                m["encode_ms"] = j["timings_ms"]["encode"]
                m["tokens"] = j["tokens"]
                m["precision_ran"] = j["encoder"]["precision"]  # bf16 runs fp32 on CPUs without bf16 kernels
                m["kernels"] = j["encoder"].get("kernels")
            else:
                j = json.loads(out.strip().splitlines()[-1])
                m.update({k: j[k] for k in ("import_ms", "model_load_ms", "encode_ms", "tokens")})
            runs[name].append(m)
        la_after = load_average()
        results["load_average"].append([la_before, la_after])
        line = f"round {r + 1}/{a.rounds} (load average {la_before} -> {la_after}):"
        for name, *_ in configs:
            line += f"  {name} {runs[name][-1]['wall_s']:.2f} s"
        print(line, flush=True)

    def med(name, key):
        return statistics.median(x[key] for x in runs[name])

    print()
    print(f"{'':26} {'wall s':>7} {'user s':>7} {'sys s':>6} {'minflt':>8} {'load ms':>8} {'encode ms':>9} {'tokens':>6}")
    for name, *_ in configs:
        ran = {x.get("precision_ran") for x in runs[name]} - {None}
        if name.startswith("fovea bf16") and ran != {"bf16"}:
            print(f"note: '{name}' ran {', '.join(sorted(ran))}: this CPU has no bf16 matrix kernels")
    for name, *_ in configs:
        print(f"{name:26} {med(name, 'wall_s'):7.2f} {med(name, 'user_s'):7.2f} {med(name, 'sys_s'):6.2f} "
              f"{med(name, 'minflt'):8.0f} {med(name, 'model_load_ms'):8.0f} {med(name, 'encode_ms'):9.0f} "
              f"{int(med(name, 'tokens')):6d}")
    summary = {}
    if not a.no_torch:
        print(f"(torch's phases inside its process, medians: import {med('torch fp32', 'import_ms'):.0f} ms, "
              f"torch.load {med('torch fp32', 'model_load_ms'):.0f} ms, encode {med('torch fp32', 'encode_ms'):.0f} ms)")
        print()
        for name, *_ in configs:
            if name.startswith("torch"):
                continue
            ratios = [t["wall_s"] / f["wall_s"] for t, f in zip(runs["torch fp32"], runs[name])]
            cpu = [(t["user_s"] + t["sys_s"]) / (f["user_s"] + f["sys_s"]) for t, f in zip(runs["torch fp32"], runs[name])]
            summary[name] = {"wall_ratio_median": statistics.median(ratios), "wall_ratio_min": min(ratios),
                             "wall_ratio_max": max(ratios), "cpu_ratio_median": statistics.median(cpu)}
            print(f"torch fp32 / {name}: wall {statistics.median(ratios):.1f}x (per round {min(ratios):.1f}-"
                  f"{max(ratios):.1f}x), CPU time {statistics.median(cpu):.1f}x")
    results["runs"] = runs
    results["ratios"] = summary

    if not a.no_steady and os.path.exists(bench_encode):
        print()
        results["steady"] = {}
        for prec in precisions:
            m, out = measure([bench_encode, "--model", st, "--n", str(a.budget), "--precision", prec,
                              "--threads", str(a.threads), "--reps", "5"], env)
            j = json.loads(out.strip().splitlines()[-1])
            results["steady"][prec] = j
            print(f"bench_encode {prec} N={a.budget} in one process: load {j['load_ms']:.0f} ms, first encode "
                  f"{j['first_ms']:.0f} ms, steady median {j['median_ms']:.0f} ms (min {j['min_ms']:.0f}); "
                  f"process {m['wall_s']:.2f} s wall, {m['minflt']} minor faults")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    provenance.output(a, "oneshot", results, threads=a.threads, versions=provenance.module_versions("torch"))


if __name__ == "__main__":
    main()
