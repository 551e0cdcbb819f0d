"""python3 -m fovea.serve: run the service (Uvicorn). --help lists the flags."""

from __future__ import annotations

import argparse
import os
import socket
import sys


def _models(values):
    out = {}
    for v in values:
        name, sep, spec = v.partition("=")
        if not sep or os.path.exists(v):
            spec = v
            base = os.path.basename(os.path.normpath(v))
            name = (os.path.basename(os.path.dirname(os.path.abspath(v))) if base.endswith((".safetensors", ".gguf", ".pt", ".pth", ".bin"))
                    else base.replace(":", "-"))
        if name in out:
            raise SystemExit(f"fovea serve: two models named {name!r}; name them: --model NAME=SPEC")
        out[name] = spec
    return out


class _OneLine:
    """A logging filter: a record's traceback is left out, its exception's message kept on the
    same line. Uvicorn logs every request it cannot parse (not HTTP, a bad request line) with
    h11's traceback, ~1.8 KB each: a stream of garbage would fill the log with them."""

    def filter(self, record) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            msg = str(record.exc_info[1]).splitlines()[0] if str(record.exc_info[1]) else type(record.exc_info[1]).__name__
            record.msg = f"{record.getMessage()} ({msg[:200]})"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


def _process_env(argv) -> None:
    # Settings the libraries read when they load, which `python3 -m fovea.serve` has done with the
    # fovea package before this runs; unless the caller chose, start again with them:
    # * libgomp (oneDNN's OpenMP) spins idle threads at every barrier by default; in a service,
    #   where tokenizations and the encoder share the cores, that spinning takes the time the
    #   others need (the `fovea` launcher's reason, docs/explanation/encoder.md): PASSIVE, and OpenBLAS's
    #   shortest idle spin;
    # * oneDNN keeps up to 1024 primitives process-wide (ONEDNN_PRIMITIVE_CACHE_CAPACITY), beside
    #   each encoder context's own bounded set: every image size makes its own, ~0.35 MB each
    #   for ViT-B/16, so a service that sees many sizes grew by hundreds of MB (docs/how-to/serve.md,
    #   "Memory"). 64 still lets the encoder workers share what they both made.
    env = dict(os.environ)
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
        env.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    if "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in env and "DNNL_PRIMITIVE_CACHE_CAPACITY" not in env:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = "64"
    # * glibc's malloc: every thread that allocates gets an arena of its own (up to 8 per core), and
    #   a freed block of a few MB (a decoded image, a pyramid level) raises the mmap threshold to its
    #   size, so the next ones come from the arenas and stay in the process when freed. A fixed
    #   threshold returns them to the system and two arenas hold the rest (docs/how-to/serve.md,
    #   "Memory").
    if not any(k.startswith("MALLOC_") for k in env):
        env["MALLOC_ARENA_MAX"] = "2"
        env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    if env != dict(os.environ):
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", "fovea.serve", *argv], env)


