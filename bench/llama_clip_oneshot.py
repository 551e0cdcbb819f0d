#!/usr/bin/python3
"""One-shot encode of a llama.cpp mmproj: `fovea encode` against llama.cpp's clip (load + one encode).

    /usr/bin/python3 bench/llama_clip_oneshot.py --clip-driver PATH [--build-dir build]
        [--mmproj-dir /tmp/fovea-llava-l14] [--photo data/astronaut.jpg] [--rounds 3] [--threads 2]
        [--no-quantized] [--json OUT.json] [--save]

The model is a LLaVA-1.5-style mmproj of ViT-L/14-336 dimensions with random weights, in the
layout llama.cpp's converter writes (clip.vision.* keys, v.blk.N.* tensors, the `mlp` projector
mm.0 / mm.2, 23 blocks: the converter drops the last one): width 1024, 16 heads, MLP 4096,
patch 14, 336 px (576 patch tokens + the class token), projector 1024 -> 4096 -> 4096, matrices
F16 (mmproj-f16.gguf, 0.62 GB), made when missing; and the same file requantized to Q8_0 by
scripts/gguf_requantize.py (mmproj-q8_0.gguf) unless --no-quantized.

The competitor is a program (--clip-driver) built from llama.cpp's sources against its ggml
(not part of this repository): `DRIVER MMPROJ IMAGE THREADS` loads the file with
clip_model_load, reads and preprocesses IMAGE (clip_image_load_from_file,
clip_image_preprocess) and encodes it once (clip_image_batch_encode on THREADS threads), then
prints one JSON line {"load_ms", "preprocess_ms", "encode_ms", "n_patches", "n_embd", ...}.
Record which llama.cpp commit it was built from with --clip-version.

Each round runs, in fresh processes and an order rotated per round, with the page cache warm
(every file read once first):
  DRIVER mmproj-f16.gguf PHOTO T                          (and on mmproj-q8_0.gguf)
  fovea encode PHOTO --model mmproj-f16.gguf --uniform --budget 576 --patch 14
        --precision fp32|bf16 --threads T --json -o OUT   (and fp32 / bf16 / int8 on mmproj-q8_0.gguf)
timing each whole process from outside (wall clock; user / system CPU from wait4). Both encode
the same 24x24 grid of 14-px patches of the photo resized to 336x336 and run the projector;
llama.cpp's graph runs 22 of the 23 stored blocks (it drops one more), fovea all 23 (its
loader's comment, src/encoder/loaders/gguf_mmproj.cpp), so fovea does ~4 % more work. Ratios
are llama.cpp's F16 wall time over fovea's, per round, then the median. Both sides' own
load / encode split is recorded (fovea's --json timings, the driver's JSON).
"""
import argparse
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import provenance  # bench/provenance.py: --save keeps the result with its commit and machine

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# ViT-L/14-336 as LLaVA-1.5's mmproj holds it.
D, HEADS, MLP, BLOCKS, PATCH, SIZE, PROJ = 1024, 16, 4096, 23, 14, 336, 4096


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clip-driver", required=True, help="the llama.cpp clip driver (see the description)")
    ap.add_argument("--clip-version", default="not given", help="the llama.cpp commit the driver was built from")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--mmproj-dir", default="/tmp/fovea-llava-l14")
    ap.add_argument("--photo", default=os.path.join(ROOT, "data", "astronaut.jpg"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-quantized", action="store_true", help="only the F16 file")
    ap.add_argument("--json", help="also write the results here")
    provenance.add_arguments(ap)
    return ap.parse_args()


# ---- the mmproj file ------------------------------------------------------------------------
U32, F32, BOOL, STRING, ARRAY = 4, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1


def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key, kind, value):
    out = _str(key) + struct.pack("<I", kind)
    if kind == U32:
        return out + struct.pack("<I", value)
    if kind == F32:
        return out + struct.pack("<f", value)
    if kind == BOOL:
        return out + struct.pack("<B", int(value))
    if kind == STRING:
        return out + _str(value)
    elem, items = value  # arrays of f32 only here
    return out + struct.pack("<IQ", elem, len(items)) + b"".join(struct.pack("<f", x) for x in items)


def make_mmproj(path):
    """Writes the F16 mmproj (random weights, seed 0), streaming tensor by tensor."""
    import numpy as np
    rng = np.random.default_rng(0)
    n_pos = (SIZE // PATCH) ** 2 + 1
    tensors = [("v.patch_embd.weight", (D, 3, PATCH, PATCH), GGML_F16, 0.02), ("v.class_embd", (D,), GGML_F32, 0.02),
               ("v.position_embd.weight", (n_pos, D), GGML_F32, 0.02),
               ("v.pre_ln.weight", (D,), GGML_F32, "one"), ("v.pre_ln.bias", (D,), GGML_F32, 0.0)]
    for i in range(BLOCKS):
        b = f"v.blk.{i}."
        for m in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors += [(b + m + ".weight", (D, D), GGML_F16, 0.03), (b + m + ".bias", (D,), GGML_F32, 0.01)]
        # llama.cpp's llava converter names fc1 ffn_down and fc2 ffn_up.
        tensors += [(b + "ffn_down.weight", (MLP, D), GGML_F16, 0.03), (b + "ffn_down.bias", (MLP,), GGML_F32, 0.01),
                    (b + "ffn_up.weight", (D, MLP), GGML_F16, 0.015), (b + "ffn_up.bias", (D,), GGML_F32, 0.01)]
        for ln in ("ln1", "ln2"):
            tensors += [(b + ln + ".weight", (D,), GGML_F32, "one"), (b + ln + ".bias", (D,), GGML_F32, 0.0)]
    tensors += [("mm.0.weight", (PROJ, D), GGML_F16, 0.03), ("mm.0.bias", (PROJ,), GGML_F32, 0.01),
                ("mm.2.weight", (PROJ, PROJ), GGML_F16, 0.015), ("mm.2.bias", (PROJ,), GGML_F32, 0.01)]
    kvs = [("general.architecture", STRING, "clip"), ("clip.has_text_encoder", BOOL, False),
           ("clip.has_vision_encoder", BOOL, True), ("clip.has_llava_projector", BOOL, True),
           ("general.file_type", U32, 1), ("general.name", STRING, "random-llava-vit-l14-336"),
           ("clip.projector_type", STRING, "mlp"), ("clip.vision.image_size", U32, SIZE),
           ("clip.vision.patch_size", U32, PATCH), ("clip.vision.embedding_length", U32, D),
           ("clip.vision.feed_forward_length", U32, MLP), ("clip.vision.projection_dim", U32, 768),
           ("clip.vision.attention.head_count", U32, HEADS),
           ("clip.vision.attention.layer_norm_epsilon", F32, 1e-5), ("clip.vision.block_count", U32, BLOCKS),
           ("clip.vision.image_mean", ARRAY, (F32, [0.48145466, 0.4578275, 0.40821073])),
           ("clip.vision.image_std", ARRAY, (F32, [0.26862954, 0.26130258, 0.27577711])),
           ("clip.use_gelu", BOOL, False)]
    align = 32
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(_kv(*kv) for kv in kvs)
    offset, infos = 0, []
    for name, shape, kind, _ in tensors:
        n = 1
        for s in shape:
            n *= s
        nbytes = n * (2 if kind == GGML_F16 else 4)
        ne = list(reversed(shape))
        infos.append(_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne) +
                     struct.pack("<IQ", kind, offset))
        offset += (nbytes + align - 1) // align * align
    body = head + b"".join(infos)
    body += b"\0" * ((-len(body)) % align)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(body)
        for name, shape, kind, std in tensors:
            if std == "one":
                x = np.ones(shape, np.float32) + rng.standard_normal(shape, np.float32) * 0.02
            else:
                x = rng.standard_normal(shape, np.float32) * np.float32(std)
            data = x.astype(np.float16 if kind == GGML_F16 else np.float32).tobytes()
            f.write(data + b"\0" * ((-len(data)) % align))
    os.replace(tmp, path)


# ---- timing ---------------------------------------------------------------------------------
def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def measure(cmd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.decode(errors='replace')[-2000:]}")
    return {"wall_s": wall, "user_s": after.ru_utime - before.ru_utime, "sys_s": after.ru_stime - before.ru_stime,
            "minflt": after.ru_minflt - before.ru_minflt}, p.stdout.decode()


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def main():
    a = parse_args()
    fovea = os.path.join(a.build_dir, "fovea")
    os.makedirs(a.mmproj_dir, exist_ok=True)
    f16 = os.path.join(a.mmproj_dir, "mmproj-f16.gguf")
    q8 = os.path.join(a.mmproj_dir, "mmproj-q8_0.gguf")
    if not os.path.exists(f16):
        print(f"writing {f16} ...", flush=True)
        make_mmproj(f16)
    if not a.no_quantized and not os.path.exists(q8):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gguf_requantize.py"), f16, q8], check=True)
    files = [f16] + ([] if a.no_quantized else [q8])
    for p in files + [a.clip_driver, fovea]:
        warm(p)
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(a.threads)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    out_dir = tempfile.mkdtemp(prefix="fovea-llama-clip-")
    T = str(a.threads)

    def fovea_cmd(model, prec, tag):
        return [fovea, "encode", a.photo, "--model", model, "--uniform", "--budget", "576", "--patch", str(PATCH),
                "--precision", prec, "--threads", T, "--json", "-o", os.path.join(out_dir, f"{tag}.safetensors")]

    configs = [("llama.cpp clip F16", [a.clip_driver, f16, a.photo, T]),
               ("fovea fp32 F16", fovea_cmd(f16, "fp32", "f16_fp32")),
               ("fovea bf16 F16", fovea_cmd(f16, "bf16", "f16_bf16"))]
    if not a.no_quantized:
        configs += [("llama.cpp clip Q8_0", [a.clip_driver, q8, a.photo, T]),
                    ("fovea fp32 Q8_0", fovea_cmd(q8, "fp32", "q8_fp32")),
                    ("fovea bf16 Q8_0", fovea_cmd(q8, "bf16", "q8_bf16")),
                    ("fovea int8 Q8_0", fovea_cmd(q8, "int8", "q8_int8"))]

    with open("/proc/cpuinfo") as f:
        model_name = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print(f"machine: {model_name}, {os.cpu_count()} cpus; threads {a.threads}; photo {a.photo}; "
          f"{f16} ({os.path.getsize(f16) / 1e6:.0f} MB)" + ("" if a.no_quantized else f", {q8} ({os.path.getsize(q8) / 1e6:.0f} MB)"))
    runs = {c[0]: [] for c in configs}
    load_avgs = []
    for r in range(a.rounds):
        la_before = load_average()
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for name, cmd in order:
            m, out = measure(cmd, env)
            j = json.loads([l for l in out.splitlines() if l.startswith("{")][-1] if name.startswith("llama") else out)
            if name.startswith("llama"):
                m.update(model_load_ms=j["load_ms"], encode_ms=j["encode_ms"] + j["preprocess_ms"],
                         tokens=j["n_patches"])
            else:
                m.update(model_load_ms=j["timings_ms"]["model_load"], encode_ms=j["timings_ms"]["encode"],
                         tokens=j["tokens"], precision_ran=j["encoder"]["precision"])
            runs[name].append(m)
        la_after = load_average()
        load_avgs.append([la_before, la_after])
        print(f"round {r + 1}/{a.rounds} (load average {la_before} -> {la_after}): " +
              "  ".join(f"{n} {runs[n][-1]['wall_s']:.2f} s" for n, _ in configs), flush=True)

    def med(name, key):
        return statistics.median(x[key] for x in runs[name])

    print(f"\n{'':22} {'wall s':>7} {'user s':>7} {'sys s':>6} {'load ms':>8} {'encode ms':>9} {'tokens':>6}")
    rows = []
    base = "llama.cpp clip F16"
    for name, _ in configs:
        ratios = [b["wall_s"] / x["wall_s"] for b, x in zip(runs[base], runs[name])]
        row = {"pipeline": name, "runs": len(runs[name]), "wall_s_median": med(name, "wall_s"),
               "user_s_median": med(name, "user_s"), "sys_s_median": med(name, "sys_s"),
               "model_load_ms_median": med(name, "model_load_ms"), "encode_ms_median": med(name, "encode_ms"),
               "tokens": int(med(name, "tokens")), "llama_f16_wall_over_this_median": statistics.median(ratios),
               "llama_f16_wall_over_this_min": min(ratios), "llama_f16_wall_over_this_max": max(ratios)}
        rows.append(row)
        print(f"{name:22} {row['wall_s_median']:7.2f} {row['user_s_median']:7.2f} {row['sys_s_median']:6.2f} "
              f"{row['model_load_ms_median']:8.0f} {row['encode_ms_median']:9.0f} {row['tokens']:6d}   "
              f"llama.cpp F16 / this: {row['llama_f16_wall_over_this_median']:.2f}x "
              f"({row['llama_f16_wall_over_this_min']:.2f}-{row['llama_f16_wall_over_this_max']:.2f})")
    results = {"machine": model_name, "threads": a.threads, "photo": a.photo, "rows": rows, "runs": runs,
               "load_averages": load_avgs, "llama_cpp": a.clip_version,
               "model": {"dims": f"ViT-L/14-336: D={D}, heads={HEADS}, MLP={MLP}, blocks={BLOCKS}, projector mlp "
                                 f"{D}->{PROJ}->{PROJ}", "f16_bytes": os.path.getsize(f16),
                         "q8_0_bytes": None if a.no_quantized else os.path.getsize(q8)}}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    provenance.output(a, "oneshot-llama", results, threads=a.threads, rows=rows,
                      versions={"llama.cpp": a.clip_version})


if __name__ == "__main__":
    main()
