"""heedful serve as users run it: `python -m heedful serve` in its own process, over TCP.

Only what needs a whole process stays here: SIGTERM with a request in flight, an unchanged
LibreTranslate client from PyPI, schemathesis fuzzing of /openapi.json, and the web page in
headless Chromium (screenshot in tests/artifacts/server-page.png). The rest of the API is
tested in this process (test_app.py; connections and hostile clients: test_hostile.py).
"""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import negative_data_rejection

from heedful.server import translate_request

from .helpers import LIMITS, Server, assert_clean_exit, flags, ok

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


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


# ---- the web page, in headless Chromium -------------------------------------------------------


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
