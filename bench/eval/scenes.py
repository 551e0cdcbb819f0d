#!/usr/bin/python3
"""Seeded scenes for the token-efficiency evaluation: printed text on real photographs, and
skimage's two document images.

    /usr/bin/python3 bench/eval/scenes.py --out /tmp/scenes --count 48 --seed 6

Writes OUT/<id>.png for every scene and OUT/scenes.json, a list of
    {"id", "image", "width", "height", "kind": "photo" | "document",
     "snippets": [{"text", "box": [x0, y0, x1, y1], "height_px", "height_at_1024",
                   "font", "contrast", "plate"}],
     "query": index of the queried snippet}
Boxes are [x0, y0, x1, y1) in image pixels around the ink (plus nothing): a fixation query
is the box centre, a region query the box itself.

Text height: the font size in pixels (the em; capitals are ~0.73 of it). Sizes are drawn as
"px tall at 1024 px width", then scaled with the image width and kept >= 8 px, so
`height_at_1024` = height_px * 1024 / width is what the "< 20 px" group of the eval uses.

Photographs: skimage's data directory (Debian's python3-skimage). Debian 12's opencv-data
ships only Haar/LBP cascades, no photographs, so none come from OpenCV. Every photo is
resized (Lanczos) and centre-cropped to the scene size; small photos are upscaled, so
their detail is soft, while the text drawn afterwards is sharp.

Documents:
  * page.png (384x191, a scanned book page): its seven printed lines were annotated by hand
    (boxes and text below: line bands from the row profile of the ink, each line checked by
    cropping it and reading it with Tesseract psm 7 at full resolution; the lines are slightly
    slanted, so a box can clip a pixel or two of a neighbour's descenders); the scene is the page upscaled (bicubic) to 768..2048 px wide.
  * text.png (448x172) is handwritten maths on paper; Tesseract reads nothing in it even at
    full resolution (checked: empty output), so its own ink cannot be scored. It is used as a
    paper background onto which printed lines are written like on the photographs.
"""
import argparse
import json
import os
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFont

SKIMAGE_DATA = "/usr/lib/python3/dist-packages/skimage/data"
# Debian's fonts-dejavu-core, fonts-dejavu-extra and fonts-lyx (scripts/install-deps.sh test): sans, serif and mono faces, bold, condensed italic, and
# Computer Modern Roman (LyX's cmr10, a quite different serif design).
FONT_DIR = "/usr/share/fonts/truetype"
FONTS = ["dejavu/DejaVuSans.ttf", "dejavu/DejaVuSerif.ttf", "dejavu/DejaVuSansMono.ttf",
         "dejavu/DejaVuSans-Bold.ttf", "dejavu/DejaVuSerif-Bold.ttf", "dejavu/DejaVuSansMono-Bold.ttf",
         "dejavu/DejaVuSansCondensed-Oblique.ttf", "dejavu/DejaVuSerifCondensed-Italic.ttf",
         "lyx/cmr10.ttf"]
PHOTOS = ["astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png",
          "hubble_deep_field.jpg", "retina.jpg", "ihc.png", "camera.png", "moon.png",
          "coins.png", "brick.png", "grass.png", "gravel.png", "horse.png", "cell.png"]
# (long side, aspect w/h); both sides stay within [512, 2048], sizes are multiples of 16.
SIZES = [(512, 1.0), (768, 4 / 3), (1024, 1.0), (1024, 3 / 4), (1280, 16 / 9), (1536, 1.0),
         (1024, 2.0), (2048, 1.0), (2048, 2.0), (640, 1.0), (1536, 3 / 2), (768, 2 / 3)]
# Queried-text sizes cycle through these ("px tall at 1024 px width") so both groups of the
# eval (< 20 px and >= 20 px) get many scenes; the other snippets draw from the same list.
QUERY_SIZES = [8, 10, 12, 14, 16, 18, 20, 24, 28, 32, 36, 40]
# Text luminance difference from the local background: high, medium, low.
CONTRASTS = {"high": 180, "medium": 110, "low": 70}
WORDS = ("river stone house light paper north garden window silver market winter orange "
         "copper bridge forest letter signal engine harbor planet yellow marble candle "
         "ticket station museum island rocket coffee secret number summer valley "
         "pocket basket violet thunder meadow castle anchor falcon lantern quartz "
         "velvet pepper jacket mirror saddle timber walnut cobalt ember frost delta "
         "vector kernel pixel token budget model query region scale level patch").split()

