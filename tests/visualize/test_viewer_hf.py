"""A Hugging Face model's trace in the viewer (issue 28, item 6), in headless Chromium: it holds
no internals (heedful's hooks know its own modules), so the calculation panel, Scores →
softmax and the block say so and name what to run instead, the `heedful explain` of that very
cell; running it works and explains the cell clicked. Asking build_trace for internals=True,
the advice the panel gave before, no longer raises."""

from __future__ import annotations

import shlex
import warnings

import numpy as np
import pytest
from click.testing import CliRunner
from hf.builders import TEXTS, build_marian

from heedful.cli import main
from heedful.visualize.explain import explain
from heedful.visualize.trace import build_trace

from .test_html import assert_no_console_errors, chromium, open_page, part

__all__ = ["chromium"]


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    import heedful

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MarianTokenizer recommends sacremoses
        path = build_marian(tmp_path_factory.mktemp("hf") / "marian")
        translator = heedful.load(path)
    trace = build_trace(translator, TEXTS[0], num_beams=1, internals=True).to_dict()
    return path, translator, trace


def test_internals_true_gives_a_trace_that_names_the_model(marian):
    _, _, trace = marian  # build_trace(..., internals=True) raised a ValueError before
    assert trace["internals"] is None and trace["model"]["hf"] == "marian"
    assert all(h["internals"] is None for h in trace["hypotheses"])


def test_the_panel_names_the_explain_that_computes_the_cell_clicked(chromium, tmp_path, marian):
    path, translator, trace = marian
    driver = open_page(chromium, tmp_path, trace, "hf-calc")
    t, s, layer, head = 1, 2, 1, 2  # a random model's output is long: opened as a click does
    script = (
        "const [l, h, t, s] = arguments; window.heedfulViewer.openCalc('cross', l, h, t, {key: s})"
    )
    driver.execute_script(script, layer, head, t, s)
    note = driver.find_element(*part("calc-note"))
    assert note.is_displayed() and "internals=True" not in note.text
    assert "Hugging Face" in note.text and "marian" in note.text
    args = driver.execute_script("return JSON.parse(arguments[0].dataset.command)", note)
    assert args == {"kind": "cross", "layer": layer + 1, "head": head + 1, "position": t + 1}
    command = note.text.split("run: ", 1)[1].split(" (in Python", 1)[0]
    words = shlex.split(command)
    assert words[:3] == ["heedful", "explain", "MODEL_DIR"] and words[3] == trace["source"]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MarianTokenizer recommends sacremoses
        result = CliRunner().invoke(main, ["explain", str(path), *words[3:]])  # the advice, run
    assert result.exit_code == 0, result.output
    assert f"layer {layer + 1}, head {head + 1}" in result.output
    e = explain(translator, trace["source"], **{k: args[k] for k in ("layer", "head", "position")})
    cell = trace["hypotheses"][0]["cross_attention"][t][layer][head]  # the row clicked
    np.testing.assert_allclose(e.weights.numpy(), cell, atol=1e-4)
    assert_no_console_errors(driver)


def test_scores_softmax_and_the_block_say_what_to_run(chromium, tmp_path, marian):
    _, _, trace = marian
    driver = open_page(chromium, tmp_path, trace, "hf-pipe")
    driver.find_element(*part("tab-pipe")).click()
    note = driver.find_element(*part("pipe-note"))
    assert note.is_displayed() and "heedful explain MODEL_DIR" in note.text
    assert "--kind cross --layer 2 --head 1 --position P" in note.text
    assert "internals=True" not in note.text
    driver.find_element(*part("tab-block")).click()
    note = driver.find_element(*part("block-note"))
    assert note.is_displayed() and "Hugging Face" in note.text and "heedful explain" in note.text
    assert "internals=True" not in note.text
    assert_no_console_errors(driver)
