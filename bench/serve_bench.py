#!/usr/bin/python3
"""The service (python3 -m fovea.serve) against the batch CLI (fovea encode FILES -o DIR), in one run.

    /usr/bin/python3 bench/serve_bench.py [--build-dir build] [--model SPEC] [--images 32]
                                          [--concurrency 8] [--precision fp32] [--threads 2]

The dataset: --images JPEGs of about 1024x1024 (bench/batch_bench.py's: crops and flips of
scikit-image's photographs), one fixation each. Every pipeline decodes, tokenizes and encodes
every image with the checkpoint's default foveation and budget and hands back the file
`fovea encode -o` writes (the service: over HTTP, into the client's memory; the CLI: onto disk).

  1. batch CLI:      fovea encode FILES --model M --fixation X,Y ... : one process per round;
                     its wall time includes start-up and the model's load, and its own
                     steady_images_per_s (from --json) leaves out the first image;
  2. in-process:     fovea.tokenize + Model.encode_full in this Python process, one image at a
                     time (the latency floor of one request without HTTP);
  3. serve, 1 client: one request in flight at a time (fovea.Client, urllib) against a warm
                     service: the per-request latency a lone user sees;
  4. serve, C clients, batched: C threads of this process each with a request in flight;
                     the service batches what queued (--max-batch C);
  5. serve, C clients, unbatched: the same with --max-batch 1 (the batching's gain);
  6. cache hits:     the same request again (the content-hash cache answers).

Every process runs libgomp's passive wait policy (the CLI's launcher, the service and this
script set it). The services start once (model load and warm-up not timed) with the cache off for 3-5.
Clients run in this process, on the same 2 cores as the service: their HTTP and multipart
work is part of what is measured. Rounds interleave the pipelines (each round a share of the
images through every one), so load drift from other work on the machine hits them alike; the
ratios to the batch CLI are the numbers to trust. Writes --out (a .txt and a .json) with the
machine, the date, the commit and this command.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default="random:vit-b16")
    ap.add_argument("--images", type=int, default=32)
    ap.add_argument("--budget", type=int, default=None, help="tokens an image (default: the model's)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-requests", type=int, default=20)
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--out", default=None, help="write OUT.txt and OUT.json (e.g. bench/results/serve/NAME)")
    return ap.parse_args()


ARGS = None


def machine():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            cpu = m.group(1) if m else cpu
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cpus"


def commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.strip()
    return r.stdout.strip() + ("+changes" if dirty else "")


def fixation_of(path):
    # One fixation per image, reproducible: a third of the way in.
    import fovea
    h, w = fovea.decode_image(open(path, "rb").read()).shape[:2]
    return (round(w / 3), round(h / 3))


class Service:
    def __init__(self, *extra):
        env = dict(os.environ, PYTHONPATH=os.path.join(ARGS.build_dir, "python"))
        self.p = subprocess.Popen([sys.executable, "-m", "fovea.serve", "--port", "0", "--model", ARGS.model,
                                   "--threads", str(ARGS.threads), "--precision", ARGS.precision,
                                   "--max-queue", "1024", "--max-budget", "100000", *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.p.stdout.readline()
        if not line.startswith("fovea serve: http://"):
            self.p.kill()
            sys.exit(f"the service did not start: {line!r} {self.p.stderr.read()}")
        self.url = line.split()[2]

    def metric(self, name):
        text = urllib.request.urlopen(self.url + "/metrics").read().decode()
        m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def stop(self):
        self.p.terminate()
        self.p.wait(60)


def run_cli(paths, fixations, out_dir):
    # One fixation flag per image is not a CLI option: the batch takes one query for all images, so
    # the CLI gets the first image's fixation for every image (the same work per image).
    cli = os.path.join(ARGS.build_dir, "fovea")
    cmd = [cli, "encode", *paths, "--model", ARGS.model, "--precision", ARGS.precision, "--threads", str(ARGS.threads),
           "--fixation", "%d,%d" % fixations[0], "-o", out_dir + "/", "--json"]
    if ARGS.budget:
        cmd += ["--budget", str(ARGS.budget)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"fovea encode failed: {r.stderr[-2000:]}")
    j = json.loads(r.stdout)
    return wall, j


def timed_requests(client, paths, fixations, concurrency):
    def one(i):
        t0 = time.perf_counter()
        e = client.encode(paths[i], fixations=[fixations[i]], budget=ARGS.budget)
        return time.perf_counter() - t0, e.batch, len(e)

    t0 = time.perf_counter()
    if concurrency == 1:
        res = [one(i) for i in range(len(paths))]
    else:
        with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
            res = list(ex.map(one, range(len(paths))))
    return time.perf_counter() - t0, res


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def main():
    global ARGS
    ARGS = parse_args()
    if os.environ.get("OMP_WAIT_POLICY") != "PASSIVE":
        # Every pipeline with libgomp's passive policy: the CLI's launcher and the service set it;
        # this process (the in-process pipeline) must have it before fovea loads libgomp.
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    sys.path.insert(0, os.path.join(ARGS.build_dir, "python"))
    sys.path.insert(0, HERE)
    import fovea
    argv, sys.argv = sys.argv, sys.argv[:1]  # batch_bench parses its own flags when imported
    try:
        from batch_bench import make_dataset
    finally:
        sys.argv = argv

    work = ARGS.work or tempfile.mkdtemp(prefix="fovea-serve-bench-")
    paths = make_dataset(os.path.join(work, "images"), ARGS.images)
    fixations = [fixation_of(paths[0])] * len(paths)  # the CLI batch's one query (see run_cli), for every pipeline
    model = fovea.Model(ARGS.model)
    model.encode_full(fovea.tokenize(paths[0], model=model, threads=ARGS.threads), ARGS.precision, ARGS.threads)

    # Batched: up to C requests, whatever their tokens (--max-batch-tokens off), so that the batching's
    # effect at this budget shows whole.
    batched = Service("--max-batch", str(ARGS.concurrency), "--max-batch-tokens", "1000000", "--cache-mb", "0")
    unbatched = Service("--max-batch", "1", "--cache-mb", "0")
    cached = Service("--max-batch", "1")
    c_b, c_u, c_c = fovea.Client(batched.url), fovea.Client(unbatched.url), fovea.Client(cached.url)
    # Warm the clients' paths (first connection, first multipart) once.
    for c in (c_b, c_u, c_c):
        c.encode(paths[0], fixations=[fixations[0]], budget=ARGS.budget)

    names = ["batch CLI", "in-process", "serve 1 client", f"serve {ARGS.concurrency} clients batched",
             f"serve {ARGS.concurrency} clients unbatched"]
    wall = {n: 0.0 for n in names}
    lat = {n: [] for n in names}
    batches = []
    cli_steady = []
    tokens = None
    per_round = max(1, len(paths) // ARGS.rounds)
    log = []
    for r in range(ARGS.rounds):
        sub = paths[r * per_round:(r + 1) * per_round]
        fx = fixations[r * per_round:(r + 1) * per_round]
        load0 = os.getloadavg()
        line = []
        out = os.path.join(work, f"cli{r}")
        w, j = run_cli(sub, fx, out)
        wall["batch CLI"] += w
        cli_steady.append(j["batch"]["steady_images_per_s"])
        line.append(f"batch CLI {w:.2f} s")

        t0 = time.perf_counter()
        for p, f in zip(sub, fx):
            t1 = time.perf_counter()
            e = model.encode_full(fovea.tokenize(p, fixations=[f], model=model, threads=ARGS.threads, budget=ARGS.budget),
                                  ARGS.precision, ARGS.threads)
            lat["in-process"].append(time.perf_counter() - t1)
            tokens = len(e)
        wall["in-process"] += time.perf_counter() - t0
        line.append(f"in-process {time.perf_counter() - t0:.2f} s")

        for name, client, conc in ((names[2], c_u, 1), (names[3], c_b, ARGS.concurrency),
                                   (names[4], c_u, ARGS.concurrency)):
            w, res = timed_requests(client, sub, fx, conc)
            wall[name] += w
            lat[name] += [x[0] for x in res]
            if client is c_b:
                batches += [x[1] for x in res]
            line.append(f"{name} {w:.2f} s")
        msg = f"round {r + 1}/{ARGS.rounds} (load {load0[0]:.1f} -> {os.getloadavg()[0]:.1f}): " + "  ".join(line)
        print(msg, flush=True)
        log.append(msg)

    # Cache hits: the same request again.
    hits = []
    for _ in range(ARGS.cache_requests):
        t0 = time.perf_counter()
        e = c_c.encode(paths[0], fixations=[fixations[0]], budget=ARGS.budget)
        hits.append(time.perf_counter() - t0)
        assert e.cache == "hit", e.cache
    mean_batch_metric = (batched.metric("fovea_encode_batch_requests_sum") /
                         max(1.0, batched.metric("fovea_encode_batch_requests_count")))
    for s in (batched, unbatched, cached):
        s.stop()

    n = per_round * ARGS.rounds
    rows = []
    cli_rate = n / wall["batch CLI"]
    for name in names:
        rate = n / wall[name]
        ls = lat[name]
        rows.append({"pipeline": name, "images": n, "wall_s": round(wall[name], 3), "images_per_s": round(rate, 3),
                     "vs_batch_cli": round(rate / cli_rate, 3),
                     "latency_p50_ms": round(1000 * statistics.median(ls), 1) if ls else None,
                     "latency_p95_ms": round(1000 * pct(ls, 95), 1) if ls else None})
    result = {
        "machine": machine(), "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "commit": commit(), "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
        "model": ARGS.model, "budget": ARGS.budget, "precision": ARGS.precision, "threads": ARGS.threads, "concurrency": ARGS.concurrency,
        "tokens_per_image": tokens, "rows": rows, "cli_steady_images_per_s": cli_steady,
        "serve_best_vs_cli_steady": round(max(r["images_per_s"] for r in rows[2:]) / statistics.median(cli_steady), 3),
        "batched_mean_requests_per_encode": round(mean_batch_metric, 2),
        "batched_requests_seen_batch": {str(k): batches.count(k) for k in sorted(set(batches))},
        "cache_hit_p50_ms": round(1000 * statistics.median(hits), 2),
        "cache_hit_p95_ms": round(1000 * pct(hits, 95), 2),
        "rounds": log,
    }
    head = (f"machine: {result['machine']}; date {result['date']}; commit {result['commit']}\n"
            f"command: {result['command']}\n"
            f"model {ARGS.model}, {ARGS.precision}, threads {ARGS.threads}, {tokens} tokens an image, "
            f"{n} images of ~1024x1024 in {ARGS.rounds} interleaved rounds\n")
    table = [f"{'pipeline':34s} {'images/s':>9s} {'vs CLI':>7s} {'p50 ms':>8s} {'p95 ms':>8s}"]
    for r in rows:
        table.append(f"{r['pipeline']:34s} {r['images_per_s']:9.2f} {r['vs_batch_cli']:7.2f} "
                     f"{r['latency_p50_ms'] or 0:8.1f} {r['latency_p95_ms'] or 0:8.1f}")
    steady = statistics.median(cli_steady)
    tail = (f"batch CLI steady_images_per_s (its own, first image left out) per round: "
            f"{', '.join(f'{x:.2f}' for x in cli_steady)}; median {steady:.2f}, against which the service's "
            f"best is {max(r['images_per_s'] for r in rows[2:]) / steady:.2f}x\n"
            f"batched service: {result['batched_mean_requests_per_encode']} requests per encoder call on average; "
            f"requests by the size of the batch they were in: {result['batched_requests_seen_batch']}\n"
            f"cache hit: p50 {result['cache_hit_p50_ms']} ms, p95 {result['cache_hit_p95_ms']} ms "
            f"({ARGS.cache_requests} requests)\n")
    text = head + "\n".join(log) + "\n\n" + "\n".join(table) + "\n\n" + tail
    print("\n" + "\n".join(table) + "\n\n" + tail)
    if ARGS.out:
        os.makedirs(os.path.dirname(os.path.abspath(ARGS.out)), exist_ok=True)
        with open(ARGS.out + ".txt", "w") as f:
            f.write(text)
        with open(ARGS.out + ".json", "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
