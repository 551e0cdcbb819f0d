#!/usr/bin/python3
"""Brings result files that are not in bench/provenance.py's format into it.

    /usr/bin/python3 bench/convert_results.py [--dry-run] [--fix-refs] [PATH ...]

PATH (default bench/results) is searched for files that do not already validate. For each:

- .json / .jsonl become one result each; a .txt beside them with the same stem (or
  STEM_summary.txt, STEM_progress.txt) is kept in the result as its raw output; a .txt alone
  becomes a result of its own (its JSON lines are its rows) ; a folder's README.md is kept as
  the notes of every result from that folder.
- The commit is the file's own ("commit", resolved with git), else a COMMIT file in its folder,
  else the commit that added the file to git (the code measured then). A file whose commit
  cannot be told is dropped, and said so; a file not committed yet is left alone (commit it
  first: its commit is then the one that added it).
- The date is the file's own, else the date of that commit; the CPU class comes from the file's
  text, else from the folder's name (LEGACY_FOLDERS); the command is the file's own, else
  "not recorded".
- Tables (.md), plots (.png) and logs (.log) are dropped: they are drawn from the JSON.

Each new file is bench/results/<bench>/<date>_<cpu-class>_<commit>.json; the old files are
removed. With --fix-refs, paths of the old files in tracked .md and .py files are replaced by
the new ones. Then: `git add -A bench/results docs README.md` and
`/usr/bin/python3 bench/report.py` (docs/reference/benchmarks.md).
"""
import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402

ROOT = provenance.ROOT

# Folders of older results whose files do not say the machine: (cpu model, cpu class).
LEGACY_FOLDERS = {
    "zen5": ("AMD EPYC (Zen 5, family 26 model 2)", "zen5"),
    "zen4": ("AMD EPYC (Zen 4, family 25 model 17)", "zen4"),
    "zen4-quiet": ("AMD EPYC (Zen 4, family 25 model 17)", "zen4"),
    "amx": ("Intel(R) Xeon(R) Processor (AMX)", "xeon-amx"),
    "icelake": ("Intel(R) Xeon(R) Processor @ 2.60GHz (Ice Lake-SP, family 6 model 106)", "icelake"),
    "encoder-avx2": ("AMD EPYC (Zen 3, family 25 model 1)", "zen3"),
    "oneshot-avx2": ("AMD EPYC (Zen 3, family 25 model 1)", "zen3"),
    "attention-avx2": ("AMD EPYC (Zen 3, family 25 model 1)", "zen3"),
    "encoder-attention": ("AMD EPYC (AVX-512 BF16, no AMX)", "amd-avx512bf16"),
    "oneshot": ("Intel(R) Xeon(R) Processor (AMX)", "xeon-amx"),
    "eval-issue17": ("Intel(R) Xeon(R) Processor (AMX)", "xeon-amx"),
    "eval-main": ("Intel(R) Xeon(R) Processor (AMX)", "xeon-amx"),
    "eval-relevance": ("Intel(R) Xeon(R) Processor (AMX)", "xeon-amx"),
}
# Single files whose machine the pages that cite them name (docs/how-to/video.md: "AMD EPYC, 2 cores,
# AVX2, no AVX-512/AMX").
LEGACY_FILES = {
    "video/video3_after": ("AMD EPYC (AVX2, no AVX-512)", "zen3"),
    "video/video3_before": ("AMD EPYC (AVX2, no AVX-512)", "zen3"),
    "video/lead_quiet_static_away": ("AMD EPYC (AVX2, no AVX-512)", "zen3"),
}
# Flags known of each class, for results that did not record them.
CLASS_FLAGS = {
    "zen5": ["avx2", "avx512_bf16", "avx512_vnni", "avx512f", "fma"],
    "zen4": ["avx2", "avx512_bf16", "avx512_vnni", "avx512f", "fma"],
    "zen3": ["avx2", "fma"],
    "xeon-amx": ["amx_bf16", "amx_tile", "avx2", "avx512_bf16", "avx512f", "fma"],
    "icelake": ["avx2", "avx512_vnni", "avx512f", "fma"],
    "amd-avx512bf16": ["avx2", "avx512_bf16", "avx512f", "fma"],
}
DROP_EXT = (".md", ".png", ".log")
SIDE_SUFFIXES = ("_summary", "_progress")


