#!/usr/bin/python3
"""Draws the documentation's measured pictures from the benchmark results in bench/results/:

- docs/images/budget-ocr-fidelity.png: OCR accuracy and frozen-tower fidelity against the token
  budget, for a uniform resize, mixed foveation and windows (bench/results/fidelity/: one result
  per budget; the OCR panel adds bench/results/eval/'s 48-scene sweep);
- docs/images/video-time-per-frame.png: time per frame of the incremental video encoder against
  a full re-encode of every frame, frame by frame, for the latest run on each CPU class
  (bench/results/video/: random towers; bench/results/video-real/: a pretrained one);
- docs/images/video-towers.png: the bench/video_bench.py run (most clips, then latest) that
  measured a pretrained tower beside random weights: per clip and tower, the speed-up over `--reuse off`
  (bars: wall-clock; diamonds: CPU time, where recorded) and the cosine to a full encode (mean and
  worst frame), each bar labelled with its tower;
- docs/images/video-oracle.png: the keep-or-recompute oracle's work against fidelity on a
  pretrained tower (bench/results/video-oracle/, latest), per clip, beside the default
  incremental setting's point from the latest bench/results/video/ run of that tower.

    /usr/bin/python3 bench/plots.py [--out-dir docs/images]

Needs matplotlib (scripts/install-deps.sh test). Every point comes from a result file; the
pictures name the files' CPU classes and commits.
"""
import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402

ROOT = provenance.ROOT
METHODS = [("uniform", "uniform resize", "tab:gray"), ("mixed", "mixed foveation", "tab:orange"),
           ("windows", "windows", "tab:blue")]
EVAL = [("uniform", "uniform resize", "tab:gray"), ("fov-fixation", "mixed, fixation", "tab:orange"),
        ("fov-region", "mixed, region", "tab:red"), ("bottom-up", "mixed, no query", "tab:green")]


def results(bench):
    out = []
    for p in sorted(glob.glob(os.path.join(provenance.RESULTS, bench, "*.json"))):
        d = json.load(open(p, encoding="utf-8"))
        if not provenance.validate(d):
            out.append((os.path.relpath(p, ROOT), d))
    return out



