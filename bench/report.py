#!/usr/bin/python3
"""Writes docs/reference/benchmarks.md from bench/results/: for every benchmark, what it measures and how,
then the latest run on each CPU class, each table with a footnote naming its commit, machine,
threads, load and command, and each ratio with a footnote saying what it compares.

    /usr/bin/python3 bench/report.py            # rewrite docs/reference/benchmarks.md
    /usr/bin/python3 bench/report.py --check    # exit 1 when docs/reference/benchmarks.md is not what it would write

The page depends on the result files only (no clock, no machine): the same files give the same
bytes.
"""
import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402

ROOT = provenance.ROOT
PAGE = os.path.join(ROOT, "docs", "reference", "benchmarks.md")
MAX_ROWS = 24
MAX_COLS = 8

# What each benchmark measures, how, and which columns carry its result (regexes, in order).
BENCHES = {
    "oneshot": {
        "title": "Time to first embedding: one image per process",
        "script": "bench/oneshot_bench.py",
        "method": "A fresh process per image: start, load the checkpoint (ViT-B/16), decode the photo, tokenize at "
                  "budget 273 and encode, against torch's uniform 224 px encode of the same checkpoint in its own "
                  "process. Pipelines run in interleaved rounds; `wall_ratio_median` is torch's wall time over "
                  "fovea's, median over rounds.",
        "columns": [r"^pipeline$", r"^wall_s_median$", r"^wall_ratio_median$", r"^wall_ratio_min$", r"^wall_ratio_max$",
                    r"^cpu_ratio_median$", r"^runs$"],
    },
    "oneshot-llama": {
        "title": "One image per process against llama.cpp's clip, on an mmproj file",
        "script": "bench/llama_clip_oneshot.py",
        "method": "A fresh process per image: llama.cpp's clip (clip_model_load, preprocess, one encode; a driver "
                  "built from llama.cpp's sources) against `fovea encode --uniform --budget 576 --patch 14` on the "
                  "same LLaVA-style ViT-L/14-336 mmproj (random weights, F16 and its Q8_0 copy), interleaved "
                  "rounds; `llama_f16_wall_over_this_median` is llama.cpp's F16 wall time over the pipeline's.",
        "columns": [r"^pipeline$", r"^wall_s_median$", r"^llama_f16_wall_over_this_median$",
                    r"^llama_f16_wall_over_this_min$", r"^llama_f16_wall_over_this_max$", r"^model_load_ms_median$",
                    r"^encode_ms_median$", r"^runs$"],
    },
    "encode": {
        "title": "Encoder: ViT-B/16 dimensions, random weights",
        "script": "bench/encode_bench.py",
        "method": "The encoder alone at N tokens, fp32 and bf16, against torch (OpenBLAS) running the same layers "
                  "on the same tokens in the same run; the fraction of peak is against the best bare GEMM the "
                  "machine ran in that run.",
        "columns": [r"^n$", r"^torch_fp32_ms$", r"^fovea_fp32_ms$", r"^fovea_bf16_ms$", r"^fp32_fraction_of_peak$",
                    r"^bf16_fraction_of_peak$"],
        "derived": [("fp32 vs torch", "torch_fp32_ms", "fovea_fp32_ms"), ("bf16 vs torch", "torch_fp32_ms", "fovea_bf16_ms")],
    },
    "attention": {
        "title": "Attention: exact and hierarchical (coarse-to-fine)",
        "script": "bench/attention_bench.py",
        "method": "A whole encode (or the attention op alone) at N = 1024 and 4096 tokens with exact attention and "
                  "with hierarchical attention (`hierarchical:K:B`: K key blocks of B tokens per query block), in "
                  "one process, alternated; the cosine is each token's embedding against the exact encode's.",
        "columns": [r"^set$", r"^attention$", r"^n$", r"^precision$", r"^median_ms$", r"^attention_median_ms$",
                    r"^speedup_vs_exact$", r"^cosine_to_exact_mean$"],
    },
    "hierarchical": {
        "title": "Hierarchical attention on a real tower",
        "script": "bench/hierarchical_real.py",
        "method": "`fovea encode --uniform` of real photos upscaled to N tokens on a pretrained ViT-Ti/16, exact "
                  "against hierarchical attention, alternated in one run; the cosine is against the exact encode.",
        "columns": [r"^image$", r"^attention$", r"^tokens$", r"^precision$", r"^encode_ms$", r"^attention_ms$",
                    r"^cosine$"],
    },
    "video": {
        "title": "Video: incremental re-encoding",
        "script": "bench/video_bench.py",
        "method": "Synthetic clips (a static scene with the subject moving away, through, a cut, a pan) through the "
                  "video session: each frame re-encodes only the tokens whose tiles changed. Against `--reuse off` "
                  "(every frame's layout encoded in full), a full foveated re-encode, and torch's uniform "
                  "per-frame encode, in the same run. Runs with `--foveation windows` (a base view and native "
                  "windows, each reused whole while its pixels stay) are shown under their own heading: their "
                  "`incremental_ms` is the window-reuse run's, against windows with `--reuse off`.",
        "columns": [r"^key$", r"^set$", r"^clip$", r"^model$", r"^setting$", r"incremental_ms$",
                    r"incremental_steady_ms$", r"off_ms$", r"^speedup_mean_time$", r"^speedup_cpu$", r"full_ms$",
                    r"cosine_mean$", r"reuse_rate$"],
    },
    "video-real": {
        "title": "Video on a pretrained tower",
        "script": "bench/video_bench.py",
        "method": "The video benchmark on held-out clips (not used by any test) with a pretrained ViT-Ti/16 beside "
                  "random weights of its shape: `--reuse incremental` against `--reuse off` (every frame's layout "
                  "encoded in full), alternated over rounds; `speedup_mean_time` is off's mean time per frame "
                  "over incremental's, `cosine_mean` each frame's tokens against a full encode.",
        "columns": [r"^clip$", r"^model$", r"^setting$", r"^incremental_ms$", r"^off_ms$", r"^speedup_mean_time$",
                    r"^cosine_mean$", r"^reuse_rate$"],
    },
    "video-oracle": {
        "title": "Video: what an oracle's token reuse would cost on a pretrained tower",
        "script": "bench/video_oracle.py",
        "method": "The lower bound for keep-or-recompute reuse: fovea's video layouts of held-out clips through a "
                  "pretrained ViT-Ti/16 (float64 torch, checked against fovea's encode), where at every layer the "
                  "oracle recomputes exactly the tokens whose kept output is off by more than `tau` (knowing every "
                  "true output for free) and keeps the rest, frame after frame. `work` is the recomputed rows' "
                  "share of a full encode's multiply-adds, `cosine_mean` / `cosine_worst_frame` each frame's "
                  "tokens against a full encode (as `fovea video --check`); `holds`: mean >= 0.99 and worst "
                  "frame >= 0.98.",
        "columns": [r"^clip$", r"^tau$", r"^slope$", r"^work$", r"^cosine_mean$", r"^cosine_worst_frame$",
                    r"^holds$"],
    },
    "video-shift": {
        "title": "Video: camera shifts by whole patches",
        "script": "bench/video_bench.py",
        "method": "The video benchmark on pans (`--only pan,pan_patch`: the held-out 2-px H.264 pan, and a "
                  "lossless pan by 16 px a frame) with a pretrained ViT-Ti/16 beside random weights of its shape: "
                  "`--reuse exact` and the defaults against `--reuse off`, alternated over rounds. A frame shifted "
                  "by whole patches keeps the shifted patches' patch embeddings and recomputes everything else; "
                  "`patch_embeddings_reused` is the share of tokens that kept theirs (frames 1..), "
                  "`cosine_vs_off_mean` the tokens against `--reuse off`'s.",
        "columns": [r"^clip$", r"^model$", r"^setting$", r"^shift_frames$", r"^patch_embeddings_reused$",
                    r"^cosine_vs_off_mean$", r"^speedup_mean_time$", r"^speedup_cpu$"],
    },
    "int8": {
        "title": "int8 precision: fidelity against fp32",
        "script": "bench/int8_fidelity.py",
        "method": "Per-token cosine of bf16 and int8 encodes against fp32 on the same tokens: a pretrained "
                  "ViT-Ti/16 on four photos, and a random ViT-B/16 whose LayerNorms carry outlier channels. The "
                  "speed of int8 is in the encoder and one-shot sections.",
        "columns": [r"^model$", r"^photo$", r"^precision$", r"^mean_cos$", r"^worst_cos$", r"^class_cos$",
                    r"^top1_agrees$"],
    },
    "native": {
        "title": "Native-resolution towers (Qwen2.5-VL)",
        "script": "bench/native_speed.py",
        "method": "A Qwen2.5-VL-7B-sized vision tower (random weights) at native resolution, fovea bf16 against "
                  "torch fp32 in one run, and the cosine of fovea's output to torch's; the printed output is kept "
                  "in each file ([models.md](models.md)).",
        "columns": [],
    },
    "serve": {
        "title": "The service against the batch CLI",
        "script": "bench/serve_bench.py",
        "method": "The same photos through the batch CLI, the Python module in-process, and the HTTP service with "
                  "one client and with eight (batched across requests, or not), in interleaved rounds; "
                  "`vs_batch_cli` is images per second over the batch CLI's in the same round.",
        "columns": [r"^pipeline$", r"^images$", r"^images_per_s$", r"^vs_batch_cli$", r"^latency_p50_ms$",
                    r"^latency_p95_ms$"],
    },
    "concurrent": {
        "title": "Concurrent encodes on one model",
        "script": "bench/concurrent_encode.py",
        "method": "Two encodes on one shared model from two threads against the same two encodes one after the "
                  "other, interleaved rounds; `ratio` is the serial time over the concurrent.",
        "columns": [r"^mode$", r"^round$", r"^serial_ms$", r"^concurrent_ms$", r"^ratio$", r"^ratio_median$"],
    },
    "eval": {
        "title": "Token efficiency: foveated against uniform at equal budgets, judged by Tesseract",
        "script": "bench/eval/eval.py",
        "method": "48 generated scenes (photos with a small text snippet, documents). Every strategy renders what "
                  "its tokens see at each budget; Tesseract reads the queried box; `ocr_accuracy` is its character "
                  "accuracy (1 − edit distance / length), averaged over scenes. The ceiling is the full-resolution "
                  "image.",
        "columns": [r"^budget$", r"^strategy$", r"^ocr_accuracy$", r"^psnr_box$", r"^psnr_image$", r"^ssim_box$",
                    r"^tokens$"],
    },
    "fidelity": {
        "title": "Frozen-tower fidelity of every tokenization",
        "script": "bench/fidelity.py",
        "method": "Each tokenization of the same scenes through one pretrained tower at one budget: "
                  "`roi_fidelity` is the cosine of the queried region's features with those of the region encoded "
                  "at full resolution, `global_fidelity` the whole image's against the native-size encode, `ocr` "
                  "Tesseract's accuracy on what the tokens see.",
        "columns": [r"^size$", r"^method$", r"^tokens$", r"^roi_fidelity$", r"^global_fidelity$", r"^cls_cosine$",
                    r"^ocr$", r"^encode_ms$"],
    },
    "pyramid": {
        "title": "Pyramid: full mip chain",
        "script": "bench/pyramid.py",
        "method": "fovea's pyramid (first call and steady state) against OpenCV INTER_AREA, torch avg_pool2d and "
                  "memcpy of the same bytes, interleaved.",
        "columns": [r"^case$", r"^median_ms$"],
    },
    "tokenize": {
        "title": "Tokenize: foveated and uniform against torch and OpenCV preprocessing",
        "script": "bench/tokenize_bench.py",
        "method": "A 1024×1024 photo (decode excluded) tokenized at B = 273 and 1024: fovea's foveated and "
                  "uniform pipelines (Google Benchmark, `bench_tokenize`) against the uniform preprocessing a VLM "
                  "does in torch (bilinear + antialias) and OpenCV (INTER_AREA): resize so a 16-px grid holds at "
                  "most B tokens, CLIP-normalise, cut into patches; medians of `--reps`, same run.",
        "columns": [r"^budget$", r"^pipeline$", r"^median_ms$", r"^vs_fovea_foveated$"],
    },
    "encode_many": {
        "title": "One encoder call for several images",
        "script": "bench/encode_many_bench.py",
        "method": "`Model.encode_many` on 8 foveated images against one `encode_full` per image, alternated, best "
                  "of `--repeats`; `many_over_full` is encode_many's time over the per-image calls' (lower: "
                  "encode_many faster).",
        "columns": [r"^model$", r"^precision$", r"^budget$", r"^images$", r"^encode_full_ms$", r"^encode_many_ms$",
                    r"^many_over_full$"],
    },
    "store": {
        "title": "The paged token store",
        "script": "bench/store_bench.py",
        "method": "`fovea store-bench`: eight images of 1024 dense tokens with a kept subset each, stored in "
                  "64 KiB pages; the pages they need against dense storage (a count, the same on every machine), "
                  "a frame's page binds merged against one at a time, the gather against memcpy of the same "
                  "bytes, and the pages each codec needs.",
        "columns": [r"^set$", r"^backend$", r"^codec$", r"^mode$", r"^pages$", r"^resident_bytes$",
                    r"^resident_vs_dense_fp32$|^saved_fraction$", r"merged_vs_single$|^speedup_vs_single$"],
    },
    "compress": {
        "title": "Token-embedding codecs: rate and distortion",
        "script": "bench/compress_bench.py",
        "method": "Embeddings of four photos (random ViT-B/16, B = 576) through every codec, trained on eight "
                  "held-out photos: bytes per token, cosine to the original (mean, minimum), relative MSE, and "
                  "how often a token's nearest neighbour is kept (`fovea compress --report`).",
        "columns": [r"^codec$", r"^bytes_per_token$", r"^ratio_vs_fp32$", r"^mean_cosine$", r"^min_cosine$",
                    r"^relative_mse$", r"^nn_agreement$", r"^train_ms$"],
    },
    "batch": {
        "title": "Batch: the CLI, Python loops and Dask",
        "script": "bench/batch_bench.py",
        "method": "100 photos, decode + tokenize + encode + write per image, model load excluded; interleaved "
                  "rounds; `vs_batch_cli` is images per second over the batch CLI's.",
        "columns": [r"^pipeline$", r"^images_per_s$", r"^vs_batch_cli$"],
    },
}