def git(*args):
    r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def full_commit(ref):
    ref = re.sub(r"[+-].*$", "", str(ref or "").strip())
    return git("rev-parse", "--verify", "--quiet", ref + "^{commit}") if re.fullmatch(r"[0-9a-f]{7,40}", ref) else ""


def added_by(path):
    """(commit, ISO date) of the commit that added path, or ("", "")."""
    out = git("log", "--diff-filter=A", "--format=%H %aI", "-1", "--", os.path.relpath(path, ROOT))
    return tuple(out.split(" ", 1)) if out else ("", "")


def iso_utc(s):
    try:
        d = datetime.datetime.fromisoformat(str(s).replace("Z", "+00:00"))
    except ValueError:
        return ""
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    return d.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def bench_of(folder, stem):
    s, f = stem.lower(), folder.lower()
    if f.startswith("eval"):
        return "eval"
    for key, name in (("serve", "serve"), ("fidelity", "fidelity"), ("concurrent", "concurrent"),
                      ("hierarchical-real", "hierarchical")):
        if f == key:
            return name
    if f == "video" or "video" in s or s.startswith("group"):
        return "video"
    if "oneshot" in s or "openblas_timeout" in s or s.startswith("avx2_gemm") or "python_import" in s or \
            f == "oneshot":
        return "oneshot"
    if "encode_many" in s:
        return "serve"
    if "attention" in s or "part3" in s or "ranking" in s or "exp2" in s or "vrows" in s or "hierarchical" in s \
            or "bounds" in s:
        return "attention"
    if "encode" in s or "layouts" in s or "peak" in s:
        return "encode"
    return re.sub(r"[^a-z0-9_-]", "-", f)


# ---- rows ---------------------------------------------------------------------------------

scalars = provenance.scalars
rows_of = provenance.rows_from


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


# ---- conversion ---------------------------------------------------------------------------

def first(doc, *keys):
    for k in keys:
        if isinstance(doc, dict) and doc.get(k) not in (None, "", []):
            return doc[k]
    return None


def load_triple(v):
    if isinstance(v, (int, float)):
        return [float(v)]
    if isinstance(v, str):
        nums = re.findall(r"\d+(?:\.\d+)?", v)
        return [float(x) for x in nums[:3]] or None
    if isinstance(v, list) and v:
        if all(isinstance(x, (int, float)) for x in v):
            return [float(x) for x in v[:3]]
        return load_triple(v[0])
    return None


