"""A short run of the token-efficiency evaluation (bench/eval/eval.py): two small scenes (a photo
and a document: the generator interleaves them), two budgets. It checks that the harness works
end to end — scenes with their truth, every strategy run through the CLI, Tesseract and the
metrics producing sane numbers, the outputs written — not a score.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    if shutil.which("tesseract") is None:
        sys.exit("tesseract not installed (scripts/install-deps.sh test)")
    work = os.path.join(a.work, "eval")
    shutil.rmtree(work, ignore_errors=True)
    out = os.path.join(work, "out")
    script = os.path.join(a.source, "bench", "eval", "eval.py")
    budgets = [64, 273]
    r = subprocess.run([sys.executable, script, "--cli", a.cli, "--out", out, "--work", work,
                        "--scenes", "2", "--max-side", "640", "--budgets", ",".join(map(str, budgets)),
                        "--jobs", "2", "--no-plot"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"eval.py failed ({r.returncode}):\n{r.stderr}")

    with open(os.path.join(out, "eval.json")) as f:
        res = json.load(f)
    strategies = ["fov-fixation", "fov-region", "uniform", "bottom-up"]
    assert res["budgets"] == budgets and res["strategies"] == strategies
    scenes = res["scenes"]
    assert len(scenes) == 2, len(scenes)
    assert {s["kind"] for s in scenes} == {"photo", "document"}, "photos and a document"
    for s in scenes:
        assert 0 <= s["box"][0] < s["box"][2] <= s["width"] and 0 <= s["box"][1] < s["box"][3] <= s["height"]
        assert s["truth"].strip()
        runs = {(r["strategy"], r["budget"]): r for r in s["runs"]}
        assert len(runs) == 1 + len(budgets) * len(strategies), sorted(runs)
        ceiling = [r for r in s["runs"] if r["strategy"] == "ceiling"]
        assert len(ceiling) == 1 and ceiling[0]["tokens"] == s["full_res_tokens"]
        for r in s["runs"]:
            assert 0.0 <= r["ocr_accuracy"] <= 1.0
            assert 0 < r["psnr_image"] <= res["psnr_cap_db"] and 0 < r["psnr_box"] <= res["psnr_cap_db"]
            assert -1.0 <= r["ssim_image"] <= 1.0 and -1.0 <= r["ssim_box"] <= 1.0
            if r["strategy"] != "ceiling":
                assert 0 < r["tokens"] <= r["budget"], r
        # More tokens never make the foveated rendering of the queried box worse by much:
        # a larger budget only ever refines tiles (allocate.hpp).
        for st in ("fov-fixation", "fov-region"):
            assert runs[(st, 273)]["psnr_box"] >= runs[(st, 64)]["psnr_box"] - 0.5, (s["id"], st)
        # Every scene is a multiple of the patch size, so the ceiling is the image itself.
        assert ceiling[0]["psnr_image"] == res["psnr_cap_db"] and ceiling[0]["ssim_image"] > 0.999, s["id"]
        # The full-resolution rendering reads the snippet: the scenes' truth is right.
        assert ceiling[0]["ocr_accuracy"] >= 0.6, (s["id"], ceiling[0]["ocr_text"], s["truth"])

    agg = res["aggregate"]["all"]
    assert agg["scenes"] == 2 and set(agg["budgets"]) == {str(b) for b in budgets}
    assert set(res["targets"]) == {"fov-fixation", "fov-region", "bottom-up"}
    bu = res["targets"]["bottom-up"]
    assert set(bu["psnr_image_gain_db"]) == {str(b) for b in budgets}
    assert all(0 <= n <= 2 for n in bu["scenes_psnr_below_uniform"].values())
    assert 0 <= res["targets"]["fov-fixation"]["fraction_of_ceiling_at_64"] <= 1.5
    with open(os.path.join(out, "table.md")) as f:
        table = f.read()
    assert "| 273 |" in table and "full res" in table and "Targets at B = 273" in table and "Targets:" in table
    print("eval harness ok:", ", ".join(f"{s['id']} ceiling {100 * s['runs'][0]['ocr_accuracy']:.0f}%"
                                       for s in scenes))


if __name__ == "__main__":
    main()
