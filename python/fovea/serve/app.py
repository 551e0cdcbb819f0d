"""The FastAPI application of `python3 -m fovea.serve` (routes, limits, errors, metrics).

A request is a multipart form (the image as the file field `image`, everything else as fields),
a JSON object (the image base64 in "image"), or, for images the service may read itself, a
`path` under an --allow-path folder; the same names also work as query parameters. Every error
is a JSON object {"error": "..."} whose message is one line, with a 4xx status for what the
client can fix (400 bad field, image or JSON, 401 no or wrong API key, 403 a path outside
--allow-path, 404 unknown model, session or file, 408 a request that did not arrive in time,
413 too large, 415 not a form or JSON) and 503 (with Retry-After) when the service is busy, past
the request's deadline, or shutting down.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import os
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import FormParser, MultiPartParser
from starlette.requests import ClientDisconnect

import fovea
import fovea.handoff

from .batching import Batcher, Busy
from .cache import Entry, ResultCache
from .metrics import Metrics
from .video import NoSession, SessionStore, TooManySessions

log = logging.getLogger("fovea.serve")


@dataclass
class ServeConfig:
    """Limits and knobs (each is a `python3 -m fovea.serve` flag)."""
    max_upload_bytes: int = 32 << 20     # a request body (or a path's file) larger than this: 413
    max_pixels: int = 40_000_000         # decoded images larger than this: 413
    max_budget: int = 4096               # tokens a request may ask for
    max_query_items: int = 256           # fixations + regions of one request
    max_batch: int = 8                   # requests encoded in one encoder call
    max_batch_tokens: int = 512          # and their tokens together (a larger request runs alone)
    batch_window_ms: float = 0.0         # wait this long for company (0: batch only what queued)
    encode_workers: int = 1              # encoder calls of small requests at once (large ones: a lane of their own)
    max_queue: int = 64                  # encodes waiting per model; more: 503
    request_timeout_s: float = 60.0      # from the first byte of a request to its answer
    cache_bytes: int = 256 << 20         # the content-hash cache's memory (0: off)
    cache_dir: Optional[str] = None      # a second cache level on disk (atomic writes)
    cache_dir_bytes: int = 1 << 30       # its size
    allow_paths: Tuple[str, ...] = ()    # folders whose images a request may name by path
    api_key: Optional[str] = None        # required of every request but GET / and /healthz
    max_sessions: int = 16               # open video sessions
    session_idle_s: float = 300.0        # a session unused this long is closed
    threads: int = 0                     # threads of one tokenize or encode (0: every hardware thread)
    tokenize_concurrency: int = 0        # tokenizations at once (0: the hardware threads)
    precision: str = "fp32"              # the default precision of /v1/encode
    warmup: bool = True                  # one encode per model before serving


class ApiError(Exception):
    """`own`: the failure belongs to this request alone (its deadline), so identical requests
    waiting for its result compute their own."""

    def __init__(self, status: int, message: str, headers: Optional[Mapping[str, str]] = None, own: bool = False):
        super().__init__(message)
        self.status = status
        self.message = one_line(message)
        self.headers = dict(headers or {})
        self.own = own


class Disconnected(Exception):
    """The client went away: its work is dropped and nobody is answered."""
    own = True


def one_line(message: str) -> str:
    return "; ".join(part.strip() for part in str(message).splitlines() if part.strip()) or "error"


def error_response(status: int, message: str, headers: Optional[Mapping[str, str]] = None) -> JSONResponse:
    return JSONResponse({"error": one_line(message)}, status_code=status, headers=dict(headers or {}))


# ---- fields -------------------------------------------------------------------------------------

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _json_value_text(v: Any) -> Optional[str]:
    # A JSON body's values as the form's text, so that one set of checks reads both.
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)


class Fields:
    """A request's fields (query parameters, then body fields), read once each; what is left
    unread is an unknown field."""

    def __init__(self, items: Mapping[str, Any]):
        self._items = dict(items)
        self._read = set()

    def raw(self, name: str) -> Optional[Any]:
        self._read.add(name)
        return self._items.get(name)

    def text(self, name: str, default: Optional[str] = None) -> Optional[str]:
        v = self.raw(name)
        if v is None:
            return default
        if isinstance(v, UploadFile):
            raise ApiError(400, f"{name} must be a plain field, not a file")
        return v.strip()

    def int(self, name: str, lo: int, hi: int, default: Optional[int] = None) -> Optional[int]:
        v = self.text(name)
        if v is None or v == "":
            return default
        try:
            n = int(v)
        except ValueError:
            raise ApiError(400, f"{name} must be an integer, got {v[:40]!r}") from None
        if not lo <= n <= hi:
            raise ApiError(400, f"{name} must be in [{lo}, {hi}], got {v[:40]}")
        return n

    def float(self, name: str, lo: float, hi: float, default: Optional[float] = None) -> Optional[float]:
        v = self.text(name)
        if v is None or v == "":
            return default
        try:
            x = float(v)
        except ValueError:
            raise ApiError(400, f"{name} must be a number, got {v[:40]!r}") from None
        if not (lo <= x <= hi):
            raise ApiError(400, f"{name} must be in [{lo:g}, {hi:g}], got {v[:40]}")
        return x

    def bool(self, name: str, default: bool = False) -> bool:
        v = self.text(name)
        if v is None:
            return default
        if v.lower() in _TRUE:
            return True
        if v.lower() in _FALSE:
            return False
        raise ApiError(400, f"{name} must be true or false, got {v[:40]!r}")

    def choice(self, name: str, choices: Tuple[str, ...], default: Optional[str] = None) -> Optional[str]:
        v = self.text(name)
        if v is None or v == "":
            return default
        if v not in choices:
            raise ApiError(400, f"{name} must be one of {', '.join(choices)}; got {v[:40]!r}")
        return v

    def tuples(self, name: str, sizes: Tuple[int, ...], limit: int) -> List[Tuple[float, ...]]:
        """JSON ([[x, y], ...]) or the CLI's form (x,y;x,y,r)."""
        v = self.text(name)
        if not v:
            return []
        try:
            items = json.loads(v) if v[0] in "[{" else [[float(x) for x in part.split(",")] for part in v.split(";")
                                                         if part.strip()]
            if isinstance(items, list) and items and not isinstance(items[0], (list, tuple)):
                items = [items]  # one [x, y] given bare
            out = [tuple(float(x) for x in item) for item in items]
        except (ValueError, TypeError, RecursionError):
            raise ApiError(400, f"{name} must be JSON [[...], ...] or 'a,b;c,d' numbers, got {v[:60]!r}") from None
        if len(out) > limit:
            raise ApiError(400, f"{name}: {len(out)} given, at most {limit}")
        for t in out:
            if len(t) not in sizes:
                raise ApiError(400, f"{name}: each needs {' or '.join(map(str, sizes))} numbers, one has {len(t)}")
            if not all(np.isfinite(t)):
                raise ApiError(400, f"{name}: values must be finite")
        return out

    def unknown(self) -> List[str]:
        return sorted(k for k in self._items if k not in self._read)

    def check_known(self, route: str) -> None:
        if self.unknown():
            raise ApiError(400, f"unknown field {self.unknown()[0][:60]!r} for {route}")


