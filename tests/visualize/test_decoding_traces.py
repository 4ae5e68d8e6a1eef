"""Traces of the other decodings (issue 15): sampling records the distribution each token was
drawn from, a prefix its forced steps, an ensemble every member's attention, local attention its
window and p_t; the viewer draws the last on the alignment matrix and the first in the replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from heedful.config import DecoderConfig, GenerationConfig, ModelConfig
from heedful.data.tokenizers import CharTokenizer
from heedful.inference.translator import Translator, load_ensemble
from heedful.models.build import build_model
from heedful.visualize.trace import Trace, build_trace

from .test_html import assert_no_console_errors, chromium, click_tab, open_page

__all__ = ["chromium"]

MODELS = Path(__file__).resolve().parents[1] / "golden" / "models"
SAMPLING = {"temperature": 1.5, "top_k": 4, "seed": 3}


def local_translator(attention: str = "luong-local-p") -> Translator:
    torch.manual_seed(0)
    tokenizer = CharTokenizer("abcdefgh")
    config = ModelConfig(
        arch="rnn",
        d_model=8,
        hidden_size=16,
        dropout=0.0,
        decoder=DecoderConfig(attention=attention, local_window=2),
    )
    model = build_model(config, len(tokenizer), len(tokenizer))
    model.config = config
    return Translator(model, tokenizer, tokenizer, GenerationConfig(max_len_offset=3))


def round_trip(trace: Trace) -> dict:
    """The trace as a file holds it, checked by Trace.from_dict."""
    data = json.loads(json.dumps(trace.to_dict()))
    Trace.from_dict(data)
    return data


def test_a_sampled_trace_holds_the_distributions_drawn_from():
    translator = Translator.load(MODELS / "rnn")
    trace = build_trace(translator, "abcdef", n_best=3, sampling=SAMPLING)
    data = round_trip(trace)
    assert data["search"]["sample"] == SAMPLING and len(data["hypotheses"]) == 3
    for h in data["hypotheses"]:
        assert len(h["sampled"]) == len(h["tokens"])
        for step, token in zip(h["sampled"], h["tokens"]):
            assert len(step) <= 4  # top_k = 4: no other token could be drawn
            assert token in [c["token"] for c in step]  # the token drawn was a candidate
    again = build_trace(translator, "abcdef", n_best=3, sampling=SAMPLING)
    assert [h.text for h in again.hypotheses] == [h.text for h in trace.hypotheses]


def test_a_prefix_trace_records_the_forced_steps_and_their_attention():
    translator = Translator.load(MODELS / "transformer")
    data = round_trip(build_trace(translator, "abcdef", prefix="fe"))
    assert data["search"]["prefix"] == "fe" and data["search"]["forced"] == 2
    [h] = data["hypotheses"]
    assert h["text"].startswith("fe") and len(h["cross_attention"]) == len(h["tokens"])


def test_an_ensemble_trace_keeps_each_members_attention():
    translator = load_ensemble([MODELS / "rnn", MODELS / "transformer"])
    data = round_trip(build_trace(translator, "abcdef", num_beams=2, n_best=2))
    for h in data["hypotheses"]:
        rnn, transformer = h["members"]
        assert rnn["model"]["arch"] == "rnn" and transformer["model"]["heads"] == 2
        assert len(transformer["cross_attention"]) == len(h["tokens"])
        assert len(transformer["cross_attention"][0]) == 2  # the Transformer's two layers
    assert data["internals"] is None


def test_plain_traces_have_none_of_the_new_keys():
    data = build_trace(Translator.load(MODELS / "rnn"), "abc").to_dict()
    assert set(data["search"]) == {"num_beams", "length_penalty"}
    assert "window" not in data["model"]
    h = data["hypotheses"][0]
    assert "sampled" not in h and "members" not in h and "centers" not in h["rnn"]


@pytest.mark.parametrize("attention", ["luong-local-m", "luong-local-p"])
def test_a_local_attention_trace_holds_the_window_and_the_centres(attention):
    data = round_trip(build_trace(local_translator(attention), "abcdefgh"))
    assert data["model"]["window"] == 2 and data["model"]["attention"] == attention
    [h] = data["hypotheses"]
    centers = h["rnn"]["centers"]
    assert len(centers) == len(h["tokens"])
    for p, row in zip(centers, h["cross_attention"]):
        weights = row[0][0]
        assert all(w == 0 for s, w in enumerate(weights) if abs(s - p) > 2)  # outside: none
    if attention == "luong-local-m":
        assert centers == [float(min(t, 7)) for t in range(len(centers))]


def test_a_damaged_centre_list_is_named():
    data = round_trip(build_trace(local_translator(), "abcdefgh"))
    data["hypotheses"][0]["rnn"]["centers"] = [1.0]
    with pytest.raises(ValueError, match=r"hypotheses\[0\].rnn.centers: expected"):
        Trace.from_dict(data)


def test_the_viewer_draws_the_window_and_p_t(chromium, tmp_path):
    trace = build_trace(local_translator(), "abcdefgh")
    driver = open_page(chromium, tmp_path, trace)
    click_tab(driver, "matrix")
    canvas = driver.find_element("css selector", '[data-part="matrix-canvas"]')
    windows = json.loads(canvas.get_attribute("data-windows"))
    centers = trace.hypotheses[0].rnn["centers"]
    assert [w[2] for w in windows] == pytest.approx(centers)
    for low, high, p in windows:
        assert low == max(0, -int(-(p - 2) // 1)) and high == min(7, int((p + 2) // 1))
    assert (
        "local window D = 2" in driver.find_element("css selector", '[data-part="model-info"]').text
    )
    assert_no_console_errors(driver)


def test_the_replay_shows_what_a_token_was_drawn_from(chromium, tmp_path):
    trace = build_trace(Translator.load(MODELS / "rnn"), "abcdef", sampling=SAMPLING)
    driver = open_page(chromium, tmp_path, trace)
    click_tab(driver, "replay")
    topk = driver.find_element("css selector", '[data-part="replay-topk"]').text
    assert "drawn from (temperature 1.5, top-k 4, seed 3)" in topk
    assert "sampling" in driver.find_element("css selector", '[data-part="model-info"]').text
    assert_no_console_errors(driver)


@pytest.mark.parametrize("attention", ["luong-local-m", "luong-local-p"])
def test_the_calculation_panel_of_a_local_step_masks_outside_the_window(
    chromium, tmp_path, attention
):
    """The panel's a_t(s), recomputed from h_t and W_a h̄_s with the window (and, local-p, the
    Gaussian), are the model's weights."""
    from .test_viewer_calc import open_rnn_step, panel_rows

    data = build_trace(local_translator(attention), "abcdefgh").to_dict()
    t = 3
    driver = open_rnn_step(chromium, tmp_path, data, t)
    rows = panel_rows(driver)
    p = data["hypotheses"][0]["rnn"]["centers"][t]
    assert [r["masked"] for r in rows] == [abs(s - p) > 2 for s in range(len(rows))]
    weights = data["hypotheses"][0]["cross_attention"][t][0][0]
    assert [r["weight"] for r in rows] == pytest.approx(weights, abs=2e-4)
    assert_no_console_errors(driver)
