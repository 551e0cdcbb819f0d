#!/usr/bin/python3
"""Model.encode_many (one encoder call for several images) against one encode_full per image.

    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=build/python /usr/bin/python3 bench/encode_many_bench.py \\
        [--model random:vit-b16] [--images 8] [--budgets 16,64,273] [--precisions fp32,bf16] [--threads 2] [--save]

The images: crops of the astronaut sample (320x240), tokenized with the mixed foveation at each
budget. Best of --repeats runs of each (after one warm-up of both); prints the ratio, of the wall
time and of the process's CPU time (all threads). Run with libgomp's passive wait policy, so that
a waiting thread costs no CPU: the CPU time is then the work itself, which other load on the
machine barely changes, and its ratio bounds what batching can give a service whose cores are
kept busy by concurrent requests. This is the encoder call alone; what it does for the service, where tokenization and HTTP run beside it, is
bench/serve_bench.py's to say (docs/how-to/serve.md). --save keeps the run as
bench/results/encode_many/<date>_<cpu-class>_<commit>.json (bench/provenance.py).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import provenance  # noqa: E402  bench/provenance.py: the result format and --save


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="random:vit-b16")
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--budgets", default="16,64,273")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    provenance.add_arguments(ap)
    a = ap.parse_args()
    if os.environ.get("OMP_WAIT_POLICY", "").lower() != "passive":  # CPU time must not count spinning
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
    import fovea
    from pyhelpers import photo
    m = fovea.Model(a.model)
    rows = []
    for prec in a.precisions.split(","):
        for budget in map(int, a.budgets.split(",")):
            ts = [fovea.tokenize(photo(i, 240, 320), budget=budget, model=m, foveation="mixed") for i in range(a.images)]
            m.encode_many(ts, prec, a.threads)
            m.encode_full(ts[0], prec, a.threads)
            one = many = one_cpu = many_cpu = float("inf")
            for _ in range(a.repeats):
                t0, c0 = time.perf_counter(), time.process_time()
                for t in ts:
                    m.encode_full(t, prec, a.threads)
                one, one_cpu = min(one, time.perf_counter() - t0), min(one_cpu, time.process_time() - c0)
                t0, c0 = time.perf_counter(), time.process_time()
                m.encode_many(ts, prec, a.threads)
                many, many_cpu = min(many, time.perf_counter() - t0), min(many_cpu, time.process_time() - c0)
            print(f"{a.model} {prec} budget {budget}: {a.images} encode_full {one * 1000:.0f} ms "
                  f"(CPU {one_cpu * 1000:.0f} ms), one encode_many {many * 1000:.0f} ms (CPU {many_cpu * 1000:.0f} ms): "
                  f"{many / one:.2f}x the time, {many_cpu / one_cpu:.3f}x the CPU time", flush=True)
            rows.append({"model": a.model, "precision": prec, "budget": budget, "images": a.images,
                         "tokens_per_image": sum(len(t) for t in ts) / len(ts), "encode_full_ms": one * 1000,
                         "encode_many_ms": many * 1000, "many_over_full": many / one,
                         "encode_full_cpu_ms": one_cpu * 1000, "encode_many_cpu_ms": many_cpu * 1000,
                         "many_over_full_cpu": many_cpu / one_cpu})
    provenance.output(a, "encode_many", {"rows": rows, "repeats": a.repeats}, rows=rows, threads=a.threads)


if __name__ == "__main__":
    main()
