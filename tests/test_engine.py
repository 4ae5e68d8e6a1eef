"""One search-settings type and one check of it (issue 27, item 5): each engine declares what it
can do, engine.check_supported refuses the rest in the same words through Python, the CLI and
HTTP, and a SearchSettings goes from a config to the search, the server and the trace whole."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from server.helpers import client, error, ok

from heedful.checkpoint.model_dir import save_model_dir
from heedful.cli import main
from heedful.config import GenerationConfig, SearchSettings, load_config
from heedful.config.search import call_settings
from heedful.data.tokenizers import CharTokenizer
from heedful.inference.engine import (
    CLI,
    HTTP,
    PICTURES,
    PYTHON,
    SEARCH,
    Capabilities,
    Unsupported,
    active,
    check_supported,
)
from heedful.inference.runtime import CTranslate2Translator, load_translator
from heedful.inference.translator import Translator
from heedful.models.build import build_model
from heedful.visualize.trace import build_trace

MODEL = Path(__file__).resolve().parent / "golden" / "models" / "transformer"
ENGINES = (Translator, CTranslate2Translator)


DEFAULT = SearchSettings()


def refusal(engine, names, settings=DEFAULT, **asked) -> str:
    """The message of the one check for what `engine` cannot do, as a surface spells it."""
    with pytest.raises(Unsupported) as raised:
        check_supported(engine.engine, engine.capabilities, settings, names=names, **asked)
    return str(raised.value)


def test_every_engine_declares_the_engine_protocol():
    for engine in ENGINES:
        assert isinstance(engine.engine, str) and isinstance(engine.capabilities, Capabilities)
        assert callable(engine.translate)
    assert Translator.capabilities == Capabilities()  # everything
    assert not CTranslate2Translator.capabilities.attention
    # pictures: the same search, prefixes and attention; no internals (a token encoder's)
    assert PICTURES == Capabilities(internals=False, instead=PICTURES.instead)


def test_an_image_models_translator_declares_what_pictures_can_do(tmp_path):
    from image_models import image_model_dir

    translator = Translator.load(image_model_dir(tmp_path / "vit", "vit"))
    assert translator.source.kind == "image" and translator.capabilities is PICTURES
    assert Translator.load(MODEL).capabilities == Capabilities()


def test_the_old_name_is_the_same_type():
    assert GenerationConfig is SearchSettings
    assert load_config(None, ["generation.num_beams=3"]).generation == SearchSettings(num_beams=3)


def test_ctranslate2_refuses_sampling_in_the_same_words_through_python_cli_and_http():
    sampled = SearchSettings(sample=True, seed=1)
    ct2 = load_translator(MODEL, engine="ctranslate2")
    with pytest.raises(Unsupported) as raised:  # it used to ignore sample=True
        ct2.translate(["abc"], sample=True, seed=1)
    assert str(raised.value) == refusal(ct2, PYTHON, sampled)
    assert str(raised.value) == "sample=True and prefixes need the torch engine, not ctranslate2"
    with pytest.raises(Unsupported, match="^sample=True and prefixes need"):
        ct2.translate(["abc"], prefixes=["a"])  # it used to be a TypeError
    command = ["translate", str(MODEL), "--engine", "ctranslate2", "--sample", "--seed", "1"]
    result = CliRunner().invoke(main, command, input="abc\n")
    assert result.exit_code == 2 and refusal(ct2, CLI, sampled) in result.output
    with client(MODEL, engine="ctranslate2") as app:
        body = {"q": "abc", "source": "src", "target": "tgt", "sample": True, "seed": 1}
        error(app.post("/translate", json=body), 400, refusal(ct2, HTTP, sampled))
        body = {"q": "abc", "source": "src", "target": "tgt", "return_attention": True}
        error(app.post("/translate", json=body), 400, refusal(ct2, HTTP, attention=True))
    with pytest.raises(Unsupported) as raised:
        ct2.translate(["abc"], need_weights=True)
    assert str(raised.value) == refusal(ct2, PYTHON, attention=True)


def test_what_an_engine_honours_passes_and_only_a_change_is_refused():
    ct2 = CTranslate2Translator.capabilities
    beam = SearchSettings(num_beams=3, n_best=2, length_penalty=0.6, max_len_offset=4)
    check_supported("ctranslate2", ct2, beam)  # the beam search it runs
    check_supported("ctranslate2", ct2, replace(beam, temperature=0.5))  # read by sample only
    with pytest.raises(Unsupported, match="^--sample and --prefix need the torch engine"):
        check_supported("ctranslate2", ct2, replace(beam, sample=True), names=CLI)
    check_supported("torch", PICTURES, beam, prefixes=True, names=CLI)  # pictures take both
    check_supported("torch", PICTURES, replace(beam, sample=True))
    with pytest.raises(Unsupported, match="^internals=True needs a text model"):
        check_supported("torch", PICTURES, beam, internals=True)
    assert active(replace(beam, temperature=0.5)) == SEARCH  # read only when sampling
    assert active(replace(beam, sample=True, seed=2)) == SEARCH | {"sample", "seed"}


def test_a_call_takes_the_models_settings_with_one_output_then_its_own():
    model = SearchSettings(num_beams=4, n_best=3, length_penalty=0.2)
    assert call_settings(model) == replace(model, n_best=1)
    assert call_settings(model, num_beams=None, n_best=2).n_best == 2
    asked = SearchSettings(num_beams=2, n_best=2)
    assert call_settings(model, asked, length_penalty=0.0) == replace(asked, length_penalty=0.0)
    with pytest.raises(ValueError, match="need 1 <= n_best <= num_beams"):
        call_settings(model, num_beams=2, n_best=3)
    assert call_settings(model, num_beams=1, n_best=3, sample=True).n_best == 3  # 3 samples
    with pytest.raises(TypeError, match="'beams' is not a search setting"):
        call_settings(model, beams=2)


def test_settings_go_from_a_config_through_http_into_the_trace(tmp_path):
    """generation: in a config -> generation.json -> the server's search of a request (its
    fields over the model's) -> the trace's `search`, the one record SearchSettings makes."""
    given = {"num_beams": 3, "length_penalty": 0.6, "max_len_ratio": 1.0, "max_len_offset": 3}
    config = load_config(None, [f"generation.{name}={value}" for name, value in given.items()])
    tokenizer = CharTokenizer.train(["abcdefgh"])
    model_config = replace(config.model, d_model=16, num_heads=2, d_ff=32, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(model_config, len(tokenizer), len(tokenizer))
    path = tmp_path / "model"
    save_model_dir(path, model, model_config, tokenizer, tokenizer, config.generation, ("en", "de"))
    translator = Translator.load(path)
    assert translator.generation == config.generation
    with client(path) as app:
        fields = {"q": "abcd", "source": "en", "target": "de", "return_attention": True}
        searched = ok(app.post("/translate", json={**fields, "alternatives": 1}))["attention"]
        drawn = {**fields, "sample": True, "seed": 5, "temperature": 0.5, "top_p": 1.0}
        sampled = ok(app.post("/translate", json=drawn))["attention"]
    beam = replace(config.generation, n_best=2)
    assert searched["search"] == beam.record() == {"num_beams": 3, "length_penalty": 0.6}
    local = build_trace(translator, "abcd", settings=beam).to_dict()
    assert json.dumps(searched) == json.dumps(json.loads(json.dumps(local)))  # the same trace
    draws = replace(config.generation, sample=True, seed=5, temperature=0.5)
    assert sampled["search"] == draws.record()  # top_p 1 is the default: not listed
    assert sampled["search"]["sample"] == {"seed": 5, "temperature": 0.5}
    [output] = translator.translate(["abcd"], settings=draws)
    assert sampled["hypotheses"][0]["text"] == output.text


def test_a_declared_setting_has_its_flag_and_its_field(monkeypatch):
    """config/search.py declares each setting once; the CLI's flag, the HTTP field (and so the
    OpenAPI document) and the refusals' words come from that declaration, so a setting
    declared there has all of them. A declaration added here stands for a new setting."""
    import click

    from heedful.cli.options import given_settings, setting_options
    from heedful.config.search import SETTINGS, Setting
    from heedful.server import ServerLimits
    from heedful.server.schema import Integer, Number, parse_request, translate_request

    assert CLI.setting["num_beams"] == "--beam" and CLI.setting["top_k"] == "--top-k"
    # what shapes the draws is recorded with them, away from its default
    assert SearchSettings(sample=True, num_samples=3).record()["sample"] == {"num_samples": 3}
    new = Setting((0.0, 2.0), help="A new setting.", http="a new setting")
    count = Setting((1, 10**12), draws=True, help="Another.", http="another")
    monkeypatch.setitem(SETTINGS, "novelty", new)
    monkeypatch.setitem(SETTINGS, "count", count)
    command = setting_options(click.command()(lambda **given: given))
    flags = {p.name: p for p in command.params}
    assert flags["novelty"].opts == ["--novelty"] and flags["novelty"].help == "A new setting."
    assert (flags["novelty"].type.min, flags["novelty"].type.max) == (0.0, 2.0)
    assert isinstance(flags["count"].type, click.IntRange) and "num_beams" not in flags
    with pytest.raises(click.UsageError, match="--count shapes the distribution --sample"):
        given_settings({"count": 3, "sample": False})
    request = translate_request(ServerLimits(), ("en", "de"))
    assert request["novelty"] == Number("novelty", 0.0, 2.0, False, "a new setting")
    assert request["count"] == Integer(
        "count", 1, 999_999_999, "the largest count", None, "another"
    )
    body = {"q": "a", "source": "en", "target": "de", "novelty": 0.5, "count": 3}
    assert parse_request(body, request).settings == {"novelty": 0.5}  # count: with sample only
    assert parse_request(body | {"sample": True}, request).settings == {
        "novelty": 0.5,
        "count": 3,
        "sample": True,
    }
