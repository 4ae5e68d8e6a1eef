"""create_app in this process, spoken to through FastAPI's TestClient (no socket): the API
against the in-process Translator, every error status with its message, batching of concurrent
requests, saturation (503), timeouts (504), the other engine, the page and the layering."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

import numpy as np
import pytest

from heedful.server import ServerLimits
from heedful.visualize.trace import Trace

from .helpers import GOOD, OFFSET, client, error, ok

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def app(model_dir):
    with client(model_dir) as test_client:
        yield test_client


def post(app, **body):
    return app.post("/translate", json=body)


# ---- translation ------------------------------------------------------------------------------


def test_one_text_translates_as_the_translator_does(app, translator):
    text = "the cat sat on the mat."
    body = ok(post(app, q=text, source="en", target="de"))
    [expected] = translator.translate([text], num_beams=1)
    assert body == {"translatedText": expected.text}
    assert len(body["translatedText"]) == len(text) + OFFSET  # every output reaches its limit


def test_a_list_gives_a_list_of_the_same_length_in_order(app, translator):
    texts = ["abc", "a longer sentence here", "x", "hello world"]
    body = ok(post(app, q=texts, source="en", target="de"))
    assert body["translatedText"] == [t.text for t in translator.translate(texts, num_beams=1)]
    assert ok(post(app, q=["abc"], source="auto", target="de"))["translatedText"] == [
        translator.translate(["abc"], num_beams=1)[0].text
    ]


def test_alternatives_are_the_n_best_of_beam_search(app, translator):
    body = ok(post(app, q="hello there", source="en", target="de", alternatives=2))
    [expected] = translator.translate(["hello there"], num_beams=3, n_best=3)
    assert body["translatedText"] == expected.text
    assert body["alternatives"] == [a.text for a in expected.alternatives]
    assert len(set(body["alternatives"] + [body["translatedText"]])) == 3
    listed = ok(post(app, q=["ab", "cd"], source="en", target="de", alternatives=1))
    assert [len(a) for a in listed["alternatives"]] == [1, 1]
    # a beam too small for the alternatives asked for grows to fit them
    body = ok(post(app, q="ab", source="en", target="de", alternatives=2, num_beams=1))
    assert len(body["alternatives"]) == 2


def test_max_new_tokens_caps_the_output(app):
    body = ok(post(app, q="abcdefghij", source="en", target="de", max_new_tokens=3))
    assert len(body["translatedText"]) == 3
    # above the model's own limit (1.0 · 10 + 4) it changes nothing
    body = ok(post(app, q="abcdefghij", source="en", target="de", max_new_tokens=60))
    assert len(body["translatedText"]) == 10 + OFFSET


def test_attention_is_the_trace_the_viewer_reads(app):
    text = "a cat"
    body = ok(post(app, q=text, source="en", target="de", return_attention=True, num_beams=2))
    trace = Trace.from_dict(body["attention"])  # checks format, version and every field
    first = trace.hypotheses[0]
    assert trace.source == text and trace.source_tokens == list(text)
    assert first.text == body["translatedText"] and trace.search["num_beams"] == 2
    cross = np.asarray(first.cross_attention)  # (T, L, H, S)
    assert cross.shape == (len(first.tokens), 1, 2, len(text))
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-4)
    listed = ok(post(app, q=["ab", "cd"], source="en", target="de", return_attention=True))
    assert [t["source"] for t in listed["attention"]] == ["ab", "cd"]
    assert [t["hypotheses"][0]["text"] for t in listed["attention"]] == listed["translatedText"]


def test_form_encoded_requests_work_as_in_libretranslate(app, translator):
    form = [("q", "abc"), ("q", "hello"), ("source", "en"), ("target", "de"),
            ("alternatives", "1"), ("return_attention", "false")]  # fmt: skip
    body = ok(app.post("/translate", content=urlencode(form), headers=FORM))
    assert body["translatedText"] == [
        t.text for t in translator.translate(["abc", "hello"], num_beams=2, n_best=2)
    ]
    multipart = {"q": (None, "abc"), "source": (None, "en"), "target": (None, "de")}
    body = ok(app.post("/translate", files=multipart))
    assert body["translatedText"] == translator.translate(["abc"], num_beams=1)[0].text
    form = {"q": "abc", "source": "en", "target": "de", "num_beams": "many"}
    error(app.post("/translate", content=urlencode(form), headers=FORM), 400, "num_beams")


def test_languages_health_and_ready(app):
    assert app.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]
    assert app.get("/health").json() == {"status": "ok"}  # LibreTranslate's, as it is
    ready = app.get("/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert ready.json()["in_flight"] == 0  # the counters are at /ready
    assert app.get("/docs").status_code == 200
    spec = app.get("/openapi.json").json()
    request_schema = spec["paths"]["/translate"]["post"]["requestBody"]["content"]
    assert set(request_schema) == {"application/json", "application/x-www-form-urlencoded"}
    assert request_schema["application/json"]["schema"]["properties"]["num_beams"]["maximum"] == 4


def test_before_the_model_has_loaded_only_health_answers(model_dir):
    from fastapi.testclient import TestClient

    from heedful.server import create_app

    loading = TestClient(create_app(model_dir))  # outside `with`: no start-up, nothing loads
    assert loading.get("/health").json() == {"status": "ok"}
    for answer in (loading.get("/ready"), loading.get("/"), loading.post("/translate", json=GOOD)):
        error(answer, 503, "the model is still loading; GET /ready answers 200 when it is done")
        assert answer.headers["retry-after"] == "1"


# ---- errors: each with its status and a message that says what to change ----------------------

BAD_JSON = [
    ({k: v for k, v in GOOD.items() if k != "q"}, "Invalid request: missing q parameter"),
    ({k: v for k, v in GOOD.items() if k != "source"}, "missing field source"),
    ({k: v for k, v in GOOD.items() if k != "target"}, "missing field target"),
    ({**GOOD, "q": ""}, "q is empty"),
    ({**GOOD, "q": "  \n "}, "q is empty"),
    ({**GOOD, "q": "\ufeff "}, "q is empty"),  # whitespace to the schema's \s, not to Python
    ({**GOOD, "q": []}, "q is an empty list"),
    ({**GOOD, "q": "a\ud800"}, "q holds an unpaired surrogate"),
    ({**GOOD, "q": 5}, "q must be a string"),
    ({**GOOD, "q": ["abc", None]}, "q[1] must be a string"),
    ({**GOOD, "q": {"text": "abc"}}, "q must be a string"),
    ({**GOOD, "target": "fr"}, "fr is not supported"),  # LibreTranslate's words
    ({**GOOD, "source": "fr"}, "fr is not supported"),
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
    ({**GOOD, "format": "xml"}, "format 'xml' is not supported"),
    ({**GOOD, **{f"x{i}": 1 for i in range(30)}}, "the body has 33 fields; the limit is 32"),
]


@pytest.mark.parametrize("body, fragment", BAD_JSON, ids=[f for _, f in BAD_JSON])
def test_invalid_fields_are_400_with_a_message(app, body, fragment):
    sent = json.dumps(body)  # ASCII, as requests sends it: "\ud800" travels escaped
    error(app.post("/translate", content=sent, headers=JSON), 400, fragment)


RAW_BODIES = [
    (b'{"q": "abc", "source": "en"', "application/json", 400, "invalid JSON"),
    (b'["abc"]', "application/json", 400, "must be a JSON object, got list"),
    (b'{"q": "\xff\xfe"}', "application/json", 400, "invalid JSON"),
    (b"[" * 1999 + b"]" * 1999, "application/json", 400, "invalid JSON"),  # too deep
    (b"", "application/json", 400, "missing q parameter"),  # an empty body is no body
    (b"q=%ff&source=en&target=de", "application/x-www-form-urlencoded", 400, "invalid form"),
    (b"q=abc", "text/plain", 415, "unsupported Content-Type 'text/plain'"),
    (b"x" * 4001, "application/json", 413, "over 4,000 bytes"),
]


@pytest.mark.parametrize("body, kind, status, fragment", RAW_BODIES, ids=[r[3] for r in RAW_BODIES])
def test_malformed_bodies(app, body, kind, status, fragment):
    error(app.post("/translate", content=body, headers={"Content-Type": kind}), status, fragment)


def test_forms_may_repeat_fields_but_not_exceed_the_field_limit(app):
    # an extra field given three times and q given four times: 3 + 4 + 2 pairs, 4 fields
    form = "x=1&x=2&x=3&q=abc&q=abd&q=abe&q=abf&source=en&target=de"
    answer = app.post("/translate", content=form, headers=FORM)
    assert answer.status_code == 200 and len(answer.json()["translatedText"]) == 4, answer.text
    many = form + "".join(f"&y{i}=1" for i in range(29))  # 4 + 29 = 33 fields
    error(app.post("/translate", content=many, headers=FORM), 400, "the body has 33 fields")


def test_a_streamed_body_without_length_is_cut_at_the_limit(app):
    chunks = (b'{"q": "' + b"a" * 1000 for _ in range(10))  # chunked: no Content-Length
    response = app.post("/translate", content=chunks, headers=JSON)
    error(response, 413, "over 4,000 bytes")


def test_unknown_paths_and_methods_are_json_too(app):
    error(app.get("/nowhere"), 404, "Not Found")
    error(app.get("/translate"), 405, "Method Not Allowed")


def test_bad_input_leaves_the_server_answering(app):
    for body, _ in BAD_JSON:
        app.post("/translate", content=json.dumps(body), headers=JSON)
    ok(post(app, **GOOD))


# ---- batching ---------------------------------------------------------------------------------


def test_concurrent_requests_are_translated_in_fewer_batches(app, translator):
    n = 12
    texts = [f"sentence number {chr(97 + i)}" for i in range(n)]
    before = app.get("/ready").json()
    start = threading.Barrier(n)

    def send(text):
        start.wait()
        return post(app, q=text, source="en", target="de")

    with ThreadPoolExecutor(n) as pool:
        responses = list(pool.map(send, texts))
    after = app.get("/ready").json()
    expected = [t.text for t in translator.translate(texts, num_beams=1)]
    assert [ok(r)["translatedText"] for r in responses] == expected  # batching changes nothing
    assert after["requests"] - before["requests"] == n
    batches = after["batches"] - before["batches"]
    assert batches < n, f"{n} concurrent requests took {batches} batches"
    assert after["largest_batch"] > 1


# ---- limits of the whole server: saturation, timeouts, attention size -----------------------


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
def tight(model_dir):
    limits = ServerLimits(max_in_flight=1, request_timeout=0.5, max_attention_bytes=20000)
    with client(model_dir, limits) as test_client:
        yield test_client


def test_saturated_server_answers_503_and_slow_requests_504(tight):
    state = tight.app.state.heedful
    held = state.service = HeldService(state.service)
    try:
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(post, tight, **GOOD)
            assert held.started.wait(30), "the request never reached the worker"
            busy = post(tight, **GOOD)  # the held request is in flight until its 504
            error(busy, 503, "saturated: 1 requests in flight, the limit is 1")
            assert busy.headers["retry-after"] == "1"
            error(slow.result(), 504, "longer than 0.5 s")
        assert tight.get("/ready").json()["in_flight"] == 0
    finally:
        held.release.set()
        state.service = held.service
    ok(post(tight, **GOOD))  # the worker finishes the abandoned batch, then serves


def test_attention_over_its_size_limit_is_refused_before_decoding(tight):
    body = {**GOOD, "q": "abcdefghij" * 5, "return_attention": True}
    error(post(tight, **body), 400, "the limit is 20,000 (--max-attention-bytes)")


# ---- the other engine, the command, the layering ----------------------------------------------


def test_the_ctranslate2_engine_serves_the_text_without_attention(model_dir, translator, caplog):
    caplog.set_level(logging.INFO, logger="heedful.server")
    with client(model_dir, engine="ctranslate2") as ct2:
        texts = ["abc", "a longer sentence here", "hello world"]
        body = ok(post(ct2, q=texts, source="en", target="de"))
        assert body["translatedText"] == [t.text for t in translator.translate(texts, num_beams=1)]
        body = ok(post(ct2, q="hello there", source="en", target="de", alternatives=2))
        [expected] = translator.translate(["hello there"], num_beams=3, n_best=3)
        assert [body["translatedText"], *body["alternatives"]] == [
            expected.text,
            *(a.text for a in expected.alternatives),
        ]
        body = ok(post(ct2, q="abcdefghij", source="en", target="de", max_new_tokens=3))
        assert len(body["translatedText"]) == 3
        attention = post(ct2, q="abc", source="en", target="de", return_attention=True)
        error(attention, 400, "the ctranslate2 engine, which gives no attention weights")
    assert "(ctranslate2 engine)" in caplog.text, caplog.text


def test_the_command_refuses_bad_limits_and_directories(tmp_path, model_dir):
    from click.testing import CliRunner

    from heedful.cli import main

    result = CliRunner().invoke(main, ["serve", str(model_dir), "--max-chars", "0"])
    assert result.exit_code != 0 and "max_chars" in result.output
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "missing")])
    assert result.exit_code != 0 and "model directory not found" in result.output


def test_the_server_imports_neither_training_nor_matplotlib():
    code = (
        "import sys, heedful.server, heedful.inference.translator, heedful.visualize.trace; "
        "print(sorted(m for m in sys.modules if m == 'heedful.training.loop' or "
        "m.startswith('matplotlib')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_importing_the_server_loads_neither_torch_nor_fastapi():
    """`heedful serve --help` reads ServerLimits: that takes no torch and no serve extra."""
    code = "import sys, heedful.server; print(sorted({'torch', 'fastapi'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the web page -----------------------------------------------------------------------------


def test_the_page_is_offline(app):
    page = app.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for external in ("http://", "https://", "//cdn", "@import", "url("):
        assert external not in page.text, external
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:[a-z]+:)?//""", page.text, re.I)
    assert not re.search(r"<script[^>]*\bsrc=", page.text, re.I)
