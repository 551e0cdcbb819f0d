"""Uvicorn's HTTP/1.1 protocol (h11) with two answers of the service's own: a client that has not
sent a whole request head within the timeout (a slow-loris) gets 408 and the connection closes,
and a request head h11 cannot parse gets 400; both as the one-line JSON errors every route gives.

Uvicorn (0.17) puts no time limit on a request head: a client sending a byte now and then holds
its connection, and its slot in every limit, forever. The body and the work are the routes'
(app.py reads the body against the request's deadline and answers 408 itself).
"""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def raw_error(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


class Protocol(H11Protocol):
    """`head_timeout_s` is set by the service (ServeConfig.request_timeout_s)."""

    head_timeout_s = 60.0
    on_timeout = None  # called with no argument when a head times out (metrics)

    def connection_made(self, transport):
        super().connection_made(transport)
        self._head_timer = None
        self._arm()

    def _arm(self):
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm(self):
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def connection_lost(self, exc):
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data):
        if self._head_timer is not None:
            self._head_bytes += len(data)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the head is in: the route's deadline takes over

    def on_response_complete(self):
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request on this connection gets its own time

    def _head_timed_out(self):
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self._head_bytes:  # part of a request head: say why the connection closes
            self.transport.write(raw_error(408, "Request Timeout", f"the request head did not arrive within "
                                                                   f"{self.head_timeout_s:g} s"))
            if self.on_timeout:
                self.on_timeout()
        self.transport.close()

    def send_400_response(self, msg: str):
        self._disarm()
        self.transport.write(raw_error(400, "Bad Request", "malformed HTTP request"))
        self.transport.close()
