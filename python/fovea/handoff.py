"""Hand fovea's embeddings to a language-model runtime, in the forms each one takes.

    import fovea, fovea.handoff as handoff
    model = fovea.Model("llava/model.safetensors")
    enc = model.encode_full(fovea.tokenize("photo.jpg", fixations=[(512, 300)], model=model))
    # or: enc = fovea.Client("http://127.0.0.1:8080").encode("photo.jpg", fixations=[(512, 300)])

    # vLLM, offline: LLM(model=..., enable_mm_embeds=True)
    llm.generate(handoff.vllm(enc, "USER: <image>\nWhat is written here? ASSISTANT:"))
    # vLLM, online (vllm serve ... --enable-mm-embeds): one content part of a chat message
    {"role": "user", "content": [handoff.vllm_image_embeds(enc), {"type": "text", "text": "What is it?"}]}
    # SGLang: Engine.generate(input_ids=..., image_data=[handoff.sglang(enc)])
    # HF transformers: model.generate(inputs_embeds=torch.from_numpy(merged)[None], ...)
    merged = handoff.hf_inputs_embeds(text_embeds, input_ids, image_token_id, enc)
    # llama.cpp: the float buffer of mtmd_helper_decode_image_chunk (encoded_embd), or
    # llama_batch.embd with the positions given
    buf = handoff.llama_cpp(enc, n_past=n_past)

What is handed on is what the language model reads: the projector's output (Encoding.projected)
when the checkpoint has one (LLaVA, an mmproj .gguf), else the tower's last hidden state
(Encoding.embeddings), which a runtime can take only if it runs the projector itself: with a
tower alone (CLIP, SigLIP, ViT checkpoints) the rows have the tower's width, not the language
model's, and every form below says so by its width. One row per kept token, in token order.
fovea's token count is the budget's, not the count a runtime's own image processor would make,
so a prompt must hold one placeholder per row where the runtime expands placeholders itself
(image_token_count()).

fovea's tokens are not a grid: a model with multimodal rotary positions (M-RoPE: Qwen2-VL and
its kin) needs each row's place. positions() gives every row's centre, side and level in image
pixels, and mrope_positions() the (t, h, w) position ids of each row on the finest token grid,
in the layout Qwen2-VL's get_rope_index makes for an image; llama_cpp(mrope=True) lays them out
as llama.cpp's batch takes them.

A native-resolution tower (Qwen2-VL, Qwen2.5-VL, Qwen3-VL: fovea._fovea.encode_native,
encode_native_windows and encode_native_video, whose dicts hold projected, image_grid_thw and
mrope_positions) hands on native images, each with its own grid: qwen_vllm() gives vLLM's
{"image_embeds", "image_grid_thw"} (a video's {"video_embeds", "video_grid_thw"}), qwen_position_ids() the (t, h, w) position ids of a whole prompt as
get_rope_index lays them out, and qwen_hf_inputs() transformers' inputs_embeds with them. A mixed
layout (encode_native_mixed, for experiment) is one image whose rows are not a grid: its ids are
each merge unit's centre (mrope_positions), which qwen_position_ids and qwen_hf_inputs place in the
prompt; qwen_vllm refuses it (vLLM derives positions from image_grid_thw).

The dicts and arrays returned are plain numpy (torch only for vllm_image_embeds' "torch"
serialization); none of the runtimes is imported here. The forms follow the runtimes' documented
inputs and are tested for those shapes and dtypes (tests/python/test_py_serve.py), not inside
the runtimes, none of which is installed here (docs/how-to/serve.md).

This module also reads and writes safetensors bytes in memory (the format of every fovea file)
and their JSON form, for the service and its client.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

__all__ = ["language_embeddings", "image_token_count", "positions", "mrope_positions", "vllm", "vllm_image_embeds",
           "sglang", "hf_inputs_embeds", "llama_cpp", "qwen_vllm", "qwen_position_ids", "qwen_hf_inputs",
           "safetensors_bytes", "parse_safetensors", "safetensors_json", "parse_safetensors_json"]

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I32": np.int32, "I64": np.int64,
           "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16}
_NAMES = {np.dtype(v).str: k for k, v in _DTYPES.items()}


def safetensors_bytes(tensors: Mapping[str, np.ndarray], metadata: Optional[Mapping[str, str]] = None) -> bytes:
    """A safetensors file, in memory: numpy arrays (little-endian numeric dtypes) and string metadata."""
    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        key = a.dtype.newbyteorder("<").str if a.dtype.byteorder == "=" else a.dtype.str
        if key not in _NAMES:
            raise TypeError(f"{name}: dtype {a.dtype} has no safetensors name here")
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[key], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def parse_safetensors(data: bytes) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """(tensors, metadata) of a safetensors file's bytes; BF16 tensors come back as float32.
    Raises ValueError for bytes that are not such a file."""
    if len(data) < 8:
        raise ValueError("not a safetensors file: shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"not a safetensors file: a {n}-byte header in {len(data)} bytes")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise ValueError(f"not a safetensors file: its header is not JSON ({e})") from None
    body = memoryview(data)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        if not 0 <= b <= e <= len(body):
            raise ValueError(f"not a safetensors file: tensor {name} lies outside the data")
        if h["dtype"] == "BF16":
            a = (np.frombuffer(body[b:e], dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif h["dtype"] in _DTYPES:
            a = np.frombuffer(body[b:e], dtype=np.dtype(_DTYPES[h["dtype"]]).newbyteorder("<"))
        else:
            raise ValueError(f"tensor {name}: dtype {h['dtype']} is not read here")
        out[name] = a.reshape(h["shape"])
    return out, dict(meta)


def safetensors_json(data: bytes, names: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """A safetensors file's bytes in JSON form (the service's format=json): {"metadata": {...},
    "tensors": {name: {"dtype": "F32", "shape": [...], "data": base64 of the tensor's
    little-endian bytes, as in the file}}}; every tensor, or those `names` lists (ValueError
    for a name the file does not hold)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(bytes(data[8:8 + n]))
    meta = header.pop("__metadata__", {}) or {}
    for name in names or ():
        if name not in header:
            raise ValueError(f"no tensor {name[:60]!r}; the file holds {', '.join(header)}")
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, h in header.items():
        if names is None or name in names:
            b, e = h["data_offsets"]
            tensors[name] = {"dtype": h["dtype"], "shape": h["shape"], "data": base64.b64encode(body[b:e]).decode()}
    return {"metadata": dict(meta), "tensors": tensors}


