#!/usr/bin/python3
"""The service's targets, each measured against its competitor in the same run.

    /usr/bin/python3 bench/serve_bench.py [--build-dir build] [--model random:vit-b16] [--budget 273]
        [--precision bf16] [--clients 8] [--seconds 60] [--rounds 4] [--targets throughput,batching,cache,hostile,explorer,memory]
        [--out /tmp/serve/NAME] [--save]

The photos are bench/batch_bench.py's (--images JPEGs of about 1024x1024: crops and flips of
scikit-image's photographs), one fixation each (a third of the way in, the batch CLI's one query
for every image). Clients are an asyncio HTTP/1.1 client in this process (keep-alive, one
connection per client), on the same cores as the service; requests upload the JPEG as a
multipart form and read the whole answer (the file `fovea encode -o` writes). Every process runs
libgomp's passive wait policy. Services start once per configuration (model load and warm-up
not timed) with the content-hash cache off, unless the target is the cache.

  throughput  --clients concurrent clients for --seconds in all, against the batch CLI
              (fovea encode PHOTOS -o DIR, one process per round over every photo) in the same
              run: --rounds interleaved rounds, the order of the pipelines alternating, so that
              load from other work on the machine hits them alike. Three services: the default
              (batching on: --max-batch 8 --max-batch-tokens 512, one encoder worker), batching
              off (--max-batch 1), and two encoder workers side by side (--encode-workers 2).
              Images/s, errors, p50/p95/p99 latency.
  batching    the same, batching on against off, at the budgets of --batching-budgets (shorter
              rounds): where one encoder call for several requests pays.
  cache       a request repeated against the same request cold (a new photo each time).
  hostile     --hostile-requests hostile requests (corrupt images, oversized bodies, slow
              heads and bodies, bad JSON, unknown fields, bad forms, huge pixel counts, bytes
              that are not HTTP) mixed into well-formed load; every hostile request must get a
              4xx, the service must live, and every well-formed answer must be byte for byte the
              file the batch CLI wrote for that photo.
  explorer    the explorer's live update (POST /v1/tokenize format=json tensors=relevance rgb=1,
              what the page sends) of a 1024x1024 photo at a run of budgets: the round trip.
  memory      --memory-requests requests (encodes at budgets 16-273 with random fixations,
              tokenizations, repeats, bad requests) against a service with --cache-mb
              --memory-cache-mb; RSS before, its peak, after; against the model's own memory
              (a process that loads and warms it) + the cache cap + 300 MB.

Writes --out.txt and --out.json with the machine, the date, the commit, the load and this command.
"""
import argparse
import asyncio
import atexit
import datetime
import json
import os
import platform
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default="random:vit-b16")
    ap.add_argument("--images", type=int, default=32)
    ap.add_argument("--budget", type=int, default=273)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60.0, help="each service's load time in the throughput target")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batching-budgets", default="64,16")
    ap.add_argument("--batching-seconds", type=float, default=20.0)
    ap.add_argument("--cache-requests", type=int, default=16)
    ap.add_argument("--hostile-requests", type=int, default=1000)
    ap.add_argument("--memory-requests", type=int, default=10000)
    ap.add_argument("--memory-cache-mb", type=float, default=64)
    ap.add_argument("--targets", default="throughput,batching,cache,hostile,explorer,memory")
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--out", default=None, help="write OUT.txt and OUT.json (e.g. /tmp/serve/NAME)")
    ap.add_argument("--save", action="store_true",
                    help="save the result with its commit and machine as bench/results/<bench>/<date>_<cpu-class>_<commit>.json (bench/provenance.py)")
    return ap.parse_args()


ARGS = None
LOG = []


def say(msg=""):
    print(msg, flush=True)
    LOG.append(msg)


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


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else float("nan")


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) / 1024


# ---- the service ----------------------------------------------------------------------------------

SERVICES = []


