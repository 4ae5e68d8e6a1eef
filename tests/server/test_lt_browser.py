"""A web page on another origin calls the API with fetch(), as LibreTranslate's web clients do:
in headless Chromium (network off but 127.0.0.1), the page served from one port and
`heedful serve` on another. A JSON POST is not a "simple" request, so the browser first sends
a preflight OPTIONS; without CORS the fetch fails ("Failed to fetch")."""

from __future__ import annotations

import http.server
import threading

import pytest

from . import test_page
from .helpers import LIMITS, Server, assert_clean_exit, flags, free_port

chromium = test_page.chromium  # the fixture: headless Chromium, the network off but 127.0.0.1

PAGE = b"""<!doctype html><meta charset="utf-8"><title>another origin</title>
<script>
async function translate(api, body) {
  try {
    const answer = await fetch(api + "/translate", {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
    });
    return {status: answer.status, body: await answer.json()};
  } catch (error) {
    return {failed: String(error)};
  }
}
</script>"""

CALL = """const [api, body, done] = arguments;
translate(api, body).then(done);"""


@pytest.fixture(scope="module")
def page_url():
    """The page, served from its own port: an origin other than the API's."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args):
            pass

    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/"
    server.shutdown()
    thread.join(10)


def fetched(driver, page: str, api: str, body: dict) -> dict:
    driver.get(page)
    return driver.execute_async_script(CALL, api, body)


def test_a_page_on_another_origin_translates(model_dir, tmp_path, chromium, page_url, translator):
    running = Server(model_dir, tmp_path / "cors.log", *flags(LIMITS))
    try:
        body = {"q": "abc", "source": "en", "target": "de"}
        answer = fetched(chromium, page_url, running.url, body)
        expected = translator.translate(["abc"], num_beams=1)[0].text
        assert answer == {"status": 200, "body": {"translatedText": expected}}, answer
        refused = fetched(chromium, page_url, running.url, {"q": "abc", "source": "en"})
        assert refused["status"] == 400 and "target" in refused["body"]["error"]  # readable too
    finally:
        assert_clean_exit(running, running.stop())


def test_an_origin_not_allowed_cannot_read_the_api(model_dir, tmp_path, chromium, page_url):
    only = "--cors-origins", "http://elsewhere.example"
    running = Server(model_dir, tmp_path / "closed.log", *flags(LIMITS), *only)
    try:
        body = {"q": "abc", "source": "en", "target": "de"}
        answer = fetched(chromium, page_url, running.url, body)
        assert "Failed to fetch" in answer.get("failed", ""), answer
    finally:
        assert_clean_exit(running, running.stop())
