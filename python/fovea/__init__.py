"""fovea: foveated visual tokens for vision-language models.

An image and a query (fixation points, regions, an embedding) go in; a budgeted set of
multi-scale patches comes out: full resolution where the query looks, coarser towards the
periphery, never more tokens than the budget. A ViT checkpoint then encodes them.

    import numpy as np, fovea
    img = np.asarray(PIL.Image.open("photo.jpg").convert("RGB"))    # [H, W, 3] uint8
    t = fovea.tokenize(img, budget=273, fixations=[(512, 300)])     # reads img in place
    t.patches      # [N, 3, 16, 16] float32, a view on C++ memory (torch.from_numpy works)
    t.positions    # [N, 4] float32: centre x, centre y, side, level
    model = fovea.Model("random:vit-b16")                           # or a .safetensors path
    emb = model.encode(t, precision="bf16")                          # [N, D] float32

This package is a thin layer over the C++ library (fovea._fovea, pybind11): the pipeline,
the encoder and the file formats are the library's, so results equal the `fovea` CLI's
files. The GIL is released while tokenize and encode run. Errors raise ValueError (bad
arguments), OSError (I/O) or RuntimeError (everything else: corrupt files, unsupported
formats, devices), with the library's one-line message.

For datasets, see fovea.distributed (Dask); for a service, fovea.serve (`python3 -m fovea.serve`)
and its client fovea.Client; for handing embeddings to a language-model runtime, fovea.handoff.
"""

from __future__ import annotations

import os
import warnings
from typing import Iterable, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _fovea
from ._fovea import (Encoding, TensorFile, TokenCache, Tokens, VideoFrameResult, amx_kernels_enabled,
                     avx512bf16_kernels_enabled, avx2_kernels_enabled, bf16_supported, image_extensions, image_formats,
                     int8_supported)

__version__ = _fovea.__version__
__all__ = ["tokenize", "encode", "Fixation", "Tokens", "Model", "Encoding", "load", "save", "TensorFile", "VideoReader",
           "VideoFrame", "VideoFrameResult", "VideoSession", "video", "decode_image", "encode_image", "TokenCache", "Client", "bf16_supported", "amx_kernels_enabled",
           "avx512bf16_kernels_enabled", "avx2_kernels_enabled", "int8_supported",
           "image_formats",
           "image_extensions",
           "__version__"]

PathLike = Union[str, "os.PathLike[str]"]


class Fixation(NamedTuple):
    """Where the query looks, in image pixels; the CLI's --fixation X,Y[,R[,WEIGHT]].

    radius: the radius (px) of what is looked at: the relevance is full inside that disc and
        falls off outside it. 0: no size hint (the falloff starts at the point, with scale e0
        times the image's longer side).
    weight: scales this fixation's term (the query term is the max over all fixations).

    A plain tuple means the same, position by position: (x, y), (x, y, radius),
    (x, y, radius, weight). (Before fovea 0.3 the binding read a third value as a weight;
    it is the radius now, as in the CLI. Pass Fixation(x, y, weight=w) for a weight.)
    """
    x: float
    y: float
    radius: float = 0.0
    weight: float = 1.0


def _pixels_of(image):
    """A PIL image (what Image.open, HF datasets and most VLM pipelines hand around) as the
    uint8 array fovea reads: "RGB" and "L" as they are, every other mode through
    convert("RGB"), as HF image processors do (alpha dropped, palettes expanded). EXIF
    orientation is the caller's, as it is for any array (PIL.ImageOps.exif_transpose)."""
    if isinstance(image, (np.ndarray, str, bytes, bytearray, memoryview)) or hasattr(image, "__fspath__"):
        return image
    mode = getattr(image, "mode", None)
    if isinstance(mode, str) and callable(getattr(image, "convert", None)) and hasattr(image, "size"):
        return np.asarray(image if mode in ("RGB", "L") else image.convert("RGB"))
    return image


def _checked_budget(budget):
    # Before the binding: an int beyond C's would be pybind11's "incompatible function arguments".
    if isinstance(budget, (int, np.integer)) and not isinstance(budget, bool) and not 1 <= budget <= 1 << 24:
        raise ValueError(f"budget must be in [1, 16777216] tokens, got {int(budget)}")
    return budget


_FIXATION_FORM = "(x, y[, radius[, weight]])"
_REGION_FORM = "(x0, y0, x1, y1[, weight])"