def convert(group, folder_files):
    """group: {"main": path or None, "sides": [paths]}. Returns (doc, note) or (None, why)."""
    main = group["main"]
    folder = os.path.dirname(main)
    fname = os.path.basename(folder)
    stem = re.sub(r"\.(jsonl?|txt)$", "", os.path.basename(main))
    text = open(main, encoding="utf-8", errors="replace").read()
    if main.endswith(".json"):
        try:
            doc = json.loads(text)
        except ValueError as e:
            return None, f"does not parse ({e})"
        raw_rows = None
    else:
        doc = None
        raw_rows = json_lines(text)
    meta = doc if doc is not None else (raw_rows[0] if raw_rows and isinstance(raw_rows[0], dict) else None)
    sides = {os.path.relpath(p, ROOT): open(p, encoding="utf-8", errors="replace").read() for p in group["sides"]}
    if main.endswith(".txt"):
        sides = {os.path.relpath(main, ROOT): text, **sides}
    how = {}
    # commit
    c = full_commit(first(meta, "commit", "git_commit", "rev")) if meta is not None else ""
    if c:
        how["commit"] = "the file's own"
    elif "COMMIT" in folder_files:
        c = full_commit(open(os.path.join(folder, "COMMIT")).read().split()[0])
        how["commit"] = "the COMMIT file of its folder" if c else ""
    added, added_date = added_by(main)
    if not c and added:
        c = added
        how["commit"] = "the commit that added the file"
    if not c:
        tracked = git("ls-files", "--error-unmatch", os.path.relpath(main, ROOT))
        if not tracked:
            return None, "KEEP: not committed yet; commit it, then convert it (its commit is the one that adds it)"
        return None, "its commit cannot be told (not in git history)"
    # date
    date = iso_utc(first(meta, "date")) if meta is not None else ""
    how["date"] = "the file's own" if date else "the date of the commit that added the file"
    if not date:
        date = iso_utc(added_date or git("log", "-1", "--format=%aI", c))
    # machine
    lscpu = open(os.path.join(folder, "lscpu.txt")).read() if "lscpu.txt" in folder_files else ""
    mach = first(meta, "machine", "cpu", "lscpu")
    text_all = " ".join([json.dumps(mach or ""), lscpu] + list(sides.values()))
    model, klass = None, None
    described = mach if isinstance(mach, str) else (mach.get("model_name") if isinstance(mach, dict) else None)
    fam = re.search(r"(?:CPU family:\s*|family\W+)(\d+)", text_all)
    mod = re.search(r"(?:\nModel:\s*|model\W+)(\d+)", text_all)
    if klass is None and fam and mod:
        vendor = "AuthenticAMD" if re.search(r"AMD|EPYC", text_all) else ("GenuineIntel" if "Intel" in text_all else "")
        flags = mach.get("flags", []) if isinstance(mach, dict) else re.findall(r"\b(amx_tile|avx512_bf16|avx512f|avx2)\b", text_all)
        klass = provenance.cpu_class(vendor, int(fam.group(1)), int(mod.group(1)), flags)
        how["machine"] = "the family and model the file records"
    if klass is None and (f"{fname}/{stem}" in LEGACY_FILES or fname in LEGACY_FOLDERS):
        model, klass = LEGACY_FILES.get(f"{fname}/{stem}", LEGACY_FOLDERS.get(fname))
        how["machine"] = f"the folder's name ({fname}), as the pages citing it say"
    if klass is None:
        if re.search(r"family 26", text_all):
            klass = "zen5"
        elif re.search(r"family 25 model 17", text_all):
            klass = "zen4"
        elif "Xeon" in text_all and "2.60GHz" in text_all:
            klass = "icelake"
        elif "Xeon" in text_all:
            klass = "xeon-amx"
        elif "EPYC" in text_all or "AMD" in text_all:
            klass = "amd-unknown"
        else:
            klass = "unknown"
        how["machine"] = "the file's text"
    machine = {"cpu_model": described or model or "not recorded", "cpu_class": klass,
               "flags": CLASS_FLAGS.get(klass, [])}
    # threads, load, command, versions
    th = first(meta, "threads")
    threads = th if isinstance(th, int) and th > 0 else None
    la = load_triple(first(meta, "load_average", "load_at_start", "load_start", "loadavg", "load", "load1"))
    if la is None:
        m = re.search(r"load average:? ([0-9.]+)[ ,]+([0-9.]+)[ ,]+([0-9.]+)", " ".join(sides.values()))
        la = [float(x) for x in m.groups()] if m else None
    command = first(meta, "command")
    command = str(command) if command else f"not recorded (converted from {os.path.relpath(main, ROOT)})"
    versions = {"fovea": fovea_version_at(c)}
    m = re.search(r"\btorch (\d+\.\d+[\w.+-]*)", text_all)
    if m:
        versions["torch"] = m.group(1)
    if isinstance(first(doc, "torch_version"), str):
        versions["torch"] = doc["torch_version"]
    # rows, extra
    rows = rows_of(doc) if doc is not None else [scalars(r) for r in raw_rows if isinstance(r, dict)]
    rows = [{k: provenance.flat(v) for k, v in r.items()} for r in rows]
    extra = {"label": stem}
    if doc is not None:
        extra["original"] = doc
    elif main.endswith(".jsonl"):
        extra["original_lines"] = raw_rows
    if sides:
        extra["raw_output"] = sides
    if lscpu:
        extra["lscpu"] = lscpu
    if "README.md" in folder_files:
        extra["notes"] = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    own = str(first(meta, "commit", "git_commit", "rev") or "") if meta is not None else ""
    dirty = how.get("commit") == "the file's own" and bool(re.search(r"[+-](changes|dirty)", own))
    out = {"schema": provenance.SCHEMA, "bench": bench_of(fname, stem), "date": date, "commit": c, "dirty": dirty,
           "versions": versions, "machine": machine, "threads": threads, "load_average": la, "command": command,
           "rows": rows, "extra": extra,
           "provenance": {"converted_from": [os.path.relpath(p, ROOT) for p in [main] + group["sides"]], **how}}
    return recover(out), ""


_versions = {}


