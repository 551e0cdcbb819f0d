"""fovea at dataset scale on dask.distributed.

    python3 -m fovea.distributed INPUTS... -o OUTDIR [--workers N | --scheduler tcp://HOST:8786]
                                 [--model CKPT --precision bf16] [--budget 273 --fixation X,Y ...]

INPUTS are image files, directories of them (fovea.image_extensions(), recursively) and WebDataset-style
.tar shards. There is one Dask task per input shard and one per batch of --batch-size files.
Each worker process loads the model once (a per-process cache) and runs fovea's C++ pipeline
with the GIL released, on the host's cores divided by the task slots of the workers there.
The layout that measured fastest (docs/how-to/python-and-dask.md) is one worker per machine running one task
at a time (`dask worker ... --nworkers 1 --nthreads 1`; the LocalCluster default here), with
OMP_WAIT_POLICY=PASSIVE in the worker's environment (set for the LocalCluster this command
starts; the summary warns when a worker runs without it). Outputs are those of the batch CLI (`fovea tokenize|encode ... -o DIR`),
byte for byte:
  * a file input writes OUTDIR/<name without extension>.safetensors;
  * a shard writes OUTDIR/<shard name>.tar with a <key>.safetensors member per image.
Each output is written atomically (a temporary file, then a rename), so a task that dies half way
leaves nothing behind, and Dask's rerun of it (a killed worker's tasks are rescheduled; --retries
reruns tasks that raised) writes the same bytes again.

Without --model the images are tokenized (token files); with it they are encoded (embeddings
files). A bad image is skipped and counted, as the CLI does; the summary (JSON with --json)
says how many failed, and the exit code is 1 when any did.

For people who already hold a Client:

    from dask.distributed import Client
    import fovea.distributed as fd
    summary = fd.run(["shards/"], "out/", client=Client("tcp://scheduler:8786"),
                     model="clip-vit-b16/model.safetensors", precision="bf16", budget=273)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import tempfile
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence

import fovea
from fovea import _fovea

IMAGE_EXTENSIONS = tuple(fovea.image_extensions())  # .jpg/.jpeg/.png, and with FFmpeg .webp, .gif, ...

# ---- work units ---------------------------------------------------------------------------------


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _tar_key(member: str) -> str:
    """WebDataset's key: the member name up to the first '.' of its file name."""
    return _fovea.webdataset_key(member)


def plan(inputs: Sequence[str], outdir: str, batch_size: int = 16) -> List[Dict[str, Any]]:
    """The tasks for `inputs`: [{"kind": "files", "paths": [...]} | {"kind": "shard", "path": ...}],
    each with its outputs. Raises ValueError for missing inputs and colliding outputs."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    files: List[str] = []
    shards: List[str] = []
    for inp in inputs:
        inp = os.fspath(inp)
        if os.path.isdir(inp):
            found = []
            for root, _, names in os.walk(inp):
                found += [os.path.join(root, n) for n in names if _is_image(n)]
            files += sorted(found)
        elif inp.lower().endswith(".tar"):
            if not os.path.isfile(inp):
                raise FileNotFoundError(f"cannot open '{inp}': No such file or directory")
            shards.append(inp)
        elif os.path.isfile(inp):
            files.append(inp)
        else:
            raise FileNotFoundError(f"cannot open '{inp}': No such file or directory")
    claimed: Dict[str, str] = {}
    tasks: List[Dict[str, Any]] = []
    for p in files:
        out = os.path.join(outdir, _stem(p) + ".safetensors")
        if out in claimed:
            raise ValueError(f"'{p}' and '{claimed[out]}' would both write '{out}'")
        claimed[out] = p
    for s in shards:
        out = os.path.join(outdir, _stem(s) + ".tar")
        if out in claimed:
            raise ValueError(f"'{s}' and '{claimed[out]}' would both write '{out}'")
        claimed[out] = s
        tasks.append({"kind": "shard", "path": s, "output": out})
    for i in range(0, len(files), batch_size):
        batch = files[i:i + batch_size]
        tasks.append({"kind": "files", "paths": batch,
                      "outputs": [os.path.join(outdir, _stem(p) + ".safetensors") for p in batch]})
    if not tasks:
        raise ValueError("no images found in the inputs")
    return tasks


# ---- what a worker runs -----------------------------------------------------------------------

_MODELS: Dict[str, "fovea.Model"] = {}
_TUNED = False


def _tune_worker_malloc() -> None:
    """Undo the Dask nanny's MALLOC_TRIM_THRESHOLD_ (65536) for this worker process.

    Setting a trim threshold turns off glibc's dynamic mmap threshold, so every buffer of
    128 KiB or more (the encoder's activations, each image's tensors) is a fresh mmap, page-
    faulted and zeroed on every call, and freed memory goes straight back to the OS. Measured
    here: the same single-thread bf16 encode took 0.47-0.51 s per image with the variable set
    against 0.37-0.42 s without. fovea's working set is a few large buffers reused per image,
    so the worker keeps them: 64 MiB mmap threshold, 512 MiB trim threshold.
    """
    global _TUNED
    if _TUNED:
        return
    _TUNED = True
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        return
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        libc.mallopt(M_MMAP_THRESHOLD, 64 << 20)
        libc.mallopt(M_TRIM_THRESHOLD, 512 << 20)
    except OSError:  # not glibc
        pass


def _model(spec: str) -> "fovea.Model":
    """This process's copy of the model: loaded once per worker process."""
    m = _MODELS.get(spec)
    if m is None:
        m = _MODELS[spec] = fovea.Model(spec)
    return m


