"""heedful serve against hostile clients: the rows of issue #9, one table.

Each case of CASES sends something to a real uvicorn server on 127.0.0.1 (create_app with
uvicorn_config, in a thread of this process, on the conftest's reverse model) and names the
outcome: the status and words of the answer, or 0 when the connection is closed without one.
An id starts with the row of #9 it checks; row0 is no row but the usual hostile table for the
HTTP fields of /translate and /detect (empty, huge, truncated, wrong type, NaN, wrong encoding).
Raw sockets stall bodies, hold idle connections and trickle headers; every wait is bounded in
count and time, and none depends on how fast the machine computes.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace

import pytest
import requests

from heedful.server import ServerLimits

from .helpers import InProcessServer

LIMITS = ServerLimits(
    max_chars=50,
    max_items=4,
    max_body_bytes=4000,
    max_in_flight=4,
    header_timeout=2.0,
    body_timeout=1.0,
)
GOOD = b'{"q": "abcd", "source": "src", "target": "tgt"}'
WAIT = 10.0  # seconds any one socket read may take: several times the longest timeout above


class Records(logging.Handler):
    """Every log record, from any thread, as 'LEVEL message' lines (with any traceback)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.levelname} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.lines.append(text)


@pytest.fixture(scope="module")
def hostile(reverse_model_dir):
    records = Records()
    root, ours = logging.getLogger(), logging.getLogger("heedful.server")
    root.addHandler(records)
    level = ours.level
    ours.setLevel(logging.INFO)
    running = InProcessServer(reverse_model_dir, LIMITS)
    running.records, running.model_dir = records, reverse_model_dir
    try:
        yield running
    finally:
        running.stop()
        root.removeHandler(records)
        ours.setLevel(level)
    errors = [line for line in records.lines if line.startswith(("ERROR", "CRITICAL"))]
    assert not errors, errors  # nothing a client sent is a fault of the server's


# ---- speaking HTTP over a raw socket ---------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int  # 0: the connection closed without an answer
    text: str
    headers: dict[str, str]


CLOSED = Answer(0, "", {})


def connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)


def request_bytes(
    method: str, target: str, body: bytes | None, headers: dict, close: bool = True
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1"]
    lines += ["Connection: close"] if close else []
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def read_answer(sock: socket.socket, head_only: bool = False) -> Answer:
    """One answer, read by its Content-Length (none for HEAD); CLOSED if the server closed
    the connection first."""
    data, deadline = b"", time.monotonic() + WAIT
    while b"\r\n\r\n" not in data or len(data) < _answer_length(data, head_only):
        assert time.monotonic() < deadline, f"no whole answer within {WAIT} s: {data[:200]!r}"
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            assert not data, f"the server closed mid-answer: {data[:200]!r}"
            return CLOSED
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return Answer(int(status_line.split()[1]), body.decode("utf-8", "replace"), headers)


def _answer_length(data: bytes, head_only: bool) -> int:
    head, _, _ = data.partition(b"\r\n\r\n")
    found = re.search(rb"\r\ncontent-length: *(\d+)", head, re.I)
    return len(head) + 4 + (int(found.group(1)) if found and not head_only else 0)


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed: the next read finds the end of the stream."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def http(method: str, path: str, body: bytes | None = None, **headers: str) -> Callable:
    """A case that sends one request (Content-Type and the like as keyword arguments, with
    underscores for dashes) and reads its answer."""
    named = {name.replace("_", "-"): value for name, value in headers.items()}

    def send(server) -> Answer:
        with connect(server) as sock:
            sock.sendall(request_bytes(method, path, body, named))
            return read_answer(sock, head_only=method == "HEAD")

    return send


def masking(value: bytes) -> Callable:
    """POST /translate of GOOD with mask_heads set to `value` (JSON)."""
    return json_post("/translate", GOOD[:-1] + b', "mask_heads": ' + value + b"}")


def json_post(path: str, body: bytes) -> Callable:
    return http("POST", path, body, Content_Type="application/json")


def server_holds(server, sockets: list[socket.socket], requests_begun: bool) -> bool:
    """Whether the server has accepted each of `sockets` (and read a request's headers on each,
    with `requests_begun`): uvicorn's protocol objects know their client's port."""
    try:
        held = tuple(server.server.server_state.connections)
    except RuntimeError:  # the set changed size while copied from the server's thread
        return False
    # (a protocol object being set up or torn down in the server's thread has no client yet)
    ports = {c.client[1] for c in held if c.client and (c.cycle is not None or not requests_begun)}
    return {s.getsockname()[1] for s in sockets} <= ports


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.01)


