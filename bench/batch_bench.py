#!/usr/bin/python3
"""Dataset throughput: the batch CLI vs the Python binding vs Dask vs torch's uniform pipeline.

    /usr/bin/python3 bench/batch_bench.py [--build-dir build] [--images 100] [--budget 273]
                                          [--precision bf16] [--model random:vit-b16] [--threads 2]

The dataset: --images JPEGs of about 1024x1024 (960..1088 a side), crops and flips of
scikit-image's photographs (astronaut, coffee, chelsea, rocket, retina, motorcycle, hubble),
upscaled where they are smaller. Every pipeline decodes, tokenizes and encodes every image and
writes one embeddings file per image; model loading and cluster start-up are excluded (each
pipeline loads its model once before the clock starts; Dask workers run a warm-up task first;
the CLI's steady rate leaves out its first image, which pays the model's first-use costs:
bf16 weight copies, oneDNN kernels).

  1. batch CLI:   fovea encode FILES --model M --precision P --budget B --threads 2 -o OUT
                  (steady_images_per_s from its JSON);
  2. Python loop: for each path, fovea.tokenize + Model.encode_full + Encoding.save, in a
                  Python process of its own (as a user's script), threads=2; "Python prefetch" tokenizes the next image on a second Python
                  thread (1 fovea thread, nice 19) while the current one is encoded, as the
                  CLI decodes ahead on a niced producer thread;
  3. Dask:        fovea.distributed.run on LocalClusters with 2 cores' worth of work at a time
                  (--dask, default "1x1,2x1,1x2": workers x Dask threads per worker); fovea's
                  threads per task are the library default (cores / task slots on the host:
                  2 for 1x1, 1 for 2x1 and 1x2). OMP_WAIT_POLICY=PASSIVE in every process;
  4. torch:       the uniform baseline a standard VLM runs: decode (PIL), resize to the uniform
                  grid under B (bilinear, antialias), CLIP-normalise, then torchvision's ViT-B/16
                  layers (same dimensions, random weights) in fp32 (torch 1.13 has no fast bf16
                  matmul on this CPU), saved with torch.save.

All four run in this one process tree on the same shared machine, in --rounds interleaved rounds
(each round a quarter of the images through every pipeline), so load drift hits them alike; the
ratios to the batch CLI are the numbers to trust (absolute speed moves with the load).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--images", type=int, default=100)
    ap.add_argument("--budget", type=int, default=273)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--model", default="random:vit-b16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--skip", default="", help="comma list of pipelines to skip: cli,python,dask,torch")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds (load drift evens out)")
    ap.add_argument("--dask", default="1x1,2x1,1x2", help="Dask layouts, WORKERSxTHREADS, comma separated")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--save", action="store_true",
                    help="save the result with its commit and machine as bench/results/<bench>/<date>_<cpu-class>_<commit>.json (bench/provenance.py)")
    ap.add_argument("--serve-python", action="store_true",
                    help=argparse.SUPPRESS)  # internal: the Python loops' own process (see PythonProcess)
    return ap.parse_args()


ARGS = parse_args()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, str(ARGS.threads))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as fovea's CLI and encode_bench choose
sys.path.insert(0, os.path.join(ARGS.build_dir, "python"))
os.environ["PYTHONPATH"] = os.path.join(ARGS.build_dir, "python") + os.pathsep + os.environ.get("PYTHONPATH", "")

import numpy as np  # noqa: E402

import fovea  # noqa: E402
import fovea.distributed as fd  # noqa: E402

SOURCES = ["astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "retina.jpg", "motorcycle_left.png",
           "hubble_deep_field.jpg"]


def make_dataset(folder: str, n: int) -> list:
    import cv2
    import skimage
    data = os.path.join(os.path.dirname(skimage.__file__), "data")
    photos = []
    for name in SOURCES:
        p = os.path.join(data, name)
        if os.path.exists(p):
            img = cv2.imread(p, cv2.IMREAD_COLOR)
            if img is not None:
                photos.append(img)
    rng = np.random.default_rng(0)
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(n):
        src = photos[i % len(photos)]
        side_h, side_w = (int(rng.integers(960, 1089)) for _ in range(2))
        scale = max(side_h / src.shape[0], side_w / src.shape[1]) * float(rng.uniform(1.0, 1.4))
        big = cv2.resize(src, (int(np.ceil(src.shape[1] * scale)), int(np.ceil(src.shape[0] * scale))),
                         interpolation=cv2.INTER_CUBIC)
        y = int(rng.integers(0, big.shape[0] - side_h + 1))
        x = int(rng.integers(0, big.shape[1] - side_w + 1))
        crop = big[y:y + side_h, x:x + side_w]
        if i % 2:
            crop = crop[:, ::-1]
        p = os.path.join(folder, f"photo{i:03d}.jpg")
        cv2.imwrite(p, np.ascontiguousarray(crop), [cv2.IMWRITE_JPEG_QUALITY, 92])
        paths.append(p)
    return paths


def run_cli(cli, inputs, out):
    r = subprocess.run([cli, "encode", *inputs, "--model", ARGS.model, "--precision", ARGS.precision, "--budget",
                        str(ARGS.budget), "--threads", str(ARGS.threads), "-o", out, "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"fovea encode failed: {r.stderr}")
    b = json.loads(r.stdout)["batch"]
    return b["steady_images_per_s"] or b["ok"] / b["elapsed_s"], b


_PY_MODEL = {}


def py_model(warm_path):
    m = _PY_MODEL.get("m")
    if m is None:  # loaded once, with its bf16 weights, before the clock starts
        m = _PY_MODEL["m"] = fovea.Model(ARGS.model)
        m.encode(fovea.tokenize(warm_path, budget=ARGS.budget), precision=ARGS.precision)
    return m


def run_python(paths, out):
    m = py_model(paths[0])
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    for p in paths:
        t = fovea.tokenize(p, budget=ARGS.budget, threads=ARGS.threads)
        e = m.encode_full(t, precision=ARGS.precision, threads=ARGS.threads)
        e.save(os.path.join(out, os.path.splitext(os.path.basename(p))[0] + ".safetensors"))
    dt = time.perf_counter() - t0
    return len(paths) / dt, dt


_POOL = {}


def run_python_prefetch(paths, out):
    """The Python loop with the CLI's overlap: the next image is decoded and tokenized on a
    second Python thread at the lowest priority (fovea releases the GIL) while this one is
    encoded and written."""
    from concurrent.futures import ThreadPoolExecutor
    m = py_model(paths[0])
    pool = _POOL.get("p")
    if pool is None:
        pool = _POOL["p"] = ThreadPoolExecutor(1, initializer=fd._lowest_priority)  # as the CLI's producer
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    nxt = pool.submit(fovea.tokenize, paths[0], budget=ARGS.budget, threads=1)
    for i, p in enumerate(paths):
        t = nxt.result()
        if i + 1 < len(paths):
            nxt = pool.submit(fovea.tokenize, paths[i + 1], budget=ARGS.budget, threads=1)
        e = m.encode_full(t, precision=ARGS.precision, threads=ARGS.threads)
        e.save(os.path.join(out, os.path.splitext(os.path.basename(p))[0] + ".safetensors"))
    dt = time.perf_counter() - t0
    return len(paths) / dt, dt


def serve_python():
    """The Python loops run in a process of their own, as a user's script would: the driver
    process also hosts the LocalClusters' schedulers, whose threads take the GIL. Reads one
    JSON request per line: {"paths", "out", "prefetch"}; answers {"rate"}."""
    for line in sys.stdin:
        req = json.loads(line)
        fn = run_python_prefetch if req["prefetch"] else run_python
        rate, _ = fn(req["paths"], req["out"])
        print(json.dumps({"rate": rate}), flush=True)


class PythonProcess:
    def __init__(self, warm_path):
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-python", "--build-dir",
                                   ARGS.build_dir, "--model", ARGS.model, "--precision", ARGS.precision, "--budget",
                                   str(ARGS.budget), "--threads", str(ARGS.threads)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self([warm_path], os.path.join(tempfile.gettempdir(), "fovea-batch-bench-warm"), False)  # model warm

    def __call__(self, paths, out, prefetch):
        self.p.stdin.write(json.dumps({"paths": paths, "out": out, "prefetch": prefetch}) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())["rate"], None

    def close(self):
        self.p.stdin.close()
        self.p.wait()


class DaskRunner:
    """A LocalCluster of `workers` processes x `threads` Dask threads, warmed up (the model
    loaded, and used once, on every worker)."""

    def __init__(self, workers, threads, warm_paths, warm_out):
        from distributed import Client, LocalCluster
        self.opts = dict(budget=ARGS.budget, model=ARGS.model, precision=ARGS.precision)  # threads: the default
        self.cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True, host="127.0.0.1",
                                    dashboard_address=None)
        self.client = Client(self.cluster)
        ws = sorted(self.client.scheduler_info()["workers"])
        tasks = fd.plan(warm_paths[:len(ws)], warm_out, batch_size=1)
        self.client.gather([self.client.submit(fd.run_task, t, self.opts, workers=[w], pure=False)
                            for t, w in zip(tasks, ws)])

    def __call__(self, paths, out):
        s = fd.run(paths, out, client=self.client, **self.opts)  # automatic batch size
        for w in s["warnings"]:
            print(f"  warning: {w}")
        return s["ok"] / s["elapsed_s"], s

    def close(self):
        self.client.close()
        self.cluster.close()


def torch_runner(paths, out):
    import torch
    import torch.nn.functional as F
    import torchvision
    from PIL import Image
    torch.set_num_threads(ARGS.threads)
    # The uniform grid under B for a square image: g x g patches of 16 px, g = floor(sqrt(B)).
    g = int(np.floor(np.sqrt(ARGS.budget)))
    size = 16 * g
    model = torchvision.models.VisionTransformer(image_size=size, patch_size=16, num_layers=12, num_heads=12,
                                                 hidden_dim=768, mlp_dim=3072).eval()
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1)
    std = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)
    os.makedirs(out, exist_ok=True)

    def one(p):
        img = torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1)[None].float()
        x = F.interpolate(img, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        x = (x / 255.0 - mean) / std
        with torch.inference_mode():
            x = model._process_input(x)
            x = torch.cat([model.class_token.expand(1, -1, -1), x], dim=1)
            h = model.encoder(x)
        torch.save(h[0, 1:].contiguous(), os.path.join(out, os.path.basename(p) + ".pt"))

    one(paths[0])  # warm-up

    def run(chunk):
        t0 = time.perf_counter()
        for p in chunk:
            one(p)
        dt = time.perf_counter() - t0
        return len(chunk) / dt, {"tokens": g * g, "input": size, "precision": "fp32"}
    return run


def main():
    cli = os.path.join(ARGS.build_dir, "fovea")
    skip = set(filter(None, ARGS.skip.split(",")))
    work = ARGS.work or tempfile.mkdtemp(prefix="fovea-batch-bench-")
    folder = os.path.join(work, "photos")
    paths = sorted(glob.glob(os.path.join(folder, "*.jpg")))
    if len(paths) != ARGS.images:
        paths = make_dataset(folder, ARGS.images)
    cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name'"], capture_output=True, text=True).stdout.strip()
    print(f"{len(paths)} photos ~1024^2, B={ARGS.budget}, {ARGS.model} {ARGS.precision}, {ARGS.threads} threads; {cpu}")
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    # The load on this shared machine drifts over minutes: the pipelines run in --rounds
    # interleaved rounds (round r takes every rounds-th image), and each pipeline's images/s is
    # its images over its summed time.
    runners = {}
    if "cli" not in skip:
        runners["batch CLI"] = lambda chunk, r: run_cli(cli, chunk, os.path.join(work, f"out-cli{r}"))
    if "python" not in skip:
        pyproc = PythonProcess(paths[0])
        runners["Python loop"] = lambda chunk, r: pyproc(chunk, os.path.join(work, "out-py"), False)
        runners["Python prefetch"] = lambda chunk, r: pyproc(chunk, os.path.join(work, "out-pyp"), True)
    clusters = []
    if "dask" not in skip:
        for layout in filter(None, ARGS.dask.split(",")):
            nw, nt = (int(v) for v in layout.split("x"))
            d = DaskRunner(nw, nt, paths, os.path.join(work, "warm"))
            clusters.append(d)
            runners[f"Dask {layout}"] = (lambda d, lay: lambda chunk, r: d(chunk, os.path.join(work, f"out-dask{lay}-{r}")))(d, layout)
    if "torch" not in skip:
        trun = torch_runner(paths, os.path.join(work, "out-torch"))
        runners["torch uniform"] = lambda chunk, r: trun(chunk)
    spent = {k: 0.0 for k in runners}
    per_round = {}
    done = {k: 0 for k in runners}
    for r in range(ARGS.rounds):
        chunk = paths[r::ARGS.rounds]
        order = list(runners.items())
        if r % 2:
            order.reverse()  # no pipeline always runs right after the same one
        for k, fn in order:
            rate, _ = fn(chunk, r)
            per_round.setdefault(k, []).append(rate)
            spent[k] += len(chunk) / rate
            done[k] += len(chunk)
            print(f"  round {r}: {k:14s} {rate:7.2f} images/s  (load {os.getloadavg()[0]:.1f})", flush=True)
    for d in clusters:
        d.close()
    if "python" not in skip:
        pyproc.close()
    results = {k: done[k] / spent[k] for k in runners}
    for k, v in results.items():
        print(f"  {k:16s} {v:7.2f} images/s over {done[k]} images")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    base = results.get("batch CLI")
    print("\n| pipeline | images/s | vs batch CLI | per-round ratios (median) |\n| --- | ---: | ---: | --- |")
    for k, v in results.items():
        if base:
            ratios = sorted(a / b for a, b in zip(per_round[k], per_round["batch CLI"]))
            med = ratios[len(ratios) // 2] if len(ratios) % 2 else 0.5 * (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2])
            print(f"| {k} | {v:.2f} | {v / base:.3f}x | {', '.join(f'{x:.2f}' for x in ratios)} ({med:.2f}) |")
        else:
            print(f"| {k} | {v:.2f} | - | - |")
    if base and "Python loop" in results:
        print(f"Python binding within 5% of the batch CLI: {results['Python loop'] / base >= 0.95}")
    for k in results:
        if base and k.startswith("Dask"):
            print(f"{k} within 10% of the batch CLI: {results[k] / base >= 0.90}")
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump({"images": len(paths), "budget": ARGS.budget, "model": ARGS.model,
                       "precision": ARGS.precision, "images_per_s": results}, f, indent=2)
    import provenance  # bench/provenance.py
    provenance.output(ARGS, "batch", {"images": len(paths), "budget": ARGS.budget, "model": ARGS.model,
                                      "precision": ARGS.precision, "images_per_s": results},
                      rows=[{"pipeline": k, "images_per_s": v, "vs_batch_cli": v / base if base else None}
                            for k, v in results.items()], versions=provenance.module_versions("torch", "dask"))


if __name__ == "__main__":
    if ARGS.serve_python:
        serve_python()
    else:
        main()