def save_figure(fig, out, name):
    """Lays the figure out, writes it as out/name (110 dpi) and closes it; returns the path."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

def budget_of(doc):
    o = doc.get("extra", {}).get("original", doc.get("extra", {}))
    return o.get("budget") if isinstance(o, dict) else None


def plot_budget(out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fid = [(p, d) for p, d in results("fidelity") if budget_of(d)]
    if not fid:
        print("plots: no fidelity results with a budget: skipping the budget picture", file=sys.stderr)
        return None
    # Per (budget, size, method): the latest result's row.
    best = {}
    for p, d in sorted(fid, key=lambda pd: pd[1]["date"]):
        for r in d["rows"]:
            best[(budget_of(d), r.get("size"), r.get("method"))] = (r, d)
    sizes = sorted({k[1] for k in best if k[1] is not None})
    budgets = sorted({k[0] for k in best})
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    for metric, a, title in (("roi_fidelity", ax[0], "ROI fidelity (cosine to the native window)"),
                             ("global_fidelity", ax[1], "global fidelity (cosine to the native view)"),
                             ("ocr", ax[2], "OCR accuracy (Tesseract)")):
        for m, label, color in METHODS:
            for size, style in zip(sizes, ("-", "--", ":")):
                pts = [(b, best[(b, size, m)][0].get(metric)) for b in budgets if (b, size, m) in best]
                pts = [(b, v) for b, v in pts if isinstance(v, (int, float))]
                if pts:
                    a.plot(*zip(*pts), style, marker="o", color=color, label=f"{label}, {size} px")
        a.set_title(title, fontsize=10)
        a.set_xlabel("token budget")
        a.set_xscale("log", base=2)
        a.grid(alpha=0.3)
    ev = [d for _, d in results("eval") if any("ocr_accuracy" in r for r in d["rows"])]
    if ev:
        d = max(ev, key=lambda x: x["date"])
        for s, label, color in EVAL:
            pts = sorted((r["budget"], r["ocr_accuracy"]) for r in d["rows"]
                         if r.get("strategy") == s and isinstance(r.get("ocr_accuracy"), (int, float)))
            if pts:
                ax[2].plot(*zip(*pts), "-.", marker="s", color=color, alpha=0.6,
                           label=f"{label} (48 scenes, {d['machine']['cpu_class']})")
    ax[0].set_ylabel("cosine")
    ax[2].set_ylabel("character accuracy")
    ax[2].legend(fontsize=6.5, loc="lower right")
    ax[0].legend(fontsize=7, loc="lower right")
    tower = {(d.get("extra", {}).get("original") or d.get("extra", {})).get("model", "?") for _, d in fid}
    commits = sorted({d["commit"][:10] for _, d in fid})
    fig.suptitle(f"Frozen tower {', '.join(os.path.basename(os.path.dirname(t)) or t for t in tower)}: "
                 f"each tokenization against the budget (bench/results/fidelity, commits {', '.join(commits)}; "
                 f"the OCR panel's squares: bench/results/eval)",
                 fontsize=10)
    return save_figure(fig, out, "budget-ocr-fidelity.png")


def per_frame_runs(doc):
    """[(label, [(frame, incremental ms, full re-encode ms or None)])] for every clip and precision
    in a video result: the older layout (precision -> clip -> {"per_frame": [...]}) and the current
    one (precision -> model -> clip -> [one row per setting, each with "per_frame"], where the
    default setting's alternated medians "incremental_ms" and "off_ms" are used)."""
    extra = doc.get("extra", {})
    o = extra.get("original", extra) if isinstance(extra, dict) else None
    out = []

    def frames_of(pf):
        pts = []
        for f in pf:
            inc = f.get("incremental_ms", f.get("ms"))
            full = f.get("off_ms", f.get("full_ms"))
            if isinstance(f.get("index"), int) and isinstance(inc, (int, float)):
                pts.append((f["index"], inc, full if isinstance(full, (int, float)) else None))
        return pts

    def walk(x, label):
        if isinstance(x, dict):
            if isinstance(x.get("per_frame"), list):
                if x.get("setting", "") == "":  # the current layout: the default setting only
                    out.append((" ".join(label.split()), frames_of(x["per_frame"])))
                return
            for k, v in x.items():
                if k in ("precisions", "clips"):
                    walk(v, label)
                elif isinstance(v, (dict, list)):
                    name = os.path.basename(os.path.dirname(k)) if k.endswith(".safetensors") else k
                    walk(v, f"{label} {name}")
        elif isinstance(x, list):
            for v in x:
                walk(v, label)
    walk(o, "")
    runs = [(label, pts) for label, pts in out if pts]
    real = [r for r in runs if "random:" not in r[0]]
    return (real or runs)[:4]


def mixed_foveation(doc):
    """The video pictures show the default (mixed) foveation; a video_bench.py --foveation windows
    run is in docs/how-to/video.md's tables."""
    extra = doc.get("extra")
    return not isinstance(extra, dict) or extra.get("foveation", "mixed") == "mixed"


def plot_video(out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latest = {}
    for bench in ("video", "video-real"):
        for p, d in results(bench):
            if per_frame_runs(d) and mixed_foveation(d):
                k = (d["machine"]["cpu_class"], bench)
                if k not in latest or (d["date"], p) > (latest[k][1]["date"], latest[k][0]):
                    latest[k] = (p, d)
    if not latest:
        print("plots: no video results with per-frame times: skipping the video picture", file=sys.stderr)
        return None
    keys = sorted(latest, key=lambda k: (k[1], k[0]))
    fig, ax = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4), squeeze=False)
    for a, k in zip(ax[0], keys):
        p, d = latest[k]
        for (label, pts), color in zip(per_frame_runs(d), ("tab:blue", "tab:orange", "tab:green", "tab:red")):
            idx = [f for f, _, _ in pts]
            a.plot(idx, [i for _, i, _ in pts], "-", color=color, label=f"{label}: incremental")
            if all(full is not None for _, _, full in pts):
                a.plot(idx, [full for _, _, full in pts], ":", color=color, label=f"{label}: full re-encode")
        a.set_yscale("log")
        a.set_xlabel("frame")
        a.set_ylabel("ms per frame")
        # per_frame_runs shows a pretrained tower's runs when the file has one (a video_bench.py
        # --model CKPT run measures random weights beside it, in the same file).
        rows = d.get("rows") if isinstance(d.get("rows"), list) else []
        pretrained = k[1] == "video-real" or any(isinstance(r, dict) and r.get("tower") == "pretrained" for r in rows)
        tower = "pretrained tower" if pretrained else "random tower"
        a.set_title(f"{k[0]}: {d['machine']['cpu_model']}, {tower}\n{d['date'][:10]}, commit {d['commit'][:10]}"
                    f" ({os.path.basename(p)})", fontsize=8)
        a.grid(alpha=0.3, which="both")
        a.legend(fontsize=6.5)
    fig.suptitle("Video: time per frame, incremental against a full foveated re-encode "
                 "(bench/results/video and video-real, the latest run per CPU class)", fontsize=10)
    return save_figure(fig, out, "video-time-per-frame.png")


