"""Every score of scores.py reaches the viewer and explain through its table entry: the trace
declares its formula and form (model.score), the calculation panel recomputes the model's
scores and weights from them, and explain names it and prints its formula."""

from __future__ import annotations

import pytest
import torch

from heedful.config import DecoderConfig, GenerationConfig, ModelConfig
from heedful.data.tokenizers import CharTokenizer
from heedful.inference.translator import Translator
from heedful.layers.scores import SCORES
from heedful.models.build import build_model
from heedful.visualize.explain import explain
from heedful.visualize.trace import build_trace

from .test_html import assert_no_console_errors, chromium

__all__ = ["chromium"]
SOURCE, STEP, WINDOW = "abcdefgh", 3, 2


def tiny(name: str) -> Translator:
    """A random GRU encoder-decoder with score `name` (untrained: its numbers are its own)."""
    torch.manual_seed(0)
    tokenizer = CharTokenizer("abcdefgh")
    config = ModelConfig(
        arch="rnn",
        d_model=8,
        hidden_size=16,
        dropout=0.0,
        decoder=DecoderConfig(attention=name, local_window=WINDOW),
    )
    model = build_model(config, len(tokenizer), len(tokenizer))
    return Translator(model, tokenizer, tokenizer, GenerationConfig(max_len_offset=3))


def calculation(chromium, tmp_path, data: dict):
    """The panel of output step STEP: its seven steps' texts and its table's rows."""
    from .test_viewer_calc import open_rnn_step, panel_rows

    driver = open_rnn_step(chromium, tmp_path, data, STEP)
    items = driver.find_elements("css selector", '[data-part="calc-body"] ol.calc-steps > li')
    texts, rows = [item.text for item in items], panel_rows(driver)
    assert_no_console_errors(driver)
    return texts, rows


@pytest.mark.parametrize("name", SCORES)
def test_the_panel_recomputes_each_score_from_its_declared_form(chromium, tmp_path, name):
    data = build_trace(tiny(name), SOURCE).to_dict()
    assert data["model"]["score"] == SCORES[name].describe(16)
    texts, rows = calculation(chromium, tmp_path, data)
    formula = " ".join(data["model"]["score"]["formula"].split())  # as the page's text shows it
    assert f"Score each one: {formula}." in texts[2]
    hyp = data["hypotheses"][0]
    assert [r["score"] for r in rows] == pytest.approx(hyp["rnn"]["scores"][STEP], abs=2e-4)
    weights = hyp["cross_attention"][STEP][0][0]
    assert [r["weight"] for r in rows] == pytest.approx(weights, abs=2e-4)


def test_an_older_trace_without_the_score_shows_its_own_numbers(chromium, tmp_path):
    """A trace written before model.score: the panel shows the scores and weights it holds
    (local-p's Gaussian included), and the attention's name for the formula."""
    data = build_trace(tiny("luong-local-p"), SOURCE).to_dict()
    del data["model"]["score"]
    texts, rows = calculation(chromium, tmp_path, data)
    assert "Score each one: luong-local-p." in texts[2]
    hyp = data["hypotheses"][0]
    assert [r["score"] for r in rows] == hyp["rnn"]["scores"][STEP]
    assert [r["weight"] for r in rows] == hyp["cross_attention"][STEP][0][0]


@pytest.mark.parametrize("name", SCORES)
def test_explain_names_each_score_and_prints_its_formula(name):
    tr = tiny(name)
    result = explain(tr, SOURCE, position=STEP + 1)
    text = result.text()
    assert text.startswith(f"{SCORES[name].label} attention, output step {STEP + 1}")
    assert f"Score of each encoder state: {SCORES[name].formula}" in text
    trace = build_trace(tr, SOURCE).hypotheses[0]
    expected = torch.tensor(trace.cross_attention[STEP][0][0]).double()
    torch.testing.assert_close(result.weights, expected, atol=1e-4, rtol=0)


def test_a_damaged_score_is_named():
    from heedful.visualize.trace_check import check_trace

    data = build_trace(tiny("luong-general"), SOURCE).to_dict()
    data["model"]["score"] = {**data["model"]["score"], "form": "cubic"}
    with pytest.raises(ValueError, match="model.score.form: must be one of dot, additive"):
        check_trace(data)
    data["model"]["score"] = {"form": "dot"}
    with pytest.raises(ValueError, match="model.score: must have the keys form and formula"):
        check_trace(data)