# What a ratio column compares, for its footnote.
RATIO_NOTES = [
    (r"vs_fovea_foveated", "this pipeline's median time over fovea's foveated tokenize at the same budget, same run "
                           "(above 1: fovea's foveated tokenize faster)"),
    (r"merged_vs_single|speedup_vs_single", "one bind call's time for the pages against one call per page, same run "
                                             "(higher: merged faster)"),
    (r"resident_vs_dense_fp32", "the bytes the store keeps resident over dense fp32 storage of every token (a count)"),
    (r"speedup_mean_time", "`--reuse off`'s mean time per frame over this mode's, same clip, alternated rounds "
                           "(higher: incremental faster)"),
    (r"speedup_cpu", "`--reuse off`'s CPU time per frame (user + system, start-up left out) over this mode's, same "
                     "runs (higher: incremental did less computation; the machine's load moves it little)"),
    (r"mean_cos|worst_cos|class_cos", "cosine of this precision's output with fp32's on the same tokens (1: identical)"),
    (r"ratio_vs_fp32", "fp32's bytes per token over this codec's (a count)"),
    (r"nn_agreement", "the share of tokens whose nearest neighbour among the tokens is the same after the codec"),
    (r"many_over_full", "one encode_many call's time over one encode_full per image, same images, alternated "
                        "(below 1: encode_many faster)"),
    (r"wall_ratio", "torch's wall time over fovea's for the same image, both started as fresh processes in the same "
                    "round (higher: fovea faster)"),
    (r"cpu_ratio", "torch's CPU time (user + system) over fovea's, same rounds"),
    (r"llama_f16_wall_over_this", "llama.cpp's wall time (load + one encode of the F16 file) over this pipeline's, "
                                  "both fresh processes in the same round (higher: this pipeline faster)"),
    (r"vs torch", "torch's time for the same layers on the same tokens over fovea's, same run (higher: fovea faster)"),
    (r"speedup_vs_exact", "the exact encode's time over this mode's, same process and model"),
    (r"vs_batch_cli", "this pipeline's images per second over the batch CLI's, same rounds (higher: faster)"),
    (r"fraction_of_peak", "achieved FLOP/s over the best bare GEMM of the same precision in the same run"),
    (r"^ratio", "the serial time over the concurrent time, same rounds"),
    (r"cosine", "cosine similarity of each token's embedding with the reference encode's, averaged (1: identical)"),
    (r"fidelity", "cosine of features with the full-resolution reference (1: identical)"),
    (r"ocr", "Tesseract's character accuracy on what the tokens see (1: every character right)"),
]


