"""Connections: a deadline for each request's headers, and idle ones make room for new ones.

uvicorn's keep-alive timer starts only after an answer and stops at any byte, so a connection
that never sends a request, or sends it a byte at a time, stays open for ever; 256 of them
filled --max-connections and every real request got 503. Here a connection waiting for a
request is closed --header-timeout seconds after it began waiting, whatever it sends meanwhile,
and a new connection past --max-connections closes the longest-idle one. So neither slow nor
idle clients take room from real requests (tests/server/test_hostile.py, row 2).
"""

from __future__ import annotations

import asyncio
import logging
import math

from heedful.server.limits import ServerLimits

log = logging.getLogger(__name__)


def _http_protocol(limits: ServerLimits) -> type:
    """uvicorn's HTTP/1.1 protocol (h11) with a deadline for a request's headers, and room
    made for a new connection past --max-connections (see the module's docstring)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadlineProtocol(H11Protocol):
        idle_since: float | None = None  # when it began waiting for a request's headers
        deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.watch()
            if len(self.connections) > limits.max_connections:
                self.make_room()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self.watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.watch()

        def connection_lost(self, exc: Exception | None) -> None:
            self.stop_watching()
            super().connection_lost(exc)

        def watch(self) -> None:
            """Start the deadline when the connection begins to wait for a request (h11: the
            client is IDLE), stop it once a request's headers are in."""
            waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
            if waiting and self.deadline is None:
                self.idle_since = self.loop.time()
                self.deadline = self.loop.call_later(limits.header_timeout, self.close_idle)
            elif not waiting:
                self.stop_watching()

        def stop_watching(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
            self.deadline = self.idle_since = None

        def close_idle(self) -> None:
            self.stop_watching()
            self.timeout_keep_alive_handler()  # uvicorn's: ends the h11 connection, closes it

        def make_room(self) -> None:
            idle = [c for c in self.connections if getattr(c, "idle_since", None) is not None]
            idle = [c for c in idle if c is not self]
            if idle:  # none idle: uvicorn answers this connection's request with 503
                min(idle, key=lambda c: c.idle_since).close_idle()
                log.debug("over --max-connections: closed the longest-idle connection")

    return HeaderDeadlineProtocol


def uvicorn_config(app, limits: ServerLimits, **options):
    """uvicorn's settings for `app` within `limits`; `options` (host, port, log_level, ...)
    go to uvicorn.Config as they are."""
    import uvicorn

    return uvicorn.Config(
        app,
        http=_http_protocol(limits),
        # uvicorn refuses a request when the open connections, its own included, reach this;
        # idle ones close to make room, so --max-connections requests can be under way at once
        limit_concurrency=limits.max_connections + 1,
        timeout_keep_alive=limits.header_timeout,  # (the protocol's deadline is the stricter)
        timeout_graceful_shutdown=math.ceil(limits.body_timeout + limits.request_timeout) + 5,
        **options,
    )
