"""heedful serve: real server processes on 127.0.0.1, spoken to over HTTP.

A tiny character-level Transformer (its </s> suppressed, so every output runs to its length
limit and lengths are predictable) is served by `python -m heedful serve`. The tests check the
API against the in-process Translator, every error status with its message, batching of
concurrent requests, saturation (503), timeouts (504), SIGTERM with a request in flight, an
unchanged LibreTranslate client from PyPI, schemathesis fuzzing of /openapi.json, and the web
page in headless Chromium (screenshot in tests/artifacts/server-page.png).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import schemathesis
import torch
from hypothesis import HealthCheck, settings
from schemathesis.checks import negative_data_rejection

from heedful.checkpoint import GenerationConfig, save_model_dir
from heedful.config import ModelConfig
from heedful.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID, CharTokenizer
from heedful.models.build import build_model
from heedful.server import ServerLimits
from heedful.translator import Translator
from heedful.visualize.trace import Trace

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
# The main server's limits: small, so that fuzzing with any schema-valid request stays fast.
MAIN_LIMITS = ["--max-chars", "50", "--max-items", "4", "--max-num-beams", "4",
               "--max-new-tokens", "64", "--max-body-bytes", "4000",
               "--max-wait-ms", "20"]  # fmt: skip
OFFSET = 4  # generation.json: output limit = 1.0 · source length + 4


# ---- a tiny model and a server process ------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    tokenizer = CharTokenizer.train(["abcdefghijklmnopqrstuvwxyz ABC.,"])
    config = ModelConfig(
        d_model=16, num_heads=2, encoder_layers=1, decoder_layers=1, d_ff=32, dropout=0.0
    )
    torch.manual_seed(0)
    model = build_model(config, len(tokenizer), len(tokenizer))
    with torch.no_grad():  # only letters come out, and never </s>: outputs reach their limit
        model.generator.bias[[PAD_ID, BOS_ID, UNK_ID, EOS_ID]] -= 10.0
    generation = GenerationConfig(num_beams=1, max_len_ratio=1.0, max_len_offset=OFFSET)
    path = tmp_path_factory.mktemp("serve") / "model"
    save_model_dir(path, model, config, tokenizer, tokenizer, generation, ("en", "de"))
    return path


@pytest.fixture(scope="module")
def translator(model_dir) -> Translator:
    return Translator.load(model_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m heedful serve MODEL_DIR --port P ...` in its own process, ready when started."""

    def __init__(self, model_dir: Path, log: Path, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [sys.executable, "-m", "heedful", "serve", str(model_dir), "--port",
                   str(self.port), *flags]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with open(log, "wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.wait_ready()

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"server exited with {self.process.returncode}:\n{self.output()}")
            try:
                if requests.get(self.url + "/ready", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"server not ready after {timeout} s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def post(self, **body) -> requests.Response:
        return requests.post(self.url + "/translate", json=body, timeout=60)

    def health(self) -> dict:
        return requests.get(self.url + "/health", timeout=10).json()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    running = Server(model_dir, tmp_path_factory.mktemp("logs") / "main.log", *MAIN_LIMITS)
    yield running
    assert_clean_exit(running, running.stop())
    assert "Traceback" not in running.output(), running.output()  # no request crashed anything


def assert_clean_exit(server: Server, returncode: int) -> None:
    """Uvicorn shuts down gracefully on SIGTERM; recent versions then re-raise the signal to
    end the process (so a supervisor sees why it ended): exit status 0 or -SIGTERM."""
    assert returncode in (0, -signal.SIGTERM), (returncode, server.output())
    assert "Application shutdown complete" in server.output(), server.output()


def ok(response: requests.Response) -> dict:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def error(response: requests.Response, status: int, fragment: str) -> None:
    """An error answer: the status, JSON with one field `error`, and a short message naming
    what to change."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert list(body) == ["error"] and fragment in body["error"], body
    assert len(body["error"]) < 300, body  # a message quotes what was sent, it does not echo it


# ---- translation ------------------------------------------------------------------------------


def test_one_text_translates_as_the_translator_does(server, translator):
    text = "the cat sat on the mat."
    body = ok(server.post(q=text, source="en", target="de"))
    [expected] = translator.translate([text], num_beams=1)
    assert body == {"translatedText": expected.text}
    assert len(body["translatedText"]) == len(text) + OFFSET  # every output reaches its limit


def test_a_list_gives_a_list_of_the_same_length_in_order(server, translator):
    texts = ["abc", "a longer sentence here", "x", "hello world"]
    body = ok(server.post(q=texts, source="en", target="de"))
    assert body["translatedText"] == [t.text for t in translator.translate(texts, num_beams=1)]
    assert ok(server.post(q=["abc"], source="auto", target="de"))["translatedText"] == [
        translator.translate(["abc"], num_beams=1)[0].text
    ]


def test_alternatives_are_the_n_best_of_beam_search(server, translator):
    body = ok(server.post(q="hello there", source="en", target="de", alternatives=2))
    [expected] = translator.translate(["hello there"], num_beams=3, n_best=3)
    assert body["translatedText"] == expected.text
    assert body["alternatives"] == [a.text for a in expected.alternatives]
    assert len(set(body["alternatives"] + [body["translatedText"]])) == 3
    listed = ok(server.post(q=["ab", "cd"], source="en", target="de", alternatives=1))
    assert [len(a) for a in listed["alternatives"]] == [1, 1]
    # a beam too small for the alternatives asked for grows to fit them
    body = ok(server.post(q="ab", source="en", target="de", alternatives=2, num_beams=1))
    assert len(body["alternatives"]) == 2


def test_max_new_tokens_caps_the_output(server):
    body = ok(server.post(q="abcdefghij", source="en", target="de", max_new_tokens=3))
    assert len(body["translatedText"]) == 3
    # above the model's own limit (1.0 · 10 + 4) it changes nothing
    body = ok(server.post(q="abcdefghij", source="en", target="de", max_new_tokens=60))
    assert len(body["translatedText"]) == 10 + OFFSET


def test_attention_is_the_trace_the_viewer_reads(server):
    text = "a cat"
    body = ok(server.post(q=text, source="en", target="de", return_attention=True, num_beams=2))
    trace = Trace.from_dict(body["attention"])  # checks format, version and every field
    first = trace.hypotheses[0]
    assert trace.source == text and trace.source_tokens == list(text)
    assert first.text == body["translatedText"] and trace.search["num_beams"] == 2
    cross = np.asarray(first.cross_attention)  # (T, L, H, S)
    assert cross.shape == (len(first.tokens), 1, 2, len(text))
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-4)
    listed = ok(server.post(q=["ab", "cd"], source="en", target="de", return_attention=True))
    assert [t["source"] for t in listed["attention"]] == ["ab", "cd"]
    assert [t["hypotheses"][0]["text"] for t in listed["attention"]] == listed["translatedText"]


def test_form_encoded_requests_work_as_in_libretranslate(server, translator):
    form = [("q", "abc"), ("q", "hello"), ("source", "en"), ("target", "de"),
            ("alternatives", "1"), ("return_attention", "false")]  # fmt: skip
    body = ok(requests.post(server.url + "/translate", data=form, timeout=30))
    assert body["translatedText"] == [
        t.text for t in translator.translate(["abc", "hello"], num_beams=2, n_best=2)
    ]
    multipart = {"q": (None, "abc"), "source": (None, "en"), "target": (None, "de")}
    body = ok(requests.post(server.url + "/translate", files=multipart, timeout=30))
    assert body["translatedText"] == translator.translate(["abc"], num_beams=1)[0].text
    form = {"q": "abc", "source": "en", "target": "de", "num_beams": "many"}
    error(requests.post(server.url + "/translate", data=form, timeout=30), 400, "num_beams")


def test_languages_health_and_ready(server):
    languages = requests.get(server.url + "/languages", timeout=10).json()
    assert languages == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]
    assert server.health()["status"] == "ok" and server.health()["ready"] is True
    ready = requests.get(server.url + "/ready", timeout=10)
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert requests.get(server.url + "/docs", timeout=10).status_code == 200
    spec = requests.get(server.url + "/openapi.json", timeout=10).json()
    request_schema = spec["paths"]["/translate"]["post"]["requestBody"]["content"]
    assert set(request_schema) == {"application/json", "application/x-www-form-urlencoded"}
    assert request_schema["application/json"]["schema"]["properties"]["num_beams"]["maximum"] == 4


# ---- errors: each with its status and a message that says what to change ----------------------

GOOD = {"q": "abc", "source": "en", "target": "de"}
BAD_JSON = [
    ({k: v for k, v in GOOD.items() if k != "q"}, "missing field q"),
    ({k: v for k, v in GOOD.items() if k != "source"}, "missing field source"),
    ({k: v for k, v in GOOD.items() if k != "target"}, "missing field target"),
    ({**GOOD, "q": ""}, "q is empty"),
    ({**GOOD, "q": "  \n "}, "q is empty"),
    ({**GOOD, "q": ["abc", ""]}, "q[1] is empty"),
    ({**GOOD, "q": ["\x1e"]}, "q[0] is empty"),  # whitespace to Python, not to the schema's \s
    ({**GOOD, "q": "\ufeff "}, "q is empty"),  # whitespace to the schema's \s, not to Python
    ({**GOOD, "q": []}, "q is an empty list"),
    ({**GOOD, "q": "a\ud800"}, "q holds an unpaired surrogate"),
    ({**GOOD, "q": 5}, "q must be a string"),
    ({**GOOD, "q": ["abc", None]}, "q[1] must be a string"),
    ({**GOOD, "q": {"text": "abc"}}, "q must be a string"),
    ({**GOOD, "target": "fr"}, "unsupported language pair en→fr"),
    ({**GOOD, "source": "fr"}, "unsupported language pair fr→de"),
    ({**GOOD, "source": 7}, "missing field source"),
    ({**GOOD, "q": "a" * 51}, "51 characters; the limit is 50"),
    ({**GOOD, "q": ["abc"] * 5}, "5 texts; the limit is 4"),
    ({**GOOD, "num_beams": 5}, "num_beams=5 is over the limit of 4"),
    ({**GOOD, "num_beams": 0}, "num_beams must be at least 1"),
    ({**GOOD, "num_beams": "3"}, "num_beams must be an integer"),
    ({**GOOD, "num_beams": 2.5}, "num_beams must be an integer"),
    ({**GOOD, "num_beams": 1e300}, "num_beams=1000000000000000"),
    ({**GOOD, "num_beams": True}, "num_beams must be an integer"),
    ({**GOOD, "alternatives": 4}, "alternatives=4 is over the limit of 3"),
    ({**GOOD, "alternatives": -1}, "alternatives must be at least 0"),
    ({**GOOD, "max_new_tokens": 65}, "max_new_tokens=65 is over the limit of 64"),
    ({**GOOD, "max_new_tokens": 0}, "max_new_tokens must be at least 1"),
    ({**GOOD, "return_attention": "yes"}, "return_attention must be true or false"),
    ({**GOOD, "format": "html"}, "format 'html' is not supported"),
    ({**GOOD, **{f"x{i}": 1 for i in range(14)}}, "the body has 17 fields; the limit is 16"),
]


@pytest.mark.parametrize("body, fragment", BAD_JSON, ids=[f for _, f in BAD_JSON])
def test_invalid_fields_are_400_with_a_message(server, body, fragment):
    error(requests.post(server.url + "/translate", json=body, timeout=30), 400, fragment)


RAW_BODIES = [
    (b'{"q": "abc", "source": "en"', "application/json", 400, "invalid JSON"),
    (b'["abc"]', "application/json", 400, "must be a JSON object, got list"),
    (b'{"q": "\xff\xfe"}', "application/json", 400, "invalid JSON"),
    (b"[" * 1999 + b"]" * 1999, "application/json", 400, "invalid JSON"),  # too deep
    (b"", "application/json", 400, "missing field q"),  # an empty body is no body
    (b"q=%ff&source=en&target=de", "application/x-www-form-urlencoded", 400, "invalid form"),
    (b"q=abc", "text/plain", 415, "unsupported Content-Type 'text/plain'"),
    (b"x" * 4001, "application/json", 413, "over 4,000 bytes"),
]


def test_forms_may_repeat_fields_but_not_exceed_the_field_limit(server):
    # an extra field given three times and q given four times: 3 + 4 + 2 pairs, 4 fields
    form = "x=1&x=2&x=3&q=abc&q=abd&q=abe&q=abf&source=en&target=de"
    kind = {"Content-Type": "application/x-www-form-urlencoded"}
    answer = requests.post(server.url + "/translate", data=form, headers=kind, timeout=30)
    assert answer.status_code == 200 and len(answer.json()["translatedText"]) == 4, answer.text
    many = form + "".join(f"&y{i}=1" for i in range(13))  # 4 + 13 = 17 fields
    answer = requests.post(server.url + "/translate", data=many, headers=kind, timeout=30)
    error(answer, 400, "the body has 17 fields; the limit is 16")


@pytest.mark.parametrize("body, kind, status, fragment", RAW_BODIES, ids=[r[3] for r in RAW_BODIES])
def test_malformed_bodies(server, body, kind, status, fragment):
    response = requests.post(
        server.url + "/translate", data=body, headers={"Content-Type": kind}, timeout=30
    )
    error(response, status, fragment)


def test_a_streamed_body_without_length_is_cut_at_the_limit(server):
    chunks = (b'{"q": "' + b"a" * 1000 for _ in range(10))  # chunked: no Content-Length
    response = requests.post(
        server.url + "/translate",
        data=chunks,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    error(response, 413, "over 4,000 bytes")


def test_unknown_paths_and_methods_are_json_too(server):
    error(requests.get(server.url + "/nowhere", timeout=10), 404, "Not Found")
    error(requests.get(server.url + "/translate", timeout=10), 405, "Method Not Allowed")


def test_bad_input_leaves_the_server_answering(server, translator):
    for body, _ in BAD_JSON:
        requests.post(server.url + "/translate", json=body, timeout=30)
    assert server.process.poll() is None
    ok(server.post(**GOOD))


# ---- batching ---------------------------------------------------------------------------------


def test_concurrent_requests_are_translated_in_fewer_batches(server, translator):
    n = 12
    texts = [f"sentence number {chr(97 + i)}" for i in range(n)]
    before = server.health()
    start = threading.Barrier(n)

    def send(text):
        start.wait()
        return server.post(q=text, source="en", target="de")

    with ThreadPoolExecutor(n) as pool:
        responses = list(pool.map(send, texts))
    after = server.health()
    expected = [t.text for t in translator.translate(texts, num_beams=1)]
    assert [ok(r)["translatedText"] for r in responses] == expected  # batching changes nothing
    assert after["requests"] - before["requests"] == n
    batches = after["batches"] - before["batches"]
    assert batches < n, f"{n} concurrent requests took {batches} batches"
    assert after["largest_batch"] > 1


# ---- an existing client, unchanged ------------------------------------------------------------


def test_a_libretranslate_client_from_pypi_translates_through_the_server(server, translator):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    text = "hello from a client"
    assert client.translate(text, "en", "de") == translator.translate([text], num_beams=1)[0].text
    assert [language["code"] for language in client.languages()] == ["en", "de"]


# ---- fuzzing the OpenAPI schema ---------------------------------------------------------------


REJECTIONS = ["400", "404", "405", "406", "408", "413", "415", "422"]


@schemathesis.check
def rejected_unless_given_in_the_query(ctx, response, case):
    """schemathesis's negative_data_rejection, less the one request OpenAPI cannot describe:
    no body at all, with q, source and target in the query string (deep-translator's
    LibreTranslator sends that), which the server serves as LibreTranslate does. The schema
    must call the body required, or every positive request could lack q."""
    from schemathesis.core import NOT_SET

    given = set(case.query or {})
    no_body = case.body is NOT_SET or case.body in ({}, b"", "")  # empty: no body, to the server
    if no_body and {"q", "source", "target"} <= given:
        return None
    if no_body and case.path.endswith("/detect") and "q" in given:
        return None
    return negative_data_rejection(ctx, response, case)


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_fuzzing_the_schema_finds_no_server_error(server, mode):
    """Requests generated from /openapi.json, valid by the schema (positive) or not (negative):
    never a 5xx, and every answer's status, content type and body as the schema declares.
    (schemathesis's pytest plugin does not run under pytest 9; its strategies do.)"""
    from hypothesis import given
    from schemathesis import GenerationMode
    from schemathesis.config import SchemathesisConfig

    # A schema-violating request may also be refused for its size (413: a generated body over
    # --max-body-bytes), which schemathesis's default list of rejections leaves out.
    config = SchemathesisConfig.from_dict(
        {"checks": {"negative_data_rejection": {"expected-statuses": REJECTIONS}}}
    )
    api = schemathesis.openapi.from_url(server.url + "/openapi.json", config=config)
    session = requests.Session()

    @given(case=api.as_strategy(GenerationMode(mode)))
    @settings(
        max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def fuzz(case):
        case.call_and_validate(
            session=session,
            timeout=60,
            excluded_checks=[negative_data_rejection],
            additional_checks=[rejected_unless_given_in_the_query],
        )

    fuzz()
    assert server.process.poll() is None


# ---- limits of the whole server: saturation, timeouts, attention size, SIGTERM -------------

# Slow enough to be caught in flight, quick enough to finish on a busy machine.
MEDIUM = {"q": ["abcdefghij" * 10] * 8, "source": "en", "target": "de", "num_beams": 4}


def wait_in_flight(server: Server, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while server.health()["in_flight"] < n:
        assert time.monotonic() < deadline, "the slow request never got in flight"
        time.sleep(0.02)


class InProcessServer:
    """create_app served by uvicorn with uvicorn_config, as `heedful serve` does, but in a
    thread of this process: a test can reach into the app (replace its service) and read the
    log records of both. uvicorn leaves logging alone (log_config=None)."""

    def __init__(self, model_dir: Path, limits: ServerLimits):
        import uvicorn

        from heedful.server import create_app, uvicorn_config

        self.app = create_app(model_dir, limits)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn_config(self.app, limits, host="127.0.0.1", port=self.port, log_config=None)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.ready():
            assert self.thread.is_alive() and time.monotonic() < deadline, "server not ready"
            time.sleep(0.05)

    def ready(self) -> bool:
        try:
            return requests.get(self.url + "/ready", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def post(self, **body) -> requests.Response:
        return requests.post(self.url + "/translate", json=body, timeout=60)

    def health(self) -> dict:
        return requests.get(self.url + "/health", timeout=10).json()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive(), "the server thread did not end"


class HeldService:
    """The app's TranslationService, whose batches wait until `release` is set: slow work on
    demand, equally slow on every machine."""

    def __init__(self, service):
        self.service = service
        self.started, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name: str):
        return getattr(self.service, name)

    def run(self, jobs):
        self.started.set()
        self.release.wait(30)
        return self.service.run(jobs)


@pytest.fixture(scope="module")
def tight_server(model_dir):
    limits = ServerLimits(max_in_flight=1, request_timeout=0.5, max_attention_bytes=20000)
    running = InProcessServer(model_dir, limits)
    yield running
    running.stop()


def test_saturated_server_answers_503_and_slow_requests_504(tight_server):
    state = tight_server.app.state.heedful
    held = state.service = HeldService(state.service)
    try:
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(tight_server.post, **GOOD)
            assert held.started.wait(30), "the request never reached the worker"
            busy = tight_server.post(**GOOD)  # the held request is in flight until its 504
            error(busy, 503, "saturated: 1 requests in flight, the limit is 1")
            assert busy.headers["retry-after"] == "1"
            error(slow.result(), 504, "longer than 0.5 s")
        assert tight_server.health()["in_flight"] == 0
    finally:
        held.release.set()
        state.service = held.service
    ok(tight_server.post(**GOOD))  # the worker finishes the abandoned batch, then serves


def test_attention_over_its_size_limit_is_refused_before_decoding(tight_server):
    body = {**GOOD, "q": "abcdefghij" * 5, "return_attention": True}
    error(tight_server.post(**body), 400, "the limit is 20,000 (--max-attention-bytes)")


def test_sigterm_lets_the_request_in_flight_finish(model_dir, tmp_path):
    running = Server(model_dir, tmp_path / "sigterm.log", "--request-timeout", "300")
    try:
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(running.post, **MEDIUM)
            wait_in_flight(running, 1)
            running.process.send_signal(signal.SIGTERM)
            response = slow.result()
        assert len(ok(response)["translatedText"]) == 8
        assert_clean_exit(running, running.process.wait(60))
    finally:
        running.stop()
    assert "Shutting down" in running.output()
    with pytest.raises(requests.ConnectionError):  # and it is gone
        requests.get(running.url + "/health", timeout=5)


def test_the_ctranslate2_engine_serves_the_text_without_attention(model_dir, translator, tmp_path):
    running = Server(model_dir, tmp_path / "ct2.log", "--engine", "ctranslate2", *MAIN_LIMITS)
    try:
        texts = ["abc", "a longer sentence here", "hello world"]
        body = ok(running.post(q=texts, source="en", target="de"))
        assert body["translatedText"] == [t.text for t in translator.translate(texts, num_beams=1)]
        body = ok(running.post(q="hello there", source="en", target="de", alternatives=2))
        [expected] = translator.translate(["hello there"], num_beams=3, n_best=3)
        assert [body["translatedText"], *body["alternatives"]] == [
            expected.text,
            *(a.text for a in expected.alternatives),
        ]
        body = ok(running.post(q="abcdefghij", source="en", target="de", max_new_tokens=3))
        assert len(body["translatedText"]) == 3
        attention = running.post(q="abc", source="en", target="de", return_attention=True)
        error(attention, 400, "the ctranslate2 engine, which gives no attention weights")
    finally:
        assert_clean_exit(running, running.stop())
    assert "(ctranslate2 engine)" in running.output(), running.output()


# ---- configuration and layering --------------------------------------------------------------


def test_limits_must_be_positive_and_finite():
    with pytest.raises(ValueError, match="max_chars"):
        ServerLimits(max_chars=0)
    with pytest.raises(ValueError, match="request_timeout"):
        ServerLimits(request_timeout=float("inf"))
    assert ServerLimits(max_wait_ms=0).max_wait_ms == 0


def test_the_command_refuses_bad_limits_and_directories(tmp_path, model_dir):
    from click.testing import CliRunner

    from heedful.cli import main

    result = CliRunner().invoke(main, ["serve", str(model_dir), "--max-chars", "0"])
    assert result.exit_code != 0 and "max_chars" in result.output
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "missing")])
    assert result.exit_code != 0 and "model directory not found" in result.output


def test_the_server_imports_neither_training_nor_matplotlib():
    code = (
        "import sys, heedful.server, heedful.translator, heedful.visualize.trace; "
        "print(sorted(m for m in sys.modules if m == 'heedful.training' or "
        "m.startswith('matplotlib')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the web page, in headless Chromium -------------------------------------------------------


def test_the_page_is_offline(server):
    page = requests.get(server.url + "/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for external in ("http://", "https://", "//cdn", "@import", "url("):
        assert external not in page.text, external
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:[a-z]+:)?//""", page.text, re.I)
    assert not re.search(r"<script[^>]*\bsrc=", page.text, re.I)


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    """Headless Chromium that can reach 127.0.0.1 and nothing else (see tests/visualize)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless", "--no-sandbox", "--disable-gpu",
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                     "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                     "--window-size=1360,1000", "--force-device-scale-factor=1",
                     f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):  # fmt: skip
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(120)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


def test_the_page_translates_and_shows_the_attention(server, chromium, translator):
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium
    driver.get(server.url + "/")
    text = "the dog runs"
    driver.find_element("id", "source-input").send_keys(text)
    driver.find_element("id", "translate-button").click()
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: d.find_element("id", "translation").text)
    assert driver.find_element("id", "translation").text == (
        translator.translate([text], num_beams=1)[0].text
    )
    frame = driver.find_element("id", "viewer-frame")
    driver.switch_to.frame(frame)
    try:
        wait.until(lambda d: d.execute_script("return !!window.heedfulViewer"))
        assert driver.find_element("id", "source-text").text == text
        assert driver.find_element("id", "panel-matrix").is_displayed()
        colours = driver.execute_script(
            """const c = document.getElementById("matrix-canvas");
            const data = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
            const seen = new Set();
            for (let i = 0; i < data.length; i += 4 * 5) seen.add(data[i] + "," + data[i + 1]);
            return seen.size;"""
        )
        assert colours >= 10, colours  # a drawn heatmap, not a blank canvas
    finally:
        driver.switch_to.default_content()
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.set_window_size(1360, 1600)
    driver.save_screenshot(str(ARTIFACTS / "server-page.png"))
    assert json.loads(driver.execute_script("return JSON.stringify(heedfulPage.last.attention)"))
