"""One format for every benchmark result: what ran, where, on which code, and what it measured.

A result is a JSON object (schema "fovea-bench/1"):

    schema         "fovea-bench/1"
    bench          the benchmark's name: its folder under bench/results/
    date           when it ran, UTC, ISO 8601 ("2026-12-06T06:53:59Z")
    commit         the commit of the code that ran: 40 hex digits
    dirty          true when the work tree had uncommitted changes to tracked files
    versions       {"fovea": "0.2.0", "torch": "1.13.1", ...}: fovea and every competitor
    machine        {"cpu_model", "cpu_class", "vendor", "family", "model", "cores", "flags"}
    threads        threads given to each side (int), or null when it varies per row
    load_average   [1 min, 5 min, 15 min] when the run started
    command        the command line, as typed from the repository's root
    rows           a list of flat objects: one measurement each (numbers, strings, booleans, null)
    extra          optional: whatever else the benchmark records (per-frame data, raw output)
    provenance     optional: how the fields were found, for results converted from older files

Results live in bench/results/<bench>/<date>_<cpu-class>_<commit>.json (date as YYYY-MM-DD,
commit as 10 hex digits; "-2", "-3" ... when one commit ran the same benchmark more than once on
one day). A benchmark script writes one with:

    import provenance
    provenance.add_arguments(ap)                        # --save
    ...
    provenance.output(ARGS, "oneshot", results, threads=2, versions={"torch": torch.__version__})

where results is what the script already prints or writes with --json; its rows are found by
rows_from() (a "rows" list, per-pipeline "runs", per-clip "clips" ...) unless rows= is given.

`python3 bench/provenance.py --check FILE...` validates files; bench/convert_results.py brings
older result files into this format; bench/report.py turns the latest ones into
docs/reference/benchmarks.md.
"""
import datetime
import json
import os
import re
import shlex
import subprocess
import sys

SCHEMA = "fovea-bench/1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
REQUIRED = ("schema", "bench", "date", "commit", "dirty", "versions", "machine", "threads", "load_average",
            "command", "rows")
MACHINE_KEYS = ("cpu_model", "cpu_class", "flags")


# ---- the machine --------------------------------------------------------------------------

def cpu_class(vendor: str, family: int, model: int, flags) -> str:
    """A short name for the kind of CPU: the micro-architecture where family and model tell it,
    else the vendor and the widest vector ISA. Kernels are picked by these features, so runs of
    one class compare."""
    flags = set(flags or ())
    vendor = (vendor or "").lower()
    if "amd" in vendor:
        if family == 26:
            return "zen5"
        if family == 25:
            return "zen4" if (0x10 <= model <= 0x1F or 0x60 <= model <= 0xAF) else "zen3"
        if family == 23:
            return "zen2" if model >= 0x30 else "zen1"
        v = "amd"
    elif "intel" in vendor:
        if "amx_tile" in flags or "amx-tile" in flags:
            return "xeon-amx"
        known = {106: "icelake", 108: "icelake", 125: "icelake", 126: "icelake", 85: "skylake-x",
                 143: "sapphirerapids", 207: "emeraldrapids"}
        if family == 6 and model in known:
            return known[model]
        v = "intel"
    else:
        v = vendor or "cpu"
    for isa in ("avx512_bf16", "avx512f", "avx2"):
        if isa in flags:
            return f"{v}-{isa.replace('_', '')}"
    return f"{v}-generic"


def machine() -> dict:
    """This machine's CPU from /proc/cpuinfo: model name, vendor, family/model, flags, cores."""
    info = {}
    try:
        text = open("/proc/cpuinfo", encoding="utf-8", errors="replace").read()
    except OSError:
        text = ""
    first = text.split("\n\n", 1)[0]
    for line in first.splitlines():
        k, _, v = line.partition(":")
        info[k.strip()] = v.strip()
    flags = sorted(info.get("flags", "").split())
    vendor = info.get("vendor_id", "")
    family = int(info.get("cpu family", "0") or 0)
    model = int(info.get("model", "0") or 0)
    return {"cpu_model": info.get("model name", "unknown"), "vendor": vendor, "family": family, "model": model,
            "cores": os.cpu_count(), "cpu_class": cpu_class(vendor, family, model, flags),
            "flags": [f for f in flags if re.match(r"(avx|amx|fma|f16c|sse4|bmi|vnni)", f)]}


# ---- the code -----------------------------------------------------------------------------

def git(*args) -> str:
    r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def commit() -> tuple:
    """(HEAD's full hash, whether tracked files differ from it)."""
    return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))


def fovea_version() -> str:
    m = re.search(r"project\(fovea VERSION ([0-9.]+)", open(os.path.join(ROOT, "CMakeLists.txt")).read())
    return m.group(1) if m else "unknown"


def module_versions(*names) -> dict:
    """Versions of the Python modules named, for those already imported or importable."""
    out = {}
    for n in names:
        mod = sys.modules.get(n)
        if mod is None:
            try:
                mod = __import__(n)
            except Exception:
                continue
        out[n] = str(getattr(mod, "__version__", "unknown"))
    return out


