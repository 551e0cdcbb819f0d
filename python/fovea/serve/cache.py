"""The service's content-hash cache: a finished response under the key of everything that decides
it: the route, the model, the query, the budget, the mode (foveation, precision, format...) and
the image's bytes.

The keys and the memory are fovea::TokenCache's (fovea.TokenCache): keyed BLAKE2b-256 over the
length-prefixed parts (fovea::content_key), and entries evicted least recently used first once
they hold more than --cache-mb. The key's secret is random per process, so nobody outside it can
compute a key; with --cache-dir it is kept in that folder (mode 0600), so that a restarted
service finds its entries again.

--cache-dir adds a second level on disk, capped at --cache-dir-mb: every entry is written whole
before it gets a name (an unnamed O_TMPFILE file linked into place, or a temporary name renamed
where the filesystem has no O_TMPFILE), so a kill at any moment leaves no half-written file under
an entry's name; temporary names left by a kill are removed at start. Without --cache-dir the
cache writes nothing anywhere.

Identical requests that arrive while the first is being computed wait for it instead of
computing again (one flight per key).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import struct
import threading
import uuid
from typing import Any, Dict, Mapping, NamedTuple, Optional

import fovea

_MAGIC = b"FOVEA-SERVE-CACHE1\n"


class Entry(NamedTuple):
    body: bytes
    media_type: str
    headers: Mapping[str, str]


def pack(e: Entry) -> bytes:
    head = json.dumps({"media_type": e.media_type, "headers": dict(e.headers), "body_bytes": len(e.body)}).encode()
    return _MAGIC + struct.pack("<I", len(head)) + head + e.body


def unpack(data: bytes) -> Optional[Entry]:
    """None for bytes that are not a whole entry."""
    n = len(_MAGIC)
    if len(data) < n + 4 or data[:n] != _MAGIC:
        return None
    (h,) = struct.unpack("<I", data[n:n + 4])
    try:
        head = json.loads(data[n + 4:n + 4 + h])
        body = data[n + 4 + h:]
        if len(body) != head["body_bytes"]:
            return None
        return Entry(body, head["media_type"], head["headers"])
    except (ValueError, KeyError, TypeError):
        return None


def write_atomic(path: str, data: bytes) -> None:
    """`data` under `path`, never a part of it: written unnamed, then linked (or renamed) into place."""
    folder = os.path.dirname(path)
    try:
        fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o600)
    except (AttributeError, OSError):
        fd = -1
    if fd >= 0:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            try:
                os.link(f"/proc/self/fd/{fd}", path, follow_symlinks=True)
                return
            except FileExistsError:
                return  # the same content (the name is its key)
            except OSError:
                pass  # no /proc: rename a named temporary instead
        finally:
            os.close(fd)
    tmp = os.path.join(folder, f".tmp-{uuid.uuid4().hex}")
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class DiskStore:
    """Entries as files named by their key in `folder`, least recently used removed past `budget_bytes`."""

    def __init__(self, folder: str, budget_bytes: int):
        self.folder = folder
        self.budget_bytes = budget_bytes
        os.makedirs(folder, exist_ok=True)
        self._lock = threading.Lock()
        self._sizes: "collections.OrderedDict[str, int]" = collections.OrderedDict()
        found = []
        for name in os.listdir(folder):
            p = os.path.join(folder, name)
            if name.startswith(".tmp-"):
                os.unlink(p)  # a write a kill interrupted
            elif name.endswith(".entry"):
                st = os.stat(p)
                found.append((st.st_mtime, name, st.st_size))
        for _, name, size in sorted(found):
            self._sizes[name] = size
        self.bytes = sum(self._sizes.values())
        self._evict()

    def secret(self) -> bytes:
        path = os.path.join(self.folder, "secret")
        if not os.path.exists(path):
            write_atomic(path, os.urandom(32))
        with open(path, "rb") as f:
            s = f.read()
        if len(s) != 32:
            raise ValueError(f"{path} is not a 32-byte cache secret; remove it (the cache's entries become unreachable)")
        return s

    def _evict(self) -> None:
        while self.bytes > self.budget_bytes and self._sizes:
            name, size = self._sizes.popitem(last=False)
            self.bytes -= size
            try:
                os.unlink(os.path.join(self.folder, name))
            except OSError:
                pass

    def get(self, key: bytes) -> Optional[bytes]:
        name = key.hex() + ".entry"
        with self._lock:
            if name not in self._sizes:
                return None
            self._sizes.move_to_end(name)
        try:
            with open(os.path.join(self.folder, name), "rb") as f:
                return f.read()
        except OSError:
            return None

    def put(self, key: bytes, data: bytes) -> None:
        name = key.hex() + ".entry"
        if len(data) > self.budget_bytes:
            return
        with self._lock:
            if name in self._sizes:
                return
        write_atomic(os.path.join(self.folder, name), data)
        with self._lock:
            if name not in self._sizes:
                self._sizes[name] = len(data)
                self.bytes += len(data)
            self._evict()

    def __len__(self) -> int:
        return len(self._sizes)


class ResultCache:
    def __init__(self, budget_bytes: int, folder: Optional[str] = None, folder_bytes: int = 1 << 30):
        self.disk = DiskStore(folder, folder_bytes) if folder else None
        self.enabled = budget_bytes > 0 or self.disk is not None
        self.budget_bytes = max(0, int(budget_bytes))
        self._mem = fovea.TokenCache(self.budget_bytes, self.disk.secret() if self.disk is not None else None)
        self._flights: Dict[bytes, asyncio.Future] = {}

    def key(self, kind: str, model: str, params: Mapping[str, Any], content: bytes) -> bytes:
        head = json.dumps(params, sort_keys=True, separators=(",", ":"))
        return self._mem.key([b"fovea.serve.v1", kind.encode(), model.encode(), head.encode(), content])

    @property
    def bytes(self) -> int:
        return self._mem.stats()["bytes"]

    @property
    def evictions(self) -> int:
        return self._mem.stats()["evictions"]

    def __len__(self) -> int:
        return len(self._mem)

    def get_memory(self, key: bytes) -> Optional[Entry]:
        data = self._mem.get(key)
        return unpack(data) if data is not None else None

    def get_disk(self, key: bytes) -> Optional[Entry]:
        """Blocking (file I/O): run it off the event loop."""
        if self.disk is None:
            return None
        data = self.disk.get(key)
        e = unpack(data) if data is not None else None
        if e is not None:
            self._mem.put(key, data)
        return e

    def put(self, key: bytes, entry: Entry) -> None:
        """Blocking with --cache-dir (file I/O): run it off the event loop."""
        data = pack(entry)
        if self.budget_bytes:
            self._mem.put(key, data)
        if self.disk is not None:
            self.disk.put(key, data)

    async def get_or_compute(self, key: bytes, compute, run_blocking):
        """(entry, how): how is "hit" (memory), "disk", "miss" (computed here) or "shared" (waited
        for an identical request in flight). `compute` is an async callable returning an Entry;
        its exceptions reach every waiter and nothing is cached, but for one marked `own` (a client
        that went away, a deadline): then the waiters compute for themselves. `run_blocking(fn, *args)` runs
        file I/O off the event loop."""
        e = self.get_memory(key)
        if e is not None:
            return e, "hit"
        flight = self._flights.get(key)
        if flight is not None:
            try:
                return await asyncio.shield(flight), "shared"
            except asyncio.CancelledError:
                if not flight.cancelled():
                    raise  # this request was cancelled
                # the first request went away before it finished: compute here
        fut = asyncio.get_running_loop().create_future()
        self._flights[key] = fut
        how = "miss"
        try:
            e = await run_blocking(self.get_disk, key) if self.disk is not None else None
            if e is not None:
                how = "disk"
            else:
                e = await compute()
                await run_blocking(self.put, key, e) if self.disk is not None else self.put(key, e)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as ex:
            if getattr(ex, "own", False):
                fut.cancel()  # this request's own failure (gone, past its deadline): the others compute
            else:
                fut.set_exception(ex)
                fut.exception()  # retrieved: no "never retrieved" warning when nobody waited
            raise
        finally:
            self._flights.pop(key, None)
        fut.set_result(e)
        return e, how
