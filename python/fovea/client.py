"""fovea.Client: the Python client of the fovea service (`python3 -m fovea.serve`).

    c = fovea.Client("http://127.0.0.1:8080")                # api_key="..." for a service started with one
    e = c.encode("photo.jpg", fixations=[(512, 300)])     # a RemoteEncoding
    e.embeddings, e.projected, e.positions, e.metadata     # numpy arrays, the file's metadata
    e.cache, e.batch                                       # "hit" / "miss" / ..., requests batched with it
    e = c.encode(path="/data/photo.jpg")                   # an image the service reads (--allow-path /data)
    t = c.tokenize("photo.jpg", budget=300)                # a RemoteTokens: the JSON summary (a dict) and
    t.patches, t.positions, t.levels, t.metadata           #   the token file's numpy arrays
    with c.video_session(budget=200, fixation=(320, 180)) as s:
        for frame in frames:                               # [H, W, 3] uint8 arrays, or image files' bytes
            r = s.push(frame, fixations=[(320, 180)])      # r.embeddings, r.recomputed, r.metadata
    fovea.handoff.vllm(e, prompt)                          # any hand-off form takes a RemoteEncoding

The standard library only (urllib): no HTTP package to install; arrays are sent as PNG files
made by fovea.encode_image. Errors from the service raise
fovea.client.ServiceError with its status and its one-line message; a service that cannot be
reached raises OSError.
"""

from __future__ import annotations

import io
import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .handoff import parse_safetensors, parse_safetensors_json

__all__ = ["Client", "RemoteEncoding", "RemoteTokens", "RemoteFrame", "RemoteVideoSession", "ServiceError"]

ImageLike = Union[str, "os.PathLike[str]", bytes, np.ndarray]


class ServiceError(Exception):
    """An error answer: .status (the HTTP status) and .message (the service's one line)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class RemoteEncoding:
    """An encode's result: the arrays of the file `fovea encode -o` writes (embeddings, positions,
    levels, and projected, class_token, window... when present), its metadata, and how the
    service computed it (.cache, .batch, .encode_ms). .file is the file's bytes, as received."""

    def __init__(self, data: bytes, headers: Mapping[str, str]):
        self.file = data
        self.tensors, self.metadata = parse_safetensors(data)
        self.cache = headers.get("x-fovea-cache")
        self.batch = int(headers.get("x-fovea-batch") or 1)
        self.encode_ms = float(headers.get("x-fovea-encode-ms") or 0.0)

    def __getattr__(self, name: str):
        t = self.__dict__.get("tensors", {})
        if name in t:
            return t[name]
        if name in ("projected", "class_token", "pooled", "image_embeds", "logits", "window",
                    "window_class_tokens"):
            return None
        raise AttributeError(name)

    def __len__(self) -> int:
        return int(self.tensors["embeddings"].shape[0])

    def save(self, path) -> None:
        """Write the file as received (what `fovea encode -o` writes)."""
        with open(path, "wb") as f:
            f.write(self.file)


class RemoteTokens(dict):
    """A tokenization's answer: the JSON summary (this dict: tokens, budget, foveation, windows,
    positions, levels per level, token_boxes, token_norms, timings_ms, warnings, and overlay_png
    / seen_png when asked) with the token file's arrays as numpy attributes (.patches,
    .positions, .levels, .rate_map, .relevance, and window, covered... for the windows
    foveation), .metadata (the file's) and .cache."""

    def __init__(self, body: Dict[str, Any], headers: Mapping[str, str]):
        super().__init__(body)
        self.tensors, self.metadata = parse_safetensors_json(body)
        self.cache = headers.get("x-fovea-cache")

    def __getattr__(self, name: str):
        t = self.__dict__.get("tensors", {})
        if name in t:
            return t[name]
        raise AttributeError(name)


class RemoteFrame(RemoteEncoding):
    """One video frame's result: embeddings (or patches without a model), positions, levels,
    recomputed [N] uint8, previous_row [N] int64, and metadata (frame, pts, refresh, ...)."""

    def __init__(self, data: bytes, headers: Mapping[str, str]):
        super().__init__(data, headers)
        self.refresh = self.metadata.get("refresh") == "true"
        self.recomputed_tokens = int(self.metadata.get("recomputed_tokens", 0))

    def __len__(self) -> int:
        return int(self.tensors["positions"].shape[0])


def _png(rgb: np.ndarray) -> bytes:
    a = np.asarray(rgb)
    if a.dtype != np.uint8 or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3):
        raise TypeError("an image array must be [H, W, 3] or [H, W] uint8")
    from . import encode_image
    return encode_image(a)


def _image_bytes(image: ImageLike) -> Tuple[bytes, str]:
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image), "image"
    if isinstance(image, np.ndarray):
        return _png(image), "array.png"
    if isinstance(image, (str, os.PathLike)):
        with open(image, "rb") as f:
            return f.read(), os.path.basename(os.fspath(image))
    mode = getattr(image, "mode", None)  # a PIL image
    if isinstance(mode, str) and callable(getattr(image, "convert", None)):
        return _png(np.asarray(image.convert("RGB"))), "image.png"
    raise TypeError(f"image must be a path, the file's bytes, a uint8 array or a PIL image, got {type(image).__name__}")


def _fields(**kw) -> Dict[str, str]:
    out = {}
    for k, v in kw.items():
        if v is None or (isinstance(v, (list, tuple)) and not v):
            continue
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif isinstance(v, (list, tuple)):
            out[k] = json.dumps([[float(x) for x in item] for item in v])
        else:
            out[k] = str(v)
    return out


