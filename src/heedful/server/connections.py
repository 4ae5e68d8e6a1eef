"""Connections: deadlines for a request's headers and for its answer; room made for new
connections, and kept for health probes.

uvicorn's keep-alive timer starts only after an answer and stops at any byte, so a connection
that never sends a request, or sends it a byte at a time, stays open for ever; 256 of them
filled --max-connections and every real request got 503. Here a connection waiting for a
request is closed --header-timeout seconds after it began waiting, whatever it sends meanwhile
(tests/server/test_hostile.py, row 2).

A client that does not read its answer held its connection for ever too: the answer waits in
the server's buffer, and closing a connection waits for that buffer to drain, so 8 clients that
asked for a 2 MB answer and never read it filled --max-connections 8, and /health got 503 like
every other request. Here a connection whose client has not taken its answer --send-timeout
seconds after it began to fall behind (part of it still unsent) is dropped. A new connection
past --max-connections closes the longest-idle connection, or else the one whose answer has
waited longest for its client; and GET and HEAD of /health and /ready have PROBE_CONNECTIONS
connections beyond the limit, so that probes are answered while requests fill it
(tests/server/test_hostile_deadlines.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
import struct

from heedful.server.limits import ServerLimits

log = logging.getLogger(__name__)

PROBE_CONNECTIONS = 8  # connections past --max-connections that only /health and /ready may use
PROBES = ("/health", "/ready")


def _is_probe(scope: dict) -> bool:
    return scope.get("method") in ("GET", "HEAD") and scope.get("path") in PROBES


async def _saturated(send, open_connections: int, limit: int) -> None:
    """503 in JSON, as the app's errors are, naming the limit (uvicorn's own is plain text)."""
    message = (
        f"the server is saturated: {open_connections} connections open, the limit is {limit} "
        "(--max-connections); retry shortly"
    )
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
               (b"retry-after", b"1"), (b"connection", b"close")]  # fmt: skip
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class _Deadlines:
    """The deadlines, the room made and the room kept of the module's docstring, for uvicorn's
    HTTP/1.1 protocol (h11), within the class attribute `limits` (see _http_protocol)."""

    limits: ServerLimits
    idle_since: float | None = None  # when it began waiting for a request's headers
    deadline: asyncio.TimerHandle | None = None
    stalled_since: float | None = None  # when part of an answer was first left unsent
    send_deadline: asyncio.TimerHandle | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.inner_app, self.app = self.app, self.gated  # uvicorn runs self.app per request

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        # pause_writing as soon as a byte is left unsent, resume_writing once all is sent:
        # the send clock runs exactly while the client is behind
        transport.set_write_buffer_limits(high=0, low=0)
        self.watch()
        if len(self.connections) > self.limits.max_connections:
            self.make_room()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_watching()
        self.stop_send_clock()
        super().connection_lost(exc)

    async def gated(self, scope, receive, send) -> None:
        """The app; a request past --max-connections gets 503, a probe's only past
        PROBE_CONNECTIONS more (uvicorn's limit_concurrency, see uvicorn_config)."""
        if len(self.connections) > self.limits.max_connections and not _is_probe(scope):
            log.info("over --max-connections: %s answered 503", scope.get("path"))
            await _saturated(send, len(self.connections), self.limits.max_connections)
            return
        await self.inner_app(scope, receive, send)

    # -- the header deadline -------------------------------------------------------------

    def watch(self) -> None:
        """Start the deadline when the connection begins to wait for a request (h11: the
        client is IDLE), stop it once a request's headers are in."""
        import h11  # (uvicorn's, with the serve extra)

        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if waiting and self.deadline is None:
            self.idle_since = self.loop.time()
            self.deadline = self.loop.call_later(self.limits.header_timeout, self.close_idle)
        elif not waiting:
            self.stop_watching()

    def stop_watching(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline = self.idle_since = None

    def close_idle(self) -> None:
        """Close (an answer still unsent goes first, within the send deadline)."""
        self.stop_watching()
        self.timeout_keep_alive_handler()  # uvicorn's: ends the h11 connection, closes it

    # -- the send deadline ---------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.send_deadline is None:
            self.stalled_since = self.loop.time()
            self.send_deadline = self.loop.call_later(self.limits.send_timeout, self.send_overdue)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.cycle is None or self.cycle.response_complete:  # a whole answer is sent
            self.stop_send_clock()

    def stop_send_clock(self) -> None:
        if self.send_deadline is not None:
            self.send_deadline.cancel()
        self.send_deadline = self.stalled_since = None

    def send_overdue(self) -> None:
        self.send_deadline = None
        log.info(
            "client %s did not take its answer within %g s (--send-timeout): dropped",
            "{}:{}".format(*self.client) if self.client else "?",
            self.limits.send_timeout,
        )
        self.drop()

    def drop(self) -> None:
        """Close at once, the unsent answer discarded: a reset, so that the kernel frees
        its buffer too (a graceful close would wait for the client to read)."""
        self.stop_send_clock()
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    # -- room for a new connection -------------------------------------------------------

    def make_room(self) -> None:
        """Close the longest-idle connection with nothing left to send; or else drop the
        one whose answer has waited longest for its client; or else none (the request
        gets 503 from gated)."""
        others = [c for c in self.connections if c is not self]
        stalled = [c for c in others if getattr(c, "stalled_since", None) is not None]
        idle = [c for c in others if getattr(c, "idle_since", None) is not None]
        idle = [c for c in idle if c not in stalled]
        if idle:
            min(idle, key=lambda c: c.idle_since).close_idle()
            log.debug("over --max-connections: closed the longest-idle connection")
        elif stalled:
            min(stalled, key=lambda c: c.stalled_since).drop()
            log.info("over --max-connections: dropped the connection slowest to read")


def _http_protocol(limits: ServerLimits) -> type:
    """uvicorn's HTTP/1.1 protocol (h11) with _Deadlines within `limits`."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return type("DeadlineProtocol", (_Deadlines, H11Protocol), {"limits": limits})


def uvicorn_config(app, limits: ServerLimits, **options):
    """uvicorn's settings for `app` within `limits`; `options` (host, port, log_level, ...)
    go to uvicorn.Config as they are."""
    import uvicorn

    deadlines = limits.body_timeout + limits.request_timeout + limits.send_timeout
    return uvicorn.Config(
        app,
        http=_http_protocol(limits),
        # uvicorn refuses a request (plain 503) when the open connections, its own included,
        # reach this: idle and stalled ones make room for --max-connections requests at once,
        # and the protocol's gate keeps PROBE_CONNECTIONS more for /health and /ready
        limit_concurrency=limits.max_connections + PROBE_CONNECTIONS + 1,
        timeout_keep_alive=limits.header_timeout,  # (the protocol's deadline is the stricter)
        timeout_graceful_shutdown=math.ceil(deadlines) + 5,
        **options,
    )