def _number_tuples(items, what: str, form: str):
    # [(x, y, ...)] of floats, or a TypeError that names the argument (was: pybind11's
    # "incompatible function arguments" for a string, or "'NoneType' object is not iterable").
    if isinstance(items, (str, bytes)):
        raise TypeError(f"{what} must be a list of {form} tuples, got {type(items).__name__} {items!r:.40}")
    out = []
    for item in items:
        try:
            if isinstance(item, (str, bytes)):
                raise TypeError
            out.append(tuple(float(v) for v in item))
        except (TypeError, ValueError):
            raise TypeError(f"{what} must hold {form} tuples of numbers; one is {item!r:.60}") from None
    return out


def tokenize(
    image: Union[np.ndarray, PathLike, "PIL.Image.Image"],
    budget: Optional[int] = None,
    fixations: Iterable[Sequence[float]] = (),
    regions: Iterable[Sequence[float]] = (),
    patch: Optional[int] = None,
    uniform: bool = False,
    threads: int = 0,
    *,
    max_level: int = -1,
    weights: Optional[Mapping[str, float]] = None,
    e0: Optional[float] = None,
    sharpness: Optional[float] = None,
    dtype: str = "f32",
    mean: Optional[Sequence[float]] = None,
    std: Optional[Sequence[float]] = None,
    normalize: bool = True,
    query_embedding: Optional[np.ndarray] = None,
    model: Optional["Model"] = None,
    max_pixels: int = 100_000_000,
    source: str = "",
    fine_bias: Optional[float] = None,
    detail_focus: Optional[float] = None,
    fixation_spread: Optional[float] = None,
    lookahead: Optional[int] = None,
    exif: bool = True,
    foveation: Optional[str] = None,
    window_grid: Optional[int] = None,
    keep_covered: bool = False,
) -> Tokens:
    """Turn an image and a query into a budgeted set of multi-scale patches.

    Args:
        image: a uint8 numpy array [H, W, 3] (RGB) or [H, W] (gray), read in place (no
            copy; any positive strides: padded rows such as a crop of a larger array,
            rgba[..., :3], planar chw.transpose(1, 2, 0), a fovea.VideoReader frame), a
            path to an image file (PNG, JPEG; WebP, GIF, TIFF... when built with FFmpeg:
            fovea.image_formats()), or the file's bytes (decoded by fovea, EXIF
            orientation applied unless exif=False), or a PIL image ("RGB" and "L" as they
            are, other modes through convert("RGB"), as HF image processors do). Other
            dtypes raise TypeError, flipped or overlapping layouts ValueError.
        budget: the maximum number of tokens handed on (mixed: the result lands within 2 of
            it). Default 273; with foveation="windows", two native views (2 * G * G: 392 for a
            224-px tower of 16-px patches).
        fixations: where the query looks, in image pixels: fovea.Fixation(x, y, radius=0,
            weight=1) or tuples (x, y), (x, y, radius), (x, y, radius, weight), as the
            CLI's --fixation X,Y[,R[,WEIGHT]] (the radius, px, of what is looked at).
        regions: boxes (x0, y0, x1, y1) or (x0, y0, x1, y1, weight) in image pixels.
        patch: patch size P in pixels (default: the model's, else 16).
        uniform: the baseline a standard VLM uses: resize so a plain grid holds <= budget.
        threads: worker threads for this call (0: one per hardware thread).
        max_level: coarsest mip level of the quadtree (-1: automatic, the coarsest level L
            whose P·2^L-px token fits inside the image's shorter side).
        weights: relevance weights {"detail", "query", "floor", "information", "saliency"}
            (the CLI's --weights).
        e0: cortical-magnification half-saturation eccentricity (fraction of the longer side).
        sharpness: how strongly token size follows relevance, in [0.5, 4].
        fine_bias: rate-distortion weight of fine detail, in [0, 4] (--fine-bias).
        detail_focus: how much a query focuses the detail term, in [0, 4] (--detail-focus).
        fixation_spread: cost of crossing content like the fixated one, in (0, 1]; 1 is a
            radial fovea (--fixation-spread).
        lookahead: levels a split's gain is looked ahead, in [1, 8] (--lookahead).
        dtype: patch dtype, "f32" (normalised), "f16" or "u8" (raw pixels).
        mean, std: normalisation (default: the model's input contract, else CLIP's);
            normalize=False gives x/255.
        query_embedding: a [D] vector scored against per-tile features of `model`'s patch
            embedding (needs model=).
        model: a fovea.Model whose input contract (patch size, mean, std) the patches
            follow, as `fovea encode` does; needed for query_embedding.
        max_pixels: images with more pixels are refused (paths and bytes).
        exif: apply the JPEG EXIF orientation (paths and bytes; --no-exif is exif=False).
        source: recorded as the files' "source" metadata (default: the path, "<array>" or
            "<bytes>").
        foveation: "windows" (a base view of the whole image resized to the tower's native
            size, plus native-size windows where the query looks, or where the detail is; each
            window is encoded as a standalone image, and tokens of a coarser window that a finer
            one covers are dropped after encoding) or "mixed" (one sequence mixing mip levels).
            Default: the model's own with model= (windows for every frozen tower, mixed for the
            random benchmark models), else "mixed". See docs/explanation/fidelity.md.
        window_grid: foveation="windows": tokens a side of a native window (default: the
            model's grid, else 224 / patch).
        keep_covered: foveation="windows": hand on the covered tokens too (the budget counts
            them).

    Returns:
        Tokens: .patches, .positions, .levels, .rate_map, .relevance (numpy views on memory
        the Tokens object owns), .seen() and .overlay() pictures, .save(path). With
        foveation="windows" also .windows, .window and .covered; Model.encode then encodes
        every window and returns the kept tokens' embeddings (Encoding.rows names them).

    When `image` is an array, the Tokens keep a reference to it (its pyramid's level 0 is
    that array): do not modify the array while tokenize runs in another thread.
    """
    t = _fovea.tokenize(
        _pixels_of(image), None if budget is None else _checked_budget(budget),
        _number_tuples(fixations, "fixations", _FIXATION_FORM),
        _number_tuples(regions, "regions", _REGION_FORM), patch, uniform, threads,
        max_level, dict(weights or {}), e0, sharpness, dtype,
        None if mean is None else list(mean), None if std is None else list(std), normalize,
        query_embedding, model, max_pixels, source, fine_bias, detail_focus, fixation_spread, lookahead, exif,
        "" if foveation is None else foveation, window_grid, keep_covered)
    for off in t.query_outside:  # most often coordinates in another resolution
        w, h = t.image_size
        warnings.warn(f"{off} lies outside the {w}x{h} image (coordinates are the image's own pixels, after EXIF "
                      "orientation)", stacklevel=2)
    return t