def load_results():
    out = {}
    for path in sorted(glob.glob(os.path.join(provenance.RESULTS, "*", "*.json"))):
        doc = json.load(open(path, encoding="utf-8"))
        if provenance.validate(doc):
            continue  # the test names it; the page shows valid results only
        out.setdefault(doc["bench"], []).append((os.path.relpath(path, ROOT), doc))
    return out


def script_of(doc):
    """What ran: the benchmark script, bench executable or fovea command the command names."""
    if doc["command"].startswith("not recorded"):
        return ""
    m = re.search(r"(bench/[\w/]+\.py|(?<!\w)bench_\w+|\bfovea [a-z][\w-]*)", doc["command"])
    return m.group(1) if m else ""


def latest_per_class(runs, script=None):
    """{(cpu_class, script): (path, doc)}: per class, the latest run with rows (by date, then file
    name) of the benchmark's own script, and the latest of every other script that wrote into
    the same folder."""
    best = {}
    for path, doc in runs:
        s = script_of(doc)
        label = "" if not s or s == script else s
        # A run of another mode of the same script (video_bench.py --foveation windows) is kept
        # beside the default mode's, under its own heading.
        variant = (doc.get("extra") or {}).get("foveation") if isinstance(doc.get("extra"), dict) else None
        if variant and variant != "mixed":
            budget = doc["extra"].get("budget")
            label = (label + " " if label else "") + f"--foveation {variant}" + (f" --budget {budget}" if budget else "")
        k = (doc["machine"]["cpu_class"], label)
        key = (bool(doc["rows"]), doc["date"], path)
        if k not in best or key > best[k][0]:
            best[k] = (key, path, doc)
    return {k: (p, d) for k, (_, p, d) in sorted(best.items())}