def main(argv=None) -> int:
    _process_env(sys.argv[1:] if argv is None else argv)
    from .app import ServeConfig
    d = ServeConfig()
    p = argparse.ArgumentParser(prog="python3 -m fovea.serve", description=(
        "Serve fovea over HTTP: /v1/encode, /v1/tokenize, /v1/models, /v1/video/sessions, /healthz, /metrics and an "
        "explorer page at /. SIGTERM or Ctrl-C: stop accepting, finish the requests in flight, exit 0. docs/how-to/serve.md "
        "has the routes, fields and limits."))
    p.add_argument("--model", action="append", required=True, metavar="[NAME=]SPEC",
                   help="a checkpoint (a .safetensors / .gguf path, or random:vit-s16 ...); repeat for several, the first "
                        "is the default. NAME defaults to the checkpoint's folder")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0: any free port, printed)")
    p.add_argument("--max-batch", type=int, default=d.max_batch, help="requests encoded in one encoder call (default %(default)s)")
    p.add_argument("--max-batch-tokens", type=int, default=d.max_batch_tokens,
                   help="tokens of the requests in one encoder call; a request of this many runs alone (default %(default)s)")
    p.add_argument("--batch-window-ms", type=float, default=d.batch_window_ms,
                   help="wait this long for more requests before encoding (default 0: batch only what is queued)")
    p.add_argument("--encode-workers", type=int, default=d.encode_workers,
                   help="encoder calls of small requests at once, each on its own context (default %(default)s); requests "
                        "of --max-batch-tokens tokens or more run on a lane of their own beside them")
    p.add_argument("--max-queue", type=int, default=d.max_queue, help="encodes waiting per model before 503 (default %(default)s)")
    p.add_argument("--request-timeout-s", type=float, default=d.request_timeout_s,
                   help="from a request's first byte to its answer: a request still arriving then gets 408, one still "
                        "computing 503 and its work is dropped (default %(default)g)")
    p.add_argument("--cache-mb", type=float, default=d.cache_bytes / 2**20,
                   help="content-hash cache in memory, MiB (0: off; default %(default)g)")
    p.add_argument("--cache-dir", help="also keep cached answers in this folder (written atomically; default: memory only)")
    p.add_argument("--cache-dir-mb", type=float, default=d.cache_dir_bytes / 2**20,
                   help="the folder's size, MiB (default %(default)g)")
    p.add_argument("--allow-path", action="append", default=[], metavar="DIR",
                   help="a request may name an image by its absolute path under DIR (field path); repeat for several")
    p.add_argument("--api-key", default=os.environ.get("FOVEA_API_KEY"),
                   help="require this key (Authorization: Bearer KEY or X-API-Key: KEY) of every request but GET / and "
                        "/healthz; default: the FOVEA_API_KEY environment variable, else none")
    p.add_argument("--max-upload-mb", type=float, default=d.max_upload_bytes / 2**20, help="largest request body, MiB (default %(default)g)")
    p.add_argument("--max-pixels", type=int, default=d.max_pixels, help="largest decoded image (default %(default)s)")
    p.add_argument("--max-budget", type=int, default=d.max_budget, help="largest token budget a request may ask (default %(default)s)")
    p.add_argument("--max-sessions", type=int, default=d.max_sessions, help="open video sessions (default %(default)s)")
    p.add_argument("--session-idle-s", type=float, default=d.session_idle_s, help="close a video session idle this long (default %(default)g)")
    p.add_argument("--threads", type=int, default=d.threads,
                   help="threads of one tokenize or of a lone encode; encodes side by side share them (0: all hardware threads)")
    p.add_argument("--precision", choices=("fp32", "bf16", "int8"), default=d.precision, help="default encode precision")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up encode of each model")
    p.add_argument("--log-level", default="warning", help="Uvicorn's log level (default warning)")
    a = p.parse_args(argv)

    import uvicorn
    from .app import create_app
    from .protocol import Protocol

    if a.encode_workers < 1 or a.max_batch < 1 or a.request_timeout_s <= 0:
        print("fovea: error: --encode-workers and --max-batch must be >= 1, --request-timeout-s > 0", file=sys.stderr)
        return 2
    cfg = ServeConfig(max_upload_bytes=int(a.max_upload_mb * 2**20), max_pixels=a.max_pixels, max_budget=a.max_budget,
                      max_batch=a.max_batch, max_batch_tokens=a.max_batch_tokens, batch_window_ms=a.batch_window_ms,
                      encode_workers=a.encode_workers, max_queue=a.max_queue, request_timeout_s=a.request_timeout_s,
                      cache_bytes=int(a.cache_mb * 2**20), cache_dir=a.cache_dir, cache_dir_bytes=int(a.cache_dir_mb * 2**20),
                      allow_paths=tuple(a.allow_path), api_key=a.api_key or None, max_sessions=a.max_sessions,
                      session_idle_s=a.session_idle_s, threads=a.threads, precision=a.precision, warmup=not a.no_warmup)
    try:
        app = create_app(_models(a.model), cfg)
    except (OSError, RuntimeError, ValueError) as e:
        print(f"fovea: error: {e}", file=sys.stderr)
        return 1
    sock = socket.socket(socket.AF_INET6 if ":" in a.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((a.host, a.port))
    except OSError as e:
        print(f"fovea: error: cannot listen on {a.host}:{a.port}: {e.strerror}", file=sys.stderr)
        return 1
    sock.listen(2048)  # connections wait in the backlog until Uvicorn serves them
    host, port = sock.getsockname()[:2]

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            # SIGTERM / SIGINT: /healthz says draining and new work is refused with 503 while Uvicorn
            # stops listening and lets the requests in flight finish; then the batchers drain.
            app.state.service.draining = True
            super().handle_exit(sig, frame)

    svc = app.state.service
    protocol = type("ServeProtocol", (Protocol,), {"head_timeout_s": a.request_timeout_s,
                                                   "on_timeout": staticmethod(lambda: svc.metrics.dropped("head_timeout"))})
    server = Server(uvicorn.Config(app, log_level=a.log_level, timeout_keep_alive=5, lifespan="on", http=protocol))
    import logging
    logging.getLogger("uvicorn.error").addFilter(_OneLine())
    shown = f"[{host}]" if ":" in host else host
    print(f"fovea serve: http://{shown}:{port} (models: {', '.join(app.state.service.models)})", flush=True)
    server.run(sockets=[sock])
    print("fovea serve: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
