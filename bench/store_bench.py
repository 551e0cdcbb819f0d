#!/usr/bin/python3
"""The paged token store, measured by `fovea store-bench`, kept with its provenance.

    /usr/bin/python3 bench/store_bench.py [--cli build/fovea] [--save] [-- STORE-BENCH OPTIONS...]

Runs `fovea store-bench --json` (an eight-image memory table of 1024 dense tokens each, the
pages it needs against dense storage, bind modes against one page at a time, the gather against
memcpy of the same bytes, compressed pages per codec) and prints its summary. Options after `--`
go to store-bench (e.g. `-- --backend host --codecs fp32,fp16,int8`). --save keeps the run as
bench/results/store/<date>_<cpu-class>_<commit>.json (bench/provenance.py): every list in the
output becomes rows labelled by its section ("seed_table", "frame_speedup", "gather",
"compressed_seed_table" ...). The memory figures (pages, saved fraction, bytes per codec) are
counts, the same on every machine; the times are this machine's.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import provenance  # noqa: E402  bench/provenance.py: the result format and --save

ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "fovea"))
    provenance.add_arguments(ap)
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="options for fovea store-bench, after --")
    a = ap.parse_args()
    extra = [x for x in a.rest if x != "--"]
    if not os.access(a.cli, os.X_OK):
        sys.exit(f"store_bench: error: {a.cli} is not an executable fovea CLI (build it, or pass --cli)")
    r = subprocess.run([a.cli, "store-bench", "--json", *extra], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"store_bench: error: fovea store-bench failed ({r.returncode}): {r.stderr.strip()}")
    out = json.loads(r.stdout)
    for t in out.get("seed_table", []):
        dense, res = t.get("dense_bytes"), t.get("resident_bytes")
        if dense and res is not None:
            print(f"{t.get('backend')}: seed table resident {res / 1024:.0f} KiB against dense {dense / 1024:.0f} KiB: "
                  f"{100 * (1 - res / dense):.1f} % saved")
    for t in out.get("compressed_seed_table", []):
        print(f"{t.get('backend')}: codec {t.get('codec')}: {t.get('pages')} pages, "
              f"{t.get('resident_vs_dense_fp32', 0):.3f} of dense fp32")
    for t in out.get("frame_speedup", []):
        print(f"{t.get('backend')}: a frame's page binds merged against one at a time: {t.get('merged_vs_single', 0):.1f}x")
    for t in out.get("gather", []):
        print(f"{t.get('backend')}: gather {t.get('gather_vs_memcpy', 0):.2f}x memcpy's time")
    provenance.output(a, "store", out, threads=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
