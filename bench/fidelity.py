#!/usr/bin/python3
"""Fidelity harness: how close are the features a ViT tower gives for each way of turning a large
image into tokens (uniform resize, AnyRes tiles, fovea's mixed foveation, a pixel-space foveated
warp, fovea's windows foveation) to what the tower gives for the pixels it was trained on?

    PYTHONPATH=build/python /usr/bin/python3 bench/fidelity.py --model CKPT [--budget B]
        [--sizes 448,896] [--methods base,uniform,anyres,mixed,warp,windows] [--threads N]
        [--repeats 3] [--json OUT.json] [--plot OUT.png] [--quick] [--no-ocr] [--ocr-scenes 4]

CKPT is anything fovea.Model loads (HF CLIP / SigLIP / ViT / DINOv2, timm, torchvision, open_clip,
llama.cpp mmproj .gguf, ...). The tower's native size S = position grid x patch size P, G = S / P
(its native token grid). Every encode below is fovea's own encoder (Model.encode_full), fp32, with
the same thread count; a "native image" is an S x S image cut into its G x G patches with
positions at the patch centres and image_size = (S, S), which is exactly the model's own forward.

References, per scene (a W x H image and a fixation (x, y, radius) in its pixels):
  global reference  the whole image squashed to S x S with an area filter (PIL Image.BOX), one
                    native image: what a VLM's base view sees.
  ROI reference     the S x S full-resolution window centred on the fixation, clamped into the
                    image (integer origin), one native image.

Metrics of a method (its per-token features [N, D] and where each token lies in the image):
  ROI fidelity      for every cell of the ROI reference (its G x G patch cells) whose centre lies
                    within the fixation radius: cosine between the ROI reference's feature of that
                    cell and the method's finest token covering the cell centre (the token of
                    smallest side whose box contains it); the mean over those cells.
  noise floor       the same, with native windows shifted by a quarter window (S / 4 rounded to
                    whole patches, P round(G / 4), so cells stay aligned: 64 px for 224 / 16;
                    +-x and +-y, clamped into the image and kept whole patches, shifts that clamp
                    to zero left out) in place of the method: how much a feature moves when only
                    the surrounding context changes. Mean over shifts.
  floor, 1/2 patch off   the same with shifts half a patch longer (72 px for 224 / 16): every
                    ROI cell centre then lies on a border between two of the window's cells (the
                    right / lower one is taken): context and a misaligned grid, as a method whose
                    token grid does not line up with the ROI reference's gets.
  global fidelity   cosine between the global reference's mean-pooled tokens and the method's
                    pixel-area-weighted mean of the coarsest token covering each pixel.
  class cosine      cosine between class tokens (the pooled output for towers without one, e.g.
                    SigLIP's attention-pool head).
  top-1 / top-5     (towers with a classifier head) the method's argmax class equals the global
                    reference's argmax / lies within its top 5; a count over scenes.
  encoder ms        the median over --repeats rounds of the wall time of all encoder calls of the
                    method for one image (AnyRes: base view + every tile, one call each).
  tokens            tokens handed on.
  OCR               Tesseract character accuracy of the queried text in "what the model sees"
                    (each token's pixels stretched over its box, finer over coarser), on
                    text scenes (bench/eval/scenes.py's snippets on photos; bench/eval/eval.py's
                    OCR and scoring).

Methods (same budget B, default 2 G^2):
  base     the global reference itself (G^2 tokens): a VLM's plain resize.
  uniform  fovea.tokenize(img, budget=B, uniform=True, model=m): the grid that fits B tokens.
  anyres   LLaVA-NeXT style: the base view plus every native S x S tile of the full-resolution
           image (ceil(W / S) x ceil(H / S) tiles, the last row / column clamped into the image),
           each encoded as its own native image: (1 + tiles) G^2 tokens.
  mixed    fovea's foveated mode: fovea.tokenize(img, budget=B, fixations=[(x, y, r)], model=m),
           one sequence mixing mip levels, positions interpolated.
  warp     pixel-space foveated warp (an experiment): one S x S image sampled from the original
           through a radial magnification about the fixation (full resolution inside the fixation
           radius, the periphery compressed so the whole image stays in view), encoded once.
  windows  fovea's windows foveation: fovea.tokenize(..., foveation="windows", model=m); skipped
           with a note while the installed module does not take foveation=.

Scenes: twelve photographs (skimage's data directory and matplotlib's sample data; no
photographs ship with Debian's opencv-data) centre-cropped square and resized (Lanczos) to each
size, each with a hand-picked fixation on its main object; the same photos without a query (no
fixation: ROI metrics n/a, the query-dependent methods run again); and text scenes for OCR.

Outputs: one table on stdout, --json (everything, per scene), --plot (bar chart of the summary
plus what each method sees in one scene). Progress on stderr. Bad input: one
"fidelity: error: ..." line, exit status 1.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PROG = "fidelity"

SKIMAGE_DATA = "/usr/lib/python3/dist-packages/skimage/data"
MPL_DATA = "/usr/share/matplotlib/mpl-data/sample_data"

# (name, file, fixation x, y, radius as fractions of the square-cropped image's side): the main
# object of each photo, picked by hand on the centre-cropped square.
PHOTOS = [
    ("astronaut", f"{SKIMAGE_DATA}/astronaut.png", 0.43, 0.20, 0.09),        # her face
    ("chelsea", f"{SKIMAGE_DATA}/chelsea.png", 0.33, 0.34, 0.10),           # the cat's eye
    ("coffee", f"{SKIMAGE_DATA}/coffee.png", 0.50, 0.34, 0.17),             # the cup
    ("rocket", f"{SKIMAGE_DATA}/rocket.jpg", 0.50, 0.57, 0.12),             # the rocket
    ("motorcycle", f"{SKIMAGE_DATA}/motorcycle_left.png", 0.50, 0.58, 0.15),  # the engine
    ("retina", f"{SKIMAGE_DATA}/retina.jpg", 0.15, 0.45, 0.07),             # the optic disc
    ("ihc", f"{SKIMAGE_DATA}/ihc.png", 0.59, 0.73, 0.12),                   # a round gland
    ("camera", f"{SKIMAGE_DATA}/camera.png", 0.55, 0.24, 0.10),             # head and camera
    ("horse", f"{SKIMAGE_DATA}/horse.png", 0.88, 0.16, 0.10),               # the horse's head
    ("coins", f"{SKIMAGE_DATA}/coins.png", 0.56, 0.36, 0.07),               # one coin
    ("hopper", f"{MPL_DATA}/grace_hopper.jpg", 0.48, 0.35, 0.12),           # her face
    ("gift", f"{MPL_DATA}/Minduka_Present_Blue_Pack.png", 0.50, 0.19, 0.10),  # the bow
]
# Held-out photos (--held-out): never looked at while the placement was designed; the fixation
# is the centre (no object picked), so their ROI numbers are of an arbitrary window.
HELD_OUT = [
    ("brick", f"{SKIMAGE_DATA}/brick.png", 0.5, 0.5, 0.1),
    ("grass", f"{SKIMAGE_DATA}/grass.png", 0.5, 0.5, 0.1),
    ("gravel", f"{SKIMAGE_DATA}/gravel.png", 0.5, 0.5, 0.1),
    ("hubble", f"{SKIMAGE_DATA}/hubble_deep_field.jpg", 0.5, 0.5, 0.1),
    ("moon", f"{SKIMAGE_DATA}/moon.png", 0.5, 0.5, 0.1),
    ("cell", f"{SKIMAGE_DATA}/cell.png", 0.5, 0.5, 0.1),
    ("microaneurysms", f"{SKIMAGE_DATA}/microaneurysms.png", 0.5, 0.5, 0.1),
    ("motorcycle_right", f"{SKIMAGE_DATA}/motorcycle_right.png", 0.5, 0.5, 0.1),
    ("clock", f"{SKIMAGE_DATA}/clock_motion.png", 0.5, 0.5, 0.1),
    ("phantom", f"{SKIMAGE_DATA}/phantom.png", 0.5, 0.5, 0.1),
    ("color", f"{SKIMAGE_DATA}/color.png", 0.5, 0.5, 0.1),
    ("logo", f"{MPL_DATA}/logo2.png", 0.5, 0.5, 0.1),
]
QUICK_PHOTOS = 2
METHODS = ["base", "uniform", "anyres", "mixed", "warp", "windows"]
QUERY_METHODS = {"mixed", "warp", "windows"}  # results depend on the fixation
# OCR scenes: the queried text's cap-to-descender size in pixels (absolute, at every size).
OCR_TEXT_PX = [10, 12, 16, 20]
OCR_SEED = 7


class HarnessError(Exception):
    """Bad input: printed as one 'fidelity: error: ...' line, exit status 1."""


def log(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def import_fovea():
    """The fovea module: from PYTHONPATH, else from the repository's build/python."""
    try:
        import fovea
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "build", "python"))
        try:
            import fovea
        except ImportError as e:
            raise HarnessError(f"cannot import the fovea module ({e}); build it (scripts/build.sh) and run with "
                               "PYTHONPATH=build/python /usr/bin/python3") from None
    return fovea


