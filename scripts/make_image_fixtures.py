#!/usr/bin/env python3
"""Writes tests/data/images/: one small picture (a 48x32 crop of scikit-image's astronaut
photo) in each still format fovea decodes through FFmpeg, and the reference each test compares
against. Run with Debian's Python (`/usr/bin/python3 scripts/make_image_fixtures.py`): it needs
python3-pil, python3-skimage and ffmpeg. The files are committed; the suite never runs this.

References:
- lossless formats: `source.png` (8-bit RGB), `source16.png` (16-bit RGB), `gray.png`; fovea's
  decode must equal them exactly;
- lossy WebP and GIF: what Pillow decodes (the reader HF image processors use), `*.pil.png`;
  the test allows the YUV-to-RGB rounding difference (WebP) and asks for equality (GIF);
- rgb.jxl and hang_ffmpeg51.jxl (committed by hand: the 29-byte input on which FFmpeg 5.1's
  libjxl wrapper spins forever, found by fuzz_still): JPEG XL must be refused, not decoded;
- the oriented files: stored pixels `source.png` with an EXIF / TIFF Orientation tag of 6
  (displayed rotated 90 degrees clockwise);
- gray + alpha (TIFF, PAM): must equal `gray.png` exactly (full-range gray);
- animated WebP: `anim.webp` (Pillow: two lossless frames, the first `source.png`) must give
  its first frame exactly; `anim_offset.webp` (built here: one 16x16 lossless frame at (8, 4)
  on the 48x32 canvas) must give that frame on a black canvas, as Pillow shows it,
  `anim_offset.expected.png`;
- TIFFs FFmpeg 5.1 cannot read right: `jpeg.tiff` (Pillow's compression="jpeg": FFmpeg decodes
  it black) and `float.tiff` (32-bit float samples) must be refused by name.
"""
import io
import os
import subprocess
import sys

import numpy as np
from PIL import Image
import skimage.data

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "images")


def ffmpeg(src, dst, *args):
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", src, *args, dst], check=True)


