"""`heedful serve A B C` (issue 15, item 6): every model's pairs in /languages, each request
routed to the model of its source → target pair (a multilingual model reading that target's
token), unknown pairs a 400 naming those there are; one model per pair."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from heedful.checkpoint.model_dir import save_model_dir
from heedful.cli import main
from heedful.config import DecoderConfig, GenerationConfig, ModelConfig, TextEncoderConfig
from heedful.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID, CharTokenizer
from heedful.inference.translator import Translator
from heedful.models.build import build_model
from heedful.server import create_app

from .helpers import OFFSET, client, error, ok

LETTERS = "abcdefghijklmnopqrstuvwxyz ABC.,"


def tiny_model(path: Path, languages, seed: int, pairs=None) -> Path:
    """A model directory like conftest.py's (</s> suppressed), of other weights (`seed`);
    `pairs`: a multilingual one, whose source vocabulary has their target tokens."""
    symbols = [f"<2{t}>" for t in dict.fromkeys(t for _, t in pairs)] if pairs else []
    source = CharTokenizer.train([LETTERS], symbols=symbols)
    target = CharTokenizer.train([LETTERS])
    config = ModelConfig(
        d_model=16,
        num_heads=2,
        d_ff=32,
        dropout=0.0,
        encoder=TextEncoderConfig(layers=1),
        decoder=DecoderConfig(layers=1),
    )
    torch.manual_seed(seed)
    model = build_model(config, len(source), len(target))
    with torch.no_grad():
        model.decoder.generator.bias[[PAD_ID, BOS_ID, UNK_ID, EOS_ID]] -= 10.0
    generation = GenerationConfig(num_beams=1, max_len_ratio=1.0, max_len_offset=OFFSET)
    return save_model_dir(path, model, config, source, target, generation, languages, pairs)


@pytest.fixture(scope="module")
def models(tmp_path_factory, model_dir) -> dict[str, Path]:
    """en→de: conftest.py's, a directory as every one before issue 15 was (no pairs); the
    others written here."""
    root = tmp_path_factory.mktemp("routing")
    return {
        "en-de": model_dir,
        "en-fr": tiny_model(root / "en-fr", ("en", "fr"), 1),
        "fr-de": tiny_model(root / "fr-de", ("fr", "de"), 2),
        "de-en": tiny_model(root / "de-en", ("de", "en"), 3),
        "multi": tiny_model(root / "multi", ("de", "fr"), 4, (("de", "fr"), ("de", "es"))),
    }


@pytest.fixture(scope="module")
def two(models):
    with client([models["en-de"], models["en-fr"]]) as http:
        yield http


def alone(model_dir: Path, text: str, target=None) -> str:
    """The model's greedy output, through the Python API."""
    return Translator.load(model_dir).translate([text], num_beams=1, target=target)[0].text


def test_languages_lists_every_pair(two, models):
    assert "pairs" not in json.loads((models["en-de"] / "config.json").read_text())
    assert ok(two.get("/languages")) == [
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "de", "name": "German", "targets": []},
        {"code": "fr", "name": "French", "targets": []},
    ]


def test_each_pair_goes_to_its_model(two, models):
    text = "a cab"
    answers = {}
    for target in ("de", "fr"):
        answer = ok(two.post("/translate", json={"q": text, "source": "en", "target": target}))
        answers[target] = answer["translatedText"]
        assert answers[target] == alone(models[f"en-{target}"], text)
    assert answers["de"] != answers["fr"]  # the two models differ, so routing shows
    first, second = (state.batcher.stats.requests for state in two.app.state.models)
    assert first >= 1 and second >= 1  # each model has its own batcher
    auto = ok(two.post("/translate", json={"q": text, "source": "auto", "target": "fr"}))
    assert auto["translatedText"] == answers["fr"]  # one source writes fr: auto is en


