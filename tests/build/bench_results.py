#!/usr/bin/python3
"""Benchmark results keep their provenance, and the page drawn from them is current:

- every file under bench/results/ is a JSON result in bench/provenance.py's format, named
  <bench>/<date>_<cpu-class>_<commit>.json, and its commit is in this repository's history
  (checked where git and the full history are at hand);
- docs/reference/benchmarks.md is byte for byte what bench/report.py writes.

    /usr/bin/python3 tests/build/bench_results.py --source .

A file in another format: /usr/bin/python3 bench/convert_results.py converts it.
"""
import argparse
import os
import subprocess
import sys


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
    if bad:
        print(f"bench_results: error: {bad} problem(s) above", file=sys.stderr)
        return 1
    print(f"bench_results: {files} result files valid, docs/reference/benchmarks.md current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