def parse_safetensors_json(obj: Mapping[str, Any]) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """(tensors, metadata) of safetensors_json's form; BF16 tensors come back as float32."""
    out = {}
    for name, h in (obj.get("tensors") or {}).items():
        raw = base64.b64decode(h["data"])
        if h["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif h["dtype"] in _DTYPES:
            a = np.frombuffer(raw, dtype=np.dtype(_DTYPES[h["dtype"]]).newbyteorder("<"))
        else:
            raise ValueError(f"tensor {name}: dtype {h['dtype']} is not read here")
        out[name] = a.reshape(h["shape"])
    return out, dict(obj.get("metadata") or {})


def _get(enc, name):
    # An Encoding, a VideoFrameResult, a client's RemoteEncoding or a plain mapping of arrays.
    if isinstance(enc, Mapping):
        return enc.get(name)
    return getattr(enc, name, None)


def language_embeddings(enc) -> np.ndarray:
    """[N, E] float32, what the language model reads: the projector's output when the model has one,
    else the tower's last hidden state."""
    p = _get(enc, "projected")
    e = p if p is not None else _get(enc, "embeddings")
    if e is None:
        raise ValueError("the encoding holds no embeddings (tokenize-only results cannot be handed on)")
    return np.ascontiguousarray(e, dtype=np.float32)


def image_token_count(enc) -> int:
    """Rows handed on for one image: the number of image placeholder tokens a prompt needs where the
    runtime expands none itself."""
    return int(language_embeddings(enc).shape[0])


def positions(enc) -> np.ndarray:
    """[N, 4] float32, one row per handed-on row: the token's centre x, centre y and side in the
    original image's pixels, and its mip level (the file's `positions`; an Encoding's of its kept
    rows)."""
    p = _get(enc, "positions")
    if p is None:
        raise ValueError("the encoding carries no positions (an Encoding has them when it encoded a Tokens object)")
    p = np.ascontiguousarray(p, dtype=np.float32)
    if p.ndim != 2 or p.shape[1] != 4 or p.shape[0] != image_token_count(enc):
        raise ValueError(f"positions must be [N, 4] with N = {image_token_count(enc)} rows, got {p.shape}")
    return p


def mrope_positions(enc, start: int = 0, unit_px: Optional[float] = None) -> Tuple[np.ndarray, int]:
    """([3, N] int64, next): each row's multimodal rotary position ids (t, h, w) as Qwen2-VL's
    get_rope_index lays out an image: t = start, h = start + row, w = start + column, where (row,
    column) is the cell of the token's centre on a grid of unit_px-pixel cells (default: the
    finest token's side, the patch size). `next` is the first position of the text after the
    image: start + the largest id used + 1. A coarse token takes the cell of its centre: rows
    stay distinct in space but not on a regular grid, which no runtime's own processor makes."""
    p = positions(enc)
    unit = float(unit_px or (p[:, 2].min() if len(p) else 1.0))
    if not unit > 0:
        raise ValueError("unit_px must be > 0")
    col = np.floor(p[:, 0] / unit).astype(np.int64)
    row = np.floor(p[:, 1] / unit).astype(np.int64)
    ids = np.stack([np.zeros_like(row), row, col]) + int(start)
    nxt = int(start) + (int(max(row.max(), col.max())) + 1 if len(p) else 0)
    return ids, nxt


def vllm(enc, prompt: str) -> Dict[str, Any]:
    """vLLM's offline input for one image as embeddings: {"prompt", "multi_modal_data": {"image":
    [1, N, E] float32}} for LLM.generate; vLLM takes image embeddings of shape (images, feature
    size, language model's hidden size) for LLaVA-style models, with LLM(..., enable_mm_embeds=True).
    Convert with torch.from_numpy. E is the tower's width when the checkpoint has no projector."""
    return {"prompt": prompt, "multi_modal_data": {"image": language_embeddings(enc)[None]}}


def vllm_image_embeds(enc, serialization: str = "torch") -> Dict[str, Any]:
    """vLLM's online input for one image: the chat content part {"type": "image_embeds",
    "image_embeds": base64 of the [N, E] float32 tensor} (`vllm serve ... --enable-mm-embeds`).
    serialization "torch": torch.save's bytes, what every vLLM with image_embeds reads (needs
    torch here); "npy": numpy's .npy bytes, which vLLM's ImageEmbeddingMediaIO reads since it
    checks for numpy's magic (recent vLLM), no torch needed."""
    e = language_embeddings(enc)
    buf = io.BytesIO()
    if serialization == "torch":
        try:
            import torch
        except ImportError:
            raise ImportError("serialization='torch' needs torch; serialization='npy' does not") from None
        torch.save(torch.from_numpy(e), buf)
    elif serialization == "npy":
        np.save(buf, e, allow_pickle=False)
    else:
        raise ValueError(f"serialization must be 'torch' or 'npy', got {serialization!r}")
    return {"type": "image_embeds", "image_embeds": base64.b64encode(buf.getvalue()).decode()}


def sglang(enc, **extra) -> Dict[str, Any]:
    """One entry of SGLang's image_data: {"format": "precomputed_embedding", "feature": [N, E]
    float32} (Engine.generate(input_ids=..., image_data=[...])); `extra` items are added as they
    are (a processor's output, e.g. image_grid_thw, where the model asks for it). Convert with
    torch.from_numpy."""
    return {**extra, "format": "precomputed_embedding", "feature": language_embeddings(enc)}


def hf_inputs_embeds(text_embeds: np.ndarray, input_ids: Sequence[int], image_token_id: int, enc) -> np.ndarray:
    """transformers' inputs_embeds for one sequence: `text_embeds` [T, E] (the language model's
    get_input_embeddings()(input_ids)) with the rows at the image placeholder tokens replaced by the
    image's embeddings, in order, as LLaVA's forward does (masked_scatter at input_ids ==
    image_token_id). The prompt must hold exactly image_token_count(enc) placeholders. Returns a
    new [T, E] float32 array (add the batch axis for model.generate(inputs_embeds=...))."""
    ids = np.asarray(input_ids)
    text = np.asarray(text_embeds)
    img = language_embeddings(enc)
    slots = np.flatnonzero(ids == image_token_id)
    if text.ndim != 2 or text.shape[0] != ids.shape[0]:
        raise ValueError(f"text_embeds must be [T, E] with T = len(input_ids) = {ids.shape[0]}, got {text.shape}")
    if slots.size != img.shape[0]:
        raise ValueError(f"the prompt holds {slots.size} image tokens (id {image_token_id}); the image has "
                         f"{img.shape[0]} embeddings: repeat the placeholder image_token_count() times")
    if text.shape[1] != img.shape[1]:
        raise ValueError(f"the language model's width is {text.shape[1]}, the image embeddings' {img.shape[1]} "
                         "(a checkpoint without a projector gives the tower's width)")
    out = text.astype(np.float32, copy=True)
    out[slots] = img
    return out


def llama_cpp(enc, n_past: int = 0, mrope: bool = False) -> Dict[str, Any]:
    """llama.cpp's embedding input for one image:

    * "embd": [n_tokens, n_embd] float32, C-contiguous: the float buffer mtmd_helper_decode_image_chunk
      takes as encoded_embd (what mtmd_encode_chunk would have written; pass .ctypes.data), or
      llama_batch.embd of a batch of your own (llama_batch_init(n_tokens, n_embd, 1));
    * "n_tokens", "n_embd";
    * "pos": the positions of such a batch, int32: n_past + i for each row; with mrope=True the
      4 * n_tokens ids of a model with M-RoPE, section-major (t for every row, then h, then w,
      then 0), as llama.cpp's decode_embd_batch lays them out, from mrope_positions(n_past);
    * "n_pos": how far n_past moves past the image.

    mtmd_helper_decode_image_chunk places an M-RoPE chunk's rows on the chunk's own nx × ny grid,
    which fovea's foveated rows are not on: decode them with your own batch and "pos"."""
    e = language_embeddings(enc)
    n = int(e.shape[0])
    if mrope:
        ids, nxt = mrope_positions(enc, n_past)
        pos = np.concatenate([ids.astype(np.int32).reshape(-1), np.zeros(n, np.int32)])
        n_pos = nxt - int(n_past)
    else:
        pos = (int(n_past) + np.arange(n)).astype(np.int32)
        n_pos = n
    return {"embd": e, "n_tokens": n, "n_embd": int(e.shape[1]), "pos": pos, "n_pos": n_pos}


def _qwen_mixed_ids(enc, rows: int):
    # A mixed layout's (t, h, w) ids ([M, 3], each merge unit's centre; encode_native_mixed's dict,
    # or its file, which has levels and no image_grid_thw), or None for anything else.
    grid = _get(enc, "image_grid_thw")
    ids = _get(enc, "mrope_positions")
    if ids is None or (grid is not None and np.asarray(grid).size != 0) or (grid is None and _get(enc, "levels") is None):
        return None
    ids = np.asarray(ids, dtype=np.int64)
    if ids.shape != (rows, 3):
        raise ValueError(f"a mixed layout needs mrope_positions [{rows}, 3], got {ids.shape}")
    return ids


def _qwen_parts(enc):
    emb = language_embeddings(enc)
    merge = int(_get(enc, "merge_size") or 2)
    if _qwen_mixed_ids(enc, emb.shape[0]) is not None:
        return emb, np.zeros((0, 3), np.int64), merge
    grid = _get(enc, "image_grid_thw")
    if grid is None:
        raise ValueError("the encoding holds no image_grid_thw: it is not a native-resolution tower's "
                         "(fovea._fovea.encode_native)")
    grid = np.asarray(grid, dtype=np.int64).reshape(-1, 3)
    if int(sum(t * (h // merge) * (w // merge) for t, h, w in grid)) != emb.shape[0]:
        raise ValueError(f"image_grid_thw {grid.tolist()} does not add up to the {emb.shape[0]} rows (merge {merge})")
    return emb, grid, merge


def qwen_vllm(enc, video: bool = False) -> Dict[str, Any]:
    """vLLM's precomputed input for a Qwen2-VL / Qwen2.5-VL / Qwen3-VL prompt's images: {"image_embeds":
    [M, E] float32 (every image's merged tokens, image after image), "image_grid_thw": [k, 3] int64}
    (the multi_modal_data "image" entry); video=True (fovea._fovea.encode_native_video's dict):
    {"video_embeds", "video_grid_thw"}, the "video" entry. Convert with torch.from_numpy."""
    emb, grid, _ = _qwen_parts(enc)
    if grid.shape[0] == 0:
        raise ValueError("a mixed layout (foveation 'native_mixed') is not a grid: vLLM derives positions from "
                         "image_grid_thw, which it has none of; hand it on with qwen_hf_inputs (explicit position ids)")
    if video:
        return {"video_embeds": emb, "video_grid_thw": grid}
    return {"image_embeds": emb, "image_grid_thw": grid}


def qwen_position_ids(input_ids: Sequence[int], image_token_id: int, enc,
                      temporal_step: float = 1.0) -> Tuple[np.ndarray, int]:
    """([3, T] int64, rope_delta): the multimodal rotary position ids of a whole prompt as Qwen2-VL's
    get_rope_index makes them: every text token one more than the position before it; the images'
    placeholder tokens (image_token_id, the i-th image's t·(h/m)·(w/m) of them, in order) get (t, h, w)
    of their merged grid plus the next free position, and the text after an image continues from
    its largest id + 1. rope_delta = the largest id + 1 − T (what generation adds to later positions).
    temporal_step: Qwen2.5-VL video's tokens_per_second · seconds per frame pair (1 for images)."""
    emb, grid, m = _qwen_parts(enc)
    ids = np.asarray(input_ids).reshape(-1)
    out = np.zeros((3, ids.shape[0]), dtype=np.int64)
    mixed = _qwen_mixed_ids(enc, emb.shape[0]) if grid.shape[0] == 0 else None
    counts = [int(t * (h // m) * (w // m)) for t, h, w in grid] if mixed is None else [emb.shape[0]]
    if int((ids == image_token_id).sum()) != sum(counts):
        raise ValueError(f"the prompt holds {int((ids == image_token_id).sum())} image tokens (id {image_token_id}); "
                         f"the images need {sum(counts)} ({counts})")
    pos, i, img = 0, 0, 0
    while i < ids.shape[0]:
        if ids[i] != image_token_id:
            out[:, i] = pos
            pos += 1
            i += 1
            continue
        if mixed is not None:  # one image: its units' ids as encode_native_mixed gives them
            block = mixed.T + pos
        else:
            t, h, w = (int(v) for v in grid[img])
            lh, lw = h // m, w // m
            tt = (np.arange(t) * temporal_step).astype(np.int64)
            block = np.stack(np.meshgrid(tt, np.arange(lh), np.arange(lw), indexing="ij")).reshape(3, -1) + pos
        n = block.shape[1]
        if not np.all(ids[i:i + n] == image_token_id):
            raise ValueError(f"image {img} needs {n} consecutive image tokens at position {i}")
        out[:, i:i + n] = block
        pos = int(block.max()) + 1
        i += n
        img += 1
    return out, int(pos - ids.shape[0])


def qwen_hf_inputs(text_embeds: np.ndarray, input_ids: Sequence[int], image_token_id: int, enc) -> Dict[str, Any]:
    """transformers' inputs for a Qwen2-VL / Qwen2.5-VL prompt with fovea's images: {"inputs_embeds": [T, E]
    float32 (hf_inputs_embeds), "position_ids": [3, 1, T] int64 (qwen_position_ids, the batch axis added),
    "rope_deltas": [1, 1] int64}; pass them to the model's forward (add the batch axis to inputs_embeds)."""
    merged = hf_inputs_embeds(text_embeds, input_ids, image_token_id, enc)
    pos, delta = qwen_position_ids(input_ids, image_token_id, enc)
    return {"inputs_embeds": merged, "position_ids": pos[:, None, :], "rope_deltas": np.array([[delta]], np.int64)}