# ---- the scenarios of rows 1, 2 and 14 ---------------------------------------------------------


@contextmanager
def stalled_bodies(server, n: int) -> Iterator[list[socket.socket]]:
    """n connections that send headers and 9 of 100 promised body bytes, then stall; yields
    once the server has started a request for each of them."""
    headers = {"Content-Type": "application/json", "Content-Length": "100"}
    head = request_bytes("POST", "/translate", None, headers, close=False)
    with ExitStack() as stack:
        sockets = [stack.enter_context(connect(server)) for _ in range(n)]
        for sock in sockets:
            sock.sendall(head + b'{"q": "ab')
        wait_until(lambda: server_holds(server, sockets, True), f"{n} stalled requests")
        yield sockets


def stalled_bodies_leave_room(server) -> Answer:
    """Row 1: 32 stalled bodies (eight times --max-in-flight); a real request is answered."""
    with stalled_bodies(server, 32):
        assert server.health()["in_flight"] == 0  # a request without its body is not in flight
        return http("POST", "/translate", GOOD, Content_Type="application/json")(server)


def stalled_body_times_out(server) -> Answer:
    """Row 1: the stalled body gets 408 after --body-timeout, and its connection is closed."""
    with stalled_bodies(server, 1) as [sock]:
        answer = read_answer(sock)
        assert closed_by_server(sock), "the connection stayed open after the 408"
        return answer


