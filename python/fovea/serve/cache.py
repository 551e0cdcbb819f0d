"""The service's content-hash cache: a finished response by the BLAKE2b digest of everything
that decides it (the request's kind, the model, the normalised parameters, the image's bytes).

Keys are keyed BLAKE2b-256 (hashlib.blake2b with a per-process random secret, as
fovea::TokenCache keys its tiles): two requests share an entry only if all of these are equal,
and nobody outside the process can compute a key. Entries are evicted least recently used first
once the cache holds more than its byte budget. Identical requests that arrive while the first is
still being computed wait for it instead of computing again (one flight per key).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import os
import threading
from typing import Any, Dict, Mapping, NamedTuple, Optional


class Entry(NamedTuple):
    body: bytes
    media_type: str
    headers: Mapping[str, str]


class ResultCache:
    def __init__(self, budget_bytes: int):
        self.budget_bytes = max(0, int(budget_bytes))
        self._secret = os.urandom(32)
        self._lock = threading.Lock()
        self._entries: "collections.OrderedDict[str, Entry]" = collections.OrderedDict()
        self._flights: Dict[str, asyncio.Future] = {}
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0

    def key(self, kind: str, model: str, params: Mapping[str, Any], content: bytes) -> str:
        h = hashlib.blake2b(digest_size=32, key=self._secret)
        head = json.dumps({"kind": kind, "model": model, "params": params}, sort_keys=True, separators=(",", ":"))
        h.update(len(head).to_bytes(8, "little"))
        h.update(head.encode())
        h.update(content)
        return h.hexdigest()

    def get(self, key: str) -> Optional[Entry]:
        with self._lock:
            e = self._entries.get(key)
            if e is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return e

    def put(self, key: str, entry: Entry) -> None:
        size = len(entry.body)
        if size > self.budget_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= len(old.body)
            self._entries[key] = entry
            self.bytes += size
            while self.bytes > self.budget_bytes and self._entries:
                _, dropped = self._entries.popitem(last=False)
                self.bytes -= len(dropped.body)
                self.evictions += 1

    def __len__(self) -> int:
        return len(self._entries)

    async def get_or_compute(self, key: str, compute):
        """(entry, how): how is "hit", "miss" (computed here) or "shared" (waited for an identical
        request in flight). `compute` is an async callable returning an Entry; its exceptions
        reach every waiter and nothing is cached."""
        e = self.get(key)
        if e is not None:
            return e, "hit"
        flight = self._flights.get(key)
        if flight is not None:
            return await asyncio.shield(flight), "shared"
        fut = asyncio.get_running_loop().create_future()
        self._flights[key] = fut
        try:
            e = await compute()
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as ex:
            fut.set_exception(ex)
            fut.exception()  # retrieved: no "never retrieved" warning when nobody waited
            raise
        finally:
            self._flights.pop(key, None)
        fut.set_result(e)
        self.put(key, e)
        return e, "miss"
