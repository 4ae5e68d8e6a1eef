"""heedful serve against clients that lock others out (issue 26, class 3): the HTTP deadlines.

Each case of CASES starts a real uvicorn server on 127.0.0.1 (create_app with uvicorn_config,
in a thread of this process, on the conftest's tiny model, whose outputs run to their length
limit) with small limits, does what a hostile client does, and names the outcome: the status
and words of an answer, or 0 and a line saying what the server did. A slow reader posts
return_attention for one 50-character text (a 266 kB answer) on a socket with a small receive
buffer and a small segment size, so that the kernels cannot take the answer: each case checks
that part of it is left in the server's own buffer. Every wait is bounded in count and time.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace

import pytest

from heedful.server import ServerLimits
from heedful.visualize.trace import build_trace

from .helpers import InProcessServer
from .test_hostile import WAIT, Answer, connect, read_answer, request_bytes, wait_until

LIMITS = ServerLimits(
    max_chars=50, max_items=4, max_connections=8, send_timeout=60.0, header_timeout=60.0,
    max_attention_bytes=4 << 20,
)  # fmt: skip
BIG = json.dumps(
    {"q": "abcdefghij" * 5, "source": "en", "target": "de", "return_attention": True}
).encode()
GOOD = b'{"q": "abcd", "source": "en", "target": "de"}'


@contextmanager
def serving(model_dir, **limits) -> Iterator[InProcessServer]:
    server = InProcessServer(model_dir, replace(LIMITS, **limits))
    try:
        yield server
    finally:
        server.stop()


def held(server) -> list:
    """The server's connections (uvicorn's protocol objects), copied from its thread."""
    for _ in range(100):
        try:
            return list(server.server.server_state.connections)
        except RuntimeError:  # the set changed size while copied
            time.sleep(0.01)
    raise AssertionError("could not read the server's connections")


def stalled(server) -> int:
    """Connections with part of an answer still in the server's buffer."""
    return sum(1 for c in held(server) if c.transport and c.transport.get_write_buffer_size())


def reader_socket(server) -> socket.socket:
    """A socket that takes little before it is read: a 4 KiB receive buffer, 536-byte segments."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
    sock.settimeout(WAIT)
    sock.connect(("127.0.0.1", server.port))
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) <= 16384  # (Linux doubles it)
    return sock


def ask(server, method: str = "POST", path: str = "/translate", body: bytes | None = BIG):
    sock = reader_socket(server)
    headers = {"Content-Type": "application/json"} if body else {}
    sock.sendall(request_bytes(method, path, body, headers, close=False))
    return sock


@contextmanager
def slow_readers(server, n: int, path: str = "/translate") -> Iterator[list[socket.socket]]:
    """n clients that ask for a big answer and never read it; yields once min(n, 4) of the
    answers wait in the server's buffer."""
    with ExitStack() as stack:
        method, body = ("POST", BIG) if path == "/translate" else ("GET", None)
        sockets = [stack.enter_context(ask(server, method, path, body)) for _ in range(n)]
        wait_until(lambda: stalled(server) >= min(n, 4), f"{min(n, 4)} answers left unread")
        yield sockets


def during_slow_readers(n: int, method: str, path: str, body: bytes | None = None) -> Callable:
    """n slow readers hold their answers (--send-timeout 60: no deadline frees them); a normal
    request on a connection of its own is answered."""

    def case(model_dir) -> Answer:
        with serving(model_dir) as server, slow_readers(server, n):
            with connect(server) as sock:
                headers = {"Content-Type": "application/json"} if body else {}
                sock.sendall(request_bytes(method, path, body, headers))
                return read_answer(sock)

    return case


def holds(server, sock: socket.socket) -> bool:
    port = sock.getsockname()[1]
    return any(c.client is not None and c.client[1] == port for c in held(server))


def dropped_at_send_timeout(path: str) -> Callable:
    """A client that never reads its answer is dropped after --send-timeout (1 s): the server
    lets go of the connection, and the client never gets the whole answer."""

    def case(model_dir) -> Answer:
        with serving(model_dir, send_timeout=1.0) as server, slow_readers(server, 1, path) as [s]:
            wait_until(lambda: not holds(server, s), "the slow reader dropped")
            return Answer(0, f"dropped, {received(s):,} bytes read", {})

    return case


def received(sock: socket.socket) -> int:
    """Bytes read until the server's end of the connection (a reset, or its end)."""
    total = 0
    for _ in range(10_000):  # (the answer is at most 1.6 MB)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return total
        if not chunk:
            return total
        total += len(chunk)
    raise AssertionError(f"more than {total:,} bytes")


def byte_at_a_time(model_dir) -> Answer:
    """A client that reads its answer a byte every 5 ms (15 minutes for 266 kB) is dropped
    after --send-timeout (1 s), although bytes keep leaving."""
    with serving(model_dir, send_timeout=1.0) as server, slow_readers(server, 1) as [sock]:
        for reads in range(2000):  # about 10 s
            if not holds(server, sock):
                return Answer(0, f"dropped after {reads} bytes read a byte at a time", {})
            sock.recv(1)
            time.sleep(0.005)
        return Answer(0, "still held after 2000 bytes read a byte at a time", {})