def plot_video_towers(out):
    """Per clip, the speed-up and the fidelity of the default incremental setting on a pretrained
    tower and on random weights of its shape, from the latest result that has both."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    both = [(p, d) for p, d in results("video")
            if {r.get("tower") for r in d["rows"]} >= {"pretrained", "random"} and mixed_foveation(d)]
    if not both:
        print("plots: no video result with a pretrained and a random tower: skipping the towers picture",
              file=sys.stderr)
        return None
    # The run with the most clips, then the latest.
    p, d = max(both, key=lambda pd: (len({r.get("clip") for r in pd[1]["rows"]}), pd[1]["date"], pd[0]))
    rows = [r for r in d["rows"] if r.get("setting") == "defaults" and r.get("precision", "fp32") == "fp32"]
    clips = [c for c in ("static_away", "static_through", "cut", "pan") if any(r["clip"] == c for r in rows)]
    names = {"static_away": "static camera,\nmotion away", "static_through": "motion at\nthe fixation",
             "cut": "scene cut", "pan": "slow pan"}
    towers = [("pretrained", "tab:blue"), ("random", "tab:gray")]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.38
    for j, (tower, color) in enumerate(towers):
        rs = {r["clip"]: r for r in rows if r["tower"] == tower}
        model = next((r["model"] for r in rs.values()), "?")
        label = ("pretrained " + os.path.basename(os.path.dirname(model)) if tower == "pretrained" else model)
        xs = [i + (j - 0.5) * width for i in range(len(clips))]
        sp = [rs[c]["speedup_mean_time"] if c in rs else 0 for c in clips]
        bars = ax[0].bar(xs, sp, width, color=color, label=label)
        for b, v in zip(bars, sp):
            ax[0].annotate(f"{v:.1f}x", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
        # The CPU-time ratio (runs that recorded it): the work saved, which the machine's load moves little.
        cpu = [(x, rs[c]["speedup_cpu"]) for x, c in zip(xs, clips) if c in rs and "speedup_cpu" in rs[c]]
        if cpu:
            ax[0].scatter([x for x, _ in cpu], [v for _, v in cpu], color="black", marker="D", s=14, zorder=3,
                          label="CPU time ratio" if j == 0 else None)
        cm = [rs[c]["cosine_mean"] if c in rs else 0 for c in clips]
        cw = [rs[c]["cosine_worst_frame"] if c in rs else 0 for c in clips]
        ax[1].bar(xs, cm, width, color=color, label=f"{label}: mean")
        ax[1].scatter(xs, cw, color="black", marker="_", s=120, zorder=3,
                      label="worst frame" if j == 0 else None)
    for a in ax:
        a.set_xticks(range(len(clips)))
        a.set_xticklabels([names[c] for c in clips], fontsize=8)
        a.grid(alpha=0.3, axis="y")
        a.legend(fontsize=7)
    ax[0].axhline(1, color="black", lw=0.8)
    ax[0].set_ylabel("speed-up per frame over --reuse off")
    ax[1].set_ylim(0.95, 1.001)
    ax[1].axhline(0.99, color="tab:red", lw=0.8, ls="--")
    ax[1].set_ylabel("cosine to a full encode (--check)")
    fig.suptitle(f"Video reuse, default settings, per tower ({os.path.relpath(p, ROOT)}; "
                 f"{d['machine']['cpu_model']}, {d['threads']} threads, load {d['load_average'][0]})", fontsize=9)
    return save_figure(fig, out, "video-towers.png")


def plot_video_oracle(out):
    """Per clip: the oracle's work against its cosine to a full encode (mean, worst frame), and
    where the default incremental setting stands on the same tower."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    oracles = results("video-oracle")
    if not oracles:
        print("plots: no video-oracle result: skipping the oracle picture", file=sys.stderr)
        return None
    p, d = max(oracles, key=lambda pd: (pd[1]["date"], pd[0]))
    model = d["extra"].get("model", "")
    # The defaults on the same checkpoint: the latest video result that ran it.
    runs = [(q, e) for q, e in results("video")
            if any(r.get("model") == model and r.get("setting") == "defaults" for r in e["rows"])]
    ref = max(runs, key=lambda qe: (qe[1]["date"], qe[0])) if runs else None
    clips = [c for c in ("static_away", "static_through") if any(r["clip"] == c for r in d["rows"])]
    names = {"static_away": "static camera, motion away from the fixation",
             "static_through": "motion at the fixation"}
    fig, ax = plt.subplots(1, len(clips), figsize=(5.5 * len(clips), 4), squeeze=False)
    for a, c in zip(ax[0], clips):
        rs = sorted((r for r in d["rows"] if r["clip"] == c and r.get("slope", 0) == 0), key=lambda r: r["work"])
        a.plot([r["work"] for r in rs], [r["cosine_mean"] for r in rs], "o-", color="tab:blue",
               label="oracle: mean")
        a.plot([r["work"] for r in rs], [r["cosine_worst_frame"] for r in rs], "v--", color="tab:blue", alpha=0.6,
               label="oracle: worst frame")
        for r in rs:
            a.annotate(f"tau {r['tau']:g}", (r["work"], r["cosine_mean"]), textcoords="offset points",
                       xytext=(4, 4), fontsize=7)
        if ref:
            dr = [r for r in ref[1]["rows"] if r.get("model") == model and r.get("setting") == "defaults"
                  and r.get("clip") == c and r.get("precision", "fp32") == "fp32"]
            if dr:
                r = dr[-1]
                a.scatter([r["encoder_work"]], [r["cosine_mean"]], color="tab:orange", marker="s", zorder=3,
                          label=f"defaults: mean ({r.get('speedup_cpu', 0):.1f}x CPU time)")
                a.scatter([r["encoder_work"]], [r["cosine_worst_frame"]], color="tab:orange", marker="v", zorder=3,
                          label="defaults: worst frame")
        a.axhline(0.99, color="tab:red", lw=0.8, ls="--", label="targets: mean 0.99, worst frame 0.98")
        a.axhline(0.98, color="tab:red", lw=0.8, ls=":")
        xs = [r["work"] for r in rs] + [r["encoder_work"] for r in (dr if ref else [])]
        a.set_xlim(0, 1.12 * max(xs))
        a.set_ylim(0.975, None)
        a.set_xlabel("work (share of a full encode's multiply-adds)")
        a.set_ylabel("cosine to a full encode")
        a.set_title(names.get(c, c), fontsize=9)
        a.grid(alpha=0.3)
        a.legend(fontsize=7, loc="lower left")
    src = os.path.relpath(p, ROOT) + (f"; defaults: {os.path.relpath(ref[0], ROOT)}" if ref else "")
    fig.suptitle(f"Token reuse on {os.path.basename(os.path.dirname(model)) or model}: an oracle against the "
                 f"defaults\n({src})", fontsize=8)
    return save_figure(fig, out, "video-oracle.png")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs", "images"))
    a = ap.parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    for p in (plot_budget(a.out_dir), plot_video(a.out_dir), plot_video_towers(a.out_dir),
              plot_video_oracle(a.out_dir)):
        if p:
            print(f"wrote {os.path.relpath(p, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
