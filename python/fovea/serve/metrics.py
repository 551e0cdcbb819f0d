"""The service's Prometheus metrics (GET /metrics), in a registry of its own per application."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_ENCODE_MS = (5, 10, 25, 50, 100, 150, 250, 500, 1000, 2500, 5000, 10000)


class Metrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.requests = Counter("fovea_requests", "HTTP requests by route, method and status", ["route", "method", "status"],
                                registry=r)
        self.errors = Counter("fovea_errors", "Requests answered with an error (4xx or 5xx), by route and status",
                              ["route", "status"], registry=r)
        self.latency = Histogram("fovea_request_seconds", "Time from request to response, by route", ["route"],
                                 buckets=_LATENCY_S, registry=r)
        self.batch_size = Histogram("fovea_encode_batch_requests", "Requests encoded together in one encoder call",
                                    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32, 64), registry=r)
        self.batch_seconds = Histogram("fovea_encode_batch_seconds", "Time of one encoder call", buckets=_LATENCY_S,
                                       registry=r)
        self.encode_ms = Histogram("fovea_encode_ms", "Encoder time of each encoded request, in milliseconds (its "
                                   "encoder call's, shared with the requests batched with it)", buckets=_ENCODE_MS,
                                   registry=r)
        self.tokens = Counter("fovea_encoded_tokens", "Tokens through the encoder (every window's)", registry=r)
        self.cache = Counter("fovea_cache_lookups", "Content-hash cache look-ups: hit, miss (computed), shared "
                             "(waited for an identical request in flight), off", ["route", "result"], registry=r)
        self.rejected_total = Counter("fovea_rejected", "Requests refused for load: busy (encode queue full), "
                                      "sessions (too many open)", ["reason"], registry=r)
        self.dropped_total = Counter("fovea_dropped", "Requests whose work was dropped: disconnect (the client went "
                                     "away), timeout (past --request-timeout-s), head_timeout (a request head that "
                                     "did not arrive in time)", ["reason"], registry=r)
        self.frames = Counter("fovea_video_frames", "Video frames processed", registry=r)
        self.frame_tokens = Counter("fovea_video_tokens", "Tokens of processed video frames", registry=r)
        self.frame_recomputed = Counter("fovea_video_recomputed_tokens", "Of those, tokens recomputed", registry=r)
        self.sessions_opened = Counter("fovea_video_sessions_opened", "Video sessions opened", registry=r)

    def bind(self, svc) -> None:
        """Gauges read from the service's state when scraped."""
        r = self.registry
        Gauge("fovea_cache_bytes", "Bytes held by the content-hash cache", registry=r).set_function(lambda: svc.cache.bytes)
        Gauge("fovea_cache_entries", "Entries in the content-hash cache", registry=r).set_function(lambda: len(svc.cache))
        Gauge("fovea_cache_evictions", "Entries evicted from the content-hash cache so far",
              registry=r).set_function(lambda: svc.cache.evictions)
        q = Gauge("fovea_encode_queue", "Encodes waiting, by model", ["model"], registry=r)
        running = Gauge("fovea_encode_running", "Encoder calls running, by model", ["model"], registry=r)
        for name, b in svc.batchers.items():
            q.labels(name).set_function(b.depth)
            running.labels(name).set_function(b.running)
        Gauge("fovea_video_sessions", "Open video sessions", registry=r).set_function(lambda: len(svc.sessions))
        Gauge("fovea_draining", "1 while the service shuts down", registry=r).set_function(lambda: int(svc.draining))

    def request_done(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        if status >= 400:
            self.errors.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def encoded(self, encode_ms: float) -> None:
        self.encode_ms.observe(encode_ms)

    def dropped(self, reason: str) -> None:
        self.dropped_total.labels(reason).inc()

    def batch_done(self, requests: int, tokens: int, seconds: float) -> None:
        self.batch_size.observe(requests)
        self.batch_seconds.observe(seconds)
        self.tokens.inc(tokens)

    def cache_result(self, route: str, result: str) -> None:
        self.cache.labels(route, result).inc()

    def rejected(self, reason: str) -> None:
        self.rejected_total.labels(reason).inc()

    def session_opened(self) -> None:
        self.sessions_opened.inc()

    def frame_done(self, tokens: int, recomputed: int) -> None:
        self.frames.inc()
        self.frame_tokens.inc(tokens)
        self.frame_recomputed.inc(recomputed)

    def render(self):
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