def deadline_of(request: Request) -> float:
    return request.scope.get("fovea.deadline", float("inf"))


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    """The whole body, or 413 past max_bytes, 408 past the request's deadline."""
    loop = asyncio.get_running_loop()
    deadline = deadline_of(request)
    chunks, total = [], 0
    stream = request.stream().__aiter__()
    while True:
        left = deadline - loop.time()
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            chunk = await asyncio.wait_for(stream.__anext__(), left)
        except StopAsyncIteration:
            break
        except asyncio.TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {timeout_s:g} s", {"Connection": "close"}) from None
        except ClientDisconnect:
            raise Disconnected() from None
        total += len(chunk)
        if total > max_bytes:
            raise ApiError(413, f"the request body is over the limit of {max_bytes} bytes", {"Connection": "close"})
        chunks.append(chunk)
    return b"".join(chunks)


async def _once(body: bytes):
    yield body
    yield b""  # the end, as Request.stream() marks it (the parsers flush their last field on it)


class _MemoryParser(MultiPartParser):
    max_file_size = 1 << 62  # the body is in memory already (and capped): no file spills to disk


async def read_fields(request: Request, svc: "Service") -> Tuple[Fields, Optional[bytes], str]:
    """(fields, the image's bytes or None, its name): from the query, a multipart or urlencoded
    form, or a JSON object; the image uploaded (`image`) or read from the service's disk (`path`)."""
    c = svc.config
    items: Dict[str, Any] = dict(request.query_params)
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await read_body(request, c.max_upload_bytes, c.request_timeout_s) if request.method == "POST" else b""
    image, name = None, "<upload>"
    if body or ctype in ("multipart/form-data", "application/x-www-form-urlencoded"):
        if ctype == "application/json":
            try:
                obj = json.loads(body)
            except RecursionError:
                raise ApiError(400, "malformed JSON: nested too deeply") from None
            except ValueError as e:
                raise ApiError(400, f"malformed JSON: {e}") from None
            if not isinstance(obj, dict):
                raise ApiError(400, f"the JSON body must be an object, not {type(obj).__name__}")
            data = obj.pop("image", None)
            if data is not None:
                if not isinstance(data, str):
                    raise ApiError(400, "image must be the file's bytes in base64 (a string)")
                try:
                    image = base64.b64decode(data, validate=True)
                except (binascii.Error, ValueError):
                    raise ApiError(400, "image is not valid base64") from None
                fname = obj.pop("filename", None)
                if isinstance(fname, str) and fname:
                    name = fname
            for k, v in obj.items():
                items[str(k)] = _json_value_text(v)
        elif ctype in ("multipart/form-data", "application/x-www-form-urlencoded"):
            parser = (_MemoryParser if ctype == "multipart/form-data" else FormParser)(request.headers, _once(body))
            try:
                form = await parser.parse()
            except Exception as e:  # python-multipart's own message for a malformed body
                raise ApiError(400, f"malformed form: {e}") from None
            for k, v in form.multi_items():
                items[k] = v
        else:
            raise ApiError(415, "send a multipart form (the image as the file field 'image') or a JSON object, "
                                f"not {ctype or 'no content type'}")
    f = Fields(items)
    up = f.raw("image")
    if up is not None:
        if not isinstance(up, UploadFile):
            raise ApiError(400, "image must be a file field (multipart), e.g. curl -F image=@photo.jpg")
        image = await up.read()
        name = up.filename or name
        if not image:
            raise ApiError(400, "the image file is empty")
    path = f.text("path")
    if path:
        if image is not None:
            raise ApiError(400, "send an image or a path, not both")
        image, name = await run_in_threadpool(svc.read_path, path)
    return f, image, name


