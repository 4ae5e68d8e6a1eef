"""LibreTranslate's contract beyond /translate's text (issue 29, part 1): CORS and preflight,
format=html, detectedLanguage with source auto, blank texts in a batch, alternatives as text,
/spec, /frontend/settings, /suggest, /translate_file and /download_file, /health as
LibreTranslate answers it; in this process (TestClient). The hostile inputs of the new routes
are in test_lt_hostile.py, the browser on another origin in test_lt_browser.py, and
LibreTranslate's own API tests run against `heedful serve` in .ci/libretranslate."""

from __future__ import annotations

import random
import re
from dataclasses import replace

import pytest

from heedful.server import ApiError, ServerLimits

from .helpers import GOOD, LIMITS, client, error, ok

ORIGIN = "http://pages.example:8080"
WIDE = replace(LIMITS, max_chars=400)  # room for a little HTML
PREFLIGHT = {
    "Origin": ORIGIN,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type",
}


@pytest.fixture(scope="module")
def app(model_dir):
    with client(model_dir, WIDE) as test_client:
        yield test_client


def translated(translator, text: str) -> str:
    """What /translate answers for one text: the model's greedy output (generation.json)."""
    return translator.translate([text], num_beams=1)[0].text


# ---- CORS ----------------------------------------------------------------------------------


def test_a_preflight_is_answered_for_any_origin_by_default(app):
    answer = app.options("/translate", headers=PREFLIGHT)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == "*"
    assert "POST" in answer.headers["access-control-allow-methods"]
    assert "content-type" in answer.headers["access-control-allow-headers"].lower()


CORS_CALLS = [
    ("POST", "/translate", GOOD),
    ("POST", "/detect", {"q": "abc"}),
    ("GET", "/languages", None),
    ("POST", "/translate", {"q": "abc"}),
]


@pytest.mark.parametrize(
    "method, path, body", CORS_CALLS, ids=["translate", "detect", "languages", "error"]
)
def test_answers_carry_the_cors_header(app, method, path, body):
    answer = app.request(method, path, json=body, headers={"Origin": ORIGIN})
    assert answer.headers["access-control-allow-origin"] == "*", answer.headers


def test_cors_origins_restricts_the_origins(model_dir):
    limits = ServerLimits(max_chars=50, cors_origins=f"{ORIGIN}, http://other.example")
    with client(model_dir, limits) as restricted:
        allowed = restricted.post("/translate", json=GOOD, headers={"Origin": ORIGIN})
        assert allowed.headers["access-control-allow-origin"] == ORIGIN
        elsewhere = restricted.post("/translate", json=GOOD, headers={"Origin": "http://evil.test"})
        assert "access-control-allow-origin" not in elsewhere.headers
        refused = restricted.options("/translate", headers={**PREFLIGHT, "Origin": "http://x.y"})
        assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers


def test_cors_origins_empty_sends_no_cors_headers(model_dir):
    with client(model_dir, ServerLimits(max_chars=50, cors_origins="")) as closed:
        assert closed.options("/translate", headers=PREFLIGHT).status_code == 405
        answer = closed.post("/translate", json=GOOD, headers={"Origin": ORIGIN})
        assert "access-control-allow-origin" not in answer.headers


@pytest.mark.parametrize("origins", ["pages.example", "http://a.example/path", "HTTP://A", "*, x"])
def test_a_wrong_origin_fails_at_start_naming_it(origins):
    with pytest.raises(ValueError, match="ServerLimits.cors_origins: .* is not an origin"):
        ServerLimits(cors_origins=origins)


# ---- format=html ---------------------------------------------------------------------------


def test_html_translates_the_text_nodes_and_keeps_the_markup(app, translator):
    q = '<p class="x">abc <b>de</b></p>\n<script>var a = "<i>abc</i>";</script><style>b{}</style>'
    answer = ok(app.post("/translate", json={**GOOD, "q": q, "format": "html"}))
    abc, de = translated(translator, "abc"), translated(translator, "de")
    expected = f'<p class="x">{abc} <b>{de}</b></p>\n<script>var a = "<i>abc</i>";</script>'
    assert answer == {"translatedText": expected + "<style>b{}</style>"}


def test_html_in_a_list_and_from_a_form(app, translator):
    texts = ["<i>ab</i>", "", "cd"]
    answer = ok(app.post("/translate", json={**GOOD, "q": texts, "format": "html"}))
    ab, cd = translated(translator, "ab"), translated(translator, "cd")
    assert answer["translatedText"] == [f"<i>{ab}</i>", "", cd]
    form = ok(app.post("/translate", data={**GOOD, "q": "<u>ab</u>", "format": "html"}))
    assert form["translatedText"] == f"<u>{ab}</u>"


def test_html_gives_no_alternatives_as_libretranslate(app):
    html = {**GOOD, "q": "<b>ab</b>", "format": "html", "alternatives": 2}
    answer = ok(app.post("/translate", json=html))
    assert answer["alternatives"] == []