@contextmanager
def idle_connections(server, n: int) -> Iterator[None]:
    """n connections that send nothing; yields once the server holds them all."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(connect(server)) for _ in range(n)]
        wait_until(lambda: server_holds(server, sockets, False), f"{n} idle connections")
        yield


def idle_connections_leave_room(server) -> Answer:
    """Row 2: as many idle connections as --max-connections (256); a real request is answered.
    A server of its own, whose idle connections wait a minute: none closes before the request,
    however slowly they are opened, and none from an earlier case is left to count."""
    fresh = InProcessServer(server.model_dir, replace(LIMITS, header_timeout=60.0))
    try:
        with idle_connections(fresh, LIMITS.max_connections):
            return http("POST", "/translate", GOOD, Content_Type="application/json")(fresh)
    finally:
        fresh.stop()


def idle_connection_is_closed(server) -> Answer:
    """Row 2: a connection that sends nothing is closed after --header-timeout."""
    with connect(server) as sock:
        return read_answer(sock)


def trickled_headers_are_cut(server) -> Answer:
    """Row 2 (slowloris): headers sent a byte every 50 ms, which would take 6 s in all, are cut
    at --header-timeout (2 s), although bytes keep arriving."""
    head = request_bytes("GET", "/health", None, {"X-Slow": "a" * 60})
    with connect(server) as sock:
        for i in range(len(head)):  # at most 120 bytes: about 6 s if never cut
            try:
                sock.sendall(head[i : i + 1])
            except OSError:  # the server has closed the connection
                break
            time.sleep(0.05)
        return read_answer(sock)


def idle_keep_alive_is_closed(server) -> Answer:
    """Row 2: after an answer, a kept-alive connection that sends nothing is closed."""
    with connect(server) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_answer(sock).status == 200
        return read_answer(sock)


def disconnect_mid_body(server) -> Answer:
    """Row 14: a client that closes its connection mid-body; the answer is what was logged."""
    records = server.records.lines
    seen = len(records)
    with stalled_bodies(server, 1):
        pass  # leaving the block closes the socket, 9 of 100 bytes sent
    wait_until(lambda: any("disconnected" in line for line in records[seen:]), "a log line")
    return Answer(0, "\n".join(records[seen:]), {})


def openapi_operations(server) -> Answer:
    """Row 12: /openapi.json, read as one line per operation: method, path, query fields."""
    answer = requests.get(server.url + "/openapi.json", timeout=WAIT)
    lines = [
        f"{method} {path} query=" + ",".join(p["name"] for p in op.get("parameters", ()))
        for path, operations in answer.json()["paths"].items()
        for method, op in operations.items()
    ]
    return Answer(answer.status_code, "\n".join(lines), dict(answer.headers))


# ---- the table ---------------------------------------------------------------------------------

JSON = {"Content_Type": "application/json"}
FORM = {"Content_Type": "application/x-www-form-urlencoded"}
QUERY = "q=abcd&source=src&target=tgt"
ONE_LETTER = re.compile(r'^\{"translatedText":"[a-h]"\}$')  # the reverse model writes a-h
EMPTY = re.compile(r"^$")  # HEAD: the status and headers of GET, no body
DETECTED = '[{"language":"src","confidence":100.0}]'

CASES = [
    # row 1: bodies that stall
    pytest.param(stalled_bodies_leave_room, 200, "translatedText", id="row1-stalled-bodies"),
    pytest.param(stalled_body_times_out, 408, "within 1 s (--body-timeout)", id="row1-408"),
    # row 2: idle connections and trickled headers
    pytest.param(idle_connections_leave_room, 200, "translatedText", id="row2-idle-connections"),
    pytest.param(idle_connection_is_closed, 0, "", id="row2-idle-connection-closed"),
    pytest.param(trickled_headers_are_cut, 0, "", id="row2-trickled-headers-cut"),
    pytest.param(idle_keep_alive_is_closed, 0, "", id="row2-idle-keep-alive-closed"),
    # row 12: deep-translator's query string, /detect, HEAD
    pytest.param(http("POST", "/translate?" + QUERY), 200, "translatedText", id="row12-query"),
    pytest.param(
        http("POST", "/translate?" + QUERY, b"", **FORM), 200, "translatedText",
        id="row12-query-with-empty-form",
    ),
    pytest.param(
        http("POST", "/translate?max_new_tokens=1", GOOD, **JSON), 200, ONE_LETTER,
        id="row12-query-adds-a-field",
    ),
    pytest.param(
        http("POST", "/translate?max_new_tokens=5", GOOD[:-1] + b', "max_new_tokens": 1}', **JSON),
        200, ONE_LETTER, id="row12-body-wins-over-query",
    ),
    pytest.param(
        http("POST", "/translate?num_beams=99", GOOD[:-1] + b', "num_beams": 1}', **JSON),
        400, "num_beams=99 is over the limit of 8", id="row12-overridden-query-value-checked",
    ),
    pytest.param(
        http("POST", "/translate?" + QUERY + "&num_beams=many"), 400,
        'num_beams must be an integer, got "many"', id="row12-query-wrong-type",
    ),
    pytest.param(
        http("POST", "/translate?q=abc", b'{"source": "src", "target": "tgt"}', **JSON), 400,
        "missing field q in the body (it is in the query string)", id="row12-body-lacks-q",
    ),
    pytest.param(
        http("POST", "/translate?" + "&".join(f"x{i}=1" for i in range(30)) + "&" + QUERY), 400,
        "the query string has 33 fields; the limit is 32", id="row12-query-too-many-fields",
    ),
    pytest.param(json_post("/detect", b'{"q": "abc"}'), 200, DETECTED, id="row12-detect"),
    pytest.param(http("POST", "/detect?q=abc"), 200, DETECTED, id="row12-detect-query"),
    pytest.param(
        http("POST", "/detect", b"q=abc&api_key=x", **FORM), 200, DETECTED,
        id="row12-detect-form",
    ),
    pytest.param(http("HEAD", "/"), 200, EMPTY, id="row12-head-page"),
    pytest.param(http("HEAD", "/languages"), 200, EMPTY, id="row12-head-languages"),
    pytest.param(http("HEAD", "/health"), 200, EMPTY, id="row12-head-health"),
    pytest.param(http("HEAD", "/ready"), 200, EMPTY, id="row12-head-ready"),
    pytest.param(http("HEAD", "/openapi.json"), 200, EMPTY, id="row12-head-openapi"),
    pytest.param(
        openapi_operations, 200, "post /detect query=q,api_key", id="row12-openapi-detect"
    ),
    pytest.param(
        openapi_operations, 200, "post /translate query=q,source,target,format,alternatives,"
        "num_beams,max_new_tokens,return_attention,api_key", id="row12-openapi-query",
    ),
    pytest.param(openapi_operations, 200, "head /languages", id="row12-openapi-head"),
    pytest.param(http("HEAD", "/translate"), 405, EMPTY, id="row12-head-not-where-get-is-not"),
    # row 14: a client that disconnects mid-body: one quiet line, no traceback
    pytest.param(
        disconnect_mid_body, 0,
        re.compile(r"(?m)^INFO client 127\.0\.0\.1:\d+ disconnected after 9 bytes"),
        id="row14-disconnect-mid-body",
    ),
    # row 0: the usual hostile table for the fields of /translate and /detect
    # ... empty
    pytest.param(json_post("/translate", b""), 400, "missing q parameter", id="row0-empty-body"),
    pytest.param(
        json_post("/detect", b""), 400, "missing q parameter", id="row0-detect-empty-body"
    ),
    pytest.param(
        json_post("/translate", b"{}"), 400, "missing q parameter", id="row0-empty-object"
    ),
    pytest.param(
        json_post("/translate", b'{"q": "", "source": "src", "target": "tgt"}'), 400,
        "q is empty", id="row0-empty-q",
    ),
    pytest.param(json_post("/detect", b'{"q": " "}'), 400, "q is empty", id="row0-detect-blank"),
    pytest.param(
        json_post("/translate", b'{"q": [], "source": "src", "target": "tgt"}'), 400,
        "q is an empty list", id="row0-empty-list",
    ),
    pytest.param(
        http("POST", "/translate?q=&source=src&target=tgt"), 400, "q is empty",
        id="row0-empty-q-in-query",
    ),
    # ... huge
    pytest.param(
        json_post("/translate", b'{"q": "' + b"a" * 5000 + b'"}'), 413, "over 4,000 bytes",
        id="row0-huge-body",
    ),
    pytest.param(
        json_post("/detect", b'{"q": "' + b"a" * 5000 + b'"}'), 413, "over 4,000 bytes",
        id="row0-detect-huge-body",
    ),
    pytest.param(
        json_post("/translate", b'{"q": "' + b"a" * 51 + b'", "source": "src", "target": "tgt"}'),
        400, "q has 51 characters; the limit is 50", id="row0-huge-text",
    ),
    pytest.param(
        json_post("/detect", b'{"q": ["' + b"a" * 60 + b'"]}'), 400,
        "q[0] has 60 characters; the limit is 50", id="row0-detect-huge-text",
    ),
    pytest.param(
        json_post("/translate", b'{"q": ["a", "b", "c", "d", "e"], "source": "src", "target": '
                  b'"tgt"}'), 400, "q has 5 texts; the limit is 4", id="row0-too-many-texts",
    ),
    pytest.param(
        http("POST", "/translate?source=src&target=tgt&q=" + "a" * 51), 400,
        "q has 51 characters; the limit is 50", id="row0-huge-text-in-query",
    ),
    pytest.param(
        http("POST", "/translate?q=" + "a" * 30_000), 400,
        "q has 30000 characters; the limit is 50", id="row0-huge-query-string",
    ),
    # ... truncated
    pytest.param(json_post("/translate", GOOD[:20]), 400, "invalid JSON", id="row0-truncated"),
    pytest.param(
        json_post("/detect", b'{"q": "ab'), 400, "invalid JSON", id="row0-detect-truncated"
    ),
    # ... wrong type
    pytest.param(
        json_post("/translate", b'{"q": 5, "source": "src", "target": "tgt"}'), 400,
        "q must be a string, got int", id="row0-q-number",
    ),
    pytest.param(
        json_post("/translate", GOOD[:-1] + b', "num_beams": "2"}'), 400,
        'num_beams must be an integer, got "2"', id="row0-num-beams-string",
    ),
    pytest.param(
        json_post("/translate", GOOD[:-1] + b', "return_attention": "yes"}'), 400,
        "return_attention must be true or false", id="row0-boolean-string",
    ),
    pytest.param(
        json_post("/translate", b'{"q": "abc", "source": ["src"], "target": "tgt"}'), 400,
        "missing field source", id="row0-source-list",
    ),
    pytest.param(
        json_post("/detect", b'{"q": [1]}'), 400, "q[0] must be a string, got int",
        id="row0-detect-q-list-of-numbers",
    ),
    pytest.param(
        json_post("/translate", b'["abc"]'), 400, "must be a JSON object, got list",
        id="row0-json-array",
    ),
    # ... not finite
    pytest.param(
        json_post("/translate", GOOD[:-1] + b', "num_beams": NaN}'), 400,
        "invalid JSON: NaN is not a JSON number", id="row0-nan",
    ),
    pytest.param(
        json_post("/translate", GOOD[:-1] + b', "alternatives": -Infinity}'), 400,
        "invalid JSON: -Infinity is not a JSON number", id="row0-minus-infinity",
    ),
    pytest.param(
        json_post("/detect", b'{"q": Infinity}'), 400, "invalid JSON: Infinity is not",
        id="row0-detect-infinity",
    ),
    pytest.param(
        json_post("/translate", GOOD[:-1] + b', "max_new_tokens": 1e999}'), 400,
        "max_new_tokens must be an integer, got Infinity", id="row0-overflowing-number",
    ),
    # ... wrong encoding
    pytest.param(
        json_post("/translate", b'{"q": "\xff", "source": "src", "target": "tgt"}'), 400,
        "invalid JSON: not UTF-8", id="row0-invalid-utf8-json",
    ),
    pytest.param(
        json_post("/detect", '{"q": "abc"}'.encode("utf-16")), 400, "invalid JSON: not UTF-8",
        id="row0-detect-utf16-json",
    ),
    pytest.param(
        http("POST", "/translate", b"q=%ff&source=src&target=tgt", **FORM), 400,
        "invalid form", id="row0-invalid-utf8-form",
    ),
    pytest.param(
        http("POST", "/translate?q=%ff&source=src&target=tgt"), 400, "invalid query string",
        id="row0-invalid-utf8-query",
    ),
    pytest.param(
        http("POST", "/translate", b'{"q": "caf\xe9"}', Content_Type="application/json; "
             "charset=latin-1"), 415, "unsupported charset 'latin-1': send UTF-8",
        id="row0-latin1-charset",
    ),
    pytest.param(
        http("POST", "/detect", b"q=abc", Content_Type="application/x-www-form-urlencoded; "
             'charset="UTF-16"'), 415, "unsupported charset 'utf-16'", id="row0-utf16-charset",
    ),
    pytest.param(
        http("POST", "/translate", GOOD, Content_Type="application/json; charset=UTF-8"), 200,
        "translatedText", id="row0-utf8-charset-is-fine",
    ),
    pytest.param(
        json_post("/translate", b'{"q": "a\\ud800", "source": "src", "target": "tgt"}'), 400,
        "q holds an unpaired surrogate", id="row0-unpaired-surrogate",
    ),
    pytest.param(
        http("POST", "/detect", b"q=abc", Content_Type="text/plain"), 415,
        "unsupported Content-Type 'text/plain'", id="row0-detect-text-plain",
    ),
    # issue 28, item 4: mask_heads, the heads switched off (the model: 1 + 1 layers, 4 heads)
    pytest.param(masking(b"[]"), 200, "translatedText", id="row0-mask-heads-empty-list"),
    pytest.param(masking(b'""'), 200, "translatedText", id="row0-mask-heads-empty-text"),
    pytest.param(
        masking(b'["cross:1:2", "encoder:1"]'), 200, "translatedText", id="row0-mask-heads-list"
    ),
    pytest.param(
        http("POST", "/translate", QUERY.encode() + b"&mask_heads=cross:1:1,decoder:1:4", **FORM),
        200, "translatedText", id="row0-mask-heads-form",
    ),
    pytest.param(
        http("POST", "/translate?" + QUERY + "&mask_heads=cross:1"), 200, "translatedText",
        id="row0-mask-heads-query",
    ),
    pytest.param(
        masking(json.dumps(["cross:1:1"] * 65).encode()), 400, "lists 65 heads; at most 64",
        id="row0-mask-heads-huge-list",
    ),
    pytest.param(
        masking(json.dumps("cross:1:1," * 300).encode()), 400, "lists 301 heads; at most 64",
        id="row0-mask-heads-huge-text",
    ),
    pytest.param(
        masking(b'"cross:1:' + b"9" * 3000 + b'"'), 400, "is not a head: kind:layer[:head]",
        id="row0-mask-heads-huge-number",
    ),
    pytest.param(masking(b'"cross:"'), 400, '"cross:" is not a head', id="row0-mask-heads-cut"),
    pytest.param(
        masking(b'"cross:1:"'), 400, '"cross:1:" is not a head', id="row0-mask-heads-cut-head"
    ),
    pytest.param(
        masking(b"5"), 400, "mask_heads must be a list of heads or a text of them, got 5",
        id="row0-mask-heads-number",
    ),
    pytest.param(
        masking(b"null"), 400, "must be a list of heads or a text of them, got null",
        id="row0-mask-heads-null",
    ),
    pytest.param(
        masking(b'{"cross": 1}'), 400, "must be a list of heads or a text",
        id="row0-mask-heads-object",
    ),
    pytest.param(
        masking(b"[1]"), 400, "mask_heads: 1 is not a head", id="row0-mask-heads-list-int"
    ),
    pytest.param(
        masking(b"[1e999]"), 400, "mask_heads: Infinity is not a head",
        id="row0-mask-heads-non-finite",
    ),
    pytest.param(
        masking(b'"cross:1.5"'), 400, '"cross:1.5" is not a head', id="row0-mask-heads-fraction"
    ),
    pytest.param(
        masking(b'"cross:01"'), 400, '"cross:01" is not a head', id="row0-mask-heads-leading-zero"
    ),
    pytest.param(
        masking(b'"cross:0"'), 400, "the layer and head counted from 1", id="row0-mask-heads-zero"
    ),
    pytest.param(
        masking(b'" cross:1"'), 400, '" cross:1" is not a head', id="row0-mask-heads-space"
    ),
    pytest.param(
        masking('"cross:\u0661"'.encode()), 400, "is not a head", id="row0-mask-heads-arabic-digit"
    ),
    pytest.param(
        http("POST", "/translate", QUERY.encode() + b"&mask_heads=cross:\xff", **FORM), 400,
        "invalid form", id="row0-mask-heads-latin1-form",
    ),
    pytest.param(
        masking(b'"self:1"'), 400, "the kind one of encoder, decoder, cross",
        id="row0-mask-heads-unknown-kind",
    ),
    pytest.param(
        masking(b'"cross:2"'), 400, "mask_heads: cross:2: the cross attention has layers 1 to 1",
        id="row0-mask-heads-layer-the-model-lacks",
    ),
    pytest.param(
        masking(b'["encoder:1:1", "decoder:1:5"]'), 400,
        "mask_heads: decoder:1:5: layer 1 has heads 1 to 4",
        id="row0-mask-heads-head-the-model-lacks",
    ),
]  # fmt: skip


@pytest.mark.parametrize("send, status, words", CASES)
def test_hostile_input(hostile, send, status, words):
    answer = send(hostile)
    text = answer.text
    if status >= 400 and text:  # an error is JSON {"error": message}, ours, not a framework's
        assert answer.headers["content-type"] == "application/json", answer.headers
        text = json.loads(text)["error"]
    shown = (answer.status, text[:300])
    assert answer.status == status, shown
    assert words.search(text) if isinstance(words, re.Pattern) else words in text, shown
    assert "Traceback" not in text, text


def test_the_server_still_translates_after_all_that(hostile):
    answer = requests.post(hostile.url + "/translate", data=GOOD, timeout=WAIT)
    assert answer.status_code == 200 and answer.json()["translatedText"], answer.text
    assert hostile.health()["in_flight"] == 0