def main():
    os.makedirs(OUT, exist_ok=True)
    p = lambda name: os.path.join(OUT, name)
    rgb = skimage.data.astronaut()[120:152, 180:228]  # 32x48: face and helmet edge
    Image.fromarray(rgb).save(p("source.png"))
    # 16-bit: the 8-bit values spread over 16 bits plus a ramp, so the low byte matters.
    ramp = (np.arange(48, dtype=np.uint16)[None, :, None] * 37) % 256
    rgb16 = (rgb.astype(np.uint16) * 256 + ramp).astype(">u2")
    with open(p("source16.ppm"), "wb") as f:  # P6 with maxval 65535: big-endian samples
        f.write(b"P6\n48 32\n65535\n" + rgb16.tobytes())
    ffmpeg(p("source16.ppm"), p("source16.png"))
    gray = np.asarray(Image.fromarray(rgb).convert("L"))
    Image.fromarray(gray).save(p("gray.png"))

    # Lossless: exact.
    ffmpeg(p("source.png"), p("lossless.webp"), "-c:v", "libwebp", "-lossless", "1")
    ffmpeg(p("source.png"), p("rgb.bmp"))
    ffmpeg(p("source.png"), p("rgb.tiff"), "-compression_algo", "deflate")
    ffmpeg(p("source16.png"), p("rgb16.tiff"), "-compression_algo", "lzw")
    ffmpeg(p("source.png"), p("rgb.qoi"))
    ffmpeg(p("source.png"), p("rgb.j2k"), "-c:v", "jpeg2000", "-pred", "1")
    ffmpeg(p("source.png"), p("rgb.jxl"), "-c:v", "libjxl", "-distance", "0")  # refused (decode.cpp)
    Image.fromarray(rgb).save(p("rgb.ppm"))
    Image.fromarray(gray).save(p("gray.pgm"))
    Image.fromarray(gray).save(p("gray.tiff"))
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 128, np.uint8)])
    Image.fromarray(rgba, "RGBA").save(p("rgba.webp"), lossless=True)  # alpha dropped on decode

    # Gray + alpha: ya8 in FFmpeg; full-range gray, the alpha dropped.
    ffmpeg(p("gray.png"), p("gray_alpha.tiff"), "-pix_fmt", "ya8")
    ffmpeg(p("gray.png"), p("gray_alpha.pam"), "-pix_fmt", "ya8")

    # Animated WebP: the first frame is what fovea reads.
    frames = [Image.fromarray(rgb), Image.fromarray(np.ascontiguousarray(rgb[:, ::-1]))]
    frames[0].save(p("anim.webp"), save_all=True, append_images=frames[1:], duration=100, lossless=True)
    assert Image.open(p("anim.webp")).n_frames == 2
    # A first frame smaller than the canvas, at (8, 4): RIFF / VP8X (animation) / ANIM / ANMF.
    crop = rgb[4:20, 8:24]
    still = io.BytesIO()
    Image.fromarray(crop).save(still, "WEBP", lossless=True)
    vp8l = still.getvalue()[12:]  # the VP8L chunk of a simple-format file
    assert vp8l[:4] == b"VP8L"
    le24 = lambda v: int(v).to_bytes(3, "little")
    chunk = lambda fourcc, payload: fourcc + len(payload).to_bytes(4, "little") + payload + b"\0" * (len(payload) & 1)
    vp8x = chunk(b"VP8X", bytes([0x02]) + le24(0) + le24(48 - 1) + le24(32 - 1))
    anim = chunk(b"ANIM", bytes([0, 0, 0, 0, 0, 0]))
    anmf = chunk(b"ANMF", le24(8 // 2) + le24(4 // 2) + le24(16 - 1) + le24(16 - 1) + le24(100) + bytes([0]) + vp8l)
    body = b"WEBP" + vp8x + anim + anmf
    with open(p("anim_offset.webp"), "wb") as f:
        f.write(b"RIFF" + len(body).to_bytes(4, "little") + body)
    expected = np.zeros_like(rgb)
    expected[4:20, 8:24] = crop
    assert np.array_equal(np.asarray(Image.open(p("anim_offset.webp")).convert("RGB")), expected)
    assert np.array_equal(np.asarray(Image.open(p("anim.webp")).convert("RGB")), rgb)
    Image.fromarray(expected).save(p("anim_offset.expected.png"))

    # TIFFs refused by name.
    Image.fromarray(rgb).save(p("jpeg.tiff"), compression="jpeg")
    Image.fromarray(gray).convert("F").save(p("float.tiff"))

    # Lossy / quantised: Pillow's decode is the reference.
    Image.fromarray(rgb).save(p("lossy.webp"), quality=80)
    Image.open(p("lossy.webp")).convert("RGB").save(p("lossy.webp.pil.png"))
    Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=64).save(p("palette.gif"))
    Image.open(p("palette.gif")).convert("RGB").save(p("palette.gif.pil.png"))

    # Orientation 6 (rotate 90 degrees clockwise to display).
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rgb).save(p("oriented.webp"), lossless=True, exif=exif.tobytes())
    Image.fromarray(rgb).save(p("oriented.tiff"), tiffinfo={0x0112: 6})

    # Check that Pillow shows them rotated: WebP through ImageOps.exif_transpose (what HF's
    # load_image calls), TIFF on plain open (Pillow 9.4's TIFF reader applies the tag itself,
    # and exif_transpose after it would turn the picture twice).
    from PIL import ImageOps
    shown = {"oriented.webp": ImageOps.exif_transpose(Image.open(p("oriented.webp"))),
             "oriented.tiff": Image.open(p("oriented.tiff"))}
    for name, im in shown.items():
        a = np.asarray(im.convert("RGB"))
        assert a.shape == (48, 32, 3) and np.array_equal(a, np.rot90(rgb, -1)), name
    for name in sorted(os.listdir(OUT)):
        print(f"{os.path.getsize(p(name)):7d}  {name}")


if __name__ == "__main__":
    sys.exit(main())
