"""The FastAPI application of `python3 -m fovea.serve` (routes, limits, errors, metrics).

Requests are multipart forms (the image as the file field `image`, everything else as fields;
the same names also work as query parameters); every error is a JSON object {"error": "..."}
whose message is one line, with a 4xx status for what the client can fix (400 bad field or
image, 404 unknown model or session, 413 too large, 415 not a form) and 503 when the service is
busy or shutting down.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
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

import fovea
import fovea.handoff

from .._png import png_bytes
from .batching import Batcher, Busy
from .cache import Entry, ResultCache
from .metrics import Metrics
from .video import NoSession, SessionStore, TooManySessions


@dataclass
class ServeConfig:
    """Limits and knobs (each is a `python3 -m fovea.serve` flag)."""
    max_upload_bytes: int = 32 << 20     # a request body larger than this: 413
    max_pixels: int = 40_000_000         # decoded images larger than this: 413
    max_budget: int = 4096               # tokens a request may ask for
    max_query_items: int = 256           # fixations + regions of one request
    max_batch: int = 8                   # requests encoded in one encoder call
    max_batch_tokens: int = 512          # and their tokens together (a larger request runs alone)
    batch_window_ms: float = 0.0         # wait this long for company (0: batch only what queued)
    max_queue: int = 64                  # encodes waiting per model; more: 503
    cache_bytes: int = 256 << 20         # the content-hash cache's budget (0: off)
    max_sessions: int = 16               # open video sessions
    session_idle_s: float = 300.0        # a session unused this long is closed
    threads: int = 0                     # threads of one tokenize or encode (0: every hardware thread)
    tokenize_concurrency: int = 0        # tokenizations at once (0: the hardware threads)
    precision: str = "fp32"              # the default precision of /v1/encode
    warmup: bool = True                  # one encode per model before serving


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: Optional[Mapping[str, str]] = None):
        super().__init__(message)
        self.status = status
        self.message = one_line(message)
        self.headers = dict(headers or {})


def one_line(message: str) -> str:
    return "; ".join(part.strip() for part in str(message).splitlines() if part.strip()) or "error"


def error_response(status: int, message: str, headers: Optional[Mapping[str, str]] = None) -> JSONResponse:
    return JSONResponse({"error": one_line(message)}, status_code=status, headers=dict(headers or {}))


# ---- fields -------------------------------------------------------------------------------------

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class Fields:
    """A request's fields (query parameters, then form fields), read once each; what is left
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
            raise ApiError(400, f"{name} must be in [{lo}, {hi}], got {n}")
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
        except (ValueError, TypeError):
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


async def read_fields(request: Request, max_bytes: int) -> Tuple[Fields, Optional[bytes], str]:
    """(fields, image bytes or None, image name)."""
    items: Dict[str, Any] = dict(request.query_params)
    ctype = request.headers.get("content-type", "")
    image, name = None, "<upload>"
    length = request.headers.get("content-length", "")
    has_body = (length.isdigit() and int(length) > 0) or "transfer-encoding" in request.headers
    if (request.method == "POST" and has_body) or "multipart" in ctype:
        if not (ctype.startswith("multipart/form-data") or ctype.startswith("application/x-www-form-urlencoded")):
            raise ApiError(415, f"send a multipart form (the image as the file field 'image'), not {ctype or 'no content type'}")
        try:
            form = await request.form()
        except Exception as e:  # python-multipart's own message for a malformed body
            raise ApiError(400, f"malformed form: {e}") from None
        for k, v in form.multi_items():
            items[k] = v
    f = Fields(items)
    up = f.raw("image")
    if up is not None:
        if not isinstance(up, UploadFile):
            raise ApiError(400, "image must be a file field (multipart), e.g. curl -F image=@photo.jpg")
        image = await up.read()
        name = up.filename or name
        if len(image) > max_bytes:
            raise ApiError(413, f"the image is {len(image)} bytes, over the limit of {max_bytes}")
        if not image:
            raise ApiError(400, "the image file is empty")
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


# ---- the service -------------------------------------------------------------------------------