class HeldService:
    """The app's service, whose batches wait until `release` is set."""

    def __init__(self, service):
        self.service, self.release = service, threading.Event()

    def __getattr__(self, name: str):
        return getattr(self.service, name)

    def run(self, jobs):
        self.release.wait(WAIT)
        return self.service.run(jobs)


def during_busy_connections(method: str, path: str, body: bytes | None = None) -> Callable:
    """--max-connections 4 requests in flight, their batch held in the worker: a request on a
    fifth connection (a probe has room kept; others are told which limit they met)."""

    def case(model_dir) -> Answer:
        with serving(model_dir, max_connections=4) as server, ExitStack() as stack:
            state = server.app.state.heedful
            service = state.service = HeldService(state.service)
            stack.callback(setattr, state, "service", service.service)
            stack.callback(service.release.set)
            busy = [stack.enter_context(ask(server, body=GOOD)) for _ in range(4)]
            wait_until(lambda: state.in_flight == 4, "4 requests in flight")
            with connect(server) as sock:
                headers = {"Content-Type": "application/json"} if body else {}
                sock.sendall(request_bytes(method, path, body, headers))
                answer = read_answer(sock, head_only=method == "HEAD")
            service.release.set()
            assert all(read_answer(s).status == 200 for s in busy)  # the busy ones finish
            return answer

    return case


def timed_out_work(attention: bool) -> Callable:
    """A request whose first trace (or translation call) is held until it got its 504: the
    worker begins none of the rest of it. Outcome: how many calls the worker made."""

    def case(model_dir) -> Answer:
        with serving(model_dir, request_timeout=0.5) as server:
            service = server.app.state.heedful.service
            calls, release = [], threading.Event()
            original = build_trace if attention else service.translator.translate

            def held_call(*args, **kwargs):
                if args[0] != ["abcd"]:  # (not the follow-up's: GOOD)
                    calls.append(1)
                if len(calls) == 1:
                    release.wait(WAIT)
                return original(*args, **kwargs)

            with pytest.MonkeyPatch.context() as patch:
                if attention:
                    patch.setattr("heedful.server.service.build_trace", held_call)
                else:
                    patch.setattr(service.translator, "translate", held_call)
                q = ["abcd"] * 4 if attention else ["ab", "a"]  # "ab" capped: two searches
                body = {"q": q, "source": "en", "target": "de", "max_new_tokens": 5}
                body["return_attention"] = attention
                with connect(server) as sock:
                    sock.sendall(request_bytes("POST", "/translate", json.dumps(body).encode(),
                                               {"Content-Type": "application/json"}))  # fmt: skip
                    answer = read_answer(sock)
                assert answer.status == 504, answer
                release.set()
                with connect(server) as sock:  # the worker is through with it once this is in
                    sock.sendall(request_bytes("POST", "/translate", GOOD, {}))
                    assert read_answer(sock).status == 200
            return Answer(0, f"calls: {len(calls)}", {})

    return case


CASES = [
    # slow readers of big answers fill --max-connections (8): a normal request gets its answer
    pytest.param(during_slow_readers(8, "POST", "/translate", GOOD), 200, "translatedText",
                 id="slow-readers-translate"),
    pytest.param(during_slow_readers(8, "GET", "/health"), 200, '"status":"ok"',
                 id="slow-readers-health"),
    pytest.param(during_slow_readers(8, "GET", "/ready"), 200, '"status":"ready"',
                 id="slow-readers-ready"),
    pytest.param(during_slow_readers(16, "POST", "/translate", GOOD), 200, "translatedText",
                 id="many-slow-readers-translate"),
    # the send deadline
    pytest.param(dropped_at_send_timeout("/translate"), 0, "dropped", id="never-reads-dropped"),
    pytest.param(dropped_at_send_timeout("/docs-assets/swagger-ui-bundle.js"), 0, "dropped",
                 id="never-reads-streamed-file-dropped"),
    pytest.param(byte_at_a_time, 0, "dropped", id="byte-at-a-time-dropped"),
    # every connection busy with a request in flight: probes still answer
    pytest.param(during_busy_connections("GET", "/ready"), 200, '"in_flight":4',
                 id="busy-connections-health"),
    pytest.param(during_busy_connections("HEAD", "/ready"), 200, "", id="busy-connections-ready"),
    pytest.param(during_busy_connections("POST", "/translate", GOOD), 503,
                 "5 connections open, the limit is 4 (--max-connections)",
                 id="busy-connections-translate-named-503"),
    # work past --request-timeout (504) stops
    pytest.param(timed_out_work(True), 0, "calls: 1", id="timed-out-traces-stop"),
    pytest.param(timed_out_work(False), 0, "calls: 1", id="timed-out-searches-stop"),
]  # fmt: skip


@pytest.mark.parametrize("case, status, words", CASES)
def test_hostile_deadline(model_dir, case, status, words):
    answer = case(model_dir)
    text = answer.text
    if status >= 400:  # an error is JSON {"error": message}, ours, not uvicorn's plain text
        assert answer.headers.get("content-type") == "application/json", answer
        text = json.loads(text)["error"]
    assert (answer.status, words in text) == (status, True), (answer.status, text[:300])