def fmt(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != v:
            return ""
        a = abs(v)
        return f"{v:.0f}" if a >= 1000 else f"{v:.1f}" if a >= 100 else f"{v:.3g}" if a >= 0.01 else f"{v:.2g}"
    s = str(v).replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= 48 else s[:45] + "..."


def columns_for(bench, rows):
    spec = BENCHES.get(bench, {})
    keys = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    cols = []
    for pat in spec.get("columns", []):
        for k in keys:
            if re.search(pat, k) and k not in cols and any(r.get(k) is not None for r in rows):
                cols.append(k)
                break
    if not cols:  # a benchmark without a column list: labels first, then numbers
        labels = [k for k in keys if all(isinstance(r.get(k), str) or r.get(k) is None for r in rows)
                  and len({r.get(k) for r in rows}) > 1 and not k.startswith(("machine", "command", "model", "date", "commit"))]
        nums = [k for k in keys if any(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) for r in rows)
                and not k.startswith(("load", "threads"))]
        cols = labels[:3] + nums[: MAX_COLS - len(labels[:3])]
    return cols[:MAX_COLS]


def derived(bench, rows):
    out = []
    for name, num, den in BENCHES.get(bench, {}).get("derived", []):
        if any(isinstance(r.get(num), (int, float)) and isinstance(r.get(den), (int, float)) for r in rows):
            out.append((name, num, den))
    return out