class Service:
    """The state behind the routes: warm models, their batchers, the cache, video sessions."""

    def __init__(self, models: Mapping[str, Any], config: ServeConfig):
        if not models:
            raise ValueError("the service needs at least one model")
        self.config = config
        self.metrics = Metrics()
        self.models: Dict[str, fovea.Model] = {}
        for name, spec in models.items():
            self.models[name] = spec if isinstance(spec, fovea.Model) else fovea.Model(spec)
        self.default_model = next(iter(self.models))
        self.batchers = {
            name: Batcher(m, max_batch=config.max_batch, max_tokens=config.max_batch_tokens, max_queue=config.max_queue,
                          window_ms=config.batch_window_ms,
                          threads=config.threads, name=name, on_batch=self.metrics.batch_done)
            for name, m in self.models.items()}
        self.cache = ResultCache(config.cache_bytes)
        self.sessions = SessionStore(config.max_sessions, config.session_idle_s)
        self.tmp = tempfile.mkdtemp(prefix="fovea-serve-")
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
        model.encode_full(fovea.tokenize(img, budget=4, model=model, threads=self.config.threads),
                          self.config.precision, self.config.threads)

    def close(self) -> None:
        self.draining = True
        for b in self.batchers.values():
            b.close()
        self.sessions.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)


    def model(self, name: Optional[str]) -> Tuple[str, fovea.Model]:
        name = name or self.default_model
        m = self.models.get(name)
        if m is None:
            raise ApiError(404, f"no model {name!r} is served (GET /v1/models lists them: {', '.join(self.models)})")
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

    def tokenize_args(self, f: Fields, model) -> dict:
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
                raise ApiError(status, f"image {name}: {msg}") from None

    def file_bytes(self, obj) -> bytes:
        path = os.path.join(self.tmp, uuid.uuid4().hex + ".safetensors")
        try:
            obj.save(path)
            with open(path, "rb") as fh:
                return fh.read()
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass


def tokens_summary(t, model_name: Optional[str]) -> dict:
    levels, counts = np.unique(t.levels, return_counts=True)
    return {"model": model_name, "tokens": len(t), "budget": t.budget, "image_size": list(t.image_size),
            "patch_size": t.patch_size, "foveation": t.foveation, "mode": t.mode,
            "windows": _jsonable(t.windows) if t.foveation == "windows" else [],
            "tokens_kept": t.tokens_kept, "levels": {str(int(l)): int(c) for l, c in zip(levels, counts)},
            "positions": np.round(t.positions, 2).tolist(), "timings_ms": _jsonable(dict(t.timings)),
            "warnings": list(t.query_outside)}