# page.png, hand-annotated: box in original pixels (384x191) and the printed text.
PAGE_LINES = [
    ((0, 8, 300, 39), "Region-based segmentation"),
    ((0, 47, 384, 64), "Let us first determine markers of the coins and the"),
    ((0, 65, 384, 82), "background. These markers are pixels that we can label"),
    ((0, 84, 384, 100), "unambiguously as either object or background. Here,"),
    ((0, 100, 384, 118), "the markers are found at the two extreme parts of the"),
    ((0, 118, 230, 136), "histogram of grey values:"),
    ((0, 168, 384, 191), ">>> markers = np.zeros_like(coins)"),
]
# (target width, queried line)
PAGE_SCENES = [(1152, 2), (1280, 4), (1536, 1), (2048, 5)]
TEXT_SCENES = [1024, 1536]


def load_rgb(path):
    im = Image.open(path)
    if im.mode in ("RGBA", "LA", "P"):
        im = im.convert("RGBA")
        bg = Image.new("RGBA", im.size, (255, 255, 255, 255))
        im = Image.alpha_composite(bg, im)
    return im.convert("RGB")


def cover(im, w, h):
    """Resize so the image covers w x h, then centre-crop."""
    s = max(w / im.width, h / im.height)
    rw, rh = max(w, round(im.width * s)), max(h, round(im.height * s))
    im = im.resize((rw, rh), Image.LANCZOS)
    x0, y0 = (rw - w) // 2, (rh - h) // 2
    return im.crop((x0, y0, x0 + w, y0 + h))


def scene_size(long_side, aspect):
    if aspect >= 1:
        w, h = long_side, long_side / aspect
    else:
        w, h = long_side * aspect, long_side
    return int(round(w / 16) * 16), int(round(h / 16) * 16)


def overlaps(a, b, pad):
    return not (a[2] + pad <= b[0] or b[2] + pad <= a[0] or a[3] + pad <= b[1] or b[3] + pad <= a[1])


