"""The pointer-generator's p_gen in the viewer's replay (model.copy, See et al. 2017), in
headless Chromium: a bar per output token as wide as p_gen, and the current step's mixture."""

from __future__ import annotations

import pytest

from .test_html import assert_no_console_errors, chromium, click_tab, open_page, part
from .test_html import synthetic_trace as make_trace

__all__ = ["chromium"]  # the browser fixture

P_GEN = [0.9, 0.05, 0.5, 1.0, 0.0, 0.25, 0.7, 0.99]


def copy_trace() -> dict:
    trace = make_trace(arch="rnn", attention="bahdanau", src_len=9, tgt_len=len(P_GEN))
    trace["model"]["copy"] = True
    trace["hypotheses"][0]["rnn"]["p_gen"] = P_GEN
    return trace


def test_copy_trace_follows_the_schema():
    from heedful.visualize.trace import Trace

    assert Trace.from_dict(copy_trace()).hypotheses[0].rnn["p_gen"] == P_GEN
    bad = copy_trace()
    bad["hypotheses"][0]["rnn"]["p_gen"] = [*P_GEN[:-1], 1.5]
    with pytest.raises(ValueError, match=r"rnn.p_gen\[7\]: expected a finite number from 0 to 1"):
        Trace.from_dict(bad)


def test_replay_shows_p_gen_under_each_token_and_the_steps_mixture(chromium, tmp_path):
    from selenium.webdriver.common.keys import Keys

    driver = open_page(chromium, tmp_path, copy_trace(), "copy")
    assert "copy (pointer-generator)" in driver.find_element("css selector", "body").text
    click_tab(driver, "replay")
    items = driver.find_elements("css selector", "[data-part=replay-output] .pgen-item")
    assert len(items) == len(P_GEN)
    widths = driver.execute_script(
        "return [...arguments[0].querySelectorAll('.pgen-item')].map((item) =>"
        " item.querySelector('.pgen').offsetWidth / item.querySelector('.pgen-box').offsetWidth)",
        driver.find_element(*part("replay-output")),
    )
    assert widths == pytest.approx(P_GEN, abs=0.05)
    assert "generate 5%, copy 95%" in items[1].get_attribute("title")
    note = driver.find_element(*part("replay-pgen"))
    assert note.is_displayed() and note.text.startswith("Copy: p_gen = 0.900,")
    driver.find_element(*part("step-slider")).send_keys(Keys.ARROW_RIGHT)
    assert note.text.startswith("Copy: p_gen = 0.050, so this step's probabilities are 0.05 ×")
    assert_no_console_errors(driver)


def test_a_model_without_copy_shows_no_bars(chromium, tmp_path):
    driver = open_page(chromium, tmp_path, make_trace(arch="rnn", attention="bahdanau"), "plain")
    click_tab(driver, "replay")
    assert not driver.find_elements("css selector", "[data-part=replay-output] .pgen-item")
    assert not driver.find_element(*part("replay-pgen")).is_displayed()
    assert_no_console_errors(driver)


def test_the_step_calculation_names_the_mixture(chromium, tmp_path):
    """A real copy model's trace (internals included): the RNN calculation's last step is the
    pointer-generator's mixture with this step's p_gen, and its tokens the trace's top_k."""
    import torch

    from heedful.config import DecoderConfig, GenerationConfig, ModelConfig
    from heedful.data.tokenizers import CharTokenizer
    from heedful.inference.translator import Translator
    from heedful.models.build import build_model
    from heedful.visualize.trace import build_trace

    tokenizer = CharTokenizer("abcdefgh")
    torch.manual_seed(0)
    model = build_model(
        ModelConfig(arch="rnn", d_model=8, hidden_size=16, decoder=DecoderConfig(copy=True)),
        len(tokenizer),
        len(tokenizer),
    ).eval()
    generation = GenerationConfig(num_beams=1, max_len_ratio=0, max_len_offset=4)
    trace = build_trace(Translator(model, tokenizer, tokenizer, generation), "abcd").to_dict()
    p_gen = trace["hypotheses"][0]["rnn"]["p_gen"]
    driver = open_page(chromium, tmp_path, trace, "copy-calc")
    click_tab(driver, "replay")
    driver.execute_script("window.heedfulViewer.setStep(arguments[0])", 1)
    driver.find_element(*part("replay-calc")).click()
    steps = driver.find_elements("css selector", '[data-part="calc-body"] ol.calc-steps > li')
    assert len(steps) == 7
    assert steps[-1].text.startswith("p(y_t) = p_gen softmax(W_o h̃_t) + (1 − p_gen) Σ a_t(s)")
    assert f"p_gen = {p_gen[1]:.3f}" in steps[-1].text
    assert_no_console_errors(driver)
