"""The viewer's pipeline (QKᵀ → ÷√d_k → mask → softmax) and model view, in headless Chromium.

The pipeline's numbers are checked against a float64 recomputation here from the trace's own Q
and K (the committed golden models), and against the model's weights in the trace.
"""

from __future__ import annotations

import math

import numpy as np

from .test_html import (
    assert_no_console_errors,
    chromium,
    open_page,
    open_viewers,
    part,
    screenshot,
    synthetic_trace,
)
from .test_viewer_calc import traces

__all__ = ["chromium", "traces"]  # fixtures: the browser, traces of the golden models


PIPELINE = """
const m = window.heedfulViewer.state.pipeline;
const plain = (rows) => rows && rows.map((row) => row.map((x) => (x === -Infinity ? null : x)));
return {kind: m.kind, layer: m.layer, head: m.head, scale: m.scale, tau: m.tau,
    scores: plain(m.scores), scaled: plain(m.scaled), masked: plain(m.masked),
    weights: plain(m.weights), steps: m.steps.map((s) => s[0])};
"""


def shown_pipeline(driver) -> dict:
    """The pipeline view's matrices as it holds them; null where a score is −∞."""
    return driver.execute_script(PIPELINE)


def choose(driver, name, value):
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(*part(name))).select_by_value(str(value))


def move_temperature(driver, log10_tau):
    slider = driver.find_element(*part("pipe-temperature"))
    driver.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))",
        slider,
        str(log10_tau),
    )


