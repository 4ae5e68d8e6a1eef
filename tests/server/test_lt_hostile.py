"""Hostile inputs of LibreTranslate's routes beyond text (issue 29): format=html with broken,
huge, deeply nested or odd markup, and /translate_file with empty, huge, wrongly encoded,
binary and incomplete uploads. One table each: the input, the status, and what the answer
must hold. For a 200 of HTML the markup must come back as it went (the same tags, comments
and declarations, in order, and script contents untouched), parsed by the standard library's
parser, the one a browser's tokenizer is modelled on."""

from __future__ import annotations

from dataclasses import replace
from html.parser import HTMLParser

import pytest

from .helpers import GOOD, LIMITS, client, error, ok

# max_chars 20,000 for the deep and the many: body and file limits stay small
WIDE = replace(LIMITS, max_chars=20_000, max_body_bytes=100_000)
BIG = 2 * WIDE.max_body_bytes


@pytest.fixture(scope="module")
def app(model_dir):
    with client(model_dir, WIDE) as test_client:
        yield test_client


class _Structure(HTMLParser):
    """Every construct but text, in order: what translating must leave as it was."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.seen, self.raw = [], False

    def handle_starttag(self, tag, attrs):
        self.seen.append(("start", tag, tuple(attrs)))
        self.raw = tag in ("script", "style")

    def handle_endtag(self, tag):
        self.seen.append(("end", tag))
        self.raw = False

    def handle_startendtag(self, tag, attrs):
        self.seen.append(("empty", tag, tuple(attrs)))

    def handle_comment(self, data):
        self.seen.append(("comment", data))

    def handle_decl(self, decl):
        self.seen.append(("decl", decl))

    def handle_pi(self, data):
        self.seen.append(("pi", data))

    def unknown_decl(self, data):
        self.seen.append(("unknown", data))

    def handle_data(self, data):
        if self.raw:
            self.seen.append(("raw", data))


def structure(text: str) -> list:
    parser = _Structure()
    parser.feed(text)
    parser.close()
    return parser.seen


# (id, q, status, what the answer holds: a fragment of the error, or of the translation)
HTML_ROWS = [
    ("unclosed-tags", "<div><p><b>abc", 200, "<div><p><b>"),
    ("stray-angle-brackets", "a < b > c", 200, ""),  # one text node, "<" its text
    ("entities", "&amp;&lt;b&gt; &#x41; &#99999999; &#xD800; &bogus;", 200, ""),
    ("unclosed-comment", "<p>ab</p><!-- abc", 200, "<p>"),
    ("unclosed-script", "<script>var a = '<p>abc</p>'", 200, "<script>var a = '<p>abc</p>'"),
    ("script-and-style-only", "<script>a<b</script><style>p>b{}</style>", 200,
     "<script>a<b</script><style>p>b{}</style>"),
    ("textarea-kept", "<textarea>abc</textarea>", 200, "<textarea>abc</textarea>"),
    ("attributes-kept", '<img alt="abc" src=\'x.png\'><a href="?a=1&amp;b=2">c</a>', 200,
     '<img alt="abc" src=\'x.png\'><a href="?a=1&amp;b=2">'),
    ("doctype-cdata-pi", "<!DOCTYPE html><![CDATA[ a<b ]]><?php x ?>abc", 200, "<!DOCTYPE html>"),
    ("deep-nesting", "<i>" * 2400 + "abc" + "</i>" * 2400, 200, "<i><i><i>"),
    ("many-text-nodes", "<b>ab</b>" * 300, 200, "</b><b>"),
    ("tag-soup", "<p<b>>a</p/ ></ b>< /i><a =b>c", 200, ""),
    ("uppercase-and-odd-tags", "<P><B>ab</b></p><x-y:z>cd</x-y:z>", 200, "<P><B>"),
    ("only-whitespace-and-entities", "<p> &nbsp; \n</p>", 200, "<p> &nbsp; \n</p>"),
    ("empty-elements-only", "<br><hr/><p></p>", 200, "<br><hr/><p></p>"),
    ("over-max-chars", "<p>" + "a" * 20_000 + "</p>", 400, "the limit is 20000 (--max-chars)"),
    ("nul", "<p>a\x00b</p>", 400, "NUL"),
    ("blank", " \n ", 400, "q is empty"),
]  # fmt: skip


@pytest.mark.parametrize("q, status, fragment", [r[1:] for r in HTML_ROWS],
                         ids=[r[0] for r in HTML_ROWS])  # fmt: skip
def test_hostile_html(app, q, status, fragment):
    answer = app.post("/translate", json={**GOOD, "q": q, "format": "html"})
    if status != 200:
        error(answer, status, fragment)
        return
    text = ok(answer)["translatedText"]
    assert fragment in text
    assert structure(text) == structure(q)


HTML_REFUSED = [
    ("return-attention-not-boolean", {"return_attention": "x"}, "must be true or false"),
    ("prefix-with-nul", {"prefix": "a\x00"}, "prefix holds NUL"),
    ("format-list", {"format": ["html"]}, "format"),
    ("format-unknown", {"format": "markdown"}, "not supported; use 'text' or 'html'"),
]


@pytest.mark.parametrize("extra, fragment", [r[1:] for r in HTML_REFUSED],
                         ids=[r[0] for r in HTML_REFUSED])  # fmt: skip
def test_what_html_refuses(app, extra, fragment):
    answer = app.post("/translate", json={**GOOD, "q": "<b>ab</b>", "format": "html", **extra})
    error(answer, 400, fragment)


def test_what_is_of_one_text_is_ignored_with_html(app, translator):
    """return_attention and prefix are of one text, not of a document: with format html they
    are ignored (checked all the same), as LibreTranslate ignores alternatives there."""
    html = {**GOOD, "q": "<b>ab</b>", "format": "html"}
    plain = ok(app.post("/translate", json=html))
    assert ok(app.post("/translate", json={**html, "return_attention": True})) == plain
    assert ok(app.post("/translate", json={**html, "prefix": "zz"})) == plain


def test_a_list_of_hostile_html_lines_up(app):
    texts = ["", "<p>", "a<b", "<script>x</script>"]
    answer = ok(app.post("/translate", json={**GOOD, "q": texts, "format": "html"}))
    assert len(answer["translatedText"]) == 4 and answer["translatedText"][0] == ""
    assert answer["translatedText"][3] == "<script>x</script>"


# ---- /translate_file ---------------------------------------------------------------------------

PAIR = {"source": "en", "target": "de"}
# (id, files, form fields, status, fragment of the error or of the downloaded file)
FILE_ROWS = [
    ("empty-file", {"file": ("a.txt", b"")}, PAIR, 200, ""),
    ("whitespace-only", {"file": ("a.txt", b" \n\t\n")}, PAIR, 200, " \n\t\n"),
    ("crlf-kept", {"file": ("a.txt", b"ab\r\ncd\r\n")}, PAIR, 200, "\r\n"),
    ("utf8-bom-kept", {"file": ("a.txt", b"\xef\xbb\xbfab")}, PAIR, 200, "\ufeff"),
    ("html-script-kept", {"file": ("a.html", b"<p>ab</p><script>x</script>")}, PAIR, 200,
     "<script>x</script>"),
    ("htm-extension", {"file": ("A.HTM", b"<b>ab</b>")}, PAIR, 200, "<b>"),
    ("path-in-name", {"file": ("../../etc/x.txt", b"ab")}, PAIR, 200, ""),
    ("huge-body", {"file": ("a.txt", b"ab\n" * (BIG // 3))}, PAIR, 413, "--max-body-bytes"),
    ("too-many-characters", {"file": ("a.txt", b"ab\n" * 30_000)}, PAIR, 400,
     "(--max-items × --max-chars)"),
    ("line-too-long", {"file": ("a.txt", b"ab\n" + b"a" * 20_001)}, PAIR, 400,
     "line 2: 20,001 characters"),
    ("html-line-too-long", {"file": ("a.html", b"<p>\n\n" + b"a" * 20_001 + b"</p>")}, PAIR, 400,
     "line 3: 20,001 characters"),
    ("latin-1", {"file": ("a.txt", "café au lait".encode("latin-1"))}, PAIR, 400,
     "not UTF-8 text (invalid continuation byte at byte 3)"),
    ("utf-16", {"file": ("a.txt", "ab".encode("utf-16"))}, PAIR, 400, "not UTF-8 text"),
    ("png-bytes", {"file": ("a.txt", b"\x89PNG\r\n\x1a\n\x00\x00")}, PAIR, 400, "not UTF-8"),
    ("nul-bytes", {"file": ("a.txt", b"ab\x00\x01cd")}, PAIR, 400, "holds NUL at character 2"),
    ("pdf-extension", {"file": ("a.pdf", b"%PDF-1.4")}, PAIR, 400, "file format not supported"),
    ("no-extension", {"file": ("README", b"ab")}, PAIR, 400, "file format not supported"),
    ("two-files", {"file": ("a.txt", b"ab"), "other": ("b.txt", b"cd")}, PAIR, 400,
     "invalid form"),
    ("file-as-text-field", {}, {**PAIR, "file": "ab"}, 400, "missing file parameter"),
    ("no-file", {}, PAIR, 400, "missing file parameter"),
    ("no-source", {"file": ("a.txt", b"ab")}, {"target": "de"}, 400,
     "Invalid request: missing source parameter"),
    ("no-target", {"file": ("a.txt", b"ab")}, {"source": "en"}, 400,
     "Invalid request: missing target parameter"),
    ("empty-target", {"file": ("a.txt", b"ab")}, {"source": "en", "target": ""}, 400,
     "missing target parameter"),
    ("unsupported-target", {"file": ("a.txt", b"ab")}, {"source": "en", "target": "zz"}, 400,
     "zz is not supported"),
    ("source-auto", {"file": ("a.txt", b"ab")}, {"source": "auto", "target": "de"}, 200, ""),
]  # fmt: skip


@pytest.mark.parametrize("files, fields, status, fragment", [r[1:] for r in FILE_ROWS],
                         ids=[r[0] for r in FILE_ROWS])  # fmt: skip
def test_hostile_files(app, files, fields, status, fragment):
    answer = app.post("/translate_file", data=fields, files=files or None)
    if status != 200:
        error(answer, status, fragment)
        return
    downloaded = app.get(ok(answer)["translatedFileUrl"])
    assert downloaded.status_code == 200
    assert fragment in downloaded.content.decode("utf-8")
    name = downloaded.headers["content-disposition"].split('filename="')[1].rstrip('"')
    assert "/" not in name and ".." not in name


BODY_ROWS = [
    ("json-body", {"json": {"file": "ab", **PAIR}}, 400, "missing file parameter"),
    ("no-body", {}, 400, "missing file parameter"),
    ("broken-multipart", {"content": b"--x\r\nbroken", "headers": {
        "content-type": "multipart/form-data; boundary=x"}}, 400, ""),
]  # fmt: skip


@pytest.mark.parametrize("request_options, status, fragment", [r[1:] for r in BODY_ROWS],
                         ids=[r[0] for r in BODY_ROWS])  # fmt: skip
def test_hostile_upload_bodies(app, request_options, status, fragment):
    error(app.post("/translate_file", **request_options), status, fragment)


DOWNLOAD_ROWS = [
    ("unknown", "nothing", "it expired or never was"),
    ("long", "a" * 500, "it expired or never was"),
    ("nul", "%00", "it expired or never was"),
    ("traversal", "..%2F..%2Fetc%2Fpasswd", "Not Found"),  # a path of its own: no route has it
]
# the tests beside the tables: what html ignores, a list of hostile html
EXTRA = 2


@pytest.mark.parametrize("key, fragment", [r[1:] for r in DOWNLOAD_ROWS],
                         ids=[r[0] for r in DOWNLOAD_ROWS])  # fmt: skip
def test_hostile_download_keys(app, key, fragment):
    error(app.get("/download_file/" + key), 404, fragment)