# ---------------------------------------------------------------------------------------------
# the tower


@dataclass
class Enc:
    features: np.ndarray            # [N, D] float32
    cls: Optional[np.ndarray]       # [D] class token (pooled output for towers without one)
    logits: Optional[np.ndarray]    # [K]


class Tower:
    """A fovea.Model with its native geometry and preprocessing, encoding native images."""

    def __init__(self, fovea, model, threads: int):
        self.fovea = fovea
        self.model = model
        self.threads = threads
        self.precision = "fp32"
        cfg = model.config
        self.config = cfg
        self.P = int(cfg["patch_size"])
        self.G = int(cfg["position_grid"])
        self.S = int(cfg["native_size"])
        if self.S != self.G * self.P:
            raise HarnessError(f"native size {self.S} is not the position grid {self.G} x patch {self.P}")
        self.mean = np.asarray(cfg["mean"], np.float32)
        self.std = np.asarray(cfg["std"], np.float32)
        c = (np.arange(self.G, dtype=np.float32) * self.P + self.P / 2)
        pos = np.zeros((self.G * self.G, 4), np.float32)
        pos[:, 0] = np.tile(c, self.G)
        pos[:, 1] = np.repeat(c, self.G)
        pos[:, 2] = self.P
        self.native_positions = pos
        self.cls_kind = ("class token" if cfg.get("class_token") else
                         "pooled output" if cfg.get("attention_pool") else "n/a (no class token, no pooled output)")

    def patches(self, img: np.ndarray) -> np.ndarray:
        """[G^2, 3, P, P] float32 of an S x S x 3 uint8 image, normalised with the model's mean/std,
        raster order."""
        S, P, G = self.S, self.P, self.G
        assert img.shape == (S, S, 3), img.shape
        x = (img.astype(np.float32) / np.float32(255) - self.mean) / self.std
        return np.ascontiguousarray(x.reshape(G, P, G, P, 3).transpose(0, 2, 4, 1, 3).reshape(G * G, 3, P, P))

    def _enc(self, e) -> Enc:
        cls = e.class_token if e.class_token is not None else e.pooled
        return Enc(np.asarray(e.embeddings), None if cls is None else np.asarray(cls).reshape(-1),
                   None if e.logits is None else np.asarray(e.logits).reshape(-1))

    def encode_native(self, img: np.ndarray) -> Enc:
        e = self.model.encode_full(self.patches(img), threads=self.threads, positions=self.native_positions,
                                   image_size=(self.S, self.S))
        return self._enc(e)

    def encode_tokens(self, tokens) -> Enc:
        return self._enc(self.model.encode_full(tokens, precision=self.precision, threads=self.threads))


def area_resize(img: np.ndarray, w: int, h: int) -> np.ndarray:
    """Area (box) filter resize, PIL Image.BOX."""
    if img.shape[1] == w and img.shape[0] == h:
        return img
    return np.asarray(Image.fromarray(img).resize((w, h), Image.BOX))


def timed(calls: List[Callable[[], object]], repeats: int) -> Tuple[List[object], float]:
    """Runs every call `repeats` times; returns the first round's results and the median over the
    rounds of the summed wall time (ms)."""
    first, totals = None, []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = [c() for c in calls]
        totals.append(1000 * (time.perf_counter() - t0))
        if first is None:
            first = out
    return first, float(np.median(totals))


# ---------------------------------------------------------------------------------------------
# scene geometry


@dataclass
class Scene:
    name: str
    image: np.ndarray                                   # [H, W, 3] uint8
    fixation: Optional[Tuple[float, float, float]]      # x, y, radius (px) or None (no query)
    ocr: Optional[dict] = None                          # {"text", "box"} for text scenes

    @property
    def size(self) -> Tuple[int, int]:
        return self.image.shape[1], self.image.shape[0]


def roi_origin(tower: Tower, scene: Scene) -> Tuple[int, int]:
    W, H = scene.size
    fx, fy, _ = scene.fixation
    S = tower.S
    return (int(min(max(round(fx - S / 2), 0), W - S)), int(min(max(round(fy - S / 2), 0), H - S)))


def roi_cells(tower: Tower, scene: Scene, origin: Tuple[int, int]) -> Tuple[np.ndarray, np.ndarray]:
    """Indices (into the ROI reference's G^2 tokens) and image-pixel centres [K, 2] of the ROI
    reference's cells whose centre lies within the fixation radius. A radius smaller than half a
    patch still takes the cell under the fixation."""
    fx, fy, r = scene.fixation
    c = tower.native_positions[:, :2].astype(np.float64) + np.asarray(origin, np.float64)
    d = np.hypot(c[:, 0] - fx, c[:, 1] - fy)
    idx = np.nonzero(d <= r)[0]
    if idx.size == 0:
        idx = np.array([int(np.argmin(d))])
    return idx, c[idx]


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of [K, D] arrays (or of two vectors), float64."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    num = (a * b).sum(-1)
    den = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return num / np.maximum(den, 1e-30)


# ---------------------------------------------------------------------------------------------
# method results and how their tokens cover the image