# ---- small encoders ----------------------------------------------------------------------------

def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def _norms(a: Optional[np.ndarray]) -> List[float]:
    if a is None or a.size == 0:
        return []
    return np.round(np.linalg.norm(a.reshape(a.shape[0], -1).astype(np.float64), axis=1), 3).tolist()


def tokens_summary(t, model_name: Optional[str]) -> dict:
    levels, counts = np.unique(t.levels, return_counts=True)
    windowed = t.foveation == "windows"
    return {"model": model_name, "tokens": len(t), "budget": t.budget, "image_size": list(t.image_size),
            "patch_size": t.patch_size, "foveation": t.foveation, "mode": t.mode,
            "windows": _jsonable(t.windows) if windowed else [],
            "tokens_kept": t.tokens_kept, "levels": {str(int(l)): int(c) for l, c in zip(levels, counts)},
            "positions": np.round(t.positions, 2).tolist(), "token_levels": t.levels.tolist(),
            "token_boxes": np.round(t.boxes, 1).tolist(), "token_norms": _norms(t.patches),
            "token_window": t.window.tolist() if windowed else None,
            "token_covered": t.covered.tolist() if windowed else None,
            "timings_ms": _jsonable(dict(t.timings)), "warnings": list(t.query_outside)}


def patches_rgb(t) -> bytes:
    """[N, P, P, 3] uint8: every token's patch as the model sees it, de-normalised (the explorer
    draws them over their boxes, as Tokens.seen() does)."""
    meta = t.metadata
    mean = np.array(meta["norm_mean"].split(","), np.float32)[None, :, None, None]
    std = np.array(meta["norm_std"].split(","), np.float32)[None, :, None, None]
    p = np.asarray(t.patches, np.float32)
    if p.dtype == np.uint8 or meta.get("dtype") == "U8":
        return np.ascontiguousarray(np.asarray(t.patches).transpose(0, 2, 3, 1)).tobytes()
    return np.clip(np.rint((p * std + mean) * 255), 0, 255).astype(np.uint8).transpose(0, 2, 3, 1).tobytes()


def json_tensors(data: bytes, wanted: Optional[List[str]]) -> dict:
    try:
        return fovea.handoff.safetensors_json(data, wanted)
    except ValueError as e:
        raise ApiError(400, f"tensors: {e}") from None


