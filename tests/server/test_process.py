"""heedful serve as users run it: `python -m heedful serve` in its own process, over TCP.

Only what needs a whole process stays here: SIGTERM with a request in flight, an unchanged
LibreTranslate client from PyPI and schemathesis fuzzing of /openapi.json; the web page and
the API docs in headless Chromium are in test_page.py. The rest of the API is tested in this
process (test_app.py; connections and hostile clients: test_hostile.py).
"""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import negative_data_rejection, positive_data_acceptance

from heedful.server import translate_request

from .helpers import LIMITS, Server, assert_clean_exit, flags, ok


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    running = Server(model_dir, tmp_path_factory.mktemp("logs") / "main.log", *flags(LIMITS))
    yield running
    assert_clean_exit(running, running.stop())
    assert "Traceback" not in running.output(), running.output()  # no request crashed anything


# ---- an existing client, unchanged ------------------------------------------------------------


def test_a_libretranslate_client_from_pypi_translates_through_the_server(server, translator):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    text = "hello from a client"
    assert client.translate(text, "en", "de") == translator.translate([text], num_beams=1)[0].text
    assert [language["code"] for language in client.languages()] == ["en", "de"]


# ---- fuzzing the OpenAPI schema ---------------------------------------------------------------


REJECTIONS = ["400", "404", "405", "406", "408", "413", "415", "422"]
FIELDS = translate_request(LIMITS, ("en", "de")).fields


def spelled_as_text(fields) -> bool:
    """Whether a query string's or form's fields hold a number or true/false that the server
    reads (schema.py's from_text: "1", "yes", "" or " 3") though JSON would spell it otherwise.
    Forms carry no types, and LibreTranslate's clients send text: the schema cannot say so."""
    for field in FIELDS:
        value, from_text = (fields or {}).get(field.name), getattr(field, "from_text", None)
        if isinstance(value, str) and from_text and from_text(value) is not value:
            if json.dumps(from_text(value)) != value:
                return True
    return False


@schemathesis.check
def rejected_unless_given_in_the_query(ctx, response, case):
    """schemathesis's negative_data_rejection, less what OpenAPI cannot describe: no body at
    all, with q, source and target in the query string (deep-translator's LibreTranslator
    sends that), which the server serves as LibreTranslate does (the schema must call the
    body required, or every positive request could lack q); and text that spells a number or
    true/false (spelled_as_text)."""
    given = set(case.query or {})
    no_body = not response.request.body  # as sent: a body that encodes to nothing is none
    if no_body and {"q", "source", "target"} <= given:
        return None
    if no_body and case.path.endswith("/detect") and "q" in given:
        return None
    form = case.media_type == "application/x-www-form-urlencoded" and isinstance(case.body, dict)
    if spelled_as_text(case.query) or (form and spelled_as_text(case.body)):
        return None
    return negative_data_rejection(ctx, response, case)


@schemathesis.check
def accepted_unless_the_prefix_outgrows_the_output(ctx, response, case):
    """schemathesis's positive_data_acceptance, less the refusals a schema cannot describe:
    a prefix of more tokens than the text's output limit (a function of the model and the
    text's length) is a 400 that names both (issue 15's bad input); one the model's target
    vocabulary cannot spell is a 400 naming its characters (issue 26, prefix.prefix_ids);
    search settings at odds with each other, each within its field's bounds, which are
    its setting's (config/search.py), are a 400 naming both as SearchSettings' check does
    ("field generation.<name> must ..."): a schema of fields says nothing of two together;
    and a head to switch off that the model lacks (mask_heads: the schema says how heads are
    written, the model which it has) is a 400 naming the head (issue 28)."""
    model_bound = (
        "more than the output",
        "which the target vocabulary lacks",
        "generation.",
        "attention has layers 1 to",
        "has heads 1 to",
    )
    if response.status_code == 400 and any(words in response.text for words in model_bound):
        return None
    return positive_data_acceptance(ctx, response, case)


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
            excluded_checks=[negative_data_rejection, positive_data_acceptance],
            additional_checks=[
                rejected_unless_given_in_the_query,
                accepted_unless_the_prefix_outgrows_the_output,
            ],
        )

    fuzz()
    assert server.process.poll() is None


# ---- SIGTERM: the request in flight finishes ---------------------------------------------------

# Slow enough to be caught in flight, quick enough to finish on a busy machine.
MEDIUM = {"q": ["abcdefghij" * 10] * 8, "source": "en", "target": "de", "num_beams": 4}


def wait_in_flight(server: Server, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while server.health()["in_flight"] < n:
        assert time.monotonic() < deadline, "the slow request never got in flight"
        time.sleep(0.02)


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