def _warn_nonfinite(values: np.ndarray, what: str) -> None:
    # A checkpoint with NaN, infinite or huge weights loads and encodes without an error (its
    # values are not scanned at load: that would cost the time to first embedding).
    if values is None or values.size == 0:
        return
    bad = values.size - int(np.count_nonzero(np.isfinite(values)))
    if bad:
        warnings.warn(f"{what}: {bad} of {values.size} values are NaN or infinite (does the checkpoint hold "
                      "non-finite or huge weights?)", RuntimeWarning, stacklevel=3)


class Model(_fovea.Model):
    """A ViT vision encoder loaded from a checkpoint.

    Model("clip-vit-b16/model.safetensors") reads HF CLIPVisionModel / CLIPModel, HF SigLIP,
    HF LLaVA, HF ViTModel / ViTForImageClassification, HF Dinov2Model, timm VisionTransformer
    and torchvision VisionTransformer checkpoints and llama.cpp mmproj .gguf files (config.json
    beside the file is read).
    Model("random:vit-b16") / "random:vit-s16" build seeded random weights (benchmarks only;
    .is_random is True).

    .config is a dict (hidden_size, layers, heads, patch_size, position_grid, ...).
    Raises OSError for an unreadable file, RuntimeError for a malformed or unknown one.

    Threads: a Model is immutable and may be shared. encode() / encode_full() calls from
    several Python threads run in parallel (the GIL is released and each call runs on an
    encoder context of its own, lent by the model); the weights' packed copies are made once
    and shared. Give each call threads= so that their sum fits the cores.
    """

    def __init__(self, spec: PathLike) -> None:
        super().__init__(spec)

    def encode(self, tokens, precision: str = "fp32", threads: int = 0, *, positions=None,
               image_size=None, attention: str = "exact") -> np.ndarray:
        """Encode tokens; returns the last hidden state, [N, D] float32, one row per token.

        Args:
            tokens: a fovea.Tokens (f32 or f16 patches), or a patches array [N, C, P, P]
                float32/float16 (C-contiguous, read in place) with positions= [N, 4] float32
                and image_size=(width, height).
            precision: "fp32" (within 1e-4 of PyTorch), "bf16" (fast; on a CPU without
                bf16 kernels, see bf16_supported(), it runs fp32 with a RuntimeWarning, and
                Encoding.precision says so) or "int8" (faster: the layers' linear maps on int8,
                weights per output channel, activations per token; the rest as bf16; without
                int8 kernels, see int8_supported(), it runs fp32 with a RuntimeWarning).
            threads: threads for this call (0: one per hardware thread).
            attention: "exact" (default) or "hierarchical[:K[:B]]", an EXPERIMENTAL
                approximation: tokens grouped by position into blocks of B (64); each query
                block attends exactly to the K key blocks (8) its queries could attend to most
                and to the mean key/value of the others (`fovea encode --attention`; recorded in
                saved files with its cost). On a real pretrained ViT-Ti/16 at 4096 tokens its
                mean per-token cosine to exact attention was only 0.818-0.918 at the default
                K=8 (an encode 2.5-2.8x faster), 0.970-0.996 at K=32 (1.5x) (docs/explanation/encoder.md);
                random weights hide this. Use exact unless you have measured
                it on your own model.

        The GIL is released while the encoder runs. The array owns C++ memory (no copy);
        torch.from_numpy(result) shares it. NaN or infinite values in the result (a checkpoint
        with non-finite weights) give a RuntimeWarning.
        """
        e = super().encode(tokens, precision, threads, positions, image_size, attention)
        _warn_nonfinite(e, "the embeddings")
        return e

    def encode_many(self, tokens: Sequence[Tokens], precision: str = "fp32", threads: int = 0) -> list:
        """Several Tokens in one encoder call: every image's rows (every window's, for the windows
        foveation) through the linear layers at once, so the weights are read once for all of them;
        attention stays within each image. Returns a list of fovea.Encoding, result i equal to
        encode_full(tokens[i]) up to rounding (a GEMM over more rows may sum in another order).
        The service batches concurrent requests with it (fovea.serve)."""
        out = super().encode_many(list(tokens), precision, threads)
        for e in out:
            _warn_nonfinite(e.embeddings, "the embeddings")
        return out

    def encode_full(self, tokens, precision: str = "fp32", threads: int = 0, *, positions=None,
                    image_size=None, attention: str = "exact") -> Encoding:
        """As encode(), but returns a fovea.Encoding with every output the model has:
        .embeddings, .projected (LLaVA / mmproj projector: the LLM's input), .class_token,
        .pooled, .image_embeds (CLIP projection), .logits (torchvision / timm head, HF ViT classifier), .encode_ms
        (and .attention_ms, its attention op),
        and .save(path) writing `fovea encode -o`'s file. Tokenize with model=self so
        the patches follow the model's preprocessing.

        What .pooled is depends on the model: self.pooled_output says it in words (and saved
        files carry it as 'pooled_output'). For an HF ViT classifier, torchvision, timm,
        DINOv2 or open_clip it is "class_token (identical: the final LayerNorm applies to every
        token)": byte for byte .class_token. self.heads lists the heads (e.g. "classifier, 200
        classes (logits from the normed class token)")."""
        e = super().encode_full(tokens, precision, threads, positions, image_size, attention)
        _warn_nonfinite(e.embeddings, "the embeddings")
        return e


