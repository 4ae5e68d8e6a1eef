"""Scores → softmax at any temperature (issue 28, item 6): each row of weights is one
distribution, drawn on its own scale (÷ its max) with its max and entropy beside it, so that at
τ = 10 a row that evened out reads as even, not as "nothing" (on the fixed 0..1 scale every
cell was the same faint colour). In headless Chromium."""

from __future__ import annotations

import numpy as np
import pytest

from .test_html import assert_no_console_errors, chromium, open_page, part
from .test_viewer_calc import traces
from .test_viewer_views import move_temperature, shown_pipeline

__all__ = ["chromium", "traces"]  # fixtures: the browser, traces of the golden models

STATS = """
return Array.from(document.querySelectorAll('[data-part="pipe-stats"] tr[data-row]'),
    (row) => [+row.querySelector('[data-col="max"]').dataset.value,
              +row.querySelector('[data-col="entropy"]').dataset.value]);
"""
PIXELS = """
const canvas = document.querySelector('[data-part="pipe-steps"] [data-step="weights"] canvas');
const ctx = canvas.getContext("2d"), cell = canvas._cell, dpr = window.devicePixelRatio || 1;
return arguments[0].map(([i, j]) => Array.from(ctx.getImageData(
    Math.floor((j + 0.5) * cell * dpr), Math.floor((i + 0.5) * cell * dpr), 1, 1).data));
"""


def test_each_row_of_weights_has_its_own_scale_max_and_entropy(chromium, tmp_path, traces):
    driver = open_page(chromium, tmp_path, traces["transformer"], "softmax")
    driver.find_element(*part("tab-pipe")).click()
    move_temperature(driver, 1.0)  # τ = 10
    weights = np.asarray(shown_pipeline(driver)["weights"], dtype=np.float64)
    stats = np.asarray(driver.execute_script(STATS), dtype=np.float64)
    entropy = -(weights * np.log(np.where(weights > 0, weights, 1))).sum(1)
    np.testing.assert_allclose(stats[:, 0], weights.max(1), rtol=1e-12)
    np.testing.assert_allclose(stats[:, 1], entropy, rtol=1e-9)
    # every row's largest weight has the top colour of the scale, whatever its value
    tops = driver.execute_script(PIXELS, [[i, int(j)] for i, j in enumerate(weights.argmax(1))])
    assert len({tuple(p) for p in tops}) == 1, tops
    assert len(set(np.round(weights.max(1), 3))) > 1  # though the rows' maxima differ
    assert_no_console_errors(driver)


PRODUCT = """
const m = window.heedfulViewer.state.pipeline;
const labels = (step) => Array.from(document.querySelectorAll(
    `[data-step="${step}"] .pipe-rows, [data-step="${step}"] .pipe-cols`),
    (box) => JSON.parse(box.dataset.labels));
const diff = document.querySelector('[data-part="pipe-model-diff"]');
return {weights: m.weights, values: m.values, output: m.output,
    steps: Object.fromEntries(["scores", "weights", "values", "output"].map(
        (s) => [s, labels(s)])),
    shown: Array.from(document.querySelectorAll('[data-step="weights"] .pipe-rows span'),
        (s) => s.textContent),
    diff: diff ? Number(diff.dataset.value) : null};
"""


def test_scores_and_weights_carry_their_tokens_and_make_z_with_v(chromium, tmp_path, traces):
    """Issue 28, item 6: every matrix names its rows and columns (decoder self-attention: the
    queries "reads→predicts", the keys the tokens read), and weights × V = Z follows, Z equal
    to the head's output the model computed (at τ = 1)."""
    from .test_viewer_views import choose

    trace = traces["transformer"]
    hyp, (layer, head) = trace["hypotheses"][0], (1, 1)
    driver = open_page(chromium, tmp_path, trace, "softmax-product")
    driver.find_element(*part("tab-pipe")).click()
    choose(driver, "pipe-kind", "dec")
    choose(driver, "pipe-layer", layer)
    choose(driver, "pipe-head", head)
    shown = driver.execute_script(PRODUCT)
    reads = ["<s>", *hyp["tokens"][:-1]]
    queries = [f"{r}→{t}" for r, t in zip(reads, hyp["tokens"])]
    dims = [str(d + 1) for d in range(8)]
    for step in ("scores", "weights"):  # rows on the left, then columns above
        assert sorted(shown["steps"][step]) == sorted([queries, reads]), step
    assert sorted(shown["steps"]["values"]) == sorted([reads, dims])
    assert sorted(shown["steps"]["output"]) == sorted([queries, dims])
    assert shown["shown"] == [q.replace(" ", "␣") for q in queries]  # every row labelled
    own = hyp["internals"]["decoder"]
    v = np.asarray(own["v"][layer][head], np.float64)
    np.testing.assert_array_equal(shown["values"], v)
    weights = np.asarray(shown["weights"], np.float64)
    np.testing.assert_allclose(shown["output"], weights @ v, rtol=1e-9, atol=1e-12)
    z = np.asarray(own["z"][layer], np.float64)[:, head * 8 : (head + 1) * 8]
    np.testing.assert_allclose(shown["output"], z, atol=1e-4)  # the model's own, τ = 1
    assert shown["diff"] == pytest.approx(np.abs(np.asarray(shown["output"]) - z).max())

    move_temperature(driver, 1.0)  # τ = 10: Z follows the evened-out weights
    hot = driver.execute_script(PRODUCT)
    weights = np.asarray(hot["weights"], np.float64)
    np.testing.assert_allclose(hot["output"], weights @ v, rtol=1e-9, atol=1e-12)
    assert np.abs(np.asarray(hot["output"]) - z).max() > 1e-2
    assert_no_console_errors(driver)


def test_an_rnns_weights_times_its_encoder_states_make_c_t(chromium, tmp_path, traces):
    trace = traces["rnn"]
    hyp = trace["hypotheses"][0]
    driver = open_page(chromium, tmp_path, trace, "softmax-product-rnn")
    driver.find_element(*part("tab-pipe")).click()
    shown = driver.execute_script(PRODUCT)
    assert sorted(shown["steps"]["weights"]) == sorted([hyp["tokens"], trace["source_tokens"]])
    states = np.asarray(trace["internals"]["encoder_states"], np.float64)
    np.testing.assert_array_equal(shown["values"], states)
    weights = np.asarray(shown["weights"], np.float64)
    np.testing.assert_allclose(shown["output"], weights @ states, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(shown["output"], hyp["rnn"]["contexts"], atol=1e-4)
    assert shown["diff"] < 1e-4
    assert_no_console_errors(driver)