def softmax_rows(scores):
    """float64 softmax along each row, −∞ giving weight 0."""
    scores = np.asarray(scores, dtype=np.float64)
    shifted = np.exp(scores - scores.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def check_transformer(shown, q, k, causal, scaled, tau):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scores = q @ k.T  # (queries, keys)
    scale = math.sqrt(q.shape[1]) if scaled else 1.0
    mask = np.triu(np.ones(scores.shape, bool), 1) if causal else np.zeros(scores.shape, bool)
    masked = np.where(mask, -np.inf, scores / scale)
    weights = softmax_rows(masked / tau)
    assert shown["steps"] == ["scores", "scaled", "masked", "weights"]
    np.testing.assert_allclose(shown["tau"], tau, rtol=1e-12)
    np.testing.assert_allclose(shown["scale"], scale, rtol=1e-12)
    np.testing.assert_allclose(shown["scores"], scores, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(shown["scaled"], scores / scale, rtol=1e-12, atol=1e-12)
    assert [[x is None for x in row] for row in shown["masked"]] == mask.tolist()
    np.testing.assert_allclose(shown["weights"], weights, rtol=1e-9, atol=1e-15)
    return weights


def canvas_pixels(driver, step):
    selector = f'[data-part="pipe-steps"] [data-step="{step}"] canvas'
    return driver.execute_script(f"return document.querySelector('{selector}').toDataURL()")


def test_pipeline_recomputes_scores_mask_and_softmax_from_q_and_k(chromium, tmp_path, traces):
    trace = traces["transformer"]
    hyp = trace["hypotheses"][0]
    driver = open_page(chromium, tmp_path, trace, "pipe")
    driver.find_element(*part("tab-pipe")).click()
    layer, head = 1, 1
    choose(driver, "pipe-kind", "dec")
    choose(driver, "pipe-layer", layer)
    choose(driver, "pipe-head", head)
    own = hyp["internals"]["decoder"]
    q, k = own["q"][layer][head], own["k"][layer][head]
    weights = check_transformer(shown_pipeline(driver), q, k, True, True, 1.0)
    # τ = 1 with √d_k is the model's own softmax, to the trace's rounding
    np.testing.assert_allclose(weights, hyp["decoder_self_attention"][layer][head], atol=2e-4)
    hatched = driver.find_elements("css selector", '[data-part="pipe-steps"] figure')
    assert len(hatched) == 4
    before = canvas_pixels(driver, "weights")

    driver.find_element(*part("pipe-unscaled")).click()  # without √d_k
    unscaled = check_transformer(shown_pipeline(driver), q, k, True, False, 1.0)
    move_temperature(driver, -0.5)
    colder = check_transformer(shown_pipeline(driver), q, k, True, False, 10**-0.5)
    assert canvas_pixels(driver, "weights") != before
    # the softmax saturates: each step leaves the largest weights larger
    assert weights.max(-1).mean() < unscaled.max(-1).mean() < colder.max(-1).mean()
    assert "0.32" in driver.find_element(*part("pipe-tau")).text
    screenshot(driver, "transformer-pipeline")

    choose(driver, "pipe-kind", "cross")  # cross-attention: nothing masked
    driver.find_element(*part("pipe-unscaled")).click()
    move_temperature(driver, 0)
    shown = shown_pipeline(driver)
    assert shown["kind"] == "cross" and shown["layer"] == layer and shown["head"] == head
    q, k = (
        hyp["internals"]["cross"]["q"][layer][head],
        trace["internals"]["cross"]["k"][layer][head],
    )
    weights = check_transformer(shown, q, k, False, True, 1.0)
    model = [step[layer][head] for step in hyp["cross_attention"]]
    np.testing.assert_allclose(weights, model, atol=2e-4)
    assert_no_console_errors(driver)


def test_rnn_pipeline_is_the_models_scores_and_their_softmax(chromium, tmp_path, traces):
    trace = traces["rnn"]
    hyp = trace["hypotheses"][0]
    driver = open_page(chromium, tmp_path, trace, "pipe-rnn")
    driver.find_element(*part("tab-pipe")).click()
    assert not driver.find_element(*part("pipe-unscaled-label")).is_displayed()
    shown = shown_pipeline(driver)
    assert shown["steps"] == ["scores", "weights"]
    scores = np.asarray(hyp["rnn"]["scores"], np.float64)
    np.testing.assert_allclose(shown["scores"], scores, rtol=0, atol=0)
    np.testing.assert_allclose(shown["weights"], softmax_rows(scores), rtol=1e-9)
    model = np.asarray(hyp["cross_attention"])[:, 0, 0]
    np.testing.assert_allclose(shown["weights"], model, atol=2e-4)
    move_temperature(driver, 0.7)
    shown = shown_pipeline(driver)
    np.testing.assert_allclose(shown["tau"], 10**0.7, rtol=1e-12)
    warmer = softmax_rows(scores / 10**0.7)
    np.testing.assert_allclose(shown["weights"], warmer, rtol=1e-9)
    assert warmer.max(-1).mean() < np.asarray(model).max(-1).mean()  # the weights even out
    screenshot(driver, "rnn-pipeline")
    assert_no_console_errors(driver)


def test_pipeline_without_internals_says_how_to_get_them(chromium, tmp_path):
    driver = open_page(chromium, tmp_path, synthetic_trace(), "pipe-none")
    driver.find_element(*part("tab-pipe")).click()
    note = driver.find_element(*part("pipe-note"))
    assert note.is_displayed() and "internals=True" in note.text
    assert not driver.find_element(*part("pipe-steps")).is_displayed()
    assert_no_console_errors(driver)


# ---- the model view ----------------------------------------------------------------------------

MATRIX_PIXELS = "return document.querySelector('[data-part=matrix-canvas]').toDataURL()"


def test_model_view_thumbnails_open_their_layer_and_head(chromium, tmp_path):
    trace = synthetic_trace(src_len=8, tgt_len=7, layers=(3, 2), heads=4)
    driver = open_page(chromium, tmp_path, trace, "model")
    before = driver.execute_script(MATRIX_PIXELS)  # the last layer, average of heads
    driver.find_element(*part("tab-model")).click()
    thumbs = driver.find_elements("css selector", "[data-part=model-grids] button.thumb")
    assert len(thumbs) == (3 + 2 + 2) * 4
    colours = driver.execute_script(
        """return Array.from(arguments[0], (b) => {
            const c = b.querySelector("canvas"), d = c.getContext("2d")
                .getImageData(0, 0, c.width, c.height).data, seen = new Set();
            for (let i = 0; i < d.length; i += 16) seen.add(d[i] + "," + d[i + 1] + "," + d[i + 2]);
            return seen.size;
        });""",
        thumbs,
    )
    assert min(colours) >= 3, colours
    screenshot(driver, "transformer-model-view")
    thumb = '[data-part=model-grids] button.thumb[data-kind="{}"][data-layer="{}"][data-head="{}"]'
    driver.find_element("css selector", thumb.format("cross", 0, 2)).click()
    assert driver.find_element(*part("panel-matrix")).is_displayed()
    values = [
        driver.find_element(*part(n)).get_attribute("value")
        for n in ("matrix-layer", "matrix-head")
    ]
    assert values == ["0", "2"]
    assert driver.execute_script(MATRIX_PIXELS) != before
    assert driver.find_element(*part("hv-kind")).get_attribute("value") == "cross"
    assert driver.find_element(*part("hv-layer")).get_attribute("value") == "0"
    driver.find_element(*part("tab-heads")).click()
    drawn = driver.find_elements("css selector", "[data-part=head-view] g.head-lines")
    assert [g.get_attribute("data-head") for g in drawn] == ["2"]

    driver.find_element(*part("tab-model")).click()
    driver.find_element("css selector", thumb.format("enc", 2, 1)).click()
    assert driver.find_element(*part("panel-enc")).is_displayed()
    assert driver.find_element(*part("enc-layer")).get_attribute("value") == "2"
    assert driver.find_element(*part("enc-head")).get_attribute("value") == "1"
    assert driver.find_element(*part("hv-kind")).get_attribute("value") == "enc"
    assert_no_console_errors(driver)


def hover_matrix_row(driver, row: int) -> None:
    """Move the mouse over the first cell of the alignment matrix's row `row`."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = driver.find_element(*part("matrix-canvas"))
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    left, top, cell, w, h = driver.execute_script(
        "const c = arguments[0], g = c._grid;"
        "return [g.left, g.top, g.cell, c.clientWidth, c.clientHeight];",
        canvas,
    )
    x, y = left + cell / 2 - w / 2, top + row * cell + cell / 2 - h / 2
    ActionChains(driver).move_to_element_with_offset(canvas, int(x), int(y)).perform()


def test_hovering_a_matrix_row_picks_that_step_in_the_replay_and_head_view(chromium, tmp_path):
    trace = synthetic_trace(src_len=9, tgt_len=8, heads=4)
    hyp = trace["hypotheses"][0]
    driver = open_page(chromium, tmp_path, trace, "link")
    row = 3
    hover_matrix_row(driver, row)
    show = "window.heedfulViewer.showTab(arguments[0])"  # no mouse path across the matrix
    driver.execute_script(show, "replay")
    assert driver.find_element(*part("current-step")).text.startswith(f"Step {row + 1} of 8")
    current = driver.find_element("css selector", "[data-part=replay-output] .tok.current")
    assert current.text == hyp["tokens"][row]
    driver.execute_script(show, "heads")
    focused = driver.find_elements("css selector", "[data-part=head-view] text.focus")
    assert [(t.get_attribute("data-side"), t.get_attribute("data-index")) for t in focused] == [
        ("right", str(row))
    ]
    layer = len(hyp["cross_attention"][0]) - 1  # the head view opens on the last layer
    weights = np.asarray(hyp["cross_attention"][row][layer])  # (heads, S)
    lines = int(driver.find_element(*part("head-view")).get_attribute("data-line-count"))
    assert lines == int((weights >= 0.02).sum())
    assert_no_console_errors(driver)


def test_rnn_without_attention_says_so_in_both_views(chromium, tmp_path):
    trace = synthetic_trace(arch="rnn", attention="none", src_len=6, tgt_len=5)
    driver = open_page(chromium, tmp_path, trace, "views-rnn-none")
    for name in ("model", "pipe"):
        driver.find_element(*part(f"tab-{name}")).click()
        note = driver.find_element(*part(f"{name}-note"))
        assert note.is_displayed() and "no attention" in note.text
    assert_no_console_errors(driver)


def test_two_viewers_each_open_their_own_thumbnail(chromium, tmp_path):
    first = synthetic_trace(src_len=6, tgt_len=5, seed=1)
    second = synthetic_trace(src_len=9, tgt_len=7, heads=2, seed=2)
    roots = open_viewers(chromium, tmp_path, [first, second], "model")
    counts = [len(r.find_elements("css selector", "button.thumb")) for r in roots]
    assert counts == [(2 + 2 + 2) * 4, (2 + 2 + 2) * 2]
    roots[0].find_element("css selector", 'button.thumb[data-kind="dec"][data-layer="0"]').click()
    assert roots[0].find_element("css selector", '[data-part="panel-dec"]').is_displayed()
    assert roots[1].find_element("css selector", '[data-part="panel-model"]').is_displayed()
    layers = [r.find_element("css selector", '[data-part="dec-layer"]') for r in roots]
    assert [s.get_attribute("value") for s in layers] == [
        "0",
        "1",
    ]  # the second: its default, the last
    assert not roots[1].find_element("css selector", '[data-part="panel-dec"]').is_displayed()
    assert_no_console_errors(chromium)
