"""The encodes of one model, scheduled: `workers` threads take small requests from one queue and
a lane of its own takes the large ones, each running its encoder calls on a context of its own
(calls on one fovea.Model from several threads run in parallel, each with its own oneDNN
primitives and buffers: docs/explanation/encoder.md).

* Small requests (fewer than max_tokens tokens each) are taken in arrival order, together, up to
  max_batch requests and max_tokens tokens, as one Model.encode_many call
  (fovea::encode_tokens_batch), which reads the weights once for all of them. That pays where
  an encode is small: on 2 cores, eight images in one call took 0.60-0.69x the time of eight
  calls at 16 tokens each, 0.86-0.94x at 64 and 0.95-1.04x at 273 (docs/how-to/serve.md). So
  requests of a few hundred tokens rarely share a call (two of the default 273 pass the default
  cap of 512) and small ones (low budgets, video frames) do.
* A large request (max_tokens tokens or more: a budget of 4096, a 40-megapixel image's windows)
  runs alone, on the large lane, in arrival order among the large ones. It never holds a small
  request's worker: small requests behind it wait for the small calls ahead of them only.

One small worker by default: on the 2-core machine measured, one call with both threads ran
1.27x the throughput of two calls side by side with one thread each (bench/results/serve/
two-encode-workers.txt); where more cores make one call scale worse, more workers may pay.

Threads: a call that starts while no other runs gets `threads` threads; one that starts beside
others gets threads // (calls running), at least 1, so that they share the cores instead of
oversubscribing them.

Nothing waits for company unless window_ms > 0: at low load a request is encoded at once; under
load the requests that arrived meanwhile form the next batch.

A batch of one runs Model.encode_full, so a lone request's result is what `fovea encode` writes;
a larger batch's results equal their lone encodes up to rounding (byte for byte on the CPUs
measured, docs/how-to/serve.md). A cancelled future (a client that went away, a request past its
deadline) is dropped before its encode starts.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading
import time
from typing import Callable, List, Optional, Tuple


class Busy(Exception):
    """The queue is full: the caller answers 503."""


class _Job:
    __slots__ = ("tokens", "precision", "future", "queued_at", "size", "large")

    def __init__(self, tokens, precision, large_from: int):
        self.tokens = tokens
        self.precision = precision
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.queued_at = time.monotonic()
        self.size = len(tokens)
        self.large = self.size >= large_from

    def joins(self, other: "_Job") -> bool:
        return self.precision == other.precision and self.tokens.patches.dtype == other.tokens.patches.dtype


class Batcher:
    """on_batch(requests, tokens, seconds) is called after every encoder call (metrics)."""

    def __init__(self, model, *, max_batch: int = 8, max_tokens: int = 512, max_queue: int = 64, window_ms: float = 0.0,
                 threads: int = 0, workers: int = 1,
                 on_batch: Optional[Callable[[int, int, float], None]] = None, name: str = "model"):
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.model = model
        self.max_batch = max_batch
        self.max_tokens = max_tokens
        self.max_queue = max_queue
        self.window_s = max(0.0, window_ms) / 1000.0
        self.threads = threads or os.cpu_count() or 1
        self.workers = workers
        self.on_batch = on_batch
        self._queue: "collections.deque[_Job]" = collections.deque()
        self._cv = threading.Condition()
        self._closing = False
        self._busy = 0  # encoder calls running
        self.batches = 0
        self.encoded = 0
        self._threads = [threading.Thread(target=self._run, args=(False,), name=f"fovea-encode-{name}-{i}", daemon=True)
                         for i in range(workers)]
        self._threads.append(threading.Thread(target=self._run, args=(True,), name=f"fovea-encode-{name}-large",
                                              daemon=True))
        for t in self._threads:
            t.start()

    def depth(self) -> int:
        with self._cv:
            return sum(1 for j in self._queue if not j.future.cancelled())

    def running(self) -> int:
        with self._cv:
            return self._busy

    def submit(self, tokens, precision: str = "fp32") -> concurrent.futures.Future:
        """A future of (Encoding, requests in its encoder call); cancel it to drop the encode."""
        job = _Job(tokens, precision, self.max_tokens)
        with self._cv:
            if self._closing:
                raise Busy("the service is shutting down")
            self._drop_cancelled()
            if len(self._queue) >= self.max_queue:
                raise Busy(f"{len(self._queue)} encodes already queued for this model (limit {self.max_queue})")
            self._queue.append(job)
            self._cv.notify_all()  # the small workers and the large lane wait on it alike
        return job.future

    def close(self, timeout: Optional[float] = None) -> None:
        """Encodes what is queued, then stops the workers."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        for t in self._threads:
            t.join(timeout)

    # ---- the workers ----

    def _drop_cancelled(self) -> None:
        if any(j.future.cancelled() for j in self._queue):
            self._queue = collections.deque(j for j in self._queue if not j.future.cancelled())

    def _pick(self, large: bool) -> List[_Job]:
        """The next call's requests of one kind (taken off the queue), or []."""
        for i, job in enumerate(self._queue):
            if job.large != large:
                continue
            if large:
                del self._queue[i]
                return [job]
            batch, tokens, taken = [job], job.size, [i]
            for k in range(i + 1, len(self._queue)):
                other = self._queue[k]
                if other.large or not other.joins(job):
                    continue
                if len(batch) == self.max_batch or tokens + other.size > self.max_tokens:
                    break
                batch.append(other)
                tokens += other.size
                taken.append(k)
            for k in reversed(taken):
                del self._queue[k]
            return batch
        return []

    def _wait_for_company(self) -> bool:
        """With window_ms: True when the first small request may wait for more (the lock is held)."""
        if self.window_s <= 0 or self._closing:
            return False
        small = [j for j in self._queue if not j.large]
        if not small or len(small) >= self.max_batch or sum(j.size for j in small) >= self.max_tokens:
            return False
        left = small[0].queued_at + self.window_s - time.monotonic()
        if left <= 0:
            return False
        self._cv.wait(left)
        return True

    def _take(self, large: bool) -> Tuple[List[_Job], int]:
        with self._cv:
            while True:
                self._drop_cancelled()
                if not any(j.large == large for j in self._queue):
                    if self._closing:
                        return [], 0
                    self._cv.wait()
                    continue
                if not large and self._wait_for_company():
                    continue
                batch = self._pick(large)
                if batch:
                    break
            self._busy += 1
            return batch, max(1, self.threads // self._busy)

    def _run(self, large: bool) -> None:
        while True:
            batch, threads = self._take(large)
            if not batch:
                return
            try:
                self._encode(batch, threads)
            finally:
                with self._cv:
                    self._busy -= 1
                    self._cv.notify_all()

    def _encode(self, batch: List[_Job], threads: int) -> None:
        live = [j for j in batch if j.future.set_running_or_notify_cancel()]
        if not live:
            return
        t0 = time.perf_counter()
        try:
            if len(live) == 1:
                results = [self.model.encode_full(live[0].tokens, live[0].precision, threads)]
            else:
                results = self.model.encode_many([j.tokens for j in live], live[0].precision, threads)
        except BaseException as e:  # every request of the call gets the library's message
            for j in live:
                j.future.set_exception(e)
            return
        dt = time.perf_counter() - t0
        with self._cv:
            self.batches += 1
            self.encoded += len(live)
        if self.on_batch:
            try:
                self.on_batch(len(live), sum(j.size for j in live), dt)
            except Exception:
                pass
        for j, r in zip(live, results):
            j.future.set_result((r, len(live)))
