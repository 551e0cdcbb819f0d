"""The service's video sessions: a client opens a session, sends frames one at a time (with a
query that may move), and each frame re-does only what changed since the previous one
(fovea.VideoSession: the change test, the pyramid updated in place, kept tokens' patch
embeddings, incremental ViT reuse). A session may be opened with a fixation, the query of every
frame that brings none of its own. Sessions live in memory, are capped in number, and are
closed after an idle timeout.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Dict, Optional

import fovea


class NoSession(KeyError):
    pass


class TooManySessions(Exception):
    pass


class Session:
    def __init__(self, sid: str, model_name: str, model, params: dict, fixation=()):
        self.id = sid
        self.model_name = model_name
        self.params = params
        self.fixation = list(fixation)  # the query of frames that bring none
        self.session = fovea.VideoSession(model, **params)
        self.created = self.last_used = time.monotonic()
        self.frames = 0
        self.tokens = 0
        self.recomputed = 0
        self.lock = threading.Lock()  # one frame at a time, in order

    def describe(self) -> dict:
        return {"session": self.id, "model": self.model_name, "frames": self.frames, "tokens": self.tokens,
                "recomputed_tokens": self.recomputed,
                "reuse_rate": (1.0 - self.recomputed / self.tokens) if self.tokens else 0.0,
                "reuse": self.session.reuse, "budget": self.session.budget,
                "fixation": list(self.fixation[0]) if self.fixation else None,
                "idle_s": round(time.monotonic() - self.last_used, 3)}


class SessionStore:
    def __init__(self, max_sessions: int = 16, idle_s: float = 300.0):
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._sessions: Dict[str, Session] = {}
        self.expired = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def expire(self) -> int:
        now = time.monotonic()
        with self._lock:
            old = [k for k, s in self._sessions.items() if now - s.last_used > self.idle_s]
            for k in old:
                del self._sessions[k]
            self.expired += len(old)
        return len(old)

    def open(self, model_name: str, model, params: dict, fixation=()) -> Session:
        self.expire()
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                raise TooManySessions(f"{len(self._sessions)} video sessions are open (limit {self.max_sessions}); "
                                      "close one or wait for an idle one to expire")
        s = Session(secrets.token_hex(12), model_name, model, params, fixation)
        with self._lock:
            self._sessions[s.id] = s
        return s

    def get(self, sid: str) -> Session:
        self.expire()
        with self._lock:
            s = self._sessions.get(sid)
        if s is None:
            raise NoSession(f"no video session {sid!r} (closed, expired after {self.idle_s:g} s idle, or never opened)")
        return s

    def close(self, sid: str) -> Optional[Session]:
        with self._lock:
            return self._sessions.pop(sid, None)

    def clear(self) -> None:
        with self._lock:
            self._sessions.clear()