def _worker_threads(threads: int, slots_per_host: Optional[Dict[str, int]] = None) -> int:
    """fovea threads for one task. An explicit `threads` wins. Inside a Dask worker the default
    shares the host's cores between the task slots every worker on that host runs at once
    (cores // slots; the driver counts the slots per host from the scheduler), so that N
    workers x T threads on a C-core host never run more than C compute threads. Outside Dask:
    0, one thread per hardware thread."""
    if threads:
        return threads
    try:
        from distributed import get_worker
        w = get_worker()
    except (ImportError, ValueError):
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    slots = (slots_per_host or {}).get(_host(w.address))
    if not slots:  # unknown to the driver (a worker that joined later): this worker's own slots
        slots = int(getattr(getattr(w, "state", None), "nthreads", None) or getattr(w, "nthreads", 1) or 1)
    return max(1, cpus // max(1, slots))


def _host(address: str) -> str:
    """'tcp://10.0.0.5:40123' -> '10.0.0.5'"""
    rest = address.split("://", 1)[-1]
    return rest.rsplit(":", 1)[0].strip("[]")


_WARNED_WAIT_POLICY = False


def _check_wait_policy(threads: int, options: Dict[str, Any]) -> Optional[str]:
    """A note for the driver when this process runs fovea's encoder on several OpenMP threads
    with libgomp's default wait policy (idle threads spin at every barrier). The policy is read
    once, when libgomp loads, so it cannot be fixed from here: it belongs in the worker's
    environment. Measured here: ~0.6 s of CPU per image instead of ~0.18 s (docs/how-to/python-and-dask.md)."""
    global _WARNED_WAIT_POLICY
    uses_openmp = options.get("model") is not None  # only the encoder runs OpenMP code
    if (threads == 1 or not uses_openmp or _WARNED_WAIT_POLICY or os.environ.get("OMP_WAIT_POLICY")
            or os.environ.get("GOMP_SPINCOUNT")):
        return None
    _WARNED_WAIT_POLICY = True
    return (f"process {os.getpid()} encodes on {threads or 'all'} OpenMP threads with the default (spinning) "
            "OpenMP wait policy, several times slower on shared cores: start it with OMP_WAIT_POLICY=PASSIVE "
            "in its environment (Dask workers: OMP_WAIT_POLICY=PASSIVE dask worker ...)")


def _split(options: Dict[str, Any]):
    opts = dict(options)
    model_spec = opts.pop("model", None)
    precision = opts.pop("precision", "fp32")
    opts.pop("_slots_per_host", None)
    threads = opts.pop("threads", 0)
    return model_spec, precision, threads, opts


def _tokenize(image, source: str, options: Dict[str, Any], threads: Optional[int] = None) -> "fovea.Tokens":
    model_spec, _, default_threads, opts = _split(options)
    threads = default_threads if threads is None else threads
    if model_spec:
        return fovea.tokenize(image, threads=threads, source=source, model=_model(model_spec), **opts)
    return fovea.tokenize(image, threads=threads, source=source, **opts)


def _finish(tokens: "fovea.Tokens", options: Dict[str, Any], outfile: Optional[str]) -> Optional[bytes]:
    """Encodes (with a model) and writes `outfile` atomically, or returns the file's bytes."""
    model_spec, precision, threads, _ = _split(options)
    result = _model(model_spec).encode_full(tokens, precision=precision, threads=threads) if model_spec else tokens
    if outfile is not None:
        result.save(outfile)  # atomic (C++: temporary file + rename)
        return None
    with tempfile.TemporaryDirectory() as d:  # the file's bytes, for a shard member
        p = os.path.join(d, "out.safetensors")
        result.save(p)
        with open(p, "rb") as f:
            return f.read()


def _process(image, source: str, options: Dict[str, Any], outfile: Optional[str]) -> Optional[bytes]:
    """Tokenizes (and encodes) one image. Writes `outfile` atomically, or returns the bytes."""
    return _finish(_tokenize(image, source, options), options, outfile)


_PREFETCH = None


def _lowest_priority() -> None:
    try:  # per thread on Linux
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def _prefetcher():
    """One background thread per process that tokenizes the next file while the current one
    is encoded, at the lowest priority, as the batch CLI decodes ahead: it uses the cycles the
    encoder's OpenMP team leaves idle instead of preempting a team member (measured: an unniced
    third thread cost the CLI ~30 % on 2 busy cores)."""
    global _PREFETCH
    if _PREFETCH is None:
        from concurrent.futures import ThreadPoolExecutor
        _PREFETCH = ThreadPoolExecutor(1, thread_name_prefix="fovea-prefetch", initializer=_lowest_priority)
    return _PREFETCH


def run_task(task: Dict[str, Any], options: Dict[str, Any]) -> Dict[str, Any]:
    """One task: a batch of files or one shard. Returns a small record, never the outputs
    themselves: {"ok": n, "failed": [[input, error]...], "notes": [warnings]}. Safe to rerun:
    every output is replaced atomically with the same bytes."""
    _tune_worker_malloc()
    options = dict(options)
    options["threads"] = _worker_threads(options.get("threads", 0), options.get("_slots_per_host"))
    ok, failed = 0, []
    notes = [n for n in [_check_wait_policy(options["threads"], options)] if n]
    if task["kind"] == "files":
        paths = task["paths"]
        # With a model, the next file is tokenized (1 thread, lowest priority) while this one
        # is encoded; results do not depend on the thread count.
        ahead = bool(options.get("model")) and len(paths) > 1
        nxt = None
        for i, (path, out) in enumerate(zip(paths, task["outputs"])):
            try:
                t = nxt.result() if nxt is not None else _tokenize(path, path, options)
            except (ValueError, OSError, RuntimeError) as e:
                t, err = None, e
            nxt = _prefetcher().submit(_tokenize, paths[i + 1], paths[i + 1], options, 1) if ahead and i + 1 < len(paths) else None
            try:
                if t is None:
                    raise err
                _finish(t, options, out)
                ok += 1
            except (ValueError, OSError, RuntimeError) as e:
                failed.append([path, str(e)])
        return {"ok": ok, "failed": failed, "notes": notes}
    shard, out = task["path"], task["output"]
    members = []
    try:
        # The library's shard reader (fovea/tar.hpp), as the batch CLI reads shards.
        for name, data in _fovea.TarReader(shard, list(IMAGE_EXTENSIONS)):
            label = f"{shard}:{name}"
            if _fovea.tar_name_escapes(name):  # its output member would leave the folder too
                failed.append([label, f"member name '{name}' leaves the shard's folder (absolute or '..'): "
                                      "not a WebDataset key"])
                continue
            try:
                members.append((_tar_key(name) + ".safetensors", _process(data, label, options, None)))
                ok += 1
            except (ValueError, OSError, RuntimeError) as e:
                failed.append([label, str(e)])
    except (OSError, RuntimeError) as e:
        failed.append([shard, str(e)])
    if members:
        tmp = f"{out}.tmp-{os.getpid()}-{time.monotonic_ns()}"
        try:
            with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
                for name, data in members:
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    info.mode = 0o644
                    info.mtime = int(time.time())
                    tar.addfile(info, io.BytesIO(data))
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return {"ok": ok, "failed": failed, "notes": notes}


# ---- the driver -------------------------------------------------------------------------------


def _summarize(results: Iterable[Dict[str, Any]], elapsed: float) -> Dict[str, Any]:
    ok, failed, notes = 0, [], []
    for r in results:
        ok += r["ok"]
        failed += r["failed"]
        notes += [n for n in r.get("notes", ()) if n not in notes]
    n = ok + len(failed)
    return {"images": n, "ok": ok, "failed": len(failed),
            "failures": [{"input": i, "error": e} for i, e in failed], "warnings": notes,
            "elapsed_s": elapsed, "images_per_s": n / elapsed if elapsed > 0 else 0.0}


def _slots_per_host(client) -> Dict[str, int]:
    """Task slots (Dask threads) per host: the workers of one host share its cores."""
    slots: Dict[str, int] = {}
    for addr, w in client.scheduler_info()["workers"].items():
        h = _host(addr)
        slots[h] = slots.get(h, 0) + int(w.get("nthreads", 1) or 1)
    return slots


def _auto_batch_size(inputs: Sequence[str], client) -> int:
    """Files per task: up to 16 (fewer scheduler round trips at dataset scale), but at least
    8 tasks per task slot, so the last tasks leave no slot idle for long. A task costs the
    scheduler a few ms of CPU; an image ~0.2-1 s."""
    slots = sum(_slots_per_host(client).values()) if client is not None else 1
    files = sum(len(t["paths"]) for t in plan(inputs, "", 1) if t["kind"] == "files")
    return max(1, min(16, files // (8 * max(1, slots))))


def run(inputs: Sequence[str], outdir: str, *, client=None, batch_size: Optional[int] = None, retries: int = 3,
        progress: bool = False, **options) -> Dict[str, Any]:
    """Tokenize (or, with model=, encode) every image of `inputs` into `outdir`.

    Args:
        inputs: image files, directories, .tar shards.
        outdir: created if missing.
        client: a dask.distributed.Client; None runs the same tasks here, one after another
            (the serial reference).
        batch_size: files per task (a shard is always one task); None: up to 16, at least
            8 tasks per task slot.
        retries: Dask reruns a task that raised up to this many times (a killed worker's
            tasks are rescheduled by Dask regardless).
        progress: print images done and images/s to stderr as tasks finish.
        options: fovea.tokenize's keywords (budget, fixations, regions, patch, uniform, dtype,
            ...), plus model= (a checkpoint or "random:vit-b16"), precision= and threads=
            (fovea threads per task; 0: the host's cores divided by the task slots of all
            workers on that host).

    Layout: one worker process per machine running one task at a time (--nthreads 1), with
    fovea's threads = the machine's cores, was the fastest here (within a few % of the batch
    CLI, docs/how-to/python-and-dask.md); several single-thread workers or slots per machine measured ~0.65x.
    Workers running several fovea threads need OMP_WAIT_POLICY=PASSIVE in their environment
    (the summary's "warnings" say when a worker lacks it).

    Returns the summary: images, ok, failed, failures [{input, error}], elapsed_s,
    images_per_s.
    """
    os.makedirs(outdir, exist_ok=True)
    if batch_size is None:
        batch_size = _auto_batch_size(inputs, client)
    tasks = plan(inputs, outdir, batch_size)
    t0 = time.perf_counter()
    results = []

    def report(r):
        results.append(r)
        if progress:
            done = sum(x["ok"] + len(x["failed"]) for x in results)
            dt = time.perf_counter() - t0
            print(f"\rfovea.distributed: {len(results)}/{len(tasks)} tasks, {done} images, "
                  f"{done / dt if dt > 0 else 0:.1f} images/s", end="", file=sys.stderr, flush=True)

    if client is None:
        for t in tasks:
            report(run_task(t, options))
    else:
        from distributed import as_completed
        options = dict(options, _slots_per_host=_slots_per_host(client))
        futures = client.map(run_task, tasks, options=options, retries=retries, pure=False)
        for fut in as_completed(futures):
            report(fut.result())
    if progress:
        print(file=sys.stderr)
    return _summarize(results, time.perf_counter() - t0)


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m fovea.distributed",
                                description="Tokenize or encode a dataset with fovea on dask.distributed.")
    p.add_argument("inputs", nargs="+", help="image files, directories, WebDataset .tar shards")
    p.add_argument("-o", "--output", required=True, help="output directory")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=1,
                       help="start a LocalCluster of N worker processes on this machine (default 1: one process, "
                            "one model copy, all cores on each image)")
    where.add_argument("--scheduler", help="connect to a running scheduler, e.g. tcp://HOST:8786")
    where.add_argument("--serial", action="store_true", help="no Dask: run the tasks here, one after another")
    p.add_argument("--threads-per-worker", type=int, default=1, help="LocalCluster: threads per worker (default 1)")
    p.add_argument("--threads", type=int, default=0,
                   help="fovea threads per task (0: the host's cores / the task slots of all workers on it)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="files per task (default: up to 16, at least 8 tasks per task slot)")
    p.add_argument("--retries", type=int, default=3)
    p.add_argument("--model", "-m", help="encode with this checkpoint (or random:vit-b16); without it, tokenize")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--budget", "-b", type=int,
                   help="token budget (default 273; with the windows foveation two native views, 2*G^2)")
    p.add_argument("--foveation", choices=["windows", "mixed"],
                   help="windows (native-size windows, for frozen towers) or mixed (one sequence of mixed mip levels); "
                        "default: the model's own (windows for every checkpoint), mixed when tokenizing")
    p.add_argument("--window-grid", type=int, help="--foveation windows: tokens a side of a native window")
    p.add_argument("--keep-covered", action="store_true",
                   help="--foveation windows: also hand on the tokens a finer window covers")
    p.add_argument("--patch", "-p", type=int)
    p.add_argument("--fixation", "-f", action="append", default=[], help="X,Y[,R[,WEIGHT]] as fovea's CLI: R is the radius (px) "
                   "of what is looked at (0: no size hint); repeatable")
    p.add_argument("--region", "-r", action="append", default=[], help="X0,Y0,X1,Y1[,WEIGHT]; repeatable")
    p.add_argument("--uniform", action="store_true")
    p.add_argument("--dtype", choices=["f32", "f16", "u8"], default="f32")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p.parse_args(argv)


def _floats(text: str, flag: str) -> List[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"{flag}: '{text}' is not a list of numbers") from None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parse_args(argv)
    try:
        options: Dict[str, Any] = {"budget": args.budget, "uniform": args.uniform, "dtype": args.dtype,
                                   "fixations": [_floats(f, "--fixation") for f in args.fixation],
                                   "regions": [_floats(r, "--region") for r in args.region],
                                   "threads": args.threads}
        for key in ("foveation", "window_grid"):
            if getattr(args, key) is not None:
                options[key] = getattr(args, key)
        if args.keep_covered:
            options["keep_covered"] = True
        if args.patch:
            options["patch"] = args.patch
        if args.model:
            options["model"] = args.model
            options["precision"] = args.precision
        plan(args.inputs, args.output, args.batch_size or 1)  # argument errors before a cluster starts
        cluster = client = None
        if not args.serial:
            from distributed import Client, LocalCluster
            if args.scheduler:
                client = Client(args.scheduler)
            else:
                # The program's choice, as fovea's CLI makes it: libgomp reads the policy once, when
                # it loads, and spinning idle OpenMP threads cost ~3x here. Set before the workers
                # are spawned (they inherit it), even though this process loaded libgomp already.
                os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                n = max(1, args.workers)
                cluster = LocalCluster(n_workers=n, threads_per_worker=args.threads_per_worker, processes=True,
                                       host="127.0.0.1", dashboard_address=None)
                client = Client(cluster)
        try:
            summary = run(args.inputs, args.output, client=client, batch_size=args.batch_size,
                          retries=args.retries, progress=sys.stderr.isatty(), **options)
        finally:
            if client is not None:
                client.close()
            if cluster is not None:
                cluster.close()
    except ValueError as e:
        print(f"fovea: error: {e}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as e:
        print(f"fovea: error: {e}", file=sys.stderr)
        return 1
    for w in summary["warnings"]:
        print(f"fovea: warning: {w}", file=sys.stderr)
    for f in summary["failures"]:
        print(f"fovea: warning: skipped {f['input']}: {f['error']}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"fovea: {summary['images']} images, {summary['ok']} ok, {summary['failed']} failed, "
              f"{summary['images_per_s']:.2f} images/s, {summary['elapsed_s']:.1f} s -> {args.output}")
    if summary["failed"]:
        print(f"fovea: error: {summary['failed']} of {summary['images']} images failed (each is named above)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
