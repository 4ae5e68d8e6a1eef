"""A click on a cell explains that cell (issue 28, item 2), in headless Chromium.

On the default matrix, the mean of the heads, a cell is no one head's weight: the panel first
lists each head's weight of the clicked key, whose mean is the cell, each with a button that
opens that head's calculation; the clicked key is marked in the calculation, and the title
names the layer, head, query and key.
"""

from __future__ import annotations

import numpy as np

from .test_html import assert_no_console_errors, chromium, open_page, part
from .test_viewer_calc import click_cell, traces

__all__ = ["chromium", "traces"]  # fixtures: the browser, traces of the golden models

BREAKDOWN = """
return Array.from(document.querySelectorAll('[data-part="calc-breakdown"] tr[data-head]'),
    (row) => +row.querySelector('[data-col="weight"]').dataset.value);
"""
CLICKED = """
const row = document.querySelector('[data-part="calc-body"] tr.clicked');
return row ? +row.dataset.key : null;
"""


def test_a_click_on_a_mean_of_heads_shows_each_heads_weight(chromium, tmp_path, traces):
    trace = traces["transformer"]
    driver = open_page(chromium, tmp_path, trace, "click")
    layer = int(driver.find_element(*part("matrix-layer")).get_attribute("value"))
    assert driver.find_element(*part("matrix-head")).get_attribute("value") == "avg"
    i, j = 3, 2
    click_cell(driver, "matrix", i, j)
    shown = np.asarray(driver.execute_script(BREAKDOWN), dtype=np.float64)
    heads = np.asarray(trace["hypotheses"][0]["cross_attention"][i][layer], dtype=np.float64)
    np.testing.assert_allclose(shown, heads[:, j], rtol=0, atol=1e-12)  # each head's weight
    np.testing.assert_allclose(shown.mean(), heads.mean(0)[j], atol=1e-12)  # the cell shown
    assert driver.execute_script(CLICKED) == j
    title = driver.find_element(*part("calc-title")).text
    assert f"layer {layer + 1}, head 1" in title and f"query {i + 1}" in title
    assert f"key {j + 1}" in title, title

    second = '[data-part="calc-breakdown"] tr[data-head="1"] button'
    driver.find_element("css selector", second).click()
    title = driver.find_element(*part("calc-title")).text
    assert "head 2" in title and f"key {j + 1}" in title, title
    assert driver.execute_script(CLICKED) == j
    assert driver.find_elements("css selector", '[data-part="calc-breakdown"]') == []
    assert_no_console_errors(driver)


COLUMN = """
return Array.from(document.querySelectorAll('[data-part="calc-body"] tr[data-key]'),
    (row) => +row.querySelector('[data-col="' + arguments[0] + '"]').dataset.value);
"""
PAGE_WIDTH = "return [document.documentElement.scrollWidth, window.innerWidth];"


def test_the_calculation_shows_the_cosine_and_fits_the_page(chromium, tmp_path, traces):
    """q·k_j = |q| |k_j| cos θ, the article's cosine similarity tied to the real score (float64
    from the trace's q and k); and the panel's tables scroll inside it in a 1280-pixel window,
    never widening the page."""
    trace = traces["transformer"]
    driver = open_page(chromium, tmp_path, trace, "cosine")
    driver.set_window_size(1280, 900)
    layer = int(driver.find_element(*part("matrix-layer")).get_attribute("value"))
    i = 2
    click_cell(driver, "matrix", i, 0)
    q = np.asarray(trace["hypotheses"][0]["internals"]["cross"]["q"][layer][0][i], np.float64)
    k = np.asarray(trace["internals"]["cross"]["k"][layer][0], np.float64)  # (S, d_k)
    norms = np.linalg.norm(k, axis=1)
    cosine = k @ q / (norms * np.linalg.norm(q))
    np.testing.assert_allclose(driver.execute_script(COLUMN, "norm"), norms, rtol=1e-12)
    np.testing.assert_allclose(driver.execute_script(COLUMN, "cos"), cosine, atol=1e-12)
    width, window = driver.execute_script(PAGE_WIDTH)
    assert width <= window, (width, window)
    assert_no_console_errors(driver)


def test_an_rnn_steps_candidates_are_chips_with_the_probability_beside(chromium, tmp_path, traces):
    """The chip holds the token alone (its spaces shown as ␣); the probability stands beside it,
    never inside the chip as "f␣0.900" (issue 28, item 7)."""
    trace = traces["rnn"]
    driver = open_page(chromium, tmp_path, trace, "candidates")
    driver.execute_script("window.heedfulViewer.openCalc('cross', 0, 0, 1)")
    chips = driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-part=\"calc-body\"] .candidate .tok'),"
        " (t) => t.title);"
    )
    assert chips == [c["token"] for c in trace["hypotheses"][0]["top_k"][1]]
    assert_no_console_errors(driver)


def test_a_beam_holding_unk_says_so(chromium, tmp_path):
    """decode leaves <unk> out of a hypothesis's text; the beam list says it is there."""
    from .test_html import synthetic_trace

    trace = synthetic_trace(num_hyps=2)
    trace["hypotheses"][1]["tokens"][1] = "<unk>"
    driver = open_page(chromium, tmp_path, trace, "unk")
    beams = driver.find_element(*part("beam-list")).text
    assert beams.count("× <unk> left out") == 1 and "1 × <unk> left out" in beams, beams
    assert_no_console_errors(driver)
