#!/usr/bin/python3
"""Token-embedding codecs measured on real photos, kept with their provenance.

    /usr/bin/python3 bench/compress_bench.py [--cli build/fovea] [--model random:vit-b16]
        [--codecs fp16,bf16,int8,pca:64,pca:128+int8,pca:64+int8,pca:32+int8,pq:128,pq:64] [--save]

The evaluation set: four scikit-image photos (astronaut, coffee, chelsea, motorcycle_left)
encoded at budget 576. The training set, held out: eight other photos (camera, rocket, hubble,
coins, retina, horse, motorcycle_right, page), each at budget 1024 and at 400 with a fixation.
Then `fovea compress --report EVAL... --train TRAIN... --codec ... --json` gives, per codec, the
bytes per token, the cosine to the original embeddings (mean, minimum), the relative MSE, how
often each token's nearest neighbour is kept, and the training time. --save keeps the run as
bench/results/compress/<date>_<cpu-class>_<commit>.json (bench/provenance.py). Codecs are given
to the CLI as one --codec each; `opq:M` works too but trains for minutes.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import provenance  # noqa: E402  bench/provenance.py: the result format and --save

ROOT = os.path.dirname(HERE)
SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
EVAL = ["astronaut.png", "coffee.png", "chelsea.png", "motorcycle_left.png"]
TRAIN = ["camera.png", "rocket.jpg", "hubble_deep_field.jpg", "coins.png", "retina.jpg", "horse.png",
         "motorcycle_right.png", "page.png"]


def encode(cli, model, photo, out, budget, extra=()):
    r = subprocess.run([cli, "encode", photo, "--model", model, "--budget", str(budget), "-o", out, *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"compress_bench: error: fovea encode {photo} failed: {r.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "fovea"))
    ap.add_argument("--model", default="random:vit-b16")
    ap.add_argument("--codecs", default="fp16,bf16,int8,pca:64,pca:128+int8,pca:64+int8,pca:32+int8,pq:128,pq:64")
    ap.add_argument("--codec", action="append", default=[],
                    help="one codec (repeatable; for specs with commas such as faiss:PCA128,SQ8); replaces --codecs")
    ap.add_argument("--reps", type=int, default=3, help="fovea compress --report's timing repetitions (best counts)")
    ap.add_argument("--photos", default=SKIMAGE, help="the folder holding scikit-image's sample photos")
    provenance.add_arguments(ap)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ev, tr = [], []
        for p in EVAL:
            out = os.path.join(tmp, "eval-" + p.split(".")[0] + ".safetensors")
            encode(a.cli, a.model, os.path.join(a.photos, p), out, 576)
            ev.append(out)
        for p in TRAIN:
            for budget, extra in ((1024, ()), (400, ("--fixation", "200,150"))):
                out = os.path.join(tmp, f"train-{p.split('.')[0]}-{budget}.safetensors")
                encode(a.cli, a.model, os.path.join(a.photos, p), out, budget, extra)
                tr.append(out)
        cmd = [a.cli, "compress", "--report", *ev, "--train", *tr, "--json", "--reps", str(a.reps)]
        for c in (a.codec or a.codecs.split(",")):
            cmd += ["--codec", c]
        env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"compress_bench: error: fovea compress --report failed: {r.stderr.strip()}")
    out = json.loads(r.stdout)
    out["model"], out["eval_photos"], out["train_photos"] = a.model, EVAL, TRAIN
    print(json.dumps(out, indent=1)[:4000])
    provenance.output(a, "compress", out, threads=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