def fovea_version_at(c):
    if c not in _versions:
        m = re.search(r"project\(fovea VERSION ([0-9.]+)", git("show", f"{c}:CMakeLists.txt"))
        _versions[c] = m.group(1) if m else "unknown"
    return _versions[c]


# ---- recovering what converted results did not record -------------------------------------

# Commands that the pages citing a converted file stated beside it (docs/ as they stood at the
# commit before the conversion, 9fb71ee^), keyed by the old path the result came from.
STATED_COMMANDS = {
    "bench/results/encoder-attention/avx2_bounds_ranking_quiet.jsonl": (
        "build/bench/bench_encode --threads 2 --qk-tie --qk-scale 10 --image data/astronaut.jpg --attention "
        "exact,hierarchical:8:64,hierarchical:12:64,hierarchical:16:64,exact --compare-exact",
        "docs/encoder.md at 9fb71ee^ (the --n list and --precision are not stated there)"),
    "bench/results/attention-avx2/attention_kernel_ab_2026-12-03.txt": (
        "/usr/bin/python3 bench/attention_bench.py --ns 1024,4096 --modes hierarchical:8:64",
        "docs/encoder.md at 9fb71ee^, beside the file's path (run once per build, alternated)"),
    "bench/results/zen4-quiet/part3_block_sweep.txt": (
        "build/bench/bench_encode --model random:vit-b16 --n 1024,4096 --precision bf16 --reps 3 --threads 2 "
        "--qk-tie --qk-scale 10 --image IMG --attention "
        "exact,hierarchical:8:64,hierarchical:4:64,hierarchical:3:128,hierarchical:4:128 --compare-exact",
        "docs/encoder.md at 9fb71ee^, beside the file's path (IMG: data/astronaut.jpg, then skimage's chelsea.png)"),
    "bench/results/amx/encode_bench_after.json": (
        "/usr/bin/python3 bench/encode_bench.py --threads 2 --reps 5",
        "docs/benchmarks.md at 9fb71ee^, beside the file's raw output"),
    "bench/results/encoder-avx2/encode_bench_2026-12-02_273.json": (
        "/usr/bin/python3 bench/encode_bench.py --threads 2 --reps 3 --ns 273 --no-e2e",
        "docs/encoder.md at 9fb71ee^, beside the file's raw output"),
    "bench/results/zen4-quiet/encode_bench.txt": (
        "/usr/bin/python3 bench/encode_bench.py --threads 2 --reps 3",
        "docs/benchmarks.md at 9fb71ee^, beside the file's path"),
    "bench/results/amx/oneshot_after.json": (
        "/usr/bin/python3 bench/oneshot_bench.py --rounds 5 --bf16-file --baseline-build /tmp/noamx",
        "docs/benchmarks.md and docs/encoder.md at 9fb71ee^ (/tmp/noamx/fovea: the same build run with FOVEA_AMX=0)"),
    "bench/results/icelake/oneshot_2026-12-03.json": (
        "/usr/bin/python3 bench/oneshot_bench.py --rounds 5 --precisions fp32 --bf16-file",
        "docs/benchmarks.md at 9fb71ee^, beside the run's numbers"),
    "bench/results/zen4-quiet/oneshot.txt": (
        "/usr/bin/python3 bench/oneshot_bench.py --rounds 5 --precisions bf16,fp32 --bf16-file",
        "docs/benchmarks.md at 9fb71ee^, beside the file's path"),
    "bench/results/zen5/video_bench_s22.json": (
        "/usr/bin/python3 bench/video_bench.py --json bench/results/zen5/video_bench_s22.json",
        "docs/video.md at 9fb71ee^, beside the file's path"),
    "bench/results/serve/encode_many.txt": (
        "/usr/bin/python3 bench/encode_many_bench.py",
        "docs/serve.md at 9fb71ee^, beside the file's path (its options are not stated)"),
}

# Benchmarks whose scripts' options can be read back from the values a converted file records.
SCRIPTS = {"oneshot": "bench/oneshot_bench.py", "encode": "bench/encode_bench.py",
           "attention": "bench/attention_bench.py", "video": "bench/video_bench.py"}


