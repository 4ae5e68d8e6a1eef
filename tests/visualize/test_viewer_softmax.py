"""Scores → softmax at any temperature (issue 28, item 6): each row of weights is one
distribution, drawn on its own scale (÷ its max) with its max and entropy beside it, so that at
τ = 10 a row that evened out reads as even, not as "nothing" (on the fixed 0..1 scale every
cell was the same faint colour). In headless Chromium."""

from __future__ import annotations

import numpy as np

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