def tensors_wanted(spec: str) -> Optional[List[str]]:
    """The `tensors` field: None for every tensor, else the names asked for."""
    if spec in ("", "all"):
        return None
    if spec == "none":
        return []
    return [s.strip() for s in spec.split(",") if s.strip()]


# ---- the service -------------------------------------------------------------------------------

class Service:
    """The state behind the routes: warm models, their encoders, the cache, video sessions."""

    def __init__(self, models: Mapping[str, Any], config: ServeConfig):
        if not models:
            raise ValueError("the service needs at least one model")
        self.config = config
        self.metrics = Metrics()
        self.models: Dict[str, fovea.Model] = {}
        for name, spec in models.items():
            self.models[name] = spec if isinstance(spec, fovea.Model) else fovea.Model(spec)
        self.default_model = next(iter(self.models))
        self.allowed = tuple(os.path.realpath(p) for p in config.allow_paths)
        for p in self.allowed:
            if not os.path.isdir(p):
                raise ValueError(f"--allow-path {p}: not a folder")
        self.batchers = {
            name: Batcher(m, max_batch=config.max_batch, max_tokens=config.max_batch_tokens, max_queue=config.max_queue,
                          window_ms=config.batch_window_ms, threads=config.threads, workers=config.encode_workers,
                          name=name, on_batch=self.metrics.batch_done)
            for name, m in self.models.items()}
        self.cache = ResultCache(config.cache_bytes, config.cache_dir, config.cache_dir_bytes)
        self.sessions = SessionStore(config.max_sessions, config.session_idle_s)
        n = config.tokenize_concurrency or os.cpu_count() or 2
        self.tokenize_slots = threading.BoundedSemaphore(n)
        self.draining = False
        self.started = time.time()
        self.metrics.bind(self)
        if config.warmup:
            for m in self.models.values():
                self._warm(m)

    def _warm(self, model) -> None:
        # The first encode of a model pays one-time costs (weight layouts, thread pools).
        img = np.full((64, 64, 3), 128, np.uint8)
        t = fovea.tokenize(img, budget=4, model=model, threads=self.config.threads)
        model.encode_full(t, self.config.precision, self.config.threads)
        model.encode_many([t, t], self.config.precision, 1)

    def close(self) -> None:
        self.draining = True
        for b in self.batchers.values():
            b.close()
        self.sessions.clear()

    def model(self, name: Optional[str]) -> Tuple[str, fovea.Model]:
        name = name or self.default_model
        m = self.models.get(name)
        if m is None:
            raise ApiError(404, f"no model {name[:60]!r} is served (GET /v1/models lists them: {', '.join(self.models)})")
        return name, m

    def describe_model(self, name: str) -> dict:
        m = self.models[name]
        cfg = m.config
        foveation = "mixed" if m.is_random else "windows"
        grid = int(cfg.get("position_grid") or 14)
        return {"name": name, "source": m.source, "description": m.description, "random_weights": m.is_random,
                "family": cfg.get("family"), "hidden_size": cfg.get("hidden_size"), "patch_size": cfg.get("patch_size"),
                "native_size": cfg.get("native_size"), "default_foveation": foveation,
                "default_budget": 2 * grid * grid if foveation == "windows" else 273,
                "heads": list(m.heads), "pooled_output": m.pooled_output, "config": _jsonable(dict(cfg))}

    def check_open(self) -> None:
        if self.draining:
            raise ApiError(503, "the service is shutting down", {"Retry-After": "1"})

    def read_path(self, path: str) -> Tuple[bytes, str]:
        """An image the service reads itself: only under an --allow-path folder (blocking)."""
        if not self.allowed:
            raise ApiError(403, "this service reads no paths: start it with --allow-path DIR, or upload the image")
        if not os.path.isabs(path):
            raise ApiError(400, f"path must be absolute, got {path[:200]!r}")
        real = os.path.realpath(path)
        if not any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in self.allowed):
            raise ApiError(403, f"path {path[:200]!r} is not under an --allow-path folder")
        try:
            size = os.stat(real).st_size
            if size > self.config.max_upload_bytes:
                raise ApiError(413, f"{path[:200]} is {size} bytes, over the limit of {self.config.max_upload_bytes}")
            with open(real, "rb") as fh:
                return fh.read(self.config.max_upload_bytes + 1), path
        except FileNotFoundError:
            raise ApiError(404, f"no file {path[:200]!r}") from None
        except IsADirectoryError:
            raise ApiError(400, f"{path[:200]!r} is a folder, not an image") from None
        except PermissionError:
            raise ApiError(403, f"the service may not read {path[:200]!r}") from None

    def tokenize_args(self, f: Fields) -> dict:
        c = self.config
        args = {
            "budget": f.int("budget", 1, c.max_budget),
            "fixations": f.tuples("fixations", (2, 3, 4), c.max_query_items),
            "regions": f.tuples("regions", (4, 5), c.max_query_items),
            "foveation": f.choice("foveation", ("windows", "mixed")),
            "window_grid": f.int("window_grid", 1, 64),
            "keep_covered": f.bool("keep_covered"),
            "uniform": f.bool("uniform"),
            "e0": f.float("e0", 1e-6, 10.0),
            "sharpness": f.float("sharpness", 0.5, 4.0),
        }
        if len(args["fixations"]) + len(args["regions"]) > c.max_query_items:
            raise ApiError(400, f"at most {c.max_query_items} fixations and regions together")
        return args

    def tokenize(self, image: bytes, name: str, model, args: dict):
        with self.tokenize_slots:
            try:
                return fovea.tokenize(image, model=model, max_pixels=self.config.max_pixels, source=name,
                                      threads=self.config.threads, **args)
            except (ValueError, TypeError) as e:
                raise ApiError(413 if "max_pixels" in str(e) or "pixels, over" in str(e) else 400, str(e)) from None
            except (RuntimeError, OSError) as e:
                msg = str(e)
                status = 413 if "limit" in msg or "max_pixels" in msg else 400
                raise ApiError(status, f"image {name[:200]}: {msg}") from None

    def encode_json(self, enc, t, model_name: str, batch: int, wanted: Optional[List[str]]) -> dict:
        proj = enc.projected
        out = {"model": model_name, "tokens": len(enc), "tokens_tokenized": len(t),
               "hidden_size": int(enc.embeddings.shape[1]) if enc.embeddings.ndim == 2 else 0,
               "projected_dim": int(proj.shape[1]) if proj is not None else None,
               "foveation": t.foveation, "windows": len(t.windows) if t.foveation == "windows" else 0,
               "image_size": list(t.image_size), "precision": enc.precision, "encode_ms": enc.encode_ms,
               "batch": batch, "token_norms": _norms(enc.embeddings), "warnings": list(t.query_outside)}
        out.update(json_tensors(enc.to_bytes(), wanted))
        return out