def options_at(script, commit):
    """{option: (dest, default or None, is_flag)} of script's argparse at commit."""
    key = (script, commit)
    if key not in _options:
        opts = {}
        for m in re.finditer(r'add_argument\(\s*"(--[\w-]+)"([^\n]*)', git("show", f"{commit}:{script}")):
            rest = m.group(2)
            d = re.search(r'default=("[^"]*"|[\d.]+)', rest)
            opts[m.group(1)] = (m.group(1)[2:].replace("-", "_"), d.group(1).strip('"') if d else None,
                                'action="store_true"' in rest)
        _options[key] = opts
    return _options[key]


_options = {}


def _uniq(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def reconstructed(doc):
    """(command, what is unknown) from the values the file records and its script's options at
    its commit, or None. Only options whose value the file records are written."""
    script = SCRIPTS.get(doc["bench"])
    orig = (doc.get("extra") or {}).get("original")
    if not script or not isinstance(orig, dict):
        return None
    opts = options_at(script, doc["commit"])
    if not opts:
        return None
    known, unknown = [], []
    derived = {}
    if doc["bench"] == "encode" and isinstance(orig.get("rows"), list):
        derived["ns"] = ",".join(str(r["n"]) for r in orig["rows"] if isinstance(r, dict) and "n" in r)
        if "e2e" not in orig:
            derived["no_e2e"] = True
    if doc["bench"] == "attention":
        rows = [r for k in ("peaked", "random_init") for r in (orig.get(k) or []) if isinstance(r, dict)]
        if rows:
            derived["ns"] = ",".join(str(n) for n in _uniq([r.get("n") for r in rows]) if n is not None)
            derived["modes"] = ",".join(m for m in _uniq([r.get("attention") for r in rows]) if m and m != "exact")
        if "fixtures" not in orig:
            derived["no_fixtures"] = True
    if doc["bench"] == "oneshot" and isinstance(orig.get("runs"), dict):
        names = list(orig["runs"])
        derived["precisions"] = ",".join(_uniq(m.group(1) for n in names for m in [re.fullmatch(r"fovea (\w+)", n)] if m))
        derived["bf16_file"] = any("BF16 file" in n for n in names)
        derived["no_torch"] = not any(n.startswith("torch") for n in names)
        derived["no_steady"] = "steady" not in orig
        if isinstance(orig.get("rounds"), list) and orig["rounds"]:
            derived["rounds"] = len(orig["rounds"])
        if any(n.startswith("baseline") for n in names):
            derived["baseline_build"] = None  # ran, path not recorded
        envs = _uniq(m.group(1) for n in names for m in [re.fullmatch(r"fovea \w+(?: \(BF16 file\))? (\w+=\S+)", n)] if m)
        if envs:
            derived["compare_env"] = envs
    if doc["bench"] == "video":
        if isinstance(orig.get("precisions"), list):
            derived["precision"] = ",".join(orig["precisions"])
        if isinstance(orig.get("clips"), dict):
            derived["only"] = ",".join(orig["clips"])
        if "group_bench" not in orig:
            derived["no_group_bench"] = True
        if "torch" not in orig and not any("torch" in k for k in json.dumps(orig.get("clips", {}))[:0]):
            pass
    for opt, (dest, default, flag) in opts.items():
        if opt in ("--json", "--build-dir", "--save"):
            continue
        if dest in derived:
            v = derived[dest]
        elif dest in orig and isinstance(orig[dest], (str, int, float)) and not isinstance(orig[dest], bool):
            v = orig[dest]
        else:
            if not flag:
                unknown.append(opt)
            continue
        if isinstance(v, list):
            known += [f"{opt} {shlex.quote(str(x))}" for x in v]
        elif flag:
            if v:
                known.append(opt)
        elif v is None:
            known.append(f"{opt} '<not recorded>'")
            unknown.append(opt)
        elif v != "":
            known.append(f"{opt} {shlex.quote(str(v))}")
    cmd = " ".join(["/usr/bin/python3", script] + known)
    return cmd, unknown


def stated_in_text(texts):
    """A command a result's own raw output or notes state ("command: ...")."""
    for t in texts:
        for line in t.splitlines():
            m = re.match(r"\s*#?\s*command:\s*(.+?)\s*$", line)
            if m and not m.group(1).lower().startswith("in the file"):
                return m.group(1).strip("`")
    return None


def stated_in_header(texts):
    """A command named in a raw output's header: a comment line ("# bench_encode --n ...") or its
    first lines, continued over a trailing backslash."""
    pat = re.compile(r"((?:[A-Z_]+=\S+ )*(?:build/bench/)?bench_\w+ --[^;()\n]*|(?:/usr/bin/python3 )?bench/[\w/]+\.py\b[^;()\n]*)")
    for t in texts:
        lines = t.splitlines()
        for i, line in enumerate(lines):
            if not (line.lstrip().startswith("#") or i < 2):
                continue
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].lstrip("# ").strip()
            m = pat.search(line)
            if m:
                return re.sub(r"\s+", " ", m.group(1)).strip(" ,.:`")
    return None


