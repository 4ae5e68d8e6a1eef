"""heedful.inference.runtime: one load_translator for both engines, and the CTranslate2 engine
behind Translator's surface (its outputs against ours are tested in test_export.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from heedful.inference.runtime import CTranslate2Translator, load_translator
from heedful.inference.translator import Translator

MODEL = Path(__file__).resolve().parent / "golden" / "models" / "transformer"


def test_load_translator_picks_the_engine_and_both_know_the_config():
    torch_engine = load_translator(MODEL)
    ct2_engine = load_translator(MODEL, engine="ctranslate2")
    assert isinstance(torch_engine, Translator) and torch_engine.engine == "torch"
    assert isinstance(ct2_engine, CTranslate2Translator) and ct2_engine.engine == "ctranslate2"
    assert ct2_engine.config == torch_engine.config
    assert ct2_engine.languages == torch_engine.languages


def test_both_engines_answer_blank_texts_the_same_way():
    texts = ["abcd", "", " ", "hgf"]
    ours = load_translator(MODEL).translate(texts, num_beams=2)
    theirs = load_translator(MODEL, engine="ctranslate2").translate(texts, num_beams=2)
    for a, b in zip(ours, theirs):
        assert (a.text, a.source_tokens) == (b.text, b.source_tokens)
    assert theirs[1].tokens == [] and theirs[1].score == 0.0


@pytest.mark.parametrize(
    "options, message",
    [({"engine": "onnx"}, "unknown engine 'onnx'"),
     ({"engine": "ctranslate2", "device": "cuda"}, "runs on the CPU here"),
     ({"engine": "ctranslate2", "quantize": "int4"}, "unknown quantization 'int4'"),
     ({"engine": "torch", "quantize": "int4"}, "unknown quantization 'int4'")],
)  # fmt: skip
def test_what_an_engine_cannot_do_is_refused(options, message):
    with pytest.raises(ValueError, match=message):
        load_translator(MODEL, **options)


def test_the_ctranslate2_engine_refuses_attention_and_impossible_n_best():
    ct2 = load_translator(MODEL, engine="ctranslate2")
    with pytest.raises(ValueError, match="gives no attention weights"):
        ct2.translate(["abc"], need_weights=True)
    with pytest.raises(ValueError, match="n_best"):
        ct2.translate(["abc"], num_beams=2, n_best=3)