# ---- the result ---------------------------------------------------------------------------

def command_line(argv=None) -> str:
    argv = list(sys.argv if argv is None else argv)
    if argv and argv[0].endswith(".py"):
        argv[0] = os.path.relpath(os.path.abspath(argv[0]), ROOT)
        argv.insert(0, "/usr/bin/python3")
    return " ".join(shlex.quote(a) for a in argv)


def flat(v):
    """A row's value as JSON scalars: lists and dicts become compact JSON strings."""
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, separators=(",", ":"), default=str)
    if isinstance(v, float) and v != v:
        return None
    return v


def result(bench, rows, *, threads=None, versions=None, extra=None, command=None, date=None) -> dict:
    """A result document for this run, on this machine, at this commit."""
    head, dirty = commit()
    now = date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = {"schema": SCHEMA, "bench": bench, "date": now, "commit": head, "dirty": dirty,
           "versions": {"fovea": fovea_version(), **(versions or {})}, "machine": machine(),
           "threads": threads if isinstance(threads, int) and threads > 0 else None, "load_average": [round(x, 2) for x in os.getloadavg()],
           "command": command or command_line(), "rows": [{k: flat(v) for k, v in r.items()} for r in rows]}
    if extra is not None:
        doc["extra"] = extra
    return doc


def file_name(doc: dict, folder: str) -> str:
    """<date>_<cpu-class>_<commit>.json in folder, "-N" added when that name is taken."""
    base = f"{doc['date'][:10]}_{doc['machine']['cpu_class']}_{doc['commit'][:10]}"
    name, n = base + ".json", 1
    while os.path.exists(os.path.join(folder, name)):
        n += 1
        name = f"{base}-{n}.json"
    return os.path.join(folder, name)


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False, default=str) + "\n"


def save(doc: dict, results_dir: str = RESULTS) -> str:
    """Writes doc to results_dir/<bench>/<date>_<cpu-class>_<commit>.json; returns the path."""
    errors = validate(doc)
    if errors:
        raise ValueError("not a valid result: " + "; ".join(errors))
    folder = os.path.join(results_dir, doc["bench"])
    os.makedirs(folder, exist_ok=True)
    path = file_name(doc, folder)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(dumps(doc))
    os.replace(path + ".tmp", path)
    return path


def add_arguments(ap) -> None:
    """--save: keep this run as bench/results/<bench>/<date>_<cpu-class>_<commit>.json."""
    ap.add_argument("--save", action="store_true",
                    help="save the result with its provenance as bench/results/<bench>/<date>_<cpu-class>_<commit>.json")


def output(args, bench, results, rows=None, **kw):
    """With --save, writes results (kept whole as "extra") with its rows and provenance into
    bench/results/<bench>/. Returns the path, or None without --save."""
    if not getattr(args, "save", False):
        return None
    doc = result(bench, rows_from(results) if rows is None else rows, extra=results, **kw)
    path = save(doc)
    print(f"saved {os.path.relpath(path, ROOT)}", file=sys.stderr)
    return path


# ---- rows from a benchmark's own output ----------------------------------------------------

def scalars(d, prefix="", depth=0) -> dict:
    """A flat row from a nested object: nested keys joined by '.', short lists as JSON strings,
    long lists left out (they stay in "extra")."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and depth < 2:
            out.update(scalars(v, key + ".", depth + 1))
        elif isinstance(v, (str, int, float, bool)) or v is None:
            out[key] = flat(v)
        elif isinstance(v, list) and len(v) <= 8 and all(isinstance(x, (int, float, str)) for x in v):
            out[key] = flat(v)
    return out


def rows_from(doc) -> list:
    """The measurements in a benchmark's own output, one flat row each."""
    import statistics
    if isinstance(doc, list):
        return [scalars(r) for r in doc if isinstance(r, dict)]
    if not isinstance(doc, dict):
        return []
    if isinstance(doc.get("rows"), list):
        return [scalars(r) for r in doc["rows"] if isinstance(r, dict)]
    if isinstance(doc.get("runs"), dict):  # oneshot: per pipeline, its runs and its ratio to torch
        rows = []
        for k, runs in doc["runs"].items():
            r = {"pipeline": k}
            walls = [x["wall_s"] for x in runs if isinstance(x, dict) and "wall_s" in x]
            if walls:
                r["wall_s_median"] = statistics.median(walls)
                r["runs"] = len(walls)
            r.update(scalars((doc.get("ratios") or {}).get(k, {})))
            rows.append(r)
        return rows
    agg = doc.get("aggregate", {}).get("all", {}).get("budgets") if isinstance(doc.get("aggregate"), dict) else None
    if isinstance(agg, dict):  # eval: per budget and strategy
        return [{"budget": int(b), "strategy": s, **scalars(m)} for b, per in agg.items() for s, m in per.items()]
    if isinstance(doc.get("summary"), dict) and all(isinstance(v, dict) and "methods" in v
                                                    for v in doc["summary"].values()):  # fidelity
        return [{"size": int(sz) if str(sz).isdigit() else sz, "method": m, **scalars(r)}
                for sz, per in doc["summary"].items() for m, r in per["methods"].items()]
    prec = doc.get("precisions")
    if isinstance(prec, dict) and prec and all(isinstance(m, dict) and all(isinstance(c, dict) for c in m.values())
                                               for m in prec.values()):  # video: precision -> model -> clip -> rows
        rows = []
        for p, models in prec.items():
            for model, clips in models.items():
                for clip, runs in clips.items():
                    if isinstance(runs, dict) and runs and all(isinstance(r, dict) for r in runs.values()):
                        runs = [{"setting": k, **r} for k, r in runs.items()]  # one row per setting
                    for r in (runs if isinstance(runs, list) else [runs]):
                        if isinstance(r, dict):
                            rows.append({"precision": p, "model": model, "clip": clip, **scalars(r)})
        if rows:
            return rows
    if isinstance(doc.get("throughput"), dict) and isinstance(doc["throughput"].get("rows"), list):
        return [scalars(r) for r in doc["throughput"]["rows"] if isinstance(r, dict)]
    rows = []
    for k, v in doc.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            rows += [{"set": k, **scalars(x)} for x in v]
        elif isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            rows += [{"set": k, "key": k2, **scalars(x)} for k2, x in v.items()]
    return rows