def stated_in_notes(notes, sources):
    """The command the notes' table gives for one of sources (| file | what | command |)."""
    stems = {re.sub(r"\.(jsonl?|txt)$", "", os.path.basename(s)) for s in sources}
    for line in notes.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or "`" not in cells[-1]:
            continue
        names = {}
        for part in re.split(r"\s+", cells[0].replace("`", "")):
            m = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", part)
            for x in (m.group(2).split(",") if m else [None]):
                names[re.sub(r"\.(jsonl?|txt)$", "", m.group(1) + x + m.group(3) if m else part)] = x
        hit = [names[s] for s in stems if s in names]
        if hit:
            cmd = re.search(r"`([^`]+)`", cells[-1]).group(1)
            return re.sub(r"\{[^}]*\}", hit[0], cmd) if hit[0] else cmd
    return None


def recover(doc):
    """Fills in a converted result's command and machine where its own text, its folder's notes,
    the pages that cited it or its script's options tell them; says how in doc["provenance"].
    Never guesses: what cannot be told stays "not recorded"."""
    how = doc.setdefault("provenance", {})
    extra = doc.get("extra") or {}
    sources = how.get("converted_from", [])
    texts = list((extra.get("raw_output") or {}).values())
    notes = extra.get("notes") or ""
    if how.get("command", "").startswith("reconstructed"):  # made by this function: made again
        doc["command"] = "not recorded (converted from " + (sources[0] if sources else "an older file") + ")"
    if doc["command"].startswith("not recorded"):
        found = None
        c = stated_in_text(texts)
        if c:
            found = (c, "the file's raw output")
        if not found:
            c = stated_in_header(texts)
            if c:
                found = (c, "a header line of the file's raw output")
        if not found and notes:
            c = stated_in_notes(notes, sources)
            if c:
                found = (c, "its folder's README, which listed each file's command")
        if not found:
            for s in sources:
                if s in STATED_COMMANDS:
                    found = (STATED_COMMANDS[s][0], STATED_COMMANDS[s][1])
                    break
        if not found:
            r = reconstructed(doc)
            if r:
                cmd, unknown = r
                found = (cmd, f"reconstructed from the values the file records and {SCRIPTS[doc['bench']]}'s options "
                              f"at {doc['commit'][:10]}" + (f"; not recorded: {', '.join(unknown)}" if unknown else ""))
        if found:
            doc["command"] = found[0]
            how["command"] = found[1]
        else:
            how["command"] = "not recorded, and neither the file, its notes nor the pages that cited it state it"
    orig = extra.get("original")
    if orig is not None and (not doc["rows"] or all(set(r) <= {"set", "key"} for r in doc["rows"])):
        rows = [{k: provenance.flat(v) for k, v in r.items()} for r in provenance.rows_from(orig)]
        if rows and any(set(r) - {"set", "key"} for r in rows):
            doc["rows"] = rows
            how["rows"] = "read again from the file's original output"
    m = doc["machine"]
    if m["cpu_class"] in ("unknown", "amd-unknown") or not m.get("flags") or m.get("cpu_model") == "not recorded":
        blob = " ".join(texts + [notes, extra.get("lscpu") or "", json.dumps(extra.get("original") or "")])
        flat_blob = re.sub(r"\s+", " ", blob)
        fam = re.search(r"family:?\s*(\d+),?\s*model:?\s*(\d+)", flat_blob, re.I)
        amd = re.search(r"AMD|EPYC", flat_blob)
        intel = "Intel" in flat_blob
        flags = set(m.get("flags") or [])
        if re.search(r"avx512_?bf16|bf16 kernels: True|avx512_core_bf16", flat_blob):
            flags |= {"avx512_bf16", "avx512f", "avx2"}
        if re.search(r"\bavx512_vnni\b|vnni512|avx512_core_vnni", flat_blob):
            flags |= {"avx512_vnni", "avx512f", "avx2"}
        vendor = "AuthenticAMD" if amd else ("GenuineIntel" if intel else "")
        if fam and vendor:
            klass = provenance.cpu_class(vendor, int(fam.group(1)), int(fam.group(2)), flags)
            src = "the family and model its notes or output record"
        elif vendor and flags:
            klass = provenance.cpu_class(vendor, 0, 0, flags)
            src = "the vendor and the kernels its output names"
        else:
            klass, src = m["cpu_class"], None
        if src and klass not in ("unknown", "amd-unknown"):
            if m["cpu_class"] in ("unknown", "amd-unknown") or not m.get("flags"):
                m["cpu_class"] = klass
                m["flags"] = sorted(flags | set(CLASS_FLAGS.get(klass, [])))
                how["machine"] = src
        if m.get("cpu_model") in (None, "", "not recorded"):
            mm = re.search(r"(?:model_name|Model name|\"cpu\"|lscpu`?|machine)\W+(AMD EPYC|Intel\(R\) Xeon\(R\)[^\",;\n]*)", blob)
            if mm:
                m["cpu_model"] = mm.group(1).strip()
    if not m.get("flags"):
        how["flags"] = "not recorded"
    return doc