def machine_line(doc):
    m = doc["machine"]
    flags = ", ".join(f for f in m.get("flags", []) if f.startswith(("avx512_bf16", "amx", "avx512f", "avx2")))
    model = m["cpu_model"] if m.get("cpu_model") not in (None, "", "not recorded") else "CPU model not recorded"
    klass = m["cpu_class"] if m["cpu_class"] not in ("unknown",) else "class unknown"
    return f"{model} ({klass}; {flags if flags else 'flags not recorded'})"


def command_text(doc):
    """The command, with how it was found when the result did not record it itself."""
    how = (doc.get("provenance") or {}).get("command")
    cmd = doc["command"]
    if cmd.startswith("not recorded"):
        return "not recorded"
    return f"`{cmd}`" + (f" ({how})" if how and how != "the file's own" else "")


def footnote(n, path, doc):
    v = ", ".join(f"{k} {x}" for k, x in sorted(doc["versions"].items()))
    la = doc["load_average"]
    load = "not recorded" if not la else " / ".join(f"{x:g}" for x in la)
    th = doc["threads"] if doc["threads"] else "as in the command"
    commit = f"`{doc['commit'][:10]}`" + (" with uncommitted changes" if doc["dirty"] else "")
    how = doc.get("provenance", {})
    conv = ""
    if how:
        conv = (f" Converted from an older file ({', '.join('`' + p + '`' for p in how.get('converted_from', []))}): "
                f"the commit is {how.get('commit', 'unknown')}, the date {how.get('date', 'unknown')}"
                f", the machine from {how.get('machine', 'unknown')}.")
    return (f"[^{n}]: {doc['date'][:10]}, commit {commit}; {machine_line(doc)}; threads {th}; load average {load}; "
            f"{v}. Command: {command_text(doc)}. File: [`{path}`](../../{path}).{conv}")


