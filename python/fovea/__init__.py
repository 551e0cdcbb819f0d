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

For datasets, see fovea.distributed (Dask).
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _fovea
from ._fovea import Encoding, TensorFile, Tokens

__version__ = _fovea.__version__
__all__ = ["tokenize", "Tokens", "Model", "Encoding", "load", "save", "TensorFile", "__version__"]

PathLike = Union[str, "os.PathLike[str]"]


def tokenize(
    image: Union[np.ndarray, PathLike],
    budget: int = 273,
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
) -> Tokens:
    """Turn an image and a query into a budgeted set of multi-scale patches.

    Args:
        image: a uint8 numpy array [H, W, 3] (RGB) or [H, W] (gray), read in place (no
            copy; rows may be padded, e.g. a crop of a larger array), a path to a PNG or
            JPEG file, or the file's bytes (decoded by fovea, EXIF orientation applied).
            Other dtypes raise TypeError, other layouts ValueError.
        budget: the maximum number of tokens (the result lands within 2 of it).
        fixations: points (x, y) or (x, y, weight) in image pixels where the query looks.
        regions: boxes (x0, y0, x1, y1) or (x0, y0, x1, y1, weight) in image pixels.
        patch: patch size P in pixels (default: the model's, else 16).
        uniform: the baseline a standard VLM uses: resize so a plain grid holds <= budget.
        threads: worker threads for this call (0: one per hardware thread).
        max_level: coarsest mip level of the quadtree (-1: automatic).
        weights: relevance weights {"information", "saliency", "query", "floor"}.
        e0: cortical-magnification half-saturation eccentricity (fraction of the longer side).
        sharpness: how strongly token size follows relevance, in [0.5, 4].
        dtype: patch dtype, "f32" (normalised), "f16" or "u8" (raw pixels).
        mean, std: normalisation (default: the model's input contract, else CLIP's);
            normalize=False gives x/255.
        query_embedding: a [D] vector scored against per-tile features of `model`'s patch
            embedding (needs model=).
        model: a fovea.Model whose input contract (patch size, mean, std) the patches
            follow, as `fovea encode` does; needed for query_embedding.
        max_pixels: images with more pixels are refused (paths and bytes).
        source: recorded as the files' "source" metadata (default: the path, "<array>" or
            "<bytes>").

    Returns:
        Tokens: .patches, .positions, .levels, .rate_map, .relevance (numpy views on memory
        the Tokens object owns), .seen() and .overlay() pictures, .save(path).

    When `image` is an array, the Tokens keep a reference to it (its pyramid's level 0 is
    that array): do not modify the array while tokenize runs in another thread.
    """
    return _fovea.tokenize(
        image, budget, [tuple(f) for f in fixations], [tuple(r) for r in regions], patch, uniform, threads,
        max_level, dict(weights or {}), e0, sharpness, dtype,
        None if mean is None else list(mean), None if std is None else list(std), normalize,
        query_embedding, model, max_pixels, source)


class Model(_fovea.Model):
    """A ViT vision encoder loaded from a checkpoint.

    Model("clip-vit-b16/model.safetensors") reads HF CLIPVisionModel / CLIPModel, HF SigLIP
    and torchvision VisionTransformer checkpoints (config.json beside the file is read).
    Model("random:vit-b16") / "random:vit-s16" build seeded random weights (benchmarks only;
    .is_random is True).

    .config is a dict (hidden_size, layers, heads, patch_size, position_grid, ...).
    Raises OSError for an unreadable file, RuntimeError for a malformed or unknown one.
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
            precision: "fp32" (within 1e-4 of PyTorch) or "bf16" (fast).
            threads: threads for this call (0: one per hardware thread).
            attention: "exact" (default) or "hierarchical[:K[:B]]", an approximation: tokens
                grouped by position into blocks of B (64); each query block attends exactly to
                its top K key blocks (16) and to the mean key/value of the others (`fovea encode
                --attention`; recorded in saved files).

        The GIL is released while the encoder runs. The array owns C++ memory (no copy);
        torch.from_numpy(result) shares it.
        """
        return super().encode(tokens, precision, threads, positions, image_size, attention)

    def encode_full(self, tokens, precision: str = "fp32", threads: int = 0, *, positions=None,
                    image_size=None, attention: str = "exact") -> Encoding:
        """As encode(), but returns a fovea.Encoding with every output the model has:
        .embeddings, .projected (LLaVA / mmproj projector: the LLM's input), .class_token,
        .pooled, .image_embeds (CLIP projection), .logits (torchvision head), .encode_ms,
        and .save(path) writing `fovea encode -o`'s file. Tokenize with model=self so
        the patches follow the model's preprocessing."""
        return super().encode_full(tokens, precision, threads, positions, image_size, attention)


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
    _fovea.save(path, dict(tensors), {str(k): str(v) for k, v in (metadata or {}).items()})
