#!/usr/bin/python3
"""Benchmark results keep their provenance, and the page drawn from them is current:

- every file under bench/results/ is a JSON result in bench/provenance.py's format, named
  <bench>/<date>_<cpu-class>_<commit>.json, and its commit is in this repository's history
  (checked where git and the full history are at hand);
- docs/reference/benchmarks.md is byte for byte what bench/report.py writes;
- the tools themselves (provenance.py, report.py, convert_results.py) on synthetic results: a new
  benchmark is saved, named and reported with its machine and command, and a converted result's
  command and machine are recovered only from what states them.

    /usr/bin/python3 tests/build/bench_results.py --source .

A file in another format: /usr/bin/python3 bench/convert_results.py converts it.
"""
import argparse
import os
import subprocess
import sys


def tools_check(src):
    """The tools that write and read results, on synthetic results in a temporary folder: a new
    result validates and is named by its date, class and commit; report.py renders a benchmark it
    has no description of, with its machine and command in the footnote; convert_results.py's
    recovery takes a command only from what states it, and never makes one up. Returns the
    problems found."""
    import copy
    import tempfile
    sys.path.insert(0, os.path.join(src, "bench"))
    import convert_results
    import provenance
    import report
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        doc = provenance.result("new-bench", [{"pipeline": "fovea", "ms": 1.5, "vs_x": 2.0}], threads=2,
                                command="/usr/bin/python3 bench/new_bench.py --save",
                                date="2030-01-02T03:04:05Z")
        doc["commit"] = "0123456789" * 4  # the schema needs a full hash, whatever the checkout
        errors = provenance.validate(doc)
        if errors:
            bad.append(f"a new result does not validate: {errors}")
        p1, p2 = provenance.save(doc, tmp), provenance.save(doc, tmp)
        want = f"2030-01-02_{doc['machine']['cpu_class']}_0123456789"
        if os.path.basename(p1) != want + ".json" or os.path.basename(p2) != want + "-2.json":
            bad.append(f"results are named {os.path.basename(p1)}, {os.path.basename(p2)}, not {want}.json, -2.json")
        if provenance.check_file(p1):
            bad.append(f"a saved result fails its own check: {provenance.check_file(p1)}")
        old = provenance.RESULTS
        provenance.RESULTS = tmp
        try:
            page = report.render()
        finally:
            provenance.RESULTS = old
        if "## new-bench" not in page or "`/usr/bin/python3 bench/new_bench.py --save`" not in page \
                or doc["machine"]["cpu_class"] not in page:
            bad.append("report.py does not show a benchmark it has no description of, with its machine and command")
    conv = {"schema": provenance.SCHEMA, "bench": "encode", "date": "2030-01-02T03:04:05Z", "commit": "0" * 40,
            "dirty": False, "versions": {"fovea": "0"}, "machine": {"cpu_model": "not recorded", "cpu_class": "unknown",
                                                                    "flags": []},
            "threads": None, "load_average": None, "command": "not recorded (converted from x.txt)", "rows": [],
            "extra": {"label": "x", "raw_output": {"x.txt": "N=273 took 12 ms\n"}},
            "provenance": {"converted_from": ["bench/results/old/x.txt"]}}
    r = convert_results.recover(copy.deepcopy(conv))
    if not r["command"].startswith("not recorded") or r["machine"]["cpu_class"] != "unknown":
        bad.append(f"convert_results.recover made up a command or machine: {r['command']!r}, {r['machine']}")
    stated = copy.deepcopy(conv)
    stated["extra"]["raw_output"]["x.txt"] = "command: build/bench/bench_encode --n 273\nN=273 took 12 ms\n"
    stated["extra"]["notes"] = "Machine: lscpu: AMD EPYC, family 25 model\n17 (Zen 4), avx512_bf16\n"
    r = convert_results.recover(stated)
    if r["command"] != "build/bench/bench_encode --n 273" or r["machine"]["cpu_class"] != "zen4":
        bad.append(f"convert_results.recover missed a stated command or machine: {r['command']!r}, {r['machine']}")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    src = os.path.abspath(a.source)
    sys.path.insert(0, os.path.join(src, "bench"))
    import provenance
    import report

    def git(*args):
        try:
            return subprocess.run(["git", "-C", src, *args], capture_output=True, text=True)
        except OSError:
            return None

    r = git("rev-parse", "--is-shallow-repository")
    check_commits = r is not None and r.returncode == 0 and r.stdout.strip() == "false"
    bad = 0
    files = 0
    results = os.path.join(src, "bench", "results")
    for folder, _, names in sorted(os.walk(results)):
        for n in sorted(names):
            path = os.path.join(folder, n)
            rel = os.path.relpath(path, src)
            files += 1
            errors = provenance.check_file(path) if n.endswith(".json") else [
                "is not a .json result (bench/convert_results.py converts older files)"]
            if not errors and check_commits:
                import json
                c = json.load(open(path, encoding="utf-8"))["commit"]
                if git("cat-file", "-e", c + "^{commit}").returncode != 0:
                    errors.append(f"names commit {c}, which is not in this repository's history")
            for e in errors:
                print(f"{rel}: {e}")
                bad += 1
    if report.main(["--check"]) != 0:
        bad += 1
    for e in tools_check(src):
        print(f"bench tools: {e}")
        bad += 1
    if bad:
        print(f"bench_results: error: {bad} problem(s) above", file=sys.stderr)
        return 1
    print(f"bench_results: {files} result files valid, docs/reference/benchmarks.md current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