@dataclass
class Result:
    method: str
    tokens: int
    seen: Optional[np.ndarray]                          # [H, W, 3] uint8 "what the model sees"
    features: Optional[np.ndarray] = None               # [N, D]
    boxes: Optional[np.ndarray] = None                  # [N, 4] x0, y0, x1, y1 in image px
    locate: Optional[Callable[[np.ndarray], np.ndarray]] = None  # image points [K, 2] -> token index
    cls: Optional[np.ndarray] = None
    logits: Optional[np.ndarray] = None
    encode_ms: Optional[float] = None
    prep_ms: Optional[float] = None
    note: str = ""

    def finest_at(self, pts: np.ndarray) -> np.ndarray:
        """Index of the finest token covering each point (smallest side whose box contains it)."""
        if self.locate is not None:
            return self.locate(pts)
        b = self.boxes.astype(np.float64)
        side = np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1])
        x, y = pts[:, 0:1], pts[:, 1:2]
        inside = (b[None, :, 0] <= x) & (x < b[None, :, 2]) & (b[None, :, 1] <= y) & (y < b[None, :, 3])
        cost = np.where(inside, side[None, :], np.inf)
        idx = np.argmin(cost, axis=1)
        if not np.all(np.isfinite(cost[np.arange(len(idx)), idx])):
            raise RuntimeError(f"{self.method}: a point is covered by no token")
        return idx

    def coarsest_weights(self, W: int, H: int) -> Tuple[np.ndarray, float]:
        """Per-token count of the image pixels (centres) whose coarsest covering token it is, and
        the fraction of pixels covered at all."""
        n = len(self.features)
        if self.locate is not None:
            ys, xs = np.mgrid[0:H, 0:W]
            pts = np.stack([xs.ravel() + 0.5, ys.ravel() + 0.5], 1)
            idx = self.locate(pts)
            return np.bincount(idx, minlength=n).astype(np.float64), 1.0
        b = self.boxes.astype(np.float64)
        side = np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1])
        owner = np.full((H, W), -1, np.int64)
        # Pixel x (centre x + 0.5) lies in [x0, x1) when ceil(x0 - 0.5) <= x < ceil(x1 - 0.5).
        e = np.ceil(b - 0.5).astype(np.int64)
        e[:, [0, 2]] = np.clip(e[:, [0, 2]], 0, W)
        e[:, [1, 3]] = np.clip(e[:, [1, 3]], 0, H)
        for i in np.argsort(side, kind="stable"):   # finest first: coarser tokens paint over
            x0, y0, x1, y1 = e[i]
            owner[y0:y1, x0:x1] = i
        covered = owner >= 0
        return np.bincount(owner[covered], minlength=n).astype(np.float64), float(covered.mean())


def paint_seen(W: int, H: int, layers: List[Tuple[np.ndarray, Tuple[int, int, int, int]]]) -> np.ndarray:
    """What the model sees for native-image layers: each layer's S x S pixels stretched
    (bilinearly) over its box (x0, y0, x1, y1), later layers over earlier ones (finer last)."""
    import cv2
    out = np.zeros((H, W, 3), np.uint8)
    for pix, (x0, y0, x1, y1) in layers:
        w, h = x1 - x0, y1 - y0
        patch = pix if pix.shape[:2] == (h, w) else cv2.resize(pix, (w, h), interpolation=cv2.INTER_LINEAR)
        out[y0:y1, x0:x1] = patch
    return out


def native_boxes(tower: Tower, x0: float, y0: float, w: float, h: float) -> np.ndarray:
    """The G^2 cell boxes of a native image laid over the image rectangle (x0, y0, w, h)."""
    G = tower.G
    gx = x0 + np.arange(G + 1) * (w / G)
    gy = y0 + np.arange(G + 1) * (h / G)
    i, j = np.tile(np.arange(G), G), np.repeat(np.arange(G), G)
    return np.stack([gx[i], gy[j], gx[i + 1], gy[j + 1]], 1).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# methods: each returns a Result for one scene (encode=False: only the tokens and the seen image)


@dataclass
class Ctx:
    tower: Tower
    budget: int
    repeats: int
    encode: bool = True
    global_ref: Optional[Enc] = None   # reused by "base"


def m_base(ctx: Ctx, scene: Scene) -> Result:
    tw = ctx.tower
    W, H = scene.size
    t0 = time.perf_counter()
    small = area_resize(scene.image, tw.S, tw.S)
    prep = 1000 * (time.perf_counter() - t0)
    r = Result("base", tw.G ** 2, paint_seen(W, H, [(small, (0, 0, W, H))]),
               boxes=native_boxes(tw, 0, 0, W, H), prep_ms=prep)
    if ctx.encode:
        (e,), r.encode_ms = timed([lambda: tw.encode_native(small)], ctx.repeats)
        r.features, r.cls, r.logits = e.features, e.cls, e.logits
    return r


def _from_tokens(name: str, ctx: Ctx, scene: Scene, **kw) -> Result:
    tw = ctx.tower
    t0 = time.perf_counter()
    t = tw.fovea.tokenize(scene.image, budget=ctx.budget, model=tw.model, threads=tw.threads, **kw)
    prep = 1000 * (time.perf_counter() - t0)
    r = Result(name, len(t), np.asarray(t.seen(threads=tw.threads)), boxes=np.asarray(t.boxes), prep_ms=prep)
    if ctx.encode:
        (e,), r.encode_ms = timed([lambda: tw.encode_tokens(t)], ctx.repeats)
        r.features, r.cls, r.logits = e.features, e.cls, e.logits
    return r


def m_uniform(ctx: Ctx, scene: Scene) -> Result:
    return _from_tokens("uniform", ctx, scene, uniform=True)


def m_mixed(ctx: Ctx, scene: Scene) -> Result:
    fix = [tuple(scene.fixation)] if scene.fixation else []
    # The mixed foveation by name: with model= a checkpoint's default is windows.
    kw = {"foveation": "mixed"} if windows_available(ctx.tower.fovea) else {}
    r = _from_tokens("mixed", ctx, scene, fixations=fix, **kw)
    if not fix:
        r.note = "no query: bottom-up foveation"
    return r