def draw_snippets(im, rng, sizes, first_size):
    """Writes len(sizes) snippets at random free positions; returns their records."""
    w, h = im.size
    draw = ImageDraw.Draw(im, "RGBA")
    lum = np.asarray(im.convert("L"), dtype=np.float32)
    rgb = np.asarray(im, dtype=np.float32)
    placed = []
    for k, nominal in enumerate([first_size] + sizes):
        height_px = max(8, int(round(nominal * w / 1024)))
        font_path = FONTS[rng.integers(len(FONTS))]
        font_name = os.path.basename(font_path)
        font = ImageFont.truetype(os.path.join(FONT_DIR, font_path), height_px)
        contrast = list(CONTRASTS)[rng.integers(len(CONTRASTS))]
        plate = bool(rng.random() < 0.5)
        for attempt in range(200):
            n_words = int(rng.integers(2, 4))
            text = " ".join(WORDS[i] for i in rng.integers(len(WORDS), size=n_words))
            # Capitalise the first word sometimes: mixed case is what signs and captions have.
            if rng.random() < 0.3:
                text = text[:1].upper() + text[1:]
            l, t, r, b = draw.textbbox((0, 0), text, font=font)
            tw, th = r - l, b - t
            pad = max(2, height_px // 4)
            if tw + 2 * pad >= w or th + 2 * pad >= h:
                continue
            x = int(rng.integers(pad, w - tw - pad))
            y = int(rng.integers(pad, h - th - pad))
            box = [x, y, x + tw, y + th]
            if any(overlaps(box, p["box"], 2 * pad + 4) for p in placed):
                continue
            break
        else:
            continue
        # Colours from the local background: text darker on light backgrounds, lighter on dark.
        x0, y0, x1, y1 = box
        bg_rgb = rgb[y0:y1, x0:x1].reshape(-1, 3).mean(0)
        if plate:
            # A translucent label behind the text, as captions and signs have.
            draw.rectangle([x0 - pad, y0 - pad, x1 + pad, y1 + pad],
                           fill=tuple(int(v) for v in bg_rgb) + (200,))
            bg_lum = float(0.299 * bg_rgb[0] + 0.587 * bg_rgb[1] + 0.114 * bg_rgb[2])
        else:
            bg_lum = float(lum[y0:y1, x0:x1].mean())
        delta = CONTRASTS[contrast]
        v = bg_lum - delta if bg_lum >= 128 else bg_lum + delta
        v = int(np.clip(v, 0, 255))
        draw.text((x - l, y - t), text, font=font, fill=(v, v, v, 255))
        placed.append({"text": text, "box": box, "height_px": height_px,
                       "height_at_1024": round(height_px * 1024 / w, 2), "font": font_name,
                       "contrast": contrast, "plate": plate})
    return placed


def photo_scene(idx, rng, sizes):
    photo = PHOTOS[idx % len(PHOTOS)]
    long_side, aspect = sizes[int(rng.integers(len(sizes)))]
    w, h = scene_size(long_side, aspect)
    im = cover(load_rgb(os.path.join(SKIMAGE_DATA, photo)), w, h)
    query_size = QUERY_SIZES[idx % len(QUERY_SIZES)]
    others = [QUERY_SIZES[i] for i in rng.integers(len(QUERY_SIZES), size=2)]
    snippets = draw_snippets(im, rng, others, query_size)
    return im, {"kind": "photo", "source": photo, "snippets": snippets, "query": 0}


def text_scene(width, rng):
    src = load_rgb(os.path.join(SKIMAGE_DATA, "text.png"))
    h = int(round(width * src.height / src.width / 16) * 16)
    h = max(h, 512)
    im = cover(src, width, h)
    size = QUERY_SIZES[int(rng.integers(len(QUERY_SIZES)))]
    others = [QUERY_SIZES[i] for i in rng.integers(len(QUERY_SIZES), size=2)]
    snippets = draw_snippets(im, rng, others, size)
    return im, {"kind": "document", "source": "text.png (background)", "snippets": snippets, "query": 0}


def page_scene(width, query_line):
    src = Image.open(os.path.join(SKIMAGE_DATA, "page.png")).convert("RGB")
    s = width / src.width
    h = int(round(src.height * s))
    im = src.resize((width, h), Image.BICUBIC)
    # Pad the bottom with the paper's colour to a multiple of 16 px, like every other scene:
    # then the full-resolution ceiling is the image itself (no resize to the patch grid).
    hp = -(-h // 16) * 16
    if hp != h:
        paper = tuple(int(v) for v in np.median(np.asarray(im)[-4:].reshape(-1, 3), axis=0))
        padded = Image.new("RGB", (width, hp), paper)
        padded.paste(im, (0, 0))
        im = padded
    snippets = []
    for (x0, y0, x1, y1), text in PAGE_LINES:
        box = [int(x0 * s), int(y0 * s), min(width, int(round(x1 * s))), min(h, int(round(y1 * s)))]
        # The em of a printed line is about its ascender-to-descender box / 1.15.
        height_px = int(round((y1 - y0) * s / 1.15))
        snippets.append({"text": text, "box": box, "height_px": height_px,
                         "height_at_1024": round(height_px * 1024 / width, 2),
                         "font": "scan", "contrast": "scan", "plate": False})
    return im, {"kind": "document", "source": "page.png", "snippets": snippets, "query": query_line}


def generate(out_dir, count, seed, max_side=2048):
    """Writes count scenes (photos, with the documents interleaved) and returns the list.
    max_side caps the longer side (a short test run uses small scenes)."""
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    sizes = [s for s in SIZES if s[0] <= max_side]
    docs = [lambda w=w, q=q: page_scene(min(w, max_side), q) for w, q in PAGE_SCENES]
    docs += [lambda w=w: text_scene(min(w, max_side), rng) for w in TEXT_SCENES]
    n_photos = max(count - len(docs), (count + 1) // 2)
    photos = [lambda i=i: photo_scene(i, rng, sizes) for i in range(n_photos)]
    makers = []
    while photos or docs:
        if photos:
            makers.append(photos.pop(0))
        if docs:
            makers.append(docs.pop(0))
    makers = makers[:count]
    scenes = []
    for i, make in enumerate(makers):
        im, rec = make()
        sid = f"s{i:03d}"
        path = os.path.join(out_dir, sid + ".png")
        im.info.pop("icc_profile", None)  # page.png's profile is malformed; libpng warns
        im.save(path)
        rec.update({"id": sid, "image": path, "width": im.width, "height": im.height})
        scenes.append(rec)
    with open(os.path.join(out_dir, "scenes.json"), "w") as f:
        json.dump(scenes, f, indent=1)
    return scenes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=48)
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--max-side", type=int, default=2048)
    a = ap.parse_args()
    scenes = generate(a.out, a.count, a.seed, a.max_side)
    print(f"{len(scenes)} scenes in {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
