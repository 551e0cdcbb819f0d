"""Hand fovea's embeddings to a language-model runtime, in the forms each one takes.

    import fovea, fovea.handoff as handoff
    model = fovea.Model("llava/model.safetensors")
    enc = model.encode_full(fovea.tokenize("photo.jpg", fixations=[(512, 300)], model=model))
    # or: enc = fovea.Client("http://127.0.0.1:8080").encode("photo.jpg", fixations=[(512, 300)])
    handoff.vllm(enc, "USER: <image>\\nWhat is written here? ASSISTANT:")   # llm.generate(...)
    handoff.sglang(enc)                       # image_data=[...] of Engine.generate
    handoff.hf_inputs_embeds(text_embeds, input_ids, image_token_id, enc)  # model(inputs_embeds=...)
    handoff.llama_cpp(enc)                    # llama_batch.embd: [n_tokens, n_embd] float32

What is handed on is what the language model reads: the projector's output (Encoding.projected)
when the checkpoint has one (LLaVA, an mmproj .gguf), else the tower's last hidden state
(Encoding.embeddings), which a runtime can take only if it runs the projector itself. One row per
kept token, in token order; fovea's token count is the budget's, not the count a runtime's own
image processor would make, so a prompt must hold one placeholder per row where the runtime
expands placeholders itself (image_token_count()).

The dicts and arrays returned are plain numpy; none of the runtimes is imported here. The forms
follow the runtimes' documented inputs (vLLM's multi_modal_data image embeddings, SGLang's
"precomputed_embedding" image data, HF's inputs_embeds, llama.cpp's llama_batch.embd); they are
not tested against the runtimes themselves (docs/serve.md).

This module also reads and writes safetensors bytes in memory (the format of every fovea file),
for the service and its client.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

__all__ = ["language_embeddings", "image_token_count", "vllm", "sglang", "hf_inputs_embeds", "llama_cpp",
           "safetensors_bytes", "parse_safetensors"]

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


def vllm(enc, prompt: str) -> Dict[str, Any]:
    """vLLM's offline input for one image as embeddings: {"prompt", "multi_modal_data": {"image":
    [1, N, E]}} for LLM.generate (LLaVA-style models take image embeddings of shape
    (images, feature size, hidden size) in place of a PIL image). Convert with torch.from_numpy."""
    return {"prompt": prompt, "multi_modal_data": {"image": language_embeddings(enc)[None]}}


def sglang(enc) -> Dict[str, Any]:
    """One entry of SGLang's image_data: {"format": "precomputed_embedding", "feature": [N, E]}
    (Engine.generate(input_ids=..., image_data=[...])). Convert with torch.from_numpy."""
    return {"format": "precomputed_embedding", "feature": language_embeddings(enc)}


def hf_inputs_embeds(text_embeds: np.ndarray, input_ids: Sequence[int], image_token_id: int, enc) -> np.ndarray:
    """transformers' inputs_embeds for one sequence: `text_embeds` [T, E] (the language model's
    get_input_embeddings()(input_ids)) with the rows at the image placeholder tokens replaced by the
    image's embeddings, in order, as LLaVA's forward does. The prompt must hold exactly
    image_token_count(enc) placeholders. Returns a new [T, E] array (add the batch axis for
    model.generate(inputs_embeds=...))."""
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


def llama_cpp(enc) -> Dict[str, Any]:
    """llama.cpp's embedding input: {"embd": [n_tokens, n_embd] float32 C-contiguous (copy into
    llama_batch_init(n_tokens, n_embd, 1).embd, or pass .ctypes.data), "n_tokens", "n_embd"}; the
    positions are the caller's (n_past + i), as for mtmd's image chunks."""
    e = language_embeddings(enc)
    return {"embd": e, "n_tokens": int(e.shape[0]), "n_embd": int(e.shape[1])}
