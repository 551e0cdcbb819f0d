#!/usr/bin/python3
"""Two Python threads encoding on ONE fovea.Model at once, against the same two encodes one after
the other.

    /usr/bin/python3 bench/concurrent_encode.py [--build-dir build] [--model random:vit-b16]
        [--model /path/to/model.safetensors] [--precision fp32] [--budget 273] [--rounds 9]
        [--calls 1] [--json out.json]

Per model: two images (data/astronaut.jpg, and the same photograph mirrored, fixated elsewhere)
are tokenized once (the model's own preprocessing and default foveation). Every encode is
Model.encode(tokens, threads=1), the GIL released, each call on a context of its own that the
model lends (fovea/encoder.hpp, "Model and context"); the model's packed weights are shared.

  serial:     thread A's --calls encodes of image A, then thread B's of image B, on one thread;
  concurrent: the same encodes on two threads started together (a barrier), timed from the
              barrier to the end of the slower thread.

Before timing, both run once (packing the weights, warming two contexts' primitives). Each round
times both, alternating which goes first, so load drift hits them alike; the ratio of a round is
concurrent / serial, and the summary gives the median of the rounds' ratios and the ratio of the
medians. On 2 idle cores two 1-thread encodes side by side would take ~0.5x the serial time;
memory bandwidth, shared caches and the machine's other load keep it above that.

Every output line is JSON; the first one records the machine (lscpu), the date, the commit, the
load average and the command. OMP_WAIT_POLICY=PASSIVE, as the fovea CLI chooses it.
"""
import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", action="append", help="a model spec (repeatable; default random:vit-b16)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--budget", type=int, default=273, help="tokens per image")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=1, help="encodes per thread and round (lengthens short ones)")
    ap.add_argument("--image", default=os.path.join(ROOT, "data", "astronaut.jpg"))
    ap.add_argument("--json", help="also write every line here")
    ap.add_argument("--save", action="store_true",
                    help="save the result with its commit and machine as bench/results/<bench>/<date>_<cpu-class>_<commit>.json (bench/provenance.py)")
    return ap.parse_args()


ARGS = parse_args()
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # libgomp reads it when it loads: before the import
sys.path.insert(0, os.path.join(ARGS.build_dir, "python"))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

import fovea  # noqa: E402


def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout


def machine():
    info = {}
    for line in sh("lscpu").splitlines():
        k, _, v = line.partition(":")
        info[k.strip()] = v.strip()
    return {"model_name": info.get("Model name", "?"), "cpus": info.get("CPU(s)", "?"),
            "hypervisor": info.get("Hypervisor vendor", "")}


def commit():
    rev = sh("git", "-C", ROOT, "rev-parse", "HEAD").strip()
    dirty = sh("git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no").strip()
    return rev + ("-dirty" if dirty else "")


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


OUT = open(ARGS.json, "w") if ARGS.json else None
LINES = []


def emit(obj):
    LINES.append(obj)
    line = json.dumps(obj)
    print(line, flush=True)
    if OUT:
        OUT.write(line + "\n")
        OUT.flush()


def encode_n(model, tokens, n):
    for _ in range(n):
        model.encode(tokens, threads=1, precision=ARGS.precision)


def run_serial(model, toks):
    t0 = time.perf_counter()
    encode_n(model, toks[0], ARGS.calls)
    encode_n(model, toks[1], ARGS.calls)
    return time.perf_counter() - t0


def run_concurrent(model, toks):
    barrier = threading.Barrier(3)
    done = [0.0, 0.0]
    errors = []

    def work(i):
        try:
            barrier.wait()
            encode_n(model, toks[i], ARGS.calls)
            done[i] = time.perf_counter()
        except Exception as e:  # reported after the join
            errors.append(e)

    ths = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in ths:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in ths:
        th.join()
    if errors:
        raise errors[0]
    return max(done) - t0


def bench(spec):
    model = fovea.Model(spec)
    photo = np.asarray(Image.open(ARGS.image).convert("RGB"))
    mirrored = np.ascontiguousarray(photo[:, ::-1])
    h, w = photo.shape[:2]
    toks = [fovea.tokenize(photo, budget=ARGS.budget, fixations=[(0.5 * w, 0.4 * h)], model=model),
            fovea.tokenize(mirrored, budget=ARGS.budget, fixations=[(0.3 * w, 0.6 * h)], model=model)]
    for _ in range(2):  # packs the weights (second use), then warms a second context's primitives
        run_concurrent(model, toks)
        run_serial(model, toks)
    serial, concurrent, ratios = [], [], []
    for r in range(ARGS.rounds):
        order = ("serial", "concurrent") if r % 2 == 0 else ("concurrent", "serial")
        got = {}
        for what in order:
            got[what] = run_serial(model, toks) if what == "serial" else run_concurrent(model, toks)
        serial.append(got["serial"])
        concurrent.append(got["concurrent"])
        ratios.append(got["concurrent"] / got["serial"])
        emit({"mode": "round", "model": spec, "round": r, "first": order[0], "serial_ms": 1e3 * got["serial"],
              "concurrent_ms": 1e3 * got["concurrent"], "ratio": ratios[-1], "loadavg": os.getloadavg()[0]})
    emit({"mode": "summary", "model": spec, "description": model.description, "precision": ARGS.precision,
          "tokens": [len(t) for t in toks], "calls_per_thread": ARGS.calls, "rounds": ARGS.rounds,
          "serial_median_ms": 1e3 * median(serial), "concurrent_median_ms": 1e3 * median(concurrent),
          "ratio_median": median(ratios), "ratio_of_medians": median(concurrent) / median(serial),
          "ratio_min": min(ratios), "ratio_max": max(ratios)})


def main():
    emit({"mode": "header", "machine": machine(), "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
          "commit": commit(), "build_dir": os.path.abspath(ARGS.build_dir), "fovea_module": fovea.__file__,
          "loadavg": os.getloadavg(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
          "bf16_supported": fovea.bf16_supported(),
          "command": " ".join(shlex.quote(a) for a in ["/usr/bin/python3"] + sys.argv)})
    for spec in ARGS.model or ["random:vit-b16"]:
        bench(spec)
    import provenance  # bench/provenance.py
    provenance.output(ARGS, "concurrent", {"lines": LINES}, rows=[provenance.scalars(x) for x in LINES if x.get("mode") != "header"],
                      threads=2)


if __name__ == "__main__":
    main()