def groups_in(folder, names):
    """Splits a folder's files into results (a main file and its side files) and files to drop."""
    mains = [n for n in names if n.endswith((".json", ".jsonl"))]
    stems = {re.sub(r"\.jsonl?$", "", n): n for n in mains}
    groups = {n: {"main": os.path.join(folder, n), "sides": []} for n in mains}
    drop = []
    for n in names:
        if n in groups or n == "COMMIT":
            continue
        if n in ("README.md", "lscpu.txt"):
            continue
        if n.endswith(DROP_EXT):
            drop.append(n)
            continue
        if n.endswith(".txt"):
            s = n[:-4]
            for suf in SIDE_SUFFIXES:
                if s.endswith(suf) and (s[: -len(suf)] in stems or s[: -len(suf)] + ".txt" in names):
                    s = s[: -len(suf)]
            if s in stems:
                groups[stems[s]]["sides"].append(os.path.join(folder, n))
            elif s + ".txt" != n and s + ".txt" in names:
                groups.setdefault(s + ".txt", {"main": os.path.join(folder, s + ".txt"), "sides": []})
                groups[s + ".txt"]["sides"].append(os.path.join(folder, n))
            else:
                groups.setdefault(n, {"main": os.path.join(folder, n), "sides": []})
            continue
        drop.append(n)
    return list(groups.values()), drop


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=[provenance.RESULTS])
    ap.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    ap.add_argument("--fix-refs", action="store_true", help="rewrite references to the old paths in tracked .md/.py files")
    a = ap.parse_args(argv)
    moved, dropped = {}, []
    for top in a.paths:
        for folder, dirs, names in sorted(os.walk(os.path.abspath(top))):
            todo = []
            for n in sorted(names):
                p = os.path.join(folder, n)
                if n.endswith(".json") and not provenance.check_file(p):
                    recheck(p, moved, a.dry_run)  # already a result: fill in what can now be told
                    continue
                todo.append(n)
            if not todo:
                continue
            groups, drop = groups_in(folder, todo)
            for g in groups:
                doc, why = convert(g, names)
                olds = [g["main"]] + g["sides"]
                if doc is None:
                    dropped += [(o, why) for o in olds]
                    continue
                dest = provenance.file_name(doc, os.path.join(provenance.RESULTS, doc["bench"]))
                while dest in moved.values():
                    base = re.sub(r"(-\d+)?\.json$", "", dest)
                    n = int(re.search(r"-(\d+)\.json$", dest).group(1)) + 1 if re.search(r"-\d+\.json$", dest) else 2
                    dest = f"{base}-{n}.json"
                for o in olds:
                    moved[o] = dest
                errs = provenance.validate(doc)
                if errs:
                    raise SystemExit(f"convert_results: error: {g['main']}: {'; '.join(errs)}")
                if not a.dry_run:
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    with open(dest, "w", encoding="utf-8") as f:
                        f.write(provenance.dumps(doc))
            for n in drop + [x for x in ("COMMIT", "README.md", "lscpu.txt") if x in todo]:
                dropped.append((os.path.join(folder, n), "a table, plot, log or note drawn from or kept in the JSON"))
    for old, new in sorted(moved.items()):
        print(f"{os.path.relpath(old, ROOT)} -> {os.path.relpath(new, ROOT)}")
    for old, why in dropped:
        if why.startswith("KEEP: "):
            print(f"{os.path.relpath(old, ROOT)} left alone: {why[6:]}")
        else:
            print(f"{os.path.relpath(old, ROOT)} dropped: {why}")
    if not a.dry_run:
        kept = {o for o, why in dropped if why.startswith("KEEP")}
        for old in (set(moved) | {o for o, _ in dropped}) - kept:
            if os.path.exists(old) and old not in moved.values():
                os.remove(old)
        for top in a.paths:
            for folder, dirs, names in sorted(os.walk(os.path.abspath(top), topdown=False)):
                if not os.listdir(folder) and folder != provenance.RESULTS:
                    os.rmdir(folder)
        if a.fix_refs:
            fix_refs({os.path.relpath(o, ROOT): os.path.relpath(n, ROOT) for o, n in moved.items()},
                     [os.path.relpath(o, ROOT) for o, _ in dropped])
    return 0