def test_a_translation_is_escaped_in_html():
    from heedful.server.documents import markup

    doc = markup("<p>a &amp; b</p>")
    assert [s.text for s in doc.slots] == ["a & b"]  # the model reads the text, decoded
    assert doc.fill(["<x> & y"]) == "<p>&lt;x&gt; &amp; y</p>"


def test_markup_is_kept_byte_for_byte_on_any_input():
    """Whatever the input, an identity 'translation' gives back every construct as written;
    only a text node's spelling of its characters (entities) may change."""
    from heedful.server.documents import Slot, markup

    rng = random.Random(0)
    alphabet = ["<", ">", "/", "a", "b", " ", "&", ";", "p", "=", '"', "!", "-", "\n", "script"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        doc = markup(text)
        kept = [p for p in doc.parts if isinstance(p, str)]
        assert all(part in text for part in kept), (text, doc.parts)
        assert all(isinstance(p, Slot) and p.text.strip() == p.text for p in doc.slots)
        again = markup(doc.fill([slot.text for slot in doc.slots]))
        assert [s.text for s in again.slots] == [s.text for s in doc.slots], text


# ---- detectedLanguage, blank texts, alternatives as text --------------------------------------


def test_source_auto_answers_the_detected_language(app):
    found = {"confidence": 100.0, "language": "en"}
    one = ok(app.post("/translate", json={**GOOD, "source": "auto"}))
    assert one["detectedLanguage"] == found
    listed = ok(app.post("/translate", json={**GOOD, "q": ["abc", "de"], "source": "auto"}))
    assert listed["detectedLanguage"] == [found, found]
    assert "detectedLanguage" not in ok(app.post("/translate", json=GOOD))


def test_blank_texts_in_a_list_are_answered_as_they_came(app, translator):
    answer = ok(app.post("/translate", json={**GOOD, "q": ["abc", "", "  ", "\x1e"]}))
    assert answer["translatedText"] == [translated(translator, "abc"), "", "  ", "\x1e"]
    before = ok(app.get("/ready"))["batches"]
    assert ok(app.post("/translate", json={**GOOD, "q": ["", " "]}))["translatedText"] == ["", " "]
    assert ok(app.get("/ready"))["batches"] == before  # nothing to translate: no batch


def test_a_form_cannot_send_a_blank_text_in_a_list(app):
    """In a form, q=a is a list of one text as much as the text itself, and q alone must not
    be blank: so neither may a form list's texts (the schema of a form says so too)."""
    answer = app.post("/translate", data={**GOOD, "q": ["abc", ""]})
    error(answer, 400, "q[1] is empty: there is nothing to translate (a list with a blank")
    spec = ok(app.get("/openapi.json"))["paths"]["/translate"]["post"]["requestBody"]["content"]

    def list_item(media_type: str) -> dict:
        return spec[media_type]["schema"]["properties"]["q"]["anyOf"][1]["items"]

    assert re.match(list_item("application/json")["pattern"], "")
    assert not re.match(list_item("application/x-www-form-urlencoded")["pattern"], "")


def test_alternatives_and_blank_texts_line_up(app):
    answer = ok(app.post("/translate", json={**GOOD, "q": ["abc", ""], "alternatives": 1}))
    assert len(answer["alternatives"][0]) == 1 and answer["alternatives"][1] == []


def test_a_blank_text_has_no_attention_trace(app):
    body = {**GOOD, "q": ["abc", ""], "return_attention": True}
    traces = ok(app.post("/translate", json=body))["attention"]
    assert traces[0]["format"] == "heedful-trace" and traces[1] is None


def test_alternatives_may_be_given_as_text(app):
    as_number = ok(app.post("/translate", json={**GOOD, "alternatives": 2}))
    assert ok(app.post("/translate", json={**GOOD, "alternatives": "2"})) == as_number
    error(app.post("/translate", json={**GOOD, "alternatives": "two"}), 400, "alternatives")
    error(app.post("/translate", json={**GOOD, "alternatives": "9"}), 400, "over the limit")


def test_the_schema_says_alternatives_may_be_text(app):
    spec = ok(app.get("/openapi.json"))["paths"]["/translate"]["post"]["requestBody"]
    alternatives = spec["content"]["application/json"]["schema"]["properties"]["alternatives"]
    assert {"type": "string", "pattern": "^[0-3]$"} in alternatives["anyOf"]


# ---- LibreTranslate's answers: errors, /health, /spec, /frontend/settings, /suggest -----------


def test_errors_in_libretranslates_words(app):
    error(app.post("/translate", json={**GOOD, "target": "zz"}), 400, "zz is not supported")
    assert app.post("/translate", json={"source": "en", "target": "de"}).json() == {
        "error": "Invalid request: missing q parameter"
    }


def test_health_is_libretranslates_and_the_counters_are_at_ready(app):
    assert ok(app.get("/health")) == {"status": "ok"}
    assert app.post("/health").status_code == 405
    ready = ok(app.get("/ready"))
    assert ready["status"] == "ready" and {"in_flight", "requests", "batches"} <= set(ready)


def test_spec_serves_the_openapi_document(app):
    assert ok(app.get("/spec")) == ok(app.get("/openapi.json"))
    for path in ("/spec", "/frontend/settings"):  # HEAD wherever GET
        assert app.head(path).status_code == 200
    assert app.post("/spec").status_code == 405


def test_frontend_settings_has_the_fields_libretranslates_page_reads(app):
    settings = ok(app.get("/frontend/settings"))
    assert settings["charLimit"] == WIDE.max_chars
    assert settings["suggestions"] is False and settings["filesTranslation"] is True
    assert settings["supportedFilesFormat"] == [".txt", ".html", ".htm"]
    assert settings["language"] == {
        "source": {"code": "en", "name": "English"},
        "target": {"code": "de", "name": "German"},
    }
    assert isinstance(settings["frontendTimeout"], int) and settings["apiKeys"] is False


def test_suggest_answers_that_suggestions_are_off(app):
    answer = app.post("/suggest", json={"q": "a", "s": "b", "source": "en", "target": "de"})
    assert answer.status_code == 403
    assert answer.json() == {"error": "Suggestions are disabled on this server."}


# ---- /translate_file and /download_file -------------------------------------------------------


def upload(app, name: str, data: bytes, **fields):
    fields = {"source": "en", "target": "de", **fields}
    return app.post("/translate_file", data=fields, files={"file": (name, data)})


def download(app, answer):
    url = ok(answer)["translatedFileUrl"]
    assert url.startswith("http://testserver/download_file/"), url
    return app.get(url)


def test_a_text_file_is_translated_line_by_line(app, translator):
    answer = download(app, upload(app, "notes.txt", b"abc\r\n\n  de \nfg"))
    assert answer.status_code == 200
    abc, de, fg = (translated(translator, t) for t in ("abc", "de", "fg"))
    assert answer.content.decode() == f"{abc}\r\n\n  {de} \n{fg}"
    assert answer.headers["content-disposition"] == 'attachment; filename="notes.txt"'
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"


def test_an_html_file_is_translated_by_its_text_nodes(app, translator):
    page = b"<html><body><p>abc</p><script>x<y</script></body></html>"
    answer = download(app, upload(app, "page.html", page))
    abc = translated(translator, "abc")
    assert answer.content.decode() == f"<html><body><p>{abc}</p><script>x<y</script></body></html>"
    assert answer.headers["content-type"] == "text/html; charset=utf-8"


def test_a_translated_file_downloads_twice_and_a_wrong_key_is_404(app):
    answer = upload(app, "a.txt", b"abc")
    first, second = download(app, answer), download(app, answer)
    assert first.content == second.content
    error(app.get("/download_file/nothing.txt"), 404, "expired or never was")


def test_the_file_store_stays_within_its_bounds():
    from heedful.server.files import FileStore

    now = [0.0]
    store = FileStore(max_files=2, max_bytes=10, max_age=60, clock=lambda: now[0])
    a = store.put("a.txt", b"aaaa", "text/plain")
    b = store.put("b.txt", b"bbbb", "text/plain")
    c = store.put("c.txt", b"cccc", "text/plain")  # a third file: the oldest goes
    with pytest.raises(ApiError, match="expired or never was"):
        store.get(a)
    assert store.get(b).data == b"bbbb" and store.size == 8
    d = store.put("d.txt", b"dddddd", "text/plain")  # 14 bytes would be over 10: b goes
    assert store.size == 10 and list(store.files) == [c, d]
    now[0] = 61.0
    with pytest.raises(ApiError, match="kept 60 s"):
        store.get(c)
    assert store.files == {} and store.size == 0
    with pytest.raises(ApiError) as too_big:
        store.put("e.txt", b"e" * 11, "text/plain")
    assert too_big.value.status == 413


def test_a_file_name_is_made_safe():
    from heedful.server.files import safe_name

    assert safe_name("../../etc/passwd.txt") == "passwd.txt"
    assert safe_name('a "b"\r\n.txt') == "a__b___.txt"
    assert safe_name("C:\\dir\\..\\x.html") == "x.html"
    assert safe_name("...") == "file"


def test_the_pattern_of_a_number_as_text_spells_exactly_the_range():
    from heedful.server.fields import _digits

    for maximum in (0, 3, 9, 10, 19, 99, 100, 205, 999, 1000, 3456):
        pattern = re.compile(_digits(maximum))
        assert [n for n in range(5000) if pattern.match(str(n))] == list(range(maximum + 1))
        assert not any(pattern.match(t) for t in ("00", "01", " 1", "+1", "-1", "1.0", ""))