def create_app(models: Mapping[str, Any], config: Optional[ServeConfig] = None) -> FastAPI:
    """The application serving `models` ({name: fovea.Model or a checkpoint spec}; the first is the
    default). Models are loaded (and warmed) here, before the first request."""
    config = config or ServeConfig()
    svc = Service(models, config)
    # A query outside the image is reported in the response (warnings), not logged per request.
    warnings.filterwarnings("ignore", message=".*lies outside the.*image")
    app = FastAPI(title="fovea", version=fovea.__version__, docs_url="/docs", redoc_url=None)
    app.state.service = svc

    @app.on_event("shutdown")
    def _shutdown():
        svc.close()

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError):
        return error_response(e.status, e.message, e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        detail = str(e.detail)
        if e.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.method} {request.url.path} (GET /docs lists the routes)"
        elif e.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
        return error_response(e.status_code, detail, getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError):
        errs = e.errors()
        first = errs[0] if errs else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return error_response(400, f"{where}: {first.get('msg', 'invalid request')}")

    @app.middleware("http")
    async def _limits_and_metrics(request: Request, call_next):
        t0 = time.perf_counter()
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > config.max_upload_bytes:
            response = error_response(413, f"the request body is {length} bytes, over the limit of "
                                           f"{config.max_upload_bytes}")
        else:
            try:
                response = await call_next(request)
            except Exception as e:  # a bug: one line, logged by uvicorn as well
                response = error_response(500, f"internal error: {type(e).__name__}: {e}")
        route = request.scope.get("route")
        svc.metrics.request_done(getattr(route, "path", "other"), request.method, response.status_code,
                                 time.perf_counter() - t0)
        return response

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
                "queued": {n: b.depth() for n, b in svc.batchers.items()}, "video_sessions": len(svc.sessions)}
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
        f, image, name = await read_fields(request, config.max_upload_bytes)
        if image is None:
            raise ApiError(400, "no image: send it as the file field 'image' (curl -F image=@photo.jpg)")
        model_field = f.text("model")
        if model_field == "none":
            model_name, model = None, None
        else:
            model_name, model = svc.model(model_field)
        args = svc.tokenize_args(f, model)
        fmt = f.choice("format", ("json", "safetensors"), "json")
        overlay = f.bool("overlay")
        seen = f.bool("seen")
        if f.unknown():
            raise ApiError(400, f"unknown field {f.unknown()[0]!r} for /v1/tokenize")
        key = svc.cache.key("tokenize", model.source if model else "-",
                            {"args": args, "format": fmt, "overlay": overlay, "seen": seen, "model": model_name}, image)

        async def compute():
            def work():
                t = svc.tokenize(image, name, model, args)
                if fmt == "safetensors":
                    return Entry(svc.file_bytes(t), "application/octet-stream", {"X-Fovea-Tokens": str(len(t))})
                body = tokens_summary(t, model_name)
                if overlay:
                    body["overlay_png"] = base64.b64encode(png_bytes(t.overlay())).decode()
                if seen:
                    body["seen_png"] = base64.b64encode(png_bytes(t.seen(threads=config.threads))).decode()
                return Entry(json.dumps(body).encode(), "application/json", {"X-Fovea-Tokens": str(len(t))})
            return await run_in_threadpool(work)

        entry, how = await svc.cache.get_or_compute(key, compute) if config.cache_bytes else (await compute(), "off")
        svc.metrics.cache_result("tokenize", how)
        return Response(entry.body, media_type=entry.media_type, headers={**entry.headers, "X-Fovea-Cache": how})

    @app.post("/v1/encode")
    async def encode(request: Request):
        svc.check_open()
        f, image, name = await read_fields(request, config.max_upload_bytes)
        if image is None:
            raise ApiError(400, "no image: send it as the file field 'image' (curl -F image=@photo.jpg)")
        model_name, model = svc.model(f.text("model"))
        args = svc.tokenize_args(f, model)
        precision = f.choice("precision", ("fp32", "bf16"), config.precision)
        fmt = f.choice("format", ("safetensors", "json"), "safetensors")
        if f.unknown():
            raise ApiError(400, f"unknown field {f.unknown()[0]!r} for /v1/encode")
        key = svc.cache.key("encode", model.source, {"args": args, "precision": precision, "format": fmt,
                                                     "model": model_name}, image)

        async def compute():
            t = await run_in_threadpool(svc.tokenize, image, name, model, args)
            try:
                fut = svc.batchers[model_name].submit(t, precision)
            except Busy as e:
                svc.metrics.rejected("busy")
                raise ApiError(503, str(e), {"Retry-After": "1"}) from None
            try:
                enc, batch = await asyncio.wrap_future(fut)
            except (ValueError, TypeError) as e:
                raise ApiError(400, str(e)) from None
            headers = {"X-Fovea-Tokens": str(len(enc)), "X-Fovea-Batch": str(batch),
                       "X-Fovea-Encode-Ms": f"{enc.encode_ms:.3f}", "X-Fovea-Model": model_name}
            if fmt == "safetensors":
                body = await run_in_threadpool(svc.file_bytes, enc)
                return Entry(body, "application/octet-stream", headers)
            proj = enc.projected
            summary = {"model": model_name, "tokens": len(enc), "tokens_tokenized": len(t),
                       "hidden_size": int(enc.embeddings.shape[1]) if enc.embeddings.ndim == 2 else 0,
                       "projected_dim": int(proj.shape[1]) if proj is not None else None,
                       "foveation": t.foveation, "windows": len(t.windows) if t.foveation == "windows" else 0,
                       "image_size": list(t.image_size), "precision": enc.precision, "encode_ms": enc.encode_ms,
                       "batch": batch, "warnings": list(t.query_outside)}
            return Entry(json.dumps(summary).encode(), "application/json", headers)

        entry, how = await svc.cache.get_or_compute(key, compute) if config.cache_bytes else (await compute(), "off")
        svc.metrics.cache_result("encode", how)
        return Response(entry.body, media_type=entry.media_type, headers={**entry.headers, "X-Fovea-Cache": how})

    # ---- video sessions ----

    @app.post("/v1/video/sessions", status_code=201)
    async def open_session(request: Request):
        svc.check_open()
        f, image, _ = await read_fields(request, config.max_upload_bytes)
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
            "token_threshold": f.float("token_threshold", 0.0, 1e6, 0.1),
            "hysteresis": f.float("hysteresis", 0.0, 1e6, 0.1),
            "refresh_fraction": f.float("refresh_fraction", 1e-6, 1.0, 0.5),
            "precision": f.choice("precision", ("fp32", "bf16"), config.precision),
            "threads": config.threads,
        }
        if f.unknown():
            raise ApiError(400, f"unknown field {f.unknown()[0]!r} for /v1/video/sessions")
        try:
            s = await run_in_threadpool(svc.sessions.open, model_name, model, params)
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
        f, image, name = await read_fields(request, config.max_upload_bytes)
        if image is None:
            raise ApiError(400, "no frame: send it as the file field 'image'")
        fixations = f.tuples("fixations", (2, 3, 4), config.max_query_items)
        regions = f.tuples("regions", (4, 5), config.max_query_items)
        pts = f.float("pts", -1e12, 1e12, None)
        fmt = f.choice("format", ("safetensors", "json"), "safetensors")
        if f.unknown():
            raise ApiError(400, f"unknown field {f.unknown()[0]!r} for a frame")

        def work():
            try:
                pixels = fovea.decode_image(image, config.max_pixels)
            except (RuntimeError, OSError, ValueError) as e:
                msg = str(e)
                raise ApiError(413 if "limit" in msg or "max_pixels" in msg else 400, f"frame {name}: {msg}") from None
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

        r = await run_in_threadpool(work)
        svc.metrics.frame_done(len(r), int(r.recomputed_tokens))
        meta = {"frame": str(r.index), "pts": repr(float(r.pts)), "refresh": str(bool(r.refresh)).lower(),
                "refresh_reason": r.refresh_reason, "layout_changed": str(bool(r.layout_changed)).lower(),
                "approximate": str(bool(r.approximate)).lower(), "tokens": str(len(r)),
                "recomputed_tokens": str(int(r.recomputed_tokens)), "model": s.model_name or "",
                "reuse": s.session.reuse, "session": s.id}
        headers = {"X-Fovea-Tokens": str(len(r)), "X-Fovea-Recomputed": str(int(r.recomputed_tokens)),
                   "X-Fovea-Refresh": meta["refresh"]}
        if fmt == "json":
            return JSONResponse({**{k: meta[k] for k in ("session", "model", "reuse", "refresh_reason")},
                                 "frame": int(r.index), "pts": float(r.pts), "refresh": bool(r.refresh),
                                 "layout_changed": bool(r.layout_changed), "approximate": bool(r.approximate),
                                 "tokens": len(r), "recomputed_tokens": int(r.recomputed_tokens),
                                 "dirty_tiles": int(r.dirty_tiles), "tiles": int(r.tiles),
                                 "timings_ms": _jsonable(dict(r.timings))}, headers=headers)
        tensors = {"positions": r.positions, "levels": r.levels, "recomputed": r.recomputed,
                   "previous_row": r.previous_row}
        if r.embeddings is not None:
            tensors["embeddings"] = r.embeddings
            if r.projected is not None:
                tensors["projected"] = r.projected
        else:
            tensors["patches"] = r.patches
        body = fovea.handoff.safetensors_bytes(tensors, meta)
        return Response(body, media_type="application/octet-stream", headers=headers)

    return app