def anyres_tiles(tower: Tower, W: int, H: int) -> List[Tuple[int, int]]:
    """Origins of the native S x S tiles covering the image: ceil(W/S) x ceil(H/S), the last
    column / row clamped into the image (overlapping its neighbour when S does not divide)."""
    S = tower.S
    xs = [min(i * S, W - S) for i in range(-(-W // S))]
    ys = [min(j * S, H - S) for j in range(-(-H // S))]
    return [(x, y) for y in ys for x in xs]


def m_anyres(ctx: Ctx, scene: Scene) -> Result:
    tw = ctx.tower
    S = tw.S
    W, H = scene.size
    t0 = time.perf_counter()
    base = area_resize(scene.image, S, S)
    origins = anyres_tiles(tw, W, H)
    tiles = [np.ascontiguousarray(scene.image[y:y + S, x:x + S]) for x, y in origins]
    prep = 1000 * (time.perf_counter() - t0)
    boxes = [native_boxes(tw, 0, 0, W, H)] + [native_boxes(tw, x, y, S, S) for x, y in origins]
    layers = [(base, (0, 0, W, H))] + [(t, (x, y, x + S, y + S)) for t, (x, y) in zip(tiles, origins)]
    r = Result("anyres", (1 + len(origins)) * tw.G ** 2, paint_seen(W, H, layers),
               boxes=np.concatenate(boxes), prep_ms=prep, note=f"{len(origins)} tiles")
    if ctx.encode:
        calls = [lambda im=im: tw.encode_native(im) for im in [base] + tiles]
        encs, r.encode_ms = timed(calls, ctx.repeats)
        r.features = np.concatenate([e.features for e in encs])
        r.cls, r.logits = encs[0].cls, encs[0].logits  # the base view's, as LLaVA-NeXT's
    return r


# ---- warp -------------------------------------------------------------------------------------


def _ray_exit(px, py, dx, dy, X, Y):
    """Distance from (px, py) inside [0, X] x [0, Y] to its border along the unit direction (dx, dy)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        tx = np.where(dx > 0, (X - px) / dx, np.where(dx < 0, -px / dx, np.inf))
        ty = np.where(dy > 0, (Y - py) / dy, np.where(dy < 0, -py / dy, np.inf))
    return np.minimum(tx, ty)


class RadialWarp:
    """A radial magnification about the fixation, mapping the S x S output onto the whole image.

    Output point o, fovea centre c (output px), fixation f (image px). Along each ray from c at
    angle t the output runs beta(t) px to the output's border and the image, from f at the same
    angle, B(t) px to the image's border. With rho = |o - c| / beta in [0, 1], the image point is
    f + u(t) B(t) s(rho), where s(0) = 0, s(1) = 1 (border to border: the whole image stays in
    view) and
        s(rho) = m rho                        for rho <= rho0  (m = beta / B: one image pixel per
                                                                output pixel, full resolution)
        s(rho) = m rho + k (rho - rho0)^2     beyond, k = (1 - m) / (1 - rho0)^2 (C1, monotone),
    rho0 = min(radius / beta, 1/2): full resolution over the fixation radius, at most half of each
    ray. c is about f S / (W, H), moved by under a patch so that f - c is a whole number of pixels
    and the output's patch grid lines up with the ROI reference's cells: inside the fovea the
    output's pixels are the image's own.
    """

    def __init__(self, tower: Tower, W: int, H: int, fixation, roi_origin_xy):
        S, P = tower.S, tower.P
        self.S, self.P, self.G, self.W, self.H = S, P, tower.G, W, H
        fx, fy, r = fixation
        self.f = np.array([fx, fy], np.float64)
        c = []
        for fv, ov, Z in ((fx, roi_origin_xy[0], W), (fy, roi_origin_xy[1], H)):
            # c = f - (origin + P n): the ROI reference's cells at whole output cells
            n = round((fv - ov - fv * S / Z) / P)
            cv = fv - ov - P * n
            while cv <= 0:
                cv += P
            while cv >= S:
                cv -= P
            c.append(cv)
        self.c = np.array(c, np.float64)
        self.radius = max(float(r), 0.0)

    def _rays(self, theta):
        dx, dy = np.cos(theta), np.sin(theta)
        beta = _ray_exit(self.c[0], self.c[1], dx, dy, self.S, self.S)
        B = _ray_exit(self.f[0], self.f[1], dx, dy, self.W, self.H)
        m = np.clip(beta / np.maximum(B, 1e-9), 1e-6, 1.0)
        rho0 = np.clip(self.radius / np.maximum(beta, 1e-9), 0.0, 0.5)
        k = (1.0 - m) / (1.0 - rho0) ** 2
        return dx, dy, beta, B, m, rho0, k

    def forward(self, o: np.ndarray) -> np.ndarray:
        """Output points [K, 2] -> image points [K, 2]."""
        d = o - self.c
        theta = np.arctan2(d[:, 1], d[:, 0])
        dx, dy, beta, B, m, rho0, k = self._rays(theta)
        rho = np.clip(np.hypot(d[:, 0], d[:, 1]) / np.maximum(beta, 1e-9), 0.0, 1.0)
        s = m * rho + k * np.maximum(rho - rho0, 0.0) ** 2
        return np.stack([self.f[0] + dx * B * s, self.f[1] + dy * B * s], 1)

    def inverse(self, q: np.ndarray) -> np.ndarray:
        """Image points [K, 2] -> output points [K, 2]."""
        d = q - self.f
        theta = np.arctan2(d[:, 1], d[:, 0])
        dx, dy, beta, B, m, rho0, k = self._rays(theta)
        s = np.clip(np.hypot(d[:, 0], d[:, 1]) / np.maximum(B, 1e-9), 0.0, 1.0)
        lin = s <= m * rho0
        # k t^2 + m t + (m rho0 - s) = 0, t = rho - rho0 >= 0
        disc = np.maximum(m * m - 4 * k * (m * rho0 - s), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(k > 1e-12, (-m + np.sqrt(disc)) / (2 * np.where(k > 1e-12, k, 1.0)), (s - m * rho0) / m)
        rho = np.where(lin, s / m, rho0 + t)
        return np.stack([self.c[0] + dx * beta * rho, self.c[1] + dy * beta * rho], 1)

    def cell_of(self, q: np.ndarray) -> np.ndarray:
        o = self.inverse(q)
        cx = np.clip(np.floor(o[:, 0] / self.P), 0, self.G - 1).astype(np.int64)
        cy = np.clip(np.floor(o[:, 1] / self.P), 0, self.G - 1).astype(np.int64)
        return cy * self.G + cx

    def render(self, img: np.ndarray) -> np.ndarray:
        """The S x S warped image: each output pixel samples the image at forward(centre), from the
        mip level of its local footprint (trilinear between two levels of an area-filter pyramid)."""
        import cv2
        S = self.S
        ys, xs = np.mgrid[0:S, 0:S]
        o = np.stack([xs.ravel() + 0.5, ys.ravel() + 0.5], 1)
        q = self.forward(o).reshape(S, S, 2)
        # footprint: the larger of the two output-axis derivatives' lengths, image px per output px
        gx = np.gradient(q, axis=1)
        gy = np.gradient(q, axis=0)
        foot = np.maximum(np.hypot(gx[..., 0], gx[..., 1]), np.hypot(gy[..., 0], gy[..., 1]))
        lod = np.log2(np.maximum(foot, 1.0))
        top = int(np.ceil(lod.max())) + 1
        levels = [img]
        while len(levels) < top + 1 and min(levels[-1].shape[:2]) > 1:
            h, w = levels[-1].shape[:2]
            levels.append(np.asarray(Image.fromarray(levels[-1]).resize((max(1, w // 2), max(1, h // 2)), Image.BOX)))
        samples = []
        for li, lev in enumerate(levels):
            sx = lev.shape[1] / self.W
            sy = lev.shape[0] / self.H
            mx = (q[..., 0] * sx - 0.5).astype(np.float32)
            my = (q[..., 1] * sy - 0.5).astype(np.float32)
            samples.append(cv2.remap(lev, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT).astype(np.float32))
        lod = np.minimum(lod, len(levels) - 1)
        l0 = np.floor(lod).astype(np.int64)
        frac = (lod - l0)[..., None]
        stack = np.stack(samples)  # [L, S, S, 3]
        a = np.take_along_axis(stack, l0[None, ..., None].repeat(3, -1), 0)[0]
        b = np.take_along_axis(stack, np.minimum(l0 + 1, len(levels) - 1)[None, ..., None].repeat(3, -1), 0)[0]
        return np.clip(np.rint(a * (1 - frac) + b * frac), 0, 255).astype(np.uint8)

    def unwarp(self, out: np.ndarray) -> np.ndarray:
        """What the model sees in image space: the warped image sampled (bilinearly) at every
        image pixel's output position."""
        import cv2
        ys, xs = np.mgrid[0:self.H, 0:self.W]
        q = np.stack([xs.ravel() + 0.5, ys.ravel() + 0.5], 1)
        o = self.inverse(q).reshape(self.H, self.W, 2)
        return cv2.remap(out, (o[..., 0] - 0.5).astype(np.float32), (o[..., 1] - 0.5).astype(np.float32),
                         cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def m_warp(ctx: Ctx, scene: Scene) -> Result:
    tw = ctx.tower
    W, H = scene.size
    if scene.fixation is None:
        return Result("warp", 0, None, note="no query: nothing to magnify (n/a)")
    t0 = time.perf_counter()
    warp = RadialWarp(tw, W, H, scene.fixation, roi_origin(tw, scene))
    out = warp.render(scene.image)
    prep = 1000 * (time.perf_counter() - t0)
    r = Result("warp", tw.G ** 2, warp.unwarp(out), locate=warp.cell_of, prep_ms=prep)
    r.warped = out  # type: ignore[attr-defined]
    if ctx.encode:
        (e,), r.encode_ms = timed([lambda: tw.encode_native(out)], ctx.repeats)
        r.features, r.cls, r.logits = e.features, e.cls, e.logits
    return r


# ---- windows ----------------------------------------------------------------------------------


def windows_available(fovea) -> bool:
    try:
        return "foveation" in inspect.signature(fovea.tokenize).parameters
    except (TypeError, ValueError):
        return False


WINDOWS_MISSING = ("skipped: the installed fovea module's tokenize() takes no foveation= (the windows "
                   "foveation is not in this build)")


def windows_result(ctx: Ctx, scene: Scene, t, e) -> Result:
    """The windows foveation's Tokens `t` and Encoding `e` as the harness's Result. The encoding
    holds the kept tokens (those no finer window covers), and e.rows names their rows of `t`, so
    their boxes (image pixels) are t.boxes[e.rows]. The class token and logits are the base view's
    (a whole-image encode at the native size); the seen image paints finer windows over coarser."""
    feats = np.asarray(e.embeddings)
    rows = np.arange(len(t)) if e.rows is None else np.asarray(e.rows)
    boxes = np.asarray(t.boxes)[rows]
    cls = e.class_token if e.class_token is not None else e.pooled
    cls = None if cls is None else np.asarray(cls)[0].reshape(-1)
    logits = None if e.logits is None else np.asarray(e.logits)[0].reshape(-1)
    return Result("windows", len(feats), np.asarray(t.seen(threads=ctx.tower.threads)), features=feats,
                  boxes=np.asarray(boxes, np.float32), cls=cls, logits=logits)


def m_windows(ctx: Ctx, scene: Scene) -> Result:
    tw = ctx.tower
    if not windows_available(tw.fovea):
        return Result("windows", 0, None, note=WINDOWS_MISSING)
    fix = [tuple(scene.fixation)] if scene.fixation else []
    t0 = time.perf_counter()
    t = tw.fovea.tokenize(scene.image, budget=ctx.budget, fixations=fix, foveation="windows", model=tw.model,
                          threads=tw.threads)
    prep = 1000 * (time.perf_counter() - t0)
    if not ctx.encode:
        kept = np.asarray(t.covered) == 0
        return Result("windows", int(kept.sum()), np.asarray(t.seen(threads=tw.threads)),
                      boxes=np.asarray(t.boxes)[kept], prep_ms=prep)
    (e,), ms = timed([lambda: tw.model.encode_full(t, precision=tw.precision, threads=tw.threads)], ctx.repeats)
    r = windows_result(ctx, scene, t, e)
    r.encode_ms, r.prep_ms = ms, prep
    return r


METHOD_FUNCS = {"base": m_base, "uniform": m_uniform, "anyres": m_anyres, "mixed": m_mixed, "warp": m_warp,
                "windows": m_windows}


# ---------------------------------------------------------------------------------------------
# one scene


def noise_floor(tower: Tower, scene: Scene, origin, ref: Enc, cells, pts, shift: int,
                aligned: bool = True) -> Optional[dict]:
    """Cosine of the ROI cells between the ROI reference and windows shifted by +-shift px in x
    and in y, clamped into the image; aligned: the clamped shift kept to whole patches (zero
    shifts left out), else as it comes. A cell's feature in a shifted window is that of the
    window's cell containing the cell centre."""
    W, H = scene.size
    S, P = tower.S, tower.P
    out = []
    for dx, dy in ((shift, 0), (-shift, 0), (0, shift), (0, -shift)):
        sx = min(max(origin[0] + dx, 0), W - S) - origin[0]
        sy = min(max(origin[1] + dy, 0), H - S) - origin[1]
        if aligned:
            sx = int(math.copysign(P * (abs(sx) // P), sx))
            sy = int(math.copysign(P * (abs(sy) // P), sy))
        if sx == 0 and sy == 0:
            continue
        ox, oy = origin[0] + sx, origin[1] + sy
        e = tower.encode_native(np.ascontiguousarray(scene.image[oy:oy + S, ox:ox + S]))
        lx = np.floor((pts[:, 0] - ox) / P).astype(np.int64)
        ly = np.floor((pts[:, 1] - oy) / P).astype(np.int64)
        ok = (lx >= 0) & (lx < tower.G) & (ly >= 0) & (ly < tower.G)
        if not ok.any():
            continue
        c = cosine(ref.features[cells[ok]], e.features[ly[ok] * tower.G + lx[ok]])
        out.append({"shift": [int(sx), int(sy)], "cells": int(ok.sum()), "cosine": float(c.mean())})
    if not out:
        return None
    return {"mean": float(np.mean([o["cosine"] for o in out])), "shifts": out}


def score(tower: Tower, scene: Scene, r: Result, gref: Enc, gmean: np.ndarray,
          roi: Optional[Tuple[Enc, np.ndarray, np.ndarray]]) -> dict:
    W, H = scene.size
    rec = {"tokens": int(r.tokens), "encode_ms": r.encode_ms, "prep_ms": r.prep_ms}
    if r.note:
        rec["note"] = r.note
    if r.features is None:
        return rec
    if len(r.features) != r.tokens:
        raise RuntimeError(f"{r.method}: {len(r.features)} features for {r.tokens} tokens")
    wts, covered = r.coarsest_weights(W, H)
    pooled = (wts[:, None] * r.features.astype(np.float64)).sum(0) / max(wts.sum(), 1)
    rec["global_fidelity"] = float(cosine(pooled, gmean))
    rec["coverage"] = covered
    if r.cls is not None and gref.cls is not None:
        rec["cls_cosine"] = float(cosine(r.cls, gref.cls))
    if r.logits is not None and gref.logits is not None:
        top = int(np.argmax(r.logits))
        ref5 = np.argsort(-gref.logits)[:5]
        rec["top1"] = top
        rec["top1_agree"] = bool(top == int(ref5[0]))
        rec["top5_agree"] = bool(top in set(int(v) for v in ref5))
    if roi is not None:
        ref, cells, pts = roi
        idx = r.finest_at(pts)
        rec["roi_fidelity"] = float(cosine(ref.features[cells], r.features[idx]).mean())
        if r.boxes is not None:  # how far the covering tokens sit from the ROI cells (0: same grid)
            b = r.boxes[idx].astype(np.float64)
            centre = np.stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2], 1)
            rec["roi_offset_px"] = float(np.hypot(*(centre - pts).T).mean())
            rec["roi_token_side_px"] = float(np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]).mean())
    return rec


def evaluate_scene(ctx: Ctx, scene: Scene, methods: Sequence[str], no_query: bool = True) -> dict:
    """References, noise floor and every method's scores for one scene (with its fixation), plus
    (no_query) the query-dependent methods again without it."""
    tw = ctx.tower
    W, H = scene.size
    gimg = area_resize(scene.image, tw.S, tw.S)
    gref = tw.encode_native(gimg)
    gmean = gref.features.astype(np.float64).mean(0)
    rec = {"name": scene.name, "size": [W, H], "fixation": list(scene.fixation) if scene.fixation else None}
    roi = None
    if scene.fixation is not None:
        origin = roi_origin(tw, scene)
        rref = tw.encode_native(np.ascontiguousarray(scene.image[origin[1]:origin[1] + tw.S,
                                                                 origin[0]:origin[0] + tw.S]))
        cells, pts = roi_cells(tw, scene, origin)
        roi = (rref, cells, pts)
        shift = tw.P * max(1, int(math.floor(tw.G / 4 + 0.5)))
        rec.update({"roi_origin": list(origin), "roi_cells": int(len(cells)), "floor_shift_px": shift,
                    "noise_floor": noise_floor(tw, scene, origin, rref, cells, pts, shift),
                    # the same half a patch off the grid: what a misaligned token grid adds
                    "noise_floor_offgrid": noise_floor(tw, scene, origin, rref, cells, pts, shift + tw.P // 2,
                                                       aligned=False)})
    if gref.logits is not None:
        rec["reference_top1"] = int(np.argmax(gref.logits))
    ctx.global_ref = gref
    rec["methods"] = {}
    for m in methods:
        r = METHOD_FUNCS[m](ctx, scene)
        rec["methods"][m] = score(tw, scene, r, gref, gmean, roi)
    if no_query and scene.fixation is not None:
        nq = Scene(scene.name, scene.image, None)
        rec["no_query"] = {}
        for m in methods:
            if m in QUERY_METHODS:
                r = METHOD_FUNCS[m](ctx, nq)
                rec["no_query"][m] = score(tw, nq, r, gref, gmean, None)
    return rec


# ---------------------------------------------------------------------------------------------
# scenes


def eval_module(name: str):
    """bench/eval's scenes.py (the photos' loading and the text snippets) or eval.py (Tesseract)."""
    d = os.path.join(HERE, "eval")
    if d not in sys.path:
        sys.path.insert(0, d)
    return importlib.import_module(name)


def load_rgb(path: str) -> Image.Image:
    return eval_module("scenes").load_rgb(path)


def square(im: Image.Image, size: int) -> np.ndarray:
    """Centre-crop square, then resize (Lanczos) to size x size."""
    s = min(im.size)
    x0, y0 = (im.width - s) // 2, (im.height - s) // 2
    return np.asarray(im.crop((x0, y0, x0 + s, y0 + s)).resize((size, size), Image.LANCZOS))


def photo_scenes(size: int, count: int) -> List[Scene]:
    out = []
    for name, path, fx, fy, fr in PHOTOS[:count]:
        if not os.path.exists(path):
            log(f"{name}: {path} missing, left out")
            continue
        img = square(load_rgb(path), size)
        out.append(Scene(name, img, (float(round(fx * size)), float(round(fy * size)), float(fr * size))))
    return out


def ocr_scenes(size: int, count: int, seed: Optional[int] = None,
               legible: Optional[Callable[[np.ndarray, dict], bool]] = None, tries: int = 8) -> List[Scene]:
    """Text scenes: one queried snippet (OCR_TEXT_PX tall, absolute) and two others drawn with
    bench/eval/scenes.py onto the photos (from the end of the list, so other photos than the
    first fidelity scenes); fixation at the queried box centre, radius half its longer side.
    With `legible`, a scene is drawn again (other words, place, font, contrast) up to `tries`
    times until the full-resolution image passes it: then what a method loses is the method's."""
    scene_gen = eval_module("scenes")
    rng = np.random.default_rng((OCR_SEED if seed is None else seed) + size)
    out = []
    for i in range(count):
        name, path, *_ = PHOTOS[-1 - (i % len(PHOTOS))]
        if not os.path.exists(path):
            continue
        photo = square(load_rgb(path), size)
        px = OCR_TEXT_PX[i % len(OCR_TEXT_PX)]
        nominal = px * 1024 / size
        best = None
        for attempt in range(max(1, tries)):
            im = Image.fromarray(photo)
            snippets = scene_gen.draw_snippets(im, rng, [nominal, nominal * 1.5], nominal)
            if not snippets or snippets[0]["height_px"] != max(8, int(round(nominal * size / 1024))):
                continue
            s = snippets[0]
            x0, y0, x1, y1 = s["box"]
            fix = (float(round((x0 + x1) / 2)), float(round((y0 + y1) / 2)), 0.5 * max(x1 - x0, y1 - y0))
            best = Scene(f"text{i}-{name}", np.asarray(im), fix,
                         ocr={"text": s["text"], "box": s["box"], "height_px": s["height_px"], "draws": attempt + 1})
            if legible is None or legible(best.image, best.ocr):
                break
        if best is not None:
            out.append(best)
    return out


def run_ocr(ctx: Ctx, scene: Scene, methods: Sequence[str], tmpdir: str) -> dict:
    eval_mod = eval_module("eval")
    box = scene.ocr["box"]
    pad = max(4, int(round(0.3 * (box[3] - box[1]))))
    truth = scene.ocr["text"]
    rec = {"name": scene.name, "size": list(scene.size), "truth": truth, "box": box,
           "height_px": scene.ocr["height_px"], "draws": scene.ocr.get("draws", 1), "fixation": list(scene.fixation)}
    text = eval_mod.ocr(scene.image, box, pad, tmpdir)
    rec["ceiling"] = {"text": text, "accuracy": eval_mod.char_accuracy(text, truth)}
    rec["methods"] = {}
    enc, ctx.encode = ctx.encode, False
    try:
        for m in methods:
            r = METHOD_FUNCS[m](ctx, scene)
            if r.seen is None:
                rec["methods"][m] = {"note": r.note}
                continue
            text = eval_mod.ocr(np.ascontiguousarray(r.seen), box, pad, tmpdir)
            rec["methods"][m] = {"text": text, "accuracy": eval_mod.char_accuracy(text, truth), "tokens": r.tokens}
        # The query-dependent methods again with no query: bottom-up, where the detail is.
        nq = Scene(scene.name, scene.image, None, ocr=scene.ocr)
        rec["no_query"] = {}
        for m in methods:
            if m not in QUERY_METHODS or m == "warp":
                continue
            r = METHOD_FUNCS[m](ctx, nq)
            if r.seen is not None:
                text = eval_mod.ocr(np.ascontiguousarray(r.seen), box, pad, tmpdir)
                rec["no_query"][m] = {"text": text, "accuracy": eval_mod.char_accuracy(text, truth), "tokens": r.tokens}
    finally:
        ctx.encode = enc
    return rec


def legible(img: np.ndarray, o: dict, tmpdir: str, need: float = 0.9) -> bool:
    """The queried snippet reads (character accuracy >= need) at full resolution."""
    eval_mod = eval_module("eval")
    box = o["box"]
    text = eval_mod.ocr(img, box, max(4, int(round(0.3 * (box[3] - box[1])))), tmpdir)
    return eval_mod.char_accuracy(text, o["text"]) >= need


# ---------------------------------------------------------------------------------------------
# summary, table, plot


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def summarize(results: List[dict], ocr: List[dict], sizes: Sequence[int], methods: Sequence[str]) -> dict:
    out = {}
    for z in sizes:
        sc = [s for s in results if s["size"][0] == z]
        oc = [s for s in ocr if s["size"][0] == z]
        floors = [s["noise_floor"]["mean"] for s in sc if s.get("noise_floor")]
        offgrid = [s["noise_floor_offgrid"]["mean"] for s in sc if s.get("noise_floor_offgrid")]
        row = {"scenes": len(sc), "noise_floor": _mean(floors), "noise_floor_offgrid": _mean(offgrid),
               "ocr_scenes": len(oc),
               "ocr_ceiling": _mean([s["ceiling"]["accuracy"] for s in oc]), "methods": {}}
        for m in methods:
            recs = [s["methods"][m] for s in sc if m in s["methods"]]
            ran = [r for r in recs if "global_fidelity" in r]
            d = {"ran": len(ran)}
            notes = sorted({r["note"] for r in recs if r.get("note")})
            if notes:
                d["notes"] = notes
            if ran:
                for k in ("roi_fidelity", "global_fidelity", "cls_cosine", "encode_ms", "prep_ms", "tokens"):
                    vals = [r.get(k) for r in ran]
                    if k == "encode_ms":
                        d[k] = float(np.median([v for v in vals if v is not None])) if any(
                            v is not None for v in vals) else None
                    else:
                        d[k] = _mean(vals)
                for k in ("top1_agree", "top5_agree"):
                    v = [r[k] for r in ran if k in r]
                    d[k] = [int(sum(v)), len(v)] if v else None
                nq = [s["no_query"][m] for s in sc if m in s.get("no_query", {}) and
                      "global_fidelity" in s["no_query"][m]]
                if m in QUERY_METHODS and nq:
                    d["no_query"] = {"global_fidelity": _mean([r["global_fidelity"] for r in nq]),
                                     "cls_cosine": _mean([r.get("cls_cosine") for r in nq]),
                                     "tokens": _mean([r["tokens"] for r in nq]),
                                     "encode_ms": float(np.median([r["encode_ms"] for r in nq]))
                                     if all(r.get("encode_ms") is not None for r in nq) else None}
                    v = [r["top1_agree"] for r in nq if "top1_agree" in r]
                    d["no_query"]["top1_agree"] = [int(sum(v)), len(v)] if v else None
                    v = [r["top5_agree"] for r in nq if "top5_agree" in r]
                    d["no_query"]["top5_agree"] = [int(sum(v)), len(v)] if v else None
                    d["no_query"]["ocr"] = _mean([s["no_query"][m]["accuracy"] for s in oc
                                                  if "accuracy" in s.get("no_query", {}).get(m, {})])
            accs = [s["methods"][m]["accuracy"] for s in oc if "accuracy" in s["methods"].get(m, {})]
            d["ocr"] = _mean(accs)
            row["methods"][m] = d
        out[str(z)] = row
    return out


def _f(v, digits=3):
    return "n/a" if v is None else f"{v:.{digits}f}"


def _frac(v):
    return "n/a" if v is None else f"{v[0]}/{v[1]}"


def table(summary: dict, methods: Sequence[str], cls_kind: str) -> str:
    cols = ["size", "method", "tokens", "enc ms", "ROI fid", "global fid", "cls cos", "top-1", "top-5",
            "OCR"]
    rows = []
    for z, row in summary.items():
        rows.append([f"{z}²", "noise floor", "", "", _f(row["noise_floor"]), "", "", "", "",
                     _f(row["ocr_ceiling"], 2) + " (full res)" if row["ocr_ceiling"] is not None else ""])
        rows.append([f"{z}²", "floor, ½ patch off", "", "", _f(row["noise_floor_offgrid"]), "", "", "", "", ""])
        for m in methods:
            d = row["methods"][m]
            if not d["ran"]:
                rows.append([f"{z}²", m, "skipped (see the note below)", "", "", "", "", "", "", ""])
                continue
            rows.append([f"{z}²", m, f"{d['tokens']:.0f}", _f(d["encode_ms"], 1), _f(d["roi_fidelity"]),
                         _f(d["global_fidelity"]), _f(d["cls_cosine"]), _frac(d["top1_agree"]),
                         _frac(d["top5_agree"]), _f(d["ocr"], 2)])
        for m in methods:
            nq = row["methods"][m].get("no_query")
            if nq:
                rows.append([f"{z}²", f"{m} (no query)", f"{nq['tokens']:.0f}", _f(nq.get("encode_ms"), 1), "n/a",
                             _f(nq["global_fidelity"]),
                             _f(nq["cls_cosine"]), _frac(nq["top1_agree"]), _frac(nq["top5_agree"]),
                             _f(nq.get("ocr"), 2)])
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    out = [line(cols), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out) + f"\n(cls cos: {cls_kind}; top-1 / top-5: method's argmax = reference's argmax / within its top 5)"


def plot(path: str, summary: dict, methods: Sequence[str], sheet: Optional[Tuple[str, List[Tuple[str, np.ndarray]]]],
         title: str) -> None:
    """Top: the summary as bars per size (noise floor and the full-resolution OCR as lines);
    bottom: what each method sees in one scene."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = list(summary)
    ran = [m for m in methods if any(summary[z]["methods"][m]["ran"] for z in sizes)]
    metrics = [("roi_fidelity", "ROI fidelity"), ("global_fidelity", "global fidelity"),
               ("cls_cosine", "class-token cosine"), ("ocr", "OCR accuracy")]
    pics = sheet[1] if sheet else []
    fig = plt.figure(figsize=(max(16, 2.7 * len(pics)), 4.2 + (3.4 if pics else 0)))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.25, 1]) if pics else (fig, None)
    axes = top.subplots(1, len(metrics))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / max(1, len(ran))
    for ax, (key, label) in zip(axes, metrics):
        for i, m in enumerate(ran):
            vals = [summary[z]["methods"][m].get(key) for z in sizes]
            xs = [j + (i - (len(ran) - 1) / 2) * width for j in range(len(sizes))]
            ax.bar(xs, [np.nan if v is None else v for v in vals], width, label=m, color=colors[i % len(colors)])
        for j, z in enumerate(sizes):
            line = summary[z]["noise_floor"] if key == "roi_fidelity" else (
                summary[z]["ocr_ceiling"] if key == "ocr" else None)
            if line is not None:
                ax.hlines(line, j - 0.45, j + 0.45, colors="k", linestyles="--" if key != "ocr" else ":",
                          label=("noise floor" if key != "ocr" else "full res") if j == 0 else None)
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([f"{z}²" for z in sizes])
        ax.set_title(label, fontsize=10)
        ax.set_ylim(0, 1.05)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = [], []
    for ax in (axes[0], axes[-1]):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    top.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    top.subplots_adjust(bottom=0.2, top=0.85, wspace=0.25)
    top.suptitle(title, fontsize=10)
    if pics:
        bax = bottom.subplots(1, len(pics))
        for ax, (lab, pic) in zip(np.atleast_1d(bax), pics):
            ax.imshow(pic)
            ax.set_title(lab, fontsize=8)
            ax.axis("off")
        bottom.suptitle(f"what each method sees: {sheet[0]} (fixation circled; tokens of 2 patches and more outlined)",
                        fontsize=9)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def sheet_for(ctx: Ctx, scene: Scene, methods: Sequence[str]) -> Tuple[str, List[Tuple[str, np.ndarray]]]:
    """What each method sees in one scene (and the warp's own S x S image), fixation circled."""
    import cv2
    enc, ctx.encode = ctx.encode, False
    pics = []
    try:
        fx, fy, fr = scene.fixation
        for m in methods:
            r = METHOD_FUNCS[m](ctx, scene)
            if r.seen is None:
                continue
            pic = np.ascontiguousarray(r.seen).copy()
            th = max(1, scene.size[0] // 300)
            cv2.circle(pic, (int(fx), int(fy)), int(fr), (255, 255, 0), th)
            if r.boxes is not None and len(r.boxes) <= 4000:
                b = np.rint(r.boxes).astype(int)
                for x0, y0, x1, y1 in b[np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]) >= ctx.tower.P * 2]:
                    cv2.rectangle(pic, (x0, y0), (x1 - 1, y1 - 1), (255, 255, 255), 1)
            pics.append((f"{m} ({r.tokens} tokens)", pic))
            if m == "warp":
                pics.append((f"warp: the {ctx.tower.S}² image encoded", r.warped))
    finally:
        ctx.encode = enc
    return scene.name, pics


# ---------------------------------------------------------------------------------------------
# CLI


class Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"{PROG}: error: {message}", file=sys.stderr)
        sys.exit(1)


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    try:
        h = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
        d = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True)
        return h.stdout.strip() + ("+changes" if d.stdout.strip() else "") if h.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


def parse_args(argv):
    ap = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint fovea.Model loads")
    ap.add_argument("--budget", type=int, help="token budget B (default: 2 x the tower's native token count)")
    ap.add_argument("--sizes", default="448,896", help="square scene sizes, px (default 448,896)")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"comma list of {', '.join(METHODS)}")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "int8"),
                    help="precision of the methods' fovea.tokenize encodes (uniform, mixed, windows); the "
                         "references and the native-image encodes stay fp32 (default fp32)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="encoder threads (default: all cores)")
    ap.add_argument("--repeats", type=int, help="encoder timing rounds, median reported (default 3, --quick 1)")
    ap.add_argument("--json", help="write everything (per scene) here")
    ap.add_argument("--plot", help="write a PNG: summary bars + what each method sees in one scene")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_PHOTOS} photos, 1 OCR scene per size, 1 timing round")
    ap.add_argument("--no-ocr", action="store_true", help="skip the OCR scenes")
    ap.add_argument("--ocr-scenes", type=int, help="text scenes per size (default 4, --quick 1)")
    ap.add_argument("--held-out", action="store_true",
                    help="the held-out photos (skimage's textures, astronomy, microscopy, ...; centre fixations) and "
                         "text scenes drawn on them with another seed, instead of the twelve")
    ap.add_argument("--photos", type=int, help=f"photos per size (default {len(PHOTOS)}, --quick {QUICK_PHOTOS})")
    ap.add_argument("--save", action="store_true",
                    help="save the result with its commit and machine as bench/results/<bench>/<date>_<cpu-class>_<commit>.json (bench/provenance.py)")
    a = ap.parse_args(argv)
    try:
        a.sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--sizes must be a comma list of integers, got {a.sizes!r}")
    if not a.sizes or any(s <= 0 for s in a.sizes):
        ap.error(f"--sizes must be positive, got {a.sizes}")
    a.methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [m for m in a.methods if m not in METHODS]
    if bad or not a.methods:
        ap.error(f"unknown method {', '.join(bad) or '(none given)'}; choose from {', '.join(METHODS)}")
    if a.budget is not None and not 1 <= a.budget <= 1 << 24:
        ap.error(f"--budget must be in [1, 16777216], got {a.budget}")
    if a.threads < 1:
        ap.error(f"--threads must be >= 1, got {a.threads}")
    a.repeats = a.repeats if a.repeats is not None else (1 if a.quick else 3)
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {a.repeats}")
    a.ocr_scenes = a.ocr_scenes if a.ocr_scenes is not None else (1 if a.quick else 4)
    a.photos = a.photos if a.photos is not None else (QUICK_PHOTOS if a.quick else len(PHOTOS))
    if a.ocr_scenes < 0 or a.photos < 1:
        ap.error("--ocr-scenes must be >= 0 and --photos >= 1")
    for p in (a.json, a.plot):
        if p and not os.path.isdir(os.path.dirname(os.path.abspath(p))):
            ap.error(f"cannot write {p}: no such directory")
    return a


def main(argv=None) -> int:
    global PHOTOS, OCR_SEED
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.held_out:
        PHOTOS, OCR_SEED = HELD_OUT, 1007
    fovea = import_fovea()
    if not os.path.exists(a.model) and not a.model.startswith("random:"):
        raise HarnessError(f"--model {a.model}: no such file")
    try:
        model = fovea.Model(a.model)
    except (OSError, RuntimeError, ValueError) as e:
        raise HarnessError(f"--model {a.model}: {e}") from None
    tower = Tower(fovea, model, a.threads)
    tower.precision = a.precision
    budget = a.budget or 2 * tower.G ** 2
    small = [z for z in a.sizes if z < tower.S]
    if small:
        raise HarnessError(f"size {small[0]} is smaller than the tower's native {tower.S} px (its ROI window)")
    ctx = Ctx(tower, budget, a.repeats)
    notes = []
    if "windows" in a.methods and not windows_available(fovea):
        notes.append(f"windows: {WINDOWS_MISSING}")
        log(notes[-1])
    do_ocr = not a.no_ocr and a.ocr_scenes > 0
    if do_ocr and shutil.which("tesseract") is None:
        do_ocr = False
        notes.append("OCR skipped: tesseract is not installed (scripts/install-deps.sh test)")
        log(notes[-1])
    log(f"{model.description if hasattr(model, 'description') else a.model}: native {tower.S} px, patch {tower.P}, "
        f"grid {tower.G}; budget {budget}; sizes {a.sizes}; methods {', '.join(a.methods)}; threads {a.threads}")
    t_start = time.perf_counter()
    results, ocr_results = [], []
    sheet = None
    with tempfile.TemporaryDirectory(prefix="fovea-fidelity-") as tmp:
        for z in a.sizes:
            scenes = photo_scenes(z, a.photos)
            for i, sc in enumerate(scenes):
                t0 = time.perf_counter()
                rec = evaluate_scene(ctx, sc, a.methods)
                results.append(rec)
                roi = " ".join(f"{m} {rec['methods'][m]['roi_fidelity']:.3f}" for m in a.methods
                               if "roi_fidelity" in rec["methods"][m])
                fl = rec.get("noise_floor")
                log(f"{z}² {i + 1}/{len(scenes)} {sc.name}: ROI {roi}; floor "
                    f"{'n/a' if not fl else format(fl['mean'], '.3f')} ({time.perf_counter() - t0:.1f} s)")
            if a.plot and z == a.sizes[-1] and scenes:
                sheet = sheet_for(ctx, scenes[0], a.methods)
            if do_ocr:
                for sc in ocr_scenes(z, a.ocr_scenes, legible=lambda img, o: legible(img, o, tmp)):
                    rec = run_ocr(ctx, sc, a.methods, tmp)
                    ocr_results.append(rec)
                    log(f"{z}² OCR {sc.name} ({rec['height_px']} px): full res {rec['ceiling']['accuracy']:.2f}; " +
                        " ".join(f"{m} {v['accuracy']:.2f}" for m, v in rec["methods"].items() if "accuracy" in v))
    summary = summarize(results, ocr_results, a.sizes, a.methods)
    load = os.getloadavg()
    elapsed = time.perf_counter() - t_start
    print(f"fidelity of {a.model} (native {tower.S}², patch {tower.P}), budget {budget}, {a.threads} threads, "
          f"encoder ms = median of {a.repeats} (load average {load[0]:.1f})")
    print(table(summary, a.methods, tower.cls_kind))
    for n in notes:
        print(f"note: {n}")
    info = {
        "model": a.model, "config": {k: v for k, v in tower.config.items()}, "native_size": tower.S,
        "patch_size": tower.P, "grid": tower.G, "budget": budget, "sizes": a.sizes, "methods": a.methods,
        "threads": a.threads, "repeats": a.repeats, "quick": a.quick, "held_out": a.held_out, "commit": commit(), "machine": machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.relpath(sys.argv[0], REPO) if argv is None else PROG] +
                            (sys.argv[1:] if argv is None else list(argv))),
        "resize": "global reference: PIL Image.BOX (area); scenes: centre-crop square, PIL Image.LANCZOS",
        "cls_kind": tower.cls_kind, "notes": notes, "load_average": [round(v, 2) for v in load], "elapsed_s": round(elapsed, 1),
        "summary": summary, "scenes": results, "ocr": ocr_results,
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump(info, f, indent=1, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
        log(f"wrote {a.json}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import provenance  # bench/provenance.py
    provenance.output(a, "fidelity", json.loads(json.dumps(info, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))),
                      threads=a.threads, versions=provenance.module_versions("torch", "transformers", "timm", "open_clip"))
    if a.plot:
        plot(a.plot, summary, a.methods, sheet,
             f"{os.path.basename(os.path.dirname(os.path.abspath(a.model)))}: budget {budget}, native {tower.S}²")
        log(f"wrote {a.plot}")
    log(f"done in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except HarnessError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(1)