async def until_done(request: Request, aw, svc: Service, what: str):
    """Awaits `aw` unless the client goes away first (Disconnected) or the request's deadline
    passes (503): either way `aw` is cancelled, which drops an encode that has not started."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(aw)

    async def gone():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(gone())
    try:
        left = max(0.0, deadline_of(request) - loop.time())
        done, _ = await asyncio.wait({task, watch}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if task in done:
        return task.result()
    task.cancel()
    if watch in done:
        svc.metrics.dropped("disconnect")
        raise Disconnected()
    svc.metrics.dropped("timeout")
    raise ApiError(503, f"{what} did not finish within the request timeout of {svc.config.request_timeout_s:g} s; "
                        "its work was dropped", {"Retry-After": "5"}, own=True)


class Guard:
    """Outermost ASGI layer: the request's deadline, the API key, the Content-Length cap, one-line
    500s, and the request metrics."""

    OPEN = {("GET", "/"), ("GET", "/healthz")}

    def __init__(self, app, svc: Service):
        self.app = app
        self.svc = svc

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        svc, c = self.svc, self.svc.config
        t0 = time.perf_counter()
        scope["fovea.deadline"] = asyncio.get_running_loop().time() + c.request_timeout_s
        status = [0]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        response = None
        if c.api_key and (scope["method"], scope["path"]) not in self.OPEN:
            given = headers.get("x-api-key") or ""
            auth = headers.get("authorization", "")
            if auth[:7].lower() == "bearer ":
                given = auth[7:].strip()
            if not hmac.compare_digest(given.encode(), c.api_key.encode()):
                response = error_response(401, "a valid API key is required: Authorization: Bearer KEY or X-API-Key: KEY"
                                          if not given else "the API key is not valid", {"WWW-Authenticate": "Bearer"})
        length = headers.get("content-length", "")
        if response is None and length.isdigit() and int(length) > c.max_upload_bytes:
            response = error_response(413, f"the request body is {length} bytes, over the limit of {c.max_upload_bytes}",
                                      {"Connection": "close"})
        try:
            if response is not None:
                await response(scope, receive, send_status)
            else:
                await self.app(scope, receive, send_status)
        except Exception as e:  # a bug: one line to the client, the trace to the log
            log.exception("internal error")
            if not status[0]:
                await error_response(500, f"internal error: {type(e).__name__}: {e}")(scope, receive, send_status)
        finally:
            route = scope.get("route")
            svc.metrics.request_done(getattr(route, "path", "other"), scope["method"], status[0] or 499,
                                     time.perf_counter() - t0)


def create_app(models: Mapping[str, Any], config: Optional[ServeConfig] = None) -> FastAPI:
    """The application serving `models` ({name: fovea.Model or a checkpoint spec}; the first is the
    default). Models are loaded (and warmed) here, before the first request."""
    config = config or ServeConfig()
    svc = Service(models, config)
    # A query outside the image is reported in the response (warnings), not logged per request.
    warnings.filterwarnings("ignore", message=".*lies outside the.*image")
    app = FastAPI(title="fovea", version=fovea.__version__, docs_url="/docs", redoc_url=None)
    app.state.service = svc
    app.add_middleware(Guard, svc=svc)

    @app.on_event("shutdown")
    def _shutdown():
        svc.close()

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError):
        return error_response(e.status, e.message, e.headers)

    @app.exception_handler(Disconnected)
    async def _disconnected(request: Request, e: Disconnected):
        return error_response(499, "the client went away")  # never delivered: for the metrics

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        detail = str(e.detail)
        if e.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.method} {request.url.path[:200]} (GET /docs lists the routes)"
        elif e.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path[:200]}"
        return error_response(e.status_code, detail, getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError):
        errs = e.errors()
        first = errs[0] if errs else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return error_response(400, f"{where}: {first.get('msg', 'invalid request')}")

    async def cached(kind: str, key_model: str, params: dict, image: bytes, compute):
        if not svc.cache.enabled:
            entry, how = await compute(), "off"
        else:
            key = svc.cache.key(kind, key_model, params, image)
            entry, how = await svc.cache.get_or_compute(key, compute, run_in_threadpool)
        svc.metrics.cache_result(kind, how)
        return Response(entry.body, media_type=entry.media_type, headers={**entry.headers, "X-Fovea-Cache": how})

    # ---- routes ----

    @app.get("/", response_class=HTMLResponse)
    def explorer():
        path = os.path.join(os.path.dirname(__file__), "explorer.html")
        with open(path, encoding="utf-8") as fh:
            return HTMLResponse(fh.read())

    @app.get("/healthz")
    def healthz():
        body = {"status": "draining" if svc.draining else "ok", "version": fovea.__version__,
                "models": list(svc.models), "uptime_s": round(time.time() - svc.started, 3),
                "queued": {n: b.depth() for n, b in svc.batchers.items()},
                "encoding": {n: b.running() for n, b in svc.batchers.items()}, "video_sessions": len(svc.sessions)}
        return JSONResponse(body, status_code=503 if svc.draining else 200)

    @app.get("/metrics")
    def metrics():
        data, ctype = svc.metrics.render()
        return Response(data, media_type=ctype)

    @app.get("/v1/models")
    def list_models():
        return {"default": svc.default_model, "models": [svc.describe_model(n) for n in svc.models]}

    @app.post("/v1/tokenize")
    async def tokenize(request: Request):
        svc.check_open()
        f, image, name = await read_fields(request, svc)
        if image is None:
            raise ApiError(400, "no image: send it as the file field 'image' (curl -F image=@photo.jpg), "
                                "base64 in a JSON object's \"image\", or a path")
        model_field = f.text("model")
        if model_field == "none":
            model_name, model = None, None
        else:
            model_name, model = svc.model(model_field)
        args = svc.tokenize_args(f)
        fmt = f.choice("format", ("safetensors", "json"), "safetensors")
        overlay = f.bool("overlay")
        seen = f.bool("seen")
        rgb = f.bool("rgb")
        wanted = tensors_wanted(f.text("tensors", "all"))
        f.check_known("/v1/tokenize")
        params = {"query": [args["fixations"], args["regions"]], "budget": args["budget"],
                  "mode": {**args, "format": fmt, "overlay": overlay, "seen": seen, "rgb": rgb,
                           "tensors": wanted, "model": model_name, "source": name}}

        async def compute():
            def work():
                t = svc.tokenize(image, name, model, args)
                head = {"X-Fovea-Tokens": str(len(t))}
                if fmt == "safetensors":
                    return Entry(t.to_bytes(), "application/octet-stream", head)
                body = tokens_summary(t, model_name)
                body.update(json_tensors(t.to_bytes(), wanted))
                if overlay:
                    body["overlay_png"] = base64.b64encode(fovea.encode_image(t.overlay())).decode()
                if seen:
                    body["seen_png"] = base64.b64encode(fovea.encode_image(t.seen(threads=config.threads))).decode()
                if rgb:
                    body["patches_rgb"] = base64.b64encode(patches_rgb(t)).decode()
                return Entry(json.dumps(body).encode(), "application/json", head)
            return await until_done(request, run_in_threadpool(work), svc, "the tokenization")

        return await cached("tokenize", model.source if model else "-", params, image, compute)

    @app.post("/v1/encode")
    async def encode(request: Request):
        svc.check_open()
        f, image, name = await read_fields(request, svc)
        if image is None:
            raise ApiError(400, "no image: send it as the file field 'image' (curl -F image=@photo.jpg), "
                                "base64 in a JSON object's \"image\", or a path")
        model_name, model = svc.model(f.text("model"))
        args = svc.tokenize_args(f)
        precision = f.choice("precision", ("fp32", "bf16", "int8"), config.precision)
        fmt = f.choice("format", ("safetensors", "json"), "safetensors")
        wanted = tensors_wanted(f.text("tensors", "all"))
        f.check_known("/v1/encode")
        params = {"query": [args["fixations"], args["regions"]], "budget": args["budget"],
                  "mode": {**args, "precision": precision, "format": fmt, "tensors": wanted, "model": model_name,
                           "source": name}}

        async def compute():
            t = await until_done(request, run_in_threadpool(svc.tokenize, image, name, model, args), svc,
                                 "the tokenization")
            try:
                fut = svc.batchers[model_name].submit(t, precision)
            except Busy as e:
                svc.metrics.rejected("busy")
                raise ApiError(503, str(e), {"Retry-After": "1"}, own=True) from None
            try:
                enc, batch = await until_done(request, asyncio.wrap_future(fut), svc, "the encode")
            except (ValueError, TypeError) as e:
                raise ApiError(400, str(e)) from None
            svc.metrics.encoded(enc.encode_ms)
            headers = {"X-Fovea-Tokens": str(len(enc)), "X-Fovea-Batch": str(batch),
                       "X-Fovea-Encode-Ms": f"{enc.encode_ms:.3f}", "X-Fovea-Model": model_name}
            if fmt == "safetensors":
                return Entry(await run_in_threadpool(enc.to_bytes), "application/octet-stream", headers)
            body = await run_in_threadpool(svc.encode_json, enc, t, model_name, batch, wanted)
            return Entry(json.dumps(body).encode(), "application/json", headers)

        return await cached("encode", model.source, params, image, compute)

    # ---- video sessions ----

    @app.post("/v1/video/sessions", status_code=201)
    async def open_session(request: Request):
        svc.check_open()
        f, image, _ = await read_fields(request, svc)
        if image is not None:
            raise ApiError(400, "open a session without an image; send frames to /v1/video/sessions/{id}/frames")
        model_field = f.text("model")
        if model_field == "none":
            model_name, model = None, None
        else:
            model_name, model = svc.model(model_field)
        params = {
            "budget": f.int("budget", 1, config.max_budget, 273),
            "reuse": f.choice("reuse", ("incremental", "exact", "off")),
            "keyframe": f.int("keyframe", 0, 1 << 20, 0),
            "threshold": f.float("threshold", 0.0, 255.0, 8.0),
            "token_threshold": f.float("token_threshold", 0.0, 1e6, 0.07),
            "hysteresis": f.float("hysteresis", 0.0, 1e6, 0.1),
            "refresh_fraction": f.float("refresh_fraction", 1e-6, 1.0, 0.5),
            # Video sessions encode in fp32 or bf16; a service whose default is int8 streams in bf16.
            "precision": f.choice("precision", ("fp32", "bf16"),
                                  "bf16" if config.precision == "int8" else config.precision),
            "threads": config.threads,
        }
        fixation = f.tuples("fixation", (2, 3, 4), 1)
        f.check_known("/v1/video/sessions")
        try:
            s = await run_in_threadpool(svc.sessions.open, model_name, model, params, fixation)
        except TooManySessions as e:
            svc.metrics.rejected("sessions")
            raise ApiError(503, str(e), {"Retry-After": "5"}) from None
        except ValueError as e:
            raise ApiError(400, str(e)) from None
        svc.metrics.session_opened()
        return JSONResponse(s.describe(), status_code=201)

    def session(sid: str):
        try:
            return svc.sessions.get(sid)
        except NoSession as e:
            raise ApiError(404, e.args[0]) from None

    @app.get("/v1/video/sessions/{sid}")
    def get_session(sid: str):
        return session(sid).describe()

    @app.delete("/v1/video/sessions/{sid}")
    def close_session(sid: str):
        s = session(sid)
        svc.sessions.close(sid)
        return {**s.describe(), "closed": True}

    @app.post("/v1/video/sessions/{sid}/frames")
    async def push_frame(sid: str, request: Request):
        svc.check_open()
        s = session(sid)
        f, image, name = await read_fields(request, svc)
        if image is None:
            raise ApiError(400, "no frame: send it as the file field 'image'")
        fixations = f.tuples("fixations", (2, 3, 4), config.max_query_items) or f.tuples("fixation", (2, 3, 4), 1)
        regions = f.tuples("regions", (4, 5), config.max_query_items)
        pts = f.float("pts", -1e12, 1e12, None)
        fmt = f.choice("format", ("safetensors", "json"), "safetensors")
        wanted = tensors_wanted(f.text("tensors", "all"))
        f.check_known("a frame")
        if not fixations and not regions:
            fixations = s.fixation

        def work():
            try:
                pixels = fovea.decode_image(image, config.max_pixels)
            except (RuntimeError, OSError, ValueError) as e:
                msg = str(e)
                raise ApiError(413 if "limit" in msg or "max_pixels" in msg else 400, f"frame {name[:200]}: {msg}") from None
            with s.lock:
                try:
                    r = s.session.process(pixels, fixations, regions, pts=s.frames if pts is None else pts)
                except (ValueError, TypeError) as e:
                    raise ApiError(400, str(e)) from None
                s.frames += 1
                s.tokens += len(r)
                s.recomputed += int(r.recomputed_tokens)
                s.last_used = time.monotonic()
            return r

        r = await until_done(request, run_in_threadpool(work), svc, "the frame")
        svc.metrics.frame_done(len(r), int(r.recomputed_tokens))
        meta = {"frame": str(r.index), "pts": repr(float(r.pts)), "refresh": str(bool(r.refresh)).lower(),
                "refresh_reason": r.refresh_reason, "layout_changed": str(bool(r.layout_changed)).lower(),
                "approximate": str(bool(r.approximate)).lower(), "tokens": str(len(r)),
                "recomputed_tokens": str(int(r.recomputed_tokens)), "model": s.model_name or "",
                "reuse": s.session.reuse, "session": s.id}
        headers = {"X-Fovea-Tokens": str(len(r)), "X-Fovea-Recomputed": str(int(r.recomputed_tokens)),
                   "X-Fovea-Refresh": meta["refresh"]}
        tensors = {"positions": r.positions, "levels": r.levels, "recomputed": r.recomputed,
                   "previous_row": r.previous_row}
        if r.embeddings is not None:
            tensors["embeddings"] = r.embeddings
            if r.projected is not None:
                tensors["projected"] = r.projected
        else:
            tensors["patches"] = r.patches
        body = fovea.handoff.safetensors_bytes(tensors, meta)
        if fmt == "json":
            out = {**{k: meta[k] for k in ("session", "model", "reuse", "refresh_reason")},
                   "frame": int(r.index), "pts": float(r.pts), "refresh": bool(r.refresh),
                   "layout_changed": bool(r.layout_changed), "approximate": bool(r.approximate),
                   "tokens": len(r), "recomputed_tokens": int(r.recomputed_tokens),
                   "dirty_tiles": int(r.dirty_tiles), "tiles": int(r.tiles), "timings_ms": _jsonable(dict(r.timings))}
            out.update(json_tensors(body, wanted))
            return JSONResponse(out, headers=headers)
        return Response(body, media_type="application/octet-stream", headers=headers)

    return app
