#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/): small valid inputs of every
kind each parser handles, so libFuzzer starts deep inside the format rather than at its magic
bytes. Deterministic; uses PIL and numpy, and Debian's ffmpeg for the video clips (a few frames
of its synthetic test pattern each, bit-exact single-threaded encodes).
Run: /usr/bin/python3 scripts/make_fuzz_seeds.py
"""
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fovea_testio import safetensors as st  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus")
rng = np.random.default_rng(19)


def out(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def pil_bytes(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_interlaced_gray(w, h):
    """An Adam7-interlaced 8-bit gray PNG (PIL cannot write interlaced files)."""
    px = (np.arange(w * h).reshape(h, w) * 7 % 256).astype(np.uint8)
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = px[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        for row in sub:
            raw += b"\x00" + row.tobytes()
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 1)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b"")


def exif_app1(orientation, big_endian):
    e = ">" if big_endian else "<"
    tiff = (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, 8)
    tiff += struct.pack(e + "H", 1) + struct.pack(e + "HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(e + "I", 0)
    return b"Exif\x00\x00" + tiff


def safetensors(tensors, metadata=None):
    """[(name, dtype, shape, bytes)] as a file, metadata after the tensors, JSON with spaces."""
    return st.encode([(name, (dtype, shape, data)) for name, dtype, shape, data in tensors], metadata,
                     compact=False, metadata_first=False)


def main():
    # PNG: every colour type and bit depth the decoder handles, and interlacing.
    rgb = Image.fromarray(rng.integers(0, 256, (9, 13, 3), dtype=np.uint8))
    out("png", "rgb8.png", pil_bytes(rgb, "PNG"))
    out("png", "gray8.png", pil_bytes(rgb.convert("L"), "PNG"))
    out("png", "gray_alpha.png", pil_bytes(rgb.convert("LA"), "PNG"))
    out("png", "rgba.png", pil_bytes(rgb.convert("RGBA"), "PNG"))
    out("png", "palette.png", pil_bytes(rgb.convert("P", palette=Image.ADAPTIVE, colors=8), "PNG"))
    out("png", "bilevel.png", pil_bytes(rgb.convert("1"), "PNG"))
    out("png", "gray16.png", pil_bytes(Image.fromarray((np.arange(70).reshape(7, 10) * 900).astype(np.uint16)), "PNG"))
    out("png", "interlaced.png", png_interlaced_gray(11, 9))
    out("png", "wide_1px.png", pil_bytes(Image.fromarray(rng.integers(0, 256, (1, 300), dtype=np.uint8)), "PNG"))

    # JPEG: baseline, progressive, gray, 4:4:4, CMYK, EXIF orientations; raw EXIF payloads.
    img = Image.fromarray(rng.integers(0, 256, (16, 24, 3), dtype=np.uint8))
    out("jpeg", "baseline.jpg", pil_bytes(img, "JPEG", quality=80))
    out("jpeg", "progressive.jpg", pil_bytes(img, "JPEG", quality=80, progressive=True))
    out("jpeg", "gray.jpg", pil_bytes(img.convert("L"), "JPEG", quality=80))
    out("jpeg", "444.jpg", pil_bytes(img, "JPEG", quality=90, subsampling=0))
    out("jpeg", "cmyk.jpg", pil_bytes(img.convert("CMYK"), "JPEG", quality=80))
    for o, be in ((6, True), (3, False), (8, False)):
        out("jpeg", f"exif_o{o}.jpg", pil_bytes(img, "JPEG", quality=70, exif=exif_app1(o, be)))
        out("jpeg", f"exif_o{o}.app1", exif_app1(o, be))

    # safetensors: several dtypes, metadata, empty and zero-sized tensors.
    f32 = np.arange(6, dtype=np.float32).tobytes()
    out("safetensors", "small.safetensors", safetensors(
        [("a", "F32", [2, 3], f32), ("b", "F16", [4], np.ones(4, np.float16).tobytes()),
         ("c", "BF16", [2], b"\x80\x3f\x00\x40"), ("d", "I64", [1], struct.pack("<q", -5))],
        {"format": "pt", "note": "seed"}))
    out("safetensors", "empty.safetensors", safetensors([]))
    out("safetensors", "zero_dim.safetensors", safetensors([("z", "U8", [0, 5], b""), ("s", "F64", [], struct.pack("<d", 1.5))]))
    out("safetensors", "odd_dtypes.safetensors", safetensors(
        [("b", "BOOL", [3], b"\x00\x01\x01"), ("f8", "F8_E4M3", [2], b"\x38\x40"), ("u", "U32", [1], b"\x01\x00\x00\x00")]))
    out("safetensors", "tokens_like.safetensors", safetensors(
        [("patches", "U8", [2, 3, 2, 2], bytes(range(24))), ("positions", "F32", [2, 4], np.zeros(8, np.float32).tobytes()),
         ("levels", "I32", [2], np.zeros(2, np.int32).tobytes())], {"budget": "2", "patch": "2"}))

    # gguf: the two mmproj fixtures (CLIP with LLaVA projector, SigLIP), written by
    # scripts/make_encoder_fixtures.py, plus a header-only file.
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "encoder")
    for name in ("gguf_llava", "gguf_siglip"):
        with open(os.path.join(fixtures, name, "mmproj.gguf"), "rb") as f:
            out("gguf", name + ".gguf", f.read())
    out("gguf", "empty.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 0))

    # tokenize: the harness maps bytes to extents, parameters, queries, then pixels.
    for i, n in enumerate((64, 200, 600, 2000)):
        out("tokenize", f"random{i}.bin", rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    out("tokenize", "defaults.bin", bytes([40, 0, 30, 0, 1]) + bytes([200, 16, 0, 0, 0]) + bytes(300))

    # video: tiny clips (a few frames, 24..48 px) in the containers and codecs users bring.
    video_seeds()
    # still: the formats decoded through FFmpeg's libavcodec (src/image/libav.cpp).
    still_seeds(rgb)

    # cli: NUL-separated argument vectors.
    cli = {
        "tokenize.args": ["tokenize", "in.png", "--budget", "100", "--fixation", "10,20", "-o", "t.safetensors"],
        "regions.args": ["tokenize", "in.jpg", "--region", "1,2,30,40,2", "--weights", "info=1,sal=0.5,q=8,floor=0.05",
                         "--dtype", "f16", "--mean", "0.5,0.5,0.5", "--std", "0.2,0.2,0.2", "--e0", "0.1", "--sharpness", "2"],
        "uniform.args": ["tokenize", "a.png", "--uniform", "--patch", "14", "--max-level", "3", "--threads", "2",
                         "--store", "--store-backend", "host", "--store-page-bytes", "65536", "--json"],
        "encode.args": ["encode", "a.png", "--model", "random:vit-b16", "--precision", "bf16", "-o", "e.safetensors"],
        "store_bench.args": ["store-bench", "--backend", "host", "--json"],
        "devices.args": ["devices", "--json"],
        "help.args": ["tokenize", "--help"],
        "video.args": ["video", "clip.mp4", "--fixation", "32,18", "--every", "2", "--max-frames", "100",
                       "--reuse", "exact", "--keyframe", "8", "--threshold", "6", "-o", "v.safetensors", "--json"],
        "video_model.args": ["video", "c.mkv", "--model", "random:vit-b16", "--fps", "5", "--precision", "bf16",
                             "--token-threshold", "0.2", "--hysteresis", "0", "--refresh-fraction", "0.7",
                             "--store", "vulkan", "--check", "-o", "e.safetensors"],
        "video_fixations.args": ["video", "c.y4m", "--fixations", "gaze.csv", "--budget", "64", "--patch", "14",
                                 "--decode-only"],
    }
    for name, args in cli.items():
        out("cli", name, b"\x00".join(a.encode() for a in args))
    return 0


def video_seeds():
    ffmpeg = shutil.which("ffmpeg")
    if not ffmpeg:
        sys.exit("make_fuzz_seeds: ffmpeg not found (apt-get install ffmpeg)")
    src = ["-f", "lavfi", "-i", "testsrc2=size={size}:rate=10:duration={dur}"]
    exact = ["-threads", "1", "-fflags", "+bitexact", "-flags:v", "+bitexact", "-map_metadata", "-1"]
    clips = {  # name: (size, seconds, encoder arguments)
        "gray.y4m": ("32x24", 0.3, ["-pix_fmt", "gray", "-strict", "-1"]),
        "yuv420.y4m": ("32x24", 0.3, ["-pix_fmt", "yuv420p"]),
        "yuv444.y4m": ("24x16", 0.2, ["-pix_fmt", "yuv444p"]),
        "h264.mp4": ("48x32", 0.5, ["-c:v", "libx264", "-preset", "ultrafast", "-g", "3", "-pix_fmt", "yuv420p"]),
        "h264_bframes.mkv": ("48x32", 0.6, ["-c:v", "libx264", "-preset", "medium", "-bf", "2", "-g", "6",
                                           "-pix_fmt", "yuv420p"]),
        "vp9.webm": ("48x32", 0.4, ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-b:v", "50k"]),
        "vp8.mkv": ("48x32", 0.4, ["-c:v", "libvpx", "-deadline", "realtime", "-b:v", "50k"]),
        "mjpeg.avi": ("32x24", 0.3, ["-c:v", "mjpeg", "-q:v", "10", "-pix_fmt", "yuvj420p"]),
        "mpeg4.mov": ("48x32", 0.4, ["-c:v", "mpeg4", "-q:v", "10"]),
        "mpeg2.ts": ("48x32", 0.4, ["-c:v", "mpeg2video", "-q:v", "10"]),
        "ffv1.mkv": ("24x16", 0.2, ["-c:v", "ffv1"]),
        "anim.gif": ("24x16", 0.3, ["-c:v", "gif"]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, (size, dur, enc) in clips.items():
            path = os.path.join(tmp, name)
            cmd = [ffmpeg, "-hide_banner", "-loglevel", "error", "-y"] + [a.format(size=size, dur=dur) for a in src]
            subprocess.run(cmd + exact + enc + [path], check=True)
            with open(path, "rb") as f:
                out("video", name, f.read())



def still_seeds(rgb):
    """Small pictures in each still format fovea reads through FFmpeg: PIL writes what it can,
    ffmpeg the rest (from the same 13x9 picture)."""
    out("still", "lossy.webp", pil_bytes(rgb, "WEBP", quality=60))
    out("still", "lossless.webp", pil_bytes(rgb, "WEBP", lossless=True))
    out("still", "alpha.webp", pil_bytes(rgb.convert("RGBA"), "WEBP", lossless=True))
    out("still", "palette.gif", pil_bytes(rgb.convert("P", palette=Image.ADAPTIVE, colors=8), "GIF"))
    out("still", "rgb.bmp", pil_bytes(rgb, "BMP"))
    out("still", "palette.bmp", pil_bytes(rgb.convert("P", palette=Image.ADAPTIVE, colors=8), "BMP"))
    out("still", "rgb.tiff", pil_bytes(rgb, "TIFF", compression="tiff_lzw"))
    out("still", "gray.tiff", pil_bytes(rgb.convert("L"), "TIFF"))
    exif = Image.Exif()
    exif[0x0112] = 6
    out("still", "oriented.tiff", pil_bytes(rgb, "TIFF", tiffinfo={0x0112: 6}))
    out("still", "oriented.webp", pil_bytes(rgb, "WEBP", lossless=True, exif=exif.tobytes()))
    out("still", "rgb.ppm", pil_bytes(rgb, "PPM"))
    out("still", "gray.pgm", pil_bytes(rgb.convert("L"), "PPM"))
    out("still", "bilevel.pbm", pil_bytes(rgb.convert("1"), "PPM"))
    # Animated WebP (the first frame is cut out of its ANMF chunk) and TIFFs refused by name.
    flipped = rgb.transpose(Image.FLIP_LEFT_RIGHT)
    anim = io.BytesIO()
    rgb.save(anim, "WEBP", save_all=True, append_images=[flipped], duration=50, lossless=True)
    out("still", "anim.webp", anim.getvalue())
    rgba = rgb.convert("RGBA")
    rgba.putalpha(Image.fromarray(np.tile(np.arange(0, 13 * 19, 19, dtype=np.uint8), (9, 1))))
    anim = io.BytesIO()  # lossy frames with an ALPH chunk each
    rgba.save(anim, "WEBP", save_all=True, append_images=[rgba.transpose(Image.FLIP_LEFT_RIGHT)], duration=50,
              quality=50)
    out("still", "anim_alpha.webp", anim.getvalue())
    out("still", "gray_alpha.tiff", pil_bytes(rgb.convert("LA"), "TIFF"))
    out("still", "jpeg.tiff", pil_bytes(rgb, "TIFF", compression="jpeg"))
    out("still", "float.tiff", pil_bytes(rgb.convert("F"), "TIFF"))
    ffmpeg = shutil.which("ffmpeg")
    if not ffmpeg:
        print("make_fuzz_seeds: no ffmpeg: the QOI, JPEG 2000 and JPEG XL still seeds are not written")
        return
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src.png")
        rgb.save(src)
        # rgb.jxl: JPEG XL is refused by signature (decode.cpp); the seed keeps that path fuzzed.
        for name, enc in {"rgb.qoi": [], "rgb.j2k": ["-c:v", "jpeg2000", "-pred", "1"],
                          "rgb.jxl": ["-c:v", "libjxl", "-distance", "0"]}.items():
            path = os.path.join(tmp, name)
            subprocess.run([ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-i", src] + enc + [path], check=True)
            with open(path, "rb") as f:
                out("still", name, f.read())


def tar_seeds():
    """WebDataset-style shards as Python's tarfile writes them: ustar, GNU (long names, base-256
    sizes) and pax (path records) headers, an image and other members, a directory entry."""
    import tarfile

    own = np.random.default_rng(23)  # its own stream: the same seeds with or without main()
    png = pil_bytes(Image.fromarray(own.integers(0, 256, (8, 8, 3), dtype=np.uint8)), "PNG")
    members = [("samples/000001.png", png), ("samples/000001.json", b'{"caption": "x"}'),
               ("samples/" + "k" * 120 + ".jpg", b"\xff\xd8\xff\xd9"), ("empty.png", b"")]
    for fmt, name in [(tarfile.USTAR_FORMAT, "ustar.tar"), (tarfile.GNU_FORMAT, "gnu.tar"),
                      (tarfile.PAX_FORMAT, "pax.tar")]:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
            d = tarfile.TarInfo("samples")
            d.type = tarfile.DIRTYPE
            t.addfile(d)
            for mname, data in members:
                if fmt == tarfile.USTAR_FORMAT and len(mname) > 100 and "/" not in mname[-100:]:
                    continue
                info = tarfile.TarInfo(mname)
                info.size = len(data)
                info.mtime = 0
                try:
                    t.addfile(info, io.BytesIO(data))
                except ValueError:  # a name ustar cannot hold
                    pass
        out("tar", name, buf.getvalue())


def model_seeds():
    """fuzz_model: u16 config length, config.json, u16 preprocessor length, preprocessor_config.json,
    then one safetensors file: the Qwen2-VL fixture, the Qwen2.5-VL fixture's shards merged, and
    the small HF CLIP fixture and the SigLIP 2 NaFlex one (tests/data/encoder/, written by
    make_qwen_fixtures.py, make_encoder_fixtures.py and make_siglip2_fixtures.py)."""
    enc = os.path.join(os.path.dirname(ROOT), "..", "tests", "data", "encoder")

    def read(*p):
        path = os.path.join(enc, *p)
        return open(path, "rb").read() if os.path.exists(path) else b""

    def merged(d):
        idx = json.loads(read(d, "model.safetensors.index.json"))
        tensors = {}
        for f in sorted(set(idx["weight_map"].values())):
            tensors.update(st.parse(read(d, f))[0])
        return st.encode(tensors)

    def seed(name, cfg, pre, weights):
        out("model", name, struct.pack("<H", len(cfg)) + cfg + struct.pack("<H", len(pre)) + pre + weights)

    seed("qwen2_vl", read("qwen2_vl", "config.json"), read("qwen2_vl", "preprocessor_config.json"),
         read("qwen2_vl", "model.safetensors"))
    seed("qwen2_5_vl", read("qwen2_5_vl", "config.json"), read("qwen2_5_vl", "preprocessor_config.json"),
         merged("qwen2_5_vl"))
    seed("qwen3_vl", read("qwen3_vl", "config.json"), read("qwen3_vl", "preprocessor_config.json"),
         read("qwen3_vl", "model.safetensors"))
    seed("clip", read("clip", "config.json"), read("clip", "preprocessor_config.json"), read("clip", "model.safetensors"))
    seed("siglip2_naflex", read("siglip2_naflex", "config.json"), read("siglip2_naflex", "preprocessor_config.json"),
         read("siglip2_naflex", "model.safetensors"))


if __name__ == "__main__":
    if sys.argv[1:] == ["tar"]:  # only the tar seeds (no ffmpeg needed)
        tar_seeds()
        sys.exit(0)
    if sys.argv[1:] == ["model"]:  # only the checkpoint seeds
        model_seeds()
        sys.exit(0)
    rc = main()
    tar_seeds()
    model_seeds()
    sys.exit(rc)