class Service:
    def __init__(self, *extra, name="service"):
        env = dict(os.environ, PYTHONPATH=os.path.join(ARGS.build_dir, "python"))
        self.name = name
        self.p = subprocess.Popen([sys.executable, "-m", "fovea.serve", "--port", "0", "--model", ARGS.model,
                                   "--threads", str(ARGS.threads), "--precision", ARGS.precision,
                                   "--max-queue", "1024", "--max-budget", "100000", *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        line = self.p.stdout.readline()
        if not line.startswith("fovea serve: http://"):
            self.p.kill()
            sys.exit(f"the service did not start: {line!r} {self.p.stdout.read()}")
        # The service's log goes on being read: a pipe nobody drains blocks the service's event
        # loop once 64 KiB of log wait in it.
        self.log_path = os.path.join(WORK, f"{name}-{len(SERVICES)}.log")
        threading.Thread(target=self._drain, daemon=True).start()
        SERVICES.append(self)
        self.url = line.split()[2]
        self.host, port = self.url.split("//")[1].rsplit(":", 1)
        self.port = int(port)

    def _drain(self):
        with open(self.log_path, "w") as log:
            for line in self.p.stdout:
                log.write(line)

    def metrics(self):
        return urllib.request.urlopen(self.url + "/metrics").read().decode()

    def metric(self, name):
        m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", self.metrics(), re.M)
        return float(m.group(1)) if m else 0.0

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


# ---- an asyncio HTTP/1.1 client -------------------------------------------------------------------

def multipart(fields, image=None, name="image.jpg"):
    boundary = "fovea-bench-boundary"
    out = []
    for k, v in fields.items():
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
    if image is not None:
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{name}"\r\n'
                   "Content-Type: image/jpeg\r\n\r\n".encode())
        out.append(image)
        out.append(b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


def request_bytes(path, body, ctype, method="POST", extra=""):
    return (f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"{extra}\r\n").encode() + body


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    body = await reader.readexactly(n) if n else b""
    return status, headers, body


class Conn:
    """One keep-alive connection; reopened after the service closes it."""

    def __init__(self, svc):
        self.svc = svc
        self.rw = None

    async def send(self, data):
        for attempt in (0, 1):
            if self.rw is None:
                self.rw = await asyncio.open_connection(self.svc.host, self.svc.port)
            reader, writer = self.rw
            try:
                writer.write(data)
                await writer.drain()
                status, headers, body = await read_response(reader)
                if headers.get("connection", "").lower() == "close":
                    await self.close()
                return status, headers, body
            except (ConnectionError, asyncio.IncompleteReadError):
                await self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def close(self):
        if self.rw is not None:
            self.rw[1].close()
            self.rw = None


def encode_request(photo, name, fixation, budget=None, fields=None):
    f = {"fixations": "%d,%d" % fixation, "budget": str(budget or ARGS.budget), **(fields or {})}
    body, ctype = multipart(f, photo, name)
    return request_bytes("/v1/encode", body, ctype)


async def load(svc, seconds, make_request, clients, check=None):
    """`clients` connections sending make_request(i) in turn for `seconds`; (done, wall, latencies,
    errors, answers)."""
    stop_at = time.perf_counter() + seconds
    counter = iter(range(1 << 40))
    lat, errors, answers = [], [], []

    async def client():
        conn = Conn(svc)
        while time.perf_counter() < stop_at:
            i = next(counter)
            t0 = time.perf_counter()
            try:
                status, headers, body = await conn.send(make_request(i))
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
                await conn.close()
                continue
            lat.append(time.perf_counter() - t0)
            if status != 200:
                errors.append(f"{status}: {body[:200]!r}")
            elif check:
                answers.append(check(i, headers, body))
        await conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return len(lat), time.perf_counter() - t0, lat, errors, answers


# ---- the competitors ------------------------------------------------------------------------------

def run_cli(paths, fixation, out_dir, budget=None):
    cli = os.path.join(ARGS.build_dir, "fovea")
    cmd = [cli, "encode", *paths, "--model", ARGS.model, "--precision", ARGS.precision, "--threads", str(ARGS.threads),
           "--budget", str(budget or ARGS.budget), "--fixation", "%d,%d" % fixation, "-o", out_dir + "/", "--json"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"fovea encode failed: {r.stderr[-2000:]}")
    b = json.loads(r.stdout)["batch"]
    return wall, b["steady_images_per_s"] or b["ok"] / b["elapsed_s"]


def summary_row(name, done, wall, lat, errors):
    return {"pipeline": name, "requests": done, "wall_s": round(wall, 2), "images_per_s": round(done / wall, 3),
            "errors": len(errors), "p50_ms": round(1000 * pct(lat, 50), 1), "p95_ms": round(1000 * pct(lat, 95), 1),
            "p99_ms": round(1000 * pct(lat, 99), 1)}


def compare_rounds(services, seconds, budget, cli=True):
    """Interleaved rounds of every service (and the CLI): the rows, per round and in all."""
    per = max(1.0, seconds / ARGS.rounds)
    totals = {name: [0, 0.0, [], []] for name, _ in services}
    cli_wall, cli_steady, cli_images = 0.0, [], 0
    for r in range(ARGS.rounds):
        order = list(services) + ([("batch CLI", None)] if cli else [])
        if r % 2:
            order.reverse()
        line = []
        load0 = os.getloadavg()[0]
        for name, svc in order:
            if svc is None:
                w, steady = run_cli(PATHS, FIXATION, os.path.join(WORK, f"cli-{budget}-{r}"), budget)
                cli_wall += w
                cli_images += len(PATHS)
                cli_steady.append(steady)
                line.append(f"batch CLI {len(PATHS) / w:.2f}/s (steady {steady:.2f}/s)")
                continue
            done, wall, lat, errors, _ = asyncio.run(load(svc, per, lambda i: encode_request(
                PHOTOS[i % len(PHOTOS)], NAMES[i % len(NAMES)], FIXATION, budget), ARGS.clients))
            t = totals[name]
            t[0] += done
            t[1] += wall
            t[2] += lat
            t[3] += errors
            line.append(f"{name} {done / wall:.2f}/s")
        say(f"  round {r + 1}/{ARGS.rounds} (budget {budget}, load {load0:.1f} -> {os.getloadavg()[0]:.1f}): "
            + "; ".join(line))
    rows = [summary_row(name, *totals[name]) for name, _ in services]
    out = {"rows": rows}
    if cli:
        out["cli"] = {"images": cli_images, "wall_s": round(cli_wall, 2), "images_per_s": round(cli_images / cli_wall, 3),
                      "steady_images_per_s": [round(x, 3) for x in cli_steady],
                      "steady_median": round(statistics.median(cli_steady), 3)}
    return out


def table(rows):
    lines = [f"  {'pipeline':34s} {'images/s':>9s} {'requests':>8s} {'errors':>6s} {'p50 ms':>8s} {'p95 ms':>8s} {'p99 ms':>8s}"]
    for r in rows:
        lines.append(f"  {r['pipeline']:34s} {r['images_per_s']:9.2f} {r['requests']:8d} {r['errors']:6d} "
                     f"{r['p50_ms']:8.0f} {r['p95_ms']:8.0f} {r['p99_ms']:8.0f}")
    return "\n".join(lines)


# ---- the targets ----------------------------------------------------------------------------------

def target_throughput(res):
    say(f"throughput: {ARGS.clients} clients, {ARGS.seconds:g} s per service in {ARGS.rounds} rounds, budget "
        f"{ARGS.budget}, against the batch CLI over the {len(PATHS)} photos each round")
    services = [("serve, batching on (default)", Service("--cache-mb", "0")),
                ("serve, batching off", Service("--cache-mb", "0", "--max-batch", "1")),
                ("serve, two encoder workers", Service("--cache-mb", "0", "--encode-workers", "2"))]
    try:
        out = compare_rounds(services, ARGS.seconds, ARGS.budget)
        out["batch_sizes"] = {}
        for name, svc in services:
            n = svc.metric("fovea_encode_batch_requests_count")
            out["batch_sizes"][name] = round(svc.metric("fovea_encode_batch_requests_sum") / n, 2) if n else None
    finally:
        for _, s in services:
            s.stop()
    on, off, two = out["rows"]
    cli = out["cli"]
    out["vs_cli_steady"] = round(on["images_per_s"] / cli["steady_median"], 3)
    out["vs_cli_wall"] = round(on["images_per_s"] / cli["images_per_s"], 3)
    out["batching_on_vs_off"] = round(on["images_per_s"] / off["images_per_s"], 3)
    out["one_vs_two_workers"] = round(on["images_per_s"] / two["images_per_s"], 3)
    say(table(out["rows"]))
    say(f"  batch CLI: {cli['images_per_s']:.2f} images/s over its wall time (start-up and model load included), "
        f"steady {cli['steady_median']:.2f} (its own figure, first image left out; per round "
        f"{', '.join(map(str, cli['steady_images_per_s']))})")
    say(f"  the service (batching on) is {out['vs_cli_steady']:.2f}x the CLI's steady rate and {out['vs_cli_wall']:.2f}x "
        f"its wall rate, with {on['errors']} errors; batching on / off {out['batching_on_vs_off']:.2f}x, one encoder "
        f"worker (default) / two {out['one_vs_two_workers']:.2f}x; mean requests per encoder call: "
        f"{out['batch_sizes']}")
    res["throughput"] = out


def target_batching(res):
    res["batching"] = {}
    for budget in [int(b) for b in ARGS.batching_budgets.split(",") if b]:
        say(f"batching at budget {budget}: {ARGS.clients} clients, {ARGS.batching_seconds:g} s per service")
        services = [("serve, batching on (default)", Service("--cache-mb", "0")),
                    ("serve, batching off", Service("--cache-mb", "0", "--max-batch", "1"))]
        try:
            out = compare_rounds(services, ARGS.batching_seconds, budget, cli=False)
            n = services[0][1].metric("fovea_encode_batch_requests_count")
            out["mean_batch"] = round(services[0][1].metric("fovea_encode_batch_requests_sum") / n, 2) if n else None
        finally:
            for _, s in services:
                s.stop()
        out["on_vs_off"] = round(out["rows"][0]["images_per_s"] / out["rows"][1]["images_per_s"], 3)
        say(table(out["rows"]))
        say(f"  batching on / off: {out['on_vs_off']:.2f}x (mean requests per encoder call {out['mean_batch']})")
        res["batching"][str(budget)] = out


def target_cache(res):
    say(f"cache: {ARGS.cache_requests} cold requests (a photo not seen before) and the same requests repeated")
    svc = Service()
    try:
        async def run():
            conn = Conn(svc)
            cold, hot = [], []
            for i in range(ARGS.cache_requests):
                req = encode_request(PHOTOS[i % len(PHOTOS)], NAMES[i % len(NAMES)], (FIXATION[0] + i, FIXATION[1]))
                t0 = time.perf_counter()
                s1, h1, b1 = await conn.send(req)
                t1 = time.perf_counter()
                s2, h2, b2 = await conn.send(req)
                t2 = time.perf_counter()
                assert s1 == s2 == 200 and h1["x-fovea-cache"] == "miss" and h2["x-fovea-cache"] == "hit" and b1 == b2
                cold.append(t1 - t0)
                hot.append(t2 - t1)
            await conn.close()
            return cold, hot
        cold, hot = asyncio.run(run())
    finally:
        svc.stop()
    out = {"cold_p50_ms": round(1000 * statistics.median(cold), 1), "hit_p50_ms": round(1000 * statistics.median(hot), 2),
           "hit_p95_ms": round(1000 * pct(hot, 95), 2)}
    out["speedup"] = round(out["cold_p50_ms"] / out["hit_p50_ms"], 1)
    say(f"  cold p50 {out['cold_p50_ms']} ms, repeated p50 {out['hit_p50_ms']} ms (p95 {out['hit_p95_ms']}): "
        f"{out['speedup']}x faster")
    res["cache"] = out


def hostile_kinds(photo):
    """(kind, raw request bytes, pause before reading): requests that must each get a 4xx."""
    cap = 32 << 20
    trunc, ctype = multipart({"budget": "64"}, photo[: len(photo) // 3])
    junk, _ = multipart({}, os.urandom(5000))
    fake_png = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + (100000).to_bytes(4, "big") * 2 + b"\x08\x02\x00\x00\x00"
                + b"\x00" * 64)
    huge_px, _ = multipart({}, fake_png, "huge.png")
    unknown, _ = multipart({"surprise": "1", "fixations": "1,2"}, photo)
    badfield, _ = multipart({"budget": "-4"}, photo)
    deep = b'{"image": ' + b"[" * 50000 + b"]" * 50000 + b"}"
    j = "application/json"
    return [
        ("corrupt image (truncated JPEG)", request_bytes("/v1/encode", trunc, ctype), 0),
        ("corrupt image (random bytes)", request_bytes("/v1/encode", junk, ctype), 0),
        ("huge pixel count (PNG header)", request_bytes("/v1/encode", huge_px, ctype), 0),
        ("oversized (Content-Length)", f"POST /v1/encode HTTP/1.1\r\nHost: h\r\nContent-Type: {ctype}\r\n"
                                       f"Content-Length: {cap + 1}\r\n\r\n".encode(), 0),
        ("oversized (chunked)", b"POST /v1/encode HTTP/1.1\r\nHost: h\r\nContent-Type: " + ctype.encode() +
         b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(b"100000\r\n" + b"x" * 0x100000 + b"\r\n" for _ in range(33)), 0),
        ("slow-loris head", b"POST /v1/encode HTTP/1.1\r\nHost: h\r\nContent-Type: multip", None),
        ("slow-loris body", request_bytes("/v1/encode", b"", ctype).replace(b"Content-Length: 0", b"Content-Length: 90000")
         + b"--fovea-bench-boundary\r\n", None),
        ("bad JSON (malformed)", request_bytes("/v1/encode", b'{"image": "abc', j), 0),
        ("bad JSON (nested)", request_bytes("/v1/encode", deep, j), 0),
        ("bad JSON (types)", request_bytes("/v1/encode", b'{"image": 7, "budget": "x"}', j), 0),
        ("bad JSON (base64)", request_bytes("/v1/encode", b'{"image": "***"}', j), 0),
        ("unknown field", request_bytes("/v1/encode", unknown, ctype), 0),
        ("bad field", request_bytes("/v1/encode", badfield, ctype), 0),
        ("bad form", request_bytes("/v1/encode", b"--x\r\ngarbage", "multipart/form-data; boundary=x"), 0),
        ("not HTTP", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(200) + b"\r\n\r\n", 0),
        ("unknown video session", request_bytes("/v1/video/sessions/nope/frames", trunc, ctype), 0),
    ]


async def hostile_one(svc, data):
    reader, writer = await asyncio.open_connection(svc.host, svc.port)
    try:
        writer.write(data)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 120)
        return int(head.split()[1])
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, asyncio.LimitOverrunError) as e:
        return f"{type(e).__name__}"
    finally:
        writer.close()


def target_hostile(res):
    say(f"hostile: {ARGS.hostile_requests} hostile requests mixed into {ARGS.clients} clients' well-formed load; "
        "well-formed answers compared byte for byte with the batch CLI's files")
    ref_dir = os.path.join(WORK, "cli-reference")
    run_cli(PATHS, FIXATION, ref_dir)
    reference = {p: open(os.path.join(ref_dir, os.path.splitext(os.path.basename(p))[0] + ".safetensors"), "rb").read()
                 for p in PATHS}
    svc = Service("--cache-mb", "0", "--request-timeout-s", "15")
    kinds = hostile_kinds(PHOTOS[0])
    try:
        async def run():
            mismatches = []

            def check(i, headers, body):
                same = body == reference[PATHS[i % len(PATHS)]]
                if not same:
                    mismatches.append(PATHS[i % len(PATHS)])
                return same

            results = {k: [] for k, _, _ in kinds}
            sem = asyncio.Semaphore(32)

            async def one(i):
                kind, data, _ = kinds[i % len(kinds)]
                async with sem:
                    results[kind].append(await hostile_one(svc, data))

            hostile_task = asyncio.ensure_future(asyncio.gather(*(one(i) for i in range(ARGS.hostile_requests))))
            good = asyncio.ensure_future(load(svc, 1e9, lambda i: encode_request(
                PHOTOS[i % len(PHOTOS)], PATHS[i % len(PATHS)], FIXATION), ARGS.clients, check))
            t0 = time.perf_counter()
            await hostile_task
            hostile_s = time.perf_counter() - t0
            # The well-formed load runs on while the hostile requests last, then stops.
            good.cancel()
            try:
                await good
            except asyncio.CancelledError:
                pass
            return results, hostile_s, mismatches

        results, hostile_s, mismatches = asyncio.run(run())
        # The well-formed requests of the same stretch, counted by the service itself.
        ok = int(sum(float(m) for m in re.findall(r'^fovea_requests_total\{method="POST",route="/v1/encode",status="200"\} ([0-9.e+]+)$',
                                                  svc.metrics(), re.M)))
        alive = svc.alive()
        # A last batch of well-formed requests after the storm: still served, still the CLI's bytes.
        done, wall, lat, errors, answers = asyncio.run(load(svc, 10, lambda i: encode_request(
            PHOTOS[i % len(PHOTOS)], PATHS[i % len(PATHS)], FIXATION), ARGS.clients,
            lambda i, h, b: b == reference[PATHS[i % len(PATHS)]]))
    finally:
        code = svc.stop()
    by_kind = {k: {s: list(map(str, v)).count(s) for s in sorted(set(map(str, v)))} for k, v in results.items()}
    hostile_4xx = sum(1 for v in results.values() for s in v if isinstance(s, int) and 400 <= s < 500)
    out = {"hostile": ARGS.hostile_requests, "hostile_4xx": hostile_4xx, "by_kind": by_kind,
           "hostile_seconds": round(hostile_s, 1), "service_alive": alive, "exit_code": code,
           "well_formed_ok_during": ok, "byte_mismatches_during": len(mismatches),
           "after": {"requests": done, "errors": len(errors), "error_samples": errors[:5], "byte_identical": sum(answers)}}
    say(f"  {hostile_4xx} of {ARGS.hostile_requests} hostile requests answered 4xx in {hostile_s:.0f} s; by kind: "
        + "; ".join(f"{k}: {v}" for k, v in by_kind.items()))
    say(f"  well-formed during the storm: {ok} answered 200, {len(mismatches)} differing from the CLI's file; "
        f"after it: {done} requests, {len(errors)} errors {errors[:3]}, {sum(answers)} byte-identical to the CLI's; the service "
        f"{'lived' if alive else 'DIED'} and exited {code} on SIGTERM")
    res["hostile"] = out


def target_explorer(res):
    import fovea
    from PIL import Image
    say("explorer: live updates of a 1024x1024 photo (the page's tokenize request), budgets 60-392, 3 passes")
    big = os.path.join(WORK, "explorer.jpg")
    Image.open(PATHS[0]).convert("RGB").resize((1024, 1024), Image.BICUBIC).save(big, quality=92)
    data = open(big, "rb").read()
    svc = Service("--cache-mb", "0")
    try:
        async def run():
            conn = Conn(svc)
            lat, sizes = [], []
            for p in range(3):
                for b in (60, 120, 200, 273, 392, 160, 100):
                    body, ctype = multipart({"format": "json", "tensors": "relevance", "rgb": "true", "budget": str(b),
                                             "fixations": json.dumps([[300 + 10 * p, 400]])}, data, "explorer.jpg")
                    t0 = time.perf_counter()
                    status, _, answer = await conn.send(request_bytes("/v1/tokenize", body, ctype))
                    lat.append(time.perf_counter() - t0)
                    assert status == 200, answer[:200]
                    sizes.append(len(answer))
            await conn.close()
            return lat, sizes
        lat, sizes = asyncio.run(run())
    finally:
        svc.stop()
    out = {"p50_ms": round(1000 * statistics.median(lat), 1), "p95_ms": round(1000 * pct(lat, 95), 1),
           "max_ms": round(1000 * max(lat), 1), "answer_kb_median": round(statistics.median(sizes) / 1024, 1)}
    say(f"  round trip p50 {out['p50_ms']} ms, p95 {out['p95_ms']} ms, max {out['max_ms']} ms "
        f"(answers of {out['answer_kb_median']} KiB); the page then draws both pictures (the browser test records "
        "the whole update: <build>/test-artifacts/explorer-updates.json)")
    res["explorer"] = out


def model_memory_mb():
    """RSS a process gains by loading the model and encoding at the service's precision twice
    (the second use packs the weights for the kernels: those copies are the model's too)."""
    code = ("import fovea, numpy as np, re\n"
            "def rss():\n    return int(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) / 1024\n"
            "a = rss()\n"
            f"m = fovea.Model({ARGS.model!r})\n"
            "t = fovea.tokenize(np.full((256, 256, 3), 128, np.uint8), budget=16, model=m)\n"
            f"m.encode_full(t, {ARGS.precision!r}, 1)\n"
            f"m.encode_full(t, {ARGS.precision!r}, 1)\n"
            "print(rss() - a)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ARGS.build_dir, "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return float(r.stdout.strip())


def target_memory(res):
    n = ARGS.memory_requests
    say(f"memory: {n} requests ({ARGS.clients} clients: encodes at budgets 16-273 with random fixations, "
        f"tokenizations, repeats, bad requests) with --cache-mb {ARGS.memory_cache_mb:g}")
    model_mb = model_memory_mb()
    svc = Service("--cache-mb", str(ARGS.memory_cache_mb))
    rng = random.Random(0)
    plan = []
    for i in range(n):
        k = rng.random()
        photo = rng.randrange(len(PHOTOS))
        fix = (rng.randrange(40, 1000), rng.randrange(40, 900))
        if k < 0.55:
            plan.append(encode_request(PHOTOS[photo], NAMES[photo], fix, rng.choice((16, 32, 64, 128, 273))))
        elif k < 0.75:
            body, ctype = multipart({"fixations": "%d,%d" % fix, "format": "json", "rgb": "true",
                                     "budget": str(rng.choice((64, 273)))}, PHOTOS[photo], NAMES[photo])
            plan.append(request_bytes("/v1/tokenize", body, ctype))
        elif k < 0.95:
            plan.append(encode_request(PHOTOS[photo % 4], NAMES[photo % 4], FIXATION, 64))  # repeats: cache hits
        else:
            body, ctype = multipart({"budget": "0"}, PHOTOS[photo], NAMES[photo])
            plan.append(request_bytes("/v1/encode", body, ctype))
    try:
        before = rss_mb(svc.p.pid)
        peak = [before]
        done_box = {}

        async def run():
            counter = iter(range(n))
            statuses = {}

            async def client():
                conn = Conn(svc)
                for i in counter:
                    status, _, _ = await conn.send(plan[i])
                    statuses[status] = statuses.get(status, 0) + 1
                    if i % 200 == 0:
                        peak[0] = max(peak[0], rss_mb(svc.p.pid))
                        if i % 2000 == 0:
                            say(f"  {i} requests, RSS {rss_mb(svc.p.pid):.0f} MB")
                await conn.close()

            t0 = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(ARGS.clients)))
            done_box["s"] = time.perf_counter() - t0
            return statuses

        statuses = asyncio.run(run())
        after = rss_mb(svc.p.pid)
        peak[0] = max(peak[0], after)
        cache_bytes = svc.metric("fovea_cache_bytes")
    finally:
        svc.stop()
    bound = model_mb + ARGS.memory_cache_mb + 300
    out = {"requests": n, "seconds": round(done_box["s"], 1), "statuses": {str(k): v for k, v in sorted(statuses.items())},
           "rss_before_mb": round(before, 1), "rss_peak_mb": round(peak[0], 1), "rss_after_mb": round(after, 1),
           "model_mb": round(model_mb, 1), "cache_cap_mb": ARGS.memory_cache_mb, "cache_mb_at_end": round(cache_bytes / 2**20, 1),
           "bound_mb": round(bound, 1), "met": after <= bound and peak[0] <= bound}
    say(f"  {n} requests in {out['seconds']} s ({out['statuses']}); RSS {before:.0f} MB before, peak {peak[0]:.0f}, "
        f"after {after:.0f}; the model alone {model_mb:.0f} MB + cache cap {ARGS.memory_cache_mb:g} + 300 = "
        f"{bound:.0f} MB: {'met' if out['met'] else 'NOT met'} (cache held {out['cache_mb_at_end']} MB at the end)")
    res["memory"] = out