def test_unknown_pairs_name_the_code_not_served(two):
    """In LibreTranslate's words, which its clients and tests match: the code no pair reads
    (source) or writes (target)."""
    for source, target, code in (("en", "es", "es"), ("de", "fr", "de"), ("auto", "es", "es")):
        error(
            two.post("/translate", json={"q": "abc", "source": source, "target": target}),
            400,
            f"{code} is not supported",
        )


def test_status_routes_cover_every_model(two):
    assert ok(two.get("/health")) == {"status": "ok"}
    ready = ok(two.get("/ready"))
    assert ready["requests"] >= 0
    assert [m["pairs"] for m in ready["models"]] == [[["en", "de"]], [["en", "fr"]]]
    assert ok(two.post("/detect", json={"q": "abc"})) == [{"language": "en", "confidence": 100.0}]
    schema = ok(two.get("/openapi.json"))["paths"]["/translate"]["post"]["requestBody"]
    fields = schema["content"]["application/json"]["schema"]["properties"]
    assert fields["source"]["enum"] == ["en", "auto"] and fields["target"]["enum"] == ["de", "fr"]


def test_auto_with_two_sources_of_a_target_asks_for_the_source(models):
    with client([models["en-de"], models["fr-de"]]) as http:
        error(
            http.post("/translate", json={"q": "abc", "source": "auto", "target": "de"}),
            400,
            "source auto is ambiguous for target de: this server translates en→de, fr→de; name",
        )
        answer = ok(http.post("/translate", json={"q": "abc", "source": "fr", "target": "de"}))
        assert answer["translatedText"] == alone(models["fr-de"], "abc")
        detected = ok(http.post("/detect", json={"q": "abc"}))
        assert detected == [{"language": c, "confidence": 50.0} for c in ("en", "fr")]


def test_a_multilingual_model_reads_the_target_token(models):
    with client([models["multi"], models["de-en"]]) as http:
        listed = ok(http.get("/languages"))
        assert [(x["code"], x["targets"]) for x in listed] == [
            ("de", ["fr", "es", "en"]),
            ("fr", []),
            ("es", []),
            ("en", []),
        ]
        for target in ("fr", "es"):
            body = {"q": "a cab", "source": "de", "target": target, "return_attention": True}
            answer = ok(http.post("/translate", json=body))
            assert answer["translatedText"] == alone(models["multi"], "a cab", target)
            assert answer["attention"]["source_tokens"][:2] == [f"<2{target}>", "a"]
        answer = ok(http.post("/translate", json={"q": "abc", "source": "de", "target": "en"}))
        assert answer["translatedText"] == alone(models["de-en"], "abc")


def test_two_models_of_one_pair_are_refused(models, tmp_path):
    twin = tiny_model(tmp_path / "twin", ("en", "fr"), 5)
    with pytest.raises(ValueError, match="en-fr and .*twin both translate en→fr"):
        create_app([models["en-fr"], twin])
    result = CliRunner().invoke(main, ["serve", str(models["en-fr"]), str(twin)])
    assert result.exit_code == 1 and "both translate en→fr" in result.output, result.output
    assert "Traceback" not in result.output


def test_a_model_that_cannot_load_leaves_the_others_serving(models, tmp_path):
    from fastapi.testclient import TestClient

    broken = tiny_model(tmp_path / "broken", ("en", "fr"), 6)
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    app = create_app([models["en-de"], broken])
    good, bad = app.state.models
    with TestClient(app) as http:
        deadline = time.monotonic() + 60
        while good.service is None or bad.load_error is None:  # both loads have ended
            assert time.monotonic() < deadline
            time.sleep(0.02)
        error(http.get("/ready"), 503, "the model could not be loaded")
        answer = ok(http.post("/translate", json={"q": "abc", "source": "en", "target": "de"}))
        assert answer["translatedText"] == alone(models["en-de"], "abc")
        error(
            http.post("/translate", json={"q": "abc", "source": "en", "target": "fr"}),
            503,
            "the model could not be loaded",
        )