class Client:
    """A fovea service at `url` (e.g. "http://127.0.0.1:8080"); `timeout` in seconds per request."""

    def __init__(self, url: str = "http://127.0.0.1:8080", timeout: float = 120.0, api_key: Optional[str] = None):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.api_key = api_key

    # -- plumbing --

    def _request(self, method: str, path: str, fields: Optional[Mapping[str, str]] = None,
                 image: Optional[Tuple[bytes, str]] = None):
        body, headers = None, {}
        if fields is not None or image is not None:
            boundary = uuid.uuid4().hex
            buf = io.BytesIO()
            for k, v in (fields or {}).items():
                buf.write(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
            if image is not None:
                data, name = image
                safe = name.replace('"', "_").replace("\r", "_").replace("\n", "_")
                buf.write(f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{safe}"\r\n'
                          f"Content-Type: application/octet-stream\r\n\r\n".encode())
                buf.write(data)
                buf.write(b"\r\n")
            buf.write(f"--{boundary}--\r\n".encode())
            body = buf.getvalue()
            headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.read(), {k.lower(): v for k, v in r.headers.items()}
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                message = json.loads(raw)["error"]
            except (ValueError, KeyError, TypeError):
                message = raw.decode(errors="replace").strip() or e.reason
            raise ServiceError(e.code, message) from None

    def _json(self, method: str, path: str, fields=None, image=None):
        data, _ = self._request(method, path, fields, image)
        return json.loads(data)

    # -- the routes --

    def health(self) -> Dict[str, Any]:
        return self._json("GET", "/healthz")

    def models(self) -> Dict[str, Any]:
        return self._json("GET", "/v1/models")

    def encode(self, image: Optional[ImageLike] = None, fixations: Iterable[Sequence[float]] = (),
               regions: Iterable[Sequence[float]] = (), budget: Optional[int] = None, *, model: Optional[str] = None,
               precision: Optional[str] = None, foveation: Optional[str] = None, window_grid: Optional[int] = None,
               keep_covered: bool = False, uniform: bool = False, path: Optional[str] = None) -> RemoteEncoding:
        """As Model.encode_full(tokenize(image, ...)) on the service: the file `fovea encode -o` writes.
        `path` instead of `image`: a file the service reads itself (under its --allow-path)."""
        f = _fields(fixations=list(fixations), regions=list(regions), budget=budget, model=model, precision=precision,
                    foveation=foveation, window_grid=window_grid, keep_covered=keep_covered or None,
                    uniform=uniform or None, path=path)
        data, headers = self._request("POST", "/v1/encode", f, self._image(image, path))
        return RemoteEncoding(data, headers)

    def tokenize(self, image: Optional[ImageLike] = None, fixations: Iterable[Sequence[float]] = (),
                 regions: Iterable[Sequence[float]] = (), budget: Optional[int] = None, *, model: Optional[str] = None,
                 foveation: Optional[str] = None, overlay: bool = False, seen: bool = False,
                 path: Optional[str] = None) -> RemoteTokens:
        """The tokenization: a RemoteTokens, the JSON summary with the token file's numpy arrays
        (overlay_png / seen_png, base64 PNG pictures, with overlay=True / seen=True)."""
        f = _fields(fixations=list(fixations), regions=list(regions), budget=budget, model=model, foveation=foveation,
                    overlay=overlay or None, seen=seen or None, path=path, format="json")
        data, headers = self._request("POST", "/v1/tokenize", f, self._image(image, path))
        return RemoteTokens(json.loads(data), headers)

    @staticmethod
    def _image(image: Optional[ImageLike], path: Optional[str]) -> Optional[Tuple[bytes, str]]:
        if (image is None) == (path is None):
            raise TypeError("give an image or a path (a file the service reads), one of them")
        return None if image is None else _image_bytes(image)

    def video_session(self, budget: int = 273, *, model: Optional[str] = None, reuse: Optional[str] = None,
                      keyframe: int = 0, threshold: Optional[float] = None, precision: Optional[str] = None,
                      fixation: Optional[Sequence[float]] = None) -> "RemoteVideoSession":
        """A video session; `fixation` (x, y) is the query of every frame pushed without one."""
        f = _fields(budget=budget, model=model, reuse=reuse, keyframe=keyframe or None, threshold=threshold,
                    precision=precision, fixation=[fixation] if fixation is not None else None)
        return RemoteVideoSession(self, self._json("POST", "/v1/video/sessions", f))


class RemoteVideoSession:
    """A video session on the service; close() (or the with block's end) ends it."""

    def __init__(self, client: Client, info: Dict[str, Any]):
        self.client = client
        self.id = info["session"]
        self.info = info

    def push(self, frame: ImageLike, fixations: Iterable[Sequence[float]] = (),
             regions: Iterable[Sequence[float]] = (), pts: Optional[float] = None) -> RemoteFrame:
        f = _fields(fixations=list(fixations), regions=list(regions), pts=pts)
        data, headers = self.client._request("POST", f"/v1/video/sessions/{self.id}/frames", f, _image_bytes(frame))
        return RemoteFrame(data, headers)

    def status(self) -> Dict[str, Any]:
        return self.client._json("GET", f"/v1/video/sessions/{self.id}")

    def close(self) -> Dict[str, Any]:
        return self.client._json("DELETE", f"/v1/video/sessions/{self.id}")

    def __enter__(self) -> "RemoteVideoSession":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.close()
        except ServiceError:
            pass
