#!/usr/bin/python3
"""Quick check of fovea with no query against the uniform resize, on every snippet of every scene.

    /usr/bin/python3 bench/eval/bottomup.py --cli build/fovea --work /tmp/bu --budgets 64,273 \
        [--only s000,s002] [--seed 6] [--scenes 48] [--fovea-args '--fine-bias 1'] [--tag NAME] [--save]

A query-free allocation does not know which snippet `eval.py` will ask about, so every snippet
of a scene is a fair sample of "text the model can read": this reads all of them (three per
scene instead of the queried one), with the OCR and PSNR of `eval.py`. Uniform runs are cached
in WORK (they do not depend on --fovea-args). Prints, per budget: mean OCR on snippets under
20 px and on all snippets, bottom-up minus uniform; whole-image PSNR, bottom-up minus uniform
(mean over scenes, and how many scenes are below). Use a second --seed as held-out scenes.
--save keeps the report, one row per budget, as bench/results/eval-bottomup/<date>_<cpu-class>_<commit>.json
(bench/provenance.py).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import eval as ev  # noqa: E402
import scenes as scene_gen  # noqa: E402


def run_one(job):
    scene, cli, budget, strategy, extra, cache, read_text = job
    if cache and os.path.exists(cache):
        with open(cache) as f:
            return json.load(f)
    tmpdir = tempfile.mkdtemp(prefix=f"fovea-bu-{scene['id']}-")
    try:
        seen = os.path.join(tmpdir, "seen.png")
        cmd = [cli, "tokenize", scene["image"], "--budget", str(budget), "-o", os.path.join(tmpdir, "t.safetensors"),
               "--seen", seen, "--json", "--threads", "1"]
        cmd += ["--uniform"] if strategy == "uniform" else extra
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
        orig = ev.read_rgb(scene["image"])
        rgb = ev.read_rgb(seen)
        acc = []
        for sn in scene["snippets"] if read_text else []:
            b = sn["box"]
            text = ev.ocr(rgb, b, max(4, int(round(0.3 * (b[3] - b[1])))), tmpdir)
            acc.append(ev.char_accuracy(text, sn["text"]))
        out = {"id": scene["id"], "budget": budget, "strategy": strategy, "psnr_image": ev.psnr(orig, rgb),
               "ocr": acc, "heights": [sn["height_at_1024"] for sn in scene["snippets"]],
               "tokens": json.loads(r.stdout)["tokens"]}
        if cache:
            with open(cache + ".tmp", "w") as f:
                json.dump(out, f)
            os.replace(cache + ".tmp", cache)
        return out
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--work", required=True, help="scenes and cached uniform runs go here")
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--scenes", type=int, default=48)
    ap.add_argument("--only", default="", help="comma-separated scene ids (default: all)")
    ap.add_argument("--budgets", default="64,273")
    ap.add_argument("--fovea-args", default="")
    ap.add_argument("--ocr-budgets", default="", help="read the text only at these budgets (default: all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tag", default="", help="also write WORK/result-TAG.json")
    ap.add_argument("--save", action="store_true",
                    help="save the report with its commit and machine as "
                         "bench/results/eval-bottomup/<date>_<cpu-class>_<commit>.json (bench/provenance.py)")
    a = ap.parse_args()
    cli = os.path.abspath(a.cli)
    sdir = os.path.join(a.work, f"scenes-{a.seed}-{a.scenes}")
    index = os.path.join(sdir, "scenes.json")
    if os.path.exists(index):
        with open(index) as f:
            scenes = json.load(f)
    else:
        scenes = scene_gen.generate(sdir, a.scenes, a.seed)
    if a.only:
        keep = set(a.only.split(","))
        scenes = [s for s in scenes if s["id"] in keep]
    budgets = [int(b) for b in a.budgets.split(",")]
    cdir = os.path.join(a.work, f"uniform-{a.seed}")
    os.makedirs(cdir, exist_ok=True)
    extra = a.fovea_args.split()
    ocr_budgets = set(int(b) for b in a.ocr_budgets.split(",")) if a.ocr_budgets else set(budgets)
    jobs = []
    for s in scenes:
        for b in budgets:
            jobs.append((s, cli, b, "uniform", [], os.path.join(cdir, f"{s['id']}-{b}.json"), True))
            jobs.append((s, cli, b, "bottom-up", extra, None, b in ocr_budgets))
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        res = list(pool.map(run_one, jobs))
    by = {(r["id"], r["budget"], r["strategy"]): r for r in res}
    report = {}
    for b in budgets:
        small_u, small_b, all_u, all_b, dpsnr = [], [], [], [], []
        for s in scenes:
            u, f = by[(s["id"], b, "uniform")], by[(s["id"], b, "bottom-up")]
            for h, ou, ob in zip(u["heights"], u["ocr"], f["ocr"] or [float("nan")] * len(u["ocr"])):
                all_u.append(ou)
                all_b.append(ob)
                if h < ev.SMALL_TEXT_PX:
                    small_u.append(ou)
                    small_b.append(ob)
            dpsnr.append(f["psnr_image"] - u["psnr_image"])
        rep = {"small_n": len(small_u), "small_uniform": 100 * np.mean(small_u), "small_bottomup": 100 * np.mean(small_b),
               "all_uniform": 100 * np.mean(all_u), "all_bottomup": 100 * np.mean(all_b),
               "queried_small_gain": 100 * np.mean([f["ocr"][s["query"]] - u["ocr"][s["query"]] for s in scenes
                                                    for u, f in [(by[(s["id"], b, "uniform")], by[(s["id"], b, "bottom-up")])]
                                                    if u["heights"][s["query"]] < ev.SMALL_TEXT_PX]) if b in ocr_budgets else float("nan"),
               "psnr_gain_db": float(np.mean(dpsnr)), "scenes_below": int(sum(d < 0 for d in dpsnr)),
               "worst_psnr_gain_db": float(min(dpsnr))}
        report[b] = rep
        print(f"B={b}: small text ({rep['small_n']}) {rep['small_bottomup']:.1f} vs {rep['small_uniform']:.1f} "
              f"({rep['small_bottomup'] - rep['small_uniform']:+.1f}); all {rep['all_bottomup']:.1f} vs "
              f"{rep['all_uniform']:.1f} ({rep['all_bottomup'] - rep['all_uniform']:+.1f}); queried small {rep['queried_small_gain']:+.1f}; PSNR {rep['psnr_gain_db']:+.2f} dB, "
              f"{rep['scenes_below']}/{len(scenes)} below (worst {rep['worst_psnr_gain_db']:+.2f})")
    if a.save:
        sys.path.insert(0, os.path.dirname(HERE))
        import provenance  # bench/provenance.py
        rows = [{"budget": b, "fovea_args": a.fovea_args, "scenes": len(scenes), "seed": a.seed,
                 **{k: (None if isinstance(v, float) and v != v else v) for k, v in rep.items()}}
                for b, rep in report.items()]
        provenance.output(a, "eval-bottomup", {"fovea_args": a.fovea_args, "report": {str(b): r for b, r in report.items()}},
                          rows=rows, threads=None)
    if a.tag:
        with open(os.path.join(a.work, f"result-{a.tag}.json"), "w") as f:
            json.dump({"fovea_args": a.fovea_args, "report": report,
                       "runs": [r for r in res if r["strategy"] == "bottom-up"]}, f)


if __name__ == "__main__":
    main()
