"""POST /caption (server/images.py): a served image model captions an uploaded picture, the
same caption as Translator.translate gives for that file, with its attention over the grid when
asked; every hostile upload is a 4xx naming the field, never a crash, nothing logged at ERROR.
docs/hostile-inputs.md counts HOSTILE."""

from __future__ import annotations

import base64
import logging
import threading
import time

import numpy as np
import pytest
import requests
from data.test_hostile_images import (
    cmyk_jpeg,
    encoded,
    png_claiming,
    sixteen_bit_transparent,
    strip,
)
from image_models import image_model_dir, picture
from memory import memory_cap
from PIL import Image

from heedful.data.images import ImageError
from heedful.inference.translator import Translator
from heedful.server import ServerLimits

from .helpers import InProcessServer, client, error, ok
from .test_hostile import wait_until

LIMITS = ServerLimits(max_body_bytes=200_000, max_num_beams=4)
PNG = encoded(Image.fromarray(picture(seed=5)))
JPEG = encoded(Image.fromarray(picture(seed=6)), "JPEG", quality=90)


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    return image_model_dir(tmp_path_factory.mktemp("image-server") / "model", "vit")


@pytest.fixture(scope="module")
def served(image_dir):
    with client(image_dir, LIMITS) as test_client:
        yield test_client


def upload(data: bytes, name: str = "picture.png", **fields):
    return {"files": {"file": (name, data, "application/octet-stream")}, "data": fields}


def as_json(data: bytes, **fields):
    return {"json": {"image": base64.b64encode(data).decode("ascii"), **fields}}


@pytest.mark.parametrize("send", [upload, as_json], ids=["multipart", "json"])
@pytest.mark.parametrize("data", [PNG, JPEG], ids=["png", "jpeg"])
def test_a_good_picture_gets_the_captioners_caption(served, image_dir, tmp_path, send, data):
    path = tmp_path / "picture"
    path.write_bytes(data)
    [expected] = Translator.load(image_dir).translate([path], need_weights=True)
    flag = "true" if send is upload else True  # a form spells it as text
    answer = ok(served.post("/caption", **send(data, attention=flag)))
    assert answer["caption"] == expected.text and answer["tokens"] == expected.tokens
    assert answer["grid"] == [4, 4] and answer["score"] == pytest.approx(expected.score, abs=1e-4)
    np.testing.assert_allclose(answer["attention"], expected.attention_grid(), atol=1e-5)
    assert "attention" not in ok(served.post("/caption", **send(data)))  # only when asked


def test_a_beam_search_caption(served, image_dir, tmp_path):
    path = tmp_path / "picture.png"
    path.write_bytes(PNG)
    [expected] = Translator.load(image_dir).translate([path], num_beams=3)
    answer = ok(served.post("/caption", **upload(PNG, num_beams="3")))
    assert answer["caption"] == expected.text


def mode(image_mode: str, colour, size=(7, 5), fmt="PNG") -> bytes:
    return encoded(Image.new(image_mode, size, colour), fmt)


GOOD = [
    pytest.param(mode("RGB", (1, 2, 3), (1, 1)), id="one-pixel"),
    pytest.param(mode("L", 90), id="grayscale"),
    pytest.param(mode("RGBA", (200, 10, 10, 128)), id="rgba"),
    pytest.param(cmyk_jpeg(), id="cmyk-jpeg"),
    pytest.param(mode("I;16", 40_000), id="sixteen-bit-png"),
    pytest.param(sixteen_bit_transparent(), id="sixteen-bit-grey-transparency"),
    pytest.param(strip(1, 100), id="strip-at-the-aspect-limit"),
]


@pytest.mark.parametrize("data", GOOD)
def test_other_modes_and_sizes_are_converted(served, data):
    assert ok(served.post("/caption", **upload(data)))["grid"] == [4, 4]


def raw(body: bytes, content_type: str):
    return lambda: {"content": body, "headers": {"Content-Type": content_type}}


def sent(make, *args, **fields):
    return lambda: make(*args, **fields)