# ---- the schema ---------------------------------------------------------------------------

def validate(doc) -> list:
    """What is wrong with doc as a result (empty: nothing)."""
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    e = [f"no '{k}'" for k in REQUIRED if k not in doc]
    if e:
        return e
    if doc["schema"] != SCHEMA:
        e.append(f"schema is {doc['schema']!r}, not {SCHEMA!r}")
    if not isinstance(doc["bench"], str) or not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", doc["bench"]):
        e.append(f"bench {doc['bench']!r} is not a folder name (a-z, 0-9, _ and -)")
    if not isinstance(doc["date"], str) or not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["date"]):
        e.append(f"date {doc['date']!r} is not UTC ISO 8601 (YYYY-MM-DDTHH:MM:SSZ)")
    if not isinstance(doc["commit"], str) or not re.fullmatch(r"[0-9a-f]{40}", doc["commit"]):
        e.append(f"commit {doc['commit']!r} is not a full commit hash (40 hex digits)")
    if not isinstance(doc["dirty"], bool):
        e.append("dirty is not true or false")
    v = doc["versions"]
    if not isinstance(v, dict) or "fovea" not in v or not all(isinstance(x, str) for x in v.values()):
        e.append("versions is not an object of strings naming fovea's")
    m = doc["machine"]
    if not isinstance(m, dict) or any(k not in m for k in MACHINE_KEYS):
        e.append(f"machine lacks one of {', '.join(MACHINE_KEYS)}")
    elif not isinstance(m["cpu_class"], str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", m["cpu_class"]):
        e.append(f"machine.cpu_class {m['cpu_class']!r} is not a short lowercase name")
    if doc["threads"] is not None and not (isinstance(doc["threads"], int) and doc["threads"] > 0):
        e.append("threads is not a positive integer or null")
    la = doc["load_average"]
    if la is not None and not (isinstance(la, list) and la and all(isinstance(x, (int, float)) for x in la)):
        e.append("load_average is not a list of numbers or null")
    if not isinstance(doc["command"], str) or not doc["command"].strip():
        e.append("command is empty")
    rows = doc["rows"]
    if not isinstance(rows, list):
        e.append("rows is not a list")
    else:
        for i, r in enumerate(rows):
            if not isinstance(r, dict) or not all(isinstance(x, (str, int, float, bool)) or x is None
                                                  for x in r.values()):
                e.append(f"rows[{i}] is not a flat object of numbers, strings, booleans and nulls")
                break
    return e


def check_file(path: str) -> list:
    """What is wrong with the result file at path, its name and folder included."""
    try:
        doc = json.load(open(path, encoding="utf-8"))
    except (OSError, ValueError) as x:
        return [f"does not parse as JSON: {x}"]
    e = validate(doc)
    if e:
        return e
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if folder != doc["bench"]:
        e.append(f"is in folder '{folder}' but its bench is '{doc['bench']}'")
    want = rf"{re.escape(doc['date'][:10])}_{re.escape(doc['machine']['cpu_class'])}_{doc['commit'][:10]}(-\d+)?\.json"
    if not re.fullmatch(want, os.path.basename(path)):
        e.append(f"is not named <date>_<cpu-class>_<commit>.json: want "
                 f"{doc['date'][:10]}_{doc['machine']['cpu_class']}_{doc['commit'][:10]}.json")
    return e


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", nargs="+", metavar="FILE", required=True, help="validate these result files")
    a = ap.parse_args(argv)
    bad = 0
    for p in a.check:
        for err in check_file(p):
            print(f"{p}: {err}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