def _rgb_pixels(image, max_pixels: int, exif: bool) -> np.ndarray:
    # The native towers' processors read an RGB array: a path or bytes decoded as tokenize
    # decodes them, a PIL image as _pixels_of gives it, gray repeated to three channels.
    image = _pixels_of(image)
    if isinstance(image, (str, os.PathLike)):
        with open(image, "rb") as f:
            image = f.read()
    if isinstance(image, (bytes, bytearray, memoryview)):
        image = _fovea.decode_image(bytes(image), max_pixels, exif)
    if not isinstance(image, np.ndarray):
        raise TypeError(f"image must be a uint8 numpy array, a path, bytes or a PIL image, got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise TypeError(f"image must be uint8, got {image.dtype}")
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be [H, W, 3] (RGB) or [H, W] (gray), got shape {tuple(image.shape)}")
    return np.ascontiguousarray(image)


def encode(
    image: Union[np.ndarray, PathLike, bytes, "PIL.Image.Image"],
    model: Union["Model", PathLike],
    budget: Optional[int] = None,
    fixations: Iterable[Sequence[float]] = (),
    regions: Iterable[Sequence[float]] = (),
    *,
    uniform: bool = False,
    max_num_patches: Optional[int] = None,
    precision: str = "fp32",
    threads: int = 0,
    base_share: float = 0.25,
    max_windows: int = 8,
    max_pixels: int = 100_000_000,
    exif: bool = True,
    **tokenize_options,
):
    """Tokenize and encode an image in one call, by the tower's kind, as `fovea encode IMAGE
    --model M` does.

    - A fixed-size ViT tower (CLIP, SigLIP, DINOv2, HF ViT, GGUF mmproj ...): tokenize(image,
      budget, fixations, regions, model=model, uniform=uniform, **tokenize_options), then
      model.encode_full(); returns a fovea.Encoding.
    - A SigLIP 2 NaFlex tower (model.config["naflex"]): uniform=True is the processor's path
      (resized to fit max_num_patches, aspect kept; budget= may give that number instead, 0 or
      None: the model's preprocessor_config.json); otherwise the windows foveation (a base view
      and full-resolution windows on the query), budget counted in patches (default: the model's
      max_num_patches). Returns _fovea.encode_naflex's / encode_naflex_windows' dict
      (embeddings per image, pooled, spatial_shapes; window_boxes and window_kinds for windows).
    - A Qwen2-VL / Qwen2.5-VL / Qwen3-VL tower (model.config["native_resolution"]): uniform=True
      is the processor's native image (smart_resize within the model's pixel limits); otherwise
      the windows foveation with budget in merged tokens (default 1024). Returns
      _fovea.encode_native's / encode_native_windows' dict (projected, image_grid_thw,
      mrope_positions, deepstack, ...), which fovea.handoff.qwen_vllm / qwen_hf take.
      foveation="mixed" (for experiment; max_level= optional) is one sequence of merge units from
      several mip levels (the quadtree on P*merge-px tiles, budget merged tokens):
      _fovea.encode_native_mixed's dict, whose mrope_positions are each unit's centre (not a grid:
      hand it on with fovea.handoff.qwen_hf_inputs, not qwen_vllm), with levels, boxes, positions.

    Every dict also says "foveation": "naflex", "naflex_windows", "native", "native_windows" or
    "native_mixed". fixations and regions are as tokenize's (image pixels); base_share and
    max_windows size the windows of the native towers; the other tokenize_options (patch,
    weights ...) apply to fixed-size towers only. model may be a path (loaded with fovea.Model).
    """
    if not isinstance(model, _fovea.Model):
        model = Model(model)
    cfg = model.config
    fx = _number_tuples(fixations, "fixations", _FIXATION_FORM)
    rg = _number_tuples(regions, "regions", _REGION_FORM)
    if budget is not None:
        _checked_budget(budget)
    if not (cfg["naflex"] or cfg["native_resolution"]):
        if max_num_patches is not None:
            raise ValueError(f"max_num_patches applies to a SigLIP 2 NaFlex tower; this one is {cfg['family']}")
        t = tokenize(image, budget, fx, rg, uniform=uniform, threads=threads, model=model, max_pixels=max_pixels,
                     exif=exif, **tokenize_options)
        return model.encode_full(t, precision, threads)
    # A native tower takes foveation= ("windows", its default, or "mixed" for experiment on a Qwen-VL
    # tower) and, with "mixed", max_level=; every other tokenize option is for fixed-size towers.
    foveation = tokenize_options.pop("foveation", None)
    max_level = tokenize_options.pop("max_level", None)
    if tokenize_options:
        raise TypeError(f"{', '.join(sorted(tokenize_options))}: tokenize options apply to fixed-size towers; a "
                        f"{cfg['family']} tower runs its own processor")
    if foveation not in (None, "windows", "mixed"):
        raise ValueError(f"foveation must be 'windows' or 'mixed', got {foveation!r}")
    if foveation == "mixed" and (uniform or cfg["naflex"]):
        raise ValueError("foveation='mixed' is the mixed layout of a Qwen-VL tower's merge units; it excludes "
                         "uniform=True and SigLIP 2 NaFlex towers")
    if max_level is not None and foveation != "mixed":
        raise TypeError("max_level shapes the quadtree of foveation='mixed'")
    pixels = _rgb_pixels(image, max_pixels, exif)
    if cfg["naflex"]:
        if uniform:
            if budget is not None and max_num_patches is not None:
                raise ValueError("budget and max_num_patches both size the uniform encode of a SigLIP 2 NaFlex tower; "
                                 "give one")
            n = max_num_patches if max_num_patches is not None else (budget or 0)
            if not 0 <= n <= 1 << 20:
                raise ValueError(f"max_num_patches must be in [1, 1048576] (0: the model's), got {n}")
            if fx or rg:
                warnings.warn("uniform=True encodes the whole image: fixations and regions are not used",
                              stacklevel=2)
            d = _fovea.encode_naflex(model, [pixels], n, precision, threads)
            d["foveation"] = "naflex"
            return d
        if max_num_patches is not None:
            raise ValueError("max_num_patches sizes the uniform encode of a SigLIP 2 NaFlex tower; its windows "
                             "foveation counts patches with budget")
        d = _fovea.encode_naflex_windows(model, pixels, fx, budget or cfg["max_num_patches"], base_share,
                                         max_windows, precision, threads, rg)
        d["foveation"] = "naflex_windows"
        return d
    if max_num_patches is not None:
        raise ValueError(f"max_num_patches applies to a SigLIP 2 NaFlex tower; this one is {cfg['family']}")
    if uniform:
        if fx or rg:
            warnings.warn("uniform=True encodes the whole image: fixations and regions are not used", stacklevel=2)
        d = _fovea.encode_native(model, [pixels], precision, threads)
        d["foveation"] = "native"
        return d
    if foveation == "mixed":
        d = _fovea.encode_native_mixed(model, pixels, fx, 1024 if budget is None else budget, precision, threads, rg,
                                       -1 if max_level is None else max_level)
        d["foveation"] = "native_mixed"
        return d
    d = _fovea.encode_native_windows(model, pixels, fx, 1024 if budget is None else budget, base_share, max_windows,
                                     precision, threads, rg)
    d["foveation"] = "native_windows"
    return d


def load(path: PathLike) -> TensorFile:
    """Open a safetensors file (token files, embeddings files, checkpoints).

    Returns a fovea.TensorFile: f["patches"] is a read-only numpy view on the mapped file
    (BF16 tensors, which numpy cannot hold, are converted to float32), f.keys(),
    f.metadata (dict of strings). The file is validated before any tensor is handed out.
    """
    return _fovea.load(path)


def save(path: PathLike, tensors: Mapping[str, np.ndarray], metadata: Optional[Mapping[str, str]] = None) -> None:
    """Write numpy arrays as a safetensors file, atomically (a temporary file, then rename).

    Tokens.save(path) and Encoding.save(path) write the exact files the CLI writes; this is
    for anything else (e.g. a query embedding: fovea.save("q.safetensors", {"query": v})).
    """
    def as_dict(x, what):  # a mapping, or anything dict() takes (pairs)
        try:
            return dict(x)
        except (TypeError, ValueError):
            raise TypeError(f"{what}, got {type(x).__name__}") from None

    tensors = as_dict(tensors, "tensors must be a mapping of names to numpy arrays")
    metadata = as_dict(metadata or {}, "metadata must be a mapping of strings to strings")
    _fovea.save(path, tensors, {str(k): str(v) for k, v in metadata.items()})


def decode_image(data: bytes, max_pixels: int = 100_000_000, exif: bool = True) -> np.ndarray:
    """An image file's bytes (PNG, JPEG; more with FFmpeg: fovea.image_formats()) decoded as
    fovea.tokenize decodes them: [H, W, 3] uint8 (gray: [H, W, 1]), EXIF orientation applied
    unless exif=False. Raises RuntimeError for a corrupt or unsupported file, ValueError over
    max_pixels."""
    return _fovea.decode_image(bytes(data), max_pixels, exif)


def encode_image(image: np.ndarray, format: str = "png", quality: int = 90, max_side: int = 0) -> bytes:
    """An [H, W, 3] or [H, W] uint8 array as a PNG (format="png") or JPEG ("jpeg", quality 1-100)
    file's bytes, made by fovea's libpng / libjpeg writers. max_side > 0 first shrinks the image
    (area filter) to fit a max_side square (previews)."""
    return _fovea.encode_image(np.ascontiguousarray(image), format, quality, max_side)


class VideoSession:
    """Frames handed in one at a time (a camera, a stream, a service's session) instead of decoded
    from a file: each frame re-does only what changed since the previous one, as fovea.video does.

        s = fovea.VideoSession(model, budget=273)
        for image in frames:                           # [H, W, 3] uint8 each
            r = s.process(image, fixations=[(320, 180)])
            r.embeddings, r.positions, r.recomputed    # a fovea.VideoFrameResult

    Arguments as fovea.video's (reuse "incremental" by default with a model, "exact" without;
    keyframe, threshold, token_threshold, hysteresis, refresh_fraction, exact_above_work, foveation,
    window_grid, keep_covered). Each frame is encoded
    alone (no grouping: a frame's result is ready when process returns). The frame is copied
    (the session keeps it as the reference the next frame is compared with). One frame at a
    time per session; the GIL is released while a frame is processed.
    """

    def __init__(self, model: Optional["Model"] = None, budget: int = 273, *, patch: Optional[int] = None,
                 reuse: Optional[str] = None, keyframe: int = 0, threshold: float = 8.0, token_threshold: float = 0.07,
                 hysteresis: float = 0.1, refresh_fraction: float = 0.5, precision: str = "fp32", threads: int = 0,
                 dtype: str = "f32", exact_above_work: float = 0.45, foveation: str = "mixed",
                 window_grid: Optional[int] = None, keep_covered: bool = False) -> None:
        self._s = _fovea.VideoSession(model, _checked_budget(budget), patch, reuse, keyframe, threshold,
                                      token_threshold, hysteresis, refresh_fraction, precision, threads, dtype,
                                      exact_above_work=exact_above_work, foveation=foveation,
                                      window_grid=window_grid, keep_covered=keep_covered)

    def process(self, image, fixations: Iterable[Sequence[float]] = (), regions: Iterable[Sequence[float]] = (), *,
                index: Optional[int] = None, pts: float = 0.0) -> VideoFrameResult:
        """One frame ([H, W, 3] or [H, W] uint8, or a PIL image); a size change is a refresh."""
        return self._s.process(_pixels_of(image), _number_tuples(fixations, "fixations", _FIXATION_FORM),
                               _number_tuples(regions, "regions", _REGION_FORM), index, pts)

    @property
    def frames(self) -> int:
        return self._s.frames

    @property
    def reuse(self) -> str:
        return self._s.reuse

    @property
    def budget(self) -> int:
        return self._s.budget


class VideoFrame(NamedTuple):
    """One decoded frame: image [H, W, 3] uint8 RGB, pts in seconds, 0-based index among all
    decoded frames (the kept ones, with every= or fps=, are a subset)."""
    image: np.ndarray
    pts: float
    index: int


class VideoReader:
    """Decode a video (any container and codec Debian's ffmpeg reads) frame by frame.

        for f in fovea.VideoReader("clip.mp4", every=2, max_frames=100):
            f.image, f.pts, f.index       # [H, W, 3] uint8 RGB, seconds, decoded-frame index
            t = fovea.tokenize(f.image)   # read in place

    Each image is a view on the buffer the C++ decoder converted into (libswscale, straight to
    RGB planes): no copy. It is planar underneath, so its strides are (row, 1, plane): numpy,
    torch.from_numpy and fovea.tokenize read it as is; np.ascontiguousarray(f.image) gives
    the interleaved copy OpenCV wants. A frame's buffer is reused for a later frame only after
    its array is gone. The GIL is released while a frame is decoded. Streams: memory does not
    grow with the length.

    Args:
        path: the video file.
        every: keep every N-th decoded frame (the others are decoded and dropped).
        fps: or keep one frame per 1/fps seconds of presentation time.
        max_frames: stop after this many kept frames.
        threads: decoder threads (0: libavcodec's choice).
        max_pixels: larger frames are refused.
        quiet: silence libav's own log lines (process-wide, av_log_set_level, as the CLI does);
            problems still appear in .warnings.
        autorotate: turn frames as the stream's display matrix says (a phone's rotation), as
            players and ffmpeg show them (default); False: as stored (the CLI's --no-autorotate).

    .info is a dict (width, height, fps, duration_s, frame_count, container, codec,
    orientation (EXIF numbering), rotation, rotation_applied, sample_aspect_ratio);
    .frames_decoded, .corrupt_packets (skipped, as ffmpeg does), .corrupt_frames,
    .timestamps_repaired (pts that did not increase, made to: docs/how-to/video.md "Inputs"), .warnings.
    Raises OSError for a missing or unreadable file, RuntimeError for a file that is not a
    video (the CLI's messages).
    """

    def __init__(self, path: PathLike, every: int = 1, fps: Optional[float] = None,
                 max_frames: Optional[int] = None, threads: int = 0, max_pixels: int = 100_000_000,
                 quiet: bool = True, autorotate: bool = True) -> None:
        self._r = _fovea.VideoReader(path, every, fps, max_frames, threads, max_pixels, quiet, autorotate)

    def __iter__(self) -> "VideoReader":
        return self

    def __next__(self) -> VideoFrame:
        return VideoFrame(*next(self._r))

    @property
    def info(self) -> dict:
        return self._r.info

    @property
    def frames_decoded(self) -> int:
        return self._r.frames_decoded

    @property
    def corrupt_packets(self) -> int:
        return self._r.corrupt_packets

    @property
    def corrupt_frames(self) -> int:
        return self._r.corrupt_frames

    @property
    def timestamps_repaired(self) -> int:
        return self._r.timestamps_repaired

    @property
    def warnings(self) -> list:
        return self._r.warnings


def video(
    path: PathLike,
    model: Optional["Model"] = None,
    budget: int = 273,
    fixations=(),
    regions: Iterable[Sequence[float]] = (),
    *,
    every: Optional[int] = None,
    fps: Optional[float] = None,
    max_frames: Optional[int] = None,
    reuse: Optional[str] = None,
    keyframe: int = 0,
    group: int = 8,
    threshold: float = 8.0,
    token_threshold: float = 0.07,
    hysteresis: float = 0.1,
    refresh_fraction: float = 0.5,
    precision: str = "fp32",
    threads: int = 0,
    output: Optional[PathLike] = None,
    patch: Optional[int] = None,
    dtype: str = "f32",
    max_level: int = -1,
    weights: Optional[Mapping[str, float]] = None,
    e0: Optional[float] = None,
    sharpness: Optional[float] = None,
    mean: Optional[Sequence[float]] = None,
    std: Optional[Sequence[float]] = None,
    normalize: bool = True,
    fine_bias: Optional[float] = None,
    detail_focus: Optional[float] = None,
    fixation_spread: Optional[float] = None,
    lookahead: Optional[int] = None,
    max_pixels: int = 100_000_000,
    quiet: bool = True,
    autorotate: bool = True,
    overlay: Optional[PathLike] = None,
    exact_above_work: float = 0.45,
    foveation: str = "mixed",
    window_grid: Optional[int] = None,
    keep_covered: bool = False,
):
    """Tokenize (and, with a model, encode) a video, re-doing only what changed between frames:
    the session `fovea video` runs (docs/how-to/video.md).

    Args:
        path: the video file.
        model: a fovea.Model; without one, frames are tokenized only (patches).
        budget, regions, patch, dtype, max_level, weights, e0, sharpness, mean, std,
            normalize, fine_bias, detail_focus, fixation_spread, lookahead: as fovea.tokenize.
        fixations: as fovea.tokenize (fovea.Fixation or (x, y[, radius[, weight]]) tuples),
            or a function (index, pts) -> fixations called for every frame (the CLI's
            --fixations FILE.csv, in Python).
        every / fps / max_frames: which frames, as the CLI's --every / --fps / --max-frames.
        reuse: "incremental" (default with a model: a token's ViT layer states reused while they
            would move by less than token_threshold; approximate),
            "exact" (patches and patch embeddings reused, full ViT), "off".
        keyframe, group, threshold, token_threshold, hysteresis, refresh_fraction: the CLI's
            --keyframe, --group (frames encoded together: the encoder reads its weights once
            per group), --threshold, --token-threshold, --hysteresis, --refresh-fraction.
        exact_above_work: when a frame group's reused frames did more than this share of a full
            encode's work, the next three groups are encoded exactly, and the groups after them
            that change as much, then reuse is tried again (the CLI's --exact-above-work; 0: never).
        foveation: "mixed" (one sequence of mixed scales, the default) or "windows" (the CLI's
            --foveation windows: a base view and native windows, each its own sequence; a window
            whose pixels did not change hands on its previous outputs bit for bit, reuse "exact"
            by default; results carry .rows, .window, .window_reused, .window_class_tokens).
            window_grid, keep_covered: as fovea.tokenize's.
        precision: "fp32" or "bf16"; threads: threads (0: one per hardware thread).
        output: write the file `fovea video -o` writes (embeddings or patches, frame_offsets,
            pts, positions, levels, recomputed), streamed with bounded memory, atomically.
        autorotate: as fovea.VideoReader's (the CLI's --no-autorotate is autorotate=False).
        overlay: write a PNG contact sheet of the run, as `fovea video --overlay`: up to 12
            frames spread over it, token borders by level, recomputed tokens tinted magenta.

    Returns:
        with output: the summary (frames, tokens, recomputed_tokens, reuse_rate, approximate,
        mean_ms, frames_decoded, corrupt_packets, corrupt_frames, timestamps_repaired, warnings,
        video info, output, and with overlay the sheet's path and frame indices);
        without: a list of fovea.VideoFrameResult (.embeddings, .patches, .positions,
        .levels, .recomputed, .pts, .refresh, .timings, ...), numpy views on C++ memory
        (every frame stays in memory: use output= for long videos).

    The GIL is released while frames are decoded and processed. Errors as the CLI's:
    OSError for a missing file, RuntimeError for one that is not a video, ValueError for
    bad arguments.
    """
    if not callable(fixations):
        fixations = _number_tuples(fixations, "fixations", _FIXATION_FORM)
    return _fovea.video(
        path, model, _checked_budget(budget), fixations, _number_tuples(regions, "regions", _REGION_FORM),
        every or 0, fps or 0.0, max_frames or 0,
        reuse, keyframe, group, threshold, token_threshold, hysteresis, refresh_fraction, precision, threads, output,
        patch, dtype, max_level, dict(weights or {}), e0, sharpness,
        None if mean is None else list(mean), None if std is None else list(std), normalize,
        fine_bias, detail_focus, fixation_spread, lookahead, max_pixels, quiet, autorotate, overlay,
        exact_above_work=exact_above_work, foveation=foveation, window_grid=window_grid, keep_covered=keep_covered)


def __getattr__(name):
    # fovea.Client on first use: the client module is not needed to tokenize or encode.
    if name == "Client":
        from .client import Client
        return Client
    raise AttributeError(f"module 'fovea' has no attribute {name!r}")