HOSTILE = [
    ("row0-empty-file", sent(upload, b""), 400, "the picture is empty"),
    ("row0-empty-json-image", sent(as_json, b""), 400, "the picture is empty"),
    ("row0-empty-body", raw(b"", "application/json"), 400, "empty body"),
    ("row0-not-an-image", sent(upload, b"hello, I am text"), 400, "field file: not an image"),
    ("row0-wrong-encoding-utf16", sent(upload, "text".encode("utf-16")), 400, "not an image"),
    ("row0-truncated-png", sent(upload, PNG[: len(PNG) // 2]), 400, "field file: damaged image"),
    ("row0-truncated-jpeg", sent(upload, JPEG[: len(JPEG) // 2]), 400, "damaged image"),
    ("row0-decompression-bomb-20000x20000", sent(upload, png_claiming(20_000, 20_000)), 400,
     "refused before decoding"),
    ("row0-huge-under-the-upload-limit", sent(upload, png_claiming(5000, 4000)), 400,
     "16,000,000"),
    ("row2-elongated-1x400000", sent(upload, strip(1, 400_000)), 400,
     "field file: 1 × 400,000 pixels has an aspect ratio of 400,000:1"),
    ("row2-elongated-2000000x1", sent(as_json, strip(2_000_000, 1)), 400,
     "field image: 2,000,000 × 1 pixels has an aspect ratio"),
    ("row0-too-many-bytes", sent(upload, b"\x89PNG" + bytes(300_000)), 413, "--max-body-bytes"),
    ("row0-json-image-not-base64", lambda: {"json": {"image": "not base64!"}}, 400,
     "field image is not valid base64"),
    ("row0-json-image-wrong-type", lambda: {"json": {"image": 12}}, 400,
     "field image must be base64 text"),
    ("json-truncated", raw(b'{"image": "iVBOR', "application/json"), 400, "invalid JSON"),
    ("json-not-object", raw(b"[1]", "application/json"), 400, "must be a JSON object"),
    ("json-missing-image", lambda: {"json": {"attention": True}}, 400, "missing field image"),
    ("form-missing-file", lambda: {"files": {"attention": (None, "true")}}, 400,
     "missing field file"),
    ("form-file-in-another-field", lambda: {"files": {"picture": ("a.png", PNG)}}, 400,
     "form field file"),
    ("form-two-files", lambda: {"files": [("file", ("a.png", PNG)), ("file", ("b.png", PNG))]},
     400, "invalid form"),
    ("unknown-field", sent(upload, PNG, colour="red"), 400, "unknown field 'colour'"),
    ("attention-not-a-flag", sent(upload, PNG, attention="maybe"), 400,
     'attention must be true or false, got "maybe"'),
    ("num-beams-zero", sent(upload, PNG, num_beams="0"), 400, "num_beams"),
    ("num-beams-over-the-limit", sent(as_json, PNG, num_beams=5), 400, "--max-num-beams"),
    ("num-beams-text", sent(as_json, PNG, num_beams="two"), 400, "num_beams"),
    ("json-num-beams-spelled-as-text", sent(as_json, PNG, num_beams="2"), 400, "num_beams"),
    ("json-attention-spelled-as-text", sent(as_json, PNG, attention="true"), 400,
     'attention must be true or false, got "true"'),
    ("row0-wrong-content-type", raw(PNG, "image/png"), 415, "multipart/form-data"),
    ("charset-not-utf8", raw(b"{}", "application/json; charset=latin-1"), 415, "charset"),
]  # fmt: skip


@pytest.mark.parametrize(
    "make, status, fragment", [pytest.param(*case[1:], id=case[0]) for case in HOSTILE]
)
def test_a_hostile_upload_is_refused_by_name(served, caplog, make, status, fragment):
    with caplog.at_level(logging.INFO):
        response = served.post("/caption", **make())
    error(response, status, fragment)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert ok(served.post("/caption", **upload(PNG)))["grid"] == [4, 4]  # and it still serves


def test_the_openapi_schema_describes_caption(served):
    operation = served.get("/openapi.json").json()["paths"]["/caption"]["post"]
    content = operation["requestBody"]["content"]
    assert content["multipart/form-data"]["schema"]["required"] == ["file"]
    assert content["application/json"]["schema"]["required"] == ["image"]
    assert {"200", "400", "413", "415", "503"} <= operation["responses"].keys()
    # the options' schemas are /translate's declarations: one reading of both routes
    translate = served.get("/openapi.json").json()["paths"]["/translate"]["post"]
    declared = translate["requestBody"]["content"]["application/json"]["schema"]["properties"]
    for media in ("multipart/form-data", "application/json"):
        options = content[media]["schema"]["properties"]
        assert options["num_beams"]["maximum"] == declared["num_beams"]["maximum"] == 4
        assert options["attention"]["type"] == declared["return_attention"]["type"] == "boolean"


@pytest.mark.parametrize(
    "word, attention", [("on", True), ("YES", True), ("off", False), ("", False)]
)
def test_a_forms_booleans_read_as_translates_do(served, word, attention):
    """/caption once read a form's true/1/yes/false/0/no only, /translate also on/off and an
    empty value: both read them with fields.Boolean now."""
    answer = ok(served.post("/caption", **upload(PNG, attention=word)))
    assert ("attention" in answer) is attention
    body = {"q": "a", "source": "image", "target": "en", "return_attention": word}
    flag = served.post("/translate", data=body)  # the same word read the same way there
    error(flag, 400, "image captioning model")  # (past the field checks: a text route)


def test_a_text_model_has_no_caption_route(model_dir):
    """The server's text model (conftest.py): no /caption in its schema, 404 for a picture."""
    with client(model_dir) as text_client:
        assert "/caption" not in text_client.get("/openapi.json").json()["paths"]
        error(text_client.post("/caption", **upload(PNG)), 404, "Not Found")


def test_text_sent_to_an_image_model_is_a_400_naming_caption(served, caplog):
    with caplog.at_level(logging.INFO):
        response = served.post("/translate", json={"q": "a cat", "source": "image", "target": "en"})
    error(response, 400, "image captioning model: POST a picture to /caption")
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def json_violations_rejected(ctx, response, case):
    """schemathesis's negative_data_rejection for JSON bodies. A form carries text and files
    only: a field generated as an array or a number may encode to nothing, or to text the
    server reads by its own rules (true, 1, yes), which a schema cannot describe."""
    from schemathesis.checks import negative_data_rejection

    if case.media_type == "multipart/form-data":
        return None
    return negative_data_rejection(ctx, response, case)


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_fuzzing_caption_from_its_schema_finds_no_server_error(image_dir, mode):
    """Uploads generated from /openapi.json's /caption (random bytes for a picture, fields of
    every type): never a 5xx, every answer's status, content type and body as the schema
    declares, and a JSON body that breaks the schema refused. A valid request may still be
    refused (bytes that are no picture), which a schema cannot say."""
    import requests
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    from .helpers import InProcessServer
    from .test_process import REJECTIONS

    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance]  # fmt: skip
    if mode == "negative":
        checks.append(json_violations_rejected)  # not registered: test_process.py uses them all
    server = InProcessServer(image_dir, LIMITS)
    try:
        config = schemathesis.config.SchemathesisConfig.from_dict(
            {"checks": {"negative_data_rejection": {"expected-statuses": REJECTIONS}}}
        )
        api = schemathesis.openapi.from_url(server.url + "/openapi.json", config=config)
        operation = api["/caption"]["POST"]
        session = requests.Session()

        @given(case=operation.as_strategy(GenerationMode(mode)))
        @settings(max_examples=25, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def fuzz(case):
            case.call_and_validate(session=session, timeout=60, checks=checks)

        fuzz()
    finally:
        server.stop()


# ---- issue 26: bounded cost, one decode, no jam after a 504 --------------------------------


@pytest.mark.parametrize("size", [(1, 400_000), (2_000_000, 1)], ids=["1x400000", "2000000x1"])
def test_elongated_pictures_are_refused_under_a_memory_cap(served, image_dir, tmp_path, size):
    """Resizing scales the shorter side up: 1 × 400,000 would become 224 × 89,600,000 pixels
    (60 GB). Under a 512 MiB cap the server answers 400 and the Translator an ImageError."""
    data = strip(*size)
    path = tmp_path / "strip.png"
    path.write_bytes(data)
    translator = Translator.load(image_dir)
    with memory_cap(1 << 29):
        response = served.post("/caption", **upload(data))
        with pytest.raises(ImageError, match="aspect ratio"):
            translator.translate([path])
    error(response, 400, "aspect ratio")


def test_an_upload_is_decoded_once(served, monkeypatch):
    import heedful.data.images as images

    opened, real = [], images._open_checked
    monkeypatch.setattr(images, "_open_checked", lambda *a: opened.append(1) or real(*a))
    ok(served.post("/caption", **upload(PNG)))
    assert len(opened) == 1


SLOW = 3.0  # seconds a slow caption holds the model, past the 2 s request timeout


def test_captions_past_their_deadline_do_not_jam_the_server(image_dir, monkeypatch):
    """12 slow captions (those that ask for attention, here) each get their 504; the one
    running is counted in /health's in_flight until its thread ends; the queued ones never
    run; so a normal caption asked after the 504s gets its answer within its own timeout."""
    real = Translator.translate

    def slow(self, inputs, num_beams=None, *args, need_weights=False, **kwargs):
        if need_weights:
            time.sleep(SLOW)
        return real(self, inputs, num_beams, *args, need_weights=need_weights, **kwargs)

    monkeypatch.setattr(Translator, "translate", slow)
    limits = ServerLimits(max_body_bytes=200_000, request_timeout=2.0, max_in_flight=16)
    server = InProcessServer(image_dir, limits)
    try:
        statuses = []

        def post_slow():
            answer = requests.post(
                server.url + "/caption", **upload(PNG, attention="true"), timeout=30
            )
            statuses.append(answer.status_code)

        threads = [threading.Thread(target=post_slow) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert statuses == [504] * 12
        assert server.health()["in_flight"] >= 1  # the caption still running holds the model
        answer = requests.post(server.url + "/caption", **upload(PNG), timeout=30)
        assert answer.status_code == 200, answer.text
        # the slow caption's count ends with its thread, which lets the model go a moment
        # before it returns: on busy cores the next caption can answer inside that moment
        wait_until(lambda: server.health()["in_flight"] == 0, "the slow caption's end", 30)
        assert server.health()["in_flight"] == 0
    finally:
        server.stop()
