"""Requests batched into one encode: a worker thread per model takes the encodes waiting in its
queue (up to max_batch requests of one precision, and no more than max_tokens tokens together
unless one request alone has more) and runs them as one Model.encode_many call, which reads the
weights once for all of them (fovea::encode_batch). Nothing is delayed to wait for company
unless window_ms > 0: at low load a request is encoded alone, at once; under load the requests
that arrived while the previous batch ran form the next one.

The token cap is where batching pays on a CPU: measured on ViT-B/16 (2 cores, docs/serve.md),
eight images in one call took 0.60-0.69x the time of eight calls at 16 tokens each, 0.86-0.94x
at 64, 0.95-1.04x at 273, while every request of a batch waits for the whole batch. So small
requests (small budgets, video frames) are batched, and requests of a few hundred tokens run
alone.

A batch of one runs Model.encode_full, so a lone request's result is exactly what
`fovea encode` computes; in a larger batch each result equals its lone encode up to rounding.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from typing import Callable, List, Optional


class Busy(Exception):
    """The queue is full: the caller answers 503."""


class _Job:
    __slots__ = ("tokens", "precision", "future", "queued_at")

    def __init__(self, tokens, precision):
        self.tokens = tokens
        self.precision = precision
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.queued_at = time.monotonic()


class Batcher:
    """on_batch(size, tokens, seconds) is called after every encoder call (metrics)."""

    def __init__(self, model, *, max_batch: int = 8, max_tokens: int = 512, max_queue: int = 64, window_ms: float = 0.0,
                 threads: int = 0,
                 on_batch: Optional[Callable[[int, int, float], None]] = None, name: str = "model"):
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.model = model
        self.max_batch = max_batch
        self.max_tokens = max_tokens
        self.max_queue = max_queue
        self.window_s = max(0.0, window_ms) / 1000.0
        self.threads = threads
        self.on_batch = on_batch
        self._queue: "collections.deque[_Job]" = collections.deque()
        self._cv = threading.Condition()
        self._closing = False
        self.batches = 0
        self.encoded = 0
        self._thread = threading.Thread(target=self._run, name=f"fovea-batcher-{name}", daemon=True)
        self._thread.start()

    def depth(self) -> int:
        with self._cv:
            return len(self._queue)

    def submit(self, tokens, precision: str = "fp32") -> concurrent.futures.Future:
        job = _Job(tokens, precision)
        with self._cv:
            if self._closing:
                raise Busy("the service is shutting down")
            if len(self._queue) >= self.max_queue:
                raise Busy(f"{len(self._queue)} encodes already queued for this model (limit {self.max_queue})")
            self._queue.append(job)
            self._cv.notify()
        return job.future

    def close(self, timeout: Optional[float] = None) -> None:
        """Encodes what is queued, then stops the worker."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._thread.join(timeout)

    def _take(self) -> List[_Job]:
        with self._cv:
            while not self._queue:
                if self._closing:
                    return []
                self._cv.wait()
            if self.window_s > 0 and len(self._queue) < self.max_batch:
                deadline = self._queue[0].queued_at + self.window_s
                while len(self._queue) < self.max_batch and not self._closing:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cv.wait(left)
            first = self._queue[0]
            batch, rest = [], collections.deque()
            tokens = 0
            while self._queue and len(batch) < self.max_batch:
                job = self._queue.popleft()
                same = job.precision == first.precision and job.tokens.patches.dtype == first.tokens.patches.dtype
                if same and batch and tokens + len(job.tokens) > self.max_tokens:
                    rest.append(job)
                    break
                if same:
                    batch.append(job)
                    tokens += len(job.tokens)
                else:
                    rest.append(job)
            rest.extend(self._queue)
            self._queue = rest
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return
            live = [j for j in batch if j.future.set_running_or_notify_cancel()]
            if not live:
                continue
            t0 = time.perf_counter()
            try:
                if len(live) == 1:
                    results = [self.model.encode_full(live[0].tokens, live[0].precision, self.threads)]
                else:
                    results = self.model.encode_many([j.tokens for j in live], live[0].precision, self.threads)
            except BaseException as e:  # every request of the batch gets the library's message
                for j in live:
                    j.future.set_exception(e)
                continue
            dt = time.perf_counter() - t0
            self.batches += 1
            self.encoded += len(live)
            if self.on_batch:
                try:
                    self.on_batch(len(live), sum(len(j.tokens) for j in live), dt)
                except Exception:
                    pass
            for j, r in zip(live, results):
                j.future.set_result((r, len(live)))