def main():
    global ARGS, PATHS, PHOTOS, NAMES, FIXATION, WORK
    ARGS = parse_args()
    # Stopped (SIGTERM, Ctrl-C) or failed: no service outlives the benchmark.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    atexit.register(lambda: [s.p.kill() for s in SERVICES if s.p.poll() is None])
    if os.environ.get("OMP_WAIT_POLICY") != "PASSIVE":
        # Every pipeline with libgomp's passive policy (the CLI's launcher and the service set it too).
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    sys.path.insert(0, os.path.join(ARGS.build_dir, "python"))
    sys.path.insert(0, HERE)
    import fovea
    argv, sys.argv = sys.argv, sys.argv[:1]  # batch_bench parses its own flags when imported
    try:
        from batch_bench import make_dataset
    finally:
        sys.argv = argv
    WORK = ARGS.work or tempfile.mkdtemp(prefix="fovea-serve-bench-")
    PATHS = make_dataset(os.path.join(WORK, "images"), ARGS.images)
    PHOTOS = [open(p, "rb").read() for p in PATHS]
    NAMES = [os.path.basename(p) for p in PATHS]
    h, w = fovea.decode_image(PHOTOS[0]).shape[:2]
    FIXATION = (round(w / 3), round(h / 3))

    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    header = (f"machine: {machine()}; date {started}; commit {commit()}; load at start "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
              f"command: {' '.join(shlex.quote(a) for a in [sys.executable] + sys.argv)}\n"
              f"model {ARGS.model}, {ARGS.precision}, budget {ARGS.budget}, threads {ARGS.threads}, {ARGS.clients} clients, "
              f"{len(PATHS)} photos of ~1024x1024, fixation {FIXATION}")
    say(header)
    res = {"machine": machine(), "date": started, "commit": commit(), "command": " ".join([sys.executable] + sys.argv),
           "model": ARGS.model, "precision": ARGS.precision, "budget": ARGS.budget, "threads": ARGS.threads,
           "clients": ARGS.clients, "photos": len(PATHS), "load_at_start": os.getloadavg()}
    for t in ARGS.targets.split(","):
        {"throughput": target_throughput, "batching": target_batching, "cache": target_cache,
         "hostile": target_hostile, "explorer": target_explorer, "memory": target_memory}[t](res)
        res["load_at_end"] = os.getloadavg()
        if ARGS.out:  # after every target: a run cut short keeps what it measured
            os.makedirs(os.path.dirname(os.path.abspath(ARGS.out)), exist_ok=True)
            with open(ARGS.out + ".txt", "w") as f:
                f.write("\n".join(LOG) + "\n")
            with open(ARGS.out + ".json", "w") as f:
                json.dump(res, f, indent=1)
    import provenance  # bench/provenance.py
    provenance.output(ARGS, "serve", json.loads(json.dumps(res, default=str)), threads=ARGS.threads,
                      versions=provenance.module_versions("fastapi", "uvicorn", "httpx"))


if __name__ == "__main__":
    main()
