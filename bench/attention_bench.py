#!/usr/bin/python3
"""Coarse-to-fine (hierarchical) attention against exact attention: speed and error, same run.

    /usr/bin/python3 bench/attention_bench.py [--build-dir build] [--threads 2] [--reps 1]
        [--ns 1024,4096] [--modes hierarchical:16:64,hierarchical:8:64,hierarchical:32:64]
        [--precision bf16] [--qk-scale 10] [--no-fixtures]

Per N, build/bench/bench_encode times exact and each hierarchical mode back to back in one
process (same tokens, same model), and reports the per-token cosine of each mode's embeddings to
exact's (mean and min over the N tokens).

Models. A random-init ViT attends almost uniformly (mean entropy ~ ln T), which flatters any
approximation. So the main measurement uses random:vit-b16 made to attend like a trained ViT:
 * --qk-tie: every layer's K projection := its Q projection, so scores are q_i.q_j (tokens
   attend to tokens like themselves: content and position similarity, as trained ViTs' local
   heads do), and
 * --qk-scale S: Q and K scaled by sqrt(S), so logits are S times larger; S sets the entropy;
 * tokens: the uniform grid of data/astronaut.jpg (a real, spatially coherent image),
and the script prints the resulting mean attention entropy per layer (64 sampled query rows
per head) next to ln(T), the entropy of uniform attention. Rows for the unmodified random model
(near-uniform attention) and for the committed fixture models (tests/data/encoder, 64 random
tokens) follow.
"""
import argparse
import json
import os
import subprocess
import sys

import _build  # bench/_build.py: builds the bench_* executable a script runs
import provenance  # bench/provenance.py: --save keeps the result with its commit and machine

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=1)
ap.add_argument("--ns", default="1024,4096")
ap.add_argument("--modes", default="hierarchical:16:64,hierarchical:8:64,hierarchical:32:64")
ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
ap.add_argument("--qk-scale", type=float, default=10.0)
ap.add_argument("--no-fixtures", action="store_true")
ap.add_argument("--json", help="also write the results here")
provenance.add_arguments(ap)
ARGS = ap.parse_args()


def bench(*args):
    exe = _build.ensure(ARGS.build_dir, "bench_encode")
    r = subprocess.run([exe, "--threads", str(ARGS.threads), "--reps", str(ARGS.reps), *map(str, args)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench_encode failed: {r.stderr.strip()}")
    return [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]


def table(title, rows):
    print(f"\n{title}")
    print(f"{'N':>6} {'attention':>28} {'ms':>9} {'speedup':>8} {'cos mean':>9} {'cos min':>8} {'load':>5}")
    exact = {}
    for r in rows:
        group = (r["n"], r["attention"].rsplit(" ", 1)[0] if " " in r["attention"] else "")
        if r["attention"].split(" ")[-1] == "exact":
            exact[group] = r["median_ms"]
        sp = exact.get(group, float("nan")) / r["median_ms"]
        cm, cn = r.get("cosine_to_exact_mean"), r.get("cosine_to_exact_min")
        print(f"{r['n']:>6} {r['attention']:>28} {r['median_ms']:>9.1f} {sp:>7.2f}x "
              f"{'' if cm is None else f'{cm:.5f}':>9} {'' if cn is None else f'{cn:.4f}':>8} {r['load']:>5.1f}",
              flush=True)
        r["speedup_vs_exact"] = sp


def run(n, *extra):
    rows = bench("--n", n, "--precision", ARGS.precision, "--attention", "exact," + ARGS.modes, "--compare-exact",
                 *extra)
    for r in rows:
        r["load"] = os.getloadavg()[0]
    return rows


def main():
    results = {"threads": ARGS.threads, "precision": ARGS.precision, "qk_scale": ARGS.qk_scale}
    ns = [int(n) for n in ARGS.ns.split(",")]
    image = os.path.join(ROOT, "data", "astronaut.jpg")
    peaked = []
    for n in ns:
        ent = bench("--n", n, "--precision", ARGS.precision, "--attention", "exact", "--entropy", "--qk-tie",
                    "--qk-scale", ARGS.qk_scale, "--image", image)[0]
        print(f"N={n}: peaked model (K=Q, logits x{ARGS.qk_scale:g}, astronaut grid): mean attention entropy per "
              f"layer (nats) {', '.join(f'{e:.2f}' for e in ent['entropy_per_layer'])}; uniform ln(T) = "
              f"{ent['entropy_uniform']:.2f}", flush=True)
        results.setdefault("entropy", {})[n] = ent["entropy_per_layer"]
        peaked += run(n, "--qk-tie", "--qk-scale", ARGS.qk_scale, "--image", image)
    table(f"random:vit-b16 with trained-like attention (K=Q, logits x{ARGS.qk_scale:g}), astronaut grid, "
          f"{ARGS.precision}, {ARGS.threads} threads", peaked)
    results["peaked"] = peaked
    plain = []
    for n in ns:
        plain += run(n)
    table(f"random:vit-b16 as initialised (near-uniform attention), random patches, {ARGS.precision}", plain)
    results["random_init"] = plain
    if not ARGS.no_fixtures:
        fx = []
        for name in ("clip", "clip_full", "siglip", "torchvision"):
            model = os.path.join(ROOT, "tests", "data", "encoder", name, "model.safetensors")
            rows = bench("--model", model, "--n", 64, "--precision", "fp32", "--attention",
                         "exact,hierarchical:2:8,hierarchical:4:8", "--compare-exact")
            for r in rows:
                r["load"] = os.getloadavg()[0]
                r["attention"] = f"{name} {r['attention']}"
            fx += rows
        table("committed fixture models (tests/data/encoder), 64 random tokens, fp32", fx)
        results["fixtures"] = fx
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump(results, f, indent=2)
    provenance.output(ARGS, "attention", results, threads=ARGS.threads)


if __name__ == "__main__":
    main()