def recheck(path, moved, dry_run):
    """A converted result whose command or machine was not recorded: recover() what can be told;
    the file is rewritten, and renamed when its CPU class changed."""
    doc = json.load(open(path, encoding="utf-8"))
    if "provenance" not in doc:
        return
    before = provenance.dumps(doc)
    doc = recover(doc)
    if provenance.dumps(doc) == before or provenance.validate(doc):
        return
    dest = path
    if doc["machine"]["cpu_class"] not in os.path.basename(path).split("_"):
        # the same name with the new class (its -N kept), else the next free one
        parts = os.path.basename(path).split("_")
        dest = os.path.join(os.path.dirname(path), "_".join([parts[0], doc["machine"]["cpu_class"]] + parts[2:]))
        if os.path.exists(dest) or dest in moved.values():
            dest = provenance.file_name(doc, os.path.dirname(path))
        while dest in moved.values():
            base = re.sub(r"(-\d+)?\.json$", "", dest)
            n = int(re.search(r"-(\d+)\.json$", dest).group(1)) + 1 if re.search(r"-\d+\.json$", dest) else 2
            dest = f"{base}-{n}.json"
        moved[path] = dest
    print(f"{os.path.relpath(path, ROOT)}: {'command ' + repr(doc['command'][:60]) + ', ' if doc['command'] else ''}"
          f"machine {doc['machine']['cpu_class']}" + (f" -> {os.path.relpath(dest, ROOT)}" if dest != path else ""))
    if dry_run:
        return
    with open(dest + ".tmp", "w", encoding="utf-8") as f:
        f.write(provenance.dumps(doc))
    os.replace(dest + ".tmp", dest)
    if dest != path:
        os.remove(path)


def fix_refs(moved, dropped):
    """Old result paths in tracked .md and .py files become the new ones; a folder of old
    results becomes the folder its files went to (bench/results/ when they went to several)."""
    folders = {}
    for o, n in moved.items():
        folders.setdefault(os.path.dirname(o), set()).add(os.path.dirname(n))
    for o in dropped:
        folders.setdefault(os.path.dirname(o), set())
    files = [f for f in git("ls-files", "*.md", "*.py").splitlines() if not f.startswith("bench/results/")]
    for f in files:
        p = os.path.join(ROOT, f)
        s = open(p, encoding="utf-8").read()
        t = s
        for o in sorted(moved, key=len, reverse=True):
            t = t.replace(o, moved[o])
        for o, new in sorted(folders.items(), key=lambda kv: -len(kv[0])):
            if os.path.isdir(os.path.join(ROOT, o)) and os.listdir(os.path.join(ROOT, o)):
                continue
            dest = next(iter(new)) if len(new) == 1 else "bench/results"
            t = re.sub(re.escape(o) + r"(/(?![\w*.-]*\.(?:json|jsonl|txt|md|png|log)\b)|(?![\w/.-]))",
                       lambda m: dest + m.group(1), t)
        if t != s:
            open(p, "w", encoding="utf-8").write(t)
            print(f"references updated: {f}")


if __name__ == "__main__":
    sys.exit(main())