def ratio_notes(cols):
    notes = []
    for c in cols:
        for pat, text in RATIO_NOTES:
            if re.search(pat, c):
                notes.append((c, text))
                break
    return notes


def table(bench, doc, marker):
    rows = doc["rows"]
    cols = columns_for(bench, rows)
    der = derived(bench, rows)
    head = cols + [d[0] for d in der]
    lines = ["| " + " | ".join(f"`{c}`" for c in cols) + "".join(f" | {d[0]}" for d in der) + " |",
             "|" + " --- |" * len(head)]
    for r in rows[:MAX_ROWS]:
        cells = [fmt(r.get(c)) for c in cols]
        for _, num, den in der:
            a, b = r.get(num), r.get(den)
            cells.append(f"{a / b:.2f}×" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "")
        lines.append("| " + " | ".join(cells) + " |")
    more = f"\n\n{len(rows) - MAX_ROWS} more rows in the file." if len(rows) > MAX_ROWS else ""
    return "\n".join(lines) + more + f" [^{marker}]", head


def anchor(s):
    return re.sub(r"[^a-z0-9 -]", "", s.lower()).replace(" ", "-")


def render():
    res = load_results()
    total = sum(len(v) for v in res.values())
    out = ["# Benchmarks", "",
           "<!-- Written by bench/report.py from bench/results/: edit those (or the script), not this page. -->", "",
           "Every benchmark runs its competitor in the same run, in interleaved rounds, and records the ratio: the "
           "ratios are the numbers to compare, since machines differ and absolute times grow under load. This page "
           f"shows, for each benchmark, the latest run on each kind of CPU ({total} results in `bench/results/`). "
           "Each table's footnote names its date, commit, CPU (model, class, vector features), threads, load average, "
           "the versions of fovea and its competitors, and the command that made it. Each ratio column has a "
           "footnote saying what it compares. The story behind the numbers (what changed them, where the time "
           "goes on each CPU) is in [performance.md](../explanation/performance.md).", "",
           "## Method", "",
           "- **Same run, interleaved.** fovea and its competitor (torch, OpenCV, the batch CLI ...) run in the same "
           "process or in alternating fresh processes, round after round, so load drift hits both.",
           "- **Provenance.** Every result is one JSON file, `bench/results/<bench>/<date>_<cpu-class>_<commit>.json`, "
           "in the format `bench/provenance.py` defines (commit, versions, CPU model, class and flags, threads, load "
           "average, command, rows). A script run with `--save` writes one; `bench/convert_results.py` brings "
           "older files into the format (their commit from git history where the file does not say it).",
           "- **CPU classes.** Kernels are picked at run time by CPU features, so runs compare within a class: "
           "`zen3` (AVX2), `zen4` and `zen5` (AVX-512 BF16), `icelake` (AVX-512 without BF16), `xeon-amx` (AMX), "
           "or the vendor and widest vector ISA where family and model do not tell more (`amd-unknown`: an AMD "
           "machine whose result did not record its family).",
           "- **This page** is `/usr/bin/python3 bench/report.py`; the test `build.bench_results` fails when it is "
           "stale or when a file under `bench/results/` does not validate.", "",
           "## Running them", "",
           "```sh",
           "bash scripts/install-deps.sh bench                       # torch, OpenCV, OpenBLAS for the competitors",
           "bash scripts/build.sh build",
           "cmake --build build --target benchmarks                   # the bench_* executables",
           "/usr/bin/python3 bench/oneshot_bench.py --save            # one image per process vs torch",
           "/usr/bin/python3 bench/encode_bench.py --threads 2 --save # ViT-B/16 encode vs torch + OpenBLAS",
           "/usr/bin/python3 bench/attention_bench.py --save          # exact vs hierarchical attention",
           "/usr/bin/python3 bench/video_bench.py --save              # incremental video vs full re-encodes and torch",
           "/usr/bin/python3 bench/serve_bench.py --save              # the service vs the batch CLI",
           "/usr/bin/python3 bench/batch_bench.py --build-dir build --save",
           "/usr/bin/python3 bench/pyramid.py --build-dir build --save",
           "/usr/bin/python3 bench/tokenize_bench.py --build-dir build --save   # tokenize vs torch and OpenCV",
           "PYTHONPATH=build/python /usr/bin/python3 bench/encode_many_bench.py --save",
           "/usr/bin/python3 bench/store_bench.py --save               # the paged token store",
           "/usr/bin/python3 bench/compress_bench.py --save            # codecs for stored embeddings",
           "/usr/bin/python3 bench/eval/eval.py --cli build/fovea --out /tmp/eval --save   # OCR token efficiency (~20 min)",
           "PYTHONPATH=build/python /usr/bin/python3 bench/fidelity.py --model CKPT --save",
           "/usr/bin/python3 bench/report.py                          # this page",
           "```", "",
           "## Contents", ""]
    order = [b for b in BENCHES if b in res] + sorted(b for b in res if b not in BENCHES)
    for b in order:
        title = BENCHES.get(b, {}).get("title", b)
        out.append(f"- [{title}](#{anchor(title)})")
    out.append("")
    n = 0
    notes = []
    for b in order:
        spec = BENCHES.get(b, {})
        title = spec.get("title", b)
        out += [f"## {title}", ""]
        if spec.get("script"):
            out.append(f"`{spec['script']}`. {spec.get('method', '')}")
            out.append("")
        runs = res[b]
        out.append(f"{len(runs)} results in `bench/results/{b}/`; the latest per CPU class:")
        out.append("")
        for (klass, other), (path, doc) in latest_per_class(runs, spec.get("script")).items():
            n += 1
            t = n
            out += [f"### {klass}: {doc['machine']['cpu_model']}, {doc['date'][:10]}"
                    + (f" (`{other}`)" if other else ""), ""]
            notes.append(footnote(t, path, doc))
            if doc["rows"]:
                tbl, head = table(b, doc, t)
                out.append(tbl)
                rn = ratio_notes(head)
                if rn:
                    out += ["", "What the ratios compare:", ""]
                    for c, text in rn:
                        n += 1
                        out.append(f"- `{c}`[^{n}]")
                        notes.append(f"[^{n}]: `{c}`: {text}. Measured on {machine_line(doc)}, "
                                     f"commit `{doc['commit'][:10]}`; command: {command_text(doc)}.")
            else:
                out.append(f"No rows: the run's printed output is kept in the file. [^{t}]")
            out.append("")
    out += ["## Footnotes", ""] + notes
    return "\n".join(out).rstrip() + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/reference/benchmarks.md is stale")
    ap.add_argument("--out", default=PAGE)
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        try:
            have = open(a.out, encoding="utf-8").read()
        except OSError:
            have = None
        if have != text:
            print(f"report: error: {os.path.relpath(a.out, ROOT)} is not what bench/report.py writes from "
                  f"bench/results/: run /usr/bin/python3 bench/report.py", file=sys.stderr)
            return 1
        print(f"report: {os.path.relpath(a.out, ROOT)} is up to date")
        return 0
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(a.out, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
